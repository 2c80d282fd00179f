"""Let it crash: RabbitMQ's crashing_queues_SUITE against a real node, with pika.

A queue (or mirror, or the metadata actor) is crashed through the test-only fault file
(actors/faults.py, `crash`): the exception ends the actor, its supervisor restarts it from disk
within the restart intensity (QueueHost for queues and mirrors, the node and systemd for the
metadata actor), and the clients see what RabbitMQ's would: nacks for the publishes the queue
had not confirmed (C6), basic.cancel for its consumers, a durable queue back with its persistent
messages, a transient one empty, and a queue given up on after repeated crashes reported
crashed (404 "has crashed and failed to restart", management state "crashed") until deleted.
"""
from __future__ import annotations

import base64
import json
import os
import time
import urllib.parse
import urllib.request

import pika
import pytest

from conftest import Broker, free_port

pytestmark = [pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                 reason="crashes Leveret's own actors"),
              pytest.mark.timeout(120)]

PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)


def _plant(path, *crashes) -> None:
    """Rewrite the fault file atomically with these crash entries (none: no crash)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"crash": list(crashes)}))
    os.replace(tmp, path)


@pytest.fixture
def node(tmp_path):
    """A node with the fault file (empty until a test plants a crash) and the management API."""
    fault_file = tmp_path / "faults.json"
    _plant(fault_file)
    (tmp_path / "leveret.toml").write_text("collect_statistics_interval = 300\n")
    http = free_port()
    broker = Broker.start_leveret(tmp_path, "--management-port", str(http), "--config",
                                  str(tmp_path / "leveret.toml"),
                                  env={"LEVERET_FAULT_INJECTION": str(fault_file)})
    broker.http_port, broker.fault_file = http, fault_file
    try:
        yield broker
    finally:
        broker.stop()


def _message_count(broker, name, timeout=15.0) -> int:
    """queue.declare passive's message_count once the queue answers (while it restarts a
    declare may get 404: it closes only that channel, as RabbitMQ's declare racer sees)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with broker.connection() as c:
            try:
                return c.channel().queue_declare(name, passive=True).method.message_count
            except pika.exceptions.ChannelClosedByBroker as e:
                last = e
        time.sleep(0.1)
    raise AssertionError(f"queue {name} did not come back: {last}")


def _queue_state(broker, name) -> str:
    url = (f"http://127.0.0.1:{broker.http_port}/api/queues/%2F/"
           f"{urllib.parse.quote(name, safe='')}")
    req = urllib.request.Request(url, headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())["state"]


def _wait(cond, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _crash_on_publish(broker, name):
    """The queue crashes once, on the next Publish it handles: the publish is nacked (C6),
    the consumer on it cancelled (basic.cancel: pika announces consumer_cancel_notify)."""
    conn = broker.connection()
    cons = conn.channel()
    cancelled = []
    cons.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = cons.basic_consume(name, lambda *a: None, auto_ack=False)
    pub = conn.channel()
    pub.confirm_delivery()
    _plant(broker.fault_file, {"actor": "queue", "vhost": "/", "name": name, "times": 1,
                               "on": "Publish"})
    time.sleep(0.2)  # (each process looks at the file at most every 50 ms)
    with pytest.raises(pika.exceptions.NackError):
        pub.basic_publish("", name, b"crash", PERSISTENT)
    _wait(lambda: conn.process_data_events(0.1) or cancelled, what="basic.cancel")
    assert cancelled == [tag]
    conn.close()


def test_crashing_durable__C6(node):
    """crashing_durable: restarted from disk with its persistent message (1), the transient
    one gone; the crashing publish nacked, the consumer cancelled; the queue serves again."""
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("crashing-q", durable=True)
        ch.basic_publish("", "crashing-q", b"transient", TRANSIENT)
        ch.basic_publish("", "crashing-q", b"durable", PERSISTENT)
    _crash_on_publish(node, "crashing-q")
    assert _message_count(node, "crashing-q") == 1
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "crashing-q", b"after", PERSISTENT)  # acked: it runs again
        method, _, body = ch.basic_get("crashing-q", auto_ack=True)
        assert body == b"durable"
    assert "queue 'crashing-q' in vhost '/' crashed" in node.log_tail(400)


def test_crashing_transient__C6(node):
    """A crashed non-durable queue is restarted too (rabbit_amqqueue_process restarts any
    crashed queue from its record), empty: what it held was in its memory only."""
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("crashing-t", durable=False)
        ch.basic_publish("", "crashing-t", b"transient", TRANSIENT)
        ch.basic_publish("", "crashing-t", b"durable", PERSISTENT)
    _crash_on_publish(node, "crashing-t")
    assert _message_count(node, "crashing-t") == 0
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "crashing-t", b"after", PERSISTENT)
        assert _message_count(node, "crashing-t") == 1


def test_crashing_stream_restarts_from_its_log__C6(node):
    """A stream's actor that crashes is started again from its log (it used to stay down
    until its worker restarted): the crashing publish nacked, what was confirmed still there,
    a consumer reading from the first offset gets it."""
    args = {"x-queue-type": "stream"}
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("crashing-s", durable=True, arguments=args)
        ch.basic_publish("", "crashing-s", b"s1", PERSISTENT)
        ch.basic_publish("", "crashing-s", b"s2", PERSISTENT)
    _plant(node.fault_file, {"actor": "queue", "vhost": "/", "name": "crashing-s", "times": 1,
                             "on": "Publish"})
    time.sleep(0.2)
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "crashing-s", b"crash", PERSISTENT)
    assert _message_count(node, "crashing-s") == 2
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "crashing-s", b"s3", PERSISTENT)
        ch.basic_qos(prefetch_count=10)
        got = []
        ch.basic_consume("crashing-s", lambda _c, m, p, body: got.append(body),
                         arguments={"x-stream-offset": "first"})
        _wait(lambda: c.process_data_events(0.1) or len(got) >= 3, what="3 deliveries")
        assert got == [b"s1", b"s2", b"s3"]


def test_give_up_after_repeated_crashes__C6(node):
    """give_up_after_repeated_crashes: a queue crashing at every restart is given up on after
    max_restarts (5) in restart_period: declare (passive or not) gets 404 "has crashed and
    failed to restart", a publish to it is nacked, the management API says "crashed"; deleted
    and declared again it runs, empty."""
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("give-up-q", durable=True)
        ch.basic_publish("", "give-up-q", b"durable", PERSISTENT)
    _plant(node.fault_file, {"actor": "queue", "vhost": "/", "name": "give-up-q",
                             "times": 1000})  # every message, at every restart
    time.sleep(0.2)
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "give-up-q", b"x", PERSISTENT)
    _wait(lambda: _queue_state(node, "give-up-q") == "crashed", what="state crashed")
    text = "NOT_FOUND - queue 'give-up-q' in vhost '/' has crashed and failed to restart"
    for passive in (True, False):
        with node.connection() as c:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
                c.channel().queue_declare("give-up-q", durable=True, passive=passive)
            assert (e.value.reply_code, e.value.reply_text) == (404, text)
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "give-up-q", b"y", PERSISTENT)
    assert "giving up on it" in node.log_tail(400)
    _plant(node.fault_file)
    time.sleep(0.2)
    with node.connection() as c:
        ch = c.channel()
        ch.queue_delete("give-up-q")
        assert ch.queue_declare("give-up-q", durable=True).method.message_count == 0
    _wait(lambda: _queue_state(node, "give-up-q") == "running", what="state running")
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "give-up-q", b"z", PERSISTENT)
    assert _message_count(node, "give-up-q") == 1  # (the crashed one's index went with it)


def test_metadata_crash_stops_the_node_which_restarts_from_disk(tmp_path):
    """The metadata actor's crash ends the node (exit status 1: systemd restarts it, as an
    Erlang node whose core supervisor gave up), never serving half-applied definitions; the
    node started again has its durable queue and persistent messages."""
    fault_file = tmp_path / "faults.json"
    _plant(fault_file)
    env = {"LEVERET_FAULT_INJECTION": str(fault_file)}
    broker = Broker.start_leveret(tmp_path, env=env)
    try:
        with broker.connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("meta-q", durable=True)
            ch.basic_publish("", "meta-q", b"durable", PERSISTENT)
        _plant(fault_file, {"actor": "metadata", "times": 1, "on": "Rpc"})
        time.sleep(0.2)
        try:
            with broker.connection(socket_timeout=2, stack_timeout=3) as c:
                c.channel().queue_declare("other-q", durable=True)
        except pika.exceptions.AMQPError:
            pass  # (the node may go before it answers)
        assert broker.proc.wait(20) == 1
        assert "the metadata actor crashed: stopping the node" in broker.log_tail(400)
        _plant(fault_file)
        broker = Broker.start_leveret(tmp_path, port=broker.port, env=env)
        assert _message_count(broker, "meta-q") == 1
    finally:
        broker.stop()


def _queue_row(broker, name) -> dict:
    out = broker.ctl("list_queues", "name", "messages", "mirrors",
                     "synchronised_mirrors").stdout.splitlines()[2:]
    for line in out:
        cells = line.split("\t")
        if cells[0] == name:
            return dict(zip(("name", "messages", "mirrors", "synced"), cells))
    return {}


def test_mirror_crash_restarts_it_and_confirms_go_on__C5(tmp_path):
    """A mirror that crashes (on a message from its master) is started again by its queue
    worker: it rejoins its master and syncs; the master's confirm, which waits for every
    mirror (C5), comes once the new mirror has the message (an ack, not a nack: the queue's
    own process did not crash)."""
    from tests.integration.cluster.nodes import Nodes
    fault_file = tmp_path / "faults.json"
    _plant(fault_file)
    nodes = Nodes(tmp_path, 2, env={"LEVERET_FAULT_INJECTION": str(fault_file)})
    try:
        nodes[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')
        with nodes[0].connection() as c:
            c.channel().queue_declare("ha.crash", durable=True)  # home: node 1
        nodes.wait(lambda: "leveret@node2" in _queue_row(nodes[0], "ha.crash").get("synced", ""),
                   what="the mirror on node 2 synchronised")
        _plant(fault_file, {"actor": "mirror", "vhost": "/", "name": "ha.crash", "times": 1,
                            "on": "MirrorPublish"})
        time.sleep(0.3)
        with nodes[0].connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.basic_publish("", "ha.crash", b"m1", PERSISTENT)  # acked once mirrored again
            ch.basic_publish("", "ha.crash", b"m2", PERSISTENT)
        assert "mirror of queue 'ha.crash' in vhost '/' crashed" in nodes[1].log_tail(400)
        nodes.wait(lambda: "leveret@node2" in _queue_row(nodes[0], "ha.crash").get("synced", ""),
                   what="the restarted mirror synchronised")
        assert _queue_row(nodes[1], "ha.crash")["messages"] == "2"
    finally:
        nodes.stop()
