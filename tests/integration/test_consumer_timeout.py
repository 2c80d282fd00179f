"""Consumer timeout (S5) and delivery limit (S6), issue 13 items 2 and 3, with pika.

S5: a delivery unacked longer than the consumer timeout (config `consumer_timeout` /
--consumer-timeout, queue argument x-consumer-timeout, policy key consumer-timeout) closes its
channel with 406 and RabbitMQ's text, and its deliveries are requeued. The timeouts here are
1 s, checked every second (min(timeout, 60 s)): the channel closes 1-2 s after the delivery.

S6: x-delivery-limit / policy key delivery-limit: each return (nack/reject requeue, channel
close) counts; redeliveries carry x-delivery-count; past the limit the message is dead-lettered
with reason delivery_limit, or dropped without a dead-letter exchange.
"""
from __future__ import annotations

import os
import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_helpers import safe_close, unique, wait_until
from conftest import Broker

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="RabbitMQ 3.10's classic queues have no x-delivery-limit")

TIMEOUT_TEXT = ("PRECONDITION_FAILED - delivery acknowledgement on channel {n} timed out. "
                "Timeout value used: {t} ms. This timeout value can be configured, see "
                "consumers doc guide to learn more")


def _hold_until_closed(conn, ch, queue, limit=20.0):
    """Consume `queue` without acking until the broker closes the channel; its close reason."""
    got, closed = [], []
    ch._impl.add_on_close_callback(lambda c, reason: closed.append(reason))
    ch.basic_consume(queue, lambda c, method, props, body: got.append(body))
    deadline = time.monotonic() + limit
    while not closed and time.monotonic() < deadline:
        try:
            conn.process_data_events(time_limit=0.1)
        except ChannelClosedByBroker:
            break
    assert closed, f"channel still open after {limit} s, got {got}"
    assert isinstance(closed[0], ChannelClosedByBroker), closed
    return got, (closed[0].reply_code, closed[0].reply_text)


def _all_ready(broker, queue, n):
    c = broker.connection()
    try:
        return c.channel().queue_declare(queue, passive=True).method.message_count == n
    finally:
        safe_close(c)


def _messages(broker, queue) -> str | None:
    """rabbitmqctl list_queues' messages column (ready + unacknowledged) of `queue`."""
    for line in broker.ctl("list_queues", "name", "messages").stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[0] == queue:
            return parts[1].strip()
    return None


def test_consumer_timeout_queue_argument_closes_channel_and_requeues__S5(broker):
    q = unique("ct")
    conn = broker.connection()
    try:
        ch = conn.channel()
        ch.queue_declare(q, arguments={"x-consumer-timeout": 1000})
        for body in (b"a", b"b"):
            ch.basic_publish("", q, body)
        got, reason = _hold_until_closed(conn, ch, q)
        assert got == [b"a", b"b"]
        assert reason == (406, TIMEOUT_TEXT.format(n=ch.channel_number, t=1000))
        assert conn.is_open  # a channel error, not a connection error
        wait_until(lambda: _all_ready(broker, q, 2))
        ch2 = conn.channel()
        method, _, body = ch2.basic_get(q, auto_ack=True)
        assert (body, method.redelivered) == (b"a", True)
        ch2.queue_delete(q)
    finally:
        safe_close(conn)


def test_consumer_timeout_acked_in_time_keeps_channel_open__S5(broker):
    q = unique("ct")
    conn = broker.connection()
    try:
        ch = conn.channel()
        ch.queue_declare(q, arguments={"x-consumer-timeout": 1000})
        ch.basic_publish("", q, b"a")
        acked = []
        ch.basic_consume(q, lambda c, m, p, b: (c.basic_ack(m.delivery_tag), acked.append(b)))
        wait_until(lambda: conn.process_data_events(time_limit=0.1) or acked)
        # past two check intervals: an acked delivery never times out
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert ch.is_open
        ch.queue_delete(q)
    finally:
        safe_close(conn)


def test_consumer_timeout_policy_key__S5(broker):
    q = unique("ctpol")
    broker.ctl("set_policy", "ct-s5", f"^{q}$", '{"consumer-timeout": 1000}',
               "--apply-to", "queues")
    conn = broker.connection()
    try:
        ch = conn.channel()
        ch.queue_declare(q)
        ch.basic_publish("", q, b"a")
        _, reason = _hold_until_closed(conn, ch, q)
        assert reason == (406, TIMEOUT_TEXT.format(n=ch.channel_number, t=1000))
        conn.channel().queue_delete(q)
    finally:
        safe_close(conn)
        broker.ctl("clear_policy", "ct-s5")


def test_consumer_timeout_config_setting__S5(tmp_path):
    node = Broker.start_leveret(tmp_path, "--consumer-timeout", "1000")
    try:
        conn = node.connection()
        try:
            ch = conn.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", q, b"a")
            _, reason = _hold_until_closed(conn, ch, q)
            assert reason == (406, TIMEOUT_TEXT.format(n=ch.channel_number, t=1000))
        finally:
            safe_close(conn)
    finally:
        node.stop()


def test_delivery_limit_dead_letters_with_reason_and_counts__S6(ch):
    q, dlq = unique("dl"), unique("dlq")
    ch.queue_declare(dlq)
    ch.queue_declare(q, arguments={"x-delivery-limit": 1, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": dlq})
    ch.basic_publish("", q, b"m")
    method, props, _ = ch.basic_get(q)
    assert not (props.headers or {}).get("x-delivery-count")
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, props, _ = ch.basic_get(q)
    assert method.redelivered and props.headers["x-delivery-count"] == 1
    ch.basic_reject(method.delivery_tag, requeue=True)  # past the limit of 1
    assert wait_until(lambda: ch.queue_declare(dlq, passive=True).method.message_count == 1)
    method, props, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"m"
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", q, 1)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.queue_delete(q)
    ch.queue_delete(dlq)


def test_delivery_limit_policy_and_channel_close_drops__S6(broker):
    q = unique("dlpol")
    broker.ctl("set_policy", "dl-s6", f"^{q}$", '{"delivery-limit": 0}',
               "--apply-to", "queues")
    conn = broker.connection()
    try:
        ch = conn.channel()
        ch.queue_declare(q)
        ch.basic_publish("", q, b"m")
        wait_until(lambda: ch.queue_declare(q, passive=True).method.message_count == 1)
        other = conn.channel()
        assert other.basic_get(q)[2] == b"m"
        other.close()  # its unacked delivery returns: past the limit of 0, no DLX: dropped
        wait_until(lambda: _messages(broker, q) == "0")  # neither ready nor unacked
        assert ch.basic_get(q, auto_ack=True) == (None, None, None)
        ch.queue_delete(q)
    finally:
        safe_close(conn)
        broker.ctl("clear_policy", "dl-s6")


# -- RabbitMQ 4.3's answer: consumer_timeout_action = cancel-consumer ------------------------------
def test_consumer_timeout_cancel_consumer_action_keeps_the_channel__S5(tmp_path):
    """--consumer-timeout-action cancel-consumer: pika announces consumer_cancel_notify, so the
    consumer gets basic.cancel, its unacked delivery goes back to the queue (redelivered), the
    channel stays open and a late ack of the returned delivery is harmless."""
    node = Broker.start_leveret(tmp_path, "--consumer-timeout", "1000",
                                "--consumer-timeout-action", "cancel-consumer")
    try:
        conn = node.connection()
        try:
            ch = conn.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", q, b"a")
            got, cancelled = [], []
            ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
            tag = ch.basic_consume(q, lambda c, method, props, body: got.append(method))
            wait_until(lambda: conn.process_data_events(time_limit=0.1) or cancelled,
                       timeout=20, message="basic.cancel after the consumer timeout")
            assert cancelled == [tag] and len(got) == 1 and ch.is_open
            ch.basic_ack(got[0].delivery_tag)           # late: the message is back in q
            method, _, body = ch.basic_get(q, auto_ack=True)
            assert body == b"a" and method.redelivered
            assert ch.is_open
        finally:
            safe_close(conn)
    finally:
        node.stop()


def test_consumer_timeout_cancel_consumer_action_closes_channel_of_basic_get__S5(tmp_path):
    node = Broker.start_leveret(tmp_path, "--consumer-timeout", "1000",
                                "--consumer-timeout-action", "cancel-consumer")
    try:
        conn = node.connection()
        try:
            ch = conn.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", q, b"a")
            closed = []
            ch._impl.add_on_close_callback(lambda c, reason: closed.append(reason))
            assert ch.basic_get(q)[2] == b"a"
            wait_until(lambda: conn.process_data_events(time_limit=0.1) or closed, timeout=20,
                       message="channel.close after the consumer timeout")
            assert (closed[0].reply_code, closed[0].reply_text) == (
                406, TIMEOUT_TEXT.format(n=ch.channel_number, t=1000))
        finally:
            safe_close(conn)
    finally:
        node.stop()


@pytest.mark.parametrize("how", ["flag", "toml"])
def test_consumer_timeout_action_is_validated(tmp_path, how):
    import subprocess
    from conftest import REPO
    server = str(REPO / ".venv" / "bin" / "leveret-server")
    args = [server, "--port", "0", "--data-dir", str(tmp_path / "d")]
    if how == "flag":
        args += ["--consumer-timeout-action", "sometimes"]
    else:
        conf = tmp_path / "leveret.toml"
        conf.write_text('consumer_timeout_action = "sometimes"\n')
        args += ["--config", str(conf)]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    if how == "flag":
        assert "--consumer-timeout-action" in res.stderr and "sometimes" in res.stderr
    else:
        assert ("consumer_timeout_action must be one of close-channel, cancel-consumer, not "
                "'sometimes'") in res.stderr
