"""Connection negotiation: server properties, tune values, heartbeats, channels, large messages."""
from __future__ import annotations

import decimal
import hashlib
import os
import time

import pika
import pytest
from pamqp import commands

import rawamqp
from amqp_helpers import Consumer, declare, get, get_all, pump, safe_close, unique, wait_count

EXPECTED_CAPABILITIES = [
    "publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify",
    "connection.blocked", "authentication_failure_close", "per_consumer_qos",
]


@pytest.fixture
def raw(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    yield c
    c.close()


def test_connection_start_server_properties(raw):
    raw.send(rawamqp.PROTOCOL_HEADER)
    start = raw.expect(commands.Connection.Start, channel=0)
    assert (start.version_major, start.version_minor) == (0, 9)
    mechanisms = start.mechanisms.split()
    assert "PLAIN" in mechanisms and "AMQPLAIN" in mechanisms
    assert "en_US" in start.locales.split()
    props = start.server_properties
    for key in ("product", "version", "platform"):
        assert key in props, props
    caps = props["capabilities"]
    for cap in EXPECTED_CAPABILITIES:
        assert caps.get(cap) is True, f"capability {cap} missing: {caps}"


def test_server_properties_seen_by_pika(conn):
    caps = conn._impl.server_capabilities
    for cap in EXPECTED_CAPABILITIES:
        assert caps.get(cap) is True, caps
    assert conn.publisher_confirms_supported and conn.basic_nack_supported
    assert conn.consumer_cancel_notify_supported and conn.exchange_exchange_bindings_supported


def test_tune_values(broker, raw):
    raw.send(rawamqp.PROTOCOL_HEADER)
    raw.expect(commands.Connection.Start)
    raw.send_method(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN",
        response=rawamqp.plain_response(broker.user, broker.password)))
    tune = raw.expect(commands.Connection.Tune, channel=0)
    assert tune.channel_max == 2047
    assert tune.frame_max == 131072
    assert tune.heartbeat == 60


def test_negotiated_values_with_pika(broker):
    c = broker.connection(heartbeat=30, frame_max=8192, channel_max=10)
    try:
        params = c._impl.params
        assert params.frame_max == 8192 and params.channel_max == 10 and params.heartbeat == 30
        ch = c.channel()
        q = declare(ch, unique("q"), auto_delete=True)
        body = os.urandom(50_000)            # several 8 kB body frames each way
        ch.basic_publish("", q, body)
        assert get(ch, q, auto_ack=True).body == body
    finally:
        safe_close(c)


def test_small_frame_max_splits_deliveries(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost, frame_max=4096)
        c.open_channel(1)
        q = unique("q")
        c.rpc(1, commands.Queue.Declare(queue=q, auto_delete=True), commands.Queue.DeclareOk)
        body = os.urandom(20_000)
        c.publish(1, "", q, body)
        c.send_method(1, commands.Basic.Get(queue=q, no_ack=True))
        got = c.read_command()
        assert got.body == body
        assert len(got.body_frames) >= 5 and max(got.body_frames) <= 4096 - 8
    finally:
        c.close()


def test_frame_max_below_minimum_refused(broker):
    """tune-ok with frame_max below 4096 (and not 0) is refused with connection.close."""
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        c.send_method(0, commands.Connection.StartOk(
            client_properties={}, response=rawamqp.plain_response(broker.user, broker.password)))
        c.expect(commands.Connection.Tune)
        c.send_method(0, commands.Connection.TuneOk(channel_max=0, frame_max=1024, heartbeat=0))
        c.send_method(0, commands.Connection.Open(virtual_host=broker.vhost))
        frames = [f for _, f in c.read_until_closed(timeout=5)]
        # RabbitMQ just drops the socket here; a connection.close is fine too
        assert not any(isinstance(f, commands.Connection.OpenOk) for f in frames), frames
        for f in frames:
            if isinstance(f, commands.Connection.Close):
                assert f.reply_code in (501, 503, 530), f.reply_text
    finally:
        c.close()


def test_large_message_round_trip(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), auto_delete=True)
    body = os.urandom(1024 * 1024)
    ch.confirm_delivery()
    ch.basic_publish("", q, body, pika.BasicProperties(content_type="application/octet-stream"))
    c = Consumer(conn, ch, q)
    [d] = c.wait_for(1, timeout=10)
    assert hashlib.sha256(d.body).digest() == hashlib.sha256(body).digest() and len(d.body) == len(body)
    assert d.properties.content_type == "application/octet-stream"
    ch.basic_ack(d.delivery_tag)


def test_large_message_arrives_in_several_body_frames(broker):
    c = rawamqp.RawClient(broker.host, broker.port, timeout=10)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        q = unique("q")
        c.rpc(1, commands.Queue.Declare(queue=q, auto_delete=True), commands.Queue.DeclareOk)
        body = os.urandom(1024 * 1024)
        c.publish(1, "", q, body)     # sent as 9 body frames of at most frame_max - 8
        c.rpc(1, commands.Basic.Consume(queue=q, no_ack=True), commands.Basic.ConsumeOk)
        got = c.read_command()
        assert got.body == body
        assert len(got.body_frames) >= 8 and max(got.body_frames) <= 131072 - 8
    finally:
        c.close()


def test_empty_body_round_trip(ch):
    q = declare(ch, unique("q"), auto_delete=True)
    ch.basic_publish("", q, b"", pika.BasicProperties(message_id="empty"))
    d = get(ch, q, auto_ack=True)
    assert d.body == b"" and d.properties.message_id == "empty"


def test_all_basic_properties_round_trip(ch):
    q = declare(ch, unique("q"), auto_delete=True)
    props = pika.BasicProperties(
        content_type="text/plain", content_encoding="utf-8",
        headers={"s": "str", "i": 42, "neg": -7, "big": 2 ** 40, "b": True, "f": decimal.Decimal("1.50"),
                 "n": None, "l": [1, "two", False], "t": {"nested": "yes"}, "bytes": b"\x00\x01"},
        delivery_mode=2, priority=3, correlation_id="corr", reply_to="reply-q", expiration="60000",
        message_id="mid", timestamp=1_700_000_000, type="kind", user_id="guest"
        if ch.connection._impl.params.credentials.username == "guest" else None,
        app_id="app", cluster_id="")
    ch.basic_publish("", q, b"body", props)
    p = get(ch, q, auto_ack=True).properties
    for field in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                  "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id"):
        assert getattr(p, field) == getattr(props, field), field
    h = p.headers
    assert h["s"] == "str" and h["i"] == 42 and h["neg"] == -7 and h["big"] == 2 ** 40
    assert h["b"] is True and h["f"] == decimal.Decimal("1.50") and h["n"] is None
    assert list(h["l"]) == [1, "two", False] and h["t"] == {"nested": "yes"}
    assert h["bytes"] == b"\x00\x01"


def test_many_channels_on_one_connection(conn):
    chans = [conn.channel() for _ in range(50)]
    q = declare(chans[0], unique("q"), auto_delete=True)
    for i, c in enumerate(chans):
        c.basic_publish("", q, str(i).encode())
    for c in chans[10:20]:
        c.close()
    # publishes from 50 channels reach the queue in no particular order relative to each other
    wait_count(conn, q, 50)
    got = get_all(chans[-1], q)
    assert sorted(int(d.body) for d in got) == list(range(50))


def test_channel_number_reuse_after_close(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        for _ in range(3):
            c.open_channel(7)
            c.send_method(7, commands.Channel.Close(reply_code=200, reply_text="bye",
                                                     class_id=0, method_id=0))
            c.expect(commands.Channel.CloseOk, channel=7)
    finally:
        c.close()


def test_socket_left_to_the_client_after_close_ok__E5(broker, conn):
    """rabbit_reader's `closed` state: after connection.close-ok the socket is the client's to
    close (the broker closes it only after the heartbeat timeout, at most 30 s). A client whose
    other threads are still publishing when it sends connection.close meets no reset (amqp091-go
    reported that as a 501), gets its close-ok, and what it sent after the close is dropped."""
    q = unique("q")
    ch = conn.channel()
    ch.queue_declare(q)
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye",
                                                  class_id=0, method_id=0))
        # more than the socket buffers hold: the broker must go on reading after close-ok
        for _ in range(40):
            c.publish(1, "", q, b"x" * 250_000)
        c.expect(commands.Connection.CloseOk, channel=0)
        with pytest.raises(rawamqp.Timeout):
            c.read_frame(timeout=1.0)   # nothing more comes, and the socket stays open
    finally:
        c.close()
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.queue_delete(q)


def test_connection_close_handshake(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye",
                                                  class_id=0, method_id=0))
        c.expect(commands.Connection.CloseOk, channel=0)
        # the server may close the socket now or leave that to the client; nothing else comes
        try:
            assert c.read_until_closed(timeout=0.5) == []
        except rawamqp.Timeout:
            pass
    finally:
        c.close()


def test_heartbeats_sent_by_server__E4(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost, heartbeat=1)
        t0 = time.monotonic()
        beats = 0
        while time.monotonic() - t0 < 2.6:
            c.send(rawamqp.frame(rawamqp.FRAME_HEARTBEAT, 0, b""))
            try:
                ch, f = c.read_frame(timeout=0.4)
            except rawamqp.Timeout:
                continue
            assert isinstance(f, rawamqp.Heartbeat) and ch == 0
            beats += 1
        assert beats >= 2
    finally:
        c.close()


def test_pika_heartbeat_keeps_connection_alive__E4(broker):
    c = broker.connection(heartbeat=1)
    try:
        pump(c, 3.2)                  # pika answers heartbeats while pumping
        assert c.is_open
        c.channel().queue_declare("", exclusive=True)
    finally:
        safe_close(c)
