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
changes and control messages in the order they were decided. Only the `StartQueue`s deferred
here move past later changes of the same drain: they carry their own definition.
"""

from __future__ import annotations

from typing import NamedTuple


class FeedBatch(NamedTuple):
    """What one drain decided, handed out at its end."""
    changes: list  # every change of the drain, in the order applied
    version: int  # the metadata version after the last of them
    durable: bool  # one of them alters the stored definitions: persist before anything goes
    after: list  # (control address, message) to send once the changes went out, in order


class ChangeFeed:
    """Change lists and deferred worker messages since the last `take`."""

    __slots__ = ("_changes", "_version", "_durable", "_after", "batches")

    def __init__(self):
        self._changes: list = []  # the change lists' changes, concatenated in order
        self._version = 0  # the version after the last change list added
        self._durable = False  # a change list added touches the stored definitions
        self._after: list = []  # (control, message) deferred behind the changes
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

    def defer(self, control: str, msg) -> bool:
        """A message for a worker that may follow the drain's changes (a StartQueue); True
        when it is the first pending item (a flush must be arranged)."""
        first = not self.pending
        self._after.append((control, msg))
        return first

    def take(self) -> FeedBatch | None:
        """What is pending, cleared; None when nothing is."""
        if not self.pending:
            return None
        batch = FeedBatch(self._changes, self._version, self._durable, self._after)
        self._changes, self._durable, self._after = [], False, []
        self.batches += 1
        return batch
