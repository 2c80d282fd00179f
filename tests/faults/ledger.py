"""Ledger clients for crash tests: a streaming confirm publisher and a manual-ack consumer, each
in its own thread with its own connection, each writing down what the broker promised it.

Ids are in the message bodies (b"P000000123...", b"M000000007..."), so what comes back after a
crash is matched against the ledgers, whatever the broker did with tags and properties.

What counts as a promise:
- confirmed: the publisher read a basic.ack covering the message (multiple=true covers every
  outstanding tag up to delivery_tag). A basic.nack is no promise either way.
- acked (sure): the consumer sent basic.ack for the message AND a later round trip on the same
  channel completed: a persistent publish to the same queue in confirm mode. The channel sends the
  queue the settle before the publish, the queue hands the backing queue the ack record before the
  publish record, and the sync that lets the publish be confirmed covers both. An ack that was only
  sent may legitimately be lost in a crash (the message then comes back, redelivered), and so may
  one whose round trip saw a basic.cancel first (the queue process died in between: the marker was
  confirmed by the restarted queue, the ack went to the dead one).
- delivered: the consumer saw a delivery of the message; if it comes back after a crash it must be
  marked redelivered=true (A4: it may have been delivered).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pika
from pamqp import commands

import rawamqp

PUB_PREFIX = b"P"
MARK_PREFIX = b"M"
ID_LEN = 10  # prefix + 9 digits


def body_for(prefix: bytes, n: int, size: int) -> bytes:
    head = prefix + b"%09d" % n
    return head + b"." * max(0, size - len(head))


def body_id(body: bytes) -> bytes:
    return bytes(body[:ID_LEN])


class StreamingPublisher(threading.Thread):
    """Publishes persistent messages to `queue` over a raw AMQP connection in confirm mode without
    waiting: up to `window` unconfirmed. Message n (from 1) is publish tag n."""

    def __init__(self, host: str, port: int, queue: str, window: int = 300, chunk: int = 20,
                 sizes=(200,), pace_s: float = 0.0):
        super().__init__(daemon=True, name="ledger-publisher")
        self.host, self.port, self.queue = host, port, queue
        self.window, self.chunk, self.sizes, self.pace_s = window, chunk, sizes, pace_s
        self.stop_event = threading.Event()   # stop publishing, then wait for the answers
        self.drain_timeout = 5.0              # how long to wait for the answers after stop
        self.sent = 0                         # highest tag published
        self.pending: set[int] = set()        # published, not answered
        self.confirmed: set[bytes] = set()    # ids the broker confirmed with basic.ack
        self.nacked: set[bytes] = set()       # ids answered with basic.nack
        self.violations: list[str] = []       # protocol promises broken (C1)
        self.closed_by: str = ""              # how the connection ended, "" if it did not
        self.ready = threading.Event()        # connected, queue declared, confirm mode on
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except (rawamqp.Closed, OSError) as e:
            self.closed_by = f"{type(e).__name__}: {e}"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            self.ready.set()

    def _run(self) -> None:
        c = rawamqp.RawClient(self.host, self.port, timeout=10)
        try:
            c.handshake()
            c.open_channel(1)
            c.rpc(1, commands.Queue.Declare(queue=self.queue, durable=True),
                  commands.Queue.DeclareOk)
            c.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
            self.ready.set()
            props = commands.Basic.Properties(delivery_mode=2)
            publish = rawamqp.method_frame(1, commands.Basic.Publish(routing_key=self.queue))
            drain_deadline = None
            while True:
                stopping = self.stop_event.is_set()
                if stopping:
                    if drain_deadline is None:
                        drain_deadline = time.monotonic() + self.drain_timeout
                    if not self.pending or time.monotonic() > drain_deadline:
                        return
                elif len(self.pending) < self.window:
                    frames = []
                    for _ in range(self.chunk):
                        n = self.sent + 1
                        size = self.sizes[n % len(self.sizes)]
                        frames.append(publish + rawamqp.content_frames(
                            1, body_for(PUB_PREFIX, n, size), props, c.frame_max))
                        self.sent = n
                        self.pending.add(n)
                    c.send(b"".join(frames))
                    if self.pace_s:
                        time.sleep(self.pace_s)
                try:
                    _, f = c.read_frame(timeout=0.002 if not stopping else 0.05)
                except rawamqp.Timeout:
                    continue
                if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack)):
                    self._settle(f.delivery_tag, f.multiple, isinstance(f, commands.Basic.Ack))
                elif isinstance(f, (commands.Channel.Close, commands.Connection.Close)):
                    self.closed_by = repr(f)
                    return
        finally:
            c.close()

    def _settle(self, tag: int, multiple: bool, ok: bool) -> None:
        if multiple:
            done = [t for t in self.pending if t <= tag]
        elif tag in self.pending:
            done = [tag]
        else:
            self.violations.append(f"confirm for tag {tag} that is not outstanding")
            return
        for t in done:
            self.pending.discard(t)
            (self.confirmed if ok else self.nacked).add(PUB_PREFIX + b"%09d" % t)


@dataclass
class _Delivery:
    tag: int
    ident: bytes
    redelivered: bool


class LedgerConsumer(threading.Thread):
    """Consumes `queue` with manual acks on a pika channel in confirm mode; every `ack_every_s`
    it acks what it holds (multiple=true) and then publishes a persistent marker to the same
    queue on the same channel, waiting for its confirm: only then are the acked ids `acked`."""

    def __init__(self, params: pika.ConnectionParameters, queue: str, prefetch: int = 300,
                 ack_every_s: float = 0.05):
        super().__init__(daemon=True, name="ledger-consumer")
        self.params, self.queue, self.prefetch, self.ack_every_s = params, queue, prefetch, \
            ack_every_s
        self.stop_event = threading.Event()
        self.delivered: set[bytes] = set()     # ids seen in a delivery
        self.ack_sent: set[bytes] = set()      # ids whose basic.ack was sent
        self.acked: set[bytes] = set()         # ids acked and round-tripped (see module doc)
        self.confirmed_markers: set[bytes] = set()  # markers this consumer got confirmed
        self.violations: list[str] = []        # a delivery of an id already acked
        self.cancelled = False                 # the broker cancelled the consumer
        self.open_after_cancel = None          # the channel was still open after the cancel
        self.closed_by: str = ""
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._held: list[_Delivery] = []
        self._markers = 0

    def run(self) -> None:
        try:
            self._run()
        except (pika.exceptions.AMQPError, OSError) as e:
            self.closed_by = f"{type(e).__name__}: {e}"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            self.ready.set()

    def _on_message(self, ch, method, props, body) -> None:
        ident = body_id(body)
        if ident in self.acked:
            self.violations.append(f"{ident!r} delivered again after its ack was confirmed")
        self.delivered.add(ident)
        self._held.append(_Delivery(method.delivery_tag, ident, method.redelivered))

    def _on_cancel(self, frame) -> None:
        self.cancelled = True

    def _run(self) -> None:
        conn = pika.BlockingConnection(self.params)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_qos(prefetch_count=self.prefetch)
            ch.queue_declare(self.queue, durable=True)
            ch.add_on_cancel_callback(self._on_cancel)
            ch.basic_consume(self.queue, self._on_message, auto_ack=False)
            self.ready.set()
            last = time.monotonic()
            while not self.stop_event.is_set() and not self.cancelled:
                conn.process_data_events(time_limit=0.01)
                if self._held and time.monotonic() - last >= self.ack_every_s:
                    self._ack_round(ch)
                    last = time.monotonic()
            if self.cancelled:
                conn.process_data_events(time_limit=0.2)
                self.open_after_cancel = ch.is_open and conn.is_open
        finally:
            try:
                if conn.is_open:
                    conn.close()
            except Exception:  # noqa: BLE001 - the node may be gone
                pass

    def _ack_round(self, ch) -> None:
        held, self._held = self._held, []
        ids = [d.ident for d in held]
        ch.basic_ack(held[-1].tag, multiple=True)
        self.ack_sent.update(ids)
        self._markers += 1
        marker = body_for(MARK_PREFIX, self._markers, 20)
        try:
            ch.basic_publish("", self.queue, marker, pika.BasicProperties(delivery_mode=2))
        except pika.exceptions.NackError:
            return          # the round trip failed: these acks stay unsure
        self.confirmed_markers.add(body_id(marker))
        # a basic.cancel read before the marker's confirm means the queue process that held
        # these deliveries died (C6): the acks may have gone to it and be lost, and the marker
        # was confirmed by its successor; the round trip proves nothing then
        ch.connection.process_data_events(time_limit=0)
        if not self.cancelled:
            self.acked.update(ids)


@dataclass
class Recovered:
    ids: list = field(default_factory=list)          # ids in delivery order
    redelivered: dict = field(default_factory=dict)  # id -> redelivered flag (last seen)
    duplicates: list = field(default_factory=list)   # ids delivered twice in the drain


def drain(conn: pika.BlockingConnection, queue: str, timeout: float = 60.0) -> Recovered:
    """Every message of `queue` (auto-ack), with its redelivered flag. Asked at once after a
    restart: the node accepts connections only once its durable queues have recovered."""
    ch = conn.channel()
    expected = ch.queue_declare(queue, passive=True).method.message_count
    out = Recovered()

    def on_message(_ch, method, _props, body):
        ident = body_id(body)
        if ident in out.redelivered:
            out.duplicates.append(ident)
        out.ids.append(ident)
        out.redelivered[ident] = method.redelivered

    ch.basic_qos(prefetch_count=1000)
    tag = ch.basic_consume(queue, on_message, auto_ack=True)
    deadline = time.monotonic() + timeout
    while len(out.ids) < expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"drained {len(out.ids)} of {expected} messages of {queue}")
        conn.process_data_events(time_limit=0.05)
    conn.process_data_events(time_limit=0.2)   # nothing more than the declare-ok counted
    ch.basic_cancel(tag)
    assert ch.queue_declare(queue, passive=True).method.message_count == 0
    return out


def check(publisher: StreamingPublisher, consumer: LedgerConsumer, got: Recovered) -> dict:
    """The crash-test verdict: every promise kept. Returns the figures for the report."""
    confirmed = publisher.confirmed | consumer.confirmed_markers
    recovered = set(got.redelivered)
    missing = confirmed - consumer.ack_sent - recovered
    back_after_ack = recovered & consumer.acked
    not_flagged = sorted(i for i in recovered & consumer.delivered if not got.redelivered[i])
    pub_order = [i for i in got.ids if i.startswith(PUB_PREFIX)]
    unknown = [i for i in recovered if i.startswith(PUB_PREFIX)
               and not 1 <= int(i[1:]) <= publisher.sent]
    figures = {"published": publisher.sent, "confirmed": len(publisher.confirmed),
               "nacked": len(publisher.nacked), "delivered": len(consumer.delivered),
               "acked": len(consumer.acked), "ack_sent": len(consumer.ack_sent),
               "recovered": len(recovered)}
    assert publisher.error is None, repr(publisher.error)
    assert consumer.error is None, repr(consumer.error)
    assert not publisher.violations, publisher.violations[:5]
    assert not consumer.violations, consumer.violations[:5]
    assert not missing, f"{len(missing)} confirmed, unacked ids lost: {sorted(missing)[:10]} " \
                        f"{figures}"
    assert not back_after_ack, f"{len(back_after_ack)} acked ids came back: " \
                               f"{sorted(back_after_ack)[:10]} {figures}"
    assert not got.duplicates, f"delivered twice in the drain: {got.duplicates[:10]}"
    assert not unknown, f"ids never published: {unknown[:10]}"
    assert not not_flagged, f"{len(not_flagged)} delivered before the crash, back with " \
                            f"redelivered=false: {not_flagged[:10]} {figures}"
    assert pub_order == sorted(pub_order), "recovered out of publish order"
    return figures
