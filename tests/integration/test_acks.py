"""Consumer acknowledgements: A1-A9."""
from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from amqp_helpers import Consumer, count, declare, get, get_all, pump, publish, safe_close, \
    unique, wait_count


def _fill(ch, n: int, prefix: str = "m") -> tuple[str, list[bytes]]:
    q = declare(ch, unique("q"))
    bodies = [f"{prefix}{i}".encode() for i in range(1, n + 1)]
    publish(ch, q, bodies)
    return q, bodies


def _expect_channel_error(ch, code: int, text: str | None = None):
    """Make a synchronous call so the broker's asynchronous channel.close surfaces."""
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.exchange_declare("amq.direct", passive=True)
    assert ei.value.reply_code == code, ei.value
    if text is not None:
        assert text in ei.value.reply_text, ei.value
    return ei.value


# -- A1 ------------------------------------------------------------------------------------------
def test_delivery_tags_per_channel_start_at_one__A1(conn):
    ch1 = conn.channel()
    q, _ = _fill(ch1, 6)
    # basic.get and basic.deliver share the channel's sequence
    assert get(ch1, q).delivery_tag == 1
    assert get(ch1, q).delivery_tag == 2
    c = Consumer(conn, ch1, q)
    ch1.basic_qos(prefetch_count=2)  # only affects consumers created afterwards; c is unlimited
    c.wait_for(4)
    assert [d.delivery_tag for d in c.deliveries] == [3, 4, 5, 6]
    # a second channel has its own sequence starting at 1
    ch2 = conn.channel()
    q2, _ = _fill(ch2, 2)
    assert get(ch2, q2).delivery_tag == 1
    assert get(ch2, q2).delivery_tag == 2
    # tags keep growing on ch1 (a requeued message gets a new tag)
    ch1.basic_cancel(c.tag)
    ch1.basic_nack(6, multiple=False, requeue=True)
    d = get(ch1, q)
    assert d.delivery_tag == 7 and d.redelivered and d.body == b"m6"


# -- A2 ------------------------------------------------------------------------------------------
def test_ack_single_and_multiple__A2(conn):
    ch = conn.channel()
    q, bodies = _fill(ch, 8)
    tags = [get(ch, q).delivery_tag for _ in range(8)]
    assert tags == list(range(1, 9))
    ch.basic_ack(2)                    # just 2
    ch.basic_ack(5, multiple=True)     # 1, 3, 4, 5
    ch.close()                         # 6, 7, 8 unacked -> requeued
    ch = conn.channel()
    wait_count(conn, q, 3)
    assert [d.body for d in get_all(ch, q)] == [b"m6", b"m7", b"m8"]


def test_ack_multiple_tag_zero_settles_all__A2(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 5)
    c = Consumer(conn, ch, q)
    c.wait_for(5)
    ch.basic_ack(0, multiple=True)
    ch.close()
    ch = conn.channel()
    pump(conn, 0.2)
    assert count(ch, q) == 0


# -- A3 ------------------------------------------------------------------------------------------
def test_nack_and_reject_requeue_original_position__A3(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 5)
    for expected in (1, 2, 3):
        assert get(ch, q).delivery_tag == expected
    ch.basic_nack(3, multiple=True, requeue=True)  # m1..m3 back in front of m4, m5
    got = get_all(ch, q, auto_ack=True)
    assert [d.body for d in got] == [b"m1", b"m2", b"m3", b"m4", b"m5"]
    assert [d.redelivered for d in got] == [True, True, True, False, False]

    q2, _ = _fill(ch, 3)
    d1, d2 = get(ch, q2), get(ch, q2)
    ch.basic_reject(d1.delivery_tag, requeue=True)
    d3 = get(ch, q2)
    assert d3.body == b"m1" and d3.redelivered
    ch.basic_ack(d3.delivery_tag)
    ch.basic_ack(d2.delivery_tag)
    assert [d.body for d in get_all(ch, q2)] == [b"m3"]


def test_nack_and_reject_without_requeue_drop__A3(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 4)
    ds = [get(ch, q) for _ in range(4)]
    ch.basic_reject(ds[0].delivery_tag, requeue=False)
    ch.basic_nack(ds[2].delivery_tag, multiple=True, requeue=False)  # m2, m3
    ch.close()  # m4 unacked -> requeued
    ch = conn.channel()
    wait_count(conn, q, 1)
    assert [d.body for d in get_all(ch, q)] == [b"m4"]


# -- A4 ------------------------------------------------------------------------------------------
def test_redelivered_flag__A4(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 2)
    c = Consumer(conn, ch, q)
    c.wait_for(2)
    assert [d.redelivered for d in c.deliveries] == [False, False]
    ch.basic_reject(c.deliveries[0].delivery_tag, requeue=True)
    c.wait_for(3)
    assert c.deliveries[2].body == b"m1" and c.deliveries[2].redelivered is True
    ch.basic_recover(requeue=True)
    c.wait_for(5)
    assert sorted(d.body for d in c.deliveries[3:]) == [b"m1", b"m2"]
    assert all(d.redelivered for d in c.deliveries[3:])


# -- A5 ------------------------------------------------------------------------------------------
def test_ack_unknown_tag_closes_channel__A5(conn):
    other = conn.channel()
    ch = conn.channel()
    q, _ = _fill(ch, 1)
    d = get(ch, q)
    ch.basic_ack(d.delivery_tag + 41)
    err = _expect_channel_error(ch, 406, f"unknown delivery tag {d.delivery_tag + 41}")
    assert err.reply_text.startswith("PRECONDITION_FAILED")
    # other channels of the connection live on; the unacked message was requeued (A7)
    assert conn.is_open and other.is_open
    wait_count(conn, q, 1)
    assert get(other, q, auto_ack=True).redelivered


def test_ack_twice_closes_channel__A5(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 2)
    d = get(ch, q)
    ch.basic_ack(d.delivery_tag)
    ch.basic_ack(d.delivery_tag)
    _expect_channel_error(ch, 406, f"unknown delivery tag {d.delivery_tag}")
    assert conn.is_open
    ch2 = conn.channel()
    assert [x.body for x in get_all(ch2, q)] == [b"m2"]


def test_ack_on_other_channel_closes_that_channel__A5(conn):
    ch1 = conn.channel()
    ch2 = conn.channel()
    q, _ = _fill(ch1, 1)
    d = get(ch1, q)
    assert d.delivery_tag == 1
    ch2.basic_ack(d.delivery_tag)   # ch2 never delivered tag 1
    _expect_channel_error(ch2, 406, "unknown delivery tag 1")
    assert ch1.is_open
    ch1.basic_ack(d.delivery_tag)   # still valid on its own channel
    assert count(ch1, q) == 0
    ch1.close()
    pump(conn, 0.2)
    assert count(conn.channel(), q) == 0


# -- A6 ------------------------------------------------------------------------------------------
def test_no_ack_settled_on_send_and_never_requeued__A6(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 3)
    c = Consumer(conn, ch, q, auto_ack=True)
    c.wait_for(3)
    ch.close()  # nothing outstanding: nothing requeued
    ch = conn.channel()
    pump(conn, 0.2)
    assert count(ch, q) == 0
    # acking an automatically acknowledged delivery is an unknown tag
    publish(ch, q, [b"x"])
    d = get(ch, q, auto_ack=True)
    assert d.body == b"x"
    ch.basic_ack(d.delivery_tag)
    _expect_channel_error(ch, 406, f"unknown delivery tag {d.delivery_tag}")


# -- A7 ------------------------------------------------------------------------------------------
def test_unacked_requeued_on_channel_close__A7(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 4)
    c = Consumer(conn, ch, q)
    c.wait_for(4)
    ch.basic_ack(c.deliveries[1].delivery_tag)  # m2 acked: never redelivered
    ch.close()
    ch = conn.channel()
    wait_count(conn, q, 3)
    got = get_all(ch, q)
    assert [d.body for d in got] == [b"m1", b"m3", b"m4"]
    assert all(d.redelivered for d in got)


def test_unacked_requeued_on_connection_close__A7(broker, conn):
    ch = conn.channel()
    q, _ = _fill(ch, 3)
    c2 = broker.connection()
    try:
        ch2 = c2.channel()
        cons = Consumer(c2, ch2, q)
        cons.wait_for(3)
        ch2.basic_ack(cons.deliveries[0].delivery_tag)
    finally:
        safe_close(c2)
    wait_count(conn, q, 2)
    got = get_all(ch, q)
    assert [(d.body, d.redelivered) for d in got] == [(b"m2", True), (b"m3", True)]


def test_unacked_requeued_on_channel_error__A7(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 2)
    c = Consumer(conn, ch, q)
    c.wait_for(2)
    # a channel-level protocol error: passive declare of a missing queue -> 404
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(unique("missing"), passive=True)
    assert ei.value.reply_code == 404
    ch = conn.channel()
    wait_count(conn, q, 2)
    assert [(d.body, d.redelivered) for d in get_all(ch, q)] == [(b"m1", True), (b"m2", True)]


# -- A8 ------------------------------------------------------------------------------------------
def test_basic_recover_requeues_all_unacked__A8(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 3)
    ds = [get(ch, q) for _ in range(3)]
    ch.basic_ack(ds[0].delivery_tag)
    ch.basic_recover(requeue=True)   # synchronous: recover-ok
    got = get_all(ch, q, auto_ack=True)
    assert [(d.body, d.redelivered) for d in got] == [(b"m2", True), (b"m3", True)]
    # tags of the requeued deliveries are now unknown on the channel
    ch.basic_ack(ds[1].delivery_tag)
    _expect_channel_error(ch, 406, "unknown delivery tag")


def test_basic_recover_without_requeue_not_implemented__A8(broker):
    """RabbitMQ refuses basic.recover(requeue=false) with 540 NOT_IMPLEMENTED (connection error)."""
    c = broker.connection()
    try:
        ch = c.channel()
        with pytest.raises(ConnectionClosedByBroker) as ei:
            ch.basic_recover(requeue=False)
        assert ei.value.reply_code == 540
        assert ei.value.reply_text.startswith("NOT_IMPLEMENTED")
    finally:
        safe_close(c)


# -- A9 ------------------------------------------------------------------------------------------
def test_basic_get_message_count_and_empty__A9(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 3)
    method, _props, body = ch.basic_get(q, auto_ack=False)
    assert isinstance(method, pika.spec.Basic.GetOk)
    assert body == b"m1" and method.message_count == 2 and method.redelivered is False
    assert method.exchange == "" and method.routing_key == q
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"m2" and method.message_count == 1
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"m3" and method.message_count == 0
    assert ch.basic_get(q) == (None, None, None)  # get-empty


def test_basic_get_ignores_prefetch__A9(conn):
    ch = conn.channel()
    q, _ = _fill(ch, 3)
    ch.basic_qos(prefetch_count=1, global_qos=True)
    ch.basic_qos(prefetch_count=1, global_qos=False)
    ds = [get(ch, q) for _ in range(3)]
    assert [d.body for d in ds] == [b"m1", b"m2", b"m3"]  # three unacked, prefetch is 1
    ch.basic_ack(3, multiple=True)
