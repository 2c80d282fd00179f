"""A durable queue past queue_page_bytes keeps new messages in its index only and reads them
back as it drains (issue 3, deep queues): order, counts, basic.get, purge and kill -9 recovery
across the paged part. A node of its own with a tiny page size, so a thousand messages
page many times."""
from __future__ import annotations

import os

import pika
import pytest

from conftest import Broker
from store_check import verify_store

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="needs Leveret's paging configuration")

N = 1000  # (about 15 pages of queue_page_bytes: every crossing is exercised many times)


def _paging_node(tmp_path):
    cfg = tmp_path / "leveret.toml"
    cfg.write_text("queue_page_bytes = 65536\nqueue_page_size = 100\n")
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg))
    yield broker, tmp_path, cfg
    broker.stop()


@pytest.fixture
def node(tmp_path):
    """A paging node of the test's own, for a test that kills it."""
    yield from _paging_node(tmp_path)


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory):
    """The module's paging node, for the tests that neither kill nor restart it (each its own
    queue: a node's start costs more than most of them)."""
    yield from _paging_node(tmp_path_factory.mktemp("paging"))


def _fill(ch, queue, n, transient_every=0):
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True)
    for i in range(n):
        mode = 1 if transient_every and i % transient_every == 0 else 2
        ch.basic_publish("", queue, b"%06d" % i + b"." * 994, pika.BasicProperties(delivery_mode=mode))


def _drain(ch, queue):
    got = []
    for method, _, body in ch.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        got.append((int(body[:6]), method.redelivered))
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    return got


def test_paged_queue_delivers_everything_in_order(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    _fill(ch, "deep", N)
    assert ch.queue_declare("deep", durable=True, passive=True).method.message_count == N
    ch.basic_qos(prefetch_count=50)
    got = _drain(ch, "deep")
    assert [i for i, _ in got] == list(range(N))
    assert ch.queue_declare("deep", durable=True, passive=True).method.message_count == 0
    conn.close()


def test_basic_get_crosses_page_boundaries(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    _fill(ch, "deep-get", 400)
    got = []
    for _ in range(400):
        method, _, body = ch.basic_get("deep-get", auto_ack=True)
        got.append(int(body[:6]))
        assert method.message_count == 400 - len(got)   # what is left after this one
    assert got == list(range(400))
    assert ch.basic_get("deep-get", auto_ack=True) == (None, None, None)
    conn.close()


def test_purge_reaches_the_paged_part(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    _fill(ch, "deep-purge", 500)
    assert ch.queue_purge("deep-purge").method.message_count == 500
    ch.basic_publish("", "deep-purge", b"%06d" % 7, pika.BasicProperties(delivery_mode=2))
    assert [i for i, _ in _drain(ch, "deep-purge")] == [7]
    conn.close()


def test_paged_queue_survives_kill9_without_its_transient_messages__C8(node):
    broker, tmp_path, cfg = node
    conn = broker.connection()
    ch = conn.channel()
    _fill(ch, "deep-crash", N, transient_every=5)
    ch.basic_qos(prefetch_count=10)
    # take ten, ack five: the other five were delivered and come back redelivered
    for method, _, body in ch.consume("deep-crash"):
        if int(body[:6]) >= 16:
            break
        if int(body[:6]) < 8:
            ch.basic_ack(method.delivery_tag)
    broker.kill9()
    # the store is consistent as the kill left it, chunk live counts included (the publisher
    # waits for each confirm, so a flush holds few bodies: those under 2 KiB in all stay in
    # their records, chunks.INLINE_BELOW)
    verify_store(tmp_path / "data")
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg), port=broker.port)
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        got = _drain(ch, "deep-crash")
        want = [i for i in range(N) if i % 5 and i >= 8]
        # an ack is asynchronous: one the node had not handled when it was killed only means a
        # redelivery (A4), never a loss; transient messages never come back (C8)
        early = [(i, r) for i, r in got if i < 8]
        assert all(i % 5 and r for i, r in early), early
        assert [i for i, _ in got if i >= 8] == want
        delivered_before = [r for i, r in got if i < 16]
        assert delivered_before and all(delivered_before)   # A4: they come back redelivered
        conn.close()
    finally:
        broker.stop()
    # the transient entries dropped at the page-in and the acks took their chunks' counts down
    # with them: no chunk is left without the live entries it counts
    verify_store(tmp_path / "data")


def test_a_mixed_tail_behind_the_paged_part_is_confirmed_and_survives_kill9__R1_C8(tmp_path):
    """Messages that come while a durable queue has a paged part but memory is low again wait
    in memory behind it (the lane's tail); the persistent ones are written as they come. A tail
    of transient and persistent ones used to break the backing queue once memory filled again
    (the tail spilled its transient ones behind persistent ones already in the index, out of
    seq_id order): the publisher's confirms stopped for good. Every publish is confirmed,
    the queue delivers in order, and after kill -9 the persistent ones come back, the transient
    ones do not. (Pages smaller than memory's limit: what a page brings back leaves room.)"""
    cfg = tmp_path / "leveret.toml"
    cfg.write_text("queue_page_bytes = 65536\nqueue_page_size = 10\n")
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg))
    try:
        conn = broker.connection()
        ch = conn.channel()
        _fill(ch, "tail", 1000)                  # 15 times queue_page_bytes: paged
        for i in range(150):                     # memory low: pages of 10 read back
            method, _, body = ch.basic_get("tail")
            assert int(body[:6]) == i
            ch.basic_ack(method.delivery_tag)
        for i in range(1000, 1200):              # the tail, then memory full: the tail spills
            ch.basic_publish("", "tail", b"%06d" % i + b"." * 994,
                             pika.BasicProperties(delivery_mode=1 + i % 2))
        assert ch.queue_declare("tail", durable=True, passive=True).method.message_count == 1050
        broker.kill9()
        verify_store(tmp_path / "data")
        broker = Broker.start_leveret(tmp_path, "--config", str(cfg), port=broker.port)
        conn = broker.connection()
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        got = [i for i, _ in _drain(ch, "tail")]
        assert got == list(range(150, 1000)) + [i for i in range(1000, 1200) if i % 2]
        conn.close()
    finally:
        broker.stop()
    verify_store(tmp_path / "data")


def _fill_transient(ch, queue, n):
    ch.confirm_delivery()
    ch.queue_declare(queue)  # not durable
    for i in range(n):
        ch.basic_publish("", queue, b"%06d" % i + b"." * 994)


def test_a_transient_queue_pages_and_delivers_everything_in_order__R1(shared_node):
    """R1: a queue without consumers pages instead of blocking its publisher; classic queues
    v2 page transient messages too (written, not synced)."""
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    _fill_transient(ch, "tdeep", N)
    assert ch.queue_declare("tdeep", passive=True).method.message_count == N
    got = []
    for _ in range(200):  # basic.get across the first page boundaries
        got.append(int(ch.basic_get("tdeep", auto_ack=True)[2][:6]))
    ch.basic_qos(prefetch_count=50)
    got += [i for i, _ in _drain(ch, "tdeep")]
    assert got == list(range(N))
    conn.close()


def test_persistent_messages_paged_out_of_a_transient_queue_all_come_back__R1(shared_node):
    """A non-durable queue pages persistent messages like transient ones (written, not
    synced); they were counted as paged but never written, so the drain came back short."""
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("tpers")
    for i in range(N):
        ch.basic_publish("", "tpers", b"%06d" % i + b"." * 994,
                         pika.BasicProperties(delivery_mode=2))
    assert ch.queue_declare("tpers", passive=True).method.message_count == N
    ch.basic_qos(prefetch_count=50)
    assert [i for i, _ in _drain(ch, "tpers")] == list(range(N))
    conn.close()


def test_a_deleted_paged_transient_queue_comes_back_empty(shared_node):
    broker, _, _ = shared_node
    conn = broker.connection()
    ch = conn.channel()
    _fill_transient(ch, "tagain", 500)
    ch.queue_delete("tagain")
    _fill_transient(ch, "tagain", 3)
    assert ch.queue_declare("tagain", passive=True).method.message_count == 3
    assert [i for i, _ in _drain(ch, "tagain")] == [0, 1, 2]
    ch.queue_delete("tagain")
    conn.close()


def test_a_paged_transient_queue_is_gone_after_a_restart(node):
    broker, tmp_path, cfg = node
    conn = broker.connection()
    ch = conn.channel()
    _fill_transient(ch, "tgone", 500)
    ch.queue_declare("tkept", durable=True)
    conn.close()
    broker.kill9()
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg), port=broker.port)
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.queue_declare("tgone")  # a new, empty queue: nothing of the old one comes back
        assert ch.queue_declare("tgone", passive=True).method.message_count == 0
        assert ch.basic_get("tgone", auto_ack=True) == (None, None, None)
        conn.close()
    finally:
        broker.stop()
