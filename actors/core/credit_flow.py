"""credit_flow.erl's two halves: how far a publishing channel may run ahead of a queue.

RabbitMQ counts credit in messages only (400 initial, bumped by 200); a sender of large
messages can then park 400 of them (400 MiB of 1 MiB bodies) in a queue's mailbox. Leveret
counts both: a channel has `initial` messages and `initial_bytes` body bytes of credit per
queue and stops reading its socket when either runs out; the queue pays back what it took
every `more` messages or `more_bytes` bytes, whichever comes first. A single body larger than
the byte credit still goes (credit goes negative); the sender then waits for the bump.

- `SenderCredit`: the channel's half (spend, bump, forget, exhausted).
- `ReceiverCredit`: the queue's half (received -> a bump due or not, withhold while the queue's
  backlog is over its mark, pay what was withheld, forget a sender).

Sans-IO: the shells send `Credit(queue, n, nbytes)` and tell the reader to block or unblock.
"""

from __future__ import annotations

INITIAL = 400  # credit_flow default: messages a sender may send unasked
MORE = 200  # credit_flow default: the receiver bumps after this many
INITIAL_BYTES = 4 * 1024 * 1024  # body bytes a sender may send unasked
MORE_BYTES = 2 * 1024 * 1024  # the receiver bumps after this many body bytes


class SenderCredit:
    __slots__ = ("initial", "initial_bytes", "left")

    def __init__(self, initial: int = INITIAL, initial_bytes: int = INITIAL_BYTES):
        self.initial = initial  # messages of credit a new receiver starts with
        self.initial_bytes = initial_bytes  # body bytes of credit a new receiver starts with
        self.left: dict = {}  # receiver -> [messages, bytes] of credit left

    def spend(self, receiver, nbytes: int) -> bool:
        """One message of `nbytes` sent to `receiver`; True when its credit is now used up."""
        c = self.left.get(receiver)
        if c is None:
            c = self.left[receiver] = [self.initial, self.initial_bytes]
        c[0] -= 1
        c[1] -= nbytes
        return c[0] <= 0 or c[1] <= 0

    def bump(self, receiver, n: int, nbytes: int) -> None:
        c = self.left.get(receiver)
        if c is None:
            # a bump for a receiver forgotten (or never spent on): it starts from what it pays
            self.left[receiver] = [n, nbytes]
        else:
            c[0] += n
            c[1] += nbytes

    def forget(self, gone) -> None:
        """Receivers for which `gone(receiver)` holds are dead: what they withheld is not owed."""
        for r in [r for r in self.left if gone(r)]:
            del self.left[r]

    def exhausted(self) -> bool:
        """Some receiver's credit is used up: the sender must stop."""
        return any(c[0] <= 0 or c[1] <= 0 for c in self.left.values())


class ReceiverCredit:
    __slots__ = ("more", "more_bytes", "taken", "owed")

    def __init__(self, more: int = MORE, more_bytes: int = MORE_BYTES):
        self.more = more  # bump after this many messages
        self.more_bytes = more_bytes  # or after this many body bytes
        self.taken: dict = {}  # sender -> [messages, bytes] taken since its last bump
        self.owed: dict = {}  # sender -> [messages, bytes] withheld (backlog over its mark)

    def received(self, sender, n: int, nbytes: int) -> tuple | None:
        """`n` messages of `nbytes` taken from `sender`: (n, nbytes) to pay back now, or None."""
        t = self.taken.get(sender)
        if t is None:
            t = self.taken[sender] = [0, 0]
        t[0] += n
        t[1] += nbytes
        if t[0] >= self.more or t[1] >= self.more_bytes:
            due = (t[0], t[1])
            t[0] = t[1] = 0
            return due
        return None

    def withhold(self, sender, due: tuple) -> None:
        o = self.owed.get(sender)
        if o is None:
            self.owed[sender] = list(due)
        else:
            o[0] += due[0]
            o[1] += due[1]

    def pay(self) -> list:
        """Everything withheld, as [(sender, n, nbytes)], now owed no longer."""
        owed, self.owed = self.owed, {}
        return [(s, o[0], o[1]) for s, o in owed.items()]

    def forget(self, sender) -> None:
        self.taken.pop(sender, None)
        self.owed.pop(sender, None)
