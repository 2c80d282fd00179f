"""A queue's ready messages by priority, without IO: rabbit_priority_queue.erl's part of a
queue (x-max-priority; a queue without it has one priority, 0).

`PriorityLanes` owns one `Ready` per priority (actors/core/paging.py: the head in memory and
the tail behind that priority's paged part), the counts of what they hold, the clamp of a
message's priority to the queue's maximum, and the order in which priorities are served: the
next message delivered, fetched or dropped by drop-head is the oldest of the highest priority
that has any, in memory or paged out (rabbit_priority_queue takes from, and drops from, its
highest non-empty sub-queue). QueueCore (actors/core/queue.py) decides what enters and leaves.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from actors.core.paging import Ready

MAX_PRIORITY = 255  # x-max-priority above this is taken as this (RabbitMQ's limit)


def max_priority_of(value) -> int:
    """x-max-priority (an int, or None when absent or not a number) -> the highest priority
    of the queue, 0 when it has no priorities."""
    return min(value, MAX_PRIORITY) if value else 0


class PriorityLanes:
    """The ready messages (Msg, with `priority`, `body`, `seq_id`, `expires_at`) of every
    priority, and how many of them and their body bytes there are."""

    __slots__ = ("max_priority", "lanes", "count", "nbytes")

    def __init__(self, max_priority: int):
        self.max_priority = max_priority  # 0..MAX_PRIORITY, 0 = not a priority queue
        self.lanes = [Ready() for _ in range(max_priority + 1)]  # Ready, by priority
        self.count = 0  # messages ready, heads and tails
        self.nbytes = 0  # their body bytes

    def clamp(self, priority) -> int:
        """A publisher's priority (None: none) as the queue keeps it: above its maximum counts
        as the maximum (rabbit_priority_queue), none as 0."""
        return min(priority or 0, self.max_priority)

    # --- in and out -----------------------------------------------------------------------------
    def push(self, msg) -> None:
        """A message at the end of its priority's head (deliverable in its turn)."""
        self.lanes[msg.priority].items.append(msg)  # (the deque itself: once per message)
        self.count += 1
        self.nbytes += len(msg.body)

    def push_behind(self, msg) -> None:
        """A message at the end of its priority's tail (behind that priority's paged part)."""
        self.lanes[msg.priority].tail.append(msg)
        self.count += 1
        self.nbytes += len(msg.body)

    def pop(self, p: int):
        """The head message of priority p (it has one)."""
        msg = self.lanes[p].items.popleft()
        self.count -= 1
        self.nbytes -= len(msg.body)
        return msg

    def pop_tail(self, p: int):
        """The oldest message of priority p's tail (it has one)."""
        msg = self.lanes[p].tail.popleft()
        self.count -= 1
        self.nbytes -= len(msg.body)
        return msg

    def take_tail(self, p: int) -> deque:
        """Every message of priority p's tail, taken out of the counts (it goes paged out)."""
        ready = self.lanes[p]
        tail, ready.tail = ready.tail, deque()
        self.count -= len(tail)
        self.nbytes -= sum(len(msg.body) for msg in tail)
        return tail

    def requeue(self, msgs: list) -> None:
        """Returned messages back at their original positions, each in its priority."""
        by_p: dict[int, list] = {}
        for msg in msgs:
            by_p.setdefault(msg.priority, []).append(msg)
            self.count += 1
            self.nbytes += len(msg.body)
        for p, group in by_p.items():
            self.lanes[p].requeue(group)

    def expired(self, now: int) -> list:
        """Takes out the expired messages at the heads (every priority: each head is the
        oldest of its priority) -> them."""
        gone = []
        for ready in self.lanes:
            items = ready.items  # (the deque itself: this runs before every delivery run)
            while items and items[0].expires_at and items[0].expires_at <= now:
                msg = items.popleft()
                self.count -= 1
                self.nbytes -= len(msg.body)
                gone.append(msg)
        return gone

    def remove(self, seq_ids: set) -> list:
        """Take these messages out wherever they are (heads and tails) -> those found."""
        gone = []
        for ready in self.lanes:
            for part in (ready.items, ready.tail):
                kept = [msg for msg in part if msg.seq_id not in seq_ids]
                if len(kept) != len(part):
                    for msg in part:
                        if msg.seq_id in seq_ids:
                            self.count -= 1
                            self.nbytes -= len(msg.body)
                            gone.append(msg)
                    part.clear()
                    part.extend(kept)
        return gone

    def clear(self) -> list:
        """Take every message out (a purge) -> them, each priority's in seq_id order."""
        gone = []
        for ready in self.lanes:
            gone.extend(ready.all())
            ready.items.clear()
            ready.tail.clear()
        self.count = self.nbytes = 0
        return gone

    # --- which priority is next -------------------------------------------------------------------
    def head_lane(self, paged_head: Callable[[int], bool]):
        """The priority whose head is next (the highest with messages, in memory, in its tail
        or paged out: `paged_head(p)`), None when there is none. A head not in memory
        (`not lanes[p]`) is waited for: a lower priority is never served before it."""
        lanes = self.lanes
        for p in range(len(lanes) - 1, -1, -1):
            ready = lanes[p]
            if ready.items or ready.tail or paged_head(p):
                return p
        return None

    # --- reading ----------------------------------------------------------------------------------
    def heads(self) -> list:
        """The head message in memory of each priority that has one."""
        return [ready.items[0] for ready in self.lanes if ready.items]

    def next_expiry(self) -> int | None:
        """The earliest expiry time of the heads in memory, None when none expires."""
        times = [r.peek().expires_at for r in self.lanes if r and r.peek().expires_at]
        return min(times) if times else None

    def messages(self) -> list:
        """Every ready message in memory, each priority's in seq_id order, lowest first."""
        return [msg for ready in self.lanes for msg in ready.all()]

    def tail_start(self, p: int) -> int | None:
        """The seq_id the tail of priority p starts at, None when it has none."""
        tail = self.lanes[p].tail
        return tail[0].seq_id if tail else None
