"""Hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014): the time every
lifecycle event carries, so that the analysis orders causally related events of two processes
or two hosts (publish -> enqueue on a remote master -> confirm) without trusting their clocks
to agree.

A stamp is an int of nanoseconds: the process's physical time (its monotonic clock mapped onto
the wall clock with one offset for every process of a node, so it never steps back and the
node's processes agree to the nanosecond) unless a message from a process whose clock runs
ahead pushed it further; the logical counter is folded into the low digits (+1 ns). What holds:
- a process's events have increasing stamps, and each is above every stamp it received before;
- a message's stamp (actors/transport.py stamps what it sends to another process while events
  are on, and observes what it receives) is larger than every event's stamp before the send;
so an event that happened before another, through any chain of messages, has a smaller stamp.
How far the stamps ran ahead of a process's own physical time is the clock skew it saw; the
analysis reports the largest (spark_analysis: `clock_lead_ns`).

`floor` (what was sent or received) moves only under the lock, so a receive is never undone;
`last` (the last event's stamp) is written by events without it: two threads racing there can
at worst give two events one stamp, never put an event before a message it follows.

No RabbitMQ counterpart: Erlang's distribution carries no clock. Sans-IO: clocks injected.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["HybridClock", "OFFSET_ENV", "clock", "set_skew", "share_offset"]

OFFSET_ENV = "LEVERET_CLOCK_OFFSET_NS"  # the node's monotonic -> wall offset, for its workers


def _inherited_offset():
    try:
        return int(os.environ[OFFSET_ENV])
    except (KeyError, ValueError):
        return None


class HybridClock:
    """One process's clock, shared by its threads."""

    def __init__(self, wall_ns=time.time_ns, mono_ns=time.monotonic_ns, offset=None):
        self.mono_ns = mono_ns  # () -> the monotonic clock in ns
        # monotonic -> wall, read once (never steps back), or the node's (OFFSET_ENV)
        self.offset = wall_ns() - mono_ns() if offset is None else offset
        self.floor = 0  # the largest stamp sent or received so far (moved under the lock)
        self.last = 0  # the last event's stamp
        self.lock = threading.Lock()  # sends and receives

    def physical(self) -> int:
        return self.mono_ns() + self.offset

    def at(self, mono: int) -> int:
        """The stamp of a local event whose monotonic time is `mono`."""
        t = mono + self.offset
        floor, last = self.floor, self.last
        if t <= last:
            t = last + 1
        if t <= floor:
            t = floor + 1
        self.last = t
        return t

    def send(self) -> int:
        """The stamp of a message sent: larger than every event's stamp before it."""
        t = self.physical()
        with self.lock:
            stamp = max(t, self.floor, self.last) + 1
            self.floor = stamp
        return stamp

    def observe(self, remote: int) -> None:
        """A message received with stamp `remote`: every later event's stamp is above it."""
        with self.lock:
            if remote > self.floor:
                self.floor = remote


_clock = HybridClock(offset=_inherited_offset())  # this process's clock


def share_offset() -> None:
    """The node, before it starts workers: they map their monotonic clock with its offset, so
    the stamps of one node's processes agree (and latencies between them stay exact)."""
    os.environ[OFFSET_ENV] = str(_clock.offset)


def clock() -> HybridClock:
    return _clock


def set_skew(skew_ns: int) -> None:
    """Run this process's physical time `skew_ns` off the machine's: only the test-only clock
    skew of actors/faults.py calls it, to stand for a host whose clock is wrong."""
    global _clock
    _clock = HybridClock(lambda: time.time_ns() + skew_ns)
