"""Bugs `make fuzz` (tools/fuzz.py) found, one test each: what the broker must answer instead."""
from __future__ import annotations

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker

import rawamqp
from amqp_helpers import declare, get, unique, wait_until
from protocol import encode_method
from protocol import methods as M


@pytest.mark.parametrize("expiration, reason", [
    # RabbitMQ 3.10.8's text: Erlang's ~p wraps the long tuple
    ("99999999999999999999", "{value_too_large,\n" + " " * 44 + "99999999999999999999}"),
    ("315360000001", "{value_too_large,315360000001}"),
])
def test_an_expiration_above_ten_years_is_a_406_not_a_crashed_channel(conn, expiration, reason):
    """The channel put the expiration (above msgpack's 64 bits) into its Publish to the queue,
    failed encoding it, and the connection was closed with 541 INTERNAL_ERROR. RabbitMQ
    (rabbit_misc:check_expiry) refuses it with 406."""
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration=expiration))
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(q, passive=True)
    assert ei.value.reply_code == 406
    assert ei.value.reply_text == (f"PRECONDITION_FAILED - invalid expiration '{expiration}': "
                                   f"{reason}")
    ch = conn.channel()  # the connection is fine
    ch.basic_publish("", q, b"y", pika.BasicProperties(expiration="315360000000"))
    assert get(ch, q, auto_ack=True).body == b"y"


def test_an_alternate_exchange_of_raw_bytes_is_refused_and_answered(broker):
    """exchange.declare with an alternate-exchange whose longstr is not UTF-8. Found by the
    fuzzer: the node's metadata actor failed sending the 406 that quoted those bytes (msgpack
    refused the str's surrogate escapes) and the client waited for its declare-ok for good.
    Now the value is refused by type first (rabbit_exchange: the AE must be a longstr; a
    non-UTF-8 one is binary here), answered at once; texts carrying raw bytes are checked in
    tests/unit/protocol/test_protocol_fields.py and tests/unit/runtime."""
    name = unique("x")
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        frame = encode_method(1, M.ExchangeDeclare(
            exchange=name, exchange_type="direct", auto_delete=True,
            arguments={"alternate-exchange": "\x01"}))
        assert frame.count(b"S\x00\x00\x00\x01\x01") == 1  # patched as a client could send it
        c.send(frame.replace(b"S\x00\x00\x00\x01\x01", b"S\x00\x00\x00\x01\xaf"))
        close = c.expect_channel_close(1)
        assert close.reply_code == 406
        assert "'alternate-exchange'" in close.reply_text
        c.open_channel(2)  # the connection is fine
        c.send(encode_method(2, M.ExchangeDeclare(exchange=name, exchange_type="direct",
                                                  auto_delete=True)))
        c.expect(commands.Exchange.DeclareOk, channel=2)
        c.send(encode_method(2, M.ExchangeDelete(exchange=name)))
        c.expect(commands.Exchange.DeleteOk, channel=2)
    finally:
        c.close()


def test_a_channel_closed_with_close_ok_is_stopped_with_its_connection(broker, conn):
    """channel.close-ok on an open channel is a 503 that closes the connection; the reader had
    already freed the channel's number and never stopped the channel: its consumer stayed on
    the queue for good (a message delivered to it was never requeued) and every such
    connection leaked its actors (tools.fuzz: the connection workers' RSS grew ~110 MB per
    10^6 sequences)."""
    ch = conn.channel()
    q = declare(ch, unique("q"))
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.rpc(1, commands.Basic.Consume(queue=q, consumer_tag="leaky"),
              commands.Basic.ConsumeOk)
        assert ch.queue_declare(q, passive=True).method.consumer_count == 1
        ch.basic_publish("", q, b"held by the consumer")
        c.send_method(1, commands.Channel.CloseOk())
        assert c.expect_connection_close().reply_code == 503
    finally:
        c.close()
    wait_until(lambda: ch.queue_declare(q, passive=True).method.consumer_count == 0,
               timeout=10, message="the consumer of the closed connection gone")
    wait_until(lambda: get(ch, q, auto_ack=True), timeout=10,
               message="the message requeued")
