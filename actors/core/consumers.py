"""A queue's consumers and what it knows of each consuming channel (rabbit_queue_consumers.erl).

Which consumer takes the next message: round robin over the consumers that can take one now:
the channel's writer has room (`delivery_window` deliveries and `delivery_window_bytes` body
bytes in flight at most: the Writer gives them back with `Sent` once they are on the wire), the
consumer's prefetch is not used up, and under a channel-wide prefetch (basic.qos global) the
channel has granted a token. The queue core (actors/core/queue.py) decides what to deliver; this
module decides to whom.

Consumer priorities (basic.consume argument `x-priority`, an integer, default 0, negative
allowed; RabbitMQ's consumer-priority.html): a message goes to the highest-priority consumers
that can take one, round robin among those of equal priority; a lower priority gets messages
only while every higher one is blocked (prefetch full, writer window full, no token). RabbitMQ
keeps its consumers in a priority_queue and puts the one it delivered to back at the end of its
priority. While every consumer has the same priority (the common case) the round robin runs
over `by_key` alone, as without priorities; a second priority switches to per-priority buckets
(`buckets`), and the last consumer of the second-to-last priority going switches back.

Single active consumer (queue argument `x-single-active-consumer`, RabbitMQ's consumers.html):
only `active` receives; the others wait. The first consumer to register becomes active; when the
active one is cancelled or its channel goes, the next is the highest-priority waiting consumer,
the earliest registered among equals (rabbit_queue_consumers:get_consumer/1 takes the head of the
priority queue, and a waiting consumer is never rotated). A consumer with a higher priority
joining later does not take over from the active one (RabbitMQ 3.10's classic queues).
"""

from __future__ import annotations

from collections import OrderedDict, deque

DELIVERY_WINDOW = 2000  # deliveries in flight to one channel's writer
DELIVERY_WINDOW_BYTES = 4 * 1024 * 1024  # body bytes in flight to one channel's writer


class Consumer:
    __slots__ = ("channel", "tag", "no_ack", "prefetch", "unacked", "exclusive", "priority")

    def __init__(self, channel, tag, no_ack, prefetch, exclusive, priority=0):
        self.channel = channel  # consuming channel's address
        self.tag = tag  # consumer tag
        self.no_ack = no_ack  # automatic acknowledgement
        self.prefetch = prefetch  # per-consumer limit, 0 = none
        self.unacked = 0  # deliveries to it not yet settled
        self.exclusive = exclusive  # basic.consume exclusive=true
        self.priority = priority  # x-priority, 0 = default; higher is served first


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


def activity(single_active_queue: bool, holder, channel: str, tag: str) -> tuple:
    """A consumer's (active, activity_status) as rabbit_queue_consumers reports it: on a
    single active consumer queue the holder ([channel, tag], from the queue's last sample)
    is (True, "single_active") and every other one (False, "waiting"); elsewhere (True, "up")."""
    if not single_active_queue:
        return True, "up"
    if holder is not None and list(holder) == [channel, tag]:
        return True, "single_active"
    return False, "waiting"


class QueueConsumers:
    __slots__ = ("by_key", "channels", "delivery_window", "delivery_window_bytes", "levels",
                 "buckets", "single_active", "active", "next")

    def __init__(self, delivery_window: int = DELIVERY_WINDOW,
                 delivery_window_bytes: int = DELIVERY_WINDOW_BYTES, single_active=False):
        # (channel, tag) -> Consumer: registration order, and the round-robin order while all
        # priorities are equal
        self.by_key: OrderedDict = OrderedDict()
        self.channels: dict[str, ChannelState] = {}  # channel address -> its state here
        self.delivery_window = delivery_window  # deliveries in flight to one channel's writer
        self.delivery_window_bytes = delivery_window_bytes  # and their body bytes
        self.levels: dict[int, int] = {}  # priority -> how many consumers have it
        # with two priorities or more: [(priority, OrderedDict (channel, tag) -> Consumer)],
        # highest first, each in its round-robin order; None while all priorities are equal
        self.buckets: list | None = None
        self.single_active = single_active  # x-single-active-consumer
        self.active: Consumer | None = None  # the single active consumer, None if none
        # next() -> Consumer | None: the pick for the current shape (see _choose), a bound
        # method kept here so that the plain round robin costs no test per delivery
        self.next = self._next_plain
        self._choose()

    def _choose(self) -> None:
        if self.single_active:
            self.next = self._next_single
        elif self.buckets is None:
            self.next = self._next_plain
        else:
            self.next = self._next_buckets

    def add(self, channel, tag, no_ack, prefetch, exclusive, priority=0) -> Consumer:
        c = self.by_key[(channel, tag)] = Consumer(channel, tag, no_ack, prefetch, exclusive,
                                                  priority)
        self.channel(channel)
        levels = self.levels
        levels[priority] = levels.get(priority, 0) + 1
        if self.buckets is not None:
            self._bucket(priority)[(channel, tag)] = c
        elif len(levels) > 1:
            self._make_buckets()
            self._choose()
        if self.single_active and self.active is None:
            self.active = c
        return c

    def holders(self) -> dict:
        """rabbit_amqqueue_process' info items of the consumer that holds the queue: the
        single active consumer's tag and [channel, tag] (to mark it among the channels'
        consumer rows), and the exclusive consumer's tag; None where there is none."""
        active = self.active if self.single_active else None
        exclusive = next((c for c in self.by_key.values() if c.exclusive), None)
        return {"single_active_consumer_tag": active.tag if active else None,
                "single_active_consumer": [active.channel, active.tag] if active else None,
                "exclusive_consumer_tag": exclusive.tag if exclusive else None}

    def remove(self, channel, tag) -> Consumer | None:
        c = self.by_key.pop((channel, tag), None)
        if c is not None:
            self._forget(c)
            if c is self.active:
                self.active = self._next_active()
        return c

    def _forget(self, c: Consumer) -> None:
        """Its priority count and bucket (by_key is the caller's)."""
        levels = self.levels
        n = levels[c.priority] - 1
        if n:
            levels[c.priority] = n
        else:
            del levels[c.priority]
        if self.buckets is not None:
            if len(levels) <= 1:
                self.buckets = None  # one priority left: the plain round robin again
                self._choose()
            else:
                for i, (p, bucket) in enumerate(self.buckets):
                    if p == c.priority:
                        del bucket[(c.channel, c.tag)]
                        if not bucket:
                            del self.buckets[i]
                        break

    def _make_buckets(self) -> None:
        by_p: dict[int, OrderedDict] = {}
        for key, c in self.by_key.items():
            by_p.setdefault(c.priority, OrderedDict())[key] = c
        self.buckets = sorted(by_p.items(), key=lambda e: e[0], reverse=True)

    def _bucket(self, priority) -> OrderedDict:
        buckets = self.buckets
        for i, (p, bucket) in enumerate(buckets):
            if p == priority:
                return bucket
            if p < priority:
                bucket = OrderedDict()
                buckets.insert(i, (priority, bucket))
                return bucket
        bucket = OrderedDict()
        buckets.append((priority, bucket))
        return bucket

    def _next_active(self) -> Consumer | None:
        """The waiting consumer that becomes active: highest priority, then first registered."""
        if not self.by_key:
            return None
        return max(self.by_key.values(), key=_priority)  # max keeps the first of equals

    def clear(self) -> None:
        """Every consumer is gone (the queue was deleted); channel states stay."""
        self.by_key.clear()
        self.levels.clear()
        self.buckets = None
        self.active = None
        self._choose()

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

    def _next_plain(self) -> Consumer | None:
        """Round robin: the first consumer able to take a message moves to the back."""
        for key, c in self.by_key.items():
            if self.can_take(c):
                self.by_key.move_to_end(key)
                return c
        return None

    def _next_single(self) -> Consumer | None:
        """The single active consumer, if it can take a message."""
        c = self.active
        return c if c is not None and self.can_take(c) else None

    def _next_buckets(self) -> Consumer | None:
        """Round robin within the highest priority that has a consumer able to take."""
        for _, bucket in self.buckets:
            for key, c in bucket.items():
                if self.can_take(c):
                    bucket.move_to_end(key)
                    return c
        return None

    def any_can_take(self) -> bool:
        if self.single_active:
            return self.active is not None and self.can_take(self.active)
        return any(self.can_take(c) for c in self.by_key.values())

    def any_unblocked(self) -> bool:
        """Some consumer could take a message now (can_take without asking for tokens)."""
        cands = [self.active] if self.single_active else self.by_key.values()
        for c in cands:
            if c is None:
                continue
            st = self.channels[c.channel]
            if st.in_flight >= self.delivery_window or \
                    st.in_flight_bytes >= self.delivery_window_bytes:
                continue
            if c.no_ack:
                return True
            if c.prefetch and c.unacked >= c.prefetch:
                continue
            if st.limit and st.tokens <= 0:
                continue
            return True
        return False

    def receiving(self, c: Consumer) -> bool:
        """The consumer may be given messages at all (not a waiting one of a single active
        consumer queue)."""
        return not self.single_active or c is self.active

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
            self.remove(*key)
        self.channels.pop(channel, None)


def _priority(c: Consumer) -> int:
    return c.priority
