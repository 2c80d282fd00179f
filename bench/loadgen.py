"""The load generator's worker processes: producer and consumer connections on the lean client.

A worker process (started with multiprocessing's *spawn* context) runs one or more connections
("roles") in one select loop.  The coordinator (bench/scenario_run.py) talks to it over a Pipe:

    worker -> ("ready", info)        every connection is set up (channels, qos, confirm, consume)
    coord  -> ("go", t_start, t_measure, t_end)      absolute time.monotonic() instants
    worker -> ("result", [role results])  or ("error", text) at any point

Both sides read the same CLOCK_MONOTONIC, so the warm-up / measurement boundaries are the
same instants in every process.  Each role snapshots its counters (and the process's CPU time)
when the loop crosses t_measure and t_end; rates are (count@end - count@measure) / (time
between the two snapshots).

Producer (per channel): publishes to the default exchange with routing key = queue (or to
spec["exchange"] with spec["routing_key"] when the spec has them).  Messages
are pre-encoded once with the codec's encode_publish; a batch of n messages is one buffer,
stamped with the send time (monotonic ns, the first 8 body bytes) and handed to the socket in
one send.  Without confirms it publishes as fast as the socket accepts (at most HIGH_WATER
bytes queued in user space).  With confirms it keeps at most `confirm` unconfirmed messages in
flight per channel (PerfTest's --confirm N) and records, for each confirmed message, the time
from handing it to the socket to reading its basic.ack (multiple acks confirm every message up
to the tag).  The published count is bytes actually written / bytes per message.

Paced producer (spec["rate"], PerfTest's --rate): each channel publishes at `rate` msg/s on a
fixed schedule (`Pacer`): slot k falls at origin + k / rate, with the origin offset by
spec["phase"] (0..1) of one interval so that many paced producers do not publish in lock-step.
Whatever is due (within PACE_SLACK) goes out in one write; a producer held back (TCP, window,
connection.blocked) catches up by at most MAX_LAG seconds of its rate, the slots beyond are
skipped and counted, so the rate stays the one asked for instead of bursting.

Consumer (per channel): basic.qos prefetch, basic.consume; every socket read is decoded
entirely, and the acks for all the deliveries in it (one basic.ack per message by default, as
PerfTest does; multiple=true every N with ack_every) go out in one send.  With
spec["start_delay"] (PerfTest's --consumer-start-delay) basic.consume is sent that many seconds
after the start instant instead of during setup, and the consumer notes when it first receives
a message published after it joined: every message published before was delivered by then
(one consumer per queue, FIFO), so that instant ends the backlog's drain.

The loop touches only the roles that have something to do: free-running producers every turn,
paced producers when their next slot is due (a heap), late consumers at their instant, and the
roles whose sockets select reports; a role's write interest changes only after it acted.

Other roles: a spec with "role": "module:Class" (e.g. bench/paper.py's resending producer) is
run by that class, a subclass of Producer or Consumer, imported in the worker process.
"""
from __future__ import annotations

import collections
import heapq
import importlib
import math
import os
import selectors
import struct
import time
import traceback
from array import array

from amqpclient import codec as codec_mod
from amqpclient.lean_connection import AMQPClosed, LeanConnection
from amqpclient.url import AMQPTarget

HIGH_WATER = 256 * 1024          # bytes of pending output before a producer stops adding
BATCH = 64                       # messages per producer write
MARKER = b"LVRTBNCH"             # placeholder for the timestamp at the start of each body
PACE_SLACK_NS = 1_000_000        # a paced slot due within 1 ms goes out with this write
PACE_RETRY_NS = 5_000_000        # a paced producer held back looks again after 5 ms
MAX_LAG = 1.0                    # s of a paced producer's rate it may catch up after a stall
IDLE_TIMEOUT = 0.05              # s the loop sleeps in select when nothing is scheduled
_TS = struct.Struct(">q")


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def make_body(size: int) -> bytes:
    return MARKER + bytes((i % 251) + 1 for i in range(size - len(MARKER)))


class Role:
    kind = "?"

    def __init__(self, conn: LeanConnection, spec: dict):
        self.conn = conn
        self.spec = spec
        self.snapshots: list[dict] = []
        self.measuring = False
        # read after each recv: the instant a read's commands arrived (the now_ns that on_read
        # is given is taken before the recv, and a process descheduled in between would date
        # deliveries before they were even published)
        self.clock = time.monotonic_ns

    def counters(self) -> dict:
        raise NotImplementedError

    def snapshot(self, label: str, now: float) -> None:
        d = self.counters()
        d["label"] = label
        d["t"] = now
        self.snapshots.append(d)

    def fill(self, now_ns: int) -> bool:
        return False

    def on_read(self, now_ns: int) -> None:
        raise NotImplementedError

    def result(self) -> dict:
        return {"kind": self.kind, "spec": self.spec, "snapshots": self.snapshots,
                "blocked_events": self.conn.blocked_events}


class Pacer:
    """The publishing schedule of one channel at `rate` msg/s: slot k (0, 1, ...) falls at
    origin_ns + k / rate.  `due(now)` is how many slots up to `now` are not taken yet; when
    that is more than `max_lag` seconds of the rate the oldest are skipped (counted in
    `skipped`), as a rate limiter that does not store unused permits."""

    __slots__ = ("rate", "origin_ns", "taken", "skipped", "max_behind")

    def __init__(self, rate: float, origin_ns: int, max_lag: float = MAX_LAG):
        if not rate > 0:
            raise ValueError("rate must be > 0")
        self.rate = rate                   # msg/s
        self.origin_ns = origin_ns         # instant of slot 0
        self.taken = 0                     # slots published (or skipped) so far
        self.skipped = 0                   # slots given up after a stall longer than max_lag
        self.max_behind = max(1, int(rate * max_lag))   # slots that may be owed at once

    def due(self, now_ns: int) -> int:
        if now_ns < self.origin_ns:
            return 0
        slots = math.floor((now_ns - self.origin_ns) * self.rate / 1e9) + 1
        owed = slots - self.taken
        if owed > self.max_behind:
            self.skipped += owed - self.max_behind
            self.taken += owed - self.max_behind
            owed = self.max_behind
        return max(0, owed)

    def take(self, n: int) -> None:
        self.taken += n

    def next_ns(self) -> int:
        """The instant of the first slot not taken yet."""
        return self.origin_ns + math.ceil(self.taken * 1e9 / self.rate)


class _Unconfirmed:
    """Unconfirmed messages of one channel, as runs [first_seq, last_seq, send_ns] in order."""

    __slots__ = ("runs", "outstanding", "done_out_of_order")

    def __init__(self):
        self.runs = collections.deque()
        self.outstanding = 0
        self.done_out_of_order: set[int] = set()

    def add(self, first: int, n: int, t_ns: int) -> None:
        self.runs.append([first, first + n - 1, t_ns])
        self.outstanding += n

    def confirm(self, tag: int, multiple: bool, now_ns: int, samples) -> int:
        """Settle `tag` (and, if multiple, everything before it); append each settled message's
        latency (ns) to `samples` unless it is None; returns the number settled."""
        runs = self.runs
        settled = 0
        if multiple:
            while runs and runs[0][0] <= tag:
                run = runs[0]
                last = min(run[1], tag)
                n = last - run[0] + 1
                done = self.done_out_of_order
                if done:
                    skip = sum(1 for s in range(run[0], last + 1) if s in done)
                    for s in range(run[0], last + 1):
                        done.discard(s)
                    n -= skip
                settled += n
                if samples is not None and n:
                    samples.extend([now_ns - run[2]] * n)
                if last == run[1]:
                    runs.popleft()
                else:
                    run[0] = last + 1
        else:
            if runs and runs[0][0] == tag:
                run = runs[0]
                settled = 1
                if samples is not None:
                    samples.append(now_ns - run[2])
                if run[0] == run[1]:
                    runs.popleft()
                else:
                    run[0] += 1
                # messages acked earlier out of order are now at the head: drop them
                done = self.done_out_of_order
                while done and runs and runs[0][0] in done:
                    done.discard(runs[0][0])
                    if runs[0][0] == runs[0][1]:
                        runs.popleft()
                    else:
                        runs[0][0] += 1
            elif tag not in self.done_out_of_order:
                for run in runs:
                    if run[0] <= tag <= run[1]:
                        self.done_out_of_order.add(tag)
                        settled = 1
                        if samples is not None:
                            samples.append(now_ns - run[2])
                        break
        self.outstanding -= settled
        return settled


class Producer(Role):
    kind = "producer"

    def __init__(self, conn, spec, codec):
        super().__init__(conn, spec)
        self.channels: list[int] = spec["channels"]
        self.window: int | None = spec["confirm"]
        exchange = spec.get("exchange", "").encode()
        routing_key = spec.get("routing_key", spec["queue"]).encode()
        priorities = spec.get("priorities") or {}  # channel -> message priority (optional)
        body = make_body(spec["message_size"])
        self.templates: dict[int, bytes] = {}
        self.msg_len = None
        ts_off = None
        for ch in self.channels:
            props = codec.properties_raw(2 if spec["persistent"] else None,
                                         priorities.get(ch))
            wire = codec.encode_publish(ch, exchange, routing_key, False, props, body,
                                        conn.frame_max)
            off = wire.find(MARKER)
            if off < 0 or (ts_off is not None and off != ts_off):
                raise RuntimeError("cannot locate the message body in encode_publish's output")
            ts_off = off
            self.templates[ch] = wire
            self.msg_len = len(wire)
        self.ts_off = ts_off
        self.batches: dict[tuple[int, int], tuple[bytearray, list[int]]] = {}
        self.next_seq = {ch: 1 for ch in self.channels}
        self.unconfirmed = {ch: _Unconfirmed() for ch in self.channels}
        self.confirmed = 0
        self.nacked = 0
        self.added = 0
        self.base_bytes = 0
        self.samples = array("q") if self.window else None
        self.rr = 0
        self.M = codec.methods
        self.rate: float | None = spec.get("rate")       # msg/s per channel, None: free-running
        self.phase: float = spec.get("phase", 0.0)       # offset of slot 0, in intervals
        self.pacers: dict[int, Pacer] = {}
        self.wake_ns = 0                                  # paced: when fill has work again

    def start_streaming(self, now_ns: int | None = None):
        self.base_bytes = self.conn.bytes_sent
        if self.rate:
            t0 = time.monotonic_ns() if now_ns is None else now_ns
            origin = t0 + int(self.phase * 1e9 / self.rate)
            self.pacers = {ch: Pacer(self.rate, origin) for ch in self.channels}
            self.wake_ns = origin

    def _batch(self, ch: int, n: int, now_ns: int) -> bytearray:
        key = (ch, n)
        b = self.batches.get(key)
        if b is None:
            buf = bytearray(self.templates[ch] * n)
            offs = [i * self.msg_len + self.ts_off for i in range(n)]
            b = self.batches[key] = (buf, offs)
        buf, offs = b
        ts = _TS.pack(now_ns)
        for o in offs:
            buf[o:o + 8] = ts
        return buf

    def fill(self, now_ns: int) -> bool:
        if self.pacers:
            return self._fill_paced(now_ns)
        conn = self.conn
        if len(conn.out) >= HIGH_WATER or conn.blocked:
            conn.flush()
            return False
        added = False
        chans = self.channels
        nch = len(chans)
        for i in range(nch):
            ch = chans[(self.rr + i) % nch]
            if self.window is not None:
                unc = self.unconfirmed[ch]
                n = min(BATCH, self.window - unc.outstanding)
                if n <= 0:
                    continue
                unc.add(self.next_seq[ch], n, now_ns)
                self.next_seq[ch] += n
            else:
                n = BATCH
            conn.out += self._batch(ch, n, now_ns)
            self.added += n
            added = True
            if len(conn.out) >= HIGH_WATER:
                break
        self.rr += 1
        conn.flush()
        return added and len(conn.out) < HIGH_WATER

    def _fill_paced(self, now_ns: int) -> bool:
        """Publish what the channels' schedules owe up to now (+ PACE_SLACK); set wake_ns to
        the next instant there is something to do. True when more is owed right now."""
        conn = self.conn
        if len(conn.out) >= HIGH_WATER or conn.blocked:
            conn.flush()
            self.wake_ns = now_ns + PACE_RETRY_NS
            return False
        horizon = now_ns + PACE_SLACK_NS
        wake = None
        for ch in self.channels:
            pacer = self.pacers[ch]
            owed = pacer.due(horizon)
            n = min(owed, BATCH)
            if self.window is not None and n:
                unc = self.unconfirmed[ch]
                n = max(0, min(n, self.window - unc.outstanding))
                if n:
                    unc.add(self.next_seq[ch], n, now_ns)
                    self.next_seq[ch] += n
            if n:
                conn.out += self._batch(ch, n, self.clock())   # stamped as it is written
                self.added += n
                pacer.take(n)
            if n < owed:                   # BATCH or the confirm window held some back
                w = now_ns if n == BATCH else now_ns + PACE_RETRY_NS
            else:
                w = pacer.next_ns()
            if wake is None or w < wake:
                wake = w
        conn.flush()
        if len(conn.out) >= HIGH_WATER:
            wake = max(wake, now_ns + PACE_RETRY_NS)
        self.wake_ns = wake
        return wake <= now_ns

    def on_read(self, now_ns: int) -> None:
        M = self.M
        samples = self.samples if self.measuring else None
        cmds = self.conn.recv_commands()
        if not cmds:
            return
        now_ns = self.clock()
        for cmd in cmds:
            m = cmd.method
            t = type(m)
            if t is M.BasicAck:
                self.confirmed += self.unconfirmed[cmd.channel].confirm(
                    m.delivery_tag, m.multiple, now_ns, samples)
            elif t is M.BasicNack:
                self.nacked += self.unconfirmed[cmd.channel].confirm(
                    m.delivery_tag, m.multiple, now_ns, None)
            else:
                self.conn.handle_other(cmd)

    def counters(self) -> dict:
        published = (self.conn.bytes_sent - self.base_bytes) // self.msg_len
        return {"published": published, "confirmed": self.confirmed, "nacked": self.nacked,
                "latency_samples": len(self.samples) if self.samples is not None else 0,
                "skipped": sum(p.skipped for p in self.pacers.values())}

    def result(self) -> dict:
        r = super().result()
        r["confirm_latency_ns"] = self.samples.tobytes() if self.samples is not None else None
        r["msg_wire_bytes"] = self.msg_len
        return r


class Consumer(Role):
    kind = "consumer"

    def __init__(self, conn, spec, codec):
        super().__init__(conn, spec)
        self.channels: list[int] = spec["channels"]
        self.no_ack = spec["no_ack"]
        self.ack_every = spec["ack_every"]
        self.encode_ack = codec.encode_ack
        self.consumed = 0
        self.unacked_count = {ch: 0 for ch in self.channels}
        self.samples = array("q")
        self.M = codec.methods
        self.deliver_cls = codec.methods.BasicDeliver
        self.encode_method = codec.encode_method
        self.start_delay: float = spec.get("start_delay") or 0.0   # s after the start instant
        self.joined_ns: int | None = None        # when basic.consume went out (late consumer)
        self.backlog_done_ns: int | None = None  # first delivery published after joined_ns
        self.backlog: int | None = None          # deliveries before it: the backlog's share

    def start_consuming(self, now_ns: int) -> None:
        """Subscribe now (a consumer with start_delay); basic.consume-ok is read in on_read."""
        M = self.M
        for ch in self.channels:
            self.conn.out += self.encode_method(ch, M.BasicConsume(
                queue=self.spec["queue"], consumer_tag="", no_ack=self.no_ack,
                arguments=self.spec.get("arguments") or {}))
        self.conn.flush()
        self.joined_ns = now_ns

    def on_read(self, now_ns: int) -> None:
        cmds = self.conn.recv_commands()
        if not cmds:
            return
        now_ns = self.clock()
        if self.joined_ns is not None and self.backlog_done_ns is None:
            self._watch_backlog(cmds, now_ns)
        deliver_cls = self.deliver_cls
        acks = []
        n = 0
        measuring = self.measuring
        samples = self.samples
        unpack = _TS.unpack_from
        no_ack = self.no_ack
        ack_every = self.ack_every
        encode_ack = self.encode_ack
        for cmd in cmds:
            m = cmd.method
            if type(m) is deliver_cls:
                n += 1
                if measuring:
                    samples.append(now_ns - unpack(cmd.body, 0)[0])
                if not no_ack:
                    if ack_every == 1:
                        acks.append(encode_ack(cmd.channel, m.delivery_tag, False))
                    else:
                        ch = cmd.channel
                        c = self.unacked_count[ch] + 1
                        if c >= ack_every:
                            acks.append(encode_ack(ch, m.delivery_tag, True))
                            c = 0
                        self.unacked_count[ch] = c
            else:
                self.conn.handle_other(cmd)
        self.consumed += n
        if acks:
            self.conn.out += b"".join(acks)
            self.conn.flush()

    def _watch_backlog(self, cmds, now_ns: int) -> None:
        deliver_cls = self.deliver_cls
        joined = self.joined_ns
        n = 0
        for cmd in cmds:
            if type(cmd.method) is deliver_cls:
                if _TS.unpack_from(cmd.body, 0)[0] >= joined:
                    self.backlog_done_ns = now_ns
                    self.backlog = self.consumed + n
                    return
                n += 1

    def counters(self) -> dict:
        return {"consumed": self.consumed, "latency_samples": len(self.samples)}

    def result(self) -> dict:
        r = super().result()
        r["e2e_latency_ns"] = self.samples.tobytes()
        if self.start_delay:
            r["joined_ns"] = self.joined_ns
            r["backlog_done_ns"] = self.backlog_done_ns
            r["backlog"] = self.backlog
        return r


def role_class(spec: dict) -> type:
    """The class that runs a connection spec: spec["role"] ("module:Class") when present,
    else Producer or Consumer by spec["kind"]."""
    name = spec.get("role")
    if name:
        module, _, cls = name.partition(":")
        return getattr(importlib.import_module(module), cls)
    return Producer if spec["kind"] == "producer" else Consumer


def setup_role(target: AMQPTarget, codec, spec: dict) -> Role:
    """Connect (to spec["target"] when the spec has one, else target) and set the role up."""
    conn = LeanConnection(spec.get("target", target), codec,
                          name=f"leveret-bench {spec['kind']}").connect()
    for ch in spec["channels"]:
        conn.channel_open(ch)
        if spec["kind"] == "producer":
            if spec["confirm"] is not None:
                conn.confirm_select(ch)
        else:
            if spec["prefetch"]:
                conn.basic_qos(ch, spec["prefetch"])
            if not spec.get("start_delay"):
                conn.basic_consume(ch, spec["queue"], spec["no_ack"],
                                   arguments=spec.get("arguments"))
    return role_class(spec)(conn, spec, codec)


def run_loop(roles: list[Role], t_start: float, t_measure: float, t_end: float) -> None:
    sel = selectors.DefaultSelector()
    want_write = {}
    for r in roles:
        r.conn.set_nonblocking()
        sel.register(r.conn.sock, selectors.EVENT_READ, r)
        want_write[r] = False
    producers = [r for r in roles if isinstance(r, Producer)]
    free = [p for p in producers if not p.rate]
    late = sorted(((t_start + r.start_delay, i) for i, r in enumerate(roles)
                   if getattr(r, "start_delay", 0)), reverse=True)   # next one last
    marks = [("start", t_start), ("measure", t_measure), ("end", t_end)]
    # wait for the common start instant
    while True:
        now = time.monotonic()
        if now >= t_start:
            break
        time.sleep(min(0.01, t_start - now))
    start_ns = time.monotonic_ns()
    for p in producers:
        p.start_streaming(start_ns)
    paced = [(p.wake_ns, i, p) for i, p in enumerate(producers) if p.rate]
    heapq.heapify(paced)
    cpu = []
    mark_i = 0
    monotonic = time.monotonic
    monotonic_ns = time.monotonic_ns
    select = sel.select
    READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE

    def sync(r):
        w = bool(r.conn.out)
        if w != want_write[r]:
            want_write[r] = w
            sel.modify(r.conn.sock, READ | WRITE if w else READ, r)

    # commands the blocking setup read past its replies (e.g. the first deliveries, in the
    # segment that brought basic.consume-ok): select() will not report them, and a consumer
    # holding a whole prefetch window of them would wait for ever
    for r in roles:
        if r.conn.backlog:
            r.on_read(start_ns)
            sync(r)

    while True:
        now = monotonic()
        if now >= marks[mark_i][1]:
            label = marks[mark_i][0]
            for r in roles:
                r.snapshot(label, now)
                r.measuring = label == "measure"
            cpu.append((label, now, cpu_seconds()))
            mark_i += 1
            if mark_i == len(marks):
                break
            continue
        now_ns = monotonic_ns()
        while late and late[-1][0] <= now:
            r = roles[late.pop()[1]]
            r.start_consuming(now_ns)
            sync(r)
        busy = False
        for p in free:
            if p.fill(now_ns):
                busy = True
            sync(p)
        if paced and paced[0][0] <= now_ns + PACE_SLACK_NS:
            done = []
            while paced and paced[0][0] <= now_ns + PACE_SLACK_NS:
                done.append(heapq.heappop(paced)[1:])
            for i, p in done:
                if p.fill(now_ns):
                    busy = True
                sync(p)
                heapq.heappush(paced, (p.wake_ns, i, p))
        if busy:
            timeout = 0
        else:
            until = marks[mark_i][1]
            if late and late[-1][0] < until:
                until = late[-1][0]
            timeout = min(IDLE_TIMEOUT, max(0.0, until - now))
            if paced:
                timeout = min(timeout, max(0.0, (paced[0][0] - now_ns) / 1e9))
        for key, ev in select(timeout):
            r = key.data
            if ev & READ:
                r.on_read(monotonic_ns())
            if ev & WRITE:
                r.conn.flush()
            sync(r)
    sel.close()
    for r in roles:
        r.cpu = cpu


def worker_main(target: AMQPTarget, codec_name: str, specs: list[dict], pipe) -> None:
    """Entry point of a load-generator process (multiprocessing spawn target)."""
    roles: list[Role] = []
    try:
        codec = codec_mod.load(codec_name)
        for spec in specs:
            roles.append(setup_role(target, codec, spec))
        pipe.send(("ready", {"pid": os.getpid(), "codec": codec.NAME}))
        msg = pipe.recv()
        if msg[0] != "go":
            return
        _, t_start, t_measure, t_end = msg
        run_loop(roles, t_start, t_measure, t_end)
        results = []
        for r in roles:
            res = r.result()
            res["cpu"] = getattr(r, "cpu", [])
            res["pid"] = os.getpid()
            results.append(res)
        pipe.send(("result", results))
    except BaseException as e:                       # report, never hang the coordinator
        try:
            pipe.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        except Exception:
            pass
    finally:
        for r in roles:
            r.conn.close(timeout=2.0)
        try:
            pipe.close()
        except Exception:
            pass
