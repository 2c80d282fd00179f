"""The metadata actor's group commit of its changes (pure: no I/O).

RabbitMQ commits each declare as one mnesia transaction; Leveret's metadata actor used to
broadcast every change list to every worker as a `MetaChange` of its own and rewrite the
durable definitions after each one: a declare made two change lists, so 10,000 declares meant
20,000 broadcasts to each worker, 20,000 `MetaApplied` back from each, and (durable queues)
10,000 synced rewrites. The feed collects the change lists the actor makes while it drains its
mailbox, and the actor hands them out once at the end of the drain: one `MetaChange` per
worker carrying every list in order, one rewrite of the definitions when any of them touched
what is stored, then the `StartQueue`s those changes called for.

What the actor must keep (actors/node/metadata.py): a reply that depends on a change leaves
only after the batch holding it went out (and was persisted); any other message to a worker
goes after the pending batch (`Metadata._to_worker` flushes first), so a worker still sees
changes and control messages in the order they were decided. A deferred `StartQueue` moves
past the later changes of other queues only: when a later change of the drain puts or deletes
the queue it starts, its worker's `MetaChange` is cut there (`FeedBatch.sends`), so that the
worker starts the queue (a mirror, a master) on the definition it was decided on and then
applies what came after, as when each change list went out alone (a mirror started, then
stopped by the change that no longer lists this node).
"""

from __future__ import annotations

from typing import NamedTuple

from actors.messages import MetaChange


class Deferred(NamedTuple):
    """A message for one worker held behind the changes decided before it."""
    at: int  # how many of the batch's changes were decided before it
    version: int  # the metadata version after those
    control: str  # the worker's control address
    msg: object  # the message (a StartQueue)
    key: tuple | None  # (vhost, name) of the queue it starts: later changes of it come after


class FeedBatch(NamedTuple):
    """What one drain decided, handed out at its end."""
    changes: list  # every change of the drain, in the order applied
    version: int  # the metadata version after the last of them
    durable: bool  # one of them alters the stored definitions: persist before anything goes
    after: list  # Deferred, in the order deferred

    def sends(self, controls) -> list:
        """(control address, message) in the order to send them: to each worker of `controls`,
        the changes as one MetaChange, cut before the first change that comes after one of its
        StartQueues and puts or deletes that queue (the StartQueue goes at the cut); then, to
        each, its other StartQueues; StartQueues for any other control last."""
        last: dict = {}  # queue key -> index of the batch's last change of it
        for i, c in enumerate(self.changes):
            key = queue_key(c)
            if key is not None:
                last[key] = i
        whole = MetaChange(self.changes, self.version) if self.changes else None
        by_control: dict = {}
        for d in self.after:
            by_control.setdefault(d.control, []).append(d)
        out, tails = [], []
        for control in controls:
            sent = 0
            for d in by_control.pop(control, ()):
                if last.get(d.key, -1) < d.at:
                    tails.append((control, d.msg))
                    continue
                if d.at > sent:  # (starts come in the order deferred: `at` never decreases)
                    out.append((control, MetaChange(self.changes[sent:d.at], d.version)))
                    sent = d.at
                out.append((control, d.msg))
            if sent == 0 and whole is not None:
                out.append((control, whole))
            elif sent < len(self.changes):  # (a cut leaves changes after it: `last` >= at)
                out.append((control, MetaChange(self.changes[sent:], self.version)))
        out.extend(tails)
        for rest in by_control.values():
            out.extend((d.control, d.msg) for d in rest)
        return out


def queue_key(change) -> tuple | None:
    """(vhost, name) of the queue a change puts or deletes; None for any other change."""
    if change[0] == "queue_put":
        return change[1]["vhost"], change[1]["name"]
    if change[0] == "queue_del":
        return change[1], change[2]
    return None


class ChangeFeed:
    """Change lists and deferred worker messages since the last `take`."""

    __slots__ = ("_changes", "_version", "_durable", "_after", "batches")

    def __init__(self):
        self._changes: list = []  # the change lists' changes, concatenated in order
        self._version = 0  # the version after the last change list added
        self._durable = False  # a change list added touches the stored definitions
        self._after: list = []  # Deferred, behind the changes added before each
        self.batches = 0  # batches taken (the actor's count of its broadcasts)

    @property
    def pending(self) -> bool:
        """Something waits to be handed out."""
        return bool(self._changes or self._after)

    def add(self, changes: list, version: int, durable: bool) -> bool:
        """One change list the actor applied (at `version`); True when it is the first since
        the last take (the actor then arranges a flush at the end of its drain)."""
        first = not self.pending
        self._changes.extend(changes)
        self._version = version
        self._durable = self._durable or durable
        return first

    def defer(self, control: str, msg, key: tuple | None = None) -> bool:
        """A message for a worker that follows the changes added so far (a StartQueue of the
        queue `key`); True when it is the first pending item (a flush must be arranged)."""
        first = not self.pending
        self._after.append(Deferred(len(self._changes), self._version, control, msg, key))
        return first

    def take(self) -> FeedBatch | None:
        """What is pending, cleared; None when nothing is."""
        if not self.pending:
            return None
        batch = FeedBatch(self._changes, self._version, self._durable, self._after)
        self._changes, self._durable, self._after = [], False, []
        self.batches += 1
        return batch
