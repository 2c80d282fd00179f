"""tests/faults/cluster/checker.py (pure): the counts of a Jepsen-style run's history."""

from tests.faults.cluster.checker import (CONFIRMED, NACKED, UNKNOWN, Delivery, Session, check,
                                          verdict)


def _s(sid, master, via="leveret@node2"):
    return Session(sid, via, master)


def test_a_clean_history_passes():
    published = {1: CONFIRMED, 2: CONFIRMED, 3: NACKED, 4: UNKNOWN}
    sessions = [_s(1, "leveret@node1")]
    deliveries = [Delivery(1, 1, 0.1, False), Delivery(2, 1, 0.2, False)]
    r = check(published, sessions, deliveries)
    assert r.counts() == {"attempted": 4, "confirmed": 2, "nacked": 1, "unknown": 1,
                          "delivered": 2, "lost": 0, "duplicated": 0, "two_masters": 0,
                          "unexpected": 0, "recovered": 0, "nacked_delivered": 0,
                          "unflagged": 0}
    assert r.masters == ["leveret@node1"]
    assert verdict(r, settle_s=3.0) == []


def test_lost_is_confirmed_and_never_delivered():
    r = check({1: CONFIRMED, 2: CONFIRMED, 3: UNKNOWN}, [_s(1, None)],
              [Delivery(2, 1, 0.0, False)])
    assert r.lost == [1]  # 3 was never confirmed: not lost
    assert "1 confirmed messages lost" in verdict(r, 1.0)[0]


def test_unexpected_recovered_and_nacked_delivered():
    published = {1: CONFIRMED, 2: NACKED, 3: UNKNOWN}
    deliveries = [Delivery(i, 1, i, False) for i in (1, 2, 3, 99)]
    r = check(published, [_s(1, "leveret@node1")], deliveries)
    assert r.unexpected == [99]
    assert r.recovered == [2, 3]
    assert r.nacked_delivered == [2]
    assert any("unexpected" in p for p in verdict(r, 1.0))


def test_a_duplicate_after_failover_is_not_two_masters():
    """Master node1 delivers 1 and 2 (the ack of 2 is lost with it); node2, promoted after,
    redelivers 2 flagged: a duplicate, not two masters at once."""
    sessions = [_s(1, "leveret@node1"), _s(2, "leveret@node2")]
    deliveries = [Delivery(1, 1, 1.0, False), Delivery(2, 1, 1.1, False),
                  Delivery(2, 2, 3.0, True), Delivery(3, 2, 3.1, False)]
    r = check({1: CONFIRMED, 2: CONFIRMED, 3: CONFIRMED}, sessions, deliveries)
    assert r.duplicated == [2]
    assert r.two_masters == []
    assert r.unflagged == []
    assert verdict(r, 2.0) == []


def test_two_masters_serving_at_once():
    """The isolated home (node1) goes on delivering while node2's promoted master delivers the
    same backlog: every id delivered by both counts, and the one node1 delivered second is
    unflagged."""
    sessions = [_s(1, "leveret@node1", via="leveret@node1"), _s(2, "leveret@node2")]
    deliveries = [Delivery(10, 1, 1.0, False), Delivery(10, 2, 1.5, True),
                  Delivery(11, 2, 2.0, True), Delivery(11, 1, 2.5, False),
                  Delivery(12, 1, 3.0, False)]
    r = check({10: CONFIRMED, 11: CONFIRMED, 12: CONFIRMED}, sessions, deliveries)
    assert r.duplicated == [10, 11]
    assert r.two_masters == [10, 11]
    assert r.unflagged == [11]
    assert any("two masters" in p for p in verdict(r, 2.0))


def test_two_sessions_of_one_master_are_one_master():
    sessions = [_s(1, "leveret@node1"), _s(2, "leveret@node1", via="leveret@node3")]
    deliveries = [Delivery(5, 1, 1.0, False), Delivery(5, 2, 1.2, True),
                  Delivery(6, 1, 1.3, False)]
    r = check({5: CONFIRMED, 6: CONFIRMED}, sessions, deliveries)
    assert r.duplicated == [5] and r.two_masters == []


def test_an_unknown_master_never_counts_as_a_second_one():
    sessions = [_s(1, "leveret@node1"), _s(2, None)]
    deliveries = [Delivery(5, 1, 1.0, False), Delivery(5, 2, 1.2, True),
                  Delivery(6, 1, 1.3, False)]
    assert check({5: CONFIRMED, 6: CONFIRMED}, sessions, deliveries).two_masters == []


def test_settling_late_or_never_fails():
    r = check({}, [], [])
    assert verdict(r, 29.9) == []
    assert "took 31.0 s" in verdict(r, 31.0)[0]
    assert "did not settle" in verdict(r, None)[0]
