"""Faults of a whole 3-node cluster (issue 6): the Raft leader killed -9 while a client changes
definitions through another node; every node killed -9 at once. Nothing a client was answered
for may be lost (definitions: behaviour D1; confirmed persistent messages: C8)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pika
import pytest

from actors.core import pause


pytestmark = pytest.mark.timeout(240)


def declared(broker, queue) -> bool:
    with broker.connection() as c:
        try:
            c.channel().queue_declare(queue, durable=True, passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker as e:
            assert e.reply_code == 404, e
            return False


def test_leader_killed_while_definitions_change__D1(mended):
    """A client on a follower declares durable queues in a loop while the leader is killed -9
    in the middle: some declares fail (541, or the connection closes), none hangs, declares work
    again once a new leader is elected, and every queue the client got declare-ok for exists on
    the survivors and on the old leader once it is back."""
    nodes = mended
    leader = nodes.leader(0)
    via = (leader + 1) % 3
    answered, failed = [], []
    after_kill = []  # answered declares begun once the leader was dead: a new leader's work
    killer = threading.Timer(0.5, nodes.kill9, (leader,))
    conn = nodes[via].connection()
    ch = conn.channel()
    killer.start()
    try:
        deadline = time.monotonic() + 60
        i = 0
        # (60 declares may be answered before the kill: go on until one begun after it is)
        while (len(answered) < 60 or not after_kill or not failed and i < 400) \
                and time.monotonic() < deadline:
            name = f"d-{i}"
            i += 1
            dead = killer.finished.is_set()  # (set once kill9 has reaped the leader)
            try:
                if conn.is_closed:
                    conn = nodes[via].connection()
                    ch = conn.channel()
                elif ch.is_closed:
                    ch = conn.channel()
                ch.queue_declare(name, durable=True)
                answered.append(name)
                if dead:
                    after_kill.append(name)
            except (pika.exceptions.AMQPError, OSError) as e:
                failed.append((name, repr(e)))
                time.sleep(0.1)
    finally:
        killer.join()
        if conn.is_open:
            conn.close()
    assert len(answered) >= 60, (answered, failed, nodes.logs())
    assert after_kill, ("no declare answered after the kill", failed, nodes.logs())
    # declares went on after the kill: a new leader among the survivors (via's status names it
    # once via has heard from it)
    nodes.leader(via, other_than=leader)
    survivors = [i for i in range(3) if i != leader]
    for s in survivors:
        missing = [q for q in answered if not declared(nodes[s], q)]
        assert not missing, (s, missing)
    nodes.start(leader)
    nodes.wait(lambda: nodes.status(leader)[f"leveret@node{leader + 1}"][0], what="old leader up")
    missing = [q for q in answered if not declared(nodes[leader], q)]
    assert not missing, missing


def test_every_node_killed_at_once_loses_nothing_confirmed__C8(mended):
    """Definitions made through different nodes and persistent messages confirmed into durable
    queues homed on two nodes; kill -9 of all three nodes; restarted together, everything is
    there."""
    nodes = mended
    with nodes[0].connection() as c:
        ch = c.channel()
        ch.exchange_declare("events", "topic", durable=True)
        ch.queue_declare("on1", durable=True)
        ch.queue_bind("on1", "events", "a.#")
    with nodes[1].connection() as c:
        ch = c.channel()
        ch.queue_declare("on2", durable=True)
        ch.queue_bind("on2", "events", "#.b")
    nodes[2].ctl("add_user", "carol", "secret")
    with nodes[2].connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(100):  # a.b goes to both queues
            ch.basic_publish("events", "a.b" if i % 2 else "a.x", b"%d" % i,
                             pika.BasicProperties(delivery_mode=2), mandatory=True)
    for i in range(3):
        nodes.kill9(i)
    nodes.start(0, 1, 2)
    for i in range(3):
        with nodes[i].connection() as c:
            ch = c.channel()
            ch.exchange_declare("events", "topic", durable=True, passive=True)
            assert ch.queue_declare("on1", durable=True, passive=True).method.message_count == 100
            assert ch.queue_declare("on2", durable=True, passive=True).method.message_count == 50
        assert "carol" in nodes[i].ctl("list_users").stdout
    # the bindings came back too: a new publish on node 2 reaches both queues
    with nodes[1].connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("events", "a.b", b"after", pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
        assert ch.queue_declare("on1", durable=True, passive=True).method.message_count == 101
        assert ch.queue_declare("on2", durable=True, passive=True).method.message_count == 51


def test_declare_while_a_restarted_home_recovers_its_queue_counts_what_it_recovered__C8(mended):
    """A durable queue's home node is killed -9 and started again while a client on another
    node declares the queue (passive) in a loop: each answer is 404 (home down) or declare-ok
    with every confirmed message counted, never an empty queue while it is still recovering
    (the declares that waited for the queue to start were answered with 0)."""
    nodes = mended
    n = 5000
    with nodes[1].connection() as c:
        ch = c.channel()
        ch.queue_declare("deep", durable=True)
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", "deep", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    nodes.kill9(1)
    counts, refused = [], 0
    with nodes[0].connection() as c:
        ch = c.channel()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(counts) < 20:
            try:
                counts.append(ch.queue_declare("deep", durable=True, passive=True)
                              .method.message_count)
            except pika.exceptions.ChannelClosedByBroker as e:
                assert e.reply_code == 404, e
                if not refused:  # the leader knows the home is down: start it again (here:
                    nodes.spawn(1)  # its parent-death signal follows the thread that forks)
                refused += 1
                ch = c.channel()
    nodes.wait_up(1)
    assert refused and counts, (refused, counts, nodes.logs())
    assert set(counts) == {n}, counts


def test_leader_paused_past_its_election_timeout_still_answers_declares__D1(mended):
    """The leader's node process is stopped (SIGSTOP) for longer than the election time-out
    while a client connected to it declares queues in a loop, as a busy machine can starve it:
    the followers elect another leader, and the declares the old leader had not committed are
    carried out by the new one. Every declare is answered declare-ok (none 541 "leadership
    changed"), and every queue exists on all three nodes."""
    nodes = mended
    leader = nodes.leader(0)
    pid = nodes[leader].proc.pid
    answered, failed = [], []
    stop = threading.Event()

    def declare_loop():
        with nodes[leader].connection() as conn:
            ch = conn.channel()
            i = 0
            while not stop.is_set():
                try:
                    ch.queue_declare(f"p-{i}", durable=True)
                    answered.append(f"p-{i}")
                except pika.exceptions.AMQPError as e:
                    failed.append((f"p-{i}", repr(e)))
                    return
                i += 1

    client = threading.Thread(target=declare_loop)
    client.start()
    try:
        nodes.wait(lambda: len(answered) >= 20, what="declares before the pause")
        os.kill(pid, signal.SIGSTOP)
        time.sleep(2 * pause.RAFT_MAX_TIMEOUT_S)  # a follower campaigns after at most this
        os.kill(pid, signal.SIGCONT)
        nodes.leader((leader + 1) % 3, other_than=leader)
        seen = len(answered)
        nodes.wait(lambda: len(answered) > seen + 20 or failed, what="declares after the pause")
    finally:
        stop.set()
        client.join(60)
    assert not failed, (failed, nodes.logs())
    for i in range(3):
        missing = [q for q in answered if not declared(nodes[i], q)]
        assert not missing, (i, missing)
