"""Publisher confirms, decided in one place (rabbit_confirms.erl, and the confirm half of
rabbit_amqqueue_process and rabbit_mirror_queue_master).

A publish in confirm mode gets its channel's next seq_no and goes to one or more queues; each
queue's copy is confirmed by that queue, and the publisher gets basic.ack once every copy is.
This module holds every rule of that promise, without IO:

- `Confirms` (the publishing channel): seq_no -> queues still to confirm; what settles a seq_no
  (a queue's confirm, a queue's refusal, a queue gone down, the node pausing, no route at all,
  a dead target at publish), and the basic.ack/basic.nack frames of one turn with multiple=true
  over runs (`take`).
- `QueueConfirms` (the queue): when a copy's confirm may leave, by x-confirm-on and storage
  (`on_arrival`: at once, after the sync, or on a consumer's ack), and the answers collected
  per publisher for x-confirm-on=ack/ack-lite (ack, no-ack delivery, get, settle, loss).
- `MirrorHold` (a mirrored or quorum queue's master): a confirm held until the mirrors, or a
  majority of members, have the batch that carried the message.
- `LiteConfirms` (the consuming channel, x-confirm-on=ack-lite): the publishes a consumer's
  acks confirm, per publishing channel and queue.
- `missing_queue` (a queue worker): the answer to a publish for a queue that does not run
  there (deleted: confirmed; else nacked).

Seq_nos are inserted in ascending order, so the oldest unconfirmed one is the first key of
`Confirms.unconfirmed`: O(1), which is what lets multiple=true cover everything below it.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

# x-confirm-on: the modes that confirm on a consumer's ack instead of on arrival
LATE_MODES = ("ack", "ack-lite")

# when a queue's copy is confirmed (QueueConfirms.on_arrival)
NOW = 0  # on arrival: accepted in memory (RabbitMQ's rule for transient copies)
ON_SYNC = 1  # once the backing queue has synced it (persistent copy, durable queue)
ON_ACK = 2  # once a consumer acks it (x-confirm-on=ack or ack-lite)


class ConfirmFrame(NamedTuple):
    """One basic.ack or basic.nack to write to the publisher."""
    nack: bool  # basic.nack, else basic.ack
    delivery_tag: int  # the seq_no it answers (the highest of the run when multiple)
    multiple: bool  # it answers every seq_no up to delivery_tag


class Answered(NamedTuple):
    """What one turn of a channel settled: the seq_nos and the frames that tell the publisher."""
    acks: list  # seq_nos confirmed, ascending
    nacks: list  # seq_nos refused, ascending
    reasons: dict  # nacked seq_no -> why ("queue_down", "reject-publish", ...; event log)
    frames: list  # [ConfirmFrame] in the order to write them


class Confirms:
    """The publishing channel's side (rabbit_confirms): which seq_nos wait for which queues,
    and what this turn has settled."""

    __slots__ = ("unconfirmed", "acks", "nacks", "reasons")

    def __init__(self):
        self.unconfirmed: dict[int, set] = {}  # seq_no -> queue addresses still to confirm
        self.acks: list = []  # seq_nos confirmed this turn, to answer at its end
        self.nacks: list = []  # seq_nos refused this turn, to answer at its end
        self.reasons: dict[int, str] = {}  # a nack of this turn -> why (event log)

    def __len__(self) -> int:
        return len(self.unconfirmed)

    def insert(self, seq: int, queues) -> None:
        """A publish routed to these queues (seq_nos ascending); routed to none (unroutable,
        mandatory or not) it is confirmed at once, as rabbit_channel does."""
        if queues:
            self.unconfirmed[seq] = set(queues)
        else:
            self.acks.append(seq)

    def refuse(self, seq: int, reason: str) -> None:
        """A publish one of whose queues is already known dead: nacked at once, and the queues
        it does reach are not asked for a confirm."""
        self.nacks.append(seq)
        self.reasons[seq] = reason

    def confirm(self, seqs, queue: str) -> None:
        """`queue` accepted these seq_nos: those no other queue still owes are confirmed."""
        unconfirmed = self.unconfirmed
        acks = self.acks
        for seq in seqs:
            pending = unconfirmed.get(seq)
            if pending is None:
                continue
            pending.discard(queue)
            if not pending:
                del unconfirmed[seq]
                acks.append(seq)

    def reject(self, seqs, reason: str) -> None:
        """A queue refused these seq_nos: each is nacked now, whatever the others say (the
        reason of a seq_no refused twice in one turn is the later one's)."""
        unconfirmed = self.unconfirmed
        reasons = self.reasons
        for seq in seqs:
            if unconfirmed.pop(seq, None) is not None:
                self.nacks.append(seq)
                reasons[seq] = reason
            elif seq in reasons:
                reasons[seq] = reason

    def reject_queues(self, owes, reason: str) -> None:
        """Queues that are gone (`owes(queue_address)` is true for them: a queue down, a worker
        down, the node pausing): every publish one of them still owed is nacked."""
        unconfirmed = self.unconfirmed
        for seq, pending in list(unconfirmed.items()):
            if any(owes(q) for q in pending):
                del unconfirmed[seq]
                self.nacks.append(seq)
                self.reasons[seq] = reason

    def smallest(self) -> int | None:
        """The oldest seq_no still unconfirmed."""
        return next(iter(self.unconfirmed), None)

    def pending(self) -> bool:
        """Something settled this turn waits to be answered."""
        return bool(self.acks or self.nacks)

    def take(self) -> Answered:
        """This turn's settled seq_nos and their frames (rabbit_channel:send_confirms_and_nacks):
        a run of two or more below the oldest still unconfirmed goes as one multiple=true
        frame when the turn settled only acks or only nacks; the rest one frame each, nacks
        first."""
        acks, nacks, reasons = self.acks, self.nacks, self.reasons
        self.acks, self.nacks, self.reasons = [], [], {}
        frames = []
        low = self.smallest()
        both = bool(acks and nacks)
        for seqs, nack in ((nacks, True), (acks, False)):
            if not seqs:
                continue
            seqs.sort()
            singles = seqs
            if len(seqs) > 1 and not both:
                below = [s for s in seqs if low is None or s < low]
                if len(below) > 1:
                    frames.append(ConfirmFrame(nack, below[-1], True))
                    singles = [s for s in seqs if low is not None and s > low]
            for s in singles:
                frames.append(ConfirmFrame(nack, s, False))
        return Answered(acks, nacks, reasons, frames)

    def clear(self) -> None:
        """The channel closed: nothing waits any more (the client resends what it lost)."""
        self.unconfirmed.clear()


class QueueConfirms:
    """A queue's side: when the confirm of each copy may leave (x-confirm-on and storage), and
    the x-confirm-on=ack/ack-lite answers collected per publisher until the end of the turn."""

    __slots__ = ("mode", "late", "lite", "answers")

    def __init__(self, mode="enqueue"):
        if isinstance(mode, bytes):
            mode = mode.decode()
        # x-confirm-on (seed 003): "enqueue" confirms on arrival (RabbitMQ's rule); "ack" when
        # a consumer acks (this queue answers the publisher, nack when the message is lost
        # otherwise); "ack-lite" when a consumer acks, answered by the consuming channel
        self.mode = mode
        self.late = mode in LATE_MODES  # nothing confirmed on arrival
        self.lite = mode == "ack-lite"  # the consuming channel confirms on ack
        self.answers: dict[tuple, list] = {}  # (publisher, ok) -> seq_nos to confirm / nack

    def set_mode(self, mode: str) -> bool:
        """The effective confirm-on changed (a policy) -> whether the copies that waited for an
        ack are now to be confirmed as `enqueue` would have."""
        was_late = self.late
        self.mode = mode
        self.late = mode in LATE_MODES
        self.lite = mode == "ack-lite"
        return was_late and not self.late

    def on_arrival(self, stored: bool) -> int:
        """When a copy that entered the queue is confirmed: ON_ACK for x-confirm-on=ack or
        ack-lite (never stored before delivery), ON_SYNC for a persistent copy of a durable
        queue (or any copy of a durable quorum queue: `stored`), else NOW."""
        if self.late:
            return ON_ACK
        return ON_SYNC if stored else NOW

    def confirms_gone(self) -> bool:
        """A copy that never stays (a TTL of 0 with no consumer to take it) is confirmed at
        once, as RabbitMQ does, unless the confirm waits for an ack (then it is a loss)."""
        return not self.late

    def on_settle(self, acked: bool) -> bool | None:
        """A consumer settled a delivery for good -> the publisher's answer the queue sends
        (x-confirm-on=ack: ack on ack, nack on a reject even to a dead-letter exchange), or
        None (the consuming channel answers ack-lite; enqueue answered already)."""
        if self.mode == "ack":
            return acked
        return None

    def carries(self, no_ack: bool) -> bool:
        """Whether a delivery names its publish for the consuming channel to confirm on ack
        (x-confirm-on=ack-lite and a consumer that acks)."""
        return self.lite and not no_ack

    def answer(self, publisher: str, seq_no: int, ok: bool) -> None:
        """x-confirm-on=ack/ack-lite: the publisher's confirm (ok) or nack of one copy, sent at
        the end of the turn (`take`)."""
        if seq_no and publisher:
            key = (publisher, ok)
            seqs = self.answers.get(key)
            if seqs is None:
                seqs = self.answers[key] = []
            seqs.append(seq_no)

    def take(self) -> dict:
        """The answers collected: (publisher, ok) -> seq_nos; empties them."""
        answers, self.answers = self.answers, {}
        return answers

    @staticmethod
    def by_publisher(msgs) -> dict:
        """The seq_nos of these copies (each with `publisher` and `pub_seq`) by publisher: what
        a sync confirms or a disk error nacks."""
        out: dict[str, list] = {}
        for msg in msgs:
            if msg.pub_seq:
                out.setdefault(msg.publisher, []).append(msg.pub_seq)
        return out


class Verdict(NamedTuple):
    """A queue's answer to a publisher: confirm (ok) or nack, and why (event log)."""
    ok: bool
    reason: str  # "" for a confirm


CONFIRMED = Verdict(True, "")
QUEUE_DOWN = Verdict(False, "queue_down")


def wanted(items) -> list:
    """The seq_nos of a Publish batch's items that want a confirm."""
    return [it.seq_no for it in items if it.seq_no]


def missing_queue(deleted: bool) -> Verdict:
    """A publish that reached an address where its queue does not run: confirmed when the
    queue was deleted (rabbit_channel confirms what it routed to a queue that exited
    normally), else nacked, since it reached no queue (its master moved, its node is paused,
    the route was stale)."""
    return CONFIRMED if deleted else QUEUE_DOWN


class HeldConfirm(NamedTuple):
    """Publisher confirms a master holds until its mirrors have the batch that carried them."""
    batch: int  # the batch the confirmed messages went out in
    channel: str  # the publishing channel's address
    seq_nos: list  # its seq_nos to confirm


class MirrorHold:
    """A mirrored or quorum queue's master: confirms held until every mirror (classic) or a
    majority of members (quorum) has the batch that carried them, released in batch order."""

    __slots__ = ("held",)

    def __init__(self):
        self.held: deque[HeldConfirm] = deque()  # confirms waiting for the mirrors, by batch

    def __len__(self) -> int:
        return len(self.held)

    def hold(self, batch: int, channel: str, seqs: list, low: int) -> bool:
        """A confirm of a copy sent in `batch`, with `low` the highest batch the mirrors (or a
        majority) have -> True when it must wait (it is kept); a later confirm never overtakes
        one held before it."""
        if low >= batch and not self.held:
            return False
        self.held.append(HeldConfirm(batch, channel, seqs))
        return True

    def release(self, low: int) -> list:
        """The mirrors (or a majority) now have every batch up to `low` -> [(channel, seqs)]
        of the confirms that may go."""
        out = []
        held = self.held
        while held and held[0].batch <= low:
            h = held.popleft()
            out.append((h.channel, h.seq_nos))
        return out


class LiteConfirms:
    """The consuming channel's side of x-confirm-on=ack-lite: the acks of its consumers confirm
    publishes (the delivery named its publisher and seq_no); a reject is not reported (the
    publisher resends after its time-out)."""

    __slots__ = ("by_publisher",)

    def __init__(self):
        self.by_publisher: dict[tuple, list] = {}  # (publisher, queue) -> seq_nos acked

    def __bool__(self) -> bool:
        return bool(self.by_publisher)

    def acked(self, publisher: str, queue: str, seq_no: int) -> None:
        self.by_publisher.setdefault((publisher, queue), []).append(seq_no)

    def take(self) -> dict:
        """(publisher, queue) -> seq_nos acked this turn; empties them."""
        out, self.by_publisher = self.by_publisher, {}
        return out
