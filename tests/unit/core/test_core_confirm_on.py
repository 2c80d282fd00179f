"""x-confirm-on (seed 003): the publisher's confirm after a consumer's ack, in the queue core
(`ack`) or through the consuming channel (`ack-lite`)."""
from __future__ import annotations

import pytest

from actors import messages as m
from actors.core.queue import QueueCore
from actors.core.queue_settings import parse as queue_settings
from core_fakes import QueueOut

CH1, PUB = "w1#ch/1/1/1", "w1#ch/9/1/3"
ACK, REQUEUE, DISCARD = 0, 1, 2


def mk(mode, args=None, durable=False):
    out = QueueOut()
    a = {"x-confirm-on": mode, **(args or {})}
    return QueueCore("/", "q", queue_settings(a), out.port(), 0, durable=durable, page_bytes=10), out


def pub(q, *seqs, persistent=False):
    q.publish(PUB, [m.PublishItem(s, "x", "rk", b"\x00\x00", persistent, 0, -1) for s in seqs],
              [b"body"] * len(seqs), 0)


def consume(q, no_ack=False):
    q.consume(CH1, "A", no_ack, False, 0, 0, 0)
    q.run(0)


@pytest.mark.parametrize("mode", ["ack", "ack-lite"])
def test_nothing_confirmed_or_stored_on_arrival(mode):
    q, out = mk(mode, durable=True)
    pub(q, 1, 2, persistent=True)
    assert out.of("confirm") == [] and out.of("persist") == [] and q.paging.paged == 0


def test_ack_mode_confirms_on_consumer_ack_and_nacks_on_reject():
    q, out = mk("ack")
    pub(q, 1, 2, 3)
    consume(q)
    q.settle(CH1, ACK, [1], 0)
    q.settle(CH1, REQUEUE, [2], 0)      # requeued: waits
    q.settle(CH1, DISCARD, [3], 0)      # rejected: the publisher hears it is lost
    q.run(0)
    assert out.of("confirm") == [(PUB, [1], True), (PUB, [3], False)]
    q.settle(CH1, ACK, [2], 0)
    q.run(0)
    assert out.of("confirm")[-1] == (PUB, [2], True)


def test_ack_mode_nacks_expired_dropped_purged_and_deleted():
    q, out = mk("ack", {"x-message-ttl": 10})
    pub(q, 1)
    q.tick(100)
    assert out.of("confirm") == [(PUB, [1], False)]
    q, out = mk("ack", {"x-max-length": 1})
    pub(q, 1, 2)
    q.run(0)
    assert out.of("confirm") == [(PUB, [1], False)]    # drop-head
    q, out = mk("ack")
    pub(q, 1, 2)
    q.purge()
    assert out.of("confirm") == [(PUB, [1, 2], False)]
    q, out = mk("ack")
    pub(q, 1, 2)
    consume(q)
    pub(q, 3)
    q.delete(False, False)
    assert sorted(out.of("confirm")[0][1]) == [1, 2, 3] and out.of("confirm")[0][2] is False


def test_no_ack_delivery_and_get_confirm_at_once():
    q, out = mk("ack")
    pub(q, 1, 2)
    consume(q, no_ack=True)
    assert out.of("confirm") == [(PUB, [1, 2], True)]
    q, out = mk("ack")
    pub(q, 5)
    q.get(CH1, True, 0)
    assert out.of("confirm") == [(PUB, [5], True)]


def test_channel_down_requeues_and_the_next_ack_confirms():
    q, out = mk("ack")
    pub(q, 1)
    consume(q)
    q.channel_down(CH1, 0)
    assert out.of("confirm") == []
    q.consume("w1#ch/1/2/2", "B", False, False, 0, 0, 0)
    q.run(0)
    q.settle("w1#ch/1/2/2", ACK, [1], 0)
    q.run(0)
    assert out.of("confirm") == [(PUB, [1], True)]


def test_ack_lite_deliveries_carry_the_publisher_and_the_queue_never_confirms():
    q, out = mk("ack-lite")
    pub(q, 7)
    consume(q)
    [(ch, items, bodies)] = out.of("deliver")
    assert (items[0].publisher, items[0].seq_no) == (PUB, 7)
    q.settle(CH1, ACK, [1], 0)
    q.run(0)
    assert out.of("confirm") == []      # the consuming channel sends it


def test_enqueue_mode_unchanged():
    q, out = mk("enqueue")
    pub(q, 1)
    assert out.of("confirm") == [(PUB, [1], True)]
