"""Permission checks as RabbitMQ 3.10 makes them (issue 11, item 6), each refusal with pika and
its allowed counterpart: write on the dead-letter exchange and read on the queue at a
queue.declare that creates a queue with x-dead-letter-exchange; write on the alternate exchange
and read on the exchange at an exchange.declare that creates one with alternate-exchange;
configure on a server-named queue; the exclusive check on queue.unbind; topic permissions
(set_topic_permissions) on publish and bind/unbind. Users are made with the broker's ctl tool.
Behaviour: E3."""
from __future__ import annotations

import json
import re

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from amqp_helpers import declare, get_all, safe_close, unique, wait_until
from conftest import Broker

PW = "s3cret"


@pytest.fixture(scope="module")
def tenant(broker):
    """A vhost where the admin (the broker's user) may do anything and:
    `limited` configures and reads anything but writes only to allowed-* (the issue's user);
    `noread` configures and writes anything but reads only allowed-*;
    `noconf` configures only allowed-*;
    `topical` may do anything, with topic permissions set per test."""
    vhost = unique("vh")
    users = {k: unique(k) for k in ("limited", "noread", "noconf", "topical")}
    broker.ctl("add_vhost", vhost)
    for u in users.values():
        broker.ctl("add_user", u, PW)
    broker.ctl("set_permissions", "-p", vhost, users["limited"], ".*", "^allowed-.*", ".*")
    broker.ctl("set_permissions", "-p", vhost, users["noread"], ".*", ".*", "^allowed-.*")
    broker.ctl("set_permissions", "-p", vhost, users["noconf"], "^allowed-.*", ".*", ".*")
    broker.ctl("set_permissions", "-p", vhost, users["topical"], ".*", ".*", ".*")
    broker.ctl("set_permissions", "-p", vhost, broker.user, ".*", ".*", ".*")
    yield {"vhost": vhost, **users}
    for u in users.values():
        broker.ctl("delete_user", u, check=False)
    broker.ctl("delete_vhost", vhost, check=False)


@pytest.fixture
def admin(broker, tenant):
    c = broker.connection(virtual_host=tenant["vhost"])
    yield c.channel()
    safe_close(c)


def connect(broker, tenant, who):
    return broker.connection(user=tenant[who], password=PW, virtual_host=tenant["vhost"])


def refused(ei, text):
    assert (ei.value.reply_code, ei.value.reply_text) == (403, "ACCESS_REFUSED - " + text)


def victim(admin):
    """Another tenant's exchange with a queue behind it: what the bypasses reached."""
    x, q = unique("victim-x"), unique("victim-q")
    admin.exchange_declare(x, "fanout", auto_delete=True)
    admin.queue_declare(q, auto_delete=False)
    admin.queue_bind(q, x)
    return x, q


# --- x-dead-letter-exchange -----------------------------------------------------------------------
def test_dlx_needs_write_on_the_dead_letter_exchange__E3(broker, tenant, admin):
    """The issue's bypass: write only on allowed-*, a queue of its own dead-lettering into
    another exchange; RabbitMQ 3.10 refuses the declare."""
    x, q = victim(admin)
    c = connect(broker, tenant, "limited")
    try:
        ch = c.channel()
        name = "allowed-" + unique("q")
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.queue_declare(name, arguments={"x-dead-letter-exchange": x,
                                              "x-message-ttl": 0})
        refused(ei, f"access to exchange '{x}' in vhost '{tenant['vhost']}' refused for user "
                    f"'{tenant['limited']}'")
        with pytest.raises(ChannelClosedByBroker) as ei:
            c.channel().queue_declare(name, passive=True)
        assert ei.value.reply_code == 404   # nothing was created
    finally:
        safe_close(c)
    assert admin.queue_declare(q, passive=True).method.message_count == 0
    admin.queue_delete(q)


def test_dlx_on_the_default_exchange_is_amq_default__E3(broker, tenant):
    c = connect(broker, tenant, "limited")
    try:
        with pytest.raises(ChannelClosedByBroker) as ei:
            c.channel().queue_declare("allowed-" + unique("q"),
                                      arguments={"x-dead-letter-exchange": ""})
        refused(ei, f"access to exchange 'amq.default' in vhost '{tenant['vhost']}' refused "
                    f"for user '{tenant['limited']}'")
    finally:
        safe_close(c)


def test_dlx_needs_read_on_the_queue__E3(broker, tenant):
    c = connect(broker, tenant, "noread")
    try:
        name = unique("q")
        with pytest.raises(ChannelClosedByBroker) as ei:
            c.channel().queue_declare(name, arguments={"x-dead-letter-exchange": "amq.fanout"})
        refused(ei, f"access to queue '{name}' in vhost '{tenant['vhost']}' refused for user "
                    f"'{tenant['noread']}'")
    finally:
        safe_close(c)


def test_dlx_allowed_dead_letters_as_before__E3(broker, tenant):
    c = connect(broker, tenant, "limited")
    try:
        ch = c.channel()
        dlx = "allowed-" + unique("dlx")
        ch.exchange_declare(dlx, "fanout", auto_delete=True)
        dead = declare(ch, "allowed-" + unique("dead"), auto_delete=True)
        ch.queue_bind(dead, dlx)
        src = declare(ch, "allowed-" + unique("src"), auto_delete=True,
                      arguments={"x-dead-letter-exchange": dlx})
        ch.confirm_delivery()
        # no write on amq.default: in through an exchange of its own, out by a reject
        entry = "allowed-" + unique("in")
        ch.exchange_declare(entry, "fanout", auto_delete=True)
        ch.queue_bind(src, entry)
        ch.basic_publish(entry, "", b"m")
        method, _, _ = ch.basic_get(src)
        ch.basic_reject(method.delivery_tag, requeue=False)
        wait_until(lambda: ch.queue_declare(dead, passive=True).method.message_count == 1)
        assert [d.body for d in get_all(ch, dead)] == [b"m"]
    finally:
        safe_close(c)


def test_existing_queue_with_dlx_is_not_checked_again__E3(broker, tenant, admin):
    """RabbitMQ checks the DLX only when the declare creates the queue."""
    x, q = victim(admin)
    name = "allowed-" + unique("q")
    admin.queue_declare(name, auto_delete=True, arguments={"x-dead-letter-exchange": x})
    c = connect(broker, tenant, "limited")
    try:
        ch = c.channel()
        ch.queue_declare(name, auto_delete=True, arguments={"x-dead-letter-exchange": x})
    finally:
        safe_close(c)
    admin.queue_delete(q)


# --- alternate-exchange ---------------------------------------------------------------------------
def test_alternate_exchange_needs_write_on_it__E3(broker, tenant, admin):
    x, q = victim(admin)
    c = connect(broker, tenant, "limited")
    try:
        ch = c.channel()
        mine = "allowed-" + unique("x")
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.exchange_declare(mine, "direct", auto_delete=True,
                                arguments={"alternate-exchange": x})
        refused(ei, f"access to exchange '{x}' in vhost '{tenant['vhost']}' refused for user "
                    f"'{tenant['limited']}'")
        with pytest.raises(ChannelClosedByBroker) as ei:
            c.channel().exchange_declare(mine, passive=True)
        assert ei.value.reply_code == 404
    finally:
        safe_close(c)
    assert admin.queue_declare(q, passive=True).method.message_count == 0
    admin.queue_delete(q)


def test_alternate_exchange_needs_read_on_the_new_exchange__E3(broker, tenant):
    c = connect(broker, tenant, "noread")
    try:
        name = unique("x")
        with pytest.raises(ChannelClosedByBroker) as ei:
            c.channel().exchange_declare(name, "direct", auto_delete=True,
                                         arguments={"alternate-exchange": "amq.fanout"})
        refused(ei, f"access to exchange '{name}' in vhost '{tenant['vhost']}' refused for "
                    f"user '{tenant['noread']}'")
    finally:
        safe_close(c)


def test_alternate_exchange_allowed_routes_as_before__E3(broker, tenant):
    c = connect(broker, tenant, "limited")
    try:
        ch = c.channel()
        ae = "allowed-" + unique("ae")
        ch.exchange_declare(ae, "fanout", auto_delete=True)
        q = declare(ch, "allowed-" + unique("q"), auto_delete=True)
        ch.queue_bind(q, ae)
        x = "allowed-" + unique("x")
        ch.exchange_declare(x, "direct", auto_delete=True, arguments={"alternate-exchange": ae})
        ch.confirm_delivery()
        ch.basic_publish(x, "unbound", b"to-ae")
        assert [d.body for d in get_all(ch, q)] == [b"to-ae"]
    finally:
        safe_close(c)


# --- server-named queues --------------------------------------------------------------------------
def test_server_named_queue_needs_configure_on_its_name__E3(broker, tenant):
    c = connect(broker, tenant, "noconf")
    try:
        with pytest.raises(ChannelClosedByBroker) as ei:
            c.channel().queue_declare("", exclusive=True)
        assert ei.value.reply_code == 403
        assert re.fullmatch(
            rf"ACCESS_REFUSED - access to queue 'amq\.gen-[A-Za-z0-9_-]{{22}}' in vhost "
            rf"'{re.escape(tenant['vhost'])}' refused for user '{tenant['noconf']}'",
            ei.value.reply_text), ei.value.reply_text
        ch = c.channel()   # a name it may configure still works
        declare(ch, "allowed-" + unique("q"), auto_delete=True)
    finally:
        safe_close(c)


def test_server_named_queue_allowed_with_configure__E3(broker, tenant):
    c = connect(broker, tenant, "limited")
    try:
        q = c.channel().queue_declare("", exclusive=True).method.queue
        assert q.startswith("amq.gen-")
    finally:
        safe_close(c)


# --- queue.unbind and exclusive queues ------------------------------------------------------------
def test_unbind_of_another_connections_exclusive_queue_is_locked__E3(broker):
    owner = broker.connection()
    other = broker.connection()
    try:
        och = owner.channel()
        q = och.queue_declare("", exclusive=True).method.queue
        och.queue_bind(q, "amq.direct", "k")
        with pytest.raises(ChannelClosedByBroker) as ei:
            other.channel().queue_unbind(q, "amq.direct", "k")
        assert ei.value.reply_code == 405
        assert ei.value.reply_text == (
            f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost "
            f"'{broker.vhost}'. It could be originally declared on another connection or the "
            "exclusive property value does not match that of the original declaration.")
        och.queue_unbind(q, "amq.direct", "k")   # its owner may
    finally:
        safe_close(other)
        safe_close(owner)


# --- topic permissions ----------------------------------------------------------------------------
@pytest.fixture
def topic_perms(broker, tenant):
    """topical: write on amq.topic only to routing keys starting with its user name, read only
    on keys starting with the vhost name (RabbitMQ's variable expansion)."""
    broker.ctl("set_topic_permissions", "-p", tenant["vhost"], tenant["topical"], "amq.topic",
               "^{username}\\.", "^{vhost}\\.")
    yield
    broker.ctl("clear_topic_permissions", "-p", tenant["vhost"], tenant["topical"], check=False)


def test_topic_publish_checks_write_on_the_routing_key__E3(broker, tenant, admin, topic_perms):
    q = declare(admin, unique("q"), auto_delete=True)
    admin.queue_bind(q, "amq.topic", "#")
    c = connect(broker, tenant, "topical")
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", f"{tenant['topical']}.a", b"mine")
        with pytest.raises(ChannelClosedByBroker) as ei:
            ch.basic_publish("amq.topic", "other.a", b"theirs")   # its confirm never comes
        refused(ei, f"access to topic 'other.a' in exchange 'amq.topic' in vhost "
                    f"'{tenant['vhost']}' refused for user '{tenant['topical']}'")
    except pika.exceptions.UnroutableError:
        pytest.fail("publish refused as unroutable instead of a channel close")
    finally:
        safe_close(c)
    assert [d.body for d in get_all(admin, q)] == [b"mine"]


def test_topic_permissions_leave_other_exchanges_alone__E3(broker, tenant, admin,
                                                           topic_perms):
    q = declare(admin, unique("q"), auto_delete=True)
    admin.queue_bind(q, "amq.direct", "other.a")
    c = connect(broker, tenant, "topical")
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.direct", "other.a", b"direct")
        x = unique("t")
        ch.exchange_declare(x, "topic", auto_delete=True)   # no topic permission on it
        ch.queue_bind(q, x, "other.#")
        ch.basic_publish(x, "other.a", b"topic")
    finally:
        safe_close(c)
    assert [d.body for d in get_all(admin, q)] == [b"direct", b"topic"]


@pytest.mark.parametrize("op", ["bind", "unbind"])
def test_topic_bind_and_unbind_check_read_on_the_routing_key__E3(broker, tenant, admin,
                                                                  topic_perms, op):
    q = declare(admin, unique("q"), auto_delete=True)
    admin.queue_bind(q, "amq.topic", "other.#")
    c = connect(broker, tenant, "topical")
    try:
        ch = c.channel()
        with pytest.raises(ChannelClosedByBroker) as ei:
            getattr(ch, f"queue_{op}")(q, "amq.topic", "other.#")
        refused(ei, f"access to topic 'other.#' in exchange 'amq.topic' in vhost "
                    f"'{tenant['vhost']}' refused for user '{tenant['topical']}'")
        ch = c.channel()
        mine = f"{tenant['vhost']}.#"
        ch.queue_bind(q, "amq.topic", mine)
        ch.queue_unbind(q, "amq.topic", mine)
    finally:
        safe_close(c)


def test_topic_permissions_listed_and_cleared__E3(broker, tenant, topic_perms):
    if broker.external:
        pytest.skip("leveretctl's output")
    rows = json.loads(broker.ctl("list_topic_permissions", "-p", tenant["vhost"]).stdout)
    assert rows == [{"user": tenant["topical"], "vhost": tenant["vhost"],
                     "exchange": "amq.topic", "write": "^{username}\\.",
                     "read": "^{vhost}\\."}]
    rows = json.loads(broker.ctl("list_user_topic_permissions", tenant["topical"]).stdout)
    assert [r["exchange"] for r in rows] == ["amq.topic"]
    bad = broker.ctl("set_topic_permissions", "-p", tenant["vhost"], tenant["topical"],
                     "amq.topic", "(", ".*", check=False)
    assert bad.returncode != 0
    broker.ctl("clear_topic_permissions", "-p", tenant["vhost"], tenant["topical"],
               "amq.topic")
    assert json.loads(broker.ctl("list_topic_permissions", "-p", tenant["vhost"]).stdout) == []
    c = connect(broker, tenant, "topical")
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "other.a", b"now allowed")
        ch.queue_declare("", exclusive=True)
    finally:
        safe_close(c)


def test_topic_permissions_survive_a_restart__E3(tmp_path):
    broker = Broker.start_leveret(tmp_path)
    try:
        broker.ctl("add_user", "t", PW)
        broker.ctl("set_permissions", "t", ".*", ".*", ".*")
        broker.ctl("set_topic_permissions", "t", "amq.topic", "^ok\\.", ".*")
        broker = broker.restart(tmp_path, how="stop")
        rows = json.loads(broker.ctl("list_topic_permissions").stdout)
        assert [(r["user"], r["exchange"], r["write"]) for r in rows] == [
            ("t", "amq.topic", "^ok\\.")]
        c = broker.connection(user="t", password=PW)
        try:
            ch = c.channel()
            ch.confirm_delivery()
            ch.basic_publish("amq.topic", "ok.1", b"")
            with pytest.raises(ChannelClosedByBroker) as ei:
                ch.basic_publish("amq.topic", "no.1", b"")
            assert ei.value.reply_code == 403
        finally:
            safe_close(c)
    finally:
        broker.stop()
