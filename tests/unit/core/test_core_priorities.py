"""actors/core/priorities.py: a queue's ready messages by priority, without a queue (messages
are plain records with the fields the lanes read)."""

from __future__ import annotations

from types import SimpleNamespace

from actors.core.priorities import MAX_PRIORITY, PriorityLanes, max_priority_of


def msg(seq_id, priority=0, body=b"x", expires_at=0):
    return SimpleNamespace(seq_id=seq_id, priority=priority, body=body, expires_at=expires_at)


def no_paged(p):
    return False


def lanes_with(max_priority, *msgs):
    prios = PriorityLanes(max_priority)
    for x in msgs:
        prios.push(x)
    return prios


def test_the_maximum_comes_from_x_max_priority_capped_at_255():
    assert max_priority_of(None) == 0 and max_priority_of(0) == 0
    assert max_priority_of(10) == 10 and max_priority_of(1000) == MAX_PRIORITY == 255
    assert len(PriorityLanes(max_priority_of(10)).lanes) == 11
    assert len(PriorityLanes(0).lanes) == 1


def test_a_publishers_priority_is_clamped_to_the_queues_range():
    prios = PriorityLanes(5)
    assert [prios.clamp(p) for p in (None, 0, 3, 5, 9, 255)] == [0, 0, 3, 5, 5, 5]
    assert PriorityLanes(0).clamp(9) == 0  # no priorities: every message is priority 0


def test_counts_follow_what_goes_in_and_out():
    prios = lanes_with(2, msg(1, 0, b"aa"), msg(2, 2, b"bbb"))
    prios.push_behind(msg(3, 2, b"c"))
    assert (prios.count, prios.nbytes) == (3, 6)
    assert prios.pop(2).seq_id == 2 and (prios.count, prios.nbytes) == (2, 3)
    assert prios.pop_tail(2).seq_id == 3 and (prios.count, prios.nbytes) == (1, 2)
    assert [x.seq_id for x in prios.clear()] == [1] and (prios.count, prios.nbytes) == (0, 0)


def test_the_next_lane_is_the_highest_with_messages():
    prios = lanes_with(3, msg(1, 0), msg(2, 2), msg(3, 1))
    assert prios.head_lane(no_paged) == 2
    prios.pop(2)
    assert prios.head_lane(no_paged) == 1
    prios.pop(1)
    prios.pop(0)
    assert prios.head_lane(no_paged) is None


def test_a_higher_lane_paged_out_or_only_in_its_tail_is_next_all_the_same():
    """A lower priority is never served while a higher one waits for its page."""
    prios = lanes_with(3, msg(1, 0))
    assert prios.head_lane(lambda p: p == 3) == 3  # paged out: its head is next, not in memory
    assert not prios.lanes[3]
    prios.push_behind(msg(2, 2))
    assert prios.head_lane(no_paged) == 2 and not prios.lanes[2]


def test_requeued_messages_go_back_in_place_in_their_own_lanes():
    prios = lanes_with(1, msg(2, 0), msg(4, 1))
    prios.requeue([msg(3, 1), msg(1, 0)])
    assert [[x.seq_id for x in r.items] for r in prios.lanes] == [[1, 2], [3, 4]]
    assert prios.count == 4


def test_expired_heads_leave_from_every_lane_and_stop_at_the_first_live_one():
    prios = lanes_with(1, msg(1, 0, expires_at=5), msg(2, 0, expires_at=0), msg(3, 0,
                       expires_at=1), msg(4, 1, expires_at=7), msg(5, 1, expires_at=9))
    assert prios.next_expiry() == 5
    assert [x.seq_id for x in prios.expired(8)] == [1, 4]  # 2 never expires: 3 waits behind it
    assert prios.count == 3 and prios.next_expiry() == 9
    assert [x.seq_id for x in prios.heads()] == [2, 5]


def test_tails_are_taken_whole_and_their_start_is_known():
    prios = lanes_with(1, msg(1, 1, b"aa"))
    assert prios.tail_start(1) is None
    prios.push_behind(msg(5, 1, b"bbb"))
    prios.push_behind(msg(6, 1, b"c"))
    assert prios.tail_start(1) == 5
    assert [x.seq_id for x in prios.take_tail(1)] == [5, 6]
    assert (prios.count, prios.nbytes, prios.tail_start(1)) == (1, 2, None)


def test_removed_messages_are_found_in_heads_and_tails():
    prios = lanes_with(1, msg(1, 0), msg(2, 1), msg(3, 1))
    prios.push_behind(msg(7, 1, b"yy"))
    gone = prios.remove({2, 7, 99})
    assert sorted(x.seq_id for x in gone) == [2, 7]
    assert [x.seq_id for x in prios.messages()] == [1, 3] and prios.nbytes == 2
