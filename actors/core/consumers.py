"""A queue's consumers and what it knows of each consuming channel (rabbit_queue_consumers.erl).

Which consumer takes the next message: round robin over the consumers that can take one now:
the channel's writer has room (`delivery_window` deliveries and `delivery_window_bytes` body
bytes in flight at most: the Writer gives them back with `Sent` once they are on the wire), the consumer's prefetch is not used up, and
under a channel-wide prefetch (basic.qos global) the channel has granted a token. The queue core
(actors/core/queue.py) decides what to deliver; this module decides to whom.
"""

from __future__ import annotations

from collections import OrderedDict, deque

DELIVERY_WINDOW = 2000  # deliveries in flight to one channel's writer
DELIVERY_WINDOW_BYTES = 4 * 1024 * 1024  # body bytes in flight to one channel's writer


class Consumer:
    __slots__ = ("channel", "tag", "no_ack", "prefetch", "unacked", "exclusive")

    def __init__(self, channel, tag, no_ack, prefetch, exclusive):
        self.channel = channel  # consuming channel's address
        self.tag = tag  # consumer tag
        self.no_ack = no_ack  # automatic acknowledgement
        self.prefetch = prefetch  # per-consumer limit, 0 = none
        self.unacked = 0  # deliveries to it not yet settled
        self.exclusive = exclusive  # basic.consume exclusive=true


class ChannelState:
    __slots__ = ("limit", "unacked", "in_flight", "in_flight_bytes", "sizes", "tokens", "wants",
                 "asked")

    def __init__(self):
        self.limit = 0  # channel-wide prefetch (basic.qos global=true), 0 = none
        self.tokens = 0  # deliveries the channel granted under that limit, not yet used
        self.wants = False  # a consumer there could take a message but for a token
        self.asked = False  # a Demand is out, no Grant yet
        self.unacked = 0  # deliveries from this queue to the channel not yet settled
        self.in_flight = 0  # deliveries not yet written to the socket (writer credit)
        self.in_flight_bytes = 0  # their body bytes
        self.sizes: deque | None = None  # their body sizes, oldest first (made on first use)


class QueueConsumers:
    __slots__ = ("by_key", "channels", "delivery_window", "delivery_window_bytes")

    def __init__(self, delivery_window: int = DELIVERY_WINDOW,
                 delivery_window_bytes: int = DELIVERY_WINDOW_BYTES):
        self.by_key: OrderedDict = OrderedDict()  # (channel, tag) -> Consumer, round-robin order
        self.channels: dict[str, ChannelState] = {}  # channel address -> its state here
        self.delivery_window = delivery_window  # deliveries in flight to one channel's writer
        self.delivery_window_bytes = delivery_window_bytes  # and their body bytes

    def add(self, channel, tag, no_ack, prefetch, exclusive) -> Consumer:
        c = self.by_key[(channel, tag)] = Consumer(channel, tag, no_ack, prefetch, exclusive)
        self.channel(channel)
        return c

    def remove(self, channel, tag) -> Consumer | None:
        return self.by_key.pop((channel, tag), None)

    def channel(self, channel) -> ChannelState:
        """The channel's state here, made on first use."""
        st = self.channels.get(channel)
        if st is None:
            st = self.channels[channel] = ChannelState()
        return st

    def can_take(self, c: Consumer) -> bool:
        st = self.channels[c.channel]
        if st.in_flight >= self.delivery_window or \
                st.in_flight_bytes >= self.delivery_window_bytes:
            return False
        if c.no_ack:
            return True
        if c.prefetch and c.unacked >= c.prefetch:
            return False
        if st.limit and st.tokens <= 0:
            st.wants = True
            return False
        return True

    def next(self) -> Consumer | None:
        """Round robin: the first consumer able to take a message moves to the back."""
        for key, c in self.by_key.items():
            if self.can_take(c):
                self.by_key.move_to_end(key)
                return c
        return None

    def any_can_take(self) -> bool:
        return any(self.can_take(c) for c in self.by_key.values())

    def settled(self, channel, tag) -> None:
        """A delivery to this consumer was acked, rejected or requeued."""
        st = self.channels.get(channel)
        if st is not None:
            st.unacked -= 1
        c = self.by_key.get((channel, tag))
        if c is not None:
            c.unacked -= 1

    def sent(self, channel, n) -> bool:
        """The channel's writer put n deliveries on the wire; False for an unknown channel."""
        st = self.channels.get(channel)
        if st is None:
            return False
        n = min(n, st.in_flight)
        if not n:
            return True
        sizes = st.sizes
        st.in_flight -= n
        if n == len(sizes):
            sizes.clear()
            st.in_flight_bytes = 0
        else:
            popleft = sizes.popleft
            st.in_flight_bytes -= sum(popleft() for _ in range(n))
        return True

    def delivering(self, st: ChannelState, nbytes: int) -> None:
        """A delivery of `nbytes` to the channel of `st` is on its way to the writer."""
        st.in_flight += 1
        st.in_flight_bytes += nbytes
        sizes = st.sizes
        if sizes is None:
            sizes = st.sizes = deque()
        sizes.append(nbytes)

    def drop_channel(self, channel) -> None:
        """The channel is gone: its consumers and its state here."""
        for key in [k for k in self.by_key if k[0] == channel]:
            del self.by_key[key]
        self.channels.pop(channel, None)
