"""A stream's consumers: each reads the log at its own position, with its own credit.

Mirrors the ``#stream{}`` readers of RabbitMQ 3.10.8's ``rabbit_stream_queue`` (kept there in
the channel's queue-type state; here in the stream's own actor): a consumer starts at the
offset its ``x-stream-offset`` resolves to, holds ``credit`` = its prefetch at first, spends one
per delivery and gets one back per ack (``settle(complete, ...)``); an ack never removes a
message from the log. Deliveries in flight to one channel's writer are bounded as every queue
bounds them (``DELIVERY_WINDOW``, the Writer's ``Sent`` frees them).

Pure: the StreamQueue actor reads the log (actors/store/stream_log.py) for the readers this
names and sends what it read.
"""

from __future__ import annotations

from collections import deque
from typing import Iterator

__all__ = ["Reader", "StreamReaders", "DELIVERY_WINDOW"]

DELIVERY_WINDOW = 2000  # deliveries in flight to one channel's writer (QueueConsumers' window)


class Reader:
    """One consumer of a stream."""

    __slots__ = ("channel", "tag", "position", "credit", "prefetch", "filters",
                 "match_unfiltered", "outstanding")

    no_ack = False  # a stream refuses automatic acknowledgement (the counters ask)

    def __init__(self, channel: str, tag: str, position: int, prefetch: int,
                 filters: tuple = (), match_unfiltered: bool = False):
        self.channel = channel  # the consuming channel's address
        self.tag = tag  # its consumer tag
        self.position = position  # the next offset to read
        self.credit = prefetch  # deliveries it may still take before an ack
        self.prefetch = prefetch  # basic.qos prefetch_count when it subscribed
        self.filters = filters  # x-stream-filter values (() = no filtering)
        self.match_unfiltered = match_unfiltered  # x-stream-match-unfiltered
        self.outstanding: deque = deque()  # offsets delivered and not yet acked, in order


class StreamReaders:
    def __init__(self, window: int = DELIVERY_WINDOW):
        self.by_key: dict[tuple, Reader] = {}  # (channel, tag) -> Reader, subscription order
        self.in_flight: dict[str, int] = {}  # channel -> deliveries not yet on its socket
        self.window = window

    def __len__(self) -> int:
        return len(self.by_key)

    def add(self, reader: Reader) -> None:
        self.by_key[(reader.channel, reader.tag)] = reader

    def remove(self, channel: str, tag: str) -> Reader | None:
        return self.by_key.pop((channel, tag), None)

    def drop_channel(self, channel: str) -> list:
        gone = [r for k, r in self.by_key.items() if k[0] == channel]
        for r in gone:
            del self.by_key[(channel, r.tag)]
        self.in_flight.pop(channel, None)
        return gone

    def drop_channels(self, prefix: str) -> list:
        """Every reader of the channels whose address starts with ``prefix`` (a connection
        worker died)."""
        out = []
        for channel in {k[0] for k in self.by_key if k[0].startswith(prefix)}:
            out.extend(self.drop_channel(channel))
        return out

    def room(self, reader: Reader) -> int:
        """How many deliveries the reader may be sent now: its credit, within its channel's
        window."""
        free = self.window - self.in_flight.get(reader.channel, 0)
        return max(0, min(reader.credit, free))

    def wanting(self, log_next: int) -> Iterator[Reader]:
        """Readers behind the log's end with room for a delivery."""
        for r in list(self.by_key.values()):
            if r.position < log_next and self.room(r) > 0:
                yield r

    def delivered(self, reader: Reader, offsets: list) -> None:
        reader.credit -= len(offsets)
        reader.outstanding.extend(offsets)
        self.in_flight[reader.channel] = self.in_flight.get(reader.channel, 0) + len(offsets)

    def sent(self, channel: str, n: int) -> None:
        left = self.in_flight.get(channel, 0) - n
        if left > 0:
            self.in_flight[channel] = left
        else:
            self.in_flight.pop(channel, None)

    def settle(self, channel: str, offsets: list) -> int:
        """Acks of these offsets on ``channel``: each gives one credit back to the channel's
        reader that has it outstanding (the oldest such delivery first) -> how many
        matched a reader (a cancelled consumer's acks match none)."""
        readers = [r for k, r in self.by_key.items() if k[0] == channel]
        matched = 0
        for off in offsets:
            for r in readers:
                if r.outstanding and off in r.outstanding:
                    if r.outstanding[0] == off:
                        r.outstanding.popleft()
                    else:
                        r.outstanding.remove(off)
                    r.credit += 1
                    matched += 1
                    break
        return matched

    def unacked(self) -> int:
        return sum(len(r.outstanding) for r in self.by_key.values())

    def positions(self) -> list:
        """What the management API shows of each consumer: its tag, channel, next offset,
        credit and deliveries not yet acked."""
        return [{"consumer_tag": r.tag, "channel": r.channel, "offset": r.position,
                 "credit": r.credit, "unacked": len(r.outstanding)}
                for r in self.by_key.values()]
