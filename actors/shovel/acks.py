"""Ack-mode bookkeeping of one shovel (rabbit_amqp091_shovel's `unacked` map and
confirm_to_inbound/4): which source deliveries may be acknowledged, given what the
destination confirmed.

- `on-confirm`: a source delivery is acked only once the destination confirmed its publish
  (a destination nack nacks it, requeued); nothing is lost when either end crashes, and a
  message the destination stored but whose confirm was lost with the connection is
  delivered again (a duplicate).
- `on-publish`: acked as soon as it is published; what the destination had not stored when
  it crashed is lost.
- `no-ack`: the source forgets a message as it delivers it (basic.consume no_ack); whatever
  is in flight when the shovel or the destination goes is lost.

Pure: the runner feeds it publishes and confirms and carries out the `SourceAck`s it returns.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

ON_CONFIRM, ON_PUBLISH, NO_ACK = "on-confirm", "on-publish", "no-ack"


@dataclass(frozen=True, slots=True)
class SourceAck:
    """basic.ack (ok) or basic.nack with requeue (not ok) of source delivery `tag`."""
    tag: int  # the source channel's delivery tag
    multiple: bool  # every outstanding tag up to `tag` too
    ok: bool  # ack (True) or nack-requeue (False)


class AckBook:
    """One connection pair's outstanding deliveries: a new pair starts a new book, since
    delivery tags and publish seq numbers are per channel."""

    def __init__(self, ack_mode: str):
        self.ack_mode = ack_mode  # on-confirm, on-publish or no-ack
        self.pending: OrderedDict[int, int] = OrderedDict()  # dest seq -> source tag (in order)
        self.next_seq = 1  # the destination channel's next publish seq no (confirm.select)

    @property
    def in_flight(self) -> int:
        """Published, not yet confirmed (on-confirm)."""
        return len(self.pending)

    def published(self, tag: int) -> list[SourceAck]:
        """Source delivery `tag` was just published to the destination."""
        if self.ack_mode == ON_CONFIRM:
            self.pending[self.next_seq] = tag
            self.next_seq += 1
            return []
        if self.ack_mode == ON_PUBLISH:
            return [SourceAck(tag, False, True)]
        return []

    def confirmed(self, seq: int, multiple: bool, ok: bool) -> tuple[list[SourceAck], int]:
        """The destination acked (ok) or nacked publish `seq` (and all before it when
        `multiple`): the source acks or nacks to send, and how many publishes it settled."""
        if self.ack_mode != ON_CONFIRM:
            return [], 0
        if multiple:
            done = []
            while self.pending:
                first = next(iter(self.pending))
                if first > seq:
                    break
                done.append(self.pending.pop(first))
        elif seq in self.pending:
            done = [self.pending.pop(seq)]
        else:
            return [], 0  # a confirm for nothing of ours: a duplicate or stale confirm
        if not done:
            return [], 0
        top = max(done)
        if len(done) > 1 and not any(t < top for t in self.pending.values()):
            return [SourceAck(top, True, ok)], len(done)
        return [SourceAck(t, False, ok) for t in done], len(done)
