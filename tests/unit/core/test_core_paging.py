"""actors/core/paging.py: a queue's paged-out part, each priority's lane, without a queue or a
backing queue (what it asks the backing queue for is recorded: core_fakes.PageRequests)."""

from __future__ import annotations

from types import SimpleNamespace

from actors.core.paging import Lane, Paging, Ready
from core_fakes import PageRequests


def paging(priorities=1, page_size=4):
    out = PageRequests()
    return Paging(out, priorities, page_bytes=1000, page_size=page_size), out


def msg(seq_id, priority=0, publisher="", pub_seq=0):
    return SimpleNamespace(seq_id=seq_id, priority=priority, publisher=publisher,
                           pub_seq=pub_seq)


def test_messages_added_to_a_lane_count_in_it_and_in_the_totals():
    pg, _ = paging(priorities=2)
    assert pg.pageable and pg.paged == 0
    pg.add(pg.lanes[1], 10)
    pg.add(pg.lanes[1], 5)
    pg.add(pg.lanes[0], 7)
    assert (pg.lanes[1].paged, pg.lanes[1].paged_bytes) == (2, 15)
    assert (pg.paged, pg.paged_bytes) == (3, 22)


def test_reading_back_takes_them_off_and_an_empty_index_sets_the_counts_right():
    pg, _ = paging()
    lane = pg.lanes[0]
    for _ in range(5):
        pg.add(lane, 10)
    pg.read(lane, 2, 20, no_more=False)
    assert (lane.paged, pg.paged, pg.paged_bytes) == (3, 3, 30)
    pg.read(lane, 1, 10, no_more=True)  # the index had no more than that: counts were off
    assert (lane.paged, lane.paged_bytes, pg.paged, pg.paged_bytes) == (0, 0, 0, 0)


def test_reading_more_than_counted_is_no_negative_count():
    pg, _ = paging()
    lane = pg.lanes[0]
    pg.add(lane, 10)
    pg.read(lane, 3, 30, no_more=False)
    assert (lane.paged, pg.paged, pg.paged_bytes) == (0, 0, 0)


def test_owed_heads_are_paid_by_the_first_messages_read_back():
    pg, _ = paging()
    lane = pg.lanes[0]
    for _ in range(4):
        pg.add(lane, 10)
    pg.owe(lane)
    pg.owe(lane)
    assert pg.owed == 2 and pg.has_head(0)  # 4 paged, 2 owed: a head is left
    pg.read(lane, 3, 30, no_more=False)
    assert pg.pay(lane, 3) == 2 and pg.owed == 0 and lane.owed == 0


def test_owed_ones_beyond_what_the_lane_holds_were_stale():
    pg, _ = paging()
    lane = pg.lanes[0]
    for _ in range(3):
        pg.add(lane, 10)
    for _ in range(3):
        pg.owe(lane)
    assert not pg.has_head(0)  # every paged message is owed already
    pg.read(lane, 1, 10, no_more=True)  # the index held only one
    assert pg.pay(lane, 0) == 0 and lane.owed == 0 and pg.owed == 0


def test_a_page_is_asked_once_and_never_for_more_than_the_lane_holds():
    pg, out = paging(page_size=4)
    lane = pg.lanes[0]
    lane.page_after = 7
    pg.add(lane, 10)
    pg.add(lane, 10)
    pg.ask_page(0)
    pg.ask_page(0)
    assert out.calls == [("page_in", 7, 2, 0)] and lane.asked


def test_a_page_is_wanted_once_fewer_than_a_page_of_that_priority_and_above_are_in_memory():
    pg, out = paging(priorities=2, page_size=2)
    pg.add(pg.lanes[0], 10)
    ready = [Ready(), Ready()]
    ready[1].append(msg(1, 1))
    ready[1].append(msg(2, 1))
    pg.want_page(ready)  # two of priority 1 in memory: enough for now
    assert out.calls == []
    ready[1].popleft()
    pg.want_page(ready)
    assert out.calls == [("page_in", 0, 1, 0)]


def test_owed_drops_go_unread_unless_the_queue_must_see_them():
    pg, out = paging(priorities=2)
    for p in (0, 1):
        pg.add(pg.lanes[p], 10)
        pg.owe(pg.lanes[p])
    pg.ask_owed(0, must_read=False)
    pg.ask_owed(1, must_read=True)  # (a dead-letter exchange, x-confirm-on, the event log)
    assert out.calls == [("drop_paged", 0, 1, 0), ("page_in", 0, 1, 1)]


def test_purge_empties_every_lane_and_names_the_waiters_it_loses():
    pg, out = paging(priorities=2)
    lane = pg.lanes[1]
    lane.page_after = 3
    pg.add(lane, 10)
    pg.owe(lane)
    pg.keep_waiter(msg(4, 1, "ch", 9))
    assert pg.purge() == [("ch", 9)]
    assert out.calls == [("purge_paged", 3, 1)]
    assert (pg.paged, pg.paged_bytes, pg.owed, lane.paged, lane.pubs) == (0, 0, 0, 0, None)


def test_a_waiter_comes_back_with_its_message_and_the_rest_can_be_drained():
    pg, _ = paging()
    pg.keep_waiter(msg(5, 0, "ch1", 1))
    pg.keep_waiter(msg(6, 0, "ch2", 2))
    back = msg(5)
    pg.waiter(back)
    assert (back.publisher, back.pub_seq) == ("ch1", 1)
    assert pg.drain_waiters() == [("ch2", 2)] and pg.lanes[0].pubs is None


def test_restore_counts_what_the_index_holds_beyond_the_first_page():
    pg, _ = paging(priorities=2)
    pg.restore([0, 5], [0, 50], last=[0, 12], durable=True)
    lane = pg.lanes[1]
    assert (lane.paged, lane.paged_bytes, lane.page_after) == (5, 50, 12)
    assert pg.persistent() == (5, 50) and (pg.paged, pg.paged_bytes) == (5, 50)
    transient, _ = paging()
    transient.restore([3], [30], last=[0], durable=False)
    assert transient.persistent() == (0, 0) and transient.paged == 3


def test_a_lane_counts_no_persistent_message_once_it_holds_none():
    lane = Lane()
    lane.paged, lane.pers, lane.pers_bytes = 2, 2, 20
    lane.pers_off(1, 10)
    assert (lane.pers, lane.pers_bytes) == (1, 10)
    lane.pers_off(5, 50)
    assert (lane.pers, lane.pers_bytes) == (0, 0)
    lane.pers, lane.paged = 3, 0
    lane.pers_off(0, 0)
    assert lane.pers == 0


def test_a_tail_joins_the_head_once_the_paged_part_is_read():
    r = Ready()
    r.append(msg(1))
    r.tail.append(msg(5))
    r.tail.append(msg(6))
    assert len(r) == 1 and [m.seq_id for m in r.all()] == [1, 5, 6]
    r.join_tail()
    assert len(r) == 3 and not r.tail
