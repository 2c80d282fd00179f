"""QueueCore paging (rabbit_variable_queue's delta): a queue past page_bytes keeps new
messages in its index only and reads them back a page at a time, in order."""
from __future__ import annotations

from actors.core.queue import WAIT, QueueCore
from actors.core.queue_settings import parse as queue_settings
from actors.messages import PublishItem, StoredMessage
from core_fakes import QueueOut
from queue_index import IndexEntry

CH1, PUB = "w1#ch/1/1/1", "w1#ch/9/1/3"


def mk(args=None, page_bytes=10, page_size=3, durable=True):
    out = QueueOut()
    return QueueCore("/", "q", queue_settings(args), out.port(), 0, durable=durable, page_bytes=page_bytes,
                     page_size=page_size), out


def pub(q, *bodies, persistent=True, seqs=None):
    items = [PublishItem((seqs[i] if seqs else 0), "x", "rk", b"\x00\x00", persistent, 0, -1)
             for i in range(len(bodies))]
    q.publish(PUB, items, list(bodies), 0)


def stored(out):
    return [m for (msgs,) in out.of("persist") for m in msgs]


def page_of(msgs, delivered=False):
    """What the backing queue would read back for these messages."""
    return [StoredMessage(IndexEntry(m.seq_id, m.msg_id, m.exchange, m.routing_key, m.props_raw,
                                     m.body, len(m.body), 0, 0, delivered), m.body, m.persistent)
            for m in msgs]


def test_messages_past_page_bytes_stay_in_the_index_only():
    q, out = mk()
    pub(q, b"aaaaaa", b"bbbbbb", b"cccccc", b"dddddd")   # 12 bytes > 10 after the second
    assert [m.body for m in q.ready[0].items] == [b"aaaaaa", b"bbbbbb"]
    assert (q.paging.paged, q.paging.paged_bytes, q.paging.lanes[0].page_after) == (2, 12, 2)
    assert [m.body for m in stored(out)] == [b"aaaaaa", b"bbbbbb", b"cccccc", b"dddddd"]
    assert q.stats()["messages"] == 4 and q.info() == (4, 0)


def test_pages_come_back_in_order_when_memory_runs_low():
    q, out = mk()
    pub(q, *[b"%06d" % i for i in range(8)])
    diverted = [m for m in stored(out) if m.seq_id > q.paging.lanes[0].page_after]
    q.consume(CH1, "A", True, False, 0, 0, 0)
    q.run(0)
    assert out.of("page_in") == [(2, 3, 0)]       # after seq 2, 3 at a time, lane 0
    q.paged_in(page_of(diverted[:3]), 0, 0, 0, 0)
    q.run(0)
    assert out.of("page_in")[-1] == (5, 3, 0) and q.paging.paged == 3
    q.paged_in(page_of(diverted[3:]), 0, 0, 0, 0)
    q.run(0)
    got = [d[2] for d in out.delivered()]
    assert got == [b"%06d" % i for i in range(8)] and q.paging.paged == 0


def test_a_message_that_comes_while_some_are_paged_waits_in_memory_behind_them():
    """rabbit_variable_queue's q1: memory is below page_bytes again, so the new message is not
    written and read back; it is delivered after the paged part, then paging is over."""
    q, out = mk(page_bytes=1000)
    q.restore(3, [], 2, 12, 0, 0)   # as after a restart: seq 1 and 2 in the index only
    pub(q, b"x", persistent=False)
    assert (q.ready_count, q.paging.paged, len(q.ready[0]), stored(out)) == (1, 2, 0, [])
    assert q.stats()["messages"] == 3
    q.consume(CH1, "A", True, False, 0, 0, 0)
    q.run(0)
    assert out.delivered() == [] and out.of("page_in") == [(0, 2, 0)]  # the paged part only
    paged = [IndexEntry(s, b"m" * 16, "x", "rk", b"\x00\x00", b"old%d" % s, 4, 0, 0, False)
             for s in (1, 2)]
    q.paged_in([StoredMessage(e, e.body, True) for e in paged], 0, 0, 0, 0)
    q.run(0)
    assert [d[2] for d in out.delivered()] == [b"old1", b"old2", b"x"]
    assert q.paging.paged == 0 and not q.ready[0].tail
    pub(q, b"y", persistent=False)  # paging is over: straight to the consumer
    q.run(0)
    assert out.delivered()[-1][2] == b"y" and stored(out) == []


def test_when_memory_fills_again_the_tail_goes_to_the_index_first_in_order():
    q, out = mk(page_bytes=10)
    q.restore(2, [], 1, 6, 0, 0)
    pub(q, b"aaaaaa", b"bbbbbb", b"cccccc", persistent=False, seqs=[1, 2, 3])
    # a and b wait in memory behind the paged one; then memory is past 10: both go to the
    # index before c does
    assert [m.body for m in stored(out)] == [b"aaaaaa", b"bbbbbb", b"cccccc"]
    assert (q.ready_count, q.ready_bytes, q.paging.paged, q.paging.paged_bytes) == (0, 0, 4, 24)
    assert all(m.stored and m.pub_seq == 0 and len(m.msg_id) == 16 for m in stored(out))
    assert out.of("confirm") == [(PUB, [1, 2, 3], True)]  # transient: confirmed as they came


def test_a_mixed_tail_of_a_durable_queue_reaches_the_index_in_seq_id_order__R1():
    """A durable queue writes a persistent message of the tail as it comes; a transient one
    before it in the tail is written first (an index takes seq_ids in ascending order only:
    spilling it later, behind the persistent one, broke the backing queue and wedged the
    queue's publishers). Each is confirmed once: a transient one as it came."""
    q, out = mk(page_bytes=10)
    q.restore(2, [], 1, 6, 0, 0)                      # seq 1 in the index only
    pub(q, b"a", persistent=False, seqs=[1])          # the tail: in memory only
    assert stored(out) == []
    pub(q, b"b", persistent=True, seqs=[2])           # written, a before it
    pub(q, b"c", persistent=False, seqs=[3])
    pub(q, b"dddddddddddd", persistent=True, seqs=[4])
    assert [m.body for m in q.ready[0].tail] == [b"a", b"b", b"c", b"dddddddddddd"]
    pub(q, b"e", persistent=False, seqs=[5])          # memory is full: the tail spills
    written = stored(out)
    assert [m.body for m in written] == [b"a", b"b", b"c", b"dddddddddddd", b"e"]
    assert [m.seq_id for m in written] == [2, 3, 4, 5, 6]
    assert all(m.stored and len(m.msg_id) == 16 for m in written)
    assert (q.ready_count, q.paging.paged) == (0, 6)
    q.persisted(written)
    confirmed = sorted(s for (_, seqs, ok) in out.of("confirm") for s in seqs if ok)
    assert confirmed == [1, 2, 3, 4, 5]               # once each


def test_x_confirm_on_waiters_of_a_spilled_tail_are_kept_by_the_lane():
    q, out = mk({"x-confirm-on": "ack"}, page_bytes=10)
    q.restore(2, [], 1, 6, 0, 0)
    pub(q, b"aaaaaa", b"bbbbbb", b"cccccc", seqs=[1, 2, 3])
    assert out.of("confirm") == []
    assert sorted(q.paging.lanes[0].pubs.seqs) == [m.seq_id for m in stored(out)]
    assert q.purge() == 4
    assert sorted(s for (_, seqs, ok) in out.of("confirm") for s in seqs if not ok) == [1, 2, 3]


def test_drop_head_reaches_the_tail_once_every_paged_message_is_owed():
    q, out = mk({"x-max-length": 1}, page_bytes=1000)
    q.restore(2, [], 1, 6, 0, 0)
    pub(q, b"a", persistent=False)   # behind the paged one: 2 > 1, the paged head is owed
    assert (q.paging.lanes[0].owed, q.stats()["messages"]) == (1, 1)
    pub(q, b"b", persistent=False)   # the paged one is owed already: a goes
    assert q.stats()["messages"] == 1 and [m.body for m in q.ready[0].tail] == [b"b"]
    q.paged_dropped(0, 1, 6, 1)
    assert [m.body for m in q.ready[0].items] == [b"b"] and not q.ready[0].tail


def test_a_persistent_message_paged_out_of_a_transient_queue_is_written():
    """A non-durable queue never syncs: a persistent message it pages out is written like a
    transient one (and confirmed at once), or its page would come back without it."""
    q, out = mk(durable=False)
    pub(q, b"aaaaaaaaaaa", b"b", persistent=True, seqs=[1, 2])
    assert [m.body for m in stored(out)] == [b"b"] and q.paging.paged == 1
    assert out.of("confirm") == [(PUB, [1, 2], True)]


def test_transient_message_paged_out_is_confirmed_at_once_and_stored():
    q, out = mk()
    pub(q, b"aaaaaaaaaaa", persistent=True, seqs=[1])
    pub(q, b"b", persistent=False, seqs=[2])
    assert out.of("confirm") == [(PUB, [2], True)]    # transient: not after the sync
    [first, second] = stored(out)
    assert second.seq_id == 2 and second.pub_seq == 0 and len(second.msg_id) == 16
    q.persisted([first, second])
    assert out.of("confirm")[-1] == (PUB, [1], True)  # and only once for the transient one


def test_get_waits_for_a_page():
    q, out = mk()
    pub(q, b"aaaaaaaaaaa", b"b", b"c")
    assert q.get(CH1, True, 0)[1] == b"aaaaaaaaaaa"
    assert q.get(CH1, True, 0) is WAIT
    diverted = [m for m in stored(out) if m.seq_id > q.paging.lanes[0].page_after]
    q.paged_in(page_of(diverted), 0, 0, 0, 0)
    item, body, count = q.get(CH1, True, 0)
    assert body == b"b" and count == 1


def test_purge_settles_paged_messages_too():
    q, out = mk()
    pub(q, b"aaaaaaaaaaa", b"b", b"c")
    assert q.purge() == 3
    assert out.of("purge_paged") == [(1, 0)] and q.paging.paged == 0 and q.stats()["messages"] == 0


def test_dropped_stale_entries_are_counted_off():
    q, out = mk()
    q.restore(1, [], 3, 30, 0, 0)
    q.paged_in([], 3, 30, 0, 0)
    assert (q.paging.paged, q.paging.paged_bytes) == (0, 0)


def test_restore_with_more_in_the_index():
    q, out = mk()
    first = [StoredMessage(IndexEntry(7, b"m" * 16, "x", "rk", b"", b"a", 1, 0, 0, True), b"a",
                           True)]
    q.restore(9, first, 5, 50, 0, 0)
    assert q.ready_count == 1
    assert (q.paging.paged, q.paging.lanes[0].page_after, q.next_seq_id) == (5, 7, 9)
    assert q.ready[0].peek().redelivered is True


def test_a_transient_queue_pages_its_transient_messages_confirmed_at_once__R1():
    q, out = mk(durable=False)
    pub(q, b"aaaaaa", b"bbbbbb", b"cccccc", persistent=False, seqs=[1, 2, 3])
    assert [m.body for m in q.ready[0].items] == [b"aaaaaa", b"bbbbbb"]
    assert [m.body for m in stored(out)] == [b"cccccc"]  # only the paged one is written
    assert stored(out)[0].stored and stored(out)[0].msg_id is not None
    assert out.of("confirm") == [(PUB, [1, 2, 3], True)]  # none waits for the disk
    q.consume(CH1, "A", True, False, 0, 0, 0)
    q.run(0)
    assert out.of("page_in")  # the drained queue asks for its paged part


def test_publisher_credit_waits_while_the_backing_queue_is_behind_with_its_writes():
    q, out = mk(durable=False, page_bytes=1)
    body = b"x" * (1024 * 1024)
    for _ in range(8):  # 40 MiB paged out, none written yet
        pub(q, *[body] * 5, persistent=False)
    paid = len(out.of("credit"))
    assert paid == 3 and q.credit.owed  # bumps at 5, 10 and 15 MiB; then it waits
    q.stored(20 * 1024 * 1024)
    assert len(out.of("credit")) == paid  # 20 MiB still on their way: still behind
    q.stored(20 * 1024 * 1024)
    assert len(out.of("credit")) == paid + 1 and not q.credit.owed  # caught up: paid


def test_a_persistent_tail_is_in_the_index_too_but_never_read_back_twice():
    """A durable queue writes a persistent message as it comes, tail or not: the page asks
    for the paged part only, and entries of the tail that a page brings anyway are dropped
    (they are in memory already; the kill -9 ledger test saw them delivered twice)."""
    q, out = mk(page_bytes=1000)
    q.restore(3, [], 2, 12, 0, 0)
    pub(q, b"x", persistent=True, seqs=[1])
    [x] = stored(out)
    assert x.seq_id == 3 and q.ready[0].tail[0] is x
    q.consume(CH1, "A", True, False, 0, 0, 0)
    q.run(0)
    assert out.of("page_in") == [(0, 2, 0)]  # the two paged, not the tail behind them
    index = [IndexEntry(s, b"m" * 16, "x", "rk", b"\x00\x00", b"m%d" % s, 2, 0, 0, False)
             for s in (1, 2)] + [IndexEntry(3, x.msg_id, "x", "rk", b"\x00\x00", b"x", 1, 0, 0,
                                            False)]
    q.paged_in([StoredMessage(e, e.body, True) for e in index], 0, 0, 0, 0)  # one too many
    q.run(0)
    assert [d[2] for d in out.delivered()] == [b"m1", b"m2", b"x"]
    assert q.paging.paged == 0 and q.stats()["messages"] == 0


ACK, REQUEUE = 0, 1  # settle ops


def _pers(q):
    s = q.storage_stats()
    return s["messages_persistent"], s["message_bytes_persistent"]


def test_persistent_messages_are_counted_in_memory_and_paged_out():
    """messages_persistent / message_bytes_persistent (rabbit_variable_queue's
    persistent_count: persistent messages of a durable queue, ready, unacked or paged out)
    follow each message from publish to ack, through paging, page-in, drop-head and purge."""
    q, out = mk()
    pub(q, b"aaaaaa", persistent=True)
    pub(q, b"tt", persistent=False)
    pub(q, b"bbbbbb", b"cccccc", persistent=True)  # past page_bytes: paged out
    assert q.paging.paged and _pers(q) == (3, 18)
    diverted = [m for m in stored(out) if m.seq_id > q.paging.lanes[0].page_after]
    consume(q, prefetch=10)
    q.paged_in(page_of(diverted), 0, 0, 0, 0)  # read back: counted in memory now
    q.run(0)
    assert q.paging.paged == 0 and _pers(q) == (3, 18) and len(q.unacked) == 4
    q.settle(CH1, REQUEUE, [1], 0)  # back in the queue: still counted
    assert _pers(q) == (3, 18)
    q.settle(CH1, ACK, [2, 3, 4], 0)  # one transient, two persistent
    assert _pers(q) == (1, 6)
    q.channel_down(CH1, 0)  # seq 1 (redelivered meanwhile) back in the queue
    assert _pers(q) == (1, 6)
    assert q.purge() == 1 and _pers(q) == (0, 0)
    # a transient queue counts none (IsPersistent: persistent and durable)
    t, _ = mk(durable=False)
    pub(t, b"aaaaaaaaaaa", b"b", persistent=True)
    assert _pers(t) == (0, 0)


def consume(q, ch=CH1, prefetch=0):
    q.consume(ch, "A", False, False, prefetch, 0, 0)
    q.run(0)


def test_persistent_paged_messages_dropped_unread_purged_or_restored():
    # drop-head of paged messages the backing queue drops unread: it says how many were
    # persistent
    q, out = mk({"x-max-length": 1}, page_bytes=1000)
    q.restore(2, [], 1, 6, 0, 0)  # after a restart: what the index holds is counted
    assert _pers(q) == (1, 6)
    pub(q, b"a", persistent=False)  # the paged head is owed
    q.paged_dropped(0, 1, 6, 1, 1, 6)
    assert _pers(q) == (0, 0) and q.stats()["messages"] == 1
    # a previous run's transient entries, dropped when read: counted off
    q2, _ = mk()
    q2.restore(1, [], 3, 30, 0, 0)
    q2.paged_in([], 3, 30, 0, 0)
    assert _pers(q2) == (0, 0)
    # purge of a paged part
    q3, _ = mk()
    pub(q3, b"aaaaaaaaaaa", b"b", b"c")
    assert _pers(q3) == (3, 13)
    q3.purge()
    assert _pers(q3) == (0, 0)
    # refused by the backing queue (disk full): they leave the queue
    q4, out4 = mk()
    pub(q4, b"aaaaaaaaaaa", b"b", b"c")
    q4.refused(stored(out4))
    assert _pers(q4) == (0, 0) and q4.stats()["messages"] == 0
