"""The pika fallback for the load generator (``--client pika``).

Same worker protocol, counters and result format as bench/loadgen.py, but each connection is a
pika SelectConnection (one per process).  It is much slower than the lean client and exists to
validate the scenarios and the lean client against RabbitMQ with an independent, well-known
client library (and to run when protocol/ is unusable).
"""
from __future__ import annotations

import os
import struct
import time
import traceback
from array import array

from bench.loadgen import BATCH, HIGH_WATER, _Unconfirmed, cpu_seconds, make_body
from amqpclient.url import AMQPTarget

_TS = struct.Struct(">q")


class _PikaRole:
    def __init__(self, target: AMQPTarget, spec: dict):
        import pika
        self.pika = pika
        self.spec = spec
        self.kind = spec["kind"]
        self.params = pika.URLParameters(target.url)
        self.params.heartbeat = 0
        self.conn = None
        self.channels: dict[int, object] = {}
        self.error: str | None = None
        self.snapshots: list[dict] = []
        self.cpu: list = []
        self.measuring = False
        self.running = False
        self.blocked = False
        self.blocked_events = 0
        # producer
        self.published = 0
        self.confirmed = 0
        self.nacked = 0
        self.unconfirmed: dict[int, _Unconfirmed] = {}
        self.next_seq: dict[int, int] = {}
        self.confirm_samples = array("q")
        self.pump_scheduled = False
        # consumer
        self.consumed = 0
        self.e2e_samples = array("q")

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        pika = self.pika
        self.conn = pika.SelectConnection(
            self.params, on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error, on_close_callback=self._on_closed)
        self.conn.ioloop.start()
        if self.error:
            raise RuntimeError(self.error)

    def _fail(self, text: str) -> None:
        if self.error is None:
            self.error = text
        self.conn.ioloop.stop()

    def _on_open_error(self, _conn, err) -> None:
        self._fail(f"connection failed: {err!r}")

    def _on_closed(self, _conn, reason) -> None:
        if self.running or self.error is None and not getattr(self, "closing", False):
            self._fail(f"connection closed: {reason!r}")
        self.conn.ioloop.stop()

    def _on_open(self, conn) -> None:
        conn.add_on_connection_blocked_callback(self._on_blocked)
        conn.add_on_connection_unblocked_callback(self._on_unblocked)
        self._pending = list(self.spec["channels"])
        for ch in self.spec["channels"]:
            conn.channel(channel_number=ch, on_open_callback=self._on_channel)

    def _on_blocked(self, *_):
        self.blocked = True
        self.blocked_events += 1

    def _on_unblocked(self, *_):
        self.blocked = False
        if self.kind == "producer" and self.running:
            self._schedule_pump()

    def _on_channel(self, ch) -> None:
        ch.add_on_close_callback(lambda c, reason: self._fail(f"channel closed: {reason!r}"))
        n = ch.channel_number
        self.channels[n] = ch
        spec = self.spec
        if self.kind == "producer":
            self.unconfirmed[n] = _Unconfirmed()
            self.next_seq[n] = 1
            if spec["confirm"] is not None:
                ch.confirm_delivery(ack_nack_callback=lambda f, n=n: self._on_confirm(n, f),
                                    callback=lambda _f, n=n: self._channel_ready(n))
            else:
                self._channel_ready(n)
        else:
            def consume(_f=None, ch=ch, n=n):
                ch.basic_consume(spec["queue"], self._on_message, auto_ack=spec["no_ack"],
                                 arguments=spec.get("arguments"),
                                 callback=lambda _f: self._channel_ready(n))
            if spec["prefetch"]:
                ch.basic_qos(prefetch_count=spec["prefetch"], callback=consume)
            else:
                consume()

    def _channel_ready(self, n: int) -> None:
        self._pending.remove(n)
        if not self._pending:
            self.conn.ioloop.stop()

    # -- run ------------------------------------------------------------------------------
    def run(self, t_start: float, t_measure: float, t_end: float) -> None:
        loop = self.conn.ioloop
        for label, t in (("start", t_start), ("measure", t_measure), ("end", t_end)):
            loop.call_later(max(0.0, t - time.monotonic()),
                            lambda label=label: self._mark(label))
        loop.start()
        if self.error:
            raise RuntimeError(self.error)

    def _counters(self) -> dict:
        if self.kind == "producer":
            return {"published": self.published, "confirmed": self.confirmed,
                    "nacked": self.nacked, "latency_samples": len(self.confirm_samples)}
        return {"consumed": self.consumed, "latency_samples": len(self.e2e_samples)}

    def _mark(self, label: str) -> None:
        now = time.monotonic()
        d = self._counters()
        d["label"] = label
        d["t"] = now
        self.snapshots.append(d)
        self.cpu.append((label, now, cpu_seconds()))
        self.measuring = label == "measure"
        if label == "start":
            self.running = True
            if self.kind == "producer":
                self._prepare_body()
                self._schedule_pump()
        elif label == "end":
            self.running = False
            self.conn.ioloop.stop()

    def _prepare_body(self) -> None:
        self.body = bytearray(make_body(self.spec["message_size"]))
        self.props = self.pika.BasicProperties(
            delivery_mode=2 if self.spec["persistent"] else None)

    def _schedule_pump(self, delay: float = 0.0) -> None:
        if not self.pump_scheduled:
            self.pump_scheduled = True
            self.conn.ioloop.call_later(delay, self._pump)

    def _pump(self) -> None:
        self.pump_scheduled = False
        if not self.running or self.blocked:
            return
        if self.conn._get_write_buffer_size() >= HIGH_WATER:
            self._schedule_pump(0.0005)
            return
        window = self.spec["confirm"]
        queue = self.spec["queue"]
        now_ns = time.monotonic_ns()
        self.body[0:8] = _TS.pack(now_ns)
        body = bytes(self.body)
        sent_any = False
        for n, ch in self.channels.items():
            k = BATCH
            if window is not None:
                unc = self.unconfirmed[n]
                k = min(BATCH, window - unc.outstanding)
                if k <= 0:
                    continue
                unc.add(self.next_seq[n], k, now_ns)
                self.next_seq[n] += k
            for _ in range(k):
                ch.basic_publish("", queue, body, self.props)
            self.published += k
            sent_any = True
        if sent_any:
            self._schedule_pump()
        # else: the window is full, a confirm will call _pump again

    def _on_confirm(self, n: int, frame) -> None:
        m = frame.method
        now_ns = time.monotonic_ns()
        if m.NAME == "Basic.Ack":
            self.confirmed += self.unconfirmed[n].confirm(
                m.delivery_tag, m.multiple, now_ns,
                self.confirm_samples if self.measuring else None)
        else:
            self.nacked += self.unconfirmed[n].confirm(m.delivery_tag, m.multiple, now_ns, None)
        if self.running:
            self._schedule_pump()

    def _on_message(self, ch, method, _props, body) -> None:
        self.consumed += 1
        if self.measuring:
            self.e2e_samples.append(time.monotonic_ns() - _TS.unpack_from(body, 0)[0])
        if not self.spec["no_ack"]:
            ch.basic_ack(method.delivery_tag)

    def close(self) -> None:
        if self.conn is None or self.conn.is_closed:
            return
        self.closing = True
        try:
            self.conn.close()
            self.conn.ioloop.call_later(3.0, self.conn.ioloop.stop)
            self.conn.ioloop.start()
        except Exception:
            pass

    def result(self) -> dict:
        return {"kind": self.kind, "spec": self.spec, "snapshots": self.snapshots,
                "blocked_events": self.blocked_events, "cpu": self.cpu, "pid": os.getpid(),
                "confirm_latency_ns": (self.confirm_samples.tobytes()
                                       if self.kind == "producer" and self.spec["confirm"]
                                       else None),
                "e2e_latency_ns": (self.e2e_samples.tobytes()
                                   if self.kind == "consumer" else None)}


def worker_main(target: AMQPTarget, codec_name: str, specs: list[dict], pipe) -> None:
    if len(specs) != 1:
        pipe.send(("error", "the pika worker runs exactly one connection"))
        return
    role = _PikaRole(specs[0].get("target", target), specs[0])   # consumers may go elsewhere
    try:
        role.setup()
        pipe.send(("ready", {"pid": os.getpid(), "codec": "pika"}))
        msg = pipe.recv()
        if msg[0] != "go":
            return
        role.run(*msg[1:])
        pipe.send(("result", [role.result()]))
    except BaseException as e:
        try:
            pipe.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        except Exception:
            pass
    finally:
        role.close()
        pipe.close()
