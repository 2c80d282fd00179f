"""src-delete-after: how many messages a shovel still moves before it deletes itself
(rabbit_shovel_behaviour's `remaining` and `remaining_unacked`).

`never` moves forever; `queue-length` the source queue's message count when the shovel
connected (a passive queue.declare); a number, that many. `remaining_unacked` counts
publishes, `remaining` settled ones (confirmed with on-confirm, published otherwise): with
on-confirm, deliveries past the count wait unpublished and are requeued when the shovel
closes its source. Pure.
"""

from __future__ import annotations


class Countdown:
    def __init__(self, limit: int | None):
        self.remaining = limit  # settled messages still to move (None: unlimited)
        self.remaining_unacked = limit  # publishes still allowed (None: unlimited)

    @classmethod
    def of(cls, delete_after, queue_length: int | None) -> "Countdown":
        """`delete_after` as the parameter gives it; `queue_length`: the source queue's
        message count at connection (for queue-length)."""
        if delete_after == "never":
            return cls(None)
        if delete_after == "queue-length":
            return cls(int(queue_length or 0))
        return cls(int(delete_after))

    @property
    def finished(self) -> bool:
        """Nothing left to move: the shovel deletes itself."""
        return self.remaining is not None and self.remaining <= 0

    def may_publish(self) -> bool:
        return self.remaining_unacked is None or self.remaining_unacked > 0

    def published(self) -> None:
        if self.remaining_unacked:
            self.remaining_unacked -= 1

    def settled(self, n: int) -> bool:
        """`n` more messages are done; True once the count is reached."""
        if self.remaining is None or n <= 0:
            return False
        self.remaining -= n
        return self.remaining <= 0
