"""Queue census: which messages one queue holds at a moment, as one `queue_census` event.

RabbitMQ has no such record: a recovered classic queue logs how many messages it recovered,
never which. The lifecycle job needs which: a copy it thinks queued that a later census of its
queue does not hold is gone (after a restart, a real loss when it was synced or confirmed),
and one that a census holds is confirmed queued (docs/events.md, "Census").

A census is taken in two halves, in one queue worker:
- the Queue actor snapshots what it holds in memory (ready, the tail behind a paged part, and
  unacked) and, for every priority lane with a paged part, where that part starts (`Census`);
- its BackingQueue, which reads everything the Queue told it before in order, adds the paged
  part's seq_ids from the index and emits the event (`emit`). Messages the Queue accepted after
  the snapshot have seq_id >= `below` and are left out, so the census is exact as of the
  snapshot even though the event is written a little later.

Cost: one event per queue (not per message), seq_ids as inclusive ranges (a queue that was
filled and not yet consumed is one range, however long).
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import merge
from typing import Iterable

REASONS = ("started", "stopped", "requested")  # after recovery, at a clean stop, on demand


class Census:
    """Queue -> BackingQueue (local only): emit the queue's census."""

    __slots__ = ("reason", "held", "paged", "below", "epoch")

    def __init__(self, reason: str, held: list, paged: dict, below: int, epoch: int = 0):
        self.reason = reason  # one of REASONS
        self.held = held  # sorted seq_ids in the Queue's memory (ready and unacked)
        self.paged = paged  # priority -> page_after of each lane with a paged part
        self.below = below  # the queue's next seq_id at the snapshot: the census is of those below
        self.epoch = epoch  # the master's promotion count: seq_ids are this log's


def snapshot(core, reason: str) -> Census:
    """What a QueueCore holds in memory, and where its paged parts start."""
    held = sorted([msg.seq_id for msg in core.prios.messages()] +
                  list(core.unacked))
    paged = {p: lane.page_after for p, lane in enumerate(core.paging.lanes) if lane.paged}
    return Census(reason, held, paged, core.next_seq_id, core.epoch)


def seq_ranges(seq_ids: Iterable[int]) -> list:
    """Sorted seq_ids (repeats allowed) -> [first, last, first, last, ...], inclusive ranges."""
    out: list = []
    for s in seq_ids:
        if out and s <= out[-1] + 1:
            if s > out[-1]:
                out[-1] = s
            continue
        out += [s, s]
    return out


def count(ranges: list) -> int:
    return sum(ranges[i + 1] - ranges[i] + 1 for i in range(0, len(ranges), 2))


def emit(events, vhost: str, queue: str, census: Census, paged: Iterable[Iterable[int]],
         durable: bool) -> int:
    """The `queue_census` event of a snapshot and the paged parts' seq_ids (one sorted
    iterable per lane) -> how many messages it names."""
    below = census.below
    ranges = seq_ranges(s for s in merge(census.held, *paged) if s < below)
    n = count(ranges)
    if events.enabled():
        events.emit("queue_census", None, actor="backing_queue", vhost=vhost, queue=queue,
                    reason=census.reason, seq_ranges=ranges, count=n, seq_below=below,
                    durable=durable, epoch=census.epoch)
    return n


def holds(ranges: list, seq_id: int) -> bool:
    """Whether a census' ranges name seq_id (for tests and tools; the job does it in Spark)."""
    i = bisect_right(ranges[0::2], seq_id) - 1
    return i >= 0 and seq_id <= ranges[2 * i + 1]
