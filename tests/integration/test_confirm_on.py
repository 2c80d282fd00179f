"""x-confirm-on (issue 4, seed 003): the publisher's confirm after a consumer's ack.

`ack`: the queue confirms when a consumer acks and nacks when the message is lost otherwise
(reject/nack with requeue=false, TTL, overflow, purge, delete); `ack-lite`: the consuming
channel confirms on ack, rejections are not reported. The publisher here is the raw client, so
the test sees exactly which basic.ack / basic.nack frames arrive and when.
"""
from __future__ import annotations

import os

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker

import rawamqp
from amqp_helpers import safe_close, unique, wait_until
from conftest import Broker

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="x-confirm-on is Leveret's extension")

QUIET = 0.3  # seconds in which no confirm may arrive (an absence, not a speed)


class Publisher:
    """A confirm-mode publisher on the raw client; collects basic.ack / basic.nack."""

    def __init__(self, broker):
        self.c = rawamqp.RawClient(broker.host, broker.port)
        self.c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        self.c.open_channel(1)
        self.c.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
        self.seq = 0
        self.acked: set[int] = set()
        self.nacked: set[int] = set()

    def publish(self, routing_key, body=b"x", exchange="", **props) -> int:
        self.c.publish(1, exchange, routing_key, body,
                       commands.Basic.Properties(**props) if props else None)
        self.seq += 1
        return self.seq

    def _take(self, m):
        tags = range(1, m.delivery_tag + 1) if m.multiple else [m.delivery_tag]
        (self.acked if isinstance(m, commands.Basic.Ack) else self.nacked).update(tags)

    def settle(self, timeout):
        """Read confirms for `timeout` seconds (or until the socket is quiet that long)."""
        try:
            while True:
                _, m = self.c.read_command(timeout)
                if isinstance(m, (commands.Basic.Ack, commands.Basic.Nack)):
                    self._take(m)
        except rawamqp.Timeout:
            pass

    def wait(self, tags, nack=False, timeout=5.0):
        target = self.nacked if nack else self.acked
        wait_until(lambda: (self.settle(0.05) or True) and set(tags) <= target, timeout,
                   message=f"{'nack' if nack else 'ack'} of {tags}")

    def close(self):
        self.c.close()


@pytest.fixture
def pub(broker):
    p = Publisher(broker)
    yield p
    p.close()


def _get(ch, q):
    """basic.get once the raw publisher's message has arrived (another connection: no order)."""
    return wait_until(lambda: ch.basic_get(q, auto_ack=False)[0], message=f"a message in {q}")


def _declare(ch, mode, **args):
    q = unique("co")
    ch.queue_declare(q, arguments={"x-confirm-on": mode, **args})
    return q


def test_unknown_value_and_changed_value_are_406(conn):
    with pytest.raises(ChannelClosedByBroker) as ei:
        conn.channel().queue_declare(unique("co"), arguments={"x-confirm-on": "later"})
    assert ei.value.reply_code == 406
    ch = conn.channel()
    q = _declare(ch, "ack")
    with pytest.raises(ChannelClosedByBroker) as ei:
        conn.channel().queue_declare(q, arguments={"x-confirm-on": "ack-lite"})
    assert ei.value.reply_code == 406


@pytest.mark.parametrize("mode", ["ack", "ack-lite"])
def test_confirm_waits_for_the_consumers_ack(conn, pub, mode):
    ch = conn.channel()
    q = _declare(ch, mode)
    pub.publish(q, b"one")
    pub.settle(QUIET)
    assert pub.acked == set() and pub.nacked == set()      # no consumer yet: no confirm
    m = _get(ch, q)
    pub.settle(QUIET)
    assert pub.acked == set()                             # delivered, not acked yet
    ch.basic_ack(m.delivery_tag)
    pub.wait([1])
    assert pub.nacked == set()


def test_ack_mode_reject_and_nack_without_requeue_are_nacks(conn, pub):
    ch = conn.channel()
    q = _declare(ch, "ack")
    for _ in range(3):
        pub.publish(q)
    m1, m2, m3 = _get(ch, q), _get(ch, q), _get(ch, q)
    ch.basic_reject(m1.delivery_tag, requeue=False)
    ch.basic_nack(m2.delivery_tag, requeue=True)          # requeued: still waits
    ch.basic_nack(m3.delivery_tag, requeue=False)
    pub.wait([1, 3], nack=True)
    pub.settle(QUIET)
    assert pub.acked == set()
    again = _get(ch, q)
    assert again.redelivered
    ch.basic_ack(again.delivery_tag)
    pub.wait([2])


def test_ack_mode_ttl_overflow_purge_and_delete_are_nacks(conn, pub):
    ch = conn.channel()
    q_ttl = _declare(ch, "ack", **{"x-message-ttl": 50})
    q_len = _declare(ch, "ack", **{"x-max-length": 1})
    q_purge = _declare(ch, "ack")
    q_del = _declare(ch, "ack")
    pub.publish(q_ttl)                                     # 1: expires
    pub.publish(q_len)                                     # 2: dropped by 3 (drop-head)
    pub.publish(q_len)                                     # 3: still queued
    pub.publish(q_purge)                                   # 4: purged
    pub.publish(q_del)                                     # 5: queue deleted
    wait_until(lambda: ch.queue_declare(q_purge, passive=True).method.message_count == 1)
    ch.queue_purge(q_purge)
    ch.queue_delete(q_del)
    pub.wait([1, 2, 4, 5], nack=True)
    assert 3 not in pub.nacked and 3 not in pub.acked


def test_fanout_to_three_queues_waits_for_the_slowest_consumer(conn, pub):
    ch = conn.channel()
    x = unique("fan")
    ch.exchange_declare(x, "fanout", auto_delete=True)
    queues = [_declare(ch, "ack") for _ in range(3)]
    for q in queues:
        ch.queue_bind(q, x)
    pub.publish("", exchange=x)
    for q in queues[:2]:
        ch.basic_ack(_get(ch, q).delivery_tag)
    pub.settle(QUIET)
    assert pub.acked == set()                              # the slow one has not acked
    ch.basic_ack(_get(ch, queues[2]).delivery_tag)
    pub.wait([1])


def test_consumer_closing_with_unacked_requeues_then_next_ack_confirms(broker, conn, pub):
    ch = conn.channel()
    q = _declare(ch, "ack")
    pub.publish(q)
    other = broker.connection()
    och = other.channel()
    _get(och, q)
    och.close()                                            # unacked: requeued
    safe_close(other)
    pub.settle(QUIET)
    assert pub.acked == set() and pub.nacked == set()
    m = _get(ch, q)
    assert m.redelivered
    ch.basic_ack(m.delivery_tag)
    pub.wait([1])


def test_ack_lite_does_not_report_rejections(conn, pub):
    """What ack-lite cannot report (docs/confirm-on.md): a consumer's reject or nack with
    requeue=false leaves the publisher without an answer; it resends after its time-out."""
    ch = conn.channel()
    q = _declare(ch, "ack-lite")
    pub.publish(q)
    ch.basic_reject(_get(ch, q).delivery_tag, requeue=False)
    pub.settle(QUIET)
    assert pub.acked == set() and pub.nacked == set()


def test_persistent_messages_are_not_stored_before_delivery_and_resent_after_kill9(tmp_path):
    """ack mode: nothing is written before delivery, so kill -9 loses the unconfirmed
    messages; the publisher resends what was never confirmed and everything arrives (with
    duplicates possible, counted)."""
    broker = Broker.start_leveret(tmp_path)
    p = None
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.queue_declare("e2e", durable=True, arguments={"x-confirm-on": "ack"})
        conn.close()
        p = Publisher(broker)
        bodies = {}
        for i in range(20):
            bodies[p.publish("e2e", b"%d" % i, delivery_mode=2)] = b"%d" % i
        p.settle(QUIET)
        assert p.acked == set()
        p.close()
        p = None
        broker.kill9()
        broker = Broker.start_leveret(tmp_path, port=broker.port)
        conn = broker.connection()
        ch = conn.channel()
        assert ch.queue_declare("e2e", durable=True, passive=True).method.message_count == 0
        p = Publisher(broker)                              # the resend of the unconfirmed
        resent = {p.publish("e2e", body, delivery_mode=2): body for body in bodies.values()}
        got = []
        while len(got) < len(resent):
            m, _, body = ch.basic_get("e2e")
            if m is None:
                p.settle(0.05)
                continue
            got.append(body)
            ch.basic_ack(m.delivery_tag)
        p.wait(list(resent))
        assert sorted(got) == sorted(bodies.values())
        duplicates = len(got) - len(set(got))
        assert duplicates == 0                             # none here: nothing survived the crash
        conn.close()
    finally:
        if p is not None:
            p.close()
        broker.stop()


def test_policy_confirm_on_applies_and_clearing_it_confirms_the_waiting(fresh_broker):
    """Policy key confirm-on (rabbitmqctl set_policy syntax): a queue without x-confirm-on takes
    the policy's mode; when the policy goes, what waited for an ack is confirmed."""
    broker = fresh_broker
    broker.ctl("set_policy", "e2e", "^pol-", '{"confirm-on": "ack"}', "--apply-to", "queues")
    conn = broker.connection()
    p = Publisher(broker)
    try:
        ch = conn.channel()
        ch.queue_declare("pol-q")
        ch.queue_declare("plain-q")
        p.publish("pol-q")
        p.publish("plain-q")
        p.wait([2])                                        # plain queue: at enqueue
        p.settle(QUIET)
        assert 1 not in p.acked                            # policy queue: waits for the ack
        assert '"confirm-on": "ack"' in broker.ctl("list_policies").stdout
        broker.ctl("clear_policy", "e2e")
        p.wait([1])
    finally:
        p.close()
        safe_close(conn)
