"""Transactions: T1 (tx.select / tx.commit / tx.rollback for publishes and acks)."""
from __future__ import annotations

import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_helpers import count, declare, get, get_all, publish, unique, wait_count


def test_tx_publish_visible_only_after_commit__T1(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.tx_select()
    publish(ch, q, [b"a", b"b"])
    observer = conn.channel()
    assert count(observer, q) == 0
    ch.tx_commit()
    wait_count(conn, q, 2)
    publish(ch, q, [b"c"])
    ch.tx_commit()
    assert [d.body for d in get_all(observer, q)] == [b"a", b"b", b"c"]


def test_tx_rollback_discards_publishes__T1(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.tx_select()
    publish(ch, q, [b"a", b"b"])
    ch.tx_rollback()
    ch.tx_commit()  # an empty transaction
    assert count(ch, q) == 0
    publish(ch, q, [b"c"])
    ch.tx_commit()
    wait_count(conn, q, 1)


def test_tx_acks_take_effect_at_commit__T1(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, [b"m1", b"m2", b"m3"])
    ch.tx_select()
    ds = [get(ch, q) for _ in range(3)]
    ch.basic_ack(ds[0].delivery_tag)
    ch.basic_ack(ds[1].delivery_tag)
    ch.tx_rollback()          # both acks discarded: m1 and m2 stay unacked
    ch.basic_ack(ds[2].delivery_tag)
    ch.tx_commit()            # m3 settled
    # the rolled-back acks did not settle anything: closing the channel requeues m1 and m2
    ch.close()
    ch = conn.channel()
    wait_count(conn, q, 2)
    got = get_all(ch, q)
    assert [(d.body, d.redelivered) for d in got] == [(b"m1", True), (b"m2", True)]


def test_tx_uncommitted_ack_then_channel_close_requeues__T1(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, [b"m1"])
    ch.tx_select()
    d = get(ch, q)
    ch.basic_ack(d.delivery_tag)
    ch.close()                # never committed
    ch = conn.channel()
    wait_count(conn, q, 1)
    assert get(ch, q, auto_ack=True).redelivered


def test_tx_reject_and_nack_in_transaction__T1(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, [b"m1", b"m2"])
    ch.tx_select()
    d1, d2 = get(ch, q), get(ch, q)
    ch.basic_reject(d1.delivery_tag, requeue=True)
    ch.basic_nack(d2.delivery_tag, requeue=False)
    observer = conn.channel()
    assert count(observer, q) == 0   # nothing requeued before commit
    ch.tx_commit()
    wait_count(conn, q, 1)
    assert [d.body for d in get_all(observer, q)] == [b"m1"]


def test_tx_commit_without_select_is_precondition_failed__T1(conn):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.tx_commit()
    assert ei.value.reply_code == 406
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.tx_rollback()
    assert ei.value.reply_code == 406
    assert conn.is_open


def test_tx_publish_uncommitted_lost_on_channel_close__T1(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.tx_select()
    publish(ch, q, [b"a"])
    ch.close()
    ch = conn.channel()
    assert count(ch, q) == 0
