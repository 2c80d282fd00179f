"""Every event kind of the schema (actors/events.py KINDS, the kinds spark_analysis reads) is one
the real broker writes: a node with events full driven by pika through every fate, then its
event files read back (no Spark). A kind that only a test or the docs ever wrote fails here."""
from __future__ import annotations

import glob
import os
import signal
import time

import pika
import pytest

from amqp_helpers import wait_until
from conftest import Broker

from actors import events
from spark_analysis import schema

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="reads Leveret's own event log")


def _kinds(events_dir) -> set:
    seen = set()
    for path in glob.glob(os.path.join(events_dir, "*.events")):
        _, it = events.read_file(path)
        seen.update(e[0] for e in it)
    return seen


def test_the_broker_writes_every_kind_the_job_reads(tmp_path):
    cfg = tmp_path / "leveret.toml"
    # a small buffer, so that the burst at the end overflows it (events_dropped)
    cfg.write_text("events_max_buffered = 400\n")
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg), "--events", "full",
                                  "--queue-workers", "1")
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("dlx", "fanout")
        ch.queue_declare("dead")
        ch.queue_bind("dead", "dlx")
        ch.queue_declare("work", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
        ch.queue_declare("full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
        ch.queue_declare("short", arguments={"x-max-length": 1})
        ch.queue_declare("ttl", arguments={"x-message-ttl": 1})
        persistent = pika.BasicProperties(delivery_mode=2)
        for body in (b"ack", b"nack", b"reject", b"get"):
            ch.basic_publish("", "work", body, persistent)  # enqueued, stored, synced, confirmed
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("", "nowhere", b"x", mandatory=True)  # unroutable, returned
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "full", b"x")  # nacked_to_publisher
        ch.basic_publish("", "short", b"1")
        ch.basic_publish("", "short", b"2")  # dropped
        ch.basic_publish("", "ttl", b"x")  # expired (when the queue looks at it)
        got = {}
        for _ in range(3):
            method, _, body = ch.basic_get("work")  # fetched
            got[body] = method.delivery_tag
        ch.basic_ack(got[b"ack"])  # acked
        ch.basic_nack(got[b"nack"], requeue=True)  # nacked, requeued
        ch.basic_reject(got[b"reject"], requeue=False)  # rejected, dead_lettered (+ published)
        for method, _, _ in ch.consume("work", inactivity_timeout=1):  # delivered
            if method is None:
                break
            ch.basic_ack(method.delivery_tag)
        ch.cancel()
        wait_until(lambda: ch.queue_declare("ttl", passive=True).method.message_count == 0)
        ch.queue_purge("dead")  # purged
        ch.queue_delete("short")  # queue_deleted
        tx = conn.channel()
        tx.tx_select()
        tx.basic_publish("", "work", b"t")
        tx.tx_commit()  # tx_committed
        tx.basic_publish("", "work", b"r")
        tx.tx_rollback()  # tx_rolled_back
        tx.close()  # channel_closed
        ch.queue_purge("work")
        conn.close()  # connection_closed
        time.sleep(1)  # written (a flush every 0.2 s) before the kill takes the buffer
        [victim] = broker.queue_worker_pids().values()
        os.kill(victim, signal.SIGKILL)  # process_crashed, queue_crashed; queue_started again
        wait_until(lambda: broker.queue_worker_pids() and
                   victim not in broker.queue_worker_pids().values(), timeout=30)
        broker.ctl("census")  # queue_census on demand (and after every start)
        time.sleep(1.5)  # a heartbeat from every process, and everything so far written
        conn = broker.connection()
        ch = conn.channel()
        for _ in range(3000):  # more than the buffer holds between two writes: events_dropped
            ch.basic_publish("", "work", b"x")
        conn.close()
    finally:
        broker.stop()  # process_stop
    seen = _kinds(broker.data_dir / "events")
    # (a queue's replicas need a cluster: the test below)
    assert set(events.KINDS) - set(events.REPLICA_KINDS) - seen == set()
    assert set(schema.KIND_ORDER) - set(schema.REPLICA_KINDS) - seen == set()


def _queue_node(broker, name) -> str:
    out = broker.ctl("list_queues", "name", "node", "synchronised_mirrors",
                     "worker").stdout.splitlines()[2:]
    return next((line.split("\t")[1:] for line in out if line.split("\t")[0] == name),
                [None, "", None])


def _events_of(folders) -> list:
    got = []
    for folder in folders:
        for path in glob.glob(os.path.join(folder, "*.events")):
            header, it = events.read_file(path)
            got += [(header["node"], e) for e in it]
    return got


@pytest.mark.timeout(180)
def test_a_clusters_replicas_write_every_replica_kind__C5(tmp_path):
    """A mirrored queue on three nodes with events full: its mirrors take (replica_enqueued)
    and settle (replica_settled) each message, drop what they held when they (re)join
    (replica_dropped), finish their sync (replica_synced), and one is promoted (promoted) when
    the master's queue worker is killed -9; the promoted mirror had announced every message
    its queue then holds. With events_sync the killed master's `enqueued` events were all
    written before their confirms (the kill comes right after the last one)."""
    from tests.integration.cluster.nodes import Nodes
    nodes = Nodes(tmp_path, 3, "--events", "full", "--events-sync", "write")
    try:
        nodes[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')
        with nodes[0].connection() as c:
            ch = c.channel()
            ch.queue_declare("ha.kinds", durable=True)  # home: node 1
            nodes.wait(lambda: _queue_node(nodes[1], "ha.kinds")[1].count("node") == 2,
                       what="mirrors synchronised")
            master = nodes[0].queue_worker_pids()[int(_queue_node(nodes[0], "ha.kinds")[2])]
            ch.confirm_delivery()
            for i in range(20):
                ch.basic_publish("", "ha.kinds", b"%d" % i, pika.BasicProperties(delivery_mode=2))
                if i == 9:
                    method, _, _ = ch.basic_get("ha.kinds")
                    ch.basic_ack(method.delivery_tag)  # the mirrors forget it: replica_settled
            os.kill(master, signal.SIGKILL)  # (right after the last confirm)
        home = nodes.wait(lambda: (n := _queue_node(nodes[2], "ha.kinds")[0]) not in
                          (None, "leveret@node1") and n, what="a mirror promoted")
        with nodes[2].connection() as c:
            assert c.channel().queue_declare("ha.kinds", passive=True).method.message_count == 19
        time.sleep(0.5)
    finally:
        nodes.stop()
    got = _events_of(tmp_path / f"node{i + 1}" / "data" / "events" for i in range(3))
    assert set(events.REPLICA_KINDS) - {e[0] for _, e in got} == set()
    (promoted,) = [(node, e) for node, e in got if e[0] == "promoted"]
    assert promoted[0] == home and promoted[1][4]["epoch"] == 1
    assert promoted[1][4]["role"] == "mirror" and promoted[1][4]["count"] == 19
    enqueued = {e[1] for _, e in got if e[0] == "enqueued" and e[4]["queue"] == "ha.kinds"}
    held = {e[1] for node, e in got if node == home and e[0] == "replica_enqueued"}
    settled = {e[1] for node, e in got if node == home and e[0] == "replica_settled"}
    assert len(enqueued) == 20 and enqueued <= held and len(settled) == 1
