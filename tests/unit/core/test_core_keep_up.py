"""Consumers that keep up get the queue first (actors/core/keep_up.py): past its memory budget
a queue whose consumers take at least a quarter of what comes in holds its publishers' credit
instead of paging; slow or stalled consumers, or none, leave the publishers to the paging."""
from __future__ import annotations

from actors.core.keep_up import KeepUp
from actors.core.queue import QueueCore
from actors.core.queue_settings import parse as queue_settings
from actors.messages import PublishItem
from core_fakes import QueueOut

CH1, PUB = "w1#ch/1/1/1", "w1#ch/9/1/3"


def test_verdict_of_a_window():
    k = KeepUp(window=1000, ratio=0.5)
    k.roll(1)
    k.ins, k.outs = 100, 50
    k.roll(500)
    assert not k.on  # the window is not over yet
    k.roll(1001)
    assert k.on and (k.ins, k.outs, k.start) == (0, 0, 1001)
    k.ins, k.outs = 100, 49  # slow consumers
    k.roll(2001)
    assert not k.on
    k.ins, k.outs = 0, 7  # publishers held: consumers still drain
    k.roll(3001)
    assert k.on
    k.roll(4001)  # nothing delivered: a stalled consumer ends the priority
    assert not k.on and k.due() == 5001


def mk(page_bytes=20):
    out = QueueOut()
    # credit bumped after every message, so that each publish shows what credit does
    q = QueueCore("/", "q", queue_settings({}), out.port(), 0, page_bytes=page_bytes, page_size=4,
                  credit_more=1, credit_more_bytes=1 << 30)
    return q, out


def pub(q, now, body=b"x" * 10, seq=0):
    q.publish(PUB, [PublishItem(seq, "x", "rk", b"\x00\x00", False, 0, -1)], [body], now)


def credits(out):
    return len(out.of("credit"))


def keeping_up(q, out):
    """A consumer (prefetch 2) that took everything in the first second."""
    q.consume(CH1, "A", False, False, 2, 0, 0)
    pub(q, 1)
    pub(q, 2)
    assert len(out.delivered()) == 2
    q.settle(CH1, 0, [1, 2], 3)
    q.tick(1001)  # the window closes: 2 of 2 taken
    assert q.keep_up.on


def test_publishers_wait_for_consumers_that_keep_up_instead_of_paging():
    q, out = mk()
    keeping_up(q, out)
    before = credits(out)
    pub(q, 1002)  # delivered at once (the consumer had room)
    pub(q, 1003)
    pub(q, 1004)  # the consumer is full (2 unacked): 10 bytes ready
    pub(q, 1005)  # 20 bytes ready: not past the budget
    assert credits(out) == before + 4
    pub(q, 1006)  # 30 bytes ready: past the budget, credit waits
    assert credits(out) == before + 4 and q.credit.owed
    assert q.paging.paged == 0  # (this one came before the budget was passed: in memory)
    # the consumer acks and takes two: 10 bytes ready, the credit is paid
    q.settle(CH1, 0, [3, 4], 1007)
    assert credits(out) == before + 5 and not q.credit.owed


def test_consumers_that_keep_up_hold_the_publishers_at_a_few_messages_not_the_budget():
    """Small messages: HOLD_MESSAGES bounds the wait long before the byte budget does (a queue of
    16-byte messages held 1.3 s of them at 16 MiB)."""
    q, out = mk(page_bytes=1 << 20)
    q.keep_up.hold_messages = 3
    keeping_up(q, out)
    for t in range(1002, 1006):
        pub(q, t, body=b"x")  # two delivered (prefetch 2), two ready
    assert not q.credit.owed
    pub(q, 1006, body=b"x")
    pub(q, 1007, body=b"x")  # four ready: past hold_messages
    assert q.credit.owed and q.paging.paged == 0
    q.settle(CH1, 0, [3, 4], 1008)  # two more taken: two ready, the credit is paid
    assert not q.credit.owed


def test_consumers_that_keep_up_hold_at_hold_bytes_below_the_budget():
    q, out = mk(page_bytes=1 << 20)
    q.keep_up.hold_bytes = 20
    keeping_up(q, out)
    for t in range(1002, 1006):
        pub(q, t)  # two delivered, 20 bytes ready: not past hold_bytes
    assert not q.credit.owed
    pub(q, 1006)
    assert q.credit.owed and q.paging.paged == 0


def test_a_stalled_consumer_frees_the_publishers_at_the_end_of_the_window():
    q, out = mk(page_bytes=10)
    keeping_up(q, out)
    for t in range(1002, 1006):
        pub(q, t)  # two delivered, two ready (20 bytes > 10): credit waits
    assert q.credit.owed and out.of("schedule")[-1] == (2001,)  # judged again then
    q.tick(2001)  # 2 of 4 taken in that window: the consumer still keeps up, hold on
    assert q.credit.owed and q.keep_up.on
    q.tick(3001)  # a window with no delivery: the publishers go on, the queue pages
    assert not q.credit.owed
    pub(q, 3002)
    assert q.paging.paged


def test_no_consumer_never_holds_a_publisher():
    q, out = mk()
    for t in range(1, 3000, 100):
        pub(q, t)
    assert credits(out) == 30 and q.paging.paged and not q.credit.owed


def test_slow_consumers_leave_the_publishers_to_the_paging():
    q, out = mk()
    q.consume(CH1, "A", False, False, 1, 0, 0)
    for t in range(1, 1000, 100):
        pub(q, t)  # 10 in, 1 delivered in the first window
    q.tick(1001)
    assert not q.keep_up.on
    for t in range(1002, 1100, 10):
        pub(q, t)
    assert not q.credit.owed and q.paging.paged
