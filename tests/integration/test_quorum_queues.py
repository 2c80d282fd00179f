"""Quorum queues on one node (issue 15 item 4), with pika: x-queue-type=quorum as
applications written for RabbitMQ 3.8+/4 declare it.

- declare rules: durable only (406 ``invalid property 'non-durable' / 'exclusive-owner' /
  'auto-delete' for queue ...``, rabbit_quorum_queue:declare/2), the arguments quorum queues
  take and the ones they refuse (``... of queue type rabbit_quorum_queue``), a redeclare with
  another type (``inequivalent arg 'x-queue-type'``);
- S6: delivery limit 20 by default (RabbitMQ 4.0), x-delivery-count on every redelivery,
  past the limit dead-lettered with reason delivery_limit (or dropped);
- every message stored whatever its delivery mode: a transient message published with
  confirms survives a restart of the node (a quorum queue keeps its log);
- the management API says ``type: "quorum"``.
"""
from __future__ import annotations

import base64
import json
import os
import urllib.request

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError

from amqp_helpers import safe_close, unique, wait_until
from conftest import Broker, free_port

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="starts its own Leveret nodes")

PF = "PRECONDITION_FAILED - "
QQ = {"x-queue-type": "quorum"}


def _declare_error(conn, queue, **kw):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(queue, **kw)
    return e.value.reply_code, e.value.reply_text


def test_quorum_queue_declares_durable_and_works(ch):
    q = unique("qq")
    ok = ch.queue_declare(q, durable=True, arguments=QQ)
    assert (ok.method.queue, ok.method.message_count) == (q, 0)
    ch.queue_declare(q, durable=True, arguments=QQ)  # equivalent: fine
    ch.confirm_delivery()
    ch.basic_publish("", q, b"m", pika.BasicProperties(delivery_mode=1))
    method, _, body = ch.basic_get(q)
    assert body == b"m" and not method.redelivered
    ch.basic_ack(method.delivery_tag)
    ch.queue_delete(q)


@pytest.mark.parametrize("flags,prop", [
    ({"durable": False}, "non-durable"),
    ({"durable": True, "exclusive": True}, "exclusive-owner"),
    ({"durable": True, "auto_delete": True}, "auto-delete"),
])
def test_quorum_queue_is_durable_only(conn, flags, prop):
    q = unique("qqflag")
    assert _declare_error(conn, q, arguments=QQ, **flags) == (
        406, PF + f"invalid property '{prop}' for queue '{q}' in vhost '/'")
    # nothing was created
    assert _declare_error(conn, q, passive=True)[0] == 404


@pytest.mark.parametrize("args,text", [
    ({"x-max-priority": 5}, "invalid arg 'x-max-priority' for queue '{q}' in vhost '/' of "
                            "queue type rabbit_quorum_queue"),
    ({"x-queue-mode": "lazy"}, "invalid arg 'x-queue-mode' for queue '{q}' in vhost '/' of "
                               "queue type rabbit_quorum_queue"),
    ({"x-queue-master-locator": "min-masters"}, "invalid arg 'x-queue-master-locator' for "
                                                "queue '{q}' in vhost '/' of queue type "
                                                "rabbit_quorum_queue"),
    ({"x-quorum-initial-group-size": 0}, "invalid arg 'x-quorum-initial-group-size' for queue "
                                         "'{q}' in vhost '/': {{value_zero,0}}"),
    ({"x-overflow": "over"}, "invalid arg 'x-overflow' for queue '{q}' in vhost '/': "
                             "invalid_overflow"),
])
def test_quorum_queue_argument_errors(conn, args, text):
    q = unique("qqarg")
    assert _declare_error(conn, q, durable=True, arguments={**QQ, **args}) == (
        406, PF + text.format(q=q))


def test_unknown_queue_type_is_refused(conn):
    q = unique("qqtype")
    assert _declare_error(conn, q, durable=True, arguments={"x-queue-type": "lazy"}) == (
        406, PF + f"invalid arg 'x-queue-type' for queue '{q}' in vhost '/': "
                  "\"unsupported queue type 'lazy'\"")


def test_quorum_queue_accepts_its_arguments(ch):
    q = unique("qqok")
    ch.queue_declare(q, durable=True, arguments={
        **QQ, "x-max-length": 10, "x-max-length-bytes": 10000, "x-overflow": "reject-publish",
        "x-delivery-limit": 3, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl",
        "x-expires": 60000, "x-message-ttl": 60000, "x-single-active-consumer": True,
        "x-quorum-initial-group-size": 3, "x-dead-letter-strategy": "at-most-once"})
    # accepted and in force: the eleventh publish is refused (x-max-length, reject-publish)
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"one too many")
    assert ch.queue_declare(q, passive=True).method.message_count == 10
    ch.queue_delete(q)


def test_redeclare_with_another_type_is_inequivalent(conn):
    q = unique("qqre")
    ch = conn.channel()
    ch.queue_declare(q, durable=True, arguments=QQ)
    assert _declare_error(conn, q, durable=True, arguments={"x-queue-type": "classic"}) == (
        406, PF + f"inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received "
                  "'classic' but current is 'quorum'")
    assert _declare_error(conn, q, durable=True) == (
        406, PF + f"inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received "
                  "none but current is the value 'quorum' of type 'longstr'")
    c = unique("classic")
    ch.queue_declare(c, durable=True)
    assert _declare_error(conn, c, durable=True, arguments=QQ) == (
        406, PF + f"inequivalent arg 'x-queue-type' for queue '{c}' in vhost '/': received "
                  "the value 'quorum' of type 'longstr' but current is none")
    ch.queue_delete(q)
    ch.queue_delete(c)


def test_delivery_count_and_default_limit_of_20__S6(ch):
    """RabbitMQ 4.0: a quorum queue without x-delivery-limit has a limit of 20. Each return
    counts (x-delivery-count on the redelivery); the 21st return drops the message."""
    q = unique("qqdl")
    ch.queue_declare(q, durable=True, arguments=QQ)
    ch.basic_publish("", q, b"m")
    method, props, _ = ch.basic_get(q)
    assert not (props.headers or {}).get("x-delivery-count") and not method.redelivered
    for n in range(1, 21):
        ch.basic_nack(method.delivery_tag, requeue=True)
        method, props, _ = ch.basic_get(q)
        assert method.redelivered and props.headers["x-delivery-count"] == n
    ch.basic_reject(method.delivery_tag, requeue=True)  # the 21st return: past 20, dropped
    assert wait_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 0)
    assert ch.basic_get(q) == (None, None, None)
    ch.queue_delete(q)


def test_delivery_limit_dead_letters_with_reason__S6(conn):
    """x-delivery-limit 2 with a dead-letter exchange; the returns are a nack, a reject and a
    channel close with the message unacked."""
    ch = conn.channel()
    q, dlq = unique("qqdlx"), unique("qqdlq")
    ch.queue_declare(dlq, durable=True, arguments=QQ)
    ch.queue_declare(q, durable=True, arguments={
        **QQ, "x-delivery-limit": 2, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dlq})
    ch.basic_publish("", q, b"m", pika.BasicProperties(headers={"k": "v"}))
    method, _, _ = ch.basic_get(q)
    ch.basic_nack(method.delivery_tag, requeue=True)  # 1
    method, props, _ = ch.basic_get(q)
    assert props.headers["x-delivery-count"] == 1
    ch.basic_reject(method.delivery_tag, requeue=True)  # 2
    other = conn.channel()
    method, props, _ = other.basic_get(q)
    assert props.headers["x-delivery-count"] == 2
    other.close()  # 3: past the limit of 2
    assert wait_until(lambda: ch.queue_declare(dlq, passive=True).method.message_count == 1)
    _, props, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"m" and props.headers["k"] == "v"
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", q, 1)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.queue_delete(q)
    ch.queue_delete(dlq)


def test_unlimited_with_a_negative_delivery_limit__S6(ch):
    q = unique("qqunl")
    ch.queue_declare(q, durable=True, arguments={**QQ, "x-delivery-limit": -1})
    ch.basic_publish("", q, b"m")
    for _ in range(25):
        method, _, _ = ch.basic_get(q)
        ch.basic_nack(method.delivery_tag, requeue=True)
    method, props, _ = ch.basic_get(q)
    assert props.headers["x-delivery-count"] == 25
    ch.basic_ack(method.delivery_tag)
    ch.queue_delete(q)


def test_transient_messages_survive_a_restart__C8(tmp_path):
    """A quorum queue keeps every message, whatever its delivery mode: a confirmed transient
    message is there after kill -9 of the node (a classic queue's would be gone)."""
    node = Broker.start_leveret(tmp_path)
    try:
        conn = node.connection()
        ch = conn.channel()
        ch.queue_declare("qq-restart", durable=True, arguments=QQ)
        ch.queue_declare("cq-restart", durable=True)
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("", "qq-restart", b"t%d" % i, pika.BasicProperties(delivery_mode=1))
            ch.basic_publish("", "cq-restart", b"t%d" % i, pika.BasicProperties(delivery_mode=1))
        safe_close(conn)
        node = node.restart(tmp_path, "kill9")
        conn = node.connection()
        ch = conn.channel()
        assert ch.queue_declare("qq-restart", durable=True, arguments=QQ).method.message_count \
            == 50
        assert ch.queue_declare("cq-restart", durable=True).method.message_count == 0
        bodies = [ch.basic_get("qq-restart", auto_ack=True)[2] for _ in range(50)]
        assert bodies == [b"t%d" % i for i in range(50)]
        safe_close(conn)
    finally:
        node.stop()


def test_management_api_says_quorum(tmp_path):
    port = free_port()
    node = Broker.start_leveret(tmp_path, "--management-port", str(port))
    try:
        conn = node.connection()
        ch = conn.channel()
        ch.queue_declare("qq-api", durable=True, arguments=QQ)
        ch.queue_declare("cq-api", durable=True)
        safe_close(conn)
        auth = base64.b64encode(b"guest:guest").decode()

        def queues():
            req = urllib.request.Request(f"http://127.0.0.1:{port}/api/queues/%2F",
                                         headers={"Authorization": f"Basic {auth}"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return {q["name"]: q for q in json.load(r)}

        got = queues()
        assert got["qq-api"]["type"] == "quorum" and got["cq-api"]["type"] == "classic"
        assert got["qq-api"]["leader"] == got["qq-api"]["node"]
        assert got["qq-api"]["members"] == [got["qq-api"]["node"]]
    finally:
        node.stop()


def test_global_qos_is_not_supported(broker):
    """rabbit_quorum_queue:consume/3 refuses a channel with a global prefetch: 540, a
    connection error (rabbit_channel's text)."""
    q = unique("qqgqos")
    with broker.connection() as c:
        c.channel().queue_declare(q, durable=True, arguments=QQ)
    conn = broker.connection()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10, global_qos=True)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
        ch.basic_consume(q, lambda *a: None)
    assert (e.value.reply_code, e.value.reply_text) == (
        540, f"NOT_IMPLEMENTED - queue '{q}' in vhost '/' does not support global qos")
    with broker.connection() as c:  # per-consumer prefetch is fine
        ch = c.channel()
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(q, lambda *a: None)
        ch.queue_delete(q)


@pytest.mark.parametrize("flag", ["if_unused", "if_empty"])
def test_delete_if_unused_or_empty_is_not_supported(broker, flag):
    q = unique("qqdel")
    conn = broker.connection()
    ch = conn.channel()
    ch.queue_declare(q, durable=True, arguments=QQ)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
        ch.queue_delete(q, **{flag: True})
    name = flag.replace("_", "-")
    assert (e.value.reply_code, e.value.reply_text) == (
        540, f"NOT_IMPLEMENTED - cannot delete queue '{q}' in vhost '/'. queue.delete "
             f"operations with {name} flag set are not supported by quorum queues")
    with broker.connection() as c:
        c.channel().queue_delete(q)
