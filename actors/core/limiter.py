"""A channel's channel-wide prefetch, basic.qos global=true (rabbit_limiter.erl's role).

The channel may have at most `limit` unacked deliveries from all its queues together. Queues
deliver under that limit with tokens: a queue that could deliver but has none asks (`Demand`),
the channel shares what the limit leaves free among the queues asking, oldest first (`Grant`),
a queue spends a token per delivery to a consumer that acks, and gives back what it does not use
(`Release`). Delivery tags counted against the limit free their place when settled.

Sans-IO: the methods return the grants to send, [(queue address, n)]; the channel core sends
them.
"""

from __future__ import annotations

from collections import OrderedDict


class Limiter:
    __slots__ = ("limit", "limited", "granted", "demands")

    def __init__(self):
        self.limit = 0  # the channel-wide prefetch, 0 = none
        self.limited: set = set()  # delivery tags counted against the limit
        self.granted: dict[str, int] = {}  # queue -> tokens granted, not yet used or returned
        self.demands: OrderedDict = OrderedDict()  # queues waiting for tokens, oldest first

    def set_limit(self, n: int) -> bool:
        """basic.qos global=true; False when unchanged. No limit: forget every count."""
        if n == self.limit:
            return False
        self.limit = n
        if not n:
            self.reset()
        return True

    def reset(self) -> None:
        self.limited.clear()
        self.granted.clear()
        self.demands.clear()

    def delivered(self, tag: int) -> None:
        """A delivery that waits for an ack, under the limit."""
        if self.limit:
            self.limited.add(tag)

    def spent(self, queue: str, used: int) -> None:
        """The queue delivered `used` messages with tokens."""
        if self.granted.get(queue):
            self.granted[queue] = max(0, self.granted[queue] - used)

    def settled(self, tags) -> bool:
        """These deliveries were settled: True when one of them freed a place."""
        limited = self.limited
        freed = False
        if limited:
            for tag in tags:
                if tag in limited:
                    limited.discard(tag)
                    freed = True
        return freed

    def demand(self, queue: str) -> None:
        if self.limit:
            self.demands[queue] = True

    def release(self, queue: str, n: int) -> None:
        if queue in self.granted:
            self.granted[queue] = max(0, self.granted[queue] - n)

    def grants(self) -> list:
        """Share what the limit leaves free among the queues asking: [(queue, n)] to send."""
        if not self.demands or not self.limit:
            return []
        out = []
        free = self.limit - len(self.limited) - sum(self.granted.values())
        while free > 0 and self.demands:
            q, _ = self.demands.popitem(last=False)
            n = max(1, free // (len(self.demands) + 1))
            self.granted[q] = self.granted.get(q, 0) + n
            free -= n
            out.append((q, n))
        return out
