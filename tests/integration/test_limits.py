"""Limits before login and on content (issue 11, items 5 and 8): frame_max 4096 until tune-ok,
a command on a channel that is not open refused at its method frame (nothing of a publish's
content buffered), and max_message_size (RabbitMQ 3.10: 128 MiB by default, 406
PRECONDITION_FAILED decided here at the content header). Behaviour: E2, R3."""
from __future__ import annotations

import os
import struct
import subprocess

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker

import rawamqp
from amqp_helpers import declare, get_all, safe_close, unique
from conftest import REPO, Broker

LIMIT = 1000  # max_message_size of the `small` node


@pytest.fixture(scope="module")
def small(broker, tmp_path_factory):
    """A node of this module's own with max_message_size = 1000 (the external broker cannot be
    configured from here)."""
    if broker.external:
        pytest.skip("needs a node started with --max-message-size")
    b = Broker.start_leveret(tmp_path_factory.mktemp("small"), "--max-message-size", str(LIMIT))
    try:
        yield b
    finally:
        b.stop()


def _header_frame(channel: int, body_size: int) -> bytes:
    return rawamqp.frame(rawamqp.FRAME_HEADER, channel,
                         struct.pack(">HHQH", 60, 0, body_size, 0))


# --- E2: before tune-ok, and channels that are not open -----------------------------------------
def test_frame_above_4096_before_tune_ok_closes_the_socket_silently__E2(broker):
    """rabbit_reader's frame_max is ?FRAME_MIN_SIZE until tune-ok; a larger frame in the starting
    state gets no connection.close: the socket is closed (after ?SILENT_CLOSE_DELAY, 3 s)."""
    if broker.external:
        pytest.skip("RabbitMQ's silent close is checked against Leveret only")
    c = rawamqp.RawClient(broker.host, broker.port, timeout=10)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        start_ok = rawamqp.method_frame(0, commands.Connection.StartOk(
            client_properties={"pad": "x" * 6000}, mechanism="PLAIN",
            response=rawamqp.plain_response(broker.user, broker.password)))
        assert len(start_ok) - 8 > 4096
        c.send(start_ok)
        frames = c.read_until_closed(timeout=10)
        assert not any(isinstance(f, (commands.Connection.Tune, commands.Connection.Close))
                       for _, f in frames), frames
    finally:
        c.close()
    assert broker.alive()


def test_frame_of_4096_bytes_before_tune_ok_is_accepted__E2(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        props = {"capabilities": dict(rawamqp.DEFAULT_CAPABILITIES), "pad": ""}

        def start_ok():
            return rawamqp.method_frame(0, commands.Connection.StartOk(
                client_properties=props, mechanism="PLAIN",
                response=rawamqp.plain_response(broker.user, broker.password)))
        props["pad"] = "x" * (4096 - (len(start_ok()) - 8))
        assert len(start_ok()) - 8 == 4096
        c.send(start_ok())
        c.expect(commands.Connection.Tune)
    finally:
        c.close()


def test_publish_on_a_channel_never_opened_is_504_at_its_method_frame__E2(broker):
    """The issue's reproduction: a publish announcing 200 MB on channel 7, never opened. The
    connection is closed with 504 before a single body byte is sent (RabbitMQ answers the same
    once the content is complete; Leveret does not wait for it, so nothing is buffered)."""
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.send(rawamqp.method_frame(7, commands.Basic.Publish(exchange="", routing_key="q"))
               + _header_frame(7, 200 * 1024 * 1024))
        close = c.expect_connection_close()
        assert (close.reply_code, close.reply_text) == (504, "CHANNEL_ERROR - expected "
                                                             "'channel.open'")
        assert (close.class_id, close.method_id) == (60, 40)
    finally:
        c.close()
    conn = broker.connection()   # the node serves on
    safe_close(conn)


def test_content_frames_on_a_channel_never_opened_are_505__E2(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.send(rawamqp.frame(rawamqp.FRAME_BODY, 9, b"x" * 1000))
        close = c.expect_connection_close()
        assert close.reply_code == 505
        assert close.reply_text.startswith("UNEXPECTED_FRAME - expected method frame")
    finally:
        c.close()


# --- R3: max_message_size ------------------------------------------------------------------------
def test_publish_above_max_message_size_closes_the_channel_with_406__R3(small):
    conn = small.connection()
    try:
        ch = conn.channel()
        q = declare(ch, unique("q"))
        ch.basic_publish("", q, b"x" * LIMIT)  # at the limit: accepted
        ch.basic_publish("", q, b"x" * (LIMIT + 1))
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.queue_declare(q, passive=True)
        assert ei.value.reply_code == 406
        assert ei.value.reply_text == (f"PRECONDITION_FAILED - message size {LIMIT + 1} is "
                                       f"larger than configured max size {LIMIT}")
        assert conn.is_open
        ch = conn.channel()
        assert [len(d.body) for d in get_all(ch, q)] == [LIMIT]
    finally:
        safe_close(conn)


def test_large_refused_body_is_skipped_and_the_connection_goes_on__R3(small):
    """5 MB against a 1000-byte limit: the 406 is decided at the header, the body frames that
    follow are dropped as they come, the connection stays usable."""
    conn = small.connection()
    try:
        ch = conn.channel()
        q = declare(ch, unique("q"))
        ch.confirm_delivery()
        with pytest.raises((ChannelClosedByBroker, pika.exceptions.ChannelWrongStateError)):
            ch.basic_publish("", q, os.urandom(5 * 1024 * 1024))
            ch.queue_declare(q, passive=True)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", q, b"small")
        assert [d.body for d in get_all(ch, q)] == [b"small"]
    finally:
        safe_close(conn)


def test_max_message_size_is_decided_at_the_content_header__R3(small):
    """Raw client: channel.close 406 comes before any body frame is sent; the body that follows
    is dropped, close-ok frees the channel, and it can be opened again."""
    c = rawamqp.RawClient(small.host, small.port)
    try:
        c.handshake(user=small.user, password=small.password, vhost=small.vhost)
        c.open_channel(1)
        c.send(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key="x"))
               + _header_frame(1, 100000))
        ch, close = c.read_frame()
        assert ch == 1 and isinstance(close, commands.Channel.Close)
        assert close.reply_code == 406 and (close.class_id, close.method_id) == (60, 40)
        # the body it announced (dropped as it comes), then close-ok: the channel is free
        c.send(b"".join(rawamqp.frame(rawamqp.FRAME_BODY, 1, b"y" * 10000) for _ in range(10)))
        c.send_method(1, commands.Channel.CloseOk())
        c.open_channel(1)
        c.rpc(1, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)
    finally:
        c.close()


def test_default_max_message_size_is_128_mib__R3(broker):
    if broker.external:
        pytest.skip("the default checked against Leveret's node")
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.send(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key="x"))
               + _header_frame(1, 134217729))
        close = c.expect_channel_close(1)
        assert (close.reply_code, close.reply_text) == (
            406, "PRECONDITION_FAILED - message size 134217729 is larger than configured max "
                 "size 134217728")
    finally:
        c.close()


@pytest.mark.parametrize("how", ["flag", "toml"])
def test_max_message_size_above_512_mib_refused_at_start__R3(tmp_path, how):
    server = REPO / ".venv" / "bin" / "leveret-server"
    args = [str(server), "--data-dir", str(tmp_path / "data"), "--port", "1"]
    if how == "flag":
        args += ["--max-message-size", "536870913"]
    else:
        cfg = tmp_path / "leveret.toml"
        cfg.write_text("max_message_size = 600000000\n")
        args += ["--config", str(cfg)]
    res = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert "Max message size should be between 0 and 512MB" in res.stderr
    assert not (tmp_path / "data").exists()
