"""The messages a stream's readers read lately, each already encoded as a delivery (its
``x-stream-offset`` header set, its Delivery fields after the consumer tag packed once).

The consumers of a fan-out read the same messages at about the same time but seldom at the
same offset in the same turn, so each read the log, re-encoded the header and packed each
delivery on its own: with ten consumers, that was most of the queue worker's time. Here each
message is read from the log and encoded once, and a reader's batch is a slice of what is
held: its cost per message is a copy, not Python. Held as runs of consecutive offsets (the
readers of a fan-out read near one another; one far behind makes a run of its own), bounded
by body bytes; what no reader will read again goes first. Pure: the StreamQueue actor owns
one.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable

COMPACT_AT = 4096  # emptied slots kept at a run's front before its lists are cut (a cut of
#                    the lists moves what stays: not once per turn)


class Run:
    """Messages at consecutive offsets: slot i (from `start`) is offset `lo` + i - `start`."""

    __slots__ = ("lo", "start", "tails", "bodies", "ends", "before")

    def __init__(self, lo: int):
        self.lo = lo  # the offset of slot `start`
        self.start = 0  # slots before it are dropped (cut from the lists in bulk)
        self.tails: list = []  # the encoded deliveries (what RecentReads' `encode` made)
        self.bodies: list = []  # their bodies
        self.ends: list = []  # body bytes of the run up to and including each slot
        self.before = 0  # body bytes of the slots cut from the lists' front

    @property
    def hi(self) -> int:
        """The offset after the run's last."""
        return self.lo + len(self.tails) - self.start

    def end_before(self, i: int) -> int:
        """The run's body bytes before slot i."""
        return self.ends[i - 1] if i else self.before

    @property
    def nbytes(self) -> int:
        return self.end_before(len(self.ends)) - self.end_before(self.start)

    def append(self, tail: bytes, body: bytes) -> None:
        self.tails.append(tail)
        self.bodies.append(body)
        self.ends.append(self.end_before(len(self.ends)) + len(body))

    def drop_below(self, offset: int) -> int:
        """Drop the slots below `offset` -> body bytes dropped."""
        n = min(offset - self.lo, len(self.tails) - self.start)
        if n <= 0:
            return 0
        start = self.start
        gone = self.ends[start + n - 1] - self.end_before(start)
        # (the bodies go now, whatever their size: only the slots wait for the cut)
        self.tails[start:start + n] = self.bodies[start:start + n] = [None] * n
        self.start += n
        self.lo += n
        if self.start >= COMPACT_AT:
            self.before = self.end_before(self.start)
            del self.tails[:self.start], self.bodies[:self.start], self.ends[:self.start]
            self.start = 0
        return gone


class RecentReads:
    def __init__(self, max_bytes: int, encode: Callable):
        self.max_bytes = max_bytes
        self.encode = encode  # a log's Message -> its delivery, encoded (bytes)
        self.runs: list[Run] = []  # oldest first
        self.nbytes = 0  # body bytes held

    def __len__(self) -> int:
        return sum(r.hi - r.lo for r in self.runs)

    def __bool__(self) -> bool:
        return bool(self.runs)

    def ends_at(self, offset: int) -> bool:
        """Whether a run ends just before ``offset`` (its readers will want it next)."""
        return any(r.hi == offset for r in self.runs)

    def take(self, position: int, limit: int, max_msgs: int, max_bytes: int) -> tuple:
        """(encoded deliveries, bodies) for the offsets from ``position`` on that are held,
        in a row, below ``limit``, at most ``max_msgs`` and about ``max_bytes`` of body (at
        least one); two empty lists if ``position`` is not held."""
        for r in self.runs:
            if r.lo <= position < r.hi:
                i = r.start + position - r.lo
                j = min(r.start + min(limit, r.hi) - r.lo, i + max_msgs)
                if j <= i:
                    break
                # the first slot whose bytes from `i` on reach `max_bytes` is the last taken
                j = min(j, bisect_left(r.ends, r.end_before(i) + max_bytes, i, j) + 1)
                return r.tails[i:j], r.bodies[i:j]
        return [], []

    def add(self, msgs: list) -> None:
        """Messages just read from the log (consecutive offsets), held from now on; those
        already held are not encoded again."""
        runs = self.runs
        k = 0
        while k < len(msgs):
            offset = msgs[k].offset
            run = next((r for r in runs if r.lo <= offset <= r.hi), None)
            if run is None:
                run = Run(offset)
                runs.append(run)
            elif offset < run.hi:  # held already
                while k < len(msgs) and run.lo <= msgs[k].offset < run.hi:
                    k += 1
                continue
            encode = self.encode
            while k < len(msgs) and msgs[k].offset == run.hi:
                x = msgs[k]
                run.append(encode(x), x.body)
                self.nbytes += len(x.body)
                k += 1

    def forget(self, low: int | None) -> None:
        """Drop what is below ``low`` (the lowest reader's position; None: no reader left),
        then the oldest runs while the bytes held are past the bound."""
        runs = self.runs
        if low is None:
            runs.clear()
            self.nbytes = 0
            return
        for r in runs:
            self.nbytes -= r.drop_below(low)
        runs[:] = [r for r in runs if r.hi > r.lo]
        while runs and self.nbytes > self.max_bytes:
            r = runs[0]
            if len(runs) > 1:
                self.nbytes -= r.nbytes
                runs.pop(0)
            else:  # the one run: its oldest slots go
                over = self.nbytes - self.max_bytes
                j = bisect_left(r.ends, over + r.end_before(r.start), r.start)
                self.nbytes -= r.drop_below(r.lo + j - r.start + 1)
                if r.hi == r.lo:
                    runs.pop(0)
