"""Replicated streams: the pure rules of who holds what, and what is committed.

Mirrors what osiris decides between its writer (the leader) and its replicas, on Leveret's
quorum-queue machinery (actors/core/quorum.py: members placed as mirrors, a leader elected
by the longest log among a majority):
  * how many members a stream has (``rabbit_stream_queue``'s ``initial_cluster_size``: the
    argument, else every node of the cluster, at most the cluster's size);
  * the committed offset: the end of the log a majority of the members (the leader
    included) has written and synced (osiris' commit offset), which is when a publish is
    confirmed and how far consumers read;
  * where a joining member's log stops matching the leader's (osiris' ``overview``: each
    epoch's last offset in the log), so that it truncates to a prefix of the leader's log
    before it appends the leader's chunks, at the leader's offsets.

Pure: no I/O; the members are actors/queue/stream_queue.py (leader) and
actors/queue/stream_member.py (the others).
"""

from __future__ import annotations

from collections import deque
from typing import Mapping, Sequence

from actors.core.quorum import majority

__all__ = ["cluster_size", "committed_offset", "common_prefix", "Member", "Replicas"]


def cluster_size(args: Mapping | None, cluster_nodes: int,
                 policy: Mapping | None = None) -> int:
    """A stream's members (leader included) when it is declared: the policy's
    ``initial-cluster-size``, else x-initial-cluster-size (rabbit_stream_queue's
    policy_precedence/2), else every node of the cluster (RabbitMQ's default), at least 1
    and at most the cluster's node count (1 on a lone node)."""
    nodes = max(1, cluster_nodes)
    n = (policy or {}).get("initial-cluster-size")
    if isinstance(n, bool) or not isinstance(n, int):
        n = (args or {}).get("x-initial-cluster-size")
    if isinstance(n, bool) or not isinstance(n, int):
        n = nodes
    return max(1, min(n, nodes))


def committed_offset(leader_next: int, acked: Mapping[str, int], size: int) -> int:
    """The end (next offset) of the log a majority of a stream's ``size`` members hold:
    the leader's ``leader_next`` and each member's acknowledged end (a member acknowledges
    only a prefix of the leader's log of this epoch). A member that has not acknowledged
    anything is not in ``acked``; fewer acknowledgements than a majority needs: -1."""
    ends = sorted([leader_next, *acked.values()], reverse=True)
    need = majority(size)
    if len(ends) < need:
        return -1
    return ends[need - 1]


def common_prefix(mine: Sequence, leader: Sequence) -> int:
    """How much of a member's log is a prefix of the leader's: ``mine`` and ``leader`` are
    overviews, ``[(epoch, last offset of that epoch's chunks), ...]`` in log order (a chunk's
    epoch is that of the leader that took its publishes). Chunks of one epoch were written
    by that epoch's leader in one order, so two logs that both hold chunks of epoch e agree
    up to the shorter run of e, and above the highest epoch both hold they agree on nothing
    (Raft's log matching). -> the offset the member keeps its log below."""
    theirs = dict((int(e), int(last)) for e, last in leader)
    best = 0
    for e, last in mine:
        if int(e) in theirs:
            best = min(int(last), theirs[int(e)]) + 1
    return best


class Member:
    """The leader's view of one member of a replicated stream."""

    __slots__ = ("member", "start", "sent", "acked", "caught_up_at", "synced", "inflight",
                 "inflight_bytes")

    def __init__(self, member: str, start: int, caught_up_at: int):
        self.member = member  # its cluster member id
        self.start = start  # where its log matched ours when it joined
        self.sent = start  # the offset the next chunk sent to it starts at
        self.acked = -1  # the end of its log it acknowledged (-1: nothing yet)
        self.caught_up_at = caught_up_at  # our log's end when it joined: once it holds that
        self.synced = False  # it holds what we held when it joined (told once)
        self.inflight: deque = deque()  # (end offset, body bytes) of what was sent, not acked
        self.inflight_bytes = 0  # their body bytes


class Replicas:
    """A replicated stream's leader side: its members, what each was sent and holds, the
    committed offset, and the confirms waiting for it. ``size`` is the stream's member count
    (leader included); the leader's own log end is passed in, never kept here."""

    def __init__(self, size: int, epoch: int, overview: list, committed: int):
        self.size = size  # members, the leader included
        self.epoch = epoch  # the leader's epoch: chunks it writes carry it
        self.overview = overview  # our log's [[epoch, last offset], ...]
        self.committed = committed  # the end a majority holds
        self.members: dict[str, Member] = {}  # member address -> its state
        self.waiting: deque = deque()  # (end offset, what to confirm) for a majority

    def __bool__(self):
        return bool(self.members)

    def join(self, addr: str, member: str, overview: Sequence, first: int, end: int) -> int:
        """A member (re)joins with its log's overview; our log holds [first, end). -> the
        offset it keeps its log below (0: all of it goes, what matched is gone here)."""
        keep = min(common_prefix(overview, self.overview), end)
        if keep < first:
            keep = 0
        self.members[addr] = Member(member, max(keep, first), end)
        return keep

    def gone(self, endpoint: str) -> None:
        """The members in a process that died are no longer sent anything."""
        for addr in [a for a in self.members if a.startswith(endpoint + "#")]:
            del self.members[addr]

    def due(self, end: int, window: int, window_bytes: int) -> list:
        """[(address, offset)] of the members to send chunks from ``offset`` now: behind our
        log's ``end``, with fewer than ``window`` offsets and ``window_bytes`` body bytes
        sent and not acknowledged."""
        return [(a, st.sent) for a, st in self.members.items()
                if st.sent < end and st.sent - max(st.acked, st.start) < window
                and st.inflight_bytes < window_bytes]

    def sent(self, addr: str, upto: int, nbytes: int) -> None:
        st = self.members[addr]
        st.sent = upto
        st.inflight.append((upto, nbytes))
        st.inflight_bytes += nbytes

    def written(self, first: int, end: int, confirms) -> None:
        """Our log took [first, end) in this epoch; ``confirms`` wait for a majority."""
        if self.overview and self.overview[-1][0] == self.epoch:
            self.overview[-1][1] = end - 1
        else:
            self.overview.append([self.epoch, end - 1])
        if confirms:
            self.waiting.append((end, confirms))

    def acked(self, addr: str, epoch: int, upto: int) -> str | None:
        """A member holds our log below ``upto`` -> its member id the first time it holds all
        our log held when it joined (its log counts in an election from then on), else None."""
        st = self.members.get(addr)
        if st is None or epoch != self.epoch:
            return None
        st.acked = max(st.acked, upto)
        while st.inflight and st.inflight[0][0] <= st.acked:
            st.inflight_bytes -= st.inflight.popleft()[1]
        if not st.synced and st.acked >= st.caught_up_at:
            st.synced = True
            return st.member
        return None

    def commit(self, end: int) -> list:
        """Our log's end is ``end``: move the committed offset -> the confirms now due."""
        acked = {a: st.acked for a, st in self.members.items() if st.acked >= 0}
        upto = committed_offset(end, acked, self.size)
        out = []
        if upto > self.committed:
            self.committed = upto
            while self.waiting and self.waiting[0][0] <= upto:
                out.append(self.waiting.popleft()[1])
        return out
