"""Stream queues (x-queue-type=stream) on one node, with pika.

What RabbitMQ's answers are (declare errors, consume refusals, offsets' header values) is
compared with RabbitMQ 3.10.8's in test_stream_compat.py; here the behaviour over time: many
consumers at their own positions, acks give credit back and never remove a message, publisher
confirms, retention by size at segment granularity, filtering, restart, the management API.
"""
from __future__ import annotations

import base64
import json
import os
import urllib.request

import pika
import pytest
from pika.exceptions import ConnectionClosedByBroker

from amqp_helpers import safe_close, unique, wait_until
from conftest import Broker, free_port

S = {"x-queue-type": "stream"}

# segment layout, chunk boundaries and the management fields are Leveret's
pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="Leveret's stream layout and API")


def _declare(ch, **args) -> str:
    q = unique("s")
    ch.queue_declare(q, durable=True, arguments=dict(S, **args))
    return q


def _publish(ch, q, n, start=0, size=0, headers=None):
    ch.confirm_delivery()
    for i in range(start, start + n):
        body = (f"m{i}".encode()).ljust(size, b".")
        ch.basic_publish("", q, body, pika.BasicProperties(delivery_mode=2, headers=headers))


def _consume(conn, q, n, offset="first", prefetch=50, ack=True, timeout=5.0, **args):
    """The first n deliveries of a new consumer: [(body, x-stream-offset)]."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got = []

    def on(c, method, props, body):
        got.append((body, props.headers["x-stream-offset"], method.delivery_tag))
        if ack:
            c.basic_ack(method.delivery_tag)
    ch.basic_consume(q, on, arguments={"x-stream-offset": offset, **args})
    wait_until(lambda: (conn.process_data_events(0.05), len(got) >= n)[1], timeout,
               message=f"{n} deliveries")
    return ch, got


def test_consumers_read_the_same_log_at_their_own_positions(conn):
    ch = conn.channel()
    q = _declare(ch)
    _publish(ch, q, 20)
    _, a = _consume(conn, q, 20, "first")
    _, b = _consume(conn, q, 10, 10)
    assert [o for _, o, _ in a] == list(range(20))
    assert [x for x, _, _ in b] == [f"m{i}".encode() for i in range(10, 20)]
    # acks removed nothing: a third consumer still reads everything
    _, c = _consume(conn, q, 20, "first")
    assert len(c) == 20
    assert ch.queue_declare(q, passive=True).method.message_count == 20


def test_a_fan_out_delivers_every_message_to_every_consumer_once_in_order(broker, conn):
    """Consumers at the log's end (each message encoded once as a delivery and shared), one
    that starts from `first` once half is published (a run of its own), small prefetches
    (a reader takes part of what another read), bodies of many sizes: each consumer gets
    offsets 0..n-1 once each, in order, with its body and its x-stream-offset header."""
    n = 600
    ch = conn.channel()
    q = _declare(ch)
    bodies = [f"m{i}:".encode().ljust(i * 7 % 3000, b"x") for i in range(n)]
    got: dict = {}

    def subscribe(tag, prefetch):
        cch = conn.channel()
        cch.basic_qos(prefetch_count=prefetch)
        got[tag] = []

        def on(c, method, props, body):
            got[tag].append((props.headers["x-stream-offset"], body))
            c.basic_ack(method.delivery_tag)
        cch.basic_consume(q, on, consumer_tag=tag, arguments={"x-stream-offset": "first"})

    for tag, prefetch in (("a", 7), ("b", 50), ("c", 300)):
        subscribe(tag, prefetch)
    pub = broker.connection()
    try:
        pch = pub.channel()  # (no confirms: publishes arrive in batches, chunks of many)
        for i, body in enumerate(bodies):
            pch.basic_publish("", q, body, pika.BasicProperties(delivery_mode=2))
            if i == n // 2:
                pub.process_data_events(0.2)
                conn.process_data_events(0.2)
                subscribe("late", 20)
    finally:
        safe_close(pub)
    wait_until(lambda: (conn.process_data_events(0.05),
                        all(len(v) >= n for v in got.values()))[1], 30,
               message=f"{n} deliveries to each consumer")
    conn.process_data_events(0.3)
    for tag, deliveries in got.items():
        assert [o for o, _ in deliveries] == list(range(n)), tag
        assert [b for _, b in deliveries] == bodies, tag


def test_ack_gives_credit_back_and_a_new_message_reaches_a_next_consumer(conn):
    ch = conn.channel()
    q = _declare(ch)
    _publish(ch, q, 6)
    cch, got = _consume(conn, q, 2, "first", prefetch=2, ack=False)
    conn.process_data_events(0.3)
    assert len(got) == 2  # prefetch 2: nothing more before an ack
    cch.basic_ack(got[1][2], multiple=True)
    wait_until(lambda: (conn.process_data_events(0.05), len(got) >= 4)[1], 5)
    conn.process_data_events(0.3)
    assert [o for _, o, _ in got] == [0, 1, 2, 3]
    # "next": only what is published after the consumer came
    _, nxt = _consume(conn, q, 0, "next")
    _publish(ch, q, 1, start=6)
    wait_until(lambda: (conn.process_data_events(0.05), len(nxt) >= 1)[1], 5)
    assert nxt[0][:2] == (b"m6", 6)


def test_nack_closes_the_connection_and_keeps_the_message(broker):
    conn = broker.connection()
    ch = conn.channel()
    q = _declare(ch)
    _publish(ch, q, 1)
    cch, got = _consume(conn, q, 1, "first", ack=False)
    cch.basic_nack(got[0][2], requeue=True)
    with pytest.raises(ConnectionClosedByBroker) as e:
        conn.process_data_events(1.0)
    assert e.value.reply_code == 540
    conn = broker.connection()
    try:
        _, again = _consume(conn, q, 1, "first")
        assert again[0][:2] == (b"m0", 0)
    finally:
        safe_close(conn)


def test_retention_drops_whole_segments_by_size(conn):
    ch = conn.channel()
    # 1,000-byte messages, segments of 5,000 bytes, at most 12,000 bytes kept
    q = _declare(ch, **{"x-stream-max-segment-size-bytes": 5000, "x-max-length-bytes": 12000})
    _publish(ch, q, 40, size=1000)
    _, got = _consume(conn, q, 1, "first")
    first = got[0][1]
    # whole segments of 5 went, the newest stay: the log holds at most 12,000 bytes plus
    # the segment being written
    assert first % 5 == 0 and 40 - first <= 15 and first > 0


def test_retention_from_a_policy(broker, conn):
    """The policy's max-length-bytes and stream-max-segment-size-bytes apply as the
    arguments would (rabbit_stream_queue: the policy's value wins)."""
    name = unique("spol")
    broker.ctl("set_policy", name, f"^{name}", json.dumps(
        {"max-length-bytes": 12000, "stream-max-segment-size-bytes": 5000}),
        "--apply-to", "queues")
    try:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments=S)
        _publish(ch, name, 40, size=1000)
        _, got = _consume(conn, name, 1, "first")
        assert got[0][1] % 5 == 0 and 0 < got[0][1] and 40 - got[0][1] <= 15
    finally:
        broker.ctl("clear_policy", name)


def test_filter_skips_chunks_without_the_value(conn):
    ch = conn.channel()
    q = _declare(ch)
    for colour in ("red", "blue", "red"):
        _publish(ch, q, 1, headers={"x-stream-filter-value": colour})
    _publish(ch, q, 1)  # no filter value
    _, blue = _consume(conn, q, 1, "first", **{"x-stream-filter": "blue"})
    conn.process_data_events(0.3)
    assert [o for _, o, _ in blue] == [1]
    _, un = _consume(conn, q, 2, "first", **{"x-stream-filter": "blue",
                                             "x-stream-match-unfiltered": True})
    conn.process_data_events(0.3)
    assert [o for _, o, _ in un] == [1, 3]


@pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")), reason="restarts its own node")
def test_stream_survives_kill9__C8(tmp_path):
    broker = Broker.start_leveret(tmp_path)
    conn = broker.connection()
    ch = conn.channel()
    q = _declare(ch)
    _publish(ch, q, 5)  # confirmed: on disk
    safe_close(conn)
    broker = broker.restart(tmp_path, "kill9")
    conn = broker.connection()
    try:
        ch = conn.channel()
        ch.queue_declare(q, durable=True, arguments=S)
        _publish(ch, q, 1, start=5)
        _, got = _consume(conn, q, 6, "first")
        assert [o for _, o, _ in got] == list(range(6))
    finally:
        safe_close(conn)
        broker.stop()


@pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")), reason="starts its own node")
def test_management_api_prometheus_and_definitions(tmp_path):
    """The API says type stream, lists its segments and each consumer's offset; Prometheus
    counts its messages; definitions export and import it with its arguments."""
    from test_management import STATS_MS, Api, scrape, wait_for
    port, metrics_port = free_port(), free_port()
    (tmp_path / "leveret.toml").write_text(f"collect_statistics_interval = {STATS_MS}\n")
    broker = Broker.start_leveret(tmp_path, "--management-port", str(port), "--config",
                                  str(tmp_path / "leveret.toml"), "--prometheus-port",
                                  str(metrics_port))
    broker.metrics_port = metrics_port
    http = Api(port)
    conn = broker.connection()
    try:
        ch = conn.channel()
        ch.queue_declare("s-api", durable=True, arguments=dict(
            S, **{"x-stream-max-segment-size-bytes": 2000, "x-max-age": "7D"}))
        _publish(ch, "s-api", 10, size=1000)
        _consume(conn, "s-api", 3, "first", prefetch=3, ack=False, **{})
        q = wait_for("the stream's sample", lambda: (
            r := http("GET", "/api/queues/%2F/s-api")[1]).get("consumers") == 1 and r)
        assert (q["type"], q["messages"], q["messages_unacknowledged"]) == ("stream", 10, 3)
        assert q["leader"] == q["node"] and q["members"] == [q["node"]]
        st = q["stream"]
        assert [(s["first_offset"], s["last_offset"]) for s in st["segments"]] == [
            (0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
        assert st["committed_offset"] == 9 and st["first_offset"] == 0
        assert [(r["offset"], r["unacked"]) for r in st["readers"]] == [(3, 3)]
        per = scrape(broker, "/metrics/per-object")
        assert per[("rabbitmq_queue_messages", (("queue", "s-api"), ("vhost", "/")))] == 10
        status, defs = http("GET", "/api/definitions")
        mine = [x for x in defs["queues"] if x["name"] == "s-api"]
        assert mine and mine[0]["arguments"]["x-queue-type"] == "stream"
        mine[0]["name"] = "s-imported"
        status, _ = http("POST", "/api/definitions", {"queues": mine})
        assert status in (200, 201, 204)
        ch.queue_declare("s-imported", durable=True, arguments=dict(
            S, **{"x-stream-max-segment-size-bytes": 2000, "x-max-age": "7D"}))
        _publish(ch, "s-imported", 1)
        _, got = _consume(conn, "s-imported", 1, "first")
        assert got[0][1] == 0
    finally:
        safe_close(conn)
        broker.stop()


@pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")), reason="reads Leveret's event log")
def test_lifecycle_events_carry_the_offset(tmp_path):
    """A stream's message is enqueued and synced once, at its offset; each consumer's delivery
    and ack are events of their own naming that offset."""
    import glob
    from actors import events
    broker = Broker.start_leveret(tmp_path, "--events", "full")
    try:
        conn = broker.connection()
        ch = conn.channel()
        q = _declare(ch)
        _publish(ch, q, 2)
        _consume(conn, q, 2, "first")
        _consume(conn, q, 2, "first")
        safe_close(conn)
    finally:
        broker.stop()
    seen = []
    for path in glob.glob(os.path.join(broker.data_dir / "events", "*.events")):
        _, it = events.read_file(path)
        seen += [(e[0], e[4]) for e in it if isinstance(e[4], dict) and e[4].get("queue") == q]
    by_kind = {}
    for kind, fields in seen:
        by_kind.setdefault(kind, []).append(fields.get("offset"))
    assert sorted(by_kind["enqueued"]) == [0, 1]
    assert sorted(by_kind["synced"]) == [0, 1]
    assert sorted(by_kind["delivered"]) == [0, 0, 1, 1]
    assert sorted(by_kind["acked"]) == [0, 0, 1, 1]
