"""Single active consumer (queue argument x-single-active-consumer, BEHAVIOUR.md S1), as RabbitMQ
3.10 does it: one consumer receives, the others wait; the next in registration order takes over
when the active one is cancelled or its channel or connection goes; unacked deliveries of a gone
channel come back (redelivered) to the new active consumer."""
from __future__ import annotations

import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker

import rawamqp
from amqp_helpers import Consumer, consumer_count, declare, get, publish, safe_close, \
    wait_count, wait_until

SAC = {"x-single-active-consumer": True}


def bodies(n, start=1):
    return [str(i).encode() for i in range(start, start + n)]


def test_only_the_first_consumer_receives_the_others_wait__S1(broker, conn, qname):
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    a = Consumer(conn, ch, qname, auto_ack=True)
    b = Consumer(conn, conn.channel(), qname, auto_ack=True)
    other = broker.connection()
    try:
        c = Consumer(other, other.channel(), qname, auto_ack=True)
        assert consumer_count(ch, qname) == 3  # waiting consumers count, as in RabbitMQ
        publish(ch, qname, bodies(20))
        assert a.wait_for(20) and a.bodies() == bodies(20)  # all 20: none went to B or C
        c.pump()
        assert b.deliveries == [] and c.deliveries == []
    finally:
        safe_close(other)


def test_active_consumer_at_its_prefetch_holds_the_queue__S1_P1(conn, qname):
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    ch.basic_qos(prefetch_count=1)
    a = Consumer(conn, ch, qname)
    b = Consumer(conn, conn.channel(), qname)
    publish(ch, qname, bodies(3))
    a.wait_for(1)
    wait_count(conn, qname, 2)  # B, waiting, took none though it could
    assert b.deliveries == []
    ch.basic_ack(a.deliveries[0].delivery_tag)
    assert a.wait_for(2)[1].body == b"2"
    assert b.deliveries == []


def test_cancel_of_the_active_consumer_hands_over_in_registration_order__S1(conn, qname):
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    ch.basic_qos(prefetch_count=2)
    a = Consumer(conn, ch, qname)
    ch2 = conn.channel()
    b = Consumer(conn, ch2, qname)
    c = Consumer(conn, conn.channel(), qname)
    publish(ch, qname, bodies(5))
    assert [d.body for d in a.wait_for(2)] == [b"1", b"2"]
    ch.basic_cancel(a.tag)
    # B, registered before C, is active now; A's unacked stay with A's channel (3.10)
    assert b.wait_for(3) and b.bodies() == [b"3", b"4", b"5"]
    ch.basic_nack(a.deliveries[1].delivery_tag, multiple=True, requeue=True)
    got = b.wait_for(5)[3:]
    assert [(d.body, d.redelivered) for d in got] == [(b"1", True), (b"2", True)]
    assert c.deliveries == []


def test_connection_lost_by_the_active_consumer_requeues_to_the_next__S1_E5(
        broker, conn, qname):
    """The active consumer's socket goes away without a word (no basic.cancel first): its
    unacked deliveries go back to their places and the next consumer gets them first."""
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    raw = rawamqp.RawClient(broker.host, broker.port)
    try:
        raw.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        raw.open_channel(1)
        raw.rpc(1, commands.Basic.Qos(prefetch_count=2), commands.Basic.QosOk)
        raw.rpc(1, commands.Basic.Consume(queue=qname, consumer_tag="A"),
                commands.Basic.ConsumeOk)
        b = Consumer(conn, conn.channel(), qname)
        publish(ch, qname, bodies(5))
        first = raw.read_command()
        assert first.body == b"1"
        raw.send_method(1, commands.Basic.Ack(delivery_tag=first.method.delivery_tag))
        assert [raw.read_command().body for _ in range(2)] == [b"2", b"3"]
        wait_count(conn, qname, 2)
        assert b.deliveries == []
    finally:
        raw.close()
    got = b.wait_for(4)  # 2 and 3 back at their places, then the rest
    assert [(d.body, d.redelivered) for d in got] == [
        (b"2", True), (b"3", True), (b"4", False), (b"5", False)]


def test_connection_close_by_pika_hands_over__S1(broker, conn, qname):
    """pika's close cancels its consumers before closing the channel: the next consumer
    takes over at the cancel, then gets the requeued deliveries at the channel's close."""
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    first = broker.connection()
    try:
        fch = first.channel()
        fch.basic_qos(prefetch_count=2)
        a = Consumer(first, fch, qname)
        b = Consumer(conn, conn.channel(), qname)
        publish(ch, qname, bodies(4))
        assert [d.body for d in a.wait_for(2)] == [b"1", b"2"]
    finally:
        safe_close(first)
    got = b.wait_for(4)
    assert sorted((d.body, d.redelivered) for d in got) == [
        (b"1", True), (b"2", True), (b"3", False), (b"4", False)]


def test_channel_close_of_the_active_consumer_hands_over__S1(conn, qname):
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    ach = conn.channel()
    a = Consumer(conn, ach, qname)
    b = Consumer(conn, ch, qname)
    publish(ch, qname, bodies(2))
    a.wait_for(2)
    ach.close()
    got = b.wait_for(2)
    assert [(d.body, d.redelivered) for d in got] == [(b"1", True), (b"2", True)]


def test_exclusive_consume_refused_on_a_single_active_consumer_queue__S1(conn, qname):
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    with pytest.raises(ChannelClosedByBroker) as ei:
        Consumer(conn, conn.channel(), qname, exclusive=True)  # even as the first consumer
    assert (ei.value.reply_code, ei.value.reply_text) == (
        403, f"ACCESS_REFUSED - queue '{qname}' in vhost '/' in exclusive use")


def test_basic_get_works_beside_the_active_consumer__S1_A9(conn, qname):
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    ch.basic_qos(prefetch_count=1)
    a = Consumer(conn, ch, qname)
    publish(ch, qname, bodies(2))
    a.wait_for(1)
    d = get(conn.channel(), qname, auto_ack=True)
    assert d is not None and d.body == b"2"


def test_non_boolean_argument_refused__S1(conn, qname):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as ei:
        declare(ch, qname, arguments={"x-single-active-consumer": "true"})
    assert (ei.value.reply_code, ei.value.reply_text) == (
        406, f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue "
             f"'{qname}' in vhost '/': {{unacceptable_type,longstr}}")


def test_last_consumer_gone_then_a_new_one_is_active__S1(conn, qname):
    ch = conn.channel()
    declare(ch, qname, arguments=SAC)
    a = Consumer(conn, ch, qname, auto_ack=True)
    ch.basic_cancel(a.tag)
    publish(ch, qname, bodies(2))
    wait_count(conn, qname, 2)
    b = Consumer(conn, ch, qname, auto_ack=True)
    assert b.wait_for(2) and b.bodies() == bodies(2)
    wait_until(lambda: consumer_count(ch, qname) == 1)
