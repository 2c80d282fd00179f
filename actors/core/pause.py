"""pause_minority's clocks (pure): when a node must pause, and when the Raft leader may mark a
member down (which promotes the mirrors of that member's masters).

Mirrors `rabbit_node_monitor`'s pause_minority, including its answer to a *partial* partition
(a node that sees some members but not the others: "We will therefore pause until the *entire*
cluster recovers"), on Leveret's Raft log instead of Erlang distribution. One master per queue
at any time rests on leases, two inequalities between these clocks:

1. A node serves (its queue masters deliver) only while it is in contact with a leader: it
   leads with live Raft links to a majority, or it follows a leader it has a live Raft link to.
   Reaching a majority is not enough: in a bridge (A-B and B-C connected, A-C cut) A reaches a
   majority through B while the leader C marks it down and promotes its mirrors; A's next
   entry from the log would tell it so, but A hears nothing from C. So a node pauses after
   PAUSE_AFTER_S without a majority, or LEADERLESS_PAUSE_S without a leader's contact (longer:
   an ordinary election after a leader dies takes up to RAFT_MAX_TIMEOUT_S and a round).
2. The leader marks a member down only once (a) its own Raft link to it has been gone
   DOWN_AFTER_S and (b) it has led for LEASE_S. (a) covers a follower cut from the leader: it
   loses the leader's contact at its next election time-out, at most RAFT_MAX_TIMEOUT_S after
   the cut, and pauses LEADERLESS_PAUSE_S later (plus a tick of the metadata actor each time),
   while the leader sees the link "connected" for CONNECTION_TIMEOUT_S after the cut. (b)
   covers a deposed leader that does not know it yet: pysyncobj keeps it leader until it has
   had no answer from a majority for LEADER_FALLBACK_S, and the members that elected the new
   leader stopped answering it no later than that election; a follower of that deposed leader
   keeps it as its leader up to RAFT_MAX_TIMEOUT_S longer; then LEADERLESS_PAUSE_S. A leader
   that marked a member down on its own clock alone could promote a mirror while the old
   master, still a leader in its own eyes, delivers.

`check_leases()` states both inequalities; tests/unit/core/test_pause.py checks them and the
clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAUSE_AFTER_S", "LEADERLESS_PAUSE_S", "DOWN_AFTER_S", "LEASE_S", "TICK_S",
           "RAFT_MAX_TIMEOUT_S", "CONNECTION_TIMEOUT_S", "LEADER_FALLBACK_S", "PauseClock",
           "RAFT_MIN_TIMEOUT_S", "may_mark_down", "ignores_vote_request", "check_leases"]

# pysyncobj's settings (actors/node/cluster.py passes these very values)
RAFT_MIN_TIMEOUT_S = 0.5  # raftMinTimeout: the shortest election time-out
RAFT_MAX_TIMEOUT_S = 1.2  # raftMaxTimeout: a follower without news of its leader campaigns
CONNECTION_TIMEOUT_S = 2.0  # connectionTimeout: a link silent this long is closed
LEADER_FALLBACK_S = 2.0  # leaderFallbackTimeout: a leader without a majority's answers steps down
TICK_S = 0.25  # the metadata actor's cluster tick (actors/node/node.py), how late it may notice

PAUSE_AFTER_S = 1.0  # without live Raft links to a majority this long: pause
LEADERLESS_PAUSE_S = 4.0  # without a leader's contact this long: pause (an election after the
#                            leader's loss, a split vote and a round again, on a busy machine)
DOWN_AFTER_S = 5.0  # the leader's link to a member gone this long: it may be marked down
LEASE_S = 9.0  # ... and only by a leader that has led this long


def check_leases() -> None:
    """The two inequalities of the module docstring (raises AssertionError if the constants
    break them); the margin is the time a pause takes to stop the masters, a few ms."""
    pause_late = 2 * TICK_S + LEADERLESS_PAUSE_S  # noticed a tick late, paused a tick late
    # (a) cut at 0: the follower pauses by RAFT_MAX_TIMEOUT_S + pause_late; the leader's link
    # looks up until CONNECTION_TIMEOUT_S (seen at a tick), then DOWN_AFTER_S
    assert RAFT_MAX_TIMEOUT_S + pause_late < CONNECTION_TIMEOUT_S - TICK_S + DOWN_AFTER_S
    # (b) elected at 0: the old leader steps down by LEADER_FALLBACK_S (its followers drop it
    # by RAFT_MAX_TIMEOUT_S later), then pauses; the new leader waits LEASE_S
    assert LEADER_FALLBACK_S + RAFT_MAX_TIMEOUT_S + pause_late < LEASE_S


@dataclass
class PauseClock:
    """Since when this node has lacked a majority and a leader's contact (None: it has it)."""

    minority_since: float | None = None  # monotonic time it lost its majority
    leaderless_since: float | None = None  # monotonic time it lost the leader's contact

    def observe(self, now: float, majority: bool, leader_contact: bool) -> None:
        if majority:
            self.minority_since = None
        elif self.minority_since is None:
            self.minority_since = now
        if leader_contact:
            self.leaderless_since = None
        elif self.leaderless_since is None:
            self.leaderless_since = now

    def reset(self) -> None:
        self.minority_since = self.leaderless_since = None

    def why_pause(self, now: float) -> str | None:
        """Why this node must pause now (None: it may serve)."""
        if self.minority_since is not None and now - self.minority_since > PAUSE_AFTER_S:
            return "it cannot reach a majority of the cluster's members"
        if self.leaderless_since is not None and \
                now - self.leaderless_since > LEADERLESS_PAUSE_S:
            return ("it has no contact with a cluster leader (a partial partition: it may "
                    "reach a majority through a member that also reaches the leader)")
        return None


def may_mark_down(now: float, last_seen: float, leading_since: float | None) -> bool:
    """May the leader mark down a member whose Raft link it last saw up at `last_seen`, having
    led since `leading_since` (None: it does not lead)?"""
    return leading_since is not None and now - last_seen > DOWN_AFTER_S \
        and now - leading_since > LEASE_S


def ignores_vote_request(now: float, heard_leader_at: float | None, leading: bool) -> bool:
    """A follower that heard from its current leader at `heard_leader_at` (None: it has none)
    ignores a vote request (neither takes its term nor votes) within the minimum election
    time-out: Raft's rule against disruptive servers (Ongaro's thesis, 4.2.3). Without it a
    member cut from the leader but reaching another (a bridge) deposes a working leader with
    each campaign: its higher term makes the bridge drop the leader. A leader does take the
    request: a member whose term went up while it was cut off would otherwise never rejoin (it
    ignores the lower term's append_entries), so each heal of such a cut costs one election."""
    return not leading and heard_leader_at is not None and \
        now - heard_leader_at < RAFT_MIN_TIMEOUT_S


check_leases()
