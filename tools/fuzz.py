"""Fuzzing a live node with generated AMQP frame sequences: `make fuzz`.

    python -m tools.fuzz [--sequences 1000000] [--connections 48] [--procs 1] [--seed 1]
                         [--out bench/results/fuzz.txt] [--url amqp://... (a running broker)]

Starts a Leveret node (bench/leveret_node.py: a free loopback port, a temp dir, stopped by its PID) unless
--url names one, then runs `--procs` fuzzing processes, each with `--connections` concurrent
client connections on one asyncio loop, until `--sequences` sequences were sent. A connection
does a valid handshake (or, for a few, a fuzzed one), opens a home channel and a probe channel,
then sends one sequence after another:

- valid: 1-4 well-formed commands on the home channel (declares, binds, publishes with content,
  consumes, gets, acks, nacks, qos, tx, confirm, flow, recover, deletes...) with random but
  well-typed arguments, names from a small pool so the broker's state stays bounded;
- args: any method of the spec, on the home channel or channel 0, with random well-typed
  arguments (unknown queues, bad exchange types, unknown delivery tags, odd flag combinations,
  extreme integers, non-UTF-8 and 255-byte short strings, random tables);
- channel: a well-formed method on the wrong channel (never opened, above channel_max, 0);
- content: header and body frames without a method, a body before its header, a header of the
  wrong class, bodies overrunning the size announced;
- oversize: frame sizes above frame_max, huge body sizes, short strings and tables whose length
  runs past the frame, a method with 64 KiB of trailing arguments;
- truncate: a frame cut short, then other frames (which the broker reads as its rest);
- mutate: a valid sequence with 1-4 byte mutations (bit flips, bytes replaced, inserted,
  deleted, sizes, channels, frame types and frame-end octets changed);
- random: random bytes (sometimes after a valid frame-type octet);
- heartbeat: heartbeat frames with payloads, on channels other than 0.

After each sequence the client decodes what it sent with protocol.FrameDecoder (the broker's own
framing): a stream that ends inside a frame is closed by the client (the broker rightly waits for
the rest); a stream with a framing error must be answered by connection.close; any other is
followed by a probe (channel.flow on the probe channel) that must be answered (flow-ok), or the
connection closed by the broker (connection.close), within --probe-timeout seconds: a probe not
answered is a hang. Channels the broker closes are reopened. A connection ends when the broker
closes it or after --per-connection sequences.

Throughout, a witness process publishes with confirms and consumes on a connection of its own;
a confirm round trip, or a gap between two, above --hang seconds is a hang. At the end: broker
crashes (worker processes restarted, the node gone), hangs, the witness's figures, the RSS of the
node and its workers at start and end, the broker log's errors, and one summary line, printed
and written to --out. Every frame stream is generated from --seed (per process and connection),
so a run can be repeated.

Why a seeded generator and not hypothesis: hypothesis draws examples one at a time on one thread
(about 1 ms each here for frame-sized data, plus its shrinking database), which would take longer
than the broker to reach 10^6; the sequences below are built from protocol/'s encoders and the
same field types tests/unit/protocol/protocol_strategies.py covers, at about 20 us each, and
many connections run concurrently on one event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing as mp
import os
import random
import re
import struct
import sys
import time

from protocol import (
    PROTOCOL_HEADER,
    AMQPError,
    BasicProperties,
    FrameDecoder,
    HeaderFrame,
    MethodFrame,
    encode_content,
    encode_frame,
    encode_method,
    encode_table,
)
from protocol import methods as M

FRAME_MAX = 131072
CHANNEL_MAX = 2047
HOME, PROBE = 1, 2  # the client's channels
QUEUES = [f"fz-q{i}" for i in range(4)] + ["", "amq.gen-nope", "fz-missing"]
EXCHANGES = ["", "amq.direct", "amq.topic", "amq.fanout", "amq.headers", "amq.match",
             "fz-x0", "fz-x1", "fz-missing"]
EXCHANGE_TYPES = ["direct", "topic", "fanout", "headers", "x-nope", ""]
KEYS = ["", "k", "a.b", "#", "*.x", "fz-q0", "fz-q1"]
INTS = {
    "octet": [0, 1, 2, 127, 128, 255],
    "short": [0, 1, 2, 4095, 32767, 32768, 65535],
    "long": [0, 1, 4095, 4096, 131072, 2**31 - 1, 2**31, 2**32 - 1],
    "longlong": [0, 1, 2, 3, 2**32, 2**63 - 1, 2**63, 2**64 - 1],
}
LIMITS = {"octet": 255, "short": 65535, "long": 2**32 - 1, "longlong": 2**64 - 1}
QUEUE_ARGS = ["x-max-length", "x-max-length-bytes", "x-message-ttl", "x-expires",
              "x-overflow", "x-dead-letter-exchange", "x-dead-letter-routing-key",
              "x-max-priority", "x-queue-mode", "x-queue-type", "x-single-active-consumer",
              "x-confirm-on", "x-ha-mode", "x-nope", "alternate-exchange"]


# --- generating -------------------------------------------------------------------------------
class Gen:
    """Frame sequences from one seeded random generator (one per connection)."""

    def __init__(self, seed: str):
        self.r = random.Random(seed)

    # values
    def shortstr(self, pool=None):
        r = self.r
        x = r.random()
        if pool is not None and x < 0.75:
            return r.choice(pool)
        if x < 0.85:
            return "".join(r.choice("abcxyz.#*-_") for _ in range(r.randrange(12)))
        if x < 0.9:
            return "q" * 255
        if x < 0.95:
            return bytes(r.randrange(256) for _ in range(r.randrange(1, 10)))  # maybe not UTF-8
        return "\u00e9\U0001f600" * r.randrange(1, 20)

    def integer(self, ftype: str) -> int:
        r = self.r
        return r.choice(INTS[ftype]) if r.random() < 0.6 else r.randint(0, LIMITS[ftype])

    def value(self, depth: int = 0):
        r = self.r
        k = r.randrange(12 if depth < 2 else 9)
        if k == 0:
            return r.choice([True, False])
        if k == 1:
            return r.randint(-2**63, 2**63 - 1)
        if k == 2:
            return r.choice([0, 1, -1, 127, 128, 255, 32768, 2**31])
        if k == 3:
            return r.random() * 10 ** r.randrange(-5, 30)
        if k == 4:
            return self.shortstr(KEYS + EXCHANGES)
        if k == 5:
            return bytes(r.randrange(256) for _ in range(r.randrange(8)))
        if k == 6:
            return None
        if k == 7:
            import decimal
            return decimal.Decimal(r.randrange(2**32)).scaleb(-r.randrange(10))
        if k == 8:
            return r.choice(["reject-publish", "drop-head", "lazy", "all", "quorum", "ack"])
        if k in (9, 10):
            return [self.value(depth + 1) for _ in range(r.randrange(4))]
        return self.table(depth + 1)

    def table(self, depth: int = 0) -> dict:
        r = self.r
        out = {}
        for _ in range(r.randrange(4)):
            key = r.choice(QUEUE_ARGS) if r.random() < 0.6 else self.shortstr()
            if isinstance(key, bytes):
                key = key.decode("latin-1")
            out[key[:128]] = self.value(depth)
        return out

    def method(self, cls, pools: bool = True):
        """An instance of method class `cls` with random well-typed arguments."""
        kw = {}
        for name, ftype in zip(cls.FIELDS, cls.FIELD_TYPES):
            if ftype == "bit":
                kw[name] = self.r.random() < 0.3
            elif ftype in INTS:
                kw[name] = self.integer(ftype)
            elif ftype == "shortstr":
                pool = None
                if pools:
                    pool = (QUEUES if "queue" in name else EXCHANGES if "exchange" in name or
                            name in ("source", "destination") else EXCHANGE_TYPES if
                            name == "exchange_type" else KEYS)
                kw[name] = self.shortstr(pool)
            elif ftype == "longstr":
                kw[name] = bytes(self.r.randrange(256) for _ in range(self.r.randrange(20)))
            else:
                kw[name] = self.table()
        return cls(**kw)

    def properties(self) -> bytes:
        r = self.r
        if r.random() < 0.1:
            return bytes(r.randrange(256) for _ in range(r.randrange(2, 20)))  # garbage flags
        kw = {}
        if r.random() < 0.5:
            kw["delivery_mode"] = r.choice([1, 2, 0, 3])
        if r.random() < 0.2:
            kw["priority"] = r.randrange(256)
        if r.random() < 0.2:
            kw["expiration"] = r.choice(["0", "100", "-1", "abc", "99999999999999999999"])
        if r.random() < 0.2:
            kw["headers"] = self.table()
        if r.random() < 0.1:
            kw["user_id"] = r.choice(["guest", "mallory", ""])
        if r.random() < 0.1:
            kw["timestamp"] = r.choice([0, 2**63 - 1, 2**64 - 1])
        if r.random() < 0.1:
            kw["content_type"] = self.shortstr()
            if isinstance(kw["content_type"], bytes):
                kw["content_type"] = "x"
        return BasicProperties(**kw).encode()

    def body(self) -> bytes:
        r = self.r
        x = r.random()
        n = (r.randrange(64) if x < 0.9 else r.randrange(5000) if x < 0.99
             else r.randrange(2 * FRAME_MAX))
        return os.urandom(n) if n > 64 else b"b" * n

    # frames
    def valid_command(self, ch: int) -> bytes:
        r = self.r
        kind = r.randrange(16)
        if kind < 5:
            method = M.BasicPublish(exchange=r.choice(EXCHANGES), routing_key=r.choice(KEYS),
                                    mandatory=r.random() < 0.3)
            return encode_method(ch, method) + encode_content(ch, 60, self.properties(),
                                                              self.body(), FRAME_MAX)
        cls = r.choice([M.QueueDeclare, M.QueueDeclare, M.QueueBind, M.QueueUnbind,
                        M.QueuePurge, M.QueueDelete, M.ExchangeDeclare, M.ExchangeDelete,
                        M.ExchangeBind, M.ExchangeUnbind, M.BasicQos, M.BasicConsume,
                        M.BasicCancel, M.BasicGet, M.BasicAck, M.BasicNack, M.BasicReject,
                        M.BasicRecover, M.BasicRecoverAsync, M.TxSelect, M.TxCommit,
                        M.TxRollback, M.ConfirmSelect, M.ChannelFlow])
        method = self.method(cls)
        if cls is M.QueueDeclare and r.random() < 0.9:
            method.exclusive = True  # bounded state: gone with the connection
            if method.queue not in QUEUES[:4]:
                method.queue = r.choice(QUEUES[:4])
        if cls is M.QueueDeclare and method.durable and r.random() < 0.9:
            method.durable = False
        if cls is M.ExchangeDeclare:
            method.durable = method.durable and r.random() < 0.1
            method.auto_delete = True
        if cls in (M.BasicAck, M.BasicNack, M.BasicReject):
            method.delivery_tag = r.choice([0, 1, 2, 3, r.randrange(1, 100)])
        if cls is M.BasicQos:
            method.prefetch_size = 0 if r.random() < 0.8 else method.prefetch_size
        return encode_method(ch, method)

    def seq_valid(self, ch):
        return b"".join(self.valid_command(ch) for _ in range(self.r.randrange(1, 5)))

    def seq_args(self, ch):
        cls = self.r.choice(list(M.METHODS.values()))
        on = 0 if cls.CLASS_ID == 10 and self.r.random() < 0.7 else ch
        out = encode_method(on, self.method(cls, pools=self.r.random() < 0.7))
        if cls.HAS_CONTENT and self.r.random() < 0.7:
            out += encode_content(on, 60, self.properties(), self.body(), FRAME_MAX)
        return out

    def seq_channel(self, ch):
        r = self.r
        wrong = r.choice([0, 0, r.randrange(3, CHANNEL_MAX + 1), CHANNEL_MAX + 1,
                          r.randrange(CHANNEL_MAX + 1, 65536), 65535])
        return self.valid_command(wrong)

    def seq_content(self, ch):
        r = self.r
        on = r.choice([ch, ch, 0, r.randrange(3, CHANNEL_MAX + 1)])
        body = self.body()
        header = encode_frame(2, on, struct.pack(">HHQ", r.choice([60, 60, 10, 0, 999]),
                                                 0, len(body)) + self.properties())
        bodyf = encode_frame(3, on, body[:FRAME_MAX - 8])
        k = r.randrange(5)
        if k == 0:
            return header  # a header without a method
        if k == 1:
            return bodyf  # a body without anything
        if k == 2:
            return header + bodyf
        if k == 3:  # publish, then the body before the header
            return encode_method(on, M.BasicPublish(routing_key="fz-q0")) + bodyf + header
        # a body overrunning the size announced
        return (encode_method(on, M.BasicPublish(routing_key="fz-q0")) +
                encode_frame(2, on, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00") +
                encode_frame(3, on, b"overrun" * r.randrange(1, 50)))

    def seq_oversize(self, ch):
        r = self.r
        k = r.randrange(6)
        if k == 0:  # a frame larger than frame_max, its payload not sent
            size = r.choice([FRAME_MAX + 1, FRAME_MAX * 2, 2**31, 2**32 - 1])
            return struct.pack(">BHI", r.choice([1, 2, 3]), ch, size) + os.urandom(
                r.randrange(100))
        if k == 1:  # a huge body size, a little body
            return (encode_method(ch, M.BasicPublish(routing_key="fz-q1")) +
                    encode_frame(2, ch, struct.pack(">HHQ", 60, 0, r.choice(
                        [2**63, 2**64 - 1, 2**40, 129 * 2**20])) + b"\x00\x00") +
                    encode_frame(3, ch, b"x" * r.randrange(1000)))
        if k == 2:  # a short string running past the frame
            return encode_frame(1, ch, struct.pack(">HHHB", 50, 10, 0, 255) + b"fz")
        if k == 3:  # a table whose length runs past the frame
            return encode_frame(1, ch, struct.pack(">HHHB", 50, 10, 0, 5) + b"fz-q0" +
                                b"\x00" + struct.pack(">I", r.choice([2**31, 2**32 - 1, 100])))
        if k == 4:  # 64 KiB of trailing arguments
            return encode_frame(1, ch, encode_method(ch, M.BasicQos())[7:-1] + b"\x00" * 65536)
        # a frame of exactly frame_max (payload frame_max - 8), then one byte more
        size = FRAME_MAX - 8 + r.choice([0, 1, 8, 9])
        return struct.pack(">BHI", 3, ch, size) + b"\x00" * size + b"\xce"

    def seq_truncate(self, ch):
        r = self.r
        data = self.seq_valid(ch)
        cut = data[:r.randrange(1, len(data))] if len(data) > 1 else data
        return cut + (self.seq_valid(ch) if r.random() < 0.7 else b"")

    def seq_mutate(self, ch):
        r = self.r
        data = bytearray(self.seq_valid(ch) if r.random() < 0.7 else self.seq_args(ch))
        for _ in range(r.randrange(1, 5)):
            if not data:
                break
            i = r.randrange(len(data))
            k = r.randrange(8)
            if k == 0:
                data[i] ^= 1 << r.randrange(8)
            elif k == 1:
                data[i] = r.randrange(256)
            elif k == 2:
                data[i:i] = os.urandom(r.randrange(1, 8))
            elif k == 3:
                del data[i:i + r.randrange(1, 8)]
            elif k == 4 and len(data) >= 7:  # a frame's size
                data[3:7] = struct.pack(">I", r.choice([0, 1, len(data), 2**32 - 1,
                                                        r.randrange(2**16)]))
            elif k == 5 and len(data) >= 3:  # its channel
                data[1:3] = struct.pack(">H", r.choice([0, 2, 3, 65535, r.randrange(65536)]))
            elif k == 6:  # its type
                data[0] = r.choice([0, 1, 2, 3, 4, 8, 9, 255])
            else:  # a frame-end octet
                data[-1] = r.randrange(256)
        return bytes(data)

    def seq_random(self, ch):
        r = self.r
        junk = os.urandom(r.randrange(1, 300))
        if r.random() < 0.5:
            junk = bytes([r.choice([1, 2, 3, 8])]) + junk
        return junk

    def seq_heartbeat(self, ch):
        r = self.r
        return encode_frame(8, r.choice([0, 0, ch, 9]), os.urandom(r.choice([0, 0, 1, 10])))

    KINDS = [("valid", 24), ("args", 18), ("channel", 8), ("content", 8), ("oversize", 5),
             ("truncate", 6), ("mutate", 20), ("random", 7), ("heartbeat", 4)]

    def sequence(self, ch: int) -> tuple[str, bytes]:
        kind = self.r.choices([k for k, _ in self.KINDS], [w for _, w in self.KINDS])[0]
        return kind, getattr(self, f"seq_{kind}")(ch)

    def handshake_fault(self) -> int:
        """Which step of the handshake goes wrong (0: none)."""
        return 0 if self.r.random() < 0.97 else self.r.randrange(1, 7)


# --- one client connection --------------------------------------------------------------------
class Closed(Exception):
    pass


class Conn:
    """A raw AMQP client connection that sends fuzz and reads what the broker says."""

    def __init__(self, stats, reader, writer):
        self.stats = stats
        self.reader, self.writer = reader, writer
        self.dec = FrameDecoder(frame_max=FRAME_MAX, expect_header=False)
        self.frames = collections.deque()
        self.closed_by = None  # the broker's connection.close code, or "eof"

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def frame(self, deadline: float):
        while not self.frames:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            data = await asyncio.wait_for(self.reader.read(262144), left)
            if not data:
                self.closed_by = self.closed_by or "eof"
                raise Closed
            self.dec.feed(data)
            try:
                self.frames.extend(self.dec.frames())
            except AMQPError as e:  # the broker sent something that is not AMQP
                self.stats["bad_server_frames"] += 1
                self.stats["samples"].append(f"bad frame from the broker: {e}")
                raise Closed
        return self.frames.popleft()

    async def expect(self, want, deadline: float, on_channel_close=None, channel=None):
        """Read until a method of class `want` comes (on `channel`, if given); answer closes on
        the way. Returns the frame; raises Closed when the connection ends."""
        while True:
            f = await self.frame(deadline)
            if type(f) is not MethodFrame:
                continue
            m = f.method
            if isinstance(m, want) and (channel is None or f.channel == channel):
                return f
            if type(m) is M.ConnectionClose:
                self.closed_by = m.reply_code
                self.send(encode_method(0, M.ConnectionCloseOk()))
                raise Closed
            if type(m) is M.ConnectionCloseOk:
                self.closed_by = self.closed_by or "close-ok"
                raise Closed
            if type(m) is M.ChannelClose:
                self.send(encode_method(f.channel, M.ChannelCloseOk()))
                self.stats["channel_closes"][m.reply_code] += 1
                if on_channel_close is not None:
                    on_channel_close(f.channel)
            elif type(m) is M.ChannelCloseOk and on_channel_close is not None:
                # the sequence closed a channel itself (what it sent there after that, the
                # probe included, may have been dropped, as RabbitMQ does)
                self.stats["channel_closes"]["by the client"] += 1
                on_channel_close(f.channel)

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001
            pass


async def handshake(conn: Conn, gen: Gen, fault: int, deadline: float) -> None:
    """Protocol header, start-ok (PLAIN guest), tune-ok, open; step `fault` goes wrong."""
    r = gen.r
    if fault == 1:  # a bad protocol header: the broker's own header, then EOF
        conn.send(r.choice([b"AMQP\x00\x00\x09\x02", b"AMQP\x00\x00\x08\x00", b"HTTP/1.1",
                            os.urandom(8), b"AMQP", b"AMQP\x00\x00\x09\x01\x01\x00"]))
        got = b""
        while len(got) < 4096:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            data = await asyncio.wait_for(conn.reader.read(4096), left)
            if not data:
                conn.closed_by = "eof" if got[:4] == b"AMQP" else f"eof after {got[:16]!r}"
                raise Closed
            got += data
        conn.closed_by = f"more than 4 KiB: {got[:16]!r}"
        raise Closed
    conn.send(PROTOCOL_HEADER)
    await conn.expect(M.ConnectionStart, deadline)
    if fault == 2:
        conn.send(r.choice([encode_method(0, M.ConnectionStartOk(
            response=b"\x00guest\x00wrong")), encode_method(0, M.ConnectionStartOk(
                mechanism="NOPE", response=b"x")), encode_method(0, gen.method(M.ConnectionStartOk)),
            gen.seq_random(0), gen.seq_mutate(0)]))
    else:
        conn.send(encode_method(0, M.ConnectionStartOk(
            client_properties={"product": "leveret-fuzz"}, response=b"\x00guest\x00guest")))
    await conn.expect(M.ConnectionTune, deadline)
    tune = M.ConnectionTuneOk(CHANNEL_MAX, FRAME_MAX, 0)
    if fault == 3:
        tune = r.choice([M.ConnectionTuneOk(CHANNEL_MAX, 100, 0), M.ConnectionTuneOk(
            65535, FRAME_MAX, 0), M.ConnectionTuneOk(0, 2**32 - 1, 65535),
            gen.method(M.ConnectionTuneOk)])
    conn.send(encode_method(0, tune))
    if fault == 4:
        conn.send(gen.seq_valid(1))  # before connection.open
    conn.send(encode_method(0, M.ConnectionOpen(virtual_host="/" if fault != 5 else
                                                gen.shortstr(["nope", "", "//"]))))
    if fault == 6:
        conn.send(gen.seq_random(0))
    await conn.expect(M.ConnectionOpenOk, deadline)


async def fuzz_connection(stats, host, port, gen: Gen, budget, args) -> None:
    t = args.probe_timeout
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), t)
    except (OSError, asyncio.TimeoutError) as e:
        stats["connect_errors"] += 1
        stats["samples"].append(f"connect failed: {e!r}")
        await asyncio.sleep(0.5)
        return
    conn = Conn(stats, reader, writer)
    stats["connections"] += 1
    fault = gen.handshake_fault()
    try:
        try:
            await handshake(conn, gen, fault, time.monotonic() + t)
        except Closed:
            budget.take(1)
            stats["outcomes"][f"handshake-{fault}: closed {conn.closed_by}"] += 1
            return
        except (TimeoutError, asyncio.TimeoutError):
            budget.take(1)
            # a fuzzed handshake may leave the broker waiting for more (handshake_timeout)
            stats["outcomes"][f"handshake-{fault}: silent" if fault else "handshake: hang"] += 1
            if not fault:
                stats["hangs"] += 1
                stats["samples"].append("a valid handshake was not answered")
            return
        if fault:  # the handshake went through: what was agreed is unknown, start again
            budget.take(1)
            stats["outcomes"][f"handshake-{fault}: open"] += 1
            return
        mirror = FrameDecoder(frame_max=FRAME_MAX, expect_header=False)  # what we sent
        home = HOME
        next_channel = 3
        conn.send(encode_method(HOME, M.ChannelOpen()) + encode_method(PROBE, M.ChannelOpen()))
        lost = set()  # channels the broker closed
        probing = False  # a probe is on its way

        def channel_closed(number):
            if number == PROBE and probing:
                # the sequence's frames on the probe channel got it closed, with the probe
                # behind them: the broker discards those (as RabbitMQ does); probe again
                conn.send(encode_method(PROBE, M.ChannelOpen()) +
                          encode_method(PROBE, M.ChannelFlow(active=True)))
            else:
                lost.add(number)

        for _ in range(args.per_connection):
            if not budget.take(1):
                break
            if home in lost:  # the broker closed it: a new home channel
                home, next_channel = next_channel, next_channel + 1
                if next_channel > CHANNEL_MAX:
                    break
                conn.send(encode_method(home, M.ChannelOpen()))
            kind, data = gen.sequence(home)
            stats["kinds"][kind] += 1
            stats["bytes"] += len(data)
            conn.send(data)
            mirror.feed(data)
            try:
                mirror.frames()
                broken = False
            except AMQPError:
                broken = True
            if not broken and mirror.buffered:
                stats["outcomes"]["incomplete: client closed"] += 1
                return
            if PROBE in lost and not broken:
                lost.discard(PROBE)
                conn.send(encode_method(PROBE, M.ChannelOpen()))
            probing = not broken
            if probing:
                conn.send(encode_method(PROBE, M.ChannelFlow(active=True)))
            try:
                await conn.expect(M.ChannelFlowOk if not broken else M.ConnectionCloseOk,
                                  time.monotonic() + t, channel_closed, PROBE)
            except Closed:
                stats["outcomes"][f"closed {conn.closed_by}" +
                                  (" (framing error sent)" if broken else "")] += 1
                if conn.closed_by == "eof":
                    stats["samples"].append(f"EOF without connection.close after {kind}: "
                                            f"{data[:200].hex()}")
                return
            except (TimeoutError, asyncio.TimeoutError):
                stats["hangs"] += 1
                stats["outcomes"][f"hang after {kind}" +
                                  (" (framing error sent)" if broken else "")] += 1
                stats["samples"].append(f"no answer within {t}s after {kind}"
                                        f"{' (framing error sent)' if broken else ''}: "
                                        f"{data[:300].hex()}")
                return
            stats["outcomes"]["open"] += 1
        conn.send(encode_method(0, M.ConnectionClose(200, "bye")))
    except (ConnectionError, OSError) as e:
        stats["outcomes"][f"socket error {type(e).__name__}"] += 1
    finally:
        conn.close()


class Budget:
    """Sequences left to send (shared by the connections of one process)."""

    def __init__(self, n: int):
        self.left = n

    def take(self, n: int) -> bool:
        if self.left <= 0:
            return False
        self.left -= n
        return True


def new_stats() -> dict:
    return {"connections": 0, "connect_errors": 0, "hangs": 0, "bytes": 0,
            "bad_server_frames": 0, "kinds": collections.Counter(),
            "outcomes": collections.Counter(), "channel_closes": collections.Counter(),
            "samples": []}


async def fuzz_process(index: int, host: str, port: int, n: int, args, progress) -> dict:
    stats = new_stats()
    budget = Budget(n)
    conn_no = 0

    async def lane(lane_no: int):
        nonlocal conn_no
        while budget.left > 0:
            conn_no += 1
            gen = Gen(f"{args.seed}/{index}/{conn_no}")
            await fuzz_connection(stats, host, port, gen, budget, args)
            progress.value = n - max(budget.left, 0)
            if len(stats["samples"]) > 200:
                del stats["samples"][100:]

    await asyncio.gather(*(lane(i) for i in range(args.connections)))
    return stats


def _fuzz_main(index, host, port, n, args, progress, results) -> None:
    stats = asyncio.run(fuzz_process(index, host, port, n, args, progress))
    results.put(json.loads(json.dumps(stats, default=dict)))


# --- the witness --------------------------------------------------------------------------------
def _witness_main(url: str, state, stop) -> None:
    """Publish one message with a confirm, consume it, ack; again, until told to stop. state:
    [round trips, last success (time.time()), max round trip, failures]."""
    import pika
    conn = None
    while not stop.is_set():
        try:
            if conn is None or conn.is_closed:
                params = pika.URLParameters(url)
                params.heartbeat = 0
                params.socket_timeout = 10
                conn = pika.BlockingConnection(params)
                ch = conn.channel()
                ch.confirm_delivery()
                q = ch.queue_declare("", exclusive=True).method.queue
                got = []
                ch.basic_consume(q, lambda c, m, p, b: (got.append(b), c.basic_ack(
                    m.delivery_tag)))
            t0 = time.monotonic()
            body = str(t0).encode()
            ch.basic_publish("", q, body, mandatory=True)  # returns once confirmed
            while body not in got:
                conn.process_data_events(0.05)
                if time.monotonic() - t0 > 60:
                    raise TimeoutError("no delivery within 60 s")
            got.clear()
            rtt = time.monotonic() - t0
            with state.get_lock():
                state[0] += 1
                state[1] = time.time()
                state[2] = max(state[2], rtt)
            stop.wait(0.05)
        except Exception as e:  # noqa: BLE001 - reported as a witness failure
            with state.get_lock():
                state[3] += 1
            print(f"witness: {e!r}", file=sys.stderr)
            conn = None
            stop.wait(1)


# --- the node, watched -------------------------------------------------------------------------
def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> dict[int, str]:
    """{pid: "conn-0" ...} of a node's worker processes."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except (OSError, ValueError, IndexError):
            continue
        if "actors.worker.process" in argv:
            out[int(entry)] = f"{argv[argv.index('--kind') + 1]}-{argv[argv.index('--index') + 1]}"
    return out


def _rss_line(node_pid: int) -> str:
    kids = _children(node_pid)
    parts = [f"node {_rss_kb(node_pid) / 1024:.0f} MB"]
    parts += [f"{name} {_rss_kb(pid) / 1024:.0f} MB" for pid, name in sorted(
        kids.items(), key=lambda kv: kv[1])]
    return ", ".join(parts)


_EXC = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit)\b.*)$")


def _log_errors(path: str) -> tuple[int, int, collections.Counter]:
    """(ERROR/CRITICAL lines, tracebacks, the exceptions' last lines) in the broker's log."""
    errors = tracebacks = 0
    kinds = collections.Counter()
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if " ERROR " in line or " CRITICAL " in line:
                    errors += 1
                    kinds[re.sub(r"\d+", "N", line.split(": ", 1)[-1].strip())[:160]] += 1
                elif line.startswith("Traceback"):
                    tracebacks += 1
                else:
                    m = _EXC.match(line.strip())
                    if m:
                        kinds[m.group(1)[:160]] += 1
    except OSError:
        pass
    return errors, tracebacks, kinds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--sequences", type=int, default=1_000_000)
    p.add_argument("--connections", type=int, default=48, help="concurrent, per process")
    p.add_argument("--procs", type=int, default=1, help="fuzzing processes")
    p.add_argument("--per-connection", type=int, default=100,
                   help="sequences per connection at most")
    p.add_argument("--seed", default="1")
    p.add_argument("--probe-timeout", type=float, default=10.0,
                   help="seconds a probe may wait for its answer")
    p.add_argument("--hang", type=float, default=5.0,
                   help="a witness round trip (or gap) longer than this is a hang")
    p.add_argument("--url", help="fuzz this running broker instead of starting a node "
                                 "(amqp://guest:guest@host:port/; crashes are not watched)")
    p.add_argument("--out", default=os.path.join("bench", "results", "fuzz.txt"))
    p.add_argument("--node-args", default="", help="extra leveret-server options")
    p.add_argument("--keep", action="store_true", help="keep the node's temp dir")
    args = p.parse_args(argv)

    node = None
    if args.url:
        from urllib.parse import urlparse
        u = urlparse(args.url)
        host, port, url = u.hostname, u.port or 5672, args.url
    else:
        from bench.leveret_node import LeveretNode
        node = LeveretNode(keep_dir=args.keep, extra_args=args.node_args.split())
        node.start()
        host, port, url = node.host, node.port, node.url
    t_start = time.monotonic()
    try:
        return _run(args, node, host, port, url, t_start)
    finally:
        if node is not None:
            log = os.path.join(node.dir, "server.log")
            node.stop()
            if args.keep:
                print(f"node log: {log}")


def _run(args, node, host, port, url, t_start) -> int:
    ctx = mp.get_context("spawn")
    node_pid = node.pid if node else None
    workers0 = _children(node_pid) if node_pid else {}
    rss0 = _rss_line(node_pid) if node_pid else "n/a"
    print(f"fuzzing {host}:{port}: {args.sequences:,} sequences, {args.procs} x "
          f"{args.connections} connections, seed {args.seed}; RSS at start: {rss0}", flush=True)
    wstate = ctx.Array("d", [0, time.time(), 0, 0])
    wstop = ctx.Event()
    witness = ctx.Process(target=_witness_main, args=(url, wstate, wstop), daemon=True)
    witness.start()
    results = ctx.Queue()
    progress = [ctx.Value("q", 0) for _ in range(args.procs)]
    share = [args.sequences // args.procs + (i < args.sequences % args.procs)
             for i in range(args.procs)]
    procs = [ctx.Process(target=_fuzz_main, args=(i, host, port, share[i], args, progress[i],
                                                 results), daemon=True)
             for i in range(args.procs)]
    for proc in procs:
        proc.start()
    witness_hangs, in_gap = 0, False
    gathered = []
    last_print = time.monotonic()
    while len(gathered) < len(procs):
        try:
            gathered.append(results.get(timeout=1))
            continue
        except Exception:  # noqa: BLE001 - queue.Empty
            pass
        gap = time.time() - wstate[1]
        if gap > args.hang and not in_gap:
            witness_hangs += 1
            print(f"HANG: the witness has not completed a round trip for {gap:.1f} s",
                  flush=True)
        in_gap = gap > args.hang
        if node and node.proc.poll() is not None:
            print(f"the node exited with status {node.proc.returncode}", flush=True)
            break
        if any(not proc.is_alive() and proc.exitcode for proc in procs):
            print("a fuzzing process failed", flush=True)
            break
        if time.monotonic() - last_print >= 30:
            done = sum(v.value for v in progress)
            el = time.monotonic() - t_start
            print(f"  {done:,} sequences in {el:.0f} s ({done / el:,.0f}/s); witness "
                  f"{int(wstate[0]):,} round trips, max {wstate[2]:.2f} s; RSS "
                  f"{_rss_line(node_pid) if node_pid else 'n/a'}", flush=True)
            last_print = time.monotonic()
    elapsed = time.monotonic() - t_start
    wstop.set()
    witness.join(15)
    # a last look at the witness: the run is over, it must still be served
    final_gap = time.time() - wstate[1]
    stats = new_stats()
    for s in gathered:
        for k in ("connections", "connect_errors", "hangs", "bytes", "bad_server_frames"):
            stats[k] += s[k]
        for k in ("kinds", "outcomes", "channel_closes"):
            stats[k].update({(int(x) if x.isdigit() else x): v for x, v in s[k].items()})
        stats["samples"] += s["samples"]
    sent = sum(stats["kinds"].values()) + sum(v for k, v in stats["outcomes"].items()
                                               if str(k).startswith("handshake-"))
    crashes, restarts, rss1, node_alive = 0, 0, "n/a", True
    errors = tracebacks = 0
    exc_kinds: collections.Counter = collections.Counter()
    if node:
        node_alive = node.proc.poll() is None
        workers1 = _children(node_pid) if node_alive else {}
        restarts = len(set(workers0) - set(workers1))
        crashes = restarts + (0 if node_alive else 1)
        rss1 = _rss_line(node_pid) if node_alive else "n/a"
        errors, tracebacks, exc_kinds = _log_errors(os.path.join(node.dir, "server.log"))
    hangs = stats["hangs"] + witness_hangs + (1 if final_gap > args.hang else 0)
    closes = ", ".join(f"{k}: {v:,}" for k, v in sorted(
        ((k, v) for k, v in stats["outcomes"].items() if str(k).startswith("closed")),
        key=lambda kv: -kv[1])[:8])
    summary = (f"fuzz: {sent:,} frame sequences ({stats['bytes'] / 1e6:,.0f} MB) on "
               f"{stats['connections']:,} connections in {elapsed:,.0f} s ({sent / elapsed:,.0f}"
               f"/s; {args.procs} x {args.connections} concurrent, seed {args.seed}): "
               f"{crashes} broker crashes ({restarts} worker restarts), {hangs} hangs; witness "
               f"{int(wstate[0]):,} confirm round trips, max {wstate[2]:.2f} s, "
               f"{int(wstate[3])} failures; RSS start {rss0} / end {rss1}")
    lines = [summary, "",
             "sequences by kind: " + ", ".join(f"{k} {v:,}" for k, v in
                                               stats["kinds"].most_common()),
             "outcomes: " + ", ".join(f"{k}: {v:,}" for k, v in
                                      stats["outcomes"].most_common()),
             f"connection closes: {closes}",
             "channel closes by code: " + ", ".join(f"{k}: {v:,}" for k, v in
                                                    stats["channel_closes"].most_common()),
             f"connect errors: {stats['connect_errors']}, bad frames from the broker: "
             f"{stats['bad_server_frames']}",
             f"broker log: {errors} ERROR/CRITICAL lines, {tracebacks} tracebacks"]
    lines += [f"  {v:,} x {k}" for k, v in exc_kinds.most_common(25)]
    if stats["samples"]:
        lines.append("samples:")
        lines += [f"  {s}" for s in stats["samples"][:40]]
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(f"(written to {args.out})")
    return 0 if crashes == 0 and hangs == 0 and not wstate[3] else 1


if __name__ == "__main__":
    sys.exit(main())
