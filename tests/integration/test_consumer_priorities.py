"""Consumer priorities (basic.consume argument x-priority, BEHAVIOUR.md S2), as RabbitMQ's
consumer-priority.html describes them: messages go to the highest-priority consumers that can
take one, round robin among equal priorities; lower priorities get messages only while every
higher one is blocked (its prefetch used up). The server announces consumer_priorities."""
from __future__ import annotations

import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_helpers import Consumer, declare, publish, wait_count


def bodies(n, start=1):
    return [str(i).encode() for i in range(start, start + n)]


def test_capability_announced__S2(conn):
    caps = conn._impl.server_properties["capabilities"]
    assert caps["consumer_priorities"] is True


def test_higher_priority_first_lower_only_while_it_is_full__S2_P1(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    hch = conn.channel()
    hch.basic_qos(prefetch_count=2)
    high = Consumer(conn, hch, qname, arguments={"x-priority": 10})
    low = Consumer(conn, ch, qname)  # priority 0, no prefetch
    publish(ch, qname, bodies(6))
    assert high.wait_for(2) and low.wait_for(4)
    assert high.bodies() == [b"1", b"2"] and low.bodies() == [b"3", b"4", b"5", b"6"]
    hch.basic_ack(high.deliveries[0].delivery_tag)  # room again: the next one is high's
    publish(ch, qname, [b"7"])
    assert high.wait_for(3)[2].body == b"7"
    assert len(low.deliveries) == 4


def test_equal_priorities_round_robin_lower_gets_nothing__S2(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    low = Consumer(conn, ch, qname, auto_ack=True, arguments={"x-priority": -1})
    a = Consumer(conn, ch, qname, auto_ack=True, arguments={"x-priority": 5})
    b = Consumer(conn, ch, qname, auto_ack=True, arguments={"x-priority": 5})
    publish(ch, qname, bodies(10))
    wait_count(conn, qname, 0)
    a.wait_for(5)
    b.wait_for(5)
    assert a.bodies() == [b"1", b"3", b"5", b"7", b"9"]
    assert b.bodies() == [b"2", b"4", b"6", b"8", b"10"]
    assert low.deliveries == []


def test_a_priority_consumer_joining_late_takes_over__S2(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    first = Consumer(conn, ch, qname, auto_ack=True)
    publish(ch, qname, bodies(2))
    first.wait_for(2)
    late = Consumer(conn, conn.channel(), qname, auto_ack=True, arguments={"x-priority": 1})
    publish(ch, qname, bodies(3, start=3))
    assert late.wait_for(3) and late.bodies() == [b"3", b"4", b"5"]
    assert first.bodies() == [b"1", b"2"]


def test_negative_priority_below_the_default__S2(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    dch = conn.channel()
    dch.basic_qos(prefetch_count=1)
    default = Consumer(conn, dch, qname)
    neg = Consumer(conn, ch, qname, auto_ack=True, arguments={"x-priority": -10})
    publish(ch, qname, bodies(3))
    assert default.wait_for(1) and neg.wait_for(2)
    assert default.bodies() == [b"1"] and neg.bodies() == [b"2", b"3"]


@pytest.mark.parametrize("value,shown", [("high", "longstr"), (True, "bool")])
def test_x_priority_not_an_integer_refused__S2(conn, qname, value, shown):
    ch = conn.channel()
    declare(ch, qname)
    with pytest.raises(ChannelClosedByBroker) as ei:
        Consumer(conn, conn.channel(), qname, arguments={"x-priority": value})
    assert (ei.value.reply_code, ei.value.reply_text) == (
        406, f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{qname}' in vhost "
             f"'/': \"expected integer, got {shown}\"")
    assert ch.is_open and conn.is_open
