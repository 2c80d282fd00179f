"""Publisher confirms of one channel: which publishes wait for which queues (rabbit_confirms.erl).

A publish in confirm mode gets the channel's next seq_no; it is confirmed once every queue it
was routed to has confirmed it, and nacked as soon as one of them refuses it (or dies). Seq_nos
are inserted in ascending order, so the oldest unconfirmed one is the first key: O(1), which is
what lets the channel answer with multiple=true over everything below it.
"""

from __future__ import annotations


class Confirms:
    __slots__ = ("unconfirmed",)

    def __init__(self):
        self.unconfirmed: dict[int, set] = {}  # seq_no -> queue addresses still to confirm

    def __len__(self) -> int:
        return len(self.unconfirmed)

    def insert(self, seq: int, queues) -> None:
        """A publish routed to these queues (seq_nos ascending)."""
        self.unconfirmed[seq] = set(queues)

    def confirm(self, seqs, queue: str, acked: list) -> None:
        """`queue` accepted these seq_nos: those no other queue still owes go to `acked`."""
        unconfirmed = self.unconfirmed
        for seq in seqs:
            pending = unconfirmed.get(seq)
            if pending is None:
                continue
            pending.discard(queue)
            if not pending:
                del unconfirmed[seq]
                acked.append(seq)

    def reject(self, seqs, nacked: list) -> None:
        """A queue refused these seq_nos: each is nacked now, whatever the others say."""
        unconfirmed = self.unconfirmed
        for seq in seqs:
            if unconfirmed.pop(seq, None) is not None:
                nacked.append(seq)

    def reject_queues(self, owes, nacked: list) -> None:
        """Queues that are gone (`owes(queue_address)` is true for them): every publish one of
        them still owed is nacked."""
        unconfirmed = self.unconfirmed
        for seq, pending in list(unconfirmed.items()):
            if any(owes(q) for q in pending):
                del unconfirmed[seq]
                nacked.append(seq)

    def smallest(self) -> int | None:
        """The oldest seq_no still unconfirmed."""
        return next(iter(self.unconfirmed), None)

    def clear(self) -> None:
        self.unconfirmed.clear()
