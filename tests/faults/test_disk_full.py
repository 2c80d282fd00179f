"""A full message store (issue 3, "Durable storage"): a node whose LMDB map (storage_map_size)
is small stands for a full disk.

What the client must see: publishes the store cannot take are refused with basic.nack (C6: the
queue cannot take responsibility), or the connection is blocked; everything confirmed before is
still there, byte for byte; once consumers ack and space returns, publishes are confirmed again;
the node log says plainly that the store is full. Nothing here is timed.

Sizes (1500-byte bodies, measured at 6181018): a node starts and declares a durable queue with a
map as small as 16 KiB (it refuses the first message); 64 KiB holds 2 messages, 128 KiB about 30
(LMDB itself fills up, MapFullError, before the disk alarm's 60% threshold), 512 KiB about 150
(refused by the disk alarm). Both refusal paths are tested; each fills in well under a second.
"""
from __future__ import annotations

import os
import re

import pika
import pytest
from pika.exceptions import ConnectionBlockedTimeout, NackError

from amqp_helpers import safe_close
from conftest import Broker

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="starts Leveret nodes with a small store")

MAP_SIZE = 512 * 1024
SMALLEST = 128 * 1024   # the smallest map that holds enough 1500-byte messages to say something
BODY_SIZE = 1500
FULL_LINE = re.compile(r"(store|storage|disk)\b.*\bfull|\bfull\b.*(store|storage|disk)", re.I)


def start_small(tmp_path, port=None, map_size: int = MAP_SIZE) -> Broker:
    cfg = tmp_path / "leveret.toml"
    if not cfg.exists():
        cfg.write_text(f"[storage]\nstorage_map_size = {map_size}\n")
    return Broker.start_leveret(tmp_path, "--config", str(cfg), port=port)


def body(n: int) -> bytes:
    head = b"msg-%06d:" % n
    return head + bytes((n + i) % 251 for i in range(BODY_SIZE - len(head)))


def fill(broker: Broker, queue: str, limit: int = 5000) -> tuple[list[int], str]:
    """Publish persistent messages with confirms until the store refuses one. Returns (the ids
    confirmed, in order; how the refusal showed: "nack" or "blocked")."""
    conn = broker.connection(blocked_connection_timeout=10)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        confirmed = []
        for n in range(limit):
            try:
                ch.basic_publish("", queue, body(n), pika.BasicProperties(delivery_mode=2))
            except NackError:
                # the refused message is not in the queue: every other one is
                assert ch.queue_declare(queue, passive=True).method.message_count == \
                    len(confirmed)
                return confirmed, "nack"
            except ConnectionBlockedTimeout:
                return confirmed, "blocked"
            confirmed.append(n)
        raise AssertionError(f"{limit} messages of {BODY_SIZE} bytes fit in the store")
    finally:
        safe_close(conn)


def consume_all(ch, queue: str, ack: bool = True) -> list[bytes]:
    out = []
    while True:
        m, _, b = ch.basic_get(queue, auto_ack=False)
        if m is None:
            return out
        out.append(b)
        if ack:
            ch.basic_ack(m.delivery_tag)


# 128 KiB: LMDB itself fills up (MapFullError) before the disk alarm's threshold; 512 KiB: the
# disk alarm refuses publishes while there is still room for acks
@pytest.mark.parametrize("map_size", [SMALLEST, MAP_SIZE], ids=["128KiB", "512KiB"])
def test_full_store_refuses_publishes_and_accepts_again_once_space_returns__C6_C8(tmp_path,
                                                                                   map_size):
    broker = start_small(tmp_path, map_size=map_size)
    try:
        confirmed, how = fill(broker, "full-q")
        assert len(confirmed) >= 20, "MAP_SIZE too small to say anything"
        log = broker.log_path.read_text(errors="replace")
        assert any(FULL_LINE.search(line) for line in log.splitlines()), \
            f"no log line about the full store:\n{broker.log_tail(20)}"
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        # still full: refused again (not silently dropped, not confirmed)
        if how == "nack":
            with pytest.raises(NackError):
                ch.basic_publish("", "full-q", body(99999), pika.BasicProperties(delivery_mode=2))
        # every confirmed message is there, in order, byte for byte; consumed and acked
        got = consume_all(ch, "full-q")
        assert got == [body(n) for n in confirmed]
        # space returned: persistent publishes are confirmed again, as many as the store took
        # (this failed when the map filled completely: LMDB is copy-on-write, the ack records
        # found no page, acking freed nothing)
        again = [100000 + n for n in range(len(confirmed))]
        for n in again:
            ch.basic_publish("", "full-q", body(n), pika.BasicProperties(delivery_mode=2))
        assert consume_all(ch, "full-q") == [body(n) for n in again]
        safe_close(conn)
        assert broker.alive()
    finally:
        broker.stop()


def test_confirmed_messages_of_a_full_store_survive_kill9__C8(tmp_path):
    broker = start_small(tmp_path)
    try:
        confirmed, _ = fill(broker, "full-q")
        broker.kill9()
        broker = start_small(tmp_path, port=broker.port)
        conn = broker.connection()
        got = consume_all(conn.channel(), "full-q")
        assert got == [body(n) for n in confirmed]
        safe_close(conn)
    finally:
        broker.stop()


@pytest.mark.parametrize("map_size", [SMALLEST, MAP_SIZE], ids=["128KiB", "512KiB"])
def test_acks_made_while_the_store_is_full_are_kept__A7(tmp_path, map_size):
    """Acks sent while the store refuses publishes are written (they once failed with the
    publishes, were dropped, and every acked message came back after the restart)."""
    broker = start_small(tmp_path, map_size=map_size)
    try:
        confirmed, _ = fill(broker, "full-q")
        conn = broker.connection()
        ch = conn.channel()
        assert len(consume_all(ch, "full-q")) == len(confirmed)   # each one acked
        assert ch.queue_declare("full-q", passive=True).method.message_count == 0
        safe_close(conn)
        broker.stop()       # a clean stop: the queue handles every ack it was sent
        broker = start_small(tmp_path, port=broker.port, map_size=map_size)
        conn = broker.connection()
        back = consume_all(conn.channel(), "full-q")
        safe_close(conn)
        assert back == [], f"{len(back)} acked messages came back: {[b[:10] for b in back[:5]]}"
    finally:
        broker.stop()
