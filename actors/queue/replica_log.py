"""What a queue's mirror (classic mirrored queue) or member (quorum queue) writes to the event
log: each message it takes from its master (`replica_enqueued`), each one the master tells it
left the queue (`replica_settled`), and every time it discards what it holds at once
(`replica_dropped`: a resync, a classic mirror's start, a purge, the queue or the member
gone).

RabbitMQ's mirrors log nothing per message; Leveret's analysis needs to know which messages a
promoted replica held (docs/events.md, "Replicas and promotions"): a copy its master had and
the promoted replica did not is gone with the deposed master.

Each event names the replica's log (`replica_log`): a classic mirror's lives as long as its
actor, a quorum member's as long as its log on disk (a restarted member that keeps its log keeps
the name, which its marker holds: actors/store/quorum_log.py). A drop ends only the log it
names, so the late `removed` drop of an old replica cannot end what a newer one on the same
node took; a drop that names no log (a replica starting on a node where an earlier one may have
left messages) ends every earlier log of that node.

Pure: the Mirror actor (actors/queue/mirror.py) owns one and injects the event log.
"""

from __future__ import annotations

import os
from typing import NamedTuple

MIRROR, MEMBER = "mirror", "member"  # `role`: a classic queue's mirror, a quorum queue's member


def new_log_id() -> str:
    """A name for a replica's log that starts empty (64 random bits, hex)."""
    return os.urandom(8).hex()


class _Held(NamedTuple):
    """What the replica log keeps of a message the replica holds."""
    msg_id: bytes  # the event log's id, which its replica_settled names
    priority: int  # its priority: a purge of the master's paged part names one


class ReplicaLog:
    """One replica's events, and the msg_id of each seq_id it holds (kept while events are on
    only: a settle names the message, which the master's forget gives by seq_id alone)."""

    def __init__(self, events, vhost: str, queue: str, role: str, log_id: str | None = None):
        self.events = events  # the event log (actors.events in the actor), injected
        self.vhost, self.queue = vhost, queue  # the queue replicated
        self.role = role  # MIRROR or MEMBER
        self.ids: dict[int, _Held] = {}  # seq_id -> what it holds
        self.log_id = log_id or new_log_id()  # the log its events name (kept one, or new)

    def took(self, items, epoch: int) -> None:
        """Messages from the master (MirrorPublish's MirrorItems), live or part of a sync."""
        if not self.events.enabled():
            return
        emit = self.events.emit
        for item in items:
            msg_id = item.msg_id
            if not msg_id:
                continue
            self.ids[item.seq_id] = _Held(msg_id, item.priority or 0)
            emit("replica_enqueued", msg_id, actor="mirror", vhost=self.vhost,
                 queue=self.queue, role=self.role, seq_id=item.seq_id, epoch=epoch,
                 replica_log=self.log_id)

    def settled(self, seq_ids) -> None:
        """The master says these left the queue (acked, expired, dropped, dead-lettered)."""
        if not self.events.enabled():
            return
        for seq in seq_ids:
            held = self.ids.pop(seq, None)
            if held is not None:
                self.events.emit("replica_settled", held.msg_id, actor="mirror", vhost=self.vhost,
                                 queue=self.queue, role=self.role, seq_id=seq,
                                 replica_log=self.log_id)

    def purged(self, after_seq: int, priority: int, epoch: int) -> None:
        """The master purged its paged-out messages of a priority after `after_seq`."""
        if not self.events.enabled():
            return
        gone = [s for s, h in self.ids.items() if s > after_seq and h.priority == priority]
        for s in gone:
            del self.ids[s]
        self.events.emit("replica_dropped", None, actor="mirror", vhost=self.vhost,
                         queue=self.queue, role=self.role, reason="purged", count=len(gone),
                         epoch=epoch, replica_log=self.log_id)

    def dropped(self, reason: str, epoch: int) -> None:
        """Everything this replica held is gone (`reason`: `resync`, `removed`): a later
        promotion of it holds none of what its log took before; what it takes next goes into
        a new log."""
        dropped_log, self.log_id = self.log_id, new_log_id()
        if not self.events.enabled():
            return
        n = len(self.ids)
        self.ids.clear()
        self.events.emit("replica_dropped", None, actor="mirror", vhost=self.vhost,
                         queue=self.queue, role=self.role, reason=reason, count=n,
                         epoch=epoch, replica_log=dropped_log)

    def started_empty(self, epoch: int) -> None:
        """This replica starts without a log of the queue that counts (a classic mirror always,
        a quorum member without a complete one): whatever an earlier replica on this node
        took is gone, whichever log it was in (the event names none)."""
        if not self.events.enabled():
            return
        self.events.emit("replica_dropped", None, actor="mirror", vhost=self.vhost,
                         queue=self.queue, role=self.role, reason="restart", count=0,
                         epoch=epoch)
