"""A queue's page-out and page-in, without IO: the decisions of rabbit_variable_queue.erl that
move messages between memory and the index (maybe_push_q1_to_betas, publish to delta, fetch
from delta into q3), a lane per priority.

Page-out: a message of a paging queue goes to memory at its priority's head, to memory behind
its lane's paged part (the lane's tail, q1), or, when memory is full, to the index only (after
the tail, spilled there first: push_alphas_to_betas). What goes to the index is written (never
synced for its own sake) and keeps no Msg; its x-confirm-on waiter is kept by its lane.
Page-in: a page read back turns into Msgs again, the owed ones (drop-head took them while
paged) dropped first, the rest at their priority's head; the tail joins once the paged part is
read. The same turns a durable queue's first messages into Msgs at start-up (`restore`).

`PageIO` is given what it needs, no queue: the `Paging` counts (actors/core/paging.py, which
asks the backing queue for pages), the `PriorityLanes` (actors/core/priorities.py), the
messages_persistent count of what is in memory, the queue's `QueueConfirms`, its durable flag,
its id source, and two of the queue's decisions as callables: `drop` (drop-head's drop of a
message, with its events, nack and dead-lettering) and `must_read` (whether owed drops must be
read back to be seen rather than dropped unread). QueueCore (actors/core/queue.py) calls its
named steps and keeps consumers, delivery, limits and events.
"""

from __future__ import annotations

from typing import Callable

from actors.core.confirms import QueueConfirms
from actors.core.paging import Paging, PersistentCount
from actors.core.priorities import PriorityLanes
from actors.core.queue_msg import Msg

# where a message of a paging queue goes, (divert, behind): PageIO.placement
AT_HEAD = (False, False)  # in memory, deliverable in its turn
_BEHIND = (False, True)  # in memory, behind its lane's paged part (the lane's tail)
_DIVERTED = (True, False)  # to the index only (memory is full)


class PageIO:
    """What goes out to the index and what comes back, each priority's lane."""

    __slots__ = ("paging", "prios", "pers", "confirms", "durable", "random_bytes", "drop",
                 "must_read", "owing")

    def __init__(self, paging: Paging, prios: PriorityLanes, pers: PersistentCount,
                 confirms: QueueConfirms, durable: bool, random_bytes: Callable[[int], bytes],
                 drop: Callable[[Msg], None], must_read: Callable[[], bool]):
        self.paging = paging  # what is paged out, and the backing queue's page requests
        self.prios = prios  # the ready messages by priority
        self.pers = pers  # messages_persistent of what is in memory
        self.confirms = confirms  # the queue's x-confirm-on mode (`late`: a waiter to keep)
        self.durable = durable  # the index keeps this queue's persistent messages
        self.random_bytes = random_bytes  # msg ids of what goes to the index without one
        self.drop = drop  # the queue drops a message drop-head took (reason maxlen)
        self.must_read = must_read  # owed drops must be read back to be seen by the queue
        self.owing: set = set()  # lanes drop-head owed more to this turn, to be asked once

    # --- page-out -----------------------------------------------------------------------------
    def placement(self, priority: int, to_persist: list) -> tuple:
        """Where a new message goes -> (divert, behind): to the index when memory is full
        (after its lane's tail, spilled there first), in memory behind its lane's paged part,
        or in memory at the head."""
        p = self.prios.clamp(priority)
        paging = self.paging
        if self.prios.nbytes > paging.page_bytes:
            if self.prios.lanes[p].tail:
                self._spill_tail(p, to_persist)
            return _DIVERTED
        if paging.paged and paging.lanes[p].paged:
            return _BEHIND
        return AT_HEAD

    def page_out(self, msg: Msg) -> None:
        """A new message diverted to the index (its write is `write_paged`'s): counted in its
        lane's paged part."""
        lane = self.paging.lanes[msg.priority]
        if not lane.paged:
            lane.page_after = msg.seq_id - 1
        self.paging.add(lane, len(msg.body))
        self.pers.to_lane(msg, lane)

    def _spill_tail(self, p: int, to_persist: list) -> None:
        """Memory is full again while lane p has a paged part: its tail goes to the index, in
        order, before anything newer (push_alphas_to_betas). What a paged message needs, as
        a diverted one gets: an id, the x-confirm-on waiter kept by the lane, a write (a
        persistent message of a durable queue has had its own already)."""
        lane = self.paging.lanes[p]
        for msg in self.prios.take_tail(p):
            self.paging.add(lane, len(msg.body))
            self.pers.to_lane(msg, lane)
            if not msg.stored:  # (persistent, durable: in the index since it came)
                if msg.msg_id is None:
                    msg.msg_id = self.random_bytes(16)
                self.write_paged(msg, to_persist)

    def write_tail_before(self, msg: Msg, to_persist: list) -> None:
        """A persistent message of a durable queue joins its lane's tail and is written as it
        comes: the transient ones before it in the tail are written first, as paged ones are
        (confirmed already, never synced for their own sake). An index takes seq_ids in
        ascending order only, so _spill_tail could not write them after it. (Scans back to the
        last written one: every one before that is written.)"""
        before = []
        for x in reversed(self.prios.lanes[msg.priority].tail):
            if x is msg:
                continue
            if x.stored:
                break
            before.append(x)
        for x in reversed(before):
            if x.msg_id is None:
                x.msg_id = self.random_bytes(16)
            self.write_paged(x, to_persist)

    def write_paged(self, msg: Msg, to_persist: list) -> None:
        """A message that goes to the index only, not one of a durable queue's persistent
        ones: written, never synced for its own sake (the index keeps its delivery mode).
        Confirmed already (transient) or, x-confirm-on, its waiter kept by its lane; either
        way a sync must not confirm it."""
        if self.confirms.late and msg.pub_seq and msg.publisher:
            self.paging.keep_waiter(msg)
        msg.pub_seq = 0
        msg.persistent = False
        msg.stored = True
        to_persist.append(msg)

    # --- page-in ------------------------------------------------------------------------------
    def want_page(self) -> None:
        """Read back the next page of the highest paged priority once too few are in memory."""
        self.paging.want_page(self.prios.lanes)

    def paged_in(self, entries: list, dropped: int, dropped_bytes: int, now: int,
                 wall_now: int, priority: int) -> None:
        """The backing queue read the next page of a lane ([StoredMessage] in order; `dropped`
        entries were transient ones left from before a restart): owed ones (drop-head) are
        dropped first, the rest join the lane's head, and its tail once nothing is paged."""
        paging = self.paging
        lane = paging.lanes[priority]
        lane.asked = False
        tail = self.prios.tail_start(priority)
        beyond = bool(tail is not None and entries and entries[-1].entry.seq_id >= tail)
        if beyond:  # read into the tail (counts were off): those are in memory already
            entries = [x for x in entries if x.entry.seq_id < tail]
        msgs = self._msgs_of(entries, now, wall_now)
        n = len(entries) + dropped
        nbytes = sum(len(b) for _, b, _ in entries) + dropped_bytes
        # none (or read into the tail): the index holds no more
        paging.read(lane, n, nbytes, not entries and not dropped or beyond)
        # the persistent ones read back are in memory now (counted there by _msgs_of); the
        # dropped ones were a previous run's transient ones, counted since the restart
        lane.pers_off(sum(1 for msg in msgs if msg.pers) + dropped,
                      sum(len(msg.body) for msg in msgs if msg.pers) + dropped_bytes)
        if entries:
            lane.page_after = entries[-1].entry.seq_id
        owed = paging.pay(lane, len(msgs))
        for msg in msgs[:owed]:
            self.drop(msg)
        for msg in msgs[owed:]:
            self.prios.push(msg)
        if not lane.paged:
            self.prios.lanes[priority].join_tail()
        if lane.owed:
            self.ask_owed(priority)  # more to drop
        if lane.pubs is not None and not lane.paged:
            lane.pubs = None

    def paged_dropped(self, priority: int, n: int, nbytes: int, last_seq: int, pers: int,
                      pers_bytes: int) -> bool:
        """The backing queue dropped the next n paged messages of a lane unread (nbytes, the
        last one's seq_id; `pers` of them persistent, of pers_bytes), as drop_paged asked ->
        True when the lane still owes drops (asked for again)."""
        paging = self.paging
        lane = paging.lanes[priority]
        lane.asked = False
        paging.read(lane, n, nbytes, not n)  # (none: the index holds no more)
        lane.pers_off(pers if self.durable else 0, pers_bytes if self.durable else 0)
        if last_seq:
            lane.page_after = last_seq
        paging.pay(lane, n)
        if not lane.paged:
            self.prios.lanes[priority].join_tail()
        if lane.owed:
            self.ask_owed(priority)
            return True
        return False

    def restore(self, entries: list, more: int | list, more_bytes: int | list, now: int,
                wall_now: int) -> None:
        """Start-up of a durable queue: the first messages its index kept ([StoredMessage], in
        order) into memory, and how many more it holds paged out (ints for a queue without
        priorities, else lists by priority: each lane has an index of its own)."""
        for msg in self._msgs_of(entries, now, wall_now):
            self.prios.push(msg)
        if not isinstance(more, (list, tuple)):
            more, more_bytes = [more], [more_bytes]
        last = [0] * len(self.prios.lanes)
        for e, _, _ in entries:
            p = self.prios.clamp(e.priority)
            last[p] = max(last[p], e.seq_id)
        self.paging.restore(more, more_bytes, last, self.durable)

    def _msgs_of(self, entries: list, now: int, wall_now: int) -> list:
        """Messages read back from the index (expiry times there are wall-clock ms)."""
        out = []
        for e, body, persistent in entries:
            expires_at = 0
            if e.expires_at:
                expires_at = max(now + (e.expires_at - wall_now), 1)
            msg = Msg(e.seq_id, e.exchange, e.routing_key, e.props_raw, body, persistent,
                      self.prios.clamp(e.priority), expires_at, msg_id=e.msg_id)
            msg.redelivered = e.delivered
            msg.stored = True
            if persistent and self.durable:
                self.pers.add(msg)
            self.paging.waiter(msg)
            out.append(msg)
        return out

    # --- drop-head of what is paged out -------------------------------------------------------
    def drop_paged_head(self, p: int, over_count: bool) -> bool:
        """drop-head's next message is lane p's head, paged out -> False when the drop waits for
        its page. When every paged message is owed already the tail's first goes; over
        x-max-length (`over_count`) the paged head is owed: counted off now, dropped when its
        page is read back (`ask_owing` asks); over x-max-length-bytes only its size is not
        known before then, so its page is asked for."""
        lane = self.paging.lanes[p]
        if lane.owed >= lane.paged:
            self.drop(self.prios.pop_tail(p))
            return True
        if over_count:
            self.paging.owe(lane)
            self.owing.add(p)
            return True
        self.paging.ask_page(p)
        return False

    def ask_owing(self) -> None:
        """The drops owed by drop_paged_head this turn are asked of the backing queue."""
        if self.owing:
            for p in self.owing:
                self.ask_owed(p)
            self.owing.clear()

    def ask_owed(self, p: int) -> None:
        """Owed drops of a lane: read back when the queue must see them (dead-lettering,
        x-confirm-on nacks, the event log), else dropped unread by the backing queue."""
        self.paging.ask_owed(p, self.must_read())

    # --- messages that left -------------------------------------------------------------------
    def refused(self, msgs: list, gone: set) -> list:
        """The backing queue could not store these (disk full): the paged ones leave their
        lanes' counts, a lane with nothing paged left takes its tail back -> the (publisher,
        pub_seq) of their x-confirm-on waiters, lost before any consumer saw them."""
        paging = self.paging
        lost: list = []
        if paging.paged:
            for msg in msgs:
                lane = paging.lanes[msg.priority]
                if lane.paged and msg.seq_id > lane.page_after:
                    paging.read(lane, 1, len(msg.body), False)
                    if msg.pers:
                        msg.pers = False
                        lane.pers_off(1, len(msg.body))
            for p, lane in enumerate(paging.lanes):
                if lane.pubs:
                    lost += lane.pubs.discard(gone)
                if not lane.paged:
                    self.prios.lanes[p].join_tail()
        return lost

    def purge(self) -> list | None:
        """A purge: every paged part is purged (the backing queue settles it) -> the (publisher,
        pub_seq) that waited for a consumer's ack of a purged message (x-confirm-on), None when
        nothing was paged out. The tails' stored messages are settled in the index with their
        lane's paged part (they follow it there)."""
        lost = self.paging.purge() if self.paging.paged else None
        for ready in self.prios.lanes:
            for msg in ready.tail:
                msg.stored = False
        return lost
