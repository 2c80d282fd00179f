"""A queue's paging, without IO: the paging half of rabbit_variable_queue.erl (its delta and
q1), one lane per priority as rabbit_priority_queue.erl runs a backing queue per priority.

In a queue whose ready bodies pass `page_bytes`, new messages go to the index only (counted
here, no Msg kept); they come back `page_size` at a time once fewer than that are in memory. A
message that arrives while a lane has a paged part but memory is below `page_bytes` again waits
in memory behind it, in the lane's tail (`Ready.tail`, rabbit_variable_queue's q1): once the
paged part has been read back the tail joins the head, so a queue whose consumers catch up stops
paging instead of writing and reading back everything that follows; when memory fills again the
tail goes to the index first (push_alphas_to_betas), then the new message.

- a lower priority is never delivered while a higher one waits for its page;
- a length-limited queue counts its paged messages against its limits; drop-head of a paged
  head is owed (`Lane.owed`: counted off at once, dropped or dead-lettered when its page comes
  back, or dropped unread by the backing queue when nothing needs to see it);
- an x-confirm-on queue keeps who waits for each paged message's confirm (`PagedPublishers`,
  ~20 bytes a message) since the index keeps no publisher.

`PageIO` (actors/core/page_io.py) decides where each new message goes and takes pages back
into memory; `Paging` keeps the counts of what is paged out and asks the backing queue, through
the queue's `out`, for pages (`page_in`), unread drops (`drop_paged`) and purges
(`purge_paged`); `PersistentCount` is messages_persistent of what is in memory, beside the
lanes' own (`Lane.pers`). QueueCore (actors/core/queue.py) owns consumers, delivery and limits.
"""

from __future__ import annotations

import bisect
from array import array
from collections import deque


WAIT = "wait"  # QueueCore.get: the head is paged out, try again once it is read back


class PagedPublishers:
    """Who waits for the confirm of each paged-out message of one lane (x-confirm-on=ack or
    ack-lite: the index keeps no publisher), in seq_id order, in three flat arrays (about 20
    bytes a message instead of a tuple in a dict)."""

    __slots__ = ("seqs", "pub_seqs", "who", "start", "names", "ids")

    def __init__(self):
        self.seqs = array("Q")  # seq_id of each paged message that waits for a confirm
        self.pub_seqs = array("Q")  # its publisher's confirm seq no
        self.who = array("I")  # its publisher, an index into names
        self.start = 0  # entries before this one are taken
        self.names: list = []  # publisher channel addresses
        self.ids: dict = {}  # address -> index in names

    def __len__(self):
        return len(self.seqs) - self.start

    def add(self, seq_id: int, publisher: str, pub_seq: int) -> None:
        i = self.ids.get(publisher)
        if i is None:
            i = self.ids[publisher] = len(self.names)
            self.names.append(publisher)
        self.seqs.append(seq_id)
        self.pub_seqs.append(pub_seq)
        self.who.append(i)

    def take(self, seq_id: int):
        """(publisher, pub_seq) of a message read back (seq_ids come in ascending order), or
        None; entries of messages that left the index meanwhile are passed over."""
        seqs, i, n = self.seqs, self.start, len(self.seqs)
        while i < n and seqs[i] < seq_id:
            i += 1
        found = None
        if i < n and seqs[i] == seq_id:
            found = (self.names[self.who[i]], self.pub_seqs[i])
            i += 1
        self.start = i
        if i > 4096 and i * 2 > n:  # compact
            del self.seqs[:i], self.pub_seqs[:i], self.who[:i]
            self.start = 0
        return found

    def discard(self, seq_ids: set) -> list:
        """Drop the entries of these messages: their (publisher, pub_seq)."""
        gone = [(self.names[self.who[j]], self.pub_seqs[j])
                for j in range(self.start, len(self.seqs)) if self.seqs[j] in seq_ids]
        keep = [j for j in range(self.start, len(self.seqs)) if self.seqs[j] not in seq_ids]
        self.seqs = array("Q", (self.seqs[j] for j in keep))
        self.pub_seqs = array("Q", (self.pub_seqs[j] for j in keep))
        self.who = array("I", (self.who[j] for j in keep))
        self.start = 0
        return gone

    def drain(self) -> list:
        """Every (publisher, pub_seq) left; empties the table."""
        out = [(self.names[self.who[j]], self.pub_seqs[j])
               for j in range(self.start, len(self.seqs))]
        self.seqs, self.pub_seqs, self.who, self.start = array("Q"), array("Q"), array("I"), 0
        return out


class Lane:
    """The paged-out part of one priority (the whole queue without x-max-priority): messages
    in the index only, all with seq_id > page_after, read back in order."""

    __slots__ = ("paged", "paged_bytes", "page_after", "asked", "owed", "pubs", "pers",
                 "pers_bytes")

    def __init__(self):
        self.paged = 0  # messages in the index only
        self.paged_bytes = 0  # their body bytes
        # of those, the persistent ones (Msg.pers; after a restart every message the index
        # still holds, the previous run's transient ones too until they are read and dropped,
        # as `paged` counts them) and their body bytes
        self.pers = 0
        self.pers_bytes = 0
        self.page_after = 0  # every message of the lane up to this seq_id is (or was) in memory
        self.asked = False  # a page_in is on its way
        self.owed = 0  # paged head messages drop-head took (counted off, dropped when read)
        self.pubs = None  # PagedPublishers of an x-confirm-on queue, else None

    def pers_off(self, n: int, nbytes: int) -> None:
        """n counted messages of nbytes left the paged part (at most what it counts; none once
        the lane holds no more)."""
        self.pers = max(0, self.pers - n)
        self.pers_bytes = max(0, self.pers_bytes - nbytes)
        if not self.paged:
            self.pers = self.pers_bytes = 0


class PersistentCount:
    """messages_persistent of the messages in memory, ready or unacked (rabbit_variable_queue's
    persistent_count: persistent in a durable queue, `Msg.pers`) and their body bytes; the
    paged ones are their lanes' (`Lane.pers`)."""

    __slots__ = ("n", "nbytes")

    def __init__(self):
        self.n = 0  # messages in memory counted persistent
        self.nbytes = 0  # their body bytes

    def add(self, msg) -> None:
        """A persistent message of a durable queue is in memory (arrived or read back)."""
        msg.pers = True
        self.n += 1
        self.nbytes += len(msg.body)

    def gone(self, msgs) -> None:
        """These messages (in memory) left the queue."""
        for msg in msgs:
            if msg.pers:
                msg.pers = False
                self.n -= 1
                self.nbytes -= len(msg.body)

    def to_lane(self, msg, lane: Lane) -> None:
        """A message went from memory to its lane's paged part: counted there if counted here."""
        if msg.pers:
            self.n -= 1
            self.nbytes -= len(msg.body)
            lane.pers += 1
            lane.pers_bytes += len(msg.body)


class Ready:
    """Ready messages of one priority, kept in seq_id order (requeues go back in place):
    `items` the head, deliverable now; `tail` those that came after the lane's paged part,
    in memory but not deliverable before the paged part has been read back (q1). len() and
    peek() are the head's; the queue's ready_count and ready_bytes count both."""

    __slots__ = ("items", "tail")

    def __init__(self):
        self.items: deque = deque()  # Msg, ascending seq_id
        self.tail: deque = deque()  # Msg, ascending seq_id, all after the lane's paged part

    def all(self) -> list:
        """Head and tail, in seq_id order."""
        return [*self.items, *self.tail] if self.tail else list(self.items)

    def __len__(self):
        return len(self.items)

    def append(self, msg) -> None:
        self.items.append(msg)

    def popleft(self):
        return self.items.popleft()

    def peek(self):
        return self.items[0]

    def join_tail(self) -> None:
        """The lane's paged part has been read back: the tail is next, deliverable."""
        if self.tail:
            self.items.extend(self.tail)
            self.tail = deque()

    def requeue(self, msgs: list) -> None:
        """Put messages back at their original positions (rabbit_variable_queue:requeue)."""
        msgs = sorted(msgs, key=lambda x: x.seq_id)
        if not self.items or msgs[-1].seq_id < self.items[0].seq_id:
            self.items.extendleft(reversed(msgs))
            return
        merged = list(self.items)
        keys = [x.seq_id for x in merged]
        for msg in msgs:
            i = bisect.bisect_left(keys, msg.seq_id)
            keys.insert(i, msg.seq_id)
            merged.insert(i, msg)
        self.items = deque(merged)


class Paging:
    """What a queue holds paged out, every priority: each lane's counts, the totals its limits
    and statistics read, and what it asks the backing queue for."""

    __slots__ = ("out", "page_bytes", "page_size", "pageable", "lanes", "paged", "paged_bytes",
                 "owed")

    def __init__(self, out, priorities: int, page_bytes: int, page_size: int):
        self.out = out  # the queue's effects: page_in, drop_paged, purge_paged
        self.page_bytes = page_bytes  # ready bytes in memory past which new messages page out
        self.page_size = page_size  # messages read back per page
        self.pageable = bool(page_bytes)  # every queue type pages (not a mirrored one yet)
        self.lanes = [Lane() for _ in range(priorities)]  # the paged part of each priority
        self.paged = 0  # messages in the index only, every lane
        self.paged_bytes = 0  # their body bytes
        self.owed = 0  # paged messages drop-head took, not yet read back to drop, every lane

    # --- counts -------------------------------------------------------------------------------
    def add(self, lane: Lane, size: int) -> None:
        """A message of `size` body bytes went to the lane's paged part."""
        lane.paged += 1
        lane.paged_bytes += size
        self.paged += 1
        self.paged_bytes += size

    def read(self, lane: Lane, n: int, nbytes: int, no_more: bool) -> None:
        """n paged messages of nbytes left the lane (read back or dropped unread); `no_more`:
        the index said it holds no more of it (the counts were off: they are set right)."""
        lane.paged -= n
        lane.paged_bytes -= nbytes
        self.paged -= n
        self.paged_bytes -= nbytes
        if no_more or lane.paged < 0:
            self.paged -= lane.paged
            self.paged_bytes -= lane.paged_bytes
            lane.paged = lane.paged_bytes = 0

    def owe(self, lane: Lane) -> None:
        """drop-head took the lane's paged head: counted off now, dropped when it is read."""
        lane.owed += 1
        self.owed += 1

    def pay(self, lane: Lane, n: int) -> int:
        """n messages of the lane came back (or were dropped unread) -> how many of them were
        owed (the first ones); owed ones beyond what the lane still holds were stale."""
        done = min(lane.owed, n)
        lane.owed -= done
        self.owed -= done
        if lane.owed > lane.paged:  # stale entries (dropped at read) were owed ones
            self.owed -= lane.owed - lane.paged
            lane.owed = lane.paged
        return done

    def has_head(self, p: int) -> bool:
        """Lane p's paged part holds messages not owed already."""
        lane = self.lanes[p]
        return lane.paged > lane.owed

    def restore(self, more, more_bytes, last: list, durable: bool) -> None:
        """Start-up: what the index holds beyond the first page, per lane (`last`: the seq_id
        each lane's part in memory ends at)."""
        for p, (n, nbytes) in enumerate(zip(more, more_bytes)):
            if n and p < len(self.lanes):
                lane = self.lanes[p]
                lane.paged, lane.paged_bytes, lane.page_after = n, nbytes, last[p]
                if durable:  # what the index holds of a durable queue is persistent
                    lane.pers, lane.pers_bytes = n, nbytes  # (transient leftovers: until read)
                self.paged += n
                self.paged_bytes += nbytes

    def persistent(self) -> tuple[int, int]:
        """(messages, body bytes) counted persistent in the paged parts."""
        return (sum(lane.pers for lane in self.lanes),
                sum(lane.pers_bytes for lane in self.lanes))

    # --- requests to the backing queue ---------------------------------------------------------
    def want_page(self, ready: list) -> None:
        """Read back the next page of the highest priority that has a paged part, once fewer
        than page_size messages of that priority and above are in memory (`ready`: the
        queue's Ready of each priority)."""
        in_memory = 0
        for p in range(len(ready) - 1, -1, -1):
            in_memory += len(ready[p])
            if self.lanes[p].paged:
                if in_memory < self.page_size:
                    self.ask_page(p)
                return

    def ask_page(self, p: int) -> None:
        lane = self.lanes[p]
        if lane.paged and not lane.asked:
            lane.asked = True
            # never more than the paged part: the lane's tail follows it in the index too when
            # its messages are persistent (written as they came), and is in memory already
            self.out.page_in(lane.page_after, min(self.page_size, lane.paged), p)

    def ask_owed(self, p: int, must_read: bool) -> None:
        """Owed drops of a lane: dropped unread by the backing queue, or read back when the
        queue must see them (`must_read`: dead-lettering, x-confirm-on nacks, the event log)."""
        lane = self.lanes[p]
        if not lane.owed or lane.asked:
            return
        if not must_read:
            lane.asked = True
            self.out.drop_paged(lane.page_after, lane.owed, p)
        else:
            self.ask_page(p)

    def purge(self) -> list:
        """Every paged part is purged (the backing queue settles it) -> the (publisher,
        pub_seq) that waited for a consumer's ack of a purged message (x-confirm-on)."""
        lost = []
        for p, lane in enumerate(self.lanes):
            if lane.paged:
                self.out.purge_paged(lane.page_after, p)
            if lane.pubs is not None:
                lost += lane.pubs.drain()
                lane.pubs = None
            lane.paged = lane.paged_bytes = lane.owed = 0
            lane.pers = lane.pers_bytes = 0
            lane.asked = False
        self.paged = self.paged_bytes = self.owed = 0
        return lost

    # --- x-confirm-on waiters -----------------------------------------------------------------
    def keep_waiter(self, msg) -> None:
        """A paged message whose confirm waits for a consumer's ack: its lane keeps who waits."""
        lane = self.lanes[msg.priority]
        if lane.pubs is None:
            lane.pubs = PagedPublishers()
        lane.pubs.add(msg.seq_id, msg.publisher, msg.pub_seq)

    def waiter(self, msg) -> None:
        """A message read back: who waits for its confirm, if anyone, is its again."""
        pubs = self.lanes[msg.priority].pubs
        if pubs is not None:
            found = pubs.take(msg.seq_id)
            if found is not None:
                msg.publisher, msg.pub_seq = found

    def drain_waiters(self) -> list:
        """Every paged message's waiter, forgotten -> their (publisher, pub_seq)."""
        out = []
        for lane in self.lanes:
            if lane.pubs is not None:
                out += lane.pubs.drain()
                lane.pubs = None
        return out
