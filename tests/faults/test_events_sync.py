"""events_sync (docs/events.md, "events_sync"): with it on, a publisher confirm leaves the node
only after every process that wrote an event about the message wrote it to its file, so a
kill -9 of the whole node right after the confirms loses none of the confirmed messages'
events (without it, up to the writer's last 200 ms go: docs/events.md, "Crash behaviour").
The setting shows in `leveretctl status` and Prometheus."""
from __future__ import annotations

import os
import subprocess
import threading
import urllib.request

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO, Broker, free_port

from actors import events

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="kills the Leveret node")


def _metrics(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_confirmed_messages_events_survive_kill9_with_events_sync__C8(tmp_path):
    metrics_port = free_port()
    broker = Broker.start_leveret(tmp_path, "--events", "full", "--events-sync", "write",
                                  "--conn-workers", "1", "--queue-workers", "1",
                                  "--prometheus-port", str(metrics_port))
    try:
        status = broker.ctl("status").stdout
        assert "Sync before confirms (events_sync): write" in status, status
        assert _metrics(metrics_port)[("leveret_events_sync", (("mode", "write"),))] == 1
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("sync-q", durable=True)
        ch.queue_declare("sync-t")
        for i in range(40):  # pika waits for each confirm
            ch.basic_publish("", "sync-q" if i % 2 else "sync-t", b"x%d" % i,
                             pika.BasicProperties(delivery_mode=2, message_id=f"m{i}"))
        broker.kill9()  # the node and its workers, at once after the last confirm
    finally:
        broker.stop()
    by_msg: dict = {}
    names = {}
    for path in (broker.data_dir / "events").glob("*.events"):
        _, evs = events.read_file(str(path))
        for e in evs:
            if e[1] is not None:
                by_msg.setdefault(e[1], set()).add(e[0])
                if e[0] == "publish_received":
                    names[e[1]] = e[4]["message_id"]
    assert sorted(names.values(), key=lambda n: int(n[1:])) == [f"m{i}" for i in range(40)]
    for mid, name in names.items():
        must = {"publish_received", "routed", "enqueued", "confirmed"}
        if int(name[1:]) % 2:
            must |= {"stored", "synced"}  # (persistent in a durable queue)
        assert must <= by_msg[mid], (name, sorted(by_msg[mid]))


def test_events_sync_is_checked_at_start(tmp_path):
    server = REPO / ".venv" / "bin" / "leveret-server"
    res = subprocess.run([str(server), "--data-dir", str(tmp_path / "data"), "--port", "1",
                          "--events", "full", "--events-sync", "always"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert "events_sync must be one of off, write, fsync, not 'always'" in res.stderr


def test_an_ack_a_confirm_rests_on_is_written_before_the_confirm__C5(tmp_path):
    """x-confirm-on=ack: the confirm follows the consumer's ack, which another connection
    worker logged; with events_sync that worker's `delivered` and `acked` are in its file
    before the ack reaches the queue, so a kill -9 right after the confirm keeps them."""
    broker = Broker.start_leveret(tmp_path, "--events", "full", "--events-sync", "write",
                                  "--conn-workers", "2", "--queue-workers", "1")
    done = threading.Event()

    def consume():
        c = broker.connection()
        ch = c.channel()
        ch.basic_consume("ack-q", lambda ch, m, p, b: ch.basic_ack(m.delivery_tag))
        try:
            while not done.is_set():
                c.process_data_events(0.05)
        except pika.exceptions.AMQPError:
            pass  # (the node was killed under it)

    try:
        pub = broker.connection()  # (the workers take connections in turn: another one)
        ch = pub.channel()
        ch.queue_declare("ack-q", arguments={"x-confirm-on": "ack"})
        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        ch.confirm_delivery()
        for i in range(10):  # each confirmed once the consumer acked it
            ch.basic_publish("", "ack-q", b"x", pika.BasicProperties(message_id=f"a{i}"))
        broker.kill9()
        done.set()
        consumer.join(5)
    finally:
        done.set()
        broker.stop()
    by_msg: dict = {}
    names = {}
    for path in (broker.data_dir / "events").glob("*.events"):
        header, evs = events.read_file(str(path))
        for e in evs:
            if e[1] is not None:
                by_msg.setdefault(e[1], set()).add((e[0], header["process"]))
                if e[0] == "publish_received":
                    names[e[1]] = e[4]["message_id"]
    assert sorted(names.values()) == [f"a{i}" for i in range(10)]
    for mid in names:
        kinds = {k for k, _ in by_msg[mid]}
        assert {"delivered", "acked", "confirmed"} <= kinds, (names[mid], by_msg[mid])
        # (the ack and the confirm were written by two connection workers)
        assert {p for k, p in by_msg[mid] if k == "acked"} != \
            {p for k, p in by_msg[mid] if k == "confirmed"}
