"""The load generator's worker processes: producer and consumer connections on the lean client.

A worker process (started with multiprocessing's *spawn* context) runs one or more connections
("roles") in one select loop.  The coordinator (bench/runner.py) talks to it over a Pipe:

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

Consumer (per channel): basic.qos prefetch, basic.consume; every socket read is decoded
entirely, and the acks for all the deliveries in it (one basic.ack per message by default, as
PerfTest does; multiple=true every N with ack_every) go out in one send.

Other roles: a spec with "role": "module:Class" (e.g. bench/paper.py's resending producer) is
run by that class, a subclass of Producer or Consumer, imported in the worker process.
"""
from __future__ import annotations

import collections
import importlib
import os
import selectors
import struct
import time
import traceback
from array import array

from bench import codec as codec_mod
from bench.leanclient import AMQPClosed, LeanConnection
from bench.url import AMQPTarget

HIGH_WATER = 256 * 1024          # bytes of pending output before a producer stops adding
BATCH = 64                       # messages per producer write
MARKER = b"LVRTBNCH"             # placeholder for the timestamp at the start of each body
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
        props = codec.properties_raw(2 if spec["persistent"] else None)
        body = make_body(spec["message_size"])
        self.templates: dict[int, bytes] = {}
        self.msg_len = None
        ts_off = None
        for ch in self.channels:
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

    def start_streaming(self):
        self.base_bytes = self.conn.bytes_sent

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

    def on_read(self, now_ns: int) -> None:
        M = self.M
        samples = self.samples if self.measuring else None
        for cmd in self.conn.recv_commands():
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
                "latency_samples": len(self.samples) if self.samples is not None else 0}

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

    def on_read(self, now_ns: int) -> None:
        cmds = self.conn.recv_commands()
        if not cmds:
            return
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

    def counters(self) -> dict:
        return {"consumed": self.consumed, "latency_samples": len(self.samples)}

    def result(self) -> dict:
        r = super().result()
        r["e2e_latency_ns"] = self.samples.tobytes()
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
            conn.basic_consume(ch, spec["queue"], spec["no_ack"])
    return role_class(spec)(conn, spec, codec)


def run_loop(roles: list[Role], t_start: float, t_measure: float, t_end: float) -> None:
    sel = selectors.DefaultSelector()
    want_write = {}
    for r in roles:
        r.conn.set_nonblocking()
        sel.register(r.conn.sock, selectors.EVENT_READ, r)
        want_write[r] = False
    producers = [r for r in roles if isinstance(r, Producer)]
    marks = [("start", t_start), ("measure", t_measure), ("end", t_end)]
    # wait for the common start instant
    while True:
        now = time.monotonic()
        if now >= t_start:
            break
        time.sleep(min(0.01, t_start - now))
    for p in producers:
        p.start_streaming()
    cpu = []
    mark_i = 0
    monotonic = time.monotonic
    monotonic_ns = time.monotonic_ns
    select = sel.select
    READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
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
        busy = False
        for p in producers:
            if p.fill(now_ns):
                busy = True
        for r in roles:
            w = bool(r.conn.out)
            if w != want_write[r]:
                want_write[r] = w
                sel.modify(r.conn.sock, READ | WRITE if w else READ, r)
        timeout = 0 if busy else min(0.05, max(0.0, marks[mark_i][1] - now))
        for key, ev in select(timeout):
            r = key.data
            if ev & READ:
                r.on_read(monotonic_ns())
            if ev & WRITE:
                r.conn.flush()
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
