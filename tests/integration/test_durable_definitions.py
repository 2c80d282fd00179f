"""Durable definitions survive a restart of the node (issue 3, ARCHITECTURE "Storage": "Definitions
(durable exchanges, queues, bindings, users, vhosts) survive a restart"); transient ones do not.

Every test starts its own node on tmp_path and restarts it on the same data directory, once with a
clean stop (SIGTERM) and once with kill -9. What is checked is what a client sees: passive
declares, equivalence checks on re-declare (406 proves the stored flags and arguments), routing
through the recovered bindings, logins and permissions; plus `leveretctl list_*` compared before and
after the restart.

RabbitMQ's rules followed here (rabbit_exchange:recover/1 and rabbit_amqqueue:recover/1 recover
every durable exchange and every durable queue, auto-delete or not):
- a durable auto-delete exchange or queue survives (it goes only when its last binding or
  consumer goes); a transient one, auto-delete or not, is gone;
- a durable exclusive queue is not recovered: its owner connection cannot survive the restart;
- a binding is durable when both its ends are durable.
"""
from __future__ import annotations

import json
import os

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError

from amqp_helpers import get_all, safe_close
from conftest import Broker

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="restarts the Leveret node")

RESTARTS = ["sigterm", "kill9"]
PERSISTENT = pika.BasicProperties(delivery_mode=2)

# the durable queue with arguments: each argument has an effect a client can see or the
# equivalence check on re-declare rejects a different value
DQ_ARGS = {"x-max-length": 1, "x-overflow": "reject-publish", "x-message-ttl": 600000,
           "x-max-priority": 3, "x-dead-letter-exchange": "d.ae"}


def restart(broker: Broker, tmp_path, how: str) -> Broker:
    return broker.restart(tmp_path, how)


def ctl_json(broker: Broker, *args: str):
    return json.loads(broker.ctl(*args).stdout)


def bindings(broker: Broker, vhost: str = "/") -> list:
    """[(source, kind, dest, routing_key, arguments as json)] of the vhost, sorted."""
    return sorted((b["source_name"], b["destination_kind"], b["destination_name"],
                   b["routing_key"], json.dumps(b["arguments"], sort_keys=True))
                  for b in ctl_json(broker, "list_bindings", "-p", vhost, "source_name",
                                    "destination_kind", "destination_name", "routing_key",
                                    "arguments", "--formatter", "json")
                  if b["source_name"])


def exchanges(broker: Broker, vhost: str = "/") -> set:
    return {(x["name"], x["type"]) for x in ctl_json(broker, "list_exchanges", "-p", vhost,
                                                      "--formatter", "json")}


def absent(conn, kind: str, name: str) -> bool:
    """A passive declare answers 404 (on a channel of its own)."""
    ch = conn.channel()
    try:
        if kind == "queue":
            ch.queue_declare(name, passive=True)
        else:
            ch.exchange_declare(name, passive=True)
    except ChannelClosedByBroker as e:
        assert e.reply_code == 404, e
        return True
    ch.close()
    return False


def declare_topology(ch) -> None:
    ch.exchange_declare("d.ae", "fanout", durable=True)
    ch.exchange_declare("d.direct", "direct", durable=True,
                        arguments={"alternate-exchange": "d.ae"})
    ch.exchange_declare("d.topic", "topic", durable=True)
    ch.exchange_declare("d.headers", "headers", durable=True)
    ch.exchange_declare("d.fanout", "fanout", durable=True)
    ch.exchange_declare("d.autodel", "fanout", durable=True, auto_delete=True)
    ch.queue_declare("dq", durable=True)
    ch.queue_declare("dq-headers", durable=True)
    ch.queue_declare("dq-ae", durable=True)
    ch.queue_declare("dq-args", durable=True, arguments=DQ_ARGS)
    ch.queue_declare("dq-autodel", durable=True, auto_delete=True)
    ch.queue_bind("dq", "d.direct", "k1")
    ch.queue_bind("dq", "d.topic", "a.*.c")
    ch.queue_bind("dq-headers", "d.headers", "",
                  arguments={"x-match": "all", "h1": "v1", "h2": "v2"})
    ch.queue_bind("dq-ae", "d.ae")
    ch.queue_bind("dq-autodel", "d.autodel")
    # exchange-to-exchange: d.fanout -> d.direct (which then routes by the message's key)
    ch.exchange_bind("d.direct", "d.fanout")


def declare_transients(conn, ch):
    """Transient definitions, auto-delete ones and an exclusive durable queue. Returns the
    channel that owns the exclusive queue and consumes the auto-delete one (kept open across
    the restart: the owner is alive when the node goes down)."""
    ch.exchange_declare("t.x", "direct", durable=False)
    ch.exchange_declare("t.autodel", "fanout", durable=False, auto_delete=True)
    ch.queue_declare("t.q", durable=False)
    ch.queue_declare("t.autodel-q", durable=False, auto_delete=True)
    # bindings with a transient end: none of them may come back
    ch.queue_bind("t.q", "d.direct", "kt")             # durable exchange -> transient queue
    ch.queue_bind("dq", "t.x", "kx")                   # transient exchange -> durable queue
    ch.exchange_bind("t.x", "d.fanout", "kf")          # durable exchange -> transient exchange
    ch.exchange_bind("d.direct", "t.x", "kd")          # transient exchange -> durable exchange
    ch.queue_bind("t.autodel-q", "t.autodel")
    owner = conn.channel()
    owner.queue_declare("ex.dq", durable=True, exclusive=True)
    owner.queue_bind("ex.dq", "d.direct", "kex")       # durable exchange -> exclusive queue
    owner.basic_publish("", "ex.dq", b"lost with its queue", PERSISTENT)
    owner.basic_consume("t.autodel-q", lambda *a: None, auto_ack=True)
    return owner


def check_topology(broker: Broker) -> None:
    """Everything declare_topology() made is there and behaves as declared."""
    conn = broker.connection()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        # passive and equivalent re-declares
        for name, kind in [("d.ae", "fanout"), ("d.topic", "topic"), ("d.headers", "headers"),
                           ("d.fanout", "fanout")]:
            ch.exchange_declare(name, passive=True)
            ch.exchange_declare(name, kind, durable=True)
        ch.exchange_declare("d.direct", "direct", durable=True,
                            arguments={"alternate-exchange": "d.ae"})
        ch.exchange_declare("d.autodel", "fanout", durable=True, auto_delete=True)
        ch.queue_declare("dq", durable=True)
        ch.queue_declare("dq-args", durable=True, arguments=DQ_ARGS)
        ch.queue_declare("dq-autodel", durable=True, auto_delete=True)
        # the stored flags and arguments are the declared ones: a different one is refused
        for redeclare in (lambda c: c.exchange_declare("d.direct", "topic", durable=True),
                          lambda c: c.exchange_declare("d.topic", "topic", durable=False),
                          lambda c: c.queue_declare("dq", durable=False),
                          lambda c: c.queue_declare("dq-autodel", durable=True),
                          lambda c: c.queue_declare(
                              "dq-args", durable=True,
                              arguments={**DQ_ARGS, "x-max-length": 2})):
            with pytest.raises(ChannelClosedByBroker) as ei:
                redeclare(conn.channel())
            assert ei.value.reply_code == 406, ei.value
        # routing through every recovered binding
        ch.basic_publish("d.direct", "k1", b"direct", PERSISTENT, mandatory=True)
        ch.basic_publish("d.topic", "a.b.c", b"topic", PERSISTENT, mandatory=True)
        ch.basic_publish("d.fanout", "k1", b"exchange-to-exchange", PERSISTENT, mandatory=True)
        ch.basic_publish("d.headers", "", b"headers", pika.BasicProperties(
            delivery_mode=2, headers={"h1": "v1", "h2": "v2"}), mandatory=True)
        ch.basic_publish("d.direct", "no-such-key", b"alternate", PERSISTENT, mandatory=True)
        ch.basic_publish("d.autodel", "", b"autodel", PERSISTENT, mandatory=True)
        assert sorted(d.body for d in get_all(ch, "dq")) == [
            b"direct", b"exchange-to-exchange", b"topic"]
        assert [d.body for d in get_all(ch, "dq-headers")] == [b"headers"]
        assert [d.body for d in get_all(ch, "dq-ae")] == [b"alternate"]
        assert [d.body for d in get_all(ch, "dq-autodel")] == [b"autodel"]
        # the queue's arguments work: x-max-length 1 with reject-publish
        ch.basic_publish("", "dq-args", b"first", pika.BasicProperties(
            delivery_mode=2, priority=2))
        with pytest.raises(NackError):
            ch.basic_publish("", "dq-args", b"second", PERSISTENT)
        assert [d.body for d in get_all(ch, "dq-args")] == [b"first"]
    finally:
        safe_close(conn)


@pytest.mark.parametrize("how", RESTARTS)
def test_durable_exchanges_queues_and_bindings_survive_restart(tmp_path, how):
    broker = Broker.start_leveret(tmp_path)
    try:
        conn = broker.connection()
        declare_topology(conn.channel())
        safe_close(conn)
        check_topology(broker)                   # the test's own sanity check, before
        before_bindings, before_exchanges = bindings(broker), exchanges(broker)
        assert len(before_bindings) == 6
        broker = restart(broker, tmp_path, how)
        assert bindings(broker) == before_bindings
        assert exchanges(broker) == before_exchanges
        check_topology(broker)
    finally:
        broker.stop()


@pytest.mark.parametrize("how", RESTARTS)
def test_transient_autodelete_and_exclusive_definitions_do_not_survive(tmp_path, how):
    broker = Broker.start_leveret(tmp_path)
    try:
        conn = broker.connection()
        ch = conn.channel()
        declare_topology(ch)
        durable_bindings = bindings(broker)
        owner = declare_transients(conn, ch)
        # all of them exist while the node runs (else the test below proves nothing)
        for kind, name in [("exchange", "t.x"), ("exchange", "t.autodel"), ("queue", "t.q"),
                           ("queue", "t.autodel-q")]:
            assert not absent(conn, kind, name), name
        assert owner.queue_declare("ex.dq", durable=True, exclusive=True,
                                   passive=True).method.message_count == 1
        assert len(bindings(broker)) == len(durable_bindings) + 6
        broker = restart(broker, tmp_path, how)   # the exclusive queue's owner is still open
        safe_close(conn, timeout=2)
        conn = broker.connection()
        for kind, name in [("exchange", "t.x"), ("exchange", "t.autodel"), ("queue", "t.q"),
                           ("queue", "t.autodel-q"), ("queue", "ex.dq")]:
            assert absent(conn, kind, name), f"{kind} {name} survived the restart"
        assert bindings(broker) == durable_bindings
        assert {n for n, _ in exchanges(broker)}.isdisjoint({"t.x", "t.autodel"})
        # the durable side of those bindings was not harmed
        check_topology(broker)
        # and the names are free again: an exclusive queue of the same name can be declared
        conn.channel().queue_declare("ex.dq", durable=True, exclusive=True)
        safe_close(conn)
    finally:
        broker.stop()


def test_exclusive_durable_queue_of_same_name_starts_empty_after_restart(tmp_path):
    """The persistent messages of a durable exclusive queue go with it: a new queue of the same
    name after the restart starts empty (RabbitMQ: rabbit_queue_index:start/2 erases the indexes
    of queues it was not asked to recover)."""
    broker = Broker.start_leveret(tmp_path)
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("ex.dq", durable=True, exclusive=True)
        ch.basic_publish("", "ex.dq", b"of the old queue", PERSISTENT)
        broker = restart(broker, tmp_path, "sigterm")
        safe_close(conn, timeout=2)
        conn = broker.connection()
        ch = conn.channel()
        assert absent(conn, "queue", "ex.dq")
        ok = ch.queue_declare("ex.dq", durable=True, exclusive=True)
        got = get_all(ch, "ex.dq")
        assert (ok.method.message_count, [d.body for d in got]) == (0, [])
        safe_close(conn)
    finally:
        broker.stop()


@pytest.mark.parametrize("how", RESTARTS)
def test_users_vhosts_and_permissions_survive_restart(tmp_path, how):
    broker = Broker.start_leveret(tmp_path)
    try:
        ctl = broker.ctl
        ctl("add_vhost", "vh1")
        ctl("add_vhost", "vh-deleted")
        ctl("delete_vhost", "vh-deleted")
        ctl("add_user", "alice", "pw-old")
        ctl("change_password", "alice", "pw-alice")
        ctl("set_user_tags", "alice", "management", "policymaker")
        ctl("set_permissions", "-p", "vh1", "alice", "^alice-.*", ".*", ".*")
        ctl("add_user", "bob", "pw-bob")           # a user with no permission on vh1
        ctl("set_permissions", "-p", "/", "bob", ".*", ".*", ".*")
        ctl("clear_permissions", "-p", "/", "bob")
        ctl("add_user", "carol", "pw-carol")
        ctl("delete_user", "carol")
        # a durable queue with a persistent message in the new vhost
        conn = broker.connection(user="alice", password="pw-alice", virtual_host="vh1")
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("alice-q", durable=True)
        ch.basic_publish("", "alice-q", b"in vh1", PERSISTENT)
        safe_close(conn)
        users_before = ctl_json(broker, "export_definitions", "-")["users"]

        broker = restart(broker, tmp_path, how)

        users_after = ctl_json(broker, "export_definitions", "-")["users"]
        assert users_after == users_before
        tags = {u["name"]: sorted(u["tags"]) for u in users_after}
        assert tags.get("alice") == ["management", "policymaker"] and "carol" not in tags
        vhosts = [v["name"] for v in ctl_json(broker, "list_vhosts", "--formatter", "json")]
        assert "vh1" in vhosts and "vh-deleted" not in vhosts
        # alice: the new password, her configure pattern, her queue and its message
        conn = broker.connection(user="alice", password="pw-alice", virtual_host="vh1")
        ch = conn.channel()
        assert [d.body for d in get_all(ch, "alice-q")] == [b"in vh1"]
        ch.queue_declare("alice-other", durable=True)
        with pytest.raises(ChannelClosedByBroker) as ei:
            conn.channel().queue_declare("not-alices", durable=True)
        assert ei.value.reply_code == 403
        safe_close(conn)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            broker.connection(user="alice", password="pw-old", virtual_host="vh1")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            broker.connection(user="carol", password="pw-carol")
        # bob: no permission on vh1, and the cleared one on / stays cleared
        for vhost in ("vh1", "/"):
            with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as ei:
                broker.connection(user="bob", password="pw-bob", virtual_host=vhost)
            assert "530" in str(ei.value)
        # guest (the default user) keeps its rights on /
        safe_close(broker.connection())
    finally:
        broker.stop()
