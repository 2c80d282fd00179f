"""Every queue type pages (issue 12 item 1, R1), as RabbitMQ's classic queues v2: priority,
length-limited (drop-head with a dead-letter queue, reject-publish, max-length-bytes) and
x-confirm-on queues take far more than queue_page_bytes without stopping their publisher,
come back after a restart where durable, and drain in order. A node of its own with a tiny
page size, so a thousand messages page many times."""
from __future__ import annotations

import os

import pika
import pytest
from pika.exceptions import NackError

from amqp_helpers import wait_until
from conftest import Broker
from test_confirm_on import Publisher

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="needs Leveret's paging configuration")

N = 1500
PAD = b"." * 994  # 1,000-byte bodies: 1,500 of them are 45 times queue_page_bytes


def _paging_node(tmp_path):
    cfg = tmp_path / "leveret.toml"
    cfg.write_text("queue_page_bytes = 32768\nqueue_page_size = 50\n")
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg))
    yield broker, tmp_path, cfg
    broker.stop()


@pytest.fixture
def node(tmp_path):
    """A paging node of the test's own, for a test that restarts it."""
    yield from _paging_node(tmp_path)


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory):
    """The module's paging node, for the tests that do not restart it (each its own queue: a
    node's start costs more than most of them)."""
    yield from _paging_node(tmp_path_factory.mktemp("paging"))


def _restart(broker, tmp_path, cfg):
    broker.stop()
    return Broker.start_leveret(tmp_path, "--config", str(cfg), port=broker.port)


def _drain(ch, queue, prefetch=50):
    ch.basic_qos(prefetch_count=prefetch)
    got = []
    for method, props, body in ch.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        got.append((int(body[:6]), props.priority or 0))
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    return got


def _count(ch, queue, durable=False):
    return ch.queue_declare(queue, durable=durable, passive=True).method.message_count


def test_a_durable_priority_queue_pages_each_priority_and_keeps_them_across_a_restart__R1(
        node):
    broker, tmp_path, cfg = node
    conn = broker.connection()
    ch = conn.channel()  # no confirms: the count below comes after every publish (same channel)
    ch.queue_declare("prio", durable=True, arguments={"x-max-priority": 5})
    prios = [(0, 5, 2, 0)[i % 4] for i in range(N)]
    for i, p in enumerate(prios):
        ch.basic_publish("", "prio", b"%06d" % i + PAD,
                         pika.BasicProperties(delivery_mode=2, priority=p))
    assert _count(ch, "prio", True) == N
    conn.close()
    broker = _restart(broker, tmp_path, cfg)
    try:
        conn = broker.connection()
        ch = conn.channel()
        assert _count(ch, "prio", True) == N
        got = _drain(ch, "prio")
        want = [(i, p) for prio in (5, 2, 0) for i, p in enumerate(prios) if p == prio]
        assert got == want  # by priority, in publishing order within each, paged or not
        conn.close()
    finally:
        broker.stop()


def test_a_transient_priority_queue_pages_and_a_late_high_priority_goes_first__R1(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("tprio", arguments={"x-max-priority": 9})
    for i in range(N):
        ch.basic_publish("", "tprio", b"%06d" % i + PAD, pika.BasicProperties(priority=1))
    ch.basic_publish("", "tprio", b"%06d" % N + PAD, pika.BasicProperties(priority=9))
    assert _count(ch, "tprio") == N + 1
    got = _drain(ch, "tprio")
    assert got == [(N, 9)] + [(i, 1) for i in range(N)]
    conn.close()


def test_drop_head_counts_paged_messages_and_dead_letters_them_in_order__R1(node):
    broker, tmp_path, cfg = node
    conn = broker.connection()
    ch = conn.channel()  # no confirms: a persistent publish waited for a sync each
    ch.queue_declare("dead", durable=True)
    ch.queue_declare("capped", durable=True, arguments={
        "x-max-length": 1000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    for i in range(N):
        ch.basic_publish("", "capped", b"%06d" % i + PAD, pika.BasicProperties(delivery_mode=2))
    assert _count(ch, "capped", True) == 1000  # exact at once: a paged head is owed
    wait_until(lambda: _count(ch, "dead", True) == N - 1000, timeout=30,
               message="the dropped heads dead-lettered")
    conn.close()
    broker = _restart(broker, tmp_path, cfg)
    try:
        conn = broker.connection()
        ch = conn.channel()
        assert [i for i, _ in _drain(ch, "capped")] == list(range(N - 1000, N))
        assert [i for i, _ in _drain(ch, "dead")] == list(range(N - 1000))
        conn.close()
    finally:
        broker.stop()


def test_reject_publish_counts_paged_messages__C6(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("full", arguments={"x-max-length": 1000, "x-overflow": "reject-publish"})
    nacked = []
    for i in range(1500):
        try:
            ch.basic_publish("", "full", b"%06d" % i + PAD)
        except NackError:
            nacked.append(i)
    assert nacked == list(range(1000, 1500))
    assert _count(ch, "full") == 1000
    assert [i for i, _ in _drain(ch, "full")] == list(range(1000))
    conn.close()


def test_max_length_bytes_counts_paged_bytes_and_drops_the_paged_head(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("bytes", arguments={"x-max-length-bytes": 500 * 1000})
    for i in range(N):
        ch.basic_publish("", "bytes", b"%06d" % i + PAD)
    wait_until(lambda: _count(ch, "bytes") == 500, timeout=30,
               message="the paged heads dropped down to x-max-length-bytes")
    assert [i for i, _ in _drain(ch, "bytes")] == list(range(N - 500, N))
    conn.close()


def test_an_ack_mode_queue_pages_and_confirms_each_message_on_its_ack__C5(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    ch.queue_declare("late", arguments={"x-confirm-on": "ack"})
    pub = Publisher(broker)
    try:
        tags = [pub.publish("late", b"%06d" % i + PAD) for i in range(N)]
        wait_until(lambda: _count(ch, "late") == N, timeout=30, message=f"all {N} queued")
        pub.settle(0.3)
        assert not pub.acked and not pub.nacked  # paged, still waiting for their consumer
        got = _drain(ch, "late")
        assert [i for i, _ in got] == list(range(N))
        pub.wait(tags, timeout=30)
        assert not pub.nacked
    finally:
        pub.close()
        conn.close()
