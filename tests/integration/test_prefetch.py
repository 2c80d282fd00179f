"""Prefetch (basic.qos): P1-P3."""
from __future__ import annotations

from amqp_helpers import Consumer, count, declare, publish, unique, wait_count


def _queue(ch, n: int) -> str:
    q = declare(ch, unique("q"))
    publish(ch, q, [f"m{i}".encode() for i in range(1, n + 1)])
    return q


def test_prefetch_count_limits_unacked__P1(conn):
    ch = conn.channel()
    q = _queue(ch, 10)
    ch.basic_qos(prefetch_count=3)
    c = Consumer(conn, ch, q)
    c.wait_for(3)
    assert len(c.settle(0.3)) == 3
    ch.basic_ack(c.deliveries[0].delivery_tag)          # one ack -> one more
    c.wait_for(4)
    assert len(c.settle(0.3)) == 4
    ch.basic_ack(c.deliveries[3].delivery_tag, multiple=True)  # settles 2,3,4 -> three more
    c.wait_for(7)
    assert len(c.settle(0.3)) == 7
    assert [d.body for d in c.deliveries] == [f"m{i}".encode() for i in range(1, 8)]


def test_prefetch_zero_is_unlimited__P1(conn):
    ch = conn.channel()
    q = _queue(ch, 50)
    ch.basic_qos(prefetch_count=0)
    c = Consumer(conn, ch, q)
    c.wait_for(50)
    assert count(ch, q) == 0


def test_global_false_limits_each_consumer_created_afterwards__P2(conn):
    ch = conn.channel()
    qa, qb = _queue(ch, 10), _queue(ch, 10)
    ch.basic_qos(prefetch_count=1, global_qos=False)
    a = Consumer(conn, ch, qa)
    ch.basic_qos(prefetch_count=3, global_qos=False)   # applies to b only
    b = Consumer(conn, ch, qb)
    a.wait_for(1)
    b.wait_for(3)
    a.settle(0.3)
    assert len(a.deliveries) == 1 and len(b.deliveries) == 3


def test_global_true_limits_channel_as_a_whole__P2(conn):
    ch = conn.channel()
    qa, qb = _queue(ch, 10), _queue(ch, 10)
    ch.basic_qos(prefetch_count=4, global_qos=True)
    a = Consumer(conn, ch, qa)
    b = Consumer(conn, ch, qb)
    # both consumers collect into their own lists on the same connection
    a.wait_for(1)
    a.settle(0.3)
    assert len(a.deliveries) + len(b.deliveries) == 4
    # acking one of them lets exactly one more through, to either consumer
    first = (a.deliveries or b.deliveries)[0]
    ch.basic_ack(first.delivery_tag)
    a.settle(0.3)
    assert len(a.deliveries) + len(b.deliveries) == 5


def test_global_and_per_consumer_limits_both_apply__P2(conn):
    ch = conn.channel()
    qa, qb = _queue(ch, 10), _queue(ch, 10)
    # order matters in RabbitMQ: a global=false qos resets the channel-wide limit (see next test)
    ch.basic_qos(prefetch_count=2, global_qos=False)
    ch.basic_qos(prefetch_count=3, global_qos=True)
    a = Consumer(conn, ch, qa)
    b = Consumer(conn, ch, qb)
    a.wait_for(1)
    a.settle(0.4)
    assert len(a.deliveries) <= 2 and len(b.deliveries) <= 2
    assert len(a.deliveries) + len(b.deliveries) == 3


def test_per_consumer_qos_after_global_unsets_global_limit__P2(conn):
    """RabbitMQ 3.10: basic.qos(global=false) after basic.qos(global=true) removes the channel-wide
    limit (rabbit_channel calls rabbit_limiter:unlimit_prefetch)."""
    ch = conn.channel()
    qs = [_queue(ch, 10) for _ in range(3)]
    ch.basic_qos(prefetch_count=3, global_qos=True)
    ch.basic_qos(prefetch_count=2, global_qos=False)
    cs = [Consumer(conn, ch, q) for q in qs]
    cs[0].wait_for(2)
    cs[0].settle(0.4)
    assert [len(c.deliveries) for c in cs] == [2, 2, 2]


def test_changing_prefetch_in_flight_never_loses_or_duplicates__P3(conn):
    ch = conn.channel()
    q = _queue(ch, 20)
    ch.basic_qos(prefetch_count=6, global_qos=True)
    c = Consumer(conn, ch, q)
    c.wait_for(6)
    ch.basic_qos(prefetch_count=2, global_qos=True)   # 6 outstanding > 2 for a while
    ch.basic_ack(c.deliveries[0].delivery_tag)         # 5 outstanding: still >= 2, nothing new
    assert len(c.settle(0.3)) == 6
    ch.basic_ack(c.deliveries[5].delivery_tag, multiple=True)  # 0 outstanding: 2 more
    c.wait_for(8)
    assert len(c.settle(0.3)) == 8
    ch.basic_qos(prefetch_count=5, global_qos=True)   # raising it lets more through
    c.wait_for(11)
    # drain the rest, acking as deliveries come in
    acked = 6  # m1..m6 were acked above
    while True:
        for d in c.deliveries[acked:]:
            ch.basic_ack(d.delivery_tag)
        acked = len(c.deliveries)
        if acked >= 20:
            break
        c.wait_for(acked + 1)
    c.settle(0.2)
    bodies = [d.body for d in c.deliveries]
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(1, 21))
    assert len(set(bodies)) == 20
    assert not any(d.redelivered for d in c.deliveries)
    wait_count(conn, q, 0)
