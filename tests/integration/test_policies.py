"""Policies with RabbitMQ's classic-queue and exchange keys, operator policies, and vhost/user
limits (issue 13 items 4 and 5), driven with leveretctl's rabbitmqctl-shaped commands and pika.
Behaviour: R3 (limits refuse with RabbitMQ's codes and texts)."""
from __future__ import annotations

import json

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from amqp_helpers import count_in, get_all, publish, safe_close, unique, wait_count, wait_until


@pytest.fixture
def node(fresh_broker):
    if fresh_broker.external:
        pytest.skip("drives leveretctl")
    return fresh_broker


def test_policy_max_length_applies_to_an_existing_queue_and_argument_takes_the_smaller(node):
    conn = node.connection()
    try:
        ch = conn.channel()
        q1, q2 = unique("pl-a"), unique("pl-b")
        ch.queue_declare(q1)
        ch.queue_declare(q2, arguments={"x-max-length": 2})
        publish(ch, q1, [b"1", b"2", b"3", b"4", b"5"])
        wait_count(conn, q1, 5)
        node.ctl("set_policy", "len", "^pl-", '{"max-length": 3}', "--apply-to", "queues")
        wait_count(conn, q1, 3)                           # drop-head at once on the old queue
        assert [d.body for d in get_all(ch, q1)] == [b"3", b"4", b"5"]
        publish(ch, q2, [b"a", b"b", b"c", b"d"])
        wait_count(conn, q2, 2)                           # min(argument 2, policy 3)
        node.ctl("clear_policy", "len")
        publish(ch, q1, [b"x"] * 6)
        wait_count(conn, q1, 6)                           # no limit once the policy is gone
    finally:
        safe_close(conn)


def test_policy_dead_letter_and_message_ttl_and_alternate_exchange(node):
    conn = node.connection()
    try:
        ch = conn.channel()
        src, dead, lost = unique("ttl-src"), unique("ttl-dead"), unique("ae-lost")
        ch.queue_declare(dead)
        ch.queue_declare(src)
        ch.queue_declare(lost)
        ch.exchange_declare("dlx-e", "fanout")
        ch.queue_bind(dead, "dlx-e")
        node.ctl("set_policy", "dl", "^ttl-src", json.dumps(
            {"message-ttl": 50, "dead-letter-exchange": "dlx-e"}), "--apply-to", "queues")
        publish(ch, src, [b"m"])
        wait_count(conn, dead, 1, timeout=10)             # expired, dead-lettered by the policy
        ch.exchange_declare("ae-src", "direct")
        ch.exchange_declare("ae-dst", "fanout")
        ch.queue_bind(lost, "ae-dst")
        node.ctl("set_policy", "ae", "^ae-src$", '{"alternate-exchange": "ae-dst"}',
                 "--apply-to", "exchanges")
        ch.basic_publish("ae-src", "nowhere", b"u")
        wait_count(conn, lost, 1)                         # unroutable: to the policy's AE
    finally:
        safe_close(conn)


@pytest.mark.parametrize("definition, text", [
    ('{"max-length": -1}', "-1 is not a valid maximum length"),
    ('{"message-ttl": "x"}', '<<"x">> is not a valid message TTL'),
    ('{"expires": 0}', "0 is not a valid queue expiry"),
    ('{"overflow": "drop-tail"}', '<<"drop-tail">> is not a valid overflow value'),
    ('{"queue-mode": "eager"}', '<<"eager">> is not a valid queue-mode value'),
    ('{"alternate-exchange": 1}', "1 is not a valid alternate exchange name"),
    ('{"bogus": 1}', '[{<<"bogus">>,1}] are not recognised policy settings'),
    ('{"ha-mode": "exactly", "ha-params": "banana"}',
     'ha-mode="exactly" takes an integer, <<"banana">> given'),
    ('{"ha-mode": "exactly", "ha-params": 0}', 'ha-mode="exactly" takes an integer, 0 given'),
    ('{"ha-mode": "exactly", "ha-params": -1}', 'ha-mode="exactly" takes an integer, -1 given'),
    ('{"ha-mode": "nodes", "ha-params": "leveret@a"}',
     'ha-mode="nodes" takes a list, <<"leveret@a">> given'),
    ('{"ha-mode": "all", "ha-params": 1}', 'ha-mode="all" does not take parameters'),
    ('{"ha-mode": "all", "ha-sync-mode": "eager"}',
     'ha-sync-mode must be "manual" or "automatic", got <<"eager">>'),
])
def test_invalid_policy_values_are_refused_with_rabbitmq_texts(node, definition, text):
    res = node.ctl("set_policy", "bad", ".*", definition, check=False)
    assert res.returncode != 0 and "Validation failed" in res.stderr and text in res.stderr


def test_operator_policy_merges_with_the_smaller_value_and_refuses_other_keys(node):
    conn = node.connection()
    try:
        ch = conn.channel()
        q = unique("op-q")
        ch.queue_declare(q)
        node.ctl("set_policy", "p", "^op-", '{"max-length": 2}', "--apply-to", "queues")
        node.ctl("set_operator_policy", "o", "^op-", '{"max-length": 4}', "--priority", "1",
                 "--apply-to", "queues")
        publish(ch, q, [b"1", b"2", b"3", b"4", b"5"])
        wait_count(conn, q, 2)                            # min(policy 2, operator 4)
        node.ctl("clear_policy", "p")
        publish(ch, q, [b"6", b"7", b"8"])
        wait_count(conn, q, 4)                            # the operator policy alone
        listed = json.loads(node.ctl("list_operator_policies").stdout)
        assert [(p["name"], p["definition"], p["priority"]) for p in listed] == \
            [("o", {"max-length": 4}, 1)]
        node.ctl("clear_operator_policy", "o")
        res = node.ctl("set_operator_policy", "o2", ".*", '{"dead-letter-exchange": "x"}',
                       check=False)
        assert res.returncode != 0 and "are not recognised policy settings" in res.stderr
    finally:
        safe_close(conn)


def test_vhost_max_queues_refuses_the_declare_with_rabbitmq_text__R3(node):
    node.ctl("set_vhost_limits", '{"max-queues": 1}')
    assert json.loads(node.ctl("list_vhost_limits").stdout) == \
        [{"vhost": "/", "limits": {"max-queues": 1}}]
    conn = node.connection()
    try:
        ch = conn.channel()
        ch.queue_declare("mq-1")
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.queue_declare("mq-2")
        assert ei.value.reply_code == 406
        assert ei.value.reply_text == ("PRECONDITION_FAILED - cannot declare queue 'mq-2': "
                                       "queue limit in vhost '/' (1) is reached")
        node.ctl("clear_vhost_limits")
        conn.channel().queue_declare("mq-2")
    finally:
        safe_close(conn)


def test_vhost_and_user_connection_limits__R3(node):
    node.ctl("set_vhost_limits", '{"max-connections": 1}')
    first = node.connection()
    try:
        with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
            node.connection()
        assert "(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'guest': " \
            "connection limit (1) is reached\"" in str(ei.value)
        node.ctl("clear_vhost_limits")
        node.ctl("set_user_limits", "guest", '{"max-connections": 1}')
        with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
            node.connection()
        assert "(530) \"NOT_ALLOWED - Connection refused for user 'guest': user connection " \
            "limit (1) is reached\"" in str(ei.value)
        safe_close(first)
        wait_until(lambda: _opens(node), message="the closed connection stops counting")
    finally:
        safe_close(first)


def _opens(node) -> bool:
    try:
        safe_close(node.connection())
        return True
    except pika.exceptions.AMQPConnectionError:
        return False


def test_user_max_channels__R3(node):
    node.ctl("set_user_limits", "guest", '{"max-channels": 2}')
    assert json.loads(node.ctl("list_user_limits").stdout) == \
        [{"user": "guest", "limits": {"max-channels": 2}}]
    conn = node.connection()
    try:
        a = conn.channel()
        conn.channel()
        a.close()
        conn.channel()                                    # a closed channel stops counting
        with pytest.raises(ConnectionClosedByBroker) as ei:
            conn.channel()
        assert ei.value.reply_code == 530
        assert ei.value.reply_text == ("NOT_ALLOWED - number of channels opened for user "
                                       "'guest' has reached the maximum allowed user limit of "
                                       "(2)")
    finally:
        safe_close(conn)
    node.ctl("clear_user_limits", "guest")
    assert json.loads(node.ctl("list_user_limits").stdout) == []


def test_limits_validation_texts(node):
    res = node.ctl("set_vhost_limits", '{"max-queues": "x"}', check=False)
    assert res.returncode != 0 and 'max-queues should be a number, actually was <<"x">>' \
        in res.stderr
    res = node.ctl("set_user_limits", "guest", '{"max-queues": 1}', check=False)
    assert res.returncode != 0 and "Unrecognised terms" in res.stderr


def test_operator_policies_and_limits_survive_a_restart(tmp_path):
    from conftest import Broker
    broker = Broker.start_leveret(tmp_path)
    try:
        broker.ctl("set_operator_policy", "cap", "^cap-", '{"max-length": 1}',
                   "--apply-to", "queues")
        broker.ctl("set_vhost_limits", '{"max-queues": 5}')
        broker.ctl("set_user_limits", "guest", '{"max-channels": 7}')
        broker = broker.restart(tmp_path, "kill9")
        assert [p["name"] for p in json.loads(broker.ctl("list_operator_policies").stdout)] \
            == ["cap"]
        assert json.loads(broker.ctl("list_vhost_limits").stdout) == \
            [{"vhost": "/", "limits": {"max-queues": 5}}]
        assert json.loads(broker.ctl("list_user_limits").stdout) == \
            [{"user": "guest", "limits": {"max-channels": 7}}]
        conn = broker.connection()
        try:
            ch = conn.channel()
            ch.queue_declare("cap-q")
            publish(ch, "cap-q", [b"1", b"2", b"3"])
            wait_count(conn, "cap-q", 1)                   # the operator policy still applies
        finally:
            safe_close(conn)
    finally:
        broker.stop()
