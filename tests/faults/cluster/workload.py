"""The clients of a Jepsen-style run and the history they write.

Publishers (confirm mode, persistent messages) and consumers (manual acks) over raw AMQP
sockets (tests/integration/rawamqp.py), each in a thread, each tied to one node as a Jepsen
client is: when its connection fails or stops answering it connects to the same node again.
Every message carries a unique id in its body (12 digits). Everything they see goes into a
`History`, which checker.py judges.

- A publisher keeps up to `window` publishes unanswered at `rate` a second. basic.ack ->
  confirmed, basic.nack -> nacked; a publish still unanswered when the connection fails or
  no confirm has come for `confirm_timeout` s is unknown (Jepsen's :info), and the publisher
  starts a new connection.
- A consumer consumes with prefetch and acks each delivery as it reads it, at `rate` a second
  (slower than the publishers: the queue keeps a backlog). Each consume answered by consume-ok
  is a session; the master it consumes from is what its node's `list_queues` names right then
  (a session stays on the master it was registered with until its basic.cancel). On
  basic.cancel, a channel or connection close, it consumes again on a new connection.
- `probe` (is the cluster settled?): on one node, a new connection publishes one message with
  confirms and consumes (consume-ok), each answered within `timeout`.
- `drain`: a consumer on every node until every node counts the queue empty, each drainer
  reading (its session recorded) and none delivered anything for `quiet` s, and still empty
  once the drainers have left (what they held unacked is back in the queue by then).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

from pamqp import commands

import rawamqp
from tests.faults.cluster.checker import CONFIRMED, NACKED, UNKNOWN, Delivery, Session

ID_DIGITS = 12
PROBE_BASE = 900 * 10**9   # ids of the settle probes' messages


def body_for(ident: int, size: int) -> bytes:
    head = b"%012d" % ident
    return head + b"." * max(0, size - len(head))


def ident_of(body: bytes) -> int:
    return int(body[:ID_DIGITS])


def message_id(queue: str, ident: int) -> str:
    """The publisher's message_id property of a message: how the lifecycle job's rows name it
    (unique across the runs that share a cluster, each with a queue of its own)."""
    return f"{queue}/{ident}"


def ident_of_message_id(queue: str, mid: str | None) -> int | None:
    """The id of a message of `queue`'s run from its message_id, None for another run's."""
    prefix, sep, n = (mid or "").rpartition("/")
    return int(n) if sep and prefix == queue and n.isdigit() else None


def properties(queue: str, ident: int) -> commands.Basic.Properties:
    return commands.Basic.Properties(delivery_mode=2, message_id=message_id(queue, ident))


@dataclass(frozen=True)
class Node:
    name: str
    host: str
    port: int


class History:
    """What every client saw, on one monotonic clock (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.published: dict = {}     # id -> CONFIRMED | NACKED | UNKNOWN
        self.attempted_ns: dict = {}  # id -> wall clock (ns) of its first publish attempt
        self.sessions: list = []      # [Session]
        self.deliveries: list = []    # [Delivery]
        self.notes: list = []         # (t, text): the nemesis' and the clients' events
        self._sid = itertools.count(1)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append((self.now(), text))

    def attempt(self, ident: int) -> None:
        with self.lock:
            self.published[ident] = UNKNOWN
            self.attempted_ns.setdefault(ident, time.time_ns())

    def settle(self, ident: int, outcome: str) -> None:
        with self.lock:
            if self.published.get(ident) != CONFIRMED:
                self.published[ident] = outcome

    def session(self, via: str, master: str | None) -> int:
        with self.lock:
            sid = next(self._sid)
            self.sessions.append(Session(sid, via, master))
            return sid

    def deliver(self, ident: int, sid: int, redelivered: bool) -> float:
        with self.lock:
            t = self.now()
            self.deliveries.append(Delivery(ident, sid, t, redelivered))
            return t

    def notes_text(self, last: int = 80) -> str:
        with self.lock:
            return "\n".join("%7.2f %s" % n for n in self.notes[-last:])


def _connect(node: Node, timeout: float) -> rawamqp.RawClient:
    c = rawamqp.RawClient(node.host, node.port, timeout=timeout)
    try:
        c.handshake()
        c.open_channel(1)
    except BaseException:
        c.close()
        raise
    return c


_ERRORS = (rawamqp.Closed, rawamqp.Timeout, OSError, AssertionError)


class Publisher(threading.Thread):
    def __init__(self, history: History, node: Node, queue: str, index: int, rate: float = 25,
                 window: int = 50, size: int = 64, confirm_timeout: float = 5.0):
        super().__init__(daemon=True, name=f"jepsen-pub-{index}")
        self.h, self.node, self.queue, self.index = history, node, queue, index
        self.rate, self.window, self.size = rate, window, size
        self.confirm_timeout = confirm_timeout
        self.seq = 0
        self.stop_event = threading.Event()
        self.reconnects = 0
        self.error: BaseException | None = None

    def next_id(self) -> int:
        self.seq += 1
        return (self.index + 1) * 10**9 + self.seq

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                try:
                    self._session()
                except _ERRORS as e:
                    self.h.note(f"publisher {self.index} on {self.node.name}: {type(e).__name__}"
                                f" {e}")
                self.reconnects += 1
                self.stop_event.wait(0.5)
        except BaseException as e:  # noqa: BLE001 - reported by the runner
            self.error = e

    def _session(self) -> None:
        outstanding: dict = {}  # tag -> id
        c = None
        try:
            c = _connect(self.node, timeout=3)
            c.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk, timeout=3)
            publish = rawamqp.method_frame(1, commands.Basic.Publish(routing_key=self.queue))
            tag = 0
            last_progress = time.monotonic()
            next_at = time.monotonic()
            stop_deadline = None
            while True:
                now = time.monotonic()
                if self.stop_event.is_set():
                    stop_deadline = stop_deadline or now + self.confirm_timeout
                    if not outstanding or now > stop_deadline:
                        return
                elif len(outstanding) < self.window and now >= next_at:
                    ident = self.next_id()
                    tag += 1
                    outstanding[tag] = ident
                    if len(outstanding) == 1:  # the wait for a confirm starts now
                        last_progress = now
                    self.h.attempt(ident)
                    c.send(publish + rawamqp.content_frames(
                        1, body_for(ident, self.size), properties(self.queue, ident),
                        c.frame_max))
                    next_at = max(next_at + 1.0 / self.rate, now - 1.0)
                if outstanding and now - last_progress > self.confirm_timeout:
                    raise rawamqp.Timeout(f"no confirm for {self.confirm_timeout:.0f} s "
                                          f"({len(outstanding)} outstanding)")
                try:
                    _, f = c.read_frame(timeout=min(0.02, max(0.001, next_at - now)))
                except rawamqp.Timeout:
                    continue
                if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack)):
                    done = [t for t in outstanding if t <= f.delivery_tag] if f.multiple \
                        else [f.delivery_tag]
                    outcome = CONFIRMED if isinstance(f, commands.Basic.Ack) else NACKED
                    for t in done:
                        ident = outstanding.pop(t, None)
                        if ident is not None:
                            self.h.settle(ident, outcome)
                    last_progress = time.monotonic()
                elif isinstance(f, (commands.Channel.Close, commands.Connection.Close)):
                    raise rawamqp.Closed(f"{type(f).__name__} {f.reply_code} {f.reply_text}")
        finally:
            if c is not None:
                c.close()
            # whatever was not answered stays UNKNOWN (the history's default)


class Consumer(threading.Thread):
    def __init__(self, history: History, node: Node, queue: str, index: int, master_of,
                 rate: float | None = 20, prefetch: int = 5, consume_timeout: float = 5.0):
        super().__init__(daemon=True, name=f"jepsen-con-{index}")
        self.h, self.node, self.queue, self.index = history, node, queue, index
        self.master_of = master_of  # () -> the master as this consumer's node sees it
        self.rate, self.prefetch, self.consume_timeout = rate, prefetch, consume_timeout
        self.stop_event = threading.Event()
        self.sessions = 0
        self.cancels = 0
        self.last_delivery = time.monotonic()
        # in a session that reads what comes: not while it connects, consumes and records its
        # master (`master_of` runs leveretctl: seconds under load), when the queue may have
        # delivered it `prefetch` messages already, unacked, which no message_count shows
        self.reading = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                try:
                    self._session()
                except _ERRORS as e:
                    self.h.note(f"consumer {self.index} on {self.node.name}: {type(e).__name__}"
                                f" {e}")
                self.stop_event.wait(0.5)
        except BaseException as e:  # noqa: BLE001 - reported by the runner
            self.error = e

    def _session(self) -> None:
        c = _connect(self.node, timeout=3)
        try:
            c.rpc(1, commands.Basic.Qos(prefetch_count=self.prefetch), commands.Basic.QosOk,
                  timeout=self.consume_timeout)
            tag = f"jepsen-{self.index}-{self.sessions}"
            c.rpc(1, commands.Basic.Consume(queue=self.queue, consumer_tag=tag),
                  commands.Basic.ConsumeOk, timeout=self.consume_timeout)
            self.sessions += 1
            sid = self.h.session(self.node.name, self.master_of())
            next_at = self.last_delivery = time.monotonic()  # (a quiet spell starts here)
            self.reading = True
            while not self.stop_event.is_set():
                try:
                    got = c.read_command(timeout=0.2)
                except rawamqp.Timeout:
                    continue
                if isinstance(got, rawamqp.Content):
                    self.h.deliver(ident_of(got.body), sid, got.method.redelivered)
                    self.last_delivery = time.monotonic()
                    c.send_method(1, commands.Basic.Ack(delivery_tag=got.method.delivery_tag))
                    if self.rate:
                        next_at = max(next_at + 1.0 / self.rate, time.monotonic() - 1.0)
                        self.stop_event.wait(max(0.0, next_at - time.monotonic()))
                    continue
                _, f = got
                if isinstance(f, commands.Basic.Cancel):
                    self.cancels += 1
                    self.h.note(f"consumer {self.index} on {self.node.name}: basic.cancel")
                    return
                if isinstance(f, (commands.Channel.Close, commands.Connection.Close)):
                    raise rawamqp.Closed(f"{type(f).__name__} {f.reply_code} {f.reply_text}")
        finally:
            self.reading = False
            c.close()


def probe(h: History, node: Node, queue: str, seq: itertools.count, master_of,
          timeout: float = 3.0) -> str:
    """"" when `node` confirms a publish and answers a consume within `timeout` each, else what
    failed. The probe's message is part of the history; what its consumer gets is acked."""
    try:
        c = _connect(node, timeout=timeout)
    except _ERRORS as e:
        return f"connect: {type(e).__name__} {e}"
    step = "confirm.select"
    try:
        c.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk, timeout=timeout)
        step = "publish confirm"
        ident = PROBE_BASE + next(seq)
        h.attempt(ident)
        c.publish(1, "", queue, body_for(ident, 64), properties(queue, ident))
        deadline = time.monotonic() + timeout
        while True:
            _, f = c.read_command(timeout=max(0.001, deadline - time.monotonic()))
            if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack)):
                break
            if isinstance(f, (commands.Channel.Close, commands.Connection.Close)):
                return f"{step}: {type(f).__name__} {f.reply_code} {f.reply_text}"
        if isinstance(f, commands.Basic.Nack):
            h.settle(ident, NACKED)
            return "publish nacked"
        h.settle(ident, CONFIRMED)
        step = "consume"
        c.rpc(1, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk, timeout=timeout)
        c.send_method(1, commands.Basic.Consume(queue=queue, consumer_tag="probe"))
        sid = None
        deadline = time.monotonic() + timeout
        cancelled = False
        while True:
            got = c.read_command(timeout=max(0.001, deadline - time.monotonic()))
            if isinstance(got, rawamqp.Content):
                if sid is None:  # (consume-ok comes first: never here)
                    sid = h.session(node.name, master_of())
                h.deliver(ident_of(got.body), sid, got.method.redelivered)
                c.send_method(1, commands.Basic.Ack(delivery_tag=got.method.delivery_tag))
                if not cancelled:
                    c.send_method(1, commands.Basic.Cancel(consumer_tag="probe"))
                    cancelled = True
                continue
            _, f = got
            if isinstance(f, commands.Basic.ConsumeOk):
                sid = h.session(node.name, master_of())
                step = "cancel"
                if not cancelled:
                    c.send_method(1, commands.Basic.Cancel(consumer_tag="probe"))
                    cancelled = True
            elif isinstance(f, commands.Basic.CancelOk):
                return ""
            elif isinstance(f, (commands.Channel.Close, commands.Connection.Close)):
                return f"{step}: {type(f).__name__} {f.reply_code} {f.reply_text}"
    except _ERRORS as e:
        return f"{step}: {type(e).__name__} {e}"
    finally:
        c.close()


def queue_counts(node: Node, queue: str, timeout: float = 3.0) -> int | None:
    """queue.declare passive's message count on `node` (None: no answer)."""
    try:
        c = _connect(node, timeout=timeout)
    except _ERRORS:
        return None
    try:
        ok = c.rpc(1, commands.Queue.Declare(queue=queue, durable=True, passive=True),
                   commands.Queue.DeclareOk, timeout=timeout)
        return ok.message_count
    except _ERRORS:
        return None
    finally:
        c.close()


def drain(h: History, nodes: list, queue: str, master_of, timeout: float = 60.0,
          quiet: float = 1.0) -> dict:
    """Consume through every node until each counts the queue empty, every drainer reading and
    none delivered anything for `quiet` s; complete once the queue still counts empty after the
    drainers left (else new drainers, until `timeout`). queue.declare's message_count is the
    ready messages only: what a drainer was delivered and has not read (its session records
    its master first) is not in it. Returns {"complete": bool, "counts": {node: last count},
    "seconds": float}."""
    t0 = time.monotonic()
    counts: dict = {}
    complete = False
    while not complete and time.monotonic() - t0 < timeout:
        drainers = [Consumer(h, n, queue, 100 + i, lambda i=i: master_of(i), rate=None,
                             prefetch=200) for i, n in enumerate(nodes)]
        for d in drainers:
            d.start()
        emptied = False
        try:
            while time.monotonic() - t0 < timeout:
                time.sleep(0.2)
                if not all(d.reading for d in drainers) or \
                        time.monotonic() - max(d.last_delivery for d in drainers) < quiet:
                    continue
                counts = {n.name: queue_counts(n, queue) for n in nodes}
                if all(v == 0 for v in counts.values()):
                    emptied = True
                    break
        finally:
            for d in drainers:
                d.stop_event.set()
            for d in drainers:
                d.join(10)
        if emptied:
            time.sleep(0.2)  # (the drainers' connections closed: the broker requeues)
            counts = {n.name: queue_counts(n, queue) for n in nodes}
            complete = all(v == 0 for v in counts.values())
    return {"complete": complete, "counts": counts, "seconds": time.monotonic() - t0}
