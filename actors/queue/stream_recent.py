"""The messages a stream's readers read lately, each with its properties already carrying the
``x-stream-offset`` header.

The consumers of a fan-out read the same messages at about the same time but seldom at the
same offset in the same turn, so each read the log and re-encoded the header on its own: with
ten consumers, reads and headers were half of the queue worker's time. Here each message is
read from the log and given its header once. Bounded by body bytes; what no reader will read
again goes first. Pure: the StreamQueue actor owns one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable


class RecentReads:
    def __init__(self, max_bytes: int, headed: Callable[[bytes, int], bytes]):
        self.max_bytes = max_bytes
        self.headed = headed  # (props_raw, offset) -> the properties with the header
        # offset -> (Message, properties with the header), in the order they were read (an
        # OrderedDict: a plain dict's first key after many deletions is a scan of dead slots)
        self.entries: OrderedDict[int, tuple] = OrderedDict()
        self.nbytes = 0  # body bytes held

    def __len__(self) -> int:
        return len(self.entries)

    def take(self, position: int, limit: int, max_msgs: int, max_bytes: int) -> list:
        """(Message, properties) for the offsets from ``position`` on that are held, in a row,
        below ``limit``, at most ``max_msgs`` and about ``max_bytes`` of body (at least one)."""
        out = []
        nbytes = 0
        get = self.entries.get
        while position < limit and len(out) < max_msgs and nbytes < max_bytes:
            e = get(position)
            if e is None:
                break
            out.append(e)
            nbytes += len(e[0].body)
            position += 1
        return out

    def add(self, msgs: list) -> list:
        """Messages just read from the log -> their (Message, properties), held from now on."""
        out = []
        entries = self.entries
        for x in msgs:
            e = entries.get(x.offset)
            if e is None:
                e = entries[x.offset] = (x, self.headed(x.props_raw, x.offset))
                self.nbytes += len(x.body)
            out.append(e)
        return out

    def forget(self, low: int | None) -> None:
        """Drop what was read first while it is below ``low`` (the lowest reader's position;
        None: no reader left) or the bytes held are past the bound."""
        entries = self.entries
        while entries:
            first = next(iter(entries))
            if not (low is None or first < low or self.nbytes > self.max_bytes):
                return
            self.nbytes -= len(entries.popitem(last=False)[1][0].body)
