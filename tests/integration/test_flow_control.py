"""credit_flow between channels and queues: a publisher a queue stops reading from starts again
when that queue is deleted (RabbitMQ's channel forgets a dead queue's credit), instead of
staying blocked with its socket unread for good. Behaviour: C2 (a publish to a queue that is
gone is confirmed, not lost in a stalled connection)."""

from __future__ import annotations

import threading
import time

import pika

from conftest import Broker


def test_a_publisher_held_by_a_deleted_queue_is_read_again__C2(tmp_path):
    cfg = tmp_path / "leveret.toml"
    # a queue withholds credit past 64 KB of backlog: the publisher blocks after a few dozen
    cfg.write_text("queue_backlog_bytes = 65536\ncredit_initial = 20\ncredit_more = 10\n")
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg), "--queue-workers", "1")
    try:
        admin = broker.connection()
        ach = admin.channel()
        ach.queue_declare("held")
        pub = broker.connection()
        pch = pub.channel()
        for _ in range(400):  # no consumer: the queue stops granting credit, the reader stops
            pch.basic_publish("", "held", b"x" * 2048)
        pub.process_data_events(0.5)
        deadline = time.monotonic() + 10
        while ach.queue_declare("held", passive=True).method.message_count < 30:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ach.queue_delete("held")
        # the publisher's connection is read again: a synchronous method is answered
        t0 = time.monotonic()
        q = pch.queue_declare("", exclusive=True).method.queue
        assert time.monotonic() - t0 < 10
        pch.basic_publish("", q, b"after")
        assert pch.basic_get(q, auto_ack=True)[2] == b"after"
        pub.close()
        admin.close()
    finally:
        broker.stop()


def test_credit_counts_bytes_a_publisher_of_large_messages_is_held_early__C2(tmp_path):
    """Credit in messages alone (400) would let a publisher park 400 large bodies in a queue's
    mailbox; the byte credit (64 KB here) holds it after a handful, and nothing is lost."""
    cfg = tmp_path / "leveret.toml"
    cfg.write_text("queue_backlog_bytes = 65536\ncredit_initial = 10000\ncredit_more = 5000\n"
                   "credit_initial_bytes = 65536\ncredit_more_bytes = 32768\n")
    broker = Broker.start_leveret(tmp_path, "--config", str(cfg), "--queue-workers", "1")
    try:
        admin = broker.connection()
        ach = admin.channel()
        ach.queue_declare("big")
        body = b"x" * 16384
        published = threading.Event()

        def publish():  # blocks in pika while the broker does not read its socket
            pub = broker.connection()
            pch = pub.channel()
            for _ in range(200):
                pch.basic_publish("", "big", body)
            pub.close()
            published.set()

        threading.Thread(target=publish, daemon=True).start()
        most = 0
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # what the queue takes while the publisher pushes
            most = max(most, ach.queue_declare("big", passive=True).method.message_count)
            time.sleep(0.05)
        # backlog mark (4 bodies) + the byte credit paid before it (4) + one bump (2) + the one
        # body that may overdraw it: far from the 200 the message credit alone allows
        assert 0 < most <= 12 and not published.is_set()
        got = 0
        for _method, _props, b in ach.consume("big", auto_ack=True, inactivity_timeout=10):
            assert b == body
            got += 1
            if got == 200:
                break
        assert got == 200 and published.wait(10)
        admin.close()
    finally:
        broker.stop()
