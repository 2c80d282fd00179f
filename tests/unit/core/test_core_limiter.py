"""actors/core/limiter.py: a channel's channel-wide prefetch and its tokens (behaviour P2)."""

from __future__ import annotations

from actors.core.limiter import Limiter


def test_free_places_are_shared_among_the_queues_asking_oldest_first__P2():
    lim = Limiter()
    lim.set_limit(4)
    lim.delivered(1)  # one unacked delivery holds a place
    lim.demand("q1")
    lim.demand("q2")
    assert lim.grants() == [("q1", 1), ("q2", 2)]  # 3 free: q1 half rounded down, q2 the rest
    assert lim.grants() == []  # nobody asks any more
    lim.spent("q2", 2)
    lim.release("q1", 1)
    assert lim.granted == {"q1": 0, "q2": 0}


def test_a_settled_delivery_frees_its_place_and_no_limit_forgets_everything__P2():
    lim = Limiter()
    lim.set_limit(1)
    lim.delivered(7)
    lim.demand("q1")
    assert lim.grants() == []  # full
    assert lim.settled([6]) is False and lim.settled([7]) is True
    assert lim.grants() == [("q1", 1)]
    assert lim.set_limit(0) is True and (lim.limited, lim.granted, lim.demands) == (set(), {}, {})
    lim.delivered(8)
    lim.demand("q1")
    assert lim.limited == set() and lim.grants() == []  # unlimited: nothing counted or granted
    assert lim.set_limit(0) is False
