"""Exchanges: types, default and amq.* exchanges, declare flags, bindings, alternate exchanges."""
from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_helpers import count, count_in, declare, get_all, unique, wait_until


def _bound_queue(ch, exchange: str, routing_key: str = "", arguments=None) -> str:
    q = declare(ch, unique("q"), auto_delete=False)
    ch.queue_bind(q, exchange, routing_key=routing_key, arguments=arguments)
    return q


def _bodies(ch, q):
    return [d.body for d in get_all(ch, q)]


def test_direct_exchange_routing(ch, xname):
    ch.exchange_declare(xname, "direct", auto_delete=True)
    qa = _bound_queue(ch, xname, "a")
    qb = _bound_queue(ch, xname, "b")
    ch.queue_bind(qb, xname, routing_key="a")   # qb gets both keys
    ch.basic_publish(xname, "a", b"to-a")
    ch.basic_publish(xname, "b", b"to-b")
    ch.basic_publish(xname, "c", b"to-nobody")
    assert _bodies(ch, qa) == [b"to-a"]
    assert _bodies(ch, qb) == [b"to-a", b"to-b"]


def test_fanout_exchange_routing(ch, xname):
    ch.exchange_declare(xname, "fanout", auto_delete=True)
    qs = [_bound_queue(ch, xname, rk) for rk in ("x", "y", "")]
    ch.basic_publish(xname, "ignored", b"all")
    for q in qs:
        assert _bodies(ch, q) == [b"all"]


def test_topic_exchange_routing(ch, xname):
    ch.exchange_declare(xname, "topic", auto_delete=True)
    patterns = {"star": "stock.*.nyse", "hash": "stock.#", "hash_only": "#", "exact": "stock.ibm.nyse",
                "mid_hash": "*.#.nyse", "empty_words": "a..b"}
    qs = {name: _bound_queue(ch, xname, p) for name, p in patterns.items()}
    keys = ["stock.ibm.nyse", "stock.msft.nasdaq", "stock", "stock.a.b.nyse", "bond.x.nyse", "a..b",
            ""]
    for k in keys:
        ch.basic_publish(xname, k, k.encode())
    got = {name: [b.decode() for b in _bodies(ch, q)] for name, q in qs.items()}
    assert got["star"] == ["stock.ibm.nyse"]
    assert got["hash"] == ["stock.ibm.nyse", "stock.msft.nasdaq", "stock", "stock.a.b.nyse"]
    assert got["hash_only"] == keys
    assert got["exact"] == ["stock.ibm.nyse"]
    assert got["mid_hash"] == ["stock.ibm.nyse", "stock.a.b.nyse", "bond.x.nyse"]
    assert got["empty_words"] == ["a..b"]


def test_headers_exchange_routing(ch, xname):
    ch.exchange_declare(xname, "headers", auto_delete=True)
    q_all = _bound_queue(ch, xname, arguments={"x-match": "all", "format": "pdf", "type": "report"})
    q_any = _bound_queue(ch, xname, arguments={"x-match": "any", "format": "pdf", "type": "log"})
    q_default = _bound_queue(ch, xname, arguments={"format": "zip"})  # x-match defaults to all

    def pub(headers, body):
        ch.basic_publish(xname, "rk-ignored", body, pika.BasicProperties(headers=headers))

    pub({"format": "pdf", "type": "report"}, b"1")
    pub({"format": "pdf", "type": "log"}, b"2")
    pub({"format": "zip", "type": "report", "extra": 1}, b"3")
    pub({"type": "log"}, b"4")
    pub(None, b"5")
    assert _bodies(ch, q_all) == [b"1"]
    assert _bodies(ch, q_any) == [b"1", b"2", b"4"]
    assert _bodies(ch, q_default) == [b"3"]


def test_default_exchange_routes_by_queue_name(ch, qname):
    declare(ch, qname)
    ch.basic_publish("", qname, b"direct-to-queue")
    assert _bodies(ch, qname) == [b"direct-to-queue"]
    # every queue is implicitly bound to it; explicit binding operations are refused
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_bind(qname, "", routing_key="other")
    assert ei.value.reply_code == 403


def test_default_exchange_cannot_be_declared_or_deleted(conn):
    with pytest.raises(ChannelClosedByBroker) as ei:
        conn.channel().exchange_delete("")
    assert ei.value.reply_code == 403


def test_amq_predeclared_exchanges(ch):
    expected = {"amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic",
                "amq.headers": "headers", "amq.match": "headers"}
    for name, etype in expected.items():
        ch.exchange_declare(name, passive=True)
        ch.exchange_declare(name, etype, durable=True)  # redeclaring equivalently is allowed
    q = _bound_queue(ch, "amq.topic", "t.#")
    ch.basic_publish("amq.topic", "t.1", b"via-amq-topic")
    assert _bodies(ch, q) == [b"via-amq-topic"]


def test_amq_prefix_reserved(conn):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.exchange_declare("amq." + unique("x"), "direct")
    assert ei.value.reply_code == 403 and ei.value.reply_text.startswith("ACCESS_REFUSED")
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare("amq." + unique("q"))
    assert ei.value.reply_code == 403


def test_passive_declare_of_missing_exchange_is_404(conn):
    ch = conn.channel()
    name = unique("x")
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.exchange_declare(name, passive=True)
    assert ei.value.reply_code == 404 and ei.value.reply_text.startswith("NOT_FOUND")
    assert name in ei.value.reply_text
    assert conn.is_open


def test_passive_declare_of_missing_queue_is_404(conn):
    ch = conn.channel()
    name = unique("q")
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(name, passive=True)
    assert ei.value.reply_code == 404 and name in ei.value.reply_text
    assert conn.is_open


def test_durable_exchange_inequivalent_redeclare_is_406(conn, xname):
    ch = conn.channel()
    ch.exchange_declare(xname, "direct", durable=True)
    try:
        ch.exchange_declare(xname, "direct", durable=True)    # equivalent: fine
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.exchange_declare(xname, "direct", durable=False)
        assert ei.value.reply_code == 406 and "durable" in ei.value.reply_text
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.exchange_declare(xname, "fanout", durable=True)
        assert ei.value.reply_code == 406
    finally:
        conn.channel().exchange_delete(xname)


def test_auto_delete_exchange_removed_after_last_binding(conn, xname):
    ch = conn.channel()
    ch.exchange_declare(xname, "direct", auto_delete=True)
    ch.exchange_declare(xname, passive=True)   # exists while it never had a binding
    q = declare(ch, unique("q"))
    ch.queue_bind(q, xname, "k1")
    ch.queue_bind(q, xname, "k2")
    ch.queue_unbind(q, xname, "k1")
    ch.exchange_declare(xname, passive=True)   # one binding left
    ch.queue_unbind(q, xname, "k2")

    def gone():
        c = conn.channel()
        try:
            c.exchange_declare(xname, passive=True)
            c.close()
            return False
        except ChannelClosedByBroker as e:
            return e.reply_code == 404
    wait_until(gone, 3, message="auto-delete exchange to disappear")


def test_internal_exchange_refuses_publish_with_403(conn, xname):
    ch = conn.channel()
    ch.exchange_declare(xname, "fanout", internal=True, auto_delete=True)
    q = _bound_queue(ch, xname)
    ch.basic_publish(xname, "", b"nope")
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.exchange_declare(xname, passive=True)   # a sync call to surface the async close
    assert ei.value.reply_code == 403 and ei.value.reply_text.startswith("ACCESS_REFUSED")
    # it can still be reached through an exchange-to-exchange binding
    ch = conn.channel()
    front = unique("x")
    ch.exchange_declare(front, "fanout", auto_delete=True)
    ch.exchange_bind(xname, front)
    ch.basic_publish(front, "", b"via-e2e")
    assert _bodies(ch, q) == [b"via-e2e"]


def test_exchange_to_exchange_bindings(ch):
    src, dst_topic, dst_fanout = unique("x"), unique("x"), unique("x")
    ch.exchange_declare(src, "direct", auto_delete=True)
    ch.exchange_declare(dst_topic, "topic", auto_delete=True)
    ch.exchange_declare(dst_fanout, "fanout", auto_delete=True)
    ch.exchange_bind(destination=dst_topic, source=src, routing_key="a.b")
    ch.exchange_bind(destination=dst_fanout, source=dst_topic, routing_key="a.*")
    q_topic = _bound_queue(ch, dst_topic, "#")
    q_fanout = _bound_queue(ch, dst_fanout)
    q_direct = _bound_queue(ch, src, "a.b")
    ch.basic_publish(src, "a.b", b"1")
    ch.basic_publish(src, "a.c", b"2")          # no binding on src for a.c
    assert _bodies(ch, q_topic) == [b"1"]
    assert _bodies(ch, q_fanout) == [b"1"]
    assert _bodies(ch, q_direct) == [b"1"]
    # a message reaching a queue twice through several paths is delivered once
    ch.queue_bind(q_direct, dst_fanout)
    ch.basic_publish(src, "a.b", b"3")
    assert _bodies(ch, q_direct) == [b"3"]
    assert _bodies(ch, q_topic) == [b"3"] and _bodies(ch, q_fanout) == [b"3"]
    ch.exchange_unbind(destination=dst_topic, source=src, routing_key="a.b")
    ch.basic_publish(src, "a.b", b"4")
    assert _bodies(ch, q_topic) == [] and _bodies(ch, q_direct) == [b"4"]


def test_alternate_exchange(ch):
    main, ae = unique("x"), unique("ae")
    ch.exchange_declare(ae, "fanout", auto_delete=True)
    ch.exchange_declare(main, "direct", auto_delete=True, arguments={"alternate-exchange": ae})
    q_main = _bound_queue(ch, main, "known")
    q_ae = _bound_queue(ch, ae)
    ch.basic_publish(main, "known", b"routed")
    ch.basic_publish(main, "unknown", b"unroutable")
    assert _bodies(ch, q_main) == [b"routed"]
    got = get_all(ch, q_ae)
    assert [d.body for d in got] == [b"unroutable"]
    assert got[0].exchange == main and got[0].routing_key == "unknown"


def test_alternate_exchange_with_mandatory_not_returned(conn):
    ch = conn.channel()
    main, ae = unique("x"), unique("ae")
    ch.exchange_declare(ae, "fanout", auto_delete=True)
    ch.exchange_declare(main, "direct", auto_delete=True, arguments={"alternate-exchange": ae})
    q_ae = _bound_queue(ch, ae)
    ch.confirm_delivery()
    ch.basic_publish(main, "unknown", b"x", mandatory=True)   # would raise UnroutableError
    assert count(ch, q_ae) == 1


def test_exchange_delete_if_unused(conn, xname):
    ch = conn.channel()
    ch.exchange_declare(xname, "direct")
    q = _bound_queue(ch, xname, "k")
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.exchange_delete(xname, if_unused=True)
    assert ei.value.reply_code == 406
    ch = conn.channel()
    ch.queue_unbind(q, xname, "k")
    ch.exchange_delete(xname, if_unused=True)
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.exchange_declare(xname, passive=True)
    assert ei.value.reply_code == 404


def test_exchange_delete_of_missing_exchange_is_ok(ch):
    ch.exchange_delete(unique("never-declared"))   # RabbitMQ 3.x: delete-ok, no 404
    assert ch.is_open


def test_publish_to_an_exchange_another_channel_deleted_is_404(conn, xname):
    """A channel remembers the exchanges and routes it published to only while the metadata is
    unchanged: once another channel deleted the exchange, the next publish is refused as
    RabbitMQ's rabbit_channel does (404, "no exchange ... in vhost ..."), not dropped as
    unroutable; a queue bound afterwards to a new exchange of that name gets what follows."""
    ch, other = conn.channel(), conn.channel()
    ch.exchange_declare(xname, "fanout", auto_delete=False)
    q = _bound_queue(ch, xname)
    ch.basic_publish(xname, "", b"first")
    assert _bodies(ch, q) == [b"first"]
    other.exchange_delete(xname)
    ch.basic_publish(xname, "", b"second")
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.queue_declare(q, passive=True)  # a sync call to surface the async close
    assert (ei.value.reply_code, ei.value.reply_text) == (
        404, f"NOT_FOUND - no exchange '{xname}' in vhost '/'")
    ch = conn.channel()
    ch.basic_publish("", q, b"direct")  # a route that was cached on the closed channel
    other.exchange_declare(xname, "fanout", auto_delete=True)
    other.queue_bind(q, xname)
    ch.basic_publish(xname, "", b"third")
    assert _bodies(ch, q) == [b"direct", b"third"]
