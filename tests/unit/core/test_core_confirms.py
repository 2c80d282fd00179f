"""actors/core/confirms.py: which publishes wait for which queues (behaviours C1, C2, C6)."""

from __future__ import annotations

from actors.core.confirms import Confirms


def test_a_publish_routed_to_two_queues_is_confirmed_when_both_have__C1():
    c, acked = Confirms(), []
    c.insert(1, ["q1", "q2"])
    c.insert(2, ["q1"])
    c.confirm([1, 2], "q1", acked)
    assert acked == [2] and c.smallest() == 1
    c.confirm([1], "q2", acked)
    assert acked == [2, 1] and c.smallest() is None and len(c) == 0


def test_one_refusal_nacks_at_once_and_a_late_ack_changes_nothing__C2():
    c, acked, nacked = Confirms(), [], []
    c.insert(5, ["q1", "q2"])
    c.reject([5], nacked)
    c.confirm([5], "q2", acked)
    assert nacked == [5] and acked == []


def test_queues_that_died_nack_what_they_owed__C6():
    c, nacked = Confirms(), []
    c.insert(1, ["w1#q", "w2#q"])
    c.insert(2, ["w2#q"])
    c.insert(3, ["w1#q"])
    c.reject_queues(lambda q: q.startswith("w1#"), nacked)
    assert nacked == [1, 3] and list(c.unconfirmed) == [2]


def test_the_smallest_is_the_oldest_still_waiting():
    c, acked = Confirms(), []
    for seq in (1, 2, 3):
        c.insert(seq, ["q"])
    c.confirm([2], "q", acked)
    assert c.smallest() == 1
    c.confirm([1], "q", acked)
    assert c.smallest() == 3
