"""Replicated streams in a 3-node cluster (docs/streams.md, "Replication"): members on
`x-initial-cluster-size` nodes (by default every node, as RabbitMQ), a publish confirmed
once a majority of the members holds it (C5 for a stream), consumers on any node, and the
leader's node killed -9 with every confirmed message still readable from `first` at the
same offsets through a member elected leader. One cluster for the module."""

from __future__ import annotations

import time

import pika
import pytest

from tests.integration.cluster.test_cluster_management import ManagedNodes
from tests.integration.cluster.test_mirrored import queue_row
from tests.integration.test_management import Api

pytestmark = pytest.mark.timeout(300)

S = {"x-queue-type": "stream"}
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture(scope="module")
def managed(tmp_path_factory):
    n = ManagedNodes(tmp_path_factory.mktemp("stream-cluster"))
    yield n
    n.stop()


def _api_row(managed, i, name, cond, what):
    api = Api(managed.http[i])
    return managed.wait(lambda: (r := api("GET", f"/api/queues/%2F/{name}"))[0] == 200 and
                        cond(r[1]) and r[1], 30, what)


def _read(conn, name, n, offset="first"):
    """[(body, x-stream-offset)] of the first `n` deliveries from `offset`, acking each."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got = []

    def on(c, m, p, b):
        got.append((b, p.headers["x-stream-offset"]))
        c.basic_ack(m.delivery_tag)
    tag = ch.basic_consume(name, on, arguments={"x-stream-offset": offset})
    done = _pump(conn, lambda: len(got) >= n)
    ch.basic_cancel(tag)
    assert done, f"{len(got)} of {n} deliveries"
    return got[:n]


def _pump(conn, cond, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        conn.process_data_events(0.1)
        if cond():
            return True
    return False


def test_initial_cluster_size_places_members_and_the_api_shows_them(managed):
    managed[0].ctl("set_policy", "streams-of-two", "^s\\.pol", '{"initial-cluster-size": 2}')
    with managed[1].connection() as c:
        ch = c.channel()
        ch.queue_declare("s.two", durable=True,
                         arguments={**S, "x-initial-cluster-size": 2})
        ch.queue_declare("s.all", durable=True, arguments=S)
        ch.queue_declare("s.pol", durable=True, arguments={**S, "x-initial-cluster-size": 3})
        ch.queue_declare("s.one", durable=True, arguments={**S, "x-initial-cluster-size": 1})
    row = _api_row(managed, 0, "s.two", lambda q: len(q.get("members", [])) == 2,
                   "two members of s.two")
    assert row["type"] == "stream" and row["leader"] == "leveret@node2"
    assert row["members"][0] == "leveret@node2" and row["online"] == row["members"]
    row = _api_row(managed, 2, "s.all", lambda q: len(q.get("members", [])) == 3,
                   "three members of s.all (the default: every node)")
    assert sorted(row["members"]) == ["leveret@node1", "leveret@node2", "leveret@node3"]
    assert row["leader"] == "leveret@node2"
    # the policy's initial-cluster-size wins over the argument, as RabbitMQ's
    row = _api_row(managed, 0, "s.pol", lambda q: len(q.get("members", [])) >= 2,
                   "the members of s.pol")
    assert len(row["members"]) == 2
    row = _api_row(managed, 2, "s.one", lambda q: q.get("members"), "the members of s.one")
    assert row["members"] == ["leveret@node2"]


def test_leader_killed_keeps_every_confirmed_message_at_its_offset__C5(managed):
    with managed[0].connection() as c:
        ch = c.channel()
        ch.queue_declare("s.fail", durable=True, arguments=S)  # leader on node1
        managed.wait(lambda: queue_row(managed[1], "s.fail").get("synced", "")
                     .count("leveret@node") == 2, 30, "both members joined and caught up")
        ch.confirm_delivery()
        for i in range(200):
            ch.basic_publish("", "s.fail", b"m%d" % i, PERSISTENT)  # returns once confirmed
    want = [(b"m%d" % i, i) for i in range(200)]
    with managed[2].connection() as c:  # a consumer on another node reads through the leader
        assert _read(c, "s.fail", 200) == want
    managed.kill9(0)
    try:
        managed.wait(lambda: not managed.status(1)["leveret@node1"][0], 30,
                     "node1 marked down")
        row = _api_row(managed, 1, "s.fail", lambda q: q.get("leader") in
                       ("leveret@node2", "leveret@node3"), "a member elected leader")
        assert len(row["members"]) == 2
        with managed[2].connection() as c:
            assert _read(c, "s.fail", 200) == want  # every confirmed message, same offsets
            ch = c.channel()
            ch.confirm_delivery()
            for i in range(200, 210):  # the new leader and the other member: a majority
                ch.basic_publish("", "s.fail", b"m%d" % i, PERSISTENT)
            assert _read(c, "s.fail", 10, offset=200) == [(b"m%d" % i, i)
                                                          for i in range(200, 210)]
    finally:
        managed.start(0)
    # node1 is back as a member: its log is kept where it matches and it catches up
    managed.wait(lambda: queue_row(managed[1], "s.fail").get("synced", "")
                 .count("leveret@node") == 2, 30, "node1's member caught up again")
    with managed[0].connection() as c:
        assert _read(c, "s.fail", 210) == [(b"m%d" % i, i) for i in range(210)]
