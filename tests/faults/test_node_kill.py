"""kill -9 of the whole node: confirmed persistent messages in durable queues come back (C8),
in order, with redelivered=true when they may have been delivered; an acked one only if the kill
came before the flush that writes its ack (then flagged redelivered)."""
from __future__ import annotations

import os

import pika
import pytest

from conftest import Broker

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="kills the Leveret node")

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _restart(broker: Broker, tmp_path) -> Broker:
    return broker.restart(tmp_path, "kill9")


@pytest.mark.parametrize("size", [100, 4095, 4096, 20000], ids=["small", "4095", "4096", "large"])
def test_confirmed_persistent_messages_survive_kill9__C8(tmp_path, size):
    broker = Broker.start_leveret(tmp_path)
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("durable-q", durable=True)
        ch.queue_declare("transient-q", durable=False)
        bodies = [(b"%05d" % i) + os.urandom(size - 5) for i in range(50)]
        for b in bodies:
            ch.basic_publish("", "durable-q", b, PERSISTENT)   # confirmed (pika waits)
        ch.basic_publish("", "durable-q", b"transient", pika.BasicProperties(delivery_mode=1))
        ch.basic_publish("", "transient-q", b"gone", PERSISTENT)
        # two delivered and acked, one delivered and not acked
        for _ in range(2):
            m, _, _ = ch.basic_get("durable-q", auto_ack=False)
            ch.basic_ack(m.delivery_tag)
        held, _, held_body = ch.basic_get("durable-q", auto_ack=False)
        assert held_body == bodies[2]
        conn.close()   # the unacked one goes back to the queue, delivered once
        broker = _restart(broker, tmp_path)
        conn = broker.connection()
        ch = conn.channel()
        got = []
        while True:
            m, _, body = ch.basic_get("durable-q", auto_ack=True)
            if m is None:
                break
            got.append((body, m.redelivered))
        # every confirmed message not acked comes back, in order (C8). An ack is written with
        # the store's next flush (as RabbitMQ's queue index journal holds acks): a kill -9
        # right after it may bring an acked message back, flagged redelivered (A4); never lost
        back = len(bodies) - len(got)
        assert back in (0, 1, 2) and [b for b, _ in got] == bodies[back:]
        # after kill -9 a deliver record may be missing: every recovered message is marked as
        # possibly delivered (A4); the ones that were delivered certainly are
        assert all(redelivered is True for _, redelivered in got[:3 - back])
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as ei:
            conn.channel().queue_declare("transient-q", passive=True)
        assert ei.value.reply_code == 404                  # transient queue: gone
        conn.close()
    finally:
        broker.stop()


def test_acked_messages_do_not_come_back_after_kill9__C8(tmp_path):
    broker = Broker.start_leveret(tmp_path)
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q", durable=True)
        for i in range(200):
            ch.basic_publish("", "q", b"%d" % i, PERSISTENT)
        acked = 0
        while acked < 150:
            m, _, _ = ch.basic_get("q", auto_ack=False)
            ch.basic_ack(m.delivery_tag)
            acked += 1
        # a confirmed publish after the acks: its sync covers the ack records before it
        ch.basic_publish("", "q", b"last", PERSISTENT)
        broker = _restart(broker, tmp_path)
        conn = broker.connection()
        ch = conn.channel()
        ok = ch.queue_declare("q", durable=True, passive=True)
        assert ok.method.message_count == 51
        m, _, body = ch.basic_get("q", auto_ack=True)
        assert body == b"150"
        conn.close()
    finally:
        broker.stop()
