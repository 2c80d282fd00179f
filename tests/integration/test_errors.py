"""Errors and bad input: E1-E5 (raw frames where the wire matters)."""
from __future__ import annotations

import socket
import struct
import time

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker

import rawamqp
from amqp_helpers import Consumer, count, count_in, declare, get, get_all, publish, safe_close, \
    unique, wait_count, wait_until


def _read_to_eof(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            d = sock.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            return data
        except socket.timeout:
            break
        if not d:
            return data
        data += d
    raise AssertionError(f"server did not close the connection; got {data!r}")


# -- E1 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("header", [
    b"HTTP/1.1 GET /\r\n\r\n",
    b"AMQP\x00\x00\x09\x02",     # unknown 0-9-x revision
    b"AMQP\x00\x01\x00\x00",     # AMQP 1.0 (no 1.0 support)
    b"AMQP\x03\x01\x00\x00",     # AMQP 1.0 SASL layer
    b"amqp\x00\x00\x09\x01",
    b"\x00" * 8,
], ids=["http", "0-9-2", "amqp1.0", "amqp1.0-sasl", "lowercase", "zeros"])
def test_bad_protocol_header_gets_server_header_then_close__E1(broker, header):
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(header)
        data = _read_to_eof(s)
    assert data == b"AMQP\x00\x00\x09\x01"
    assert broker.alive()


def test_good_header_after_bad_one_on_new_connection__E1(broker):
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(b"GARBAGE!")
        assert _read_to_eof(s) == b"AMQP\x00\x00\x09\x01"
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
    finally:
        c.close()


# -- E2 ------------------------------------------------------------------------------------------
def _assert_connection_close(c: rawamqp.RawClient, code: int, timeout: float = 5.0):
    close = c.expect_connection_close(timeout=timeout)
    assert close.reply_code == code, f"expected {code}, got {close.reply_code} {close.reply_text!r}"
    return close


def test_bad_frame_end_is_frame_error__E2(raw_factory):
    c = raw_factory()
    payload = rawamqp.method_payload(commands.Queue.Declare(queue=unique("q")))
    c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, payload, end=0x00))
    close = _assert_connection_close(c, 501)
    assert close.reply_text.startswith("FRAME_ERROR")


@pytest.mark.parametrize("ftype", [0, 4, 9, 0x41, 0xFF])
def test_unknown_frame_type_is_frame_error__E2(raw_factory, ftype):
    c = raw_factory()
    c.send(rawamqp.frame(ftype, 1, b"abc"))
    _assert_connection_close(c, 501)


def test_frame_larger_than_frame_max_is_frame_error__E2(raw_factory):
    c = raw_factory(frame_max=131072)
    # only the frame header: the size alone must be refused, without waiting for the payload
    c.send(struct.pack(">BHI", rawamqp.FRAME_METHOD, 1, 2 * 131072))
    _assert_connection_close(c, 501)


def test_frame_larger_than_small_negotiated_frame_max__E2(raw_factory):
    c = raw_factory(frame_max=4096)
    body = b"x" * 10000
    c.send(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=unique("q")))
           + rawamqp.content_frames(1, body, frame_max=131072))   # one 10 kB body frame
    _assert_connection_close(c, 501)


@pytest.mark.parametrize("ftype,channel,size,frame_max", [
    (rawamqp.FRAME_BODY, 1, 8000, 4096), (rawamqp.FRAME_METHOD, 0, 4097, 4096),
    (rawamqp.FRAME_HEADER, 3, 131073, 131072)])
def test_frame_too_large_has_rabbitmq_text__E2(raw_factory, ftype, channel, size, frame_max):
    """rabbit_reader:handle_input/3 refuses the frame on its header (no payload read yet):
    frame_error's "type ~p, ~s octets = ~p: ~p" with {frame_too_large, Size, FrameMax - 8}."""
    c = raw_factory(frame_max=frame_max)
    c.send(struct.pack(">BHI", ftype, channel, size))
    close = _assert_connection_close(c, 501)
    assert close.reply_text == (f"FRAME_ERROR - type {ftype}, all octets = <<>>: "
                                f"{{frame_too_large,{size},{frame_max - 8}}}")
    assert (close.class_id, close.method_id) == (0, 0)


def test_heartbeat_frame_with_payload_is_frame_error__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.frame(rawamqp.FRAME_HEARTBEAT, 0, b"xx"))
    _assert_connection_close(c, 501)


def test_malformed_method_arguments__E2(raw_factory):
    """RabbitMQ answers a method whose arguments do not decode with 501 FRAME_ERROR ("cannot
    decode"), not 502 SYNTAX_ERROR; both are connection errors. See docs/behaviour-tests.md."""
    c = raw_factory()
    payload = rawamqp.method_payload(commands.Queue.Declare(queue="abcdefgh"))
    c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, payload[:8]))  # truncated inside the queue name
    close = c.expect_connection_close()
    assert close.reply_code in (501, 502), close.reply_text


def test_method_frame_too_short_for_ids__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, b"\x00\x32"))
    close = c.expect_connection_close()
    assert close.reply_code in (501, 502), close.reply_text


def test_unknown_method_closes_connection__E2(broker, raw_factory):
    """RabbitMQ drops the TCP connection without connection.close for an unknown class/method id;
    a connection.close with 540 NOT_IMPLEMENTED (or 503) is also accepted."""
    c = raw_factory()
    c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, struct.pack(">HH", 60, 99) + b"\x00" * 8))
    try:
        close = c.expect_connection_close()
    except AssertionError:
        assert c.eof   # closed without a close frame
    else:
        assert close.reply_code in (540, 503, 501), close.reply_text


def test_method_on_unopened_channel_is_channel_error__E2(raw_factory):
    c = raw_factory()
    c.send_method(5, commands.Queue.Declare(queue=unique("q")))
    close = _assert_connection_close(c, 504)
    assert close.reply_text.startswith("CHANNEL_ERROR")


def test_ack_on_unopened_channel_is_channel_error__E2(raw_factory):
    c = raw_factory()
    c.send_method(7, commands.Basic.Ack(delivery_tag=1))
    _assert_connection_close(c, 504)


def test_second_channel_open_is_channel_error__E2(raw_factory):
    c = raw_factory()
    c.send_method(1, commands.Channel.Open())
    _assert_connection_close(c, 504)


def test_channel_method_on_channel_zero_is_channel_error__E2(raw_factory):
    c = raw_factory()
    c.send_method(0, commands.Queue.Declare(queue=unique("q")))
    _assert_connection_close(c, 504)


def test_connection_method_on_channel_is_command_invalid__E2(raw_factory):
    c = raw_factory()
    c.send_method(1, commands.Connection.Open(virtual_host="/"))
    close = _assert_connection_close(c, 503)
    assert close.reply_text.startswith("COMMAND_INVALID")


def test_unknown_exchange_type_is_command_invalid__E2(raw_factory):
    c = raw_factory()
    c.send_method(1, commands.Exchange.Declare(exchange=unique("x"), exchange_type="no-such-type"))
    _assert_connection_close(c, 503)


def test_body_without_header_is_unexpected_frame__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.frame(rawamqp.FRAME_BODY, 1, b"hello"))
    close = _assert_connection_close(c, 505)
    assert close.reply_text.startswith("UNEXPECTED_FRAME")


def test_header_without_content_method_is_unexpected_frame__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.content_frames(1, b"hello"))
    _assert_connection_close(c, 505)


def test_method_while_content_expected_is_unexpected_frame__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key="x"))
           + rawamqp.method_frame(1, commands.Queue.Declare(queue=unique("q"))))
    _assert_connection_close(c, 505)


def test_header_class_mismatch_is_unexpected_frame__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key="x"))
           + rawamqp.frame(rawamqp.FRAME_HEADER, 1, struct.pack(">HHQ", 50, 0, 3) + b"\x00\x00"))
    _assert_connection_close(c, 505)


def test_heartbeat_on_nonzero_channel_is_unexpected_frame__E2(raw_factory):
    c = raw_factory()
    c.send(rawamqp.frame(rawamqp.FRAME_HEARTBEAT, 1, b""))
    _assert_connection_close(c, 505)


def test_unknown_vhost_is_not_allowed__E2(raw_factory):
    c = raw_factory(open_channel=False, open_vhost=False)
    c.send_method(0, commands.Connection.Open(virtual_host=unique("no-vhost")))
    close = _assert_connection_close(c, 530)
    assert close.reply_text.startswith("NOT_ALLOWED")


def test_channel_flow_inactive_not_implemented__E2(raw_factory):
    c = raw_factory()
    c.send_method(1, commands.Channel.Flow(active=False))
    close = _assert_connection_close(c, 540)
    assert close.reply_text.startswith("NOT_IMPLEMENTED")


# -- E3 ------------------------------------------------------------------------------------------
def test_wrong_password_access_refused_with_close__E3(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        c.send_method(0, commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN", response=rawamqp.plain_response(broker.user, "wrong-password")))
        close = c.expect_connection_close()
        assert close.reply_code == 403
        assert close.reply_text.startswith("ACCESS_REFUSED")
    finally:
        c.close()


def test_wrong_password_without_capability_just_closes__E3(broker):
    c = rawamqp.RawClient(broker.host, broker.port, timeout=8)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        c.send_method(0, commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN",
            response=rawamqp.plain_response(broker.user, "wrong-password")))
        frames = c.read_until_closed(timeout=8)
        assert not any(isinstance(f, (commands.Connection.Tune, commands.Connection.OpenOk))
                       for _, f in frames), frames
    finally:
        c.close()


def test_unknown_user_refused_with_pika__E3(broker):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as ei:
        broker.connection(user=unique("nobody"), password="x")
    assert "403" in str(ei.value) or "ACCESS_REFUSED" in str(ei.value)


def test_wrong_password_with_pika__E3(broker):
    with pytest.raises((pika.exceptions.ProbableAuthenticationError,
                        pika.exceptions.AuthenticationError)) as ei:
        broker.connection(password="definitely-wrong")
    assert "ACCESS_REFUSED" in str(ei.value)


def test_unknown_vhost_with_pika__E3(broker):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as ei:
        broker.connection(virtual_host=unique("nohost"))
    assert "530" in str(ei.value) and "NOT_ALLOWED" in str(ei.value)


# -- E4 ------------------------------------------------------------------------------------------
def test_missed_heartbeats_close_connection_and_requeue__E4(broker, conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, [b"hb1", b"hb2"])
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost, heartbeat=2)
        c.open_channel(1)
        c.rpc(1, commands.Basic.Consume(queue=q), commands.Basic.ConsumeOk)
        got = [c.read_command(), c.read_command()]
        assert [g.body for g in got] == [b"hb1", b"hb2"]
        assert count(ch, q) == 0
        t0 = time.monotonic()
        # from now on the client sends nothing at all (it does read the server's heartbeats)
        frames = c.read_until_closed(timeout=30)  # raises if the server never closes
        elapsed = time.monotonic() - t0
    finally:
        c.close()
    assert all(isinstance(f, (rawamqp.Heartbeat, commands.Connection.Close)) for _, f in frames)
    assert any(isinstance(f, rawamqp.Heartbeat) for _, f in frames), "server sent no heartbeats"
    # not closed before the client missed a heartbeat interval (how much later is the machine's)
    assert elapsed >= 2.0, f"closed after {elapsed:.1f}s with heartbeat=2"
    wait_count(conn, q, 2)
    got = get_all(ch, q)
    assert [(d.body, d.redelivered) for d in got] == [(b"hb1", True), (b"hb2", True)]


def test_client_sending_heartbeats_stays_connected__E4(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost, heartbeat=1)
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            c.send(rawamqp.frame(rawamqp.FRAME_HEARTBEAT, 0, b""))
            try:
                ch, f = c.read_frame(timeout=0.5)
                assert isinstance(f, rawamqp.Heartbeat), f
            except rawamqp.Timeout:
                pass
        c.open_channel(1)   # still usable after 4 intervals
    finally:
        c.close()


# -- E5 ------------------------------------------------------------------------------------------
def test_channel_error_closes_only_that_channel__E5(conn):
    bystander = conn.channel()
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, [b"m1", b"m2"])
    d = get(ch, q)
    assert d.body == b"m1"
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(unique("missing"), passive=True)
    assert ei.value.reply_code == 404 and ei.value.reply_text.startswith("NOT_FOUND")
    assert conn.is_open and bystander.is_open and not ch.is_open
    wait_count(conn, q, 2)   # m1 requeued
    got = get_all(bystander, q)
    assert [(g.body, g.redelivered) for g in got] == [(b"m1", True), (b"m2", False)]


def test_connection_error_closes_connection_and_requeues__E5(broker, conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, [b"m1", b"m2", b"m3"])
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.open_channel(2)
        c.rpc(1, commands.Basic.Consume(queue=q), commands.Basic.ConsumeOk)
        got = [c.read_command() for _ in range(3)]
        c.send_method(1, commands.Basic.Ack(delivery_tag=got[0].method.delivery_tag))
        c.send(rawamqp.frame(9, 2, b"junk"))    # a connection error on another channel
        close = c.expect_connection_close()
        assert close.reply_code == 501
    finally:
        c.close()
    wait_count(conn, q, 2)
    assert [(g.body, g.redelivered) for g in get_all(ch, q)] == [(b"m2", True), (b"m3", True)]


def test_channel_error_with_unconfirmed_publishes__E5(broker, raw_factory, conn):
    """Publishes confirmed before a channel error are in the queue; nothing is confirmed after the
    channel.close, and the client learns about the close (nothing is lost silently)."""
    q = declare(conn.channel(), unique("q"))
    c = raw_factory()
    c.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    n = 50
    data = b"".join(
        rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=q))
        + rawamqp.content_frames(1, b"p", commands.Basic.Properties(message_id=str(i)))
        for i in range(1, n + 1))
    data += rawamqp.method_frame(1, commands.Basic.Publish(exchange=unique("missing-x"),
                                                           routing_key=q))
    data += rawamqp.content_frames(1, b"p", commands.Basic.Properties(message_id=str(n + 1)))
    c.send(data)
    acked, nacked, closed = set(), set(), None
    while closed is None:
        ch, f = c.read_frame()
        if isinstance(f, commands.Basic.Ack):
            acked.update(range(1, f.delivery_tag + 1) if f.multiple else [f.delivery_tag])
        elif isinstance(f, commands.Basic.Nack):
            nacked.update(range(1, f.delivery_tag + 1) if f.multiple else [f.delivery_tag])
        elif isinstance(f, commands.Channel.Close):
            closed = f
    assert closed.reply_code == 404
    assert not (acked & nacked)
    assert n + 1 not in acked and n + 1 not in nacked
    c.send_method(1, commands.Channel.CloseOk())
    # the channel is gone: nothing more arrives for it
    with pytest.raises(rawamqp.Timeout):
        ch, f = c.read_frame(timeout=0.3)
        pytest.fail(f"frame after channel.close: {f!r}")
    # every confirmed publish is in the queue
    in_queue = {int(d.properties.message_id) for d in get_all(conn.channel(), q)}
    assert acked <= in_queue
    assert in_queue <= set(range(1, n + 1))
