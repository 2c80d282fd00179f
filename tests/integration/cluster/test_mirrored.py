"""Mirrored queues in a 3-node cluster (issue 6, C5 for mirrors): confirms wait for every
mirror; kill -9 of the home node while a publisher streams with confirms: the oldest
synchronised mirror takes over, consumers are cancelled, and every confirmed message is consumed
afterwards from the surviving nodes."""

from __future__ import annotations

import os
import signal
import threading
import time

from typing import NamedTuple

import pika
import pytest


pytestmark = pytest.mark.timeout(240)


def queue_row(broker, name) -> dict:
    out = broker.ctl("list_queues", "name", "messages", "node", "mirrors",
                     "synchronised_mirrors").stdout.splitlines()[2:]
    for line in out:
        cells = line.split("\t")
        if cells[0] == name:
            return dict(zip(("name", "messages", "node", "mirrors", "synced"), cells))
    return {}

class TrafficThroughAKill(NamedTuple):
    """What kill_home_under_traffic saw."""
    confirmed: set  # the bodies (numbers) whose publish was confirmed
    consumed_before: set  # the bodies the consumer acked (the first 100)
    cancelled: bool  # the consumer got basic.cancel
    killed: bool  # node 1 was killed


def kill_home_under_traffic(nodes, queue: str, delivery_mode: int,
                            seconds: float) -> TrafficThroughAKill:
    """A consumer on node 3 (prefetch 50, acks the first 100 then stalls) and a confirming
    publisher on node 2 (mandatory, numbered bodies); node 1, the queue's home, killed -9 after
    300 publishes; publishing goes on until 200 more are confirmed and the consumer was
    cancelled, or for `seconds`. 200 confirmed after the take-over, not 200 sent: on a busy
    machine every publish was refused (no home yet) for longer than 200 of them took."""
    cancelled = threading.Event()
    con = nodes[2].connection()
    cch = con.channel()
    cch.basic_qos(prefetch_count=50)
    cch.add_on_cancel_callback(lambda frame: cancelled.set())
    consumed_before = set()

    def on_msg(ch, method, props, body):
        if len(consumed_before) < 100:  # then it stalls: 50 unacked, the rest ready
            consumed_before.add(int(body))
            ch.basic_ack(method.delivery_tag)
    cch.basic_consume(queue, on_msg)

    confirmed, sent = set(), 0
    pub = nodes[1].connection()
    pch = pub.channel()
    pch.confirm_delivery()
    killed, confirmed_at_kill = False, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        con.process_data_events(0)
        try:
            pch.basic_publish("", queue, b"%d" % sent,
                              pika.BasicProperties(delivery_mode=delivery_mode), mandatory=True)
            confirmed.add(sent)
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
            # not confirmed (no home until the take-over): the publisher would send it again
            time.sleep(0.05)
        sent += 1
        if sent == 300 and not killed:
            nodes.kill9(0)
            killed, confirmed_at_kill = True, len(confirmed)
        if killed and len(confirmed) >= confirmed_at_kill + 200 and cancelled.is_set():
            break
    con.process_data_events(0.5)
    pub.close()
    con.close()
    return TrafficThroughAKill(confirmed, consumed_before, cancelled.is_set(), killed)



def test_policy_mirrors_a_queue_on_every_node(mended):
    nodes = mended
    nodes[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')
    with nodes[0].connection() as c:
        c.channel().queue_declare("ha.q", durable=True)
        c.channel().queue_declare("plain.q", durable=True)
    row = nodes.wait(lambda: (r := queue_row(nodes[1], "ha.q")) and
                     r["synced"].count("leveret@node") == 2 and r, what="2 synced mirrors")
    assert row["node"] == "leveret@node1"
    assert "leveret@node2" in row["mirrors"] and "leveret@node3" in row["mirrors"]
    assert queue_row(nodes[1], "plain.q")["mirrors"] == "[]"
    nodes[0].ctl("set_policy", "ha-two", "^ha\\.", '{"ha-mode": "exactly", "ha-params": 2}',
                 "--priority", "1")
    nodes.wait(lambda: queue_row(nodes[2], "ha.q")["mirrors"].count("leveret@node") == 1,
               what="one mirror with ha-mode exactly 2")


def test_kill9_of_home_loses_no_confirmed_message(mended):
    nodes = mended
    nodes[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')
    with nodes[0].connection() as c:
        c.channel().queue_declare("ha.orders", durable=True)  # home: node 1
    nodes.wait(lambda: queue_row(nodes[1], "ha.orders").get("synced", "").count("node") == 2,
               what="mirrors synchronised")
    run = kill_home_under_traffic(nodes, "ha.orders", delivery_mode=2, seconds=60)
    assert run.killed
    assert run.cancelled, "the consumer got no basic.cancel when the master died"
    assert len(run.confirmed) > 300, "nothing was confirmed after the take-over"
    row = queue_row(nodes[1], "ha.orders")
    assert row["node"] in ("leveret@node2", "leveret@node3")
    # everything confirmed is there (consumed before the kill, or in the queue now)
    left = nodes.drain(2, "ha.orders")
    missing = run.confirmed - run.consumed_before - left
    assert len(left) > 150  # a backlog was there to lose
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:10]}"


def test_kill9_of_the_masters_queue_worker_promotes_a_mirror__C6(mended):
    """The home node stays up but its queue worker (the master's process) is killed -9: an
    in-sync mirror takes over at once, as when the node dies, so the transient messages it was
    confirmed for survive too (a lone node's restarted worker has only the persistent ones);
    the old home comes back as a mirror."""
    nodes = mended
    nodes[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')
    with nodes[0].connection() as c:
        ch = c.channel()
        ch.queue_declare("ha.mixed", durable=True)  # home: node 1
        nodes.wait(lambda: queue_row(nodes[1], "ha.mixed").get("synced", "").count("node") == 2,
                   what="mirrors synchronised")
        ch.confirm_delivery()
        for i in range(100):
            ch.basic_publish("", "ha.mixed", b"p%d" % i, pika.BasicProperties(delivery_mode=2))
        for i in range(50):
            ch.basic_publish("", "ha.mixed", b"t%d" % i, pika.BasicProperties(delivery_mode=1))
    out = nodes[0].ctl("list_queues", "name", "worker").stdout.splitlines()[2:]
    index = next(int(c[1]) for c in (line.split("\t") for line in out) if c[0] == "ha.mixed")
    worker = nodes[0].queue_worker_pids()[index]  # the master's process (of several)
    os.kill(worker, signal.SIGKILL)
    row = nodes.wait(lambda: (r := queue_row(nodes[2], "ha.mixed")).get("node") not in
                     (None, "leveret@node1") and r, what="a mirror promoted")
    with nodes[2].connection() as c:
        ch = c.channel()
        bodies = set()
        while (got := ch.basic_get("ha.mixed", auto_ack=True))[0] is not None:
            bodies.add(got[2])
    assert bodies == {b"p%d" % i for i in range(100)} | {b"t%d" % i for i in range(50)}, row
    nodes.wait(lambda: "leveret@node1" in queue_row(nodes[1], "ha.mixed").get("synced", ""),
               what="the old home back as an in-sync mirror")


PAGING = "queue_page_bytes = 32768\nqueue_page_size = 10\n"  # (1 KB messages: 32 in memory)


def fill_paged_with_a_tail(ch, queue: str, tail: int) -> None:
    """Through a confirming channel, under PAGING: 1,000 messages of 1 KB numbered 0-999
    (transient and persistent in turn), 30 times queue_page_bytes: the queue pages; 40 taken
    back (pages of 10 read back leave memory below the budget); then `tail` more numbered
    from 1,000, which wait in memory behind the paged part (the lane's tail)."""
    pad = b"." * 994
    for i in range(1000):
        ch.basic_publish("", queue, b"%06d" % i + pad,
                         pika.BasicProperties(delivery_mode=1 + i % 2))
    for i in range(40):
        method, _, body = ch.basic_get(queue)
        assert int(body[:6]) == i
        ch.basic_ack(method.delivery_tag)
    for i in range(1000, 1000 + tail):
        ch.basic_publish("", queue, b"%06d" % i + pad,
                         pika.BasicProperties(delivery_mode=1 + i % 2))


def test_a_mirrored_queue_pages_and_a_promoted_mirror_delivers_everything__R1(tmp_path):
    """Issue 12 item 1: paging is on in a cluster. The master pages past queue_page_bytes;
    mirrors that join a master with a paged part are synced from its index, and page too;
    kill -9 of the home node promotes a mirror whose queue delivers everything (persistent and
    transient, in memory and paged out on the mirror) in order."""
    from tests.integration.cluster.nodes import Nodes
    cfg = tmp_path / "paging.toml"
    cfg.write_text(PAGING)
    nodes = Nodes(tmp_path, 3, "--config", str(cfg))
    try:
        pad = b"." * 994
        with nodes[0].connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("hp.deep", durable=True)  # home: node 1, no mirror yet
            fill_paged_with_a_tail(ch, "hp.deep", 40)
            # mirrors join now: what is paged out is synced to them from the master's index
            nodes[0].ctl("set_policy", "ha-all", "^hp\\.", '{"ha-mode": "all"}')
            nodes.wait(lambda: queue_row(nodes[1], "hp.deep").get("synced", "").count("node")
                       == 2, timeout=60, what="mirrors synchronised with the paged part")
            for i in range(1040, 1540):  # the mirrors page these (their memory is full)
                ch.basic_publish("", "hp.deep", b"%06d" % i + pad,
                                 pika.BasicProperties(delivery_mode=1 + i % 2))
        nodes.kill9(0)
        nodes.wait(lambda: queue_row(nodes[1], "hp.deep").get("node") in
                   ("leveret@node2", "leveret@node3"), timeout=60, what="a mirror promoted")
        assert any("more paged out" in b.log_path.read_text()  # the promoted mirror paged
                   for b in nodes.brokers[1:])
        with nodes[1].connection() as c:
            ch = c.channel()
            assert ch.queue_declare("hp.deep", durable=True, passive=True).method.\
                message_count == 1500
            ch.basic_qos(prefetch_count=50)
            got = []
            for method, _, body in ch.consume("hp.deep", inactivity_timeout=3):
                if method is None:
                    break
                got.append(int(body[:6]))
                ch.basic_ack(method.delivery_tag)
        assert got == list(range(40, 1540))
    finally:
        nodes.stop()
