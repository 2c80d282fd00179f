"""BackingQueue actor: the storage half of a queue (rabbit_variable_queue.erl's role).

The Queue actor hands it the persistent messages of a durable queue (actors/messages.py, "local
only: queue worker"): `Persist(msgs)` when they arrive, `RecordDelivery(msgs)` when they are
first handed to a consumer (so that they come back redelivered=true after a crash), `Forget(msgs)`
when they are acked or dropped; `Recover`, `PageIn`, `PurgeAfter` and `DeleteIndex` read back,
page in, purge and drop the index. It answers `Persisted(msgs)` once they are on disk, and the
Queue sends the publisher confirms then. The worker's backing queues share the "store"
scheduler, a thread apart from the worker's event loop, so that an fsync never stalls deliveries.

Group commit (behaviour C7): writes are committed to LMDB at once but synced together, either
when this actor has nothing else to do (its mailbox is empty: the queue went idle with confirms
pending) or at the latest `sync_interval_ms` after the first unsynced publish. One sync covers
every message written before it, for every queue of the node (one environment): the backing
queues of a worker share the "store" scheduler, an idle one asks for its sync at the back of the
run queue (`_IdleSync`), so the others write first, and a sync that finds its writes already
covered by another queue's sync skips the fsync (Storage.sync_upto).

A transient message is "safe" as soon as the queue accepts it, RabbitMQ's rule. It reaches
storage only when its queue pages (more ready bytes than `queue_page_bytes` in memory), as
RabbitMQ's classic queues v2 do: written, never synced for its own sake, dropped at restart.
A transient queue opens its index the first time it pages (and wipes what a queue of the same
name may have left there); the node drops transient queues' indexes at boot.

A priority queue keeps each priority in an index of its own (rabbit_priority_queue runs one
backing queue per priority, named `<name>\0<priority>`): priority 0 in the queue's index,
priority p > 0 in the index of `lane_name(name, p)`, so that a priority's paged part is read back
in order without reading the others'. Every message names its priority (Msg.priority, PageIn,
PurgeAfter).
"""

from __future__ import annotations

import logging
import time

import lmdb

from actors import events
from actors.messages import (DeleteIndex, DropPaged, Forget, PageIn, Paged, PagedDropped, Persist,
                             Persisted, PurgeAfter, RecordDelivery, Recover, Recovered, Refused,
                             Stored)
from actors.runtime import LightActor
from actors.queue.storage import Storage, queue_id
from protocol.properties import BasicProperties
from queue_index import IndexEntry

log = logging.getLogger("leveret.backing_queue")


class _Sync:
    """Timer -> BackingQueue: the sync interval is over."""

    __slots__ = ()


class _IdleSync:
    """BackingQueue -> itself: idle with confirms pending; sync after the other queues ran."""

    __slots__ = ()


def lane_name(name: str, priority: int) -> str:
    """The name whose index holds a priority queue's messages of one priority (0: the queue's
    own), as rabbit_priority_queue:mutate_name/2 names its sub-queues."""
    return name if not priority else f"{name}\x00{chr(priority)}"


def priorities(arguments) -> int:
    """How many priorities (lanes) a queue with these x-arguments has (1 without
    x-max-priority; at most 256, as the queue core clamps it)."""
    maxp = (arguments or {}).get("x-max-priority")
    if isinstance(maxp, bool) or not isinstance(maxp, int) or maxp <= 0:
        return 1
    return min(maxp, 255) + 1


def lane_queue_ids(vhost: str, name: str, arguments) -> list:
    """Every index id a durable queue with these arguments may use (the node keeps them)."""
    return [queue_id(vhost, lane_name(name, p)) for p in range(priorities(arguments))]


class BackingQueue(LightActor):
    scheduler_name = "store"  # an fsync stalls the other backing queues, never a queue

    def __init__(self, queue_ref, qdef: dict, config, timers=None):
        super().__init__()
        self.queue_ref = queue_ref  # the Queue actor this serves
        self.durable = qdef["durable"]  # only durable queues persist anything
        self.vhost, self.qname = qdef["vhost"], qdef["name"]  # identity (events)
        self.config = config  # node configuration (storage settings)
        self.timers = timers  # the process's timer thread (sync interval)
        self.storage = Storage.of(config) if self.durable else None  # the node's LMDB env
        self.index = (self.storage.queue_index(qdef["vhost"], qdef["name"])
                      if self.durable else None)  # this queue's queue_index (a transient
        #                                           queue's is opened when it first pages)
        self.qid = queue_id(qdef["vhost"], qdef["name"])  # its key in the environment
        self.lanes = priorities(qdef.get("arguments"))  # priorities, each with its index
        self.lane_indexes: dict = {}  # priority (> 0) -> its QueueIndex, opened on first use
        self.pending_acks: list = []  # ack records a full store refused: retried
        self.unsynced: list = []  # persisted to LMDB, waiting for the sync to be confirmed
        self.timer_armed = False  # a _Sync is on its way
        self.idle_sync = False  # an _IdleSync is on its way
        self.written = 0  # Storage.committed() number of this queue's last write
        self.deleted = False  # the queue was deleted (its index is gone)
        self.dirty = False  # the last run did not stop cleanly: every entry may be delivered
        self.adopting = False  # recovering what a promoted mirror paged out: keep it all
        self.boot_seq = 0  # entries below this seq_id are from before the start: transient
        #                    ones among them (paged out, not meant to survive) are dropped

    def on_receive(self, msg):
        try:
            if isinstance(msg, _Sync):
                self.timer_armed = False
                self._sync()
            elif isinstance(msg, _IdleSync):
                self.idle_sync = False
                self._sync()
            elif isinstance(msg, Persist):
                self._persist(msg.msgs)
            elif isinstance(msg, RecordDelivery):
                self._record_delivery(msg.msgs)
            elif isinstance(msg, Forget):
                self._forget(msg.msgs)
            elif isinstance(msg, Recover):
                self.queue_ref.tell(Recovered(*self._recover(msg.limit, msg.adopt, msg.after)))
            elif isinstance(msg, PageIn):
                page = self._page(msg.after_seq, msg.n, msg.priority)
                page.sync = msg.sync
                self.queue_ref.tell(page)
            elif isinstance(msg, DropPaged):
                self.queue_ref.tell(self._drop_paged(msg.after_seq, msg.n, msg.priority))
            elif isinstance(msg, PurgeAfter):
                self._purge_after(msg.after_seq, msg.priority)
            elif isinstance(msg, DeleteIndex):
                self._delete()
        finally:
            if self.unsynced and not self.idle_sync and self.actor_inbox.empty():
                self.idle_sync = True  # idle with confirms pending: sync next turn
                self.actor_ref.tell(_IdleSync())
            if self.storage is not None:
                self.storage.maybe_trim()

    # --- writes ---------------------------------------------------------------------------------
    def _lane(self, priority: int):
        """The index of a priority (opened on first use; a transient queue's is wiped then)."""
        if not priority:
            if self.index is None:
                self.storage = Storage.of(self.config)
                self.index = (self.storage.queue_index(self.vhost, self.qname) if self.adopting
                              else self._open_transient(self.qname))
            return self.index
        index = self.lane_indexes.get(priority)
        if index is None:
            self.storage = self.storage or Storage.of(self.config)
            name = lane_name(self.qname, priority)
            index = (self.storage.queue_index(self.vhost, name)
                     if self.durable or self.adopting else self._open_transient(name))
            self.lane_indexes[priority] = index
        return index

    def _by_lane(self, msgs) -> dict:
        """{priority: [msg]}: one entry for a queue without priorities."""
        if self.lanes == 1:
            return {0: msgs}
        out: dict = {}
        for m in msgs:
            out.setdefault(m.priority, []).append(m)
        return out

    def _record_delivery(self, msgs) -> None:
        lanes = {p: ([m.seq_id for m in ms], self._lane(p))
                 for p, ms in self._by_lane(msgs).items()}

        def write(txn):
            for seqs, index in lanes.values():
                index.deliver(txn, seqs)

        self._write(write)

    def _persist(self, msgs) -> None:
        lanes = {p: (ms, self._lane(p)) for p, ms in self._by_lane(msgs).items()}
        store = self.storage.msg_store
        if self.storage.disk_alarm():
            self.queue_ref.tell(Refused(msgs))  # their publishers get basic.nack
            return
        wall_offset = int(time.time() * 1000) - int(time.monotonic() * 1000)

        def write(txn):
            for lane_msgs, index in lanes.values():
                entries = []
                for m in lane_msgs:
                    size = len(m.body)
                    embedded = index.embeds(size)
                    if not embedded:
                        store.put(txn, m.msg_id, m.body)
                    entries.append(IndexEntry(
                        m.seq_id, m.msg_id, m.exchange, m.routing_key, m.props_raw,
                        m.body if embedded else None, size, m.priority,
                        m.expires_at + wall_offset if m.expires_at else 0, m.redelivered))
                index.publish(txn, entries)

        if self._write(write):
            self.queue_ref.tell(Stored(sum(len(m.body) for m in msgs)))
            if events.enabled():
                embeds = next(iter(lanes.values()))[1].embeds
                for m in msgs:
                    events.emit("stored", m.msg_id, actor="backing_queue", vhost=self.vhost,
                                queue=self.qname, seq_id=m.seq_id,
                                where="index" if embeds(len(m.body)) else "msg_store")
            # only persistent messages wait for a sync: a paged-out transient one was
            # confirmed when the queue took it, and is not meant to outlive the node
            self.unsynced.extend(m for m in msgs if m.persistent)
            if self.unsynced and not self.timer_armed and self.timers is not None:
                self.timer_armed = True
                self.timers.at(int(time.monotonic() * 1000) + self.config.sync_interval_ms,
                               self.actor_ref, _Sync())
        else:
            self.queue_ref.tell(Refused(msgs))

    def _open_transient(self, name: str):
        """A transient queue pages (a priority of it) for the first time: the index, emptied
        of whatever a queue of the same name left in it (one deleted while its worker was
        down)."""
        index = self.storage.queue_index(self.vhost, name)
        store = self.storage.msg_store

        def write(txn):
            released = index.delete(txn)
            if released:
                store.release(txn, released)

        self._write(write)
        return index

    def _forget(self, msgs) -> None:
        if self.storage is None:
            return
        store = self.storage.msg_store
        acks = self.pending_acks + [(m.priority if self.lanes > 1 else 0, m.seq_id)
                                    for m in msgs]
        by_lane: dict = {}
        for p, seq in acks:
            by_lane.setdefault(p, []).append(seq)
        lanes = [(self._lane(p), seqs) for p, seqs in by_lane.items()]

        def write(txn):
            for index, seqs in lanes:
                released = index.ack(txn, seqs)
                if released:
                    store.release(txn, released)

        # a full store cannot even delete (copy-on-write): keep the acks and try again with
        # the next write, so that an acked message never comes back
        self.pending_acks = [] if self._write(write) else acks

    def _write(self, fn) -> bool:
        """One LMDB write transaction; False when the disk (map) is full."""
        try:
            with self.storage.env.begin(write=True) as txn:
                fn(txn)
            self.written = self.storage.committed()
            return True
        except lmdb.MapFullError:
            log.error("message store full (storage_map_size=%d bytes in %s): refusing "
                      "persistent messages until space is freed", self.config.storage_map_size,
                      self.storage.env.path())
            return False

    def _sync(self) -> None:
        if not self.unsynced:
            return
        self.storage.sync_upto(self.written)
        done, self.unsynced = self.unsynced, []
        if events.enabled():
            for m in done:
                events.emit("synced", m.msg_id, actor="backing_queue", vhost=self.vhost,
                            queue=self.qname, seq_id=m.seq_id)
        self.queue_ref.tell(Persisted(done))

    def on_stop(self) -> None:
        if self.index is not None and self.durable:
            if self.pending_acks:
                self._forget([])
            self._sync()
            if not self.deleted:
                self.storage.mark_clean(self.qid)

    def _delete(self) -> None:
        self.deleted = True
        if self.durable:  # every priority's index, opened or not
            indexes = [self._lane(p) for p in range(self.lanes)]
        else:
            indexes = [i for i in [self.index, *self.lane_indexes.values()] if i is not None]
        if indexes:
            store = self.storage.msg_store

            def write(txn):
                for index in indexes:
                    released = index.delete(txn)
                    if released:
                        store.release(txn, released)

            self._write(write)
        self.unsynced = []

    def _drop_paged(self, after: int, n: int, priority: int) -> PagedDropped:
        """drop-head of paged messages nothing needs: settled without reaching the queue."""
        index = self._lane(priority)
        with self.storage.env.begin() as txn:
            entries = index.read(txn, after, n)
        if entries:
            self._forget_entries(entries, index)
        return PagedDropped(priority, len(entries), sum(e.body_size for e in entries),
                            entries[-1].seq_id if entries else 0, [e.seq_id for e in entries])

    def _purge_after(self, after: int, priority: int = 0) -> None:
        store = self.storage.msg_store
        index = self._lane(priority)
        with self.storage.env.begin() as txn:
            seqs = list(index.live_seq_ids(txn, after))

        def write(txn):
            released = index.ack(txn, seqs)
            if released:
                store.release(txn, released)

        self._write(write)

    # --- reading back ---------------------------------------------------------------------------
    def _recover(self, limit: int | None, adopt: bool = False, after=None) -> tuple:
        """(next seq_id, first messages [(IndexEntry, body, persistent)], how many more and
        their bytes) of what was published and not acked; for a priority queue the first
        page of every priority, and lists by priority of how many more. `adopt`: a promoted
        mirror's index (what it paged out, transient messages too, all from this run); `after`:
        per priority, the seq_id up to which the queue has the messages in memory already (the
        mirror's, which it wrote too): read from there, counted off."""
        self.adopting = adopt
        if self.index is None and not adopt:
            return 1, [], 0, 0
        indexes = [self._lane(p) for p in range(self.lanes)]
        self.adopting = False
        with self.storage.env.begin() as txn:
            recs = [index.recover(txn) for index in indexes]
        # (a promoted mirror's transient entries are not from before a restart: kept)
        self.boot_seq = 0 if adopt else max(rec.next_seq_id for rec in recs)
        # after a crash a deliver record may be missing for a message that did reach a client
        # (it is written behind the delivery): all may have been delivered, redelivered=true
        clean = self.storage.was_clean(self.qid)
        self.dirty = any(rec.live for rec in recs) and not clean and not adopt
        entries, more, more_bytes = [], [], []
        for p, rec in enumerate(recs):
            if not rec.live:
                more.append(0)
                more_bytes.append(0)
                continue
            start, held, held_bytes = -1, 0, 0
            if after and after.get(p):
                start = after[p]
                with self.storage.env.begin() as txn:
                    at = -1
                    while True:
                        chunk = indexes[p].read(txn, at, 1024)
                        below = [e for e in chunk if e.seq_id <= start]
                        held += len(below)
                        held_bytes += sum(e.body_size for e in below)
                        if len(below) < len(chunk) or not chunk:
                            break
                        at = chunk[-1].seq_id
            page = self._page(start, limit or rec.live + 1, p)
            entries += page.entries
            more.append(max(rec.live - held - len(page.entries) - page.dropped, 0))
            more_bytes.append(max(rec.live_bytes - held_bytes -
                                  sum(len(b) for _, b, _ in page.entries) -
                                  page.dropped_bytes, 0))
        entries.sort(key=lambda e: e[0].seq_id)
        next_seq = max(max(rec.next_seq_id for rec in recs), 1)
        if self.lanes == 1:
            return next_seq, entries, more[0], more_bytes[0]
        return next_seq, entries, more, more_bytes

    def _page(self, after: int, limit: int, priority: int = 0) -> Paged:
        out, stale = [], []
        index = self._lane(priority)
        with self.storage.env.begin() as txn:
            entries = index.read(txn, after, limit)
            for e in entries:
                persistent = _persistent(e.props_raw)
                if not persistent and e.seq_id < self.boot_seq:
                    stale.append(e)
                    continue
                body = e.body
                if body is None:
                    body = self.storage.msg_store.get(txn, e.msg_id)
                    if body is None:
                        log.error("queue index names body %s missing from msg_store: "
                                  "message %d dropped", e.msg_id.hex(), e.seq_id)
                        stale.append(e)
                        continue
                if self.dirty and e.seq_id < self.boot_seq and not e.delivered:
                    e = e._replace(delivered=True)
                out.append((e, bytes(body), persistent))
        if stale:
            self._forget_entries(stale, index)
        return Paged(out, len(stale), sum(e.body_size for e in stale), priority)

    def _forget_entries(self, entries, index) -> None:
        store = self.storage.msg_store

        def write(txn):
            released = index.ack(txn, [e.seq_id for e in entries])
            if released:
                store.release(txn, released)

        self._write(write)


def _persistent(props_raw: bytes) -> bool:
    try:
        return BasicProperties.decode(props_raw).delivery_mode == 2 if props_raw else False
    except Exception:  # noqa: BLE001 - an undecodable record: treat as transient
        return False
