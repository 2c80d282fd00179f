"""Stream queue probes: the same AMQP conversations against RabbitMQ 3.10 and Leveret.

    python -m tools.stream_probes            # capture RabbitMQ 3.10's answers into
                                             # tests/data/rabbitmq-3.10-streams.json
    python -m tools.stream_probes --url amqp://guest:guest@127.0.0.1:5672/%2F --print

Each probe opens its own connection, runs one conversation with pika and returns what the
client saw as plain JSON (a declare-ok's counts, a channel or connection close's code and
text, the bodies and ``x-stream-offset`` headers a consumer received), so that
tests/integration/test_stream_compat.py can compare Leveret's answers with the stored ones.
The capture starts a private RabbitMQ node (bench/refbroker.py) on spare loopback ports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

import pika
import pika.exceptions as pex

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "rabbitmq-3.10-streams.json"
STREAM = {"x-queue-type": "stream"}


def _closed(e: Exception) -> dict:
    kind = "connection" if isinstance(e, pex.ConnectionClosedByBroker) else "channel"
    return {"closed": kind, "code": e.reply_code, "text": e.reply_text}


class Probe:
    """One broker's connection factory; each probe gets a fresh connection."""

    def __init__(self, url: str, prefix: str):
        self.params = pika.URLParameters(url)
        self.prefix = prefix  # queue name prefix: probes do not meet earlier runs' queues

    def q(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def run(self, body: Callable) -> dict:
        conn = pika.BlockingConnection(self.params)
        try:
            ch = conn.channel()
            try:
                return body(ch)
            except (pex.ChannelClosedByBroker, pex.ConnectionClosedByBroker) as e:
                return _closed(e)
        finally:
            if conn.is_open:
                try:
                    conn.close()
                except pex.AMQPError:
                    pass

    def cleanup(self, name: str) -> None:
        def body(ch):
            ch.queue_delete(name)
            return {}
        self.run(body)


def _declare(p: Probe, name: str, durable=True, exclusive=False, auto_delete=False,
             **args) -> dict:
    def body(ch):
        ok = ch.queue_declare(p.q(name), durable=durable, exclusive=exclusive,
                              auto_delete=auto_delete, arguments=dict(STREAM, **args))
        return {"declare_ok": [ok.method.message_count, ok.method.consumer_count]}
    out = p.run(body)
    p.cleanup(p.q(name))
    return out


def _publish(ch, queue: str, bodies) -> None:
    """One message at a time, each confirmed before the next: one chunk each on both
    brokers (a chunk is what the log writes at once)."""
    ch.confirm_delivery()
    for b in bodies:
        ch.basic_publish("", queue, b, pika.BasicProperties(delivery_mode=2))


def _consume(p: Probe, name: str, offset, n_published: int = 5, expect: int | None = None,
             prefetch: int = 10, timeout: float = 3.0) -> dict:
    """Publish n messages, consume from `offset` (None: no argument), return what came."""
    q = p.q(name)

    def body(ch):
        ch.queue_declare(q, durable=True, arguments=STREAM)
        _publish(ch, q, [f"m{i}".encode() for i in range(n_published)])
        ch.basic_qos(prefetch_count=prefetch)
        got = []
        args = {} if offset is None else {"x-stream-offset": offset}

        def on(c, method, props, b):
            got.append({"body": b.decode(), "offset": (props.headers or {}).get("x-stream-offset"),
                        "redelivered": method.redelivered})
            c.basic_ack(method.delivery_tag)
        ch.basic_consume(q, on, arguments=args)
        deadline = time.monotonic() + timeout
        want = n_published if expect is None else expect
        while len(got) < want and time.monotonic() < deadline:
            ch.connection.process_data_events(time_limit=0.1)
        ch.connection.process_data_events(time_limit=0.3)  # nothing more should come
        return {"deliveries": got}
    out = p.run(body)
    p.cleanup(q)
    return out


def _refused_consume(p: Probe, name: str, prefetch: int = 10, global_qos: bool = False,
                     no_ack: bool = False, then_global: int = 0, **args) -> dict:
    q = p.q(name)

    def body(ch):
        ch.queue_declare(q, durable=True, arguments=STREAM)
        if prefetch:
            ch.basic_qos(prefetch_count=prefetch, global_qos=global_qos)
        if then_global:  # a channel-wide limit on top of the consumer's
            ch.basic_qos(prefetch_count=then_global, global_qos=True)
        ch.basic_consume(q, lambda *a: None, auto_ack=no_ack, arguments=args)
        return {"consume_ok": True}
    out = p.run(body)
    p.cleanup(q)
    return out


def _get(p: Probe) -> dict:
    q = p.q("get")

    def body(ch):
        ch.queue_declare(q, durable=True, arguments=STREAM)
        m, _, _ = ch.basic_get(q)
        return {"get": m is not None}
    out = p.run(body)
    p.cleanup(q)
    return out


def _settle(p: Probe, how: str) -> dict:
    """A delivery settled by basic.nack(requeue) / basic.reject / basic.recover: what the
    client sees."""
    q = p.q("settle-" + how)

    def body(ch):
        ch.queue_declare(q, durable=True, arguments=STREAM)
        _publish(ch, q, [b"a", b"b"])
        ch.basic_qos(prefetch_count=1)
        seen = []

        def on(c, method, props, b):
            seen.append({"body": b.decode(), "redelivered": method.redelivered,
                         "offset": (props.headers or {}).get("x-stream-offset")})
            if how == "nack-requeue":
                c.basic_nack(method.delivery_tag, requeue=True)
            elif how == "nack":
                c.basic_nack(method.delivery_tag, requeue=False)
            elif how == "recover":
                c.basic_recover(requeue=True)
            else:
                c.basic_reject(method.delivery_tag, requeue=True)
        ch.basic_consume(q, on, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            ch.connection.process_data_events(time_limit=0.1)
        return {"deliveries": seen, "open": ch.is_open}
    try:
        out = p.run(body)
    finally:
        p.cleanup(q)
    return out


def _redeclare(p: Probe, first: dict, second: dict) -> dict:
    q = p.q("redeclare")

    def body(ch):
        ch.queue_declare(q, durable=True, arguments=dict(STREAM, **first))
        ok = ch.queue_declare(q, durable=True, arguments=dict(STREAM, **second))
        return {"declare_ok": [ok.method.message_count, ok.method.consumer_count]}
    out = p.run(body)
    p.cleanup(q)
    return out


def _purge(p: Probe) -> dict:
    q = p.q("purge")

    def body(ch):
        ch.queue_declare(q, durable=True, arguments=STREAM)
        ok = ch.queue_purge(q)
        return {"purge_ok": ok.method.message_count}
    out = p.run(body)
    p.cleanup(q)
    return out


def probes(p: Probe) -> dict:
    """Every probe's answer, by name."""
    ts_past = 1_000_000  # an AMQP timestamp (seconds) long before any chunk
    ts_future = int(time.time()) + 3600
    return {
        "declare_ok": _declare(p, "ok", **{"x-max-length-bytes": 1_000_000, "x-max-age": "7D",
                                            "x-stream-max-segment-size-bytes": 100_000,
                                            "x-initial-cluster-size": 1}),
        "declare_non_durable": _declare(p, "nd", durable=False),
        "declare_exclusive": _declare(p, "ex", exclusive=True),
        "declare_auto_delete": _declare(p, "ad", auto_delete=True),
        "declare_max_age_unit": _declare(p, "age1", **{"x-max-age": "1x"}),
        "declare_max_age_zero": _declare(p, "age2", **{"x-max-age": "0D"}),
        "declare_max_age_int": _declare(p, "age3", **{"x-max-age": 10}),
        "declare_segment_too_large": _declare(
            p, "seg1", **{"x-stream-max-segment-size-bytes": 3_000_000_001}),
        "declare_segment_negative": _declare(p, "seg2",
                                             **{"x-stream-max-segment-size-bytes": -1}),
        "declare_cluster_size_zero": _declare(p, "ics", **{"x-initial-cluster-size": 0}),
        "declare_max_length_bytes_negative": _declare(p, "mlb", **{"x-max-length-bytes": -5}),
        "declare_message_ttl": _declare(p, "ttl", **{"x-message-ttl": 1000}),
        "declare_max_length": _declare(p, "ml", **{"x-max-length": 10}),
        "declare_max_priority": _declare(p, "prio", **{"x-max-priority": 5}),
        "declare_dlx": _declare(p, "dlx", **{"x-dead-letter-exchange": "dlx"}),
        "declare_expires": _declare(p, "exp", **{"x-expires": 10000}),
        "declare_overflow": _declare(p, "ovf", **{"x-overflow": "reject-publish"}),
        "declare_sac": _declare(p, "sac", **{"x-single-active-consumer": True}),
        "declare_quorum_arg": _declare(p, "qgs", **{"x-quorum-initial-group-size": 3}),
        "consume_no_prefetch": _refused_consume(p, "c1", prefetch=0),
        "consume_no_ack": _refused_consume(p, "c2", no_ack=True),
        "consume_global_qos": _refused_consume(p, "c3", global_qos=True),
        "consume_bad_offset": _refused_consume(p, "c4", **{"x-stream-offset": "abc"}),
        "consume_priority": _refused_consume(p, "c5", **{"x-priority": 3}),
        "consume_bad_offset_unit": _refused_consume(p, "c6", **{"x-stream-offset": "1x"}),
        "consume_consumer_and_global_qos": _refused_consume(p, "c7", then_global=5),
        "redeclare_same": _redeclare(p, {"x-max-age": "1D"}, {"x-max-age": "1D"}),
        "redeclare_other_age": _redeclare(p, {"x-max-age": "1D"}, {"x-max-age": "2D"}),
        "redeclare_classic": _redeclare(p, {}, {"x-queue-type": "classic"}),
        "get": _get(p),
        "purge": _purge(p),
        "offset_first": _consume(p, "o1", "first"),
        "offset_last": _consume(p, "o2", "last", expect=1),
        "offset_next": _consume(p, "o3", "next", expect=0, timeout=0.5),
        "offset_default": _consume(p, "o4", None, expect=0, timeout=0.5),
        "offset_long": _consume(p, "o5", 2, expect=3),
        "offset_beyond": _consume(p, "o6", 99, expect=0, timeout=0.5),
        "offset_ts_past": _consume(p, "o7", ts_past_ts(ts_past)),
        "offset_ts_future": _consume(p, "o8", ts_past_ts(ts_future), expect=0, timeout=0.5),
        "offset_interval": _consume(p, "o9", "1h"),
        "prefetch_bounds": _consume(p, "pf", "first", n_published=5, prefetch=2),
        "nack_requeue": _settle(p, "nack-requeue"),
        "nack": _settle(p, "nack"),
        "reject_requeue": _settle(p, "reject-requeue"),
        "recover": _settle(p, "recover"),
    }


def ts_past_ts(seconds: int):
    """An AMQP timestamp field value (pika sends a datetime as one)."""
    import datetime
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).replace(
        tzinfo=None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="probe this broker instead of starting RabbitMQ")
    ap.add_argument("--print", action="store_true", help="print instead of writing the file")
    a = ap.parse_args(argv)
    if a.url:
        out = probes(Probe(a.url, "probe"))
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from bench.refbroker import RabbitMQNode
        with RabbitMQNode() as rmq:
            out = probes(Probe(rmq.url, "probe"))
            out["_version"] = rmq.version()
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if a.print:
        print(text)
    else:
        OUT.write_text(text)
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
