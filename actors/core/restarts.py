"""Restart intensity: how an OTP supervisor decides between restarting a child and giving up.

Mirrors the bookkeeping of OTP's `supervisor` (its `intensity` and `period` flags, as
rabbit_amqqueue_sup sets {5, 10} for a classic queue and rabbit_sup for the node's children):
a child may exit abnormally at most `max_restarts` times within `period` seconds; one more exit
within that window and the supervisor gives up on it. Pure: the caller passes the clock in, so
the node's worker supervision and the queue worker's QueueHost share it, tested without sockets.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field


@dataclass
class RestartIntensity:
    """One supervised child's recent exits: restart it, or give up."""

    max_restarts: int  # restarts allowed within `period` (OTP's intensity)
    period: float  # seconds
    # monotonic times of the exits still within the window, oldest first
    exits: collections.deque = field(default_factory=collections.deque)

    def exited(self, now: float) -> bool:
        """The child exited abnormally at `now`: True to restart it, False to give up (more
        than `max_restarts` exits within `period`, counting this one)."""
        self.exits.append(now)
        while self.exits and now - self.exits[0] > self.period:
            self.exits.popleft()
        return len(self.exits) <= self.max_restarts

    def reset(self) -> None:
        """Forget every exit (the child was deleted and is declared afresh)."""
        self.exits.clear()
