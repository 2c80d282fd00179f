"""Kill -9 of one queue worker (issue 2, ARCHITECTURE "Processes of one node", behaviour C6).

The node must restart it; publishers whose unconfirmed messages were routed to its queues get
basic.nack for them; consumers' channels stay open (their consumers are cancelled with
basic.cancel, as RabbitMQ does when a queue process dies); the connection workers keep serving
the queues of the other queue worker.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pika
import pytest

from conftest import REPO, Broker, _probe, free_port

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="kills a Leveret worker process")


def start_node(tmp_path: Path, *extra: str) -> Broker:
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(REPO / ".venv/bin/leveret-server"), "--port", str(port),
                                 "--data-dir", str(data), "--management-port", "0", "--prometheus-port", "0", *extra],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    broker = Broker("127.0.0.1", port, data_dir=data, proc=proc, log_path=log_path)
    deadline = time.monotonic() + 30
    while not _probe("127.0.0.1", port):
        assert proc.poll() is None, broker.log_tail()
        assert time.monotonic() < deadline, broker.log_tail()
        time.sleep(0.1)
    return broker


def queue_worker_of(broker: Broker, name: str) -> int:
    out = broker.ctl("list_queues").stdout
    for q in json.loads(out[out.index("["):]):
        if q["name"] == name:
            return q["worker"]
    raise AssertionError(f"queue {name} not listed")


def test_kill_queue_worker_nacks_unconfirmed_and_restarts__C6(tmp_path):
    broker = start_node(tmp_path, "--queue-workers", "2")
    try:
        conn = broker.connection()
        ch = conn.channel()
        # two queues, placed on different queue workers (least-loaded placement)
        ch.queue_declare("victim")
        ch.queue_declare("survivor")
        w_victim = queue_worker_of(broker, "victim")
        w_survivor = queue_worker_of(broker, "survivor")
        assert w_victim != w_survivor
        consumer_conn = broker.connection()
        cch = consumer_conn.channel()
        cancelled = []
        cch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        cch.basic_consume("victim", lambda *a: None, auto_ack=False, consumer_tag="c-victim")

        # a raw confirm-mode publisher that does not wait, so confirms are outstanding at the kill
        pub = broker.connection()
        # (BlockingChannel.confirm_delivery would not do: its one-shot result raises inside pika
        # when two confirm frames arrive between blocking calls, as they may here.)
        pch = pub.channel()
        impl = pch._impl
        acks, nacks = [], []

        def on_confirm(frame):
            m = frame.method
            (acks if isinstance(m, pika.spec.Basic.Ack) else nacks).append((m.delivery_tag,
                                                                            m.multiple))
        selected = []
        impl.add_on_return_callback(lambda *a: None)
        impl.confirm_delivery(on_confirm, callback=selected.append)
        deadline = time.monotonic() + 5
        while not selected and time.monotonic() < deadline:
            pub.process_data_events(0.1)
        assert selected, "no confirm.select-ok"

        victim_pid = broker.queue_worker_pids()[w_victim]
        os.kill(victim_pid, signal.SIGKILL)
        for _ in range(200):
            impl.basic_publish("", "victim", b"x" * 100)
        deadline = time.monotonic() + 15
        while len(acks) + len(nacks) < 1 and time.monotonic() < deadline:
            pub.process_data_events(0.1)
        # the node restarts the worker
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            pids = broker.queue_worker_pids()
            if pids.get(w_victim) not in (None, victim_pid):
                break
            time.sleep(0.1)
        assert broker.queue_worker_pids().get(w_victim) not in (None, victim_pid), \
            broker.log_tail()
        # every publish is answered: nacks for what the dead worker never confirmed
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            pub.process_data_events(0.1)
            answered = _expand(acks, nacks)
            if len(answered) >= 200:
                break
        assert nacks, "no basic.nack after the queue worker died"
        assert _expand(acks, nacks) == set(range(1, 201)), (acks, nacks)
        # the consumer's channel stays open and was told its consumer is gone
        deadline = time.monotonic() + 5
        while not cancelled and time.monotonic() < deadline:
            consumer_conn.process_data_events(0.1)
        assert cancelled == ["c-victim"]
        assert cch.is_open
        # the other queue worker's queue keeps working through the same connection worker
        ch.basic_publish("", "survivor", b"still here")
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = ch.basic_get("survivor", auto_ack=True)[2]
        assert got == b"still here"
        # and the restarted queue is served again
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                ch2 = conn.channel()
                ch2.basic_publish("", "victim", b"after restart")
                body = None
                for _ in range(50):
                    body = ch2.basic_get("victim", auto_ack=True)[2]
                    if body == b"after restart":
                        break
                    time.sleep(0.05)
                if body == b"after restart":
                    break
            except pika.exceptions.ChannelClosedByBroker:
                time.sleep(0.2)
        assert body == b"after restart"
        for c in (conn, consumer_conn, pub):
            c.close()
    finally:
        broker.stop()


def _expand(acks, nacks):
    """The delivery tags answered by (tag, multiple) confirms; multiple=true covers every tag up
    to its own that no earlier confirm answered."""
    answered: set[int] = set()
    for tag, multiple in sorted(acks + nacks):
        answered.update(range(1, tag + 1) if multiple else (tag,))
    return answered
