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

from typing import Mapping, Sequence

from actors.core.quorum import majority

__all__ = ["cluster_size", "committed_offset", "common_prefix"]


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
