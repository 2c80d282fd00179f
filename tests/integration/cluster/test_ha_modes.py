"""Every ha-mode, by policy and by x-ha-* argument, in a 3-node cluster: the mirrors are where
the mode says (read with list_queues' mirrors / synchronised_mirrors), not only accepted:
ha-mode nodes mirrors on the listed members and moves the mirrors when the list changes,
exactly N gives N - 1 mirrors, all every other node; ha-sync-mode manual leaves a new mirror
unsynchronised until sync_queue, the older messages leaving, or the policy turning automatic;
a refused ha policy leaves nothing behind and the next declare is answered (docs/cluster.md,
"Mirrored queues")."""

from __future__ import annotations

import json
import time

import pika
import pytest

from tests.integration.cluster.test_mirrored import queue_row

pytestmark = pytest.mark.timeout(240)


def mirrors(nodes, name, column="mirrors") -> list | None:
    """The node names of queue `name`'s mirrors (column "synced": its synchronised mirrors),
    sorted; None when it is not listed."""
    cell = queue_row(nodes[0], name).get(column, "")
    if not cell:
        return None
    return sorted(x.strip() for x in cell.strip("[]").replace('"', "").split(",") if x.strip())


def wait_mirrors(nodes, name, want, column="mirrors"):
    return nodes.wait(lambda: mirrors(nodes, name, column) == sorted(want),
                      what=f"{column} of {name} = {want} (now {mirrors(nodes, name, column)})")


def test_ha_mode_nodes_exactly_and_all_put_the_mirrors_where_they_say(shared):
    n1, n2, n3 = "leveret@node1", "leveret@node2", "leveret@node3"
    shared[0].ctl("set_policy", "ha-nodes", "^nodes\\.",
                 json.dumps({"ha-mode": "nodes", "ha-params": [n2, n3],
                             "ha-sync-mode": "automatic"}))
    shared[0].ctl("set_policy", "ha-exactly", "^exactly\\.",
                 json.dumps({"ha-mode": "exactly", "ha-params": 2}))
    with shared[0].connection() as c:  # every queue homed on node 1
        ch = c.channel()
        ch.queue_declare("nodes.q", durable=True)
        for i in range(20):
            ch.basic_publish("", "nodes.q", b"%d" % i)
        ch.queue_declare("exactly.q", durable=True)
        ch.queue_declare("arg.nodes", durable=True,
                         arguments={"x-ha-mode": "nodes", "x-ha-params": [n3, "rabbit@nowhere"]})
        ch.queue_declare("arg.exactly", durable=True,
                         arguments={"x-ha-mode": "exactly", "x-ha-params": 3})
        ch.queue_declare("arg.all", durable=True, arguments={"x-ha-mode": "all"})
        ch.queue_declare("plain.q", durable=True)
    # nodes: exactly the listed ones, synchronised (ha-sync-mode automatic) with the messages
    wait_mirrors(shared, "nodes.q", [n2, n3], "synced")
    assert queue_row(shared[0], "nodes.q")["node"] == n1
    wait_mirrors(shared, "exactly.q", [n2])                # exactly 2: the master and one
    wait_mirrors(shared, "arg.nodes", [n3])                # a name not in the cluster: left out
    wait_mirrors(shared, "arg.exactly", [n2, n3])
    wait_mirrors(shared, "arg.all", [n2, n3])
    assert mirrors(shared, "plain.q") == []
    # a new list moves the mirrors; the master, left out, stays where it is
    shared[1].ctl("set_policy", "ha-nodes", "^nodes\\.",
                 json.dumps({"ha-mode": "nodes", "ha-params": [n3]}))
    wait_mirrors(shared, "nodes.q", [n3])
    shared[0].ctl("set_policy", "ha-nodes", "^nodes\\.",
                 json.dumps({"ha-mode": "nodes", "ha-params": [n1]}))
    wait_mirrors(shared, "nodes.q", [])
    assert queue_row(shared[0], "nodes.q")["node"] == n1


REFUSED = [
    ({"ha-mode": "exactly", "ha-params": "banana"},
     'ha-mode="exactly" takes an integer, <<"banana">> given'),
    ({"ha-mode": "exactly", "ha-params": 0}, 'ha-mode="exactly" takes an integer, 0 given'),
    ({"ha-mode": "nodes", "ha-params": []}, 'ha-mode="nodes" list must be non-empty'),
    ({"ha-mode": "all", "ha-sync-mode": "eager"},
     'ha-sync-mode must be "manual" or "automatic", got <<"eager">>'),
]


def test_a_refused_ha_policy_leaves_nothing_and_declares_are_answered(shared):
    for definition, text in REFUSED:  # (through a follower: forwarded to the leader)
        res = shared[1].ctl("set_policy", "bad", "^ha\\.", json.dumps(definition), check=False)
        assert res.returncode != 0 and "Validation failed" in res.stderr and text in res.stderr
    # (the cluster is the module's: the other tests' policies may be there, never this one)
    assert "bad" not in [p["name"] for p in json.loads(shared[0].ctl("list_policies").stdout)]
    shared[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')
    with shared[2].connection() as c:
        c.channel().queue_declare("ha.after", durable=True)  # answered: on main it hung
    wait_mirrors(shared, "ha.after", ["leveret@node1", "leveret@node2"])


def test_ha_sync_mode_manual_syncs_a_new_mirror_only_when_asked_or_drained__C5(shared):
    n2 = "leveret@node2"
    with shared[0].connection() as c:  # homed on node 1, messages in before any mirror
        ch = c.channel()
        ch.confirm_delivery()
        for name, n in (("man.sync", 10), ("man.drain", 3), ("man.auto", 5)):
            ch.queue_declare(name, durable=True)
            for i in range(n):
                ch.basic_publish("", name, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    manual = {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "manual"}
    shared[0].ctl("set_policy", "ha-man", "^man\\.", json.dumps(manual))
    for name in ("man.sync", "man.drain", "man.auto"):
        wait_mirrors(shared, name, [n2])
    time.sleep(3)  # (an automatic mirror would be synchronised by now)
    for name in ("man.sync", "man.drain", "man.auto"):
        assert mirrors(shared, name, "synced") == [], name
    with shared[1].connection() as c:  # confirms still wait for (and get) the new mirror
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "man.drain", b"new", pika.BasicProperties(delivery_mode=2))
    res = shared[2].ctl("sync_queue", "man.sync")
    assert "Synchronising queue 'man.sync' in vhost '/' ..." in res.stdout
    wait_mirrors(shared, "man.sync", [n2], "synced")
    assert mirrors(shared, "man.drain", "synced") == []
    with shared[0].connection() as c:  # the older messages leave: nothing is missing
        ch = c.channel()
        for _ in range(3):
            method, _, body = ch.basic_get("man.drain")
            assert body != b"new"
            ch.basic_ack(method.delivery_tag)
    wait_mirrors(shared, "man.drain", [n2], "synced")
    assert mirrors(shared, "man.auto", "synced") == []
    automatic = dict(manual, **{"ha-sync-mode": "automatic"})
    shared[0].ctl("set_policy", "ha-man", "^man\\.", json.dumps(automatic))
    wait_mirrors(shared, "man.auto", [n2], "synced")
    res = shared[0].ctl("cancel_sync_queue", "man.auto")  # none under way: nothing to stop
    assert "Stopping synchronising queue 'man.auto' in vhost '/' ..." in res.stdout
    res = shared[0].ctl("sync_queue", "no.such.queue", check=False)
    assert res.returncode != 0 and "no queue 'no.such.queue' in vhost '/'" in res.stderr


def test_an_unsynchronised_manual_mirror_is_never_promoted__C8(mended):
    nodes = mended
    with nodes[0].connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("man.kept", durable=True)  # homed on node 1
        for i in range(5):
            ch.basic_publish("", "man.kept", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    nodes[0].ctl("set_policy", "ha-man", "^man\\.", json.dumps(
        {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "manual"}))
    wait_mirrors(nodes, "man.kept", ["leveret@node2"])
    time.sleep(2)
    assert mirrors(nodes, "man.kept", "synced") == []
    nodes.kill9(0)
    nodes.wait(lambda: not nodes.status(1)["leveret@node1"][0], 30, what="node1 listed down")
    time.sleep(3)  # (a synchronised mirror would have been promoted by now)
    assert queue_row(nodes[1], "man.kept")["node"] == "leveret@node1"  # it waits for its node
    nodes.start(0)
    assert nodes.drain(0, "man.kept") == set(range(5))  # every confirmed one, from its disk
