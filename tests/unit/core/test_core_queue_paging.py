"""QueueCore paging (rabbit_variable_queue's delta): a queue past page_bytes keeps new
messages in its index only and reads them back a page at a time, in order."""
from __future__ import annotations

from actors.core.queue import WAIT, QueueCore
from core_fakes import QueueOut
from queue_index import IndexEntry

CH1, PUB = "w1#ch/1/1/1", "w1#ch/9/1/3"


def mk(args=None, page_bytes=10, page_size=3, durable=True):
    out = QueueOut()
    return QueueCore("/", "q", args or {}, out, 0, durable=durable, page_bytes=page_bytes,
                     page_size=page_size), out


def pub(q, *bodies, persistent=True, seqs=None):
    items = [[(seqs[i] if seqs else 0), "x", "rk", b"\x00\x00", persistent, 0, -1]
             for i in range(len(bodies))]
    q.publish(PUB, items, list(bodies), 0)


def stored(out):
    return [m for (msgs,) in out.of("persist") for m in msgs]


def page_of(msgs, delivered=False):
    """What the backing queue would read back for these messages."""
    return [(IndexEntry(m.seq_id, m.msg_id, m.exchange, m.routing_key, m.props_raw, m.body,
                        len(m.body), 0, 0, delivered), m.body, m.persistent) for m in msgs]


def test_messages_past_page_bytes_stay_in_the_index_only():
    q, out = mk()
    pub(q, b"aaaaaa", b"bbbbbb", b"cccccc", b"dddddd")   # 12 bytes > 10 after the second
    assert [m.body for m in q.ready[0].items] == [b"aaaaaa", b"bbbbbb"]
    assert (q.paged, q.paged_bytes, q.lanes[0].page_after) == (2, 12, 2)
    assert [m.body for m in stored(out)] == [b"aaaaaa", b"bbbbbb", b"cccccc", b"dddddd"]
    assert q.stats()["messages"] == 4 and q.info() == (4, 0)


def test_pages_come_back_in_order_when_memory_runs_low():
    q, out = mk()
    pub(q, *[b"%06d" % i for i in range(8)])
    diverted = [m for m in stored(out) if m.seq_id > q.lanes[0].page_after]
    q.consume(CH1, "A", True, False, 0, 0, 0)
    q.run(0)
    assert out.of("page_in") == [(2, 3, 0)]       # after seq 2, 3 at a time, lane 0
    q.paged_in(page_of(diverted[:3]), 0, 0, 0, 0)
    q.run(0)
    assert out.of("page_in")[-1] == (5, 3, 0) and q.paged == 3
    q.paged_in(page_of(diverted[3:]), 0, 0, 0, 0)
    q.run(0)
    got = [d[2] for d in out.delivered()]
    assert got == [b"%06d" % i for i in range(8)] and q.paged == 0


def test_new_messages_keep_paging_out_while_some_are_paged():
    q, out = mk(page_bytes=1000)
    q.restore(1, [], 5, 50, 0, 0)   # as after a restart
    pub(q, b"x")
    assert q.ready_count == 0 and q.paged == 6


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
    diverted = [m for m in stored(out) if m.seq_id > q.lanes[0].page_after]
    q.paged_in(page_of(diverted), 0, 0, 0, 0)
    item, body, count = q.get(CH1, True, 0)
    assert body == b"b" and count == 1


def test_purge_settles_paged_messages_too():
    q, out = mk()
    pub(q, b"aaaaaaaaaaa", b"b", b"c")
    assert q.purge() == 3
    assert out.of("purge_paged") == [(1, 0)] and q.paged == 0 and q.stats()["messages"] == 0


def test_dropped_stale_entries_are_counted_off():
    q, out = mk()
    q.restore(1, [], 3, 30, 0, 0)
    q.paged_in([], 3, 30, 0, 0)
    assert (q.paged, q.paged_bytes) == (0, 0)


def test_restore_with_more_in_the_index():
    q, out = mk()
    first = [(IndexEntry(7, b"m" * 16, "x", "rk", b"", b"a", 1, 0, 0, True), b"a", True)]
    q.restore(9, first, 5, 50, 0, 0)
    assert q.ready_count == 1 and (q.paged, q.lanes[0].page_after, q.next_seq) == (5, 7, 9)
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
