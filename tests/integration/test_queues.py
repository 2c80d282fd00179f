"""Queues: declare flags and arguments, bindings, purge/delete, TTLs, length limits, dead-lettering,
priorities."""
from __future__ import annotations

import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError

from amqp_helpers import Consumer, consumer_count, count, count_in, declare, get, get_all, publish, \
    safe_close, unique, wait_count, wait_until


def _gone(conn, queue: str) -> bool:
    c = conn.channel()
    try:
        c.queue_declare(queue, passive=True)
    except ChannelClosedByBroker as e:
        return e.reply_code == 404
    c.close()
    return False


def _dlx_setup(ch, rk: str = ""):
    """A fanout dead-letter exchange with a queue collecting dead letters."""
    dlx, dead = unique("dlx"), unique("dead")
    ch.exchange_declare(dlx, "fanout", auto_delete=True)
    declare(ch, dead)
    ch.queue_bind(dead, dlx)
    return dlx, dead


def _xdeath(d):
    headers = d.properties.headers or {}
    assert "x-death" in headers, headers
    return headers["x-death"]


# -- exclusive / auto-delete / server-named ------------------------------------------------------
def test_exclusive_queue_locked_for_other_connections(broker, conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), exclusive=True)
    other = broker.connection()
    try:
        for op in (lambda c: c.queue_declare(q, passive=True),
                   lambda c: c.queue_declare(q, exclusive=True),
                   lambda c: c.basic_consume(q, lambda *a: None),
                   lambda c: c.queue_delete(q)):
            with pytest.raises(ChannelClosedByBroker) as ei:
                op(other.channel())
            assert ei.value.reply_code == 405, ei.value
            assert ei.value.reply_text.startswith("RESOURCE_LOCKED")
        assert other.is_open
    finally:
        safe_close(other)
    # the owner uses it freely, and it goes away with the owner's connection
    publish(ch, q, [b"mine"])
    wait_count(conn, q, 1)
    safe_close(conn)
    probe = broker.connection()
    try:
        wait_until(lambda: _gone(probe, q), 3, message="exclusive queue deleted with its owner")
    finally:
        safe_close(probe)


def test_auto_delete_queue_removed_after_last_consumer_cancels(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), auto_delete=True)
    c1 = Consumer(conn, ch, q)
    c2 = Consumer(conn, ch, q)
    assert consumer_count(ch, q) == 2
    ch.basic_cancel(c1.tag)
    assert consumer_count(ch, q) == 1    # still there with one consumer
    ch.basic_cancel(c2.tag)
    wait_until(lambda: _gone(conn, q), 3, message="auto-delete queue removed")


def test_auto_delete_queue_without_consumers_stays(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), auto_delete=True)
    publish(ch, q, [b"x"])
    time.sleep(0.2)
    wait_count(conn, q, 1)
    ch.queue_delete(q)


def test_server_named_queue(conn):
    ch = conn.channel()
    ok = ch.queue_declare("", exclusive=True)
    name = ok.method.queue
    assert name.startswith("amq.gen-") and len(name) > len("amq.gen-")
    assert ok.method.message_count == 0 and ok.method.consumer_count == 0
    other = ch.queue_declare("", exclusive=True).method.queue
    assert other != name
    ch.basic_publish("", name, b"hi")
    assert [d.body for d in get_all(ch, name)] == [b"hi"]


def test_queue_declare_ok_counts(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, [b"1", b"2", b"3"])
    Consumer(conn, conn.channel(), q, auto_ack=False, arguments=None)
    ok = ch.queue_declare(q)      # non-passive redeclare reports counts too
    assert ok.method.queue == q and ok.method.consumer_count == 1
    assert ok.method.message_count in (0, 1, 2, 3)   # the consumer is taking them


# -- argument inequivalence ------------------------------------------------------------------------
@pytest.mark.parametrize("first,second", [
    (dict(durable=False), dict(durable=True)),
    (dict(auto_delete=False), dict(auto_delete=True)),
    (dict(arguments={"x-message-ttl": 1000}), dict(arguments={"x-message-ttl": 2000})),
    (dict(arguments={"x-max-length": 5}), dict(arguments={})),
], ids=["durable", "auto_delete", "ttl", "max-length-missing"])
def test_queue_argument_inequivalence_is_406(conn, first, second):
    ch = conn.channel()
    q = declare(ch, unique("q"), **first)
    try:
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.queue_declare(q, **second)
        assert ei.value.reply_code == 406
        assert ei.value.reply_text.startswith("PRECONDITION_FAILED - inequivalent arg")
        assert conn.is_open
    finally:
        conn.channel().queue_delete(q)


def test_queue_redeclare_equivalent_ok(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), durable=True, arguments={"x-max-length": 10})
    try:
        ch.queue_declare(q, durable=True, arguments={"x-max-length": 10})
        ch.queue_declare(q, passive=True, durable=False)   # passive ignores the other flags
    finally:
        ch.queue_delete(q)


# -- bind / unbind / purge / delete --------------------------------------------------------------
def test_queue_bind_and_unbind(ch, qname, xname):
    ch.exchange_declare(xname, "direct")
    declare(ch, qname)
    ch.queue_bind(qname, xname, routing_key="k")
    ch.queue_bind(qname, xname, routing_key="k")     # idempotent
    ch.basic_publish(xname, "k", b"1")
    ch.queue_unbind(qname, xname, routing_key="k")
    ch.basic_publish(xname, "k", b"2")
    ch.queue_unbind(qname, xname, routing_key="never-bound")   # unbinding nothing is fine
    assert [d.body for d in get_all(ch, qname)] == [b"1"]
    ch.exchange_delete(xname)


def test_queue_bind_to_missing_exchange_is_404(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_bind(qname, unique("nox"), routing_key="k")
    assert ei.value.reply_code == 404


def test_queue_purge_returns_count(ch, qname):
    declare(ch, qname)
    publish(ch, qname, [b"a", b"b", b"c"])
    assert ch.queue_purge(qname).method.message_count == 3
    assert count(ch, qname) == 0
    assert ch.queue_purge(qname).method.message_count == 0


def test_queue_purge_keeps_unacked(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    publish(ch, qname, [b"a", b"b", b"c"])
    d = get(ch, qname)
    assert ch.queue_purge(qname).method.message_count == 2
    ch.close()                       # the unacked one comes back
    wait_count(conn, qname, 1)
    assert get(conn.channel(), qname, auto_ack=True).body == d.body


def test_queue_delete_if_unused_and_if_empty(conn, qname):
    ch = conn.channel()
    declare(ch, qname)
    publish(ch, qname, [b"a"])
    cons_ch = conn.channel()
    c = Consumer(conn, cons_ch, qname, auto_ack=True)
    c.wait_for(1)
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_delete(qname, if_unused=True)
    assert ei.value.reply_code == 406 and "in use" in ei.value.reply_text
    cons_ch.basic_cancel(c.tag)
    ch = conn.channel()
    publish(ch, qname, [b"b"])
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_delete(qname, if_empty=True)
    assert ei.value.reply_code == 406 and "not empty" in ei.value.reply_text
    ch = conn.channel()
    assert ch.queue_delete(qname, if_unused=True).method.message_count == 1
    assert _gone(conn, qname)


def test_queue_delete_of_missing_queue_is_ok(ch):
    assert ch.queue_delete(unique("never")).method.message_count == 0


# -- TTLs and expiry -----------------------------------------------------------------------------
def test_queue_message_ttl(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-message-ttl": 500})
    publish(ch, q, [b"a", b"b"])
    assert get(ch, q, auto_ack=True).body == b"a"    # not expired yet
    wait_count(conn, q, 0, timeout=3)                # b expired
    assert get(ch, q) is None


def test_queue_message_ttl_zero_without_consumer_drops(conn):
    # the dropped message is dead-lettered, which shows it reached the queue and expired there
    # (a count of 0 alone is also what a publish that has not landed yet looks like)
    ch = conn.channel()
    dlq = declare(ch, unique("dlq"))
    q = declare(ch, unique("q"), arguments={"x-message-ttl": 0, "x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": dlq})
    publish(ch, q, [b"a"])
    wait_count(conn, dlq, 1, timeout=5)
    assert count(ch, q) == 0 and get(ch, q) is None
    d = get(ch, dlq, auto_ack=True)
    assert d.body == b"a" and d.properties.headers["x-death"][0]["reason"] == "expired"


def test_per_message_expiration(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="150"))
    ch.basic_publish("", q, b"forever")
    wait_count(conn, q, 1, timeout=3)
    d = get(ch, q, auto_ack=True)
    assert d.body == b"forever"


def test_per_message_expiration_invalid_is_406(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration="not-a-number"))
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(q, passive=True)
    assert ei.value.reply_code == 406


def test_message_keeps_expiration_property_when_delivered(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration="60000"))
    assert get(ch, q, auto_ack=True).properties.expiration == "60000"


def test_queue_expires_when_unused(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-expires": 300})
    assert not _gone(conn, q)
    # a (passive) declare counts as a use and restarts the timer: poll slower than x-expires
    wait_until(lambda: _gone(conn, q), 5, interval=0.6, message="x-expires queue deleted")


def test_queue_expires_not_while_consumed(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-expires": 300})
    c = Consumer(conn, ch, q)
    c.settle(0.8)
    assert not _gone(conn, q)
    c.settle(0.1)
    ch.basic_cancel(c.tag)
    wait_until(lambda: _gone(conn, q), 5, interval=0.6,
               message="x-expires queue deleted after cancel")


# -- length limits -------------------------------------------------------------------------------
def test_max_length_drop_head(ch):
    q = declare(ch, unique("q"), arguments={"x-max-length": 2})
    publish(ch, q, [b"1", b"2", b"3", b"4"])
    assert [d.body for d in get_all(ch, q)] == [b"3", b"4"]


def test_max_length_zero_drops_everything(ch):
    q = declare(ch, unique("q"), arguments={"x-max-length": 0})
    publish(ch, q, [b"1"])
    assert count(ch, q) == 0


def test_max_length_reject_publish__C6(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    publish(ch, q, [b"1", b"2", b"3"])     # without confirms the 3rd is dropped silently
    assert [d.body for d in get_all(ch, q)] == [b"1", b"2"]
    ch.confirm_delivery()
    publish(ch, q, [b"4", b"5"])
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"6")
    assert [d.body for d in get_all(ch, q)] == [b"4", b"5"]


def test_max_length_reject_publish_dlx__C6(conn):
    ch = conn.channel()
    dlx, dead = _dlx_setup(ch)
    q = declare(ch, unique("q"), arguments={
        "x-max-length": 1, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": dlx})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"kept")
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"rejected")
    assert [d.body for d in get_all(ch, q)] == [b"kept"]
    wait_count(conn, dead, 1)
    [d] = get_all(ch, dead)
    assert d.body == b"rejected"
    [death] = _xdeath(d)
    assert death["reason"] == "maxlen" and death["queue"] == q


def test_max_length_bytes(ch):
    q = declare(ch, unique("q"), arguments={"x-max-length-bytes": 10})
    publish(ch, q, [b"aaaa", b"bbbb", b"cccc"])    # 12 body bytes > 10: the head goes
    assert [d.body for d in get_all(ch, q)] == [b"bbbb", b"cccc"]
    publish(ch, q, [b"x" * 11])                    # bigger than the limit on its own
    assert count(ch, q) == 0


def test_max_length_counts_only_ready_messages(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-max-length": 1})
    publish(ch, q, [b"1"])
    d = get(ch, q)                     # unacked: not counted
    publish(ch, q, [b"2"])
    wait_count(conn, q, 1)
    # requeued in front of "2": two ready > 1, the head (the requeued "1") is dropped
    ch.basic_reject(d.delivery_tag, requeue=True)
    assert [x.body for x in get_all(ch, q)] == [b"2"]


# -- dead-lettering ------------------------------------------------------------------------------
def test_dead_letter_on_reject_with_x_death(conn):
    ch = conn.channel()
    dlx, dead = _dlx_setup(ch)
    src_x = unique("x")
    ch.exchange_declare(src_x, "direct", auto_delete=True)
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx})
    ch.queue_bind(q, src_x, "orig-key")
    ch.basic_publish(src_x, "orig-key", b"bad", pika.BasicProperties(headers={"app": "h"},
                                                                     message_id="m-1"))
    d = get(ch, q)
    ch.basic_reject(d.delivery_tag, requeue=False)
    wait_count(conn, dead, 1)
    [dd] = get_all(ch, dead)
    assert dd.body == b"bad" and dd.properties.message_id == "m-1"
    assert dd.exchange == dlx and dd.routing_key == "orig-key"
    h = dd.properties.headers
    assert h["app"] == "h"
    [death] = h["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == q
    assert death["exchange"] == src_x
    assert list(death["routing-keys"]) == ["orig-key"]
    assert "time" in death
    assert h["x-first-death-reason"] == "rejected"
    assert h["x-first-death-queue"] == q
    assert h["x-first-death-exchange"] == src_x


def test_dead_letter_on_nack_multiple(conn):
    ch = conn.channel()
    dlx, dead = _dlx_setup(ch)
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx})
    publish(ch, q, [b"1", b"2", b"3"])
    ds = [get(ch, q) for _ in range(3)]
    ch.basic_nack(ds[1].delivery_tag, multiple=True, requeue=False)
    ch.basic_nack(ds[2].delivery_tag, requeue=True)
    wait_count(conn, dead, 2)
    assert [d.body for d in get_all(ch, dead)] == [b"1", b"2"]
    wait_count(conn, q, 1)


def test_dead_letter_on_queue_ttl_expiry(conn):
    ch = conn.channel()
    dlx, dead = _dlx_setup(ch)
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 100})
    ch.basic_publish("", q, b"old")
    wait_count(conn, dead, 1, timeout=3)
    [d] = get_all(ch, dead)
    [death] = _xdeath(d)
    assert death["reason"] == "expired" and death["queue"] == q and death["count"] == 1
    assert death["exchange"] == "" and list(death["routing-keys"]) == [q]
    assert "original-expiration" not in death


def test_dead_letter_on_per_message_expiry(conn):
    ch = conn.channel()
    dlx, dead = _dlx_setup(ch)
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx})
    ch.basic_publish("", q, b"old", pika.BasicProperties(expiration="100"))
    wait_count(conn, dead, 1, timeout=3)
    [d] = get_all(ch, dead)
    [death] = _xdeath(d)
    assert death["reason"] == "expired" and death["original-expiration"] == "100"
    assert d.properties.expiration is None    # removed so it does not expire again


def test_dead_letter_on_max_length(conn):
    ch = conn.channel()
    dlx, dead = _dlx_setup(ch)
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx, "x-max-length": 1})
    publish(ch, q, [b"first", b"second"])
    wait_count(conn, dead, 1)
    [d] = get_all(ch, dead)
    assert d.body == b"first"
    [death] = _xdeath(d)
    assert death["reason"] == "maxlen" and death["queue"] == q
    assert [x.body for x in get_all(ch, q)] == [b"second"]


def test_dead_letter_routing_key(conn):
    ch = conn.channel()
    dlx, dead_a, dead_b = unique("dlx"), unique("dead"), unique("dead")
    ch.exchange_declare(dlx, "direct", auto_delete=True)
    declare(ch, dead_a)
    declare(ch, dead_b)
    ch.queue_bind(dead_a, dlx, "route-a")
    ch.queue_bind(dead_b, dlx, "orig")
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": dlx,
                                            "x-dead-letter-routing-key": "route-a"})
    ch.queue_bind(q, "amq.direct", "orig")
    ch.basic_publish("amq.direct", "orig", b"x")
    d = get(ch, q)
    ch.basic_reject(d.delivery_tag, requeue=False)
    wait_count(conn, dead_a, 1)
    [dd] = get_all(ch, dead_a)
    assert dd.routing_key == "route-a"
    [death] = _xdeath(dd)
    assert list(death["routing-keys"]) == ["orig"] and death["exchange"] == "amq.direct"
    assert count(ch, dead_b) == 0


def test_dead_letter_default_exchange_to_queue(conn):
    """x-dead-letter-exchange="" with a dead-letter routing key targets a queue by name."""
    ch = conn.channel()
    dead = declare(ch, unique("dead"))
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": dead})
    publish(ch, q, [b"x"])
    d = get(ch, q)
    ch.basic_nack(d.delivery_tag, requeue=False)
    wait_count(conn, dead, 1)
    [dd] = get_all(ch, dead)
    assert _xdeath(dd)[0]["queue"] == q


def test_dead_letter_count_increments_on_cycle(conn):
    """Dead-lettered twice through the same queue/reason: one x-death entry with count 2."""
    ch = conn.channel()
    q1, q2 = unique("q"), unique("q")
    declare(ch, q1, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q2})
    declare(ch, q2, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q1})
    publish(ch, q1, [b"loop"])
    for src in (q1, q2, q1):
        wait_count(conn, src, 1)
        d = get(ch, src)
        ch.basic_reject(d.delivery_tag, requeue=False)
    wait_count(conn, q2, 1)
    d = get(ch, q2, auto_ack=True)
    deaths = {x["queue"]: x for x in _xdeath(d)}
    assert deaths[q1]["count"] == 2 and deaths[q2]["count"] == 1
    assert all(x["reason"] == "rejected" for x in deaths.values())
    assert _xdeath(d)[0]["queue"] == q1     # most recent first
    assert d.properties.headers["x-first-death-queue"] == q1


def test_dead_letter_to_missing_exchange_drops(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-dead-letter-exchange": unique("nox")})
    publish(ch, q, [b"x"])
    d = get(ch, q)
    ch.basic_reject(d.delivery_tag, requeue=False)
    wait_count(conn, q, 0)
    assert ch.is_open


# -- priorities ----------------------------------------------------------------------------------
def test_max_priority_ordering(ch):
    q = declare(ch, unique("q"), arguments={"x-max-priority": 10})
    for p, body in [(1, b"p1"), (5, b"p5a"), (None, b"none"), (9, b"p9"), (5, b"p5b"),
                    (200, b"p200")]:
        ch.basic_publish("", q, body, pika.BasicProperties(priority=p))
    got = [d.body for d in get_all(ch, q)]
    # higher first, FIFO within a priority, no priority = 0, above max = max
    assert got == [b"p9", b"p200", b"p5a", b"p5b", b"p1", b"none"] or \
        got == [b"p200", b"p9", b"p5a", b"p5b", b"p1", b"none"]
    assert got.index(b"p5a") < got.index(b"p5b")


def test_priority_ignored_without_max_priority(ch):
    q = declare(ch, unique("q"))
    for p, body in [(1, b"a"), (9, b"b"), (5, b"c")]:
        ch.basic_publish("", q, body, pika.BasicProperties(priority=p))
    assert [d.body for d in get_all(ch, q)] == [b"a", b"b", b"c"]
