"""Quorum queues in a 3-node cluster (issue 15 item 4): members on min(group size, cluster
size) nodes; a publish is confirmed once a majority of the members has it on disk (C5 for a
quorum queue): with one of three nodes killed confirms still come, with two killed they do not
until one returns; no confirmed message is lost when the leader's node is killed -9."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pika
import pytest

from tests.integration.cluster.test_mirrored import (PAGING, fill_paged_with_a_tail,
                                                     kill_home_under_traffic, queue_row)

pytestmark = pytest.mark.timeout(300)

QQ = {"x-queue-type": "quorum"}


def _synced(nodes, i, name, n):
    return nodes.wait(lambda: (r := queue_row(nodes[i], name)) and
                      r["synced"].count("leveret@node") == n and r,
                      timeout=30, what=f"{n} synchronised members besides the leader")


def _members(cell: str) -> list[int]:
    """Node indexes (0-based) of the member names in a list_queues cell, in its order."""
    return [int(n) - 1 for n in re.findall(r"leveret@node(\d+)", cell)]


def _new_queue_of_three(nodes, name: str) -> tuple[int, int, int]:
    """A quorum queue declared on the Raft leader's node (so that killing the others starts no
    election), its two members synchronised: the node indexes of L, A (the oldest member: the
    heir of the old rule) and B."""
    leader = nodes.leader(0)
    with nodes[leader].connection() as c:
        c.channel().queue_declare(name, durable=True, arguments=QQ)
    row = _synced(nodes, leader, name, 2)
    a, b = _members(row["mirrors"])
    return leader, a, b


def _elected_delivers_all(nodes, leader: int, a: int, name: str, confirmed: set) -> None:
    """Once a member other than L's (node `leader`, killed) leads `name`, every confirmed
    message is drained through node `a`."""
    old = f"leveret@node{leader + 1}"
    nodes.wait(lambda: (r := nodes.queue_status(a).get(name)) and r["master"] != old
               and r["running"] == "true", timeout=60, what=f"a member of {name} elected")
    got = nodes.drain(a, name)
    missing = confirmed - got
    assert not missing, f"{len(missing)} of {len(confirmed)} confirmed messages lost, " \
                        f"e.g. {sorted(missing)[:10]}; elected: {queue_row(nodes[a], name)}"


def _confirmed_while_stopped(nodes, leader: int, queue: str, stopped: list) -> set:
    """B lags: its queue workers (`stopped`) get SIGSTOP, so what the leader L sends B waits in
    L's memory, while 300 x 40 KiB persistent messages are published to `queue` through L with
    confirms (more than the kernel buffers B's socket, less than queue_page_bytes: no paging).
    The numbers of the bodies confirmed; the caller sends SIGCONT."""
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    confirmed = set()
    pad = b" " * (40 * 1024)
    with nodes[leader].connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(300):
            ch.basic_publish("", queue, b"%d" % i + pad, pika.BasicProperties(delivery_mode=2))
            confirmed.add(i)
    return confirmed


def test_without_a_majority_of_its_logs_a_quorum_queue_waits__C5(tmp_path):
    """Issue 15, "heir", in a cluster larger than the queue: five nodes, a quorum queue of three
    members, L (on the Raft leader's node), A (the oldest mirror) and B. B lags (its queue
    worker stopped) while 300 publishes are confirmed by L and A; then A's and L's nodes are
    killed -9 at once. The cluster keeps its majority (three of five nodes), but the queue has
    one member of three: a Raft queue elects nobody and waits rather than come back without
    the messages only L and A had; once A's node is back, A (the longest log) leads and every
    confirmed message is delivered."""
    from tests.integration.cluster.nodes import Nodes
    nodes = Nodes(tmp_path, 5, "--conn-workers", "1", "--queue-workers", "1")
    stopped = []
    try:
        leader, a, b = _new_queue_of_three(nodes, "qq.wait")  # L, A (the oldest), B
        stopped = list(nodes[b].queue_worker_pids().values())
        confirmed = _confirmed_while_stopped(nodes, leader, "qq.wait", stopped)
        nodes.kill9(a)
        nodes.kill9(leader)
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped = []
        other = next(i for i in range(5) if i not in (leader, a))
        old = f"leveret@node{leader + 1}"

        def waiting_or_served():
            if any("quorum queue 'qq.wait' in vhost '/' has no leader and waits: 1 of its 3"
                   in nodes[i].log_path.read_text() for i in range(5) if i not in (leader, a)):
                return "waits"
            r = nodes.queue_status(other).get("qq.wait")
            return "served" if r and r["running"] == "true" and r["master"] != old else None
        outcome = nodes.wait(waiting_or_served, timeout=60, what="qq.wait waiting or served")
        if outcome == "served":  # it came back with one member of three: what did it keep?
            missing = confirmed - nodes.drain(other, "qq.wait")
            assert not missing, f"served without a majority of its logs: {len(missing)} of " \
                                f"{len(confirmed)} confirmed messages lost"
        r = nodes.queue_status(other)["qq.wait"]
        assert r["running"] == "false" and r["master"] == old, r  # nobody leads it
        nodes.start(a)  # A's log is back: A and B are a majority, A's the longer
        nodes.wait(lambda: (r := nodes.queue_status(other).get("qq.wait")) and
                   r["running"] == "true" and r["master"] == f"leveret@node{a + 1}",
                   timeout=60, what="A leading qq.wait")
        missing = confirmed - nodes.drain(other, "qq.wait")
        assert not missing, f"{len(missing)} of {len(confirmed)} confirmed messages lost"
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        nodes.stop()


def test_members_synced_from_a_paged_leader_lead_with_every_message_in_order__C5(tmp_path):
    """Issue 15 ("heir" asked whether seq_ids reach a member out of order): a member that joins
    a leader whose queue has paged out is sent what the leader holds in memory first, then the
    paged-out part from the leader's index, so its log is written out of seq_id order. Both
    members rejoin such a leader (their nodes restarted), one after the other; then the
    leader's node is killed -9. The member elected must hold every confirmed message and
    deliver them in the order they were published."""
    from tests.integration.cluster.nodes import Nodes
    cfg = tmp_path / "paging.toml"
    cfg.write_text(PAGING)
    nodes = Nodes(tmp_path, 3, "--config", str(cfg))
    try:
        leader = nodes.leader(0)
        with nodes[leader].connection() as c:
            ch = c.channel()
            ch.queue_declare("qq.paged", durable=True, arguments=QQ)
            row = _synced(nodes, leader, "qq.paged", 2)
            ch.confirm_delivery()
            fill_paged_with_a_tail(ch, "qq.paged", 10)  # the leader pages, with a tail
        members = _members(row["mirrors"])
        for i in members:  # each rejoins the paged leader and syncs from memory, then its index
            nodes.kill9(i)
            nodes.start(i)
            nodes.wait(lambda: sorted(_members(queue_row(nodes[leader], "qq.paged")
                                               .get("synced", ""))) == sorted(members),
                       timeout=90, what=f"node{i + 1}'s member synchronised again")
        leader_log = nodes[leader].log_path.read_text()
        joined = re.findall(r"qq\.paged.*mirror on \S+ joined, syncing (\d+) messages", leader_log)
        assert joined and all(int(n) < 1000 for n in joined[-2:]), joined  # the rest: paged
        nodes.kill9(leader)
        old = f"leveret@node{leader + 1}"
        nodes.wait(lambda: (r := nodes.queue_status(members[0]).get("qq.paged"))
                   and r["master"] != old and r["running"] == "true", timeout=60,
                   what="a member of qq.paged elected")
        with nodes[members[0]].connection() as c:
            ch = c.channel()
            ch.basic_qos(prefetch_count=50)
            got = []
            for method, _, body in ch.consume("qq.paged", inactivity_timeout=3):
                if method is None:
                    break
                got.append(int(body[:6]))
                ch.basic_ack(method.delivery_tag)
        assert got == list(range(40, 1010)), (len(got), got[:20], got[-20:])
    finally:
        nodes.stop()


def test_a_member_resyncing_after_a_restart_keeps_its_log_when_the_leader_dies__C5(tmp_path):
    """Issue 15 (Raft keeps a follower's log): L leads, A and B are members; B lags (its queue
    workers stopped) while 2,000 publishes are confirmed by L and A. A's node restarts and A
    rejoins L, whose queue has paged out, so the sync takes a while (a page of one message at
    a time); L's node is killed -9 as soon as A has taken L's answer (its complete-log marker
    changed). A member that dropped its log to resync it could not lead (its log incomplete),
    and B, which never got the messages, led: every one only L and A had was lost. A keeps its
    log (it offers it; L sends only what follows it), votes with it, leads, and every
    confirmed message is delivered."""
    from actors.store.storage import queue_id
    from tests.integration.cluster.nodes import Nodes
    cfg = tmp_path / "paging.toml"
    cfg.write_text("queue_page_bytes = 262144\nqueue_page_size = 1\n")
    nodes = Nodes(tmp_path, 3, "--config", str(cfg))
    stopped = []
    try:
        leader, a, b = _new_queue_of_three(nodes, "qq.keep")  # L, A (the oldest), B
        stopped = list(nodes[b].queue_worker_pids().values())
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        confirmed = set()
        with nodes[leader].connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            for i in range(2000):
                ch.basic_publish("", "qq.keep", b"%d" % i + b" " * 4000,
                                 pika.BasicProperties(delivery_mode=2))
                confirmed.add(i)
        marker = nodes[a].data_dir / "messages" / "quorum" / queue_id("/", "qq.keep").hex()
        complete = marker.read_bytes()
        nodes.kill9(a)
        nodes.start(a)
        # L's answer taken: the marker gone (a dropped log) or partial (a kept one)
        deadline = time.monotonic() + 60
        while marker.exists() and marker.read_bytes() == complete:
            assert time.monotonic() < deadline, "A took no answer from L"
            time.sleep(0.002)  # (L's sync of its paged part takes a while; be well inside it)
        nodes.kill9(leader)
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped = []
        _elected_delivers_all(nodes, leader, a, "qq.keep", confirmed)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        nodes.stop()


# the tests above start clusters of their own (five nodes, other settings); those below share
# the module's, started once they begin (so it does not idle beside the others)
def test_members_on_group_size_nodes(mended):
    nodes = mended
    with nodes[0].connection() as c:
        ch = c.channel()
        ch.queue_declare("qq.three", durable=True, arguments=QQ)
        ch.queue_declare("qq.two", durable=True,
                         arguments={**QQ, "x-quorum-initial-group-size": 2})
        ch.queue_declare("qq.seven", durable=True,
                         arguments={**QQ, "x-quorum-initial-group-size": 7})
    row = _synced(nodes, 1, "qq.three", 2)
    assert row["node"] == "leveret@node1"
    _synced(nodes, 2, "qq.seven", 2)  # at most the cluster's three nodes
    row = _synced(nodes, 1, "qq.two", 1)
    assert row["mirrors"].count("leveret@node") == 1
    # an ha policy does not make a quorum queue's members (unsupported policy key)
    nodes[0].ctl("set_policy", "ha-all", "^qq\\.", '{"ha-mode": "all"}')
    with nodes[0].connection() as c:  # a classic queue the policy mirrors: after its entry
        c.channel().queue_declare("qq.classic", durable=True)
    _synced(nodes, 2, "qq.classic", 2)
    assert queue_row(nodes[2], "qq.two")["mirrors"].count("leveret@node") == 1


def _publish_in_thread(ch, body):
    """basic_publish on a confirm channel in a thread: its result once the confirm came."""
    out = {}

    def run():
        try:
            ch.basic_publish("", "qq.majority", body, pika.BasicProperties(delivery_mode=2))
            out["ok"] = True
        except Exception as e:  # noqa: BLE001 - reported to the test
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_confirms_need_a_majority__C5(mended):
    nodes = mended
    pub = nodes[0].connection()
    ch = pub.channel()
    ch.queue_declare("qq.majority", durable=True, arguments=QQ)  # leader on node 1
    _synced(nodes, 0, "qq.majority", 2)
    ch.confirm_delivery()
    ch.basic_publish("", "qq.majority", b"all-up", pika.BasicProperties(delivery_mode=2))
    # one of three down: the leader and the other member are a majority
    nodes.kill9(2)
    nodes.wait(lambda: not nodes.status(0)["leveret@node3"][0], what="node3 marked down")
    ch.basic_publish("", "qq.majority", b"one-down", pika.BasicProperties(delivery_mode=2))
    # two of three down: the leader alone is no majority: its node pauses (pause_minority), so
    # the confirm never comes: a nack, or the connection closed with 320
    nodes.kill9(1)
    t, out = _publish_in_thread(ch, b"two-down")
    t.join(30.0)
    assert not t.is_alive() and "error" in out, f"confirmed without a majority: {out}"
    # node 2 comes back: node 1 resumes, its member syncs, and publishes are confirmed again
    nodes.start(1)
    deadline = time.monotonic() + 60
    while True:
        try:
            with nodes[0].connection() as c:
                ch = c.channel()
                ch.confirm_delivery()
                ch.basic_publish("", "qq.majority", b"after",
                                 pika.BasicProperties(delivery_mode=2))
            break
        except (pika.exceptions.AMQPError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    with nodes[1].connection() as c:
        ch = c.channel()
        bodies = []
        while (got := ch.basic_get("qq.majority", auto_ack=True))[0] is not None:
            bodies.append(got[2])
    # the nacked one may be there too (a member may have taken it before the pause)
    assert [b for b in bodies if b != b"two-down"] == [b"all-up", b"one-down", b"after"], bodies


def test_kill9_of_the_leader_loses_no_confirmed_message(mended):
    nodes = mended
    with nodes[0].connection() as c:
        c.channel().queue_declare("qq.orders", durable=True, arguments=QQ)  # leader: node 1
    _synced(nodes, 1, "qq.orders", 2)
    # (transient: a quorum queue keeps it all the same)
    run = kill_home_under_traffic(nodes, "qq.orders", delivery_mode=1, seconds=90)
    assert run.killed
    assert run.cancelled, "the consumer got no basic.cancel when the leader died"
    assert len(run.confirmed) > 300, "nothing was confirmed after the take-over"
    row = queue_row(nodes[1], "qq.orders")
    assert row["node"] in ("leveret@node2", "leveret@node3")
    left = nodes.drain(2, "qq.orders")
    missing = run.confirmed - run.consumed_before - left
    assert len(left) > 150  # a backlog was there to lose
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:10]}"


def test_two_failures_in_a_row_lose_no_confirmed_message__C5(mended):
    """Issue 15, "heir": the member promoted is the one with the longest log, not the oldest
    synchronised one. Three members: the leader L (on the Raft leader's node, so that killing
    the others starts no election), A (the oldest mirror: the heir) and B. B lags: its node's
    queue workers are stopped (SIGSTOP), so what L sends it waits in L's memory, while every
    publish is confirmed by L and A (a majority). Then A's node is killed -9 and restarted: A
    syncs again from L and is now the younger mirror, B (synchronised in the log, never down)
    the oldest. Then L's node is killed -9 and B's workers continued: B never gets what L
    held for it. A Raft queue elects the member with the longest log among a majority of
    members (A and B answer: A), or waits; promoting the oldest synchronised mirror (B) lost
    every confirmed message B had not received."""
    nodes = mended
    leader, a, b = _new_queue_of_three(nodes, "qq.heir")  # L, A (the oldest), B
    stopped = list(nodes[b].queue_worker_pids().values())
    try:
        confirmed = _confirmed_while_stopped(nodes, leader, "qq.heir", stopped)
        nodes.kill9(a)
        nodes.start(a)  # A rejoins, syncs from L; B stays synchronised (its node is up)
        row = nodes.wait(lambda: (r := queue_row(nodes[a], "qq.heir")) and
                         sorted(_members(r["synced"])) == sorted([a, b]) and r,
                         timeout=60, what="A synchronised again")
        assert _members(row["mirrors"]) == [b, a], row  # B is now the oldest: the old rule's heir
        nodes.kill9(leader)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    _elected_delivers_all(nodes, leader, a, "qq.heir", confirmed)
