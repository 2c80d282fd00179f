"""pause_minority's clocks (actors/core/pause.py): a node pauses without a majority or without a
leader's contact, and the leader marks a member down only once both leases have run out, so
that a queue's old master has stopped before its mirror is promoted (issue 15 item 2: one
master per queue at any time; the bridge nemesis of tests/faults/cluster/)."""

from __future__ import annotations

from actors.core import pause
from actors.core.pause import (CONNECTION_TIMEOUT_S, DOWN_AFTER_S, LEADER_FALLBACK_S,
                               LEADERLESS_PAUSE_S, LEASE_S, PAUSE_AFTER_S, RAFT_MAX_TIMEOUT_S,
                               TICK_S, PauseClock, may_mark_down)


def test_a_node_in_contact_with_a_leader_and_a_majority_never_pauses():
    c = PauseClock()
    for t in range(100):
        c.observe(float(t), majority=True, leader_contact=True)
        assert c.why_pause(float(t)) is None


def test_without_a_majority_it_pauses_after_pause_after_s():
    c = PauseClock()
    c.observe(10.0, majority=False, leader_contact=True)
    assert c.why_pause(10.0 + PAUSE_AFTER_S) is None
    c.observe(10.0 + PAUSE_AFTER_S + 0.01, majority=False, leader_contact=True)
    assert "majority" in c.why_pause(10.0 + PAUSE_AFTER_S + 0.01)


def test_the_bridge_a_majority_but_no_leader_pauses_after_leaderless_pause_s():
    # A-B and B-C connected, A-C cut, C leads: A reaches a majority (itself and B) and hears
    # nothing from the leader, which will mark it down
    c = PauseClock()
    c.observe(0.0, majority=True, leader_contact=False)
    assert c.why_pause(LEADERLESS_PAUSE_S) is None
    c.observe(LEADERLESS_PAUSE_S + 0.01, majority=True, leader_contact=False)
    assert "no contact with a cluster leader" in c.why_pause(LEADERLESS_PAUSE_S + 0.01)


def test_an_election_shorter_than_leaderless_pause_s_does_not_pause():
    c = PauseClock()
    c.observe(0.0, majority=True, leader_contact=False)   # the leader died
    c.observe(1.5, majority=True, leader_contact=True)    # a new one is elected
    c.observe(1.6, majority=True, leader_contact=False)   # and another election
    assert c.why_pause(1.6 + LEADERLESS_PAUSE_S) is None   # counted from 1.6, not 0.0
    assert c.why_pause(1.7 + LEADERLESS_PAUSE_S) is not None


def test_the_survivors_of_a_leader_lost_do_not_pause_while_they_elect_on_a_busy_machine():
    # the leader's link goes at 0; a survivor campaigns at its election time-out, a split vote
    # costs a second round, and each step may be noticed a tick late: two survivors that paused
    # then would stop their mirrors, and the lost leader's mirrored masters would have no
    # synchronised mirror left to promote
    election = 2 * RAFT_MAX_TIMEOUT_S + 4 * TICK_S
    c = PauseClock()
    c.observe(0.0, majority=True, leader_contact=False)
    c.observe(election, majority=True, leader_contact=False)
    assert c.why_pause(election) is None
    c.observe(election + 0.01, majority=True, leader_contact=True)
    assert c.why_pause(election + LEADERLESS_PAUSE_S) is None


def test_reset_forgets_both_clocks():
    c = PauseClock()
    c.observe(0.0, majority=False, leader_contact=False)
    c.reset()
    assert c.why_pause(100.0) is None


def test_the_leader_marks_down_only_after_down_after_s_and_after_leading_lease_s():
    assert not may_mark_down(100.0, last_seen=0.0, leading_since=None)  # not the leader
    assert not may_mark_down(100.0, last_seen=100.0 - DOWN_AFTER_S, leading_since=0.0)
    assert may_mark_down(100.0, last_seen=100.0 - DOWN_AFTER_S - 0.01, leading_since=0.0)
    # a new leader whose link to the member is long gone still waits LEASE_S: a deposed
    # leader (the member) may not know it yet and serve
    assert not may_mark_down(100.0, last_seen=0.0, leading_since=100.0 - LEASE_S)
    assert may_mark_down(100.0, last_seen=0.0, leading_since=100.0 - LEASE_S - 0.01)


def _paused_by(clock_events, until: float) -> float | None:
    """Replay (time, majority, contact) observations at every tick up to `until`; the first
    tick at which the node pauses."""
    c = PauseClock()
    events = sorted(clock_events)
    state = events[0][1:]
    t = 0.0
    while t <= until:
        for at, majority, contact in events:
            if at <= t:
                state = (majority, contact)
        c.observe(t, *state)
        if c.why_pause(t):
            return t
        t += TICK_S
    return None


def test_a_follower_cut_from_the_leader_pauses_before_the_leader_may_mark_it_down():
    # cut at 0: the follower forgets its leader at its election time-out (at the latest) and
    # keeps a majority through the bridge; the leader sees the link up until the connection
    # time-out, its tick noting it up to TICK_S before
    paused = _paused_by([(0.0, True, True), (RAFT_MAX_TIMEOUT_S, True, False)], until=30)
    last_seen = CONNECTION_TIMEOUT_S - TICK_S
    first_mark = next(t / 100 for t in range(0, 3000) if may_mark_down(t / 100, last_seen,
                                                                       -100.0))
    assert paused is not None and paused < first_mark


def test_a_deposed_leader_pauses_before_the_new_leader_may_mark_it_down():
    # the new leader is elected at 0; the old one, the master's node, stays a leader in its own
    # eyes until LEADER_FALLBACK_S (the voters stopped answering it by then), and one of its
    # followers keeps it up to RAFT_MAX_TIMEOUT_S longer
    for lost in (LEADER_FALLBACK_S, LEADER_FALLBACK_S + RAFT_MAX_TIMEOUT_S):
        paused = _paused_by([(0.0, True, True), (lost, True, False)], until=30)
        first_mark = next(t / 100 for t in range(0, 3000) if may_mark_down(t / 100, -100.0,
                                                                           0.0))
        assert paused is not None and paused < first_mark, (lost, paused, first_mark)


def test_check_leases_holds_for_the_shipped_constants():
    pause.check_leases()


def test_a_follower_that_heard_its_leader_lately_ignores_vote_requests():
    from actors.core.pause import RAFT_MIN_TIMEOUT_S, ignores_vote_request
    assert ignores_vote_request(10.0, 10.0 - RAFT_MIN_TIMEOUT_S / 2, leading=False)
    assert not ignores_vote_request(10.0, 10.0 - RAFT_MIN_TIMEOUT_S, leading=False)  # gone quiet
    assert not ignores_vote_request(10.0, None, leading=False)  # no leader: an election is due
    # a leader takes them: a member whose term rose while cut off rejoins only through one
    assert not ignores_vote_request(10.0, 10.0, leading=True)
