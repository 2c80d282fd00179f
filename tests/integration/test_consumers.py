"""Consumers: exclusive consume, consumer tags, basic.cancel, cancel notifications, user_id checks,
channel.flow, no-ack consumers and prefetch."""
from __future__ import annotations

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker

import rawamqp
from amqp_helpers import Consumer, consumer_count, count, declare, get, get_all, publish, \
    safe_close, unique, wait_count, wait_until


@pytest.fixture
def raw(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
    c.open_channel(1)
    yield c
    c.close()


def test_consume_exclusive_refuses_second_consumer(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    Consumer(conn, ch, qname, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as ei:
        Consumer(conn, conn.channel(), qname)
    assert ei.value.reply_code == 403 and ei.value.reply_text.startswith("ACCESS_REFUSED")
    assert "exclusive use" in ei.value.reply_text
    assert conn.is_open and ch.is_open


def test_consume_exclusive_refused_when_queue_has_consumers(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    Consumer(conn, ch, qname)
    with pytest.raises(ChannelClosedByBroker) as ei:
        Consumer(conn, conn.channel(), qname, exclusive=True)
    assert ei.value.reply_code == 403


def test_exclusive_consumer_gets_everything_then_others_may_consume(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    c = Consumer(conn, ch, qname, exclusive=True, auto_ack=True)
    publish(ch, qname, [b"1", b"2"])
    c.wait_for(2)
    ch.basic_cancel(c.tag)
    other = Consumer(conn, conn.channel(), qname, auto_ack=True)
    publish(ch, qname, [b"3"])
    assert [d.body for d in other.wait_for(1)] == [b"3"]


def test_server_generated_consumer_tag(raw):
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q, auto_delete=True), commands.Queue.DeclareOk)
    ok1 = raw.rpc(1, commands.Basic.Consume(queue=q, consumer_tag=""), commands.Basic.ConsumeOk)
    ok2 = raw.rpc(1, commands.Basic.Consume(queue=q, consumer_tag=""), commands.Basic.ConsumeOk)
    assert ok1.consumer_tag.startswith("amq.ctag-") and ok2.consumer_tag.startswith("amq.ctag-")
    assert ok1.consumer_tag != ok2.consumer_tag
    raw.publish(1, "", q, b"hello")
    d = raw.read_command()
    assert d.method.consumer_tag in (ok1.consumer_tag, ok2.consumer_tag)
    ok = raw.rpc(1, commands.Basic.Cancel(consumer_tag=ok1.consumer_tag), commands.Basic.CancelOk)
    assert ok.consumer_tag == ok1.consumer_tag


def test_client_chosen_consumer_tag_and_reuse_is_not_allowed(raw):
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q, auto_delete=True), commands.Queue.DeclareOk)
    ok = raw.rpc(1, commands.Basic.Consume(queue=q, consumer_tag="my-tag"), commands.Basic.ConsumeOk)
    assert ok.consumer_tag == "my-tag"
    raw.send_method(1, commands.Basic.Consume(queue=q, consumer_tag="my-tag"))
    close = raw.expect_connection_close()
    assert close.reply_code == 530 and close.reply_text.startswith("NOT_ALLOWED")


def test_consume_from_missing_queue_is_404(conn):
    with pytest.raises(ChannelClosedByBroker) as ei:
        conn.channel().basic_consume(unique("missing"), lambda *a: None)
    assert ei.value.reply_code == 404


def test_basic_cancel_stops_deliveries_and_keeps_unacked(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    publish(ch, qname, [b"1", b"2"])
    c = Consumer(conn, ch, qname)
    c.wait_for(2)
    ch.basic_cancel(c.tag)
    publish(ch, qname, [b"3"])
    c.settle(0.3)
    assert len(c.deliveries) == 2
    wait_count(conn, qname, 1)          # "3" stays in the queue
    ch.basic_ack(c.deliveries[0].delivery_tag)   # acks after cancel are still valid
    ch.close()                                   # "2" (unacked) is requeued
    wait_count(conn, qname, 2)
    got = get_all(conn.channel(), qname)
    assert [(d.body, d.redelivered) for d in got] == [(b"2", True), (b"3", False)]


def test_basic_cancel_unknown_tag_is_ok(raw):
    ok = raw.rpc(1, commands.Basic.Cancel(consumer_tag="no-such-consumer"), commands.Basic.CancelOk)
    assert ok.consumer_tag == "no-such-consumer"


def test_consumer_cancel_notification_on_queue_delete_raw(raw, conn):
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q), commands.Queue.DeclareOk)
    ok = raw.rpc(1, commands.Basic.Consume(queue=q), commands.Basic.ConsumeOk)
    conn.channel().queue_delete(q)
    ch, cancel = raw.read_frame()
    assert isinstance(cancel, commands.Basic.Cancel) and ch == 1
    assert cancel.consumer_tag == ok.consumer_tag
    # the channel stays open
    raw.rpc(1, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)


def test_consumer_cancel_notification_with_pika(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    cancelled = []
    ch.add_on_cancel_callback(lambda method: cancelled.append(method))
    c = Consumer(conn, ch, qname)
    conn.channel().queue_delete(qname)
    wait_until(lambda: (conn.process_data_events(time_limit=0.05), cancelled)[1], 3,
               message="basic.cancel from the broker")
    assert cancelled[0].method.consumer_tag == c.tag
    assert ch.is_open


def test_no_cancel_notification_without_capability(broker, conn):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        caps = dict(rawamqp.DEFAULT_CAPABILITIES, consumer_cancel_notify=False)
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost,
                    capabilities=caps)
        c.open_channel(1)
        q = unique("q")
        c.rpc(1, commands.Queue.Declare(queue=q), commands.Queue.DeclareOk)
        c.rpc(1, commands.Basic.Consume(queue=q), commands.Basic.ConsumeOk)
        conn.channel().queue_delete(q)
        with pytest.raises(rawamqp.Timeout):
            ch, f = c.read_frame(timeout=0.5)
            pytest.fail(f"unexpected {f!r}")
    finally:
        c.close()


def test_user_id_must_match_authenticated_user(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    ch.basic_publish("", qname, b"ok", pika.BasicProperties(user_id=conn._impl.params.credentials
                                                             .username))
    d = get_all(ch, qname)[0]
    assert d.properties.user_id == conn._impl.params.credentials.username
    ch.basic_publish("", qname, b"forged", pika.BasicProperties(user_id="not-" + unique("u")))
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(qname, passive=True)
    assert ei.value.reply_code == 406 and "user_id" in ei.value.reply_text
    assert conn.is_open
    assert count(conn.channel(), qname) == 0


def test_channel_flow_active_true_is_acknowledged(raw):
    ok = raw.rpc(1, commands.Channel.Flow(active=True), commands.Channel.FlowOk)
    assert ok.active is True
    raw.rpc(1, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)


def test_channel_flow_inactive_refused(raw):
    """RabbitMQ does not support a client stopping deliveries with channel.flow(active=false):
    connection.close 540 NOT_IMPLEMENTED."""
    raw.send_method(1, commands.Channel.Flow(active=False))
    close = raw.expect_connection_close()
    assert close.reply_code == 540


def test_no_ack_consumer_ignores_prefetch__P1(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    publish(ch, qname, [str(i).encode() for i in range(10)])
    ch.basic_qos(prefetch_count=1)
    c = Consumer(conn, ch, qname, auto_ack=True)
    c.wait_for(10)


def test_consumers_share_queue_round_robin(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    ch.basic_qos(prefetch_count=1)
    a = Consumer(conn, ch, qname)
    b = Consumer(conn, ch, qname)
    publish(ch, qname, [b"1", b"2"])
    a.wait_for(1)
    b.wait_for(1)
    assert sorted(a.bodies() + b.bodies()) == [b"1", b"2"]


def test_redelivery_goes_to_another_consumer__A4(broker, conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    publish(ch, qname, [b"once"])
    c1 = broker.connection()
    try:
        ch1 = c1.channel()
        a = Consumer(c1, ch1, qname)
        a.wait_for(1)
        b = Consumer(conn, conn.channel(), qname)
        ch1.basic_cancel(a.tag)
        ch1.basic_reject(a.deliveries[0].delivery_tag, requeue=True)
        b.wait_for(1)
        assert b.deliveries[0].body == b"once" and b.deliveries[0].redelivered
    finally:
        safe_close(c1)
