"""BackingQueue actor: the storage half of a queue (rabbit_variable_queue.erl's role).

The Queue actor hands it the persistent messages of a durable queue (actors/messages.py, "local
only: queue worker"): `Persist(msgs)` when they arrive, `RecordDelivery(msgs)` when they are
first handed to a consumer (so that they come back redelivered=true after a crash), `Forget(msgs)`
when they are acked or dropped; `Recover`, `PageIn`, `PurgeAfter` and `DeleteIndex` read back,
page in, purge and drop the index. It answers `Persisted(msgs)` once they are on disk, and the
Queue sends the publisher confirms then. The worker's backing queues share the "store"
scheduler, a thread apart from the worker's event loop, so that an fsync never stalls deliveries.

Group commit (behaviour C7), and writing only what must be written: nothing is
written when it arrives. Persist stages the messages; a Forget that finds its message still
staged cancels it (never written, as RabbitMQ's msg_store cancels a pending write when the
remove comes first); a Forget of a written message stages its ack (and appends it to the
queue's ack log, replayed at recovery, so that it survives kill -9). A flush (Storage.flush) writes
what every backing queue of the process staged in one LMDB transaction, durable when it returns
(the environment commits with sync=True, metasync=True: power-loss safe). A flush happens at
the sync, either when this actor has nothing else to do with publishes staged (its mailbox is
empty: the queue went idle) or at the latest `sync_interval_ms` after the first unconfirmed
publish or staged ack; before any read of the index; and when FLUSH_BYTES of bodies or
FLUSH_ACKS acks are staged. After it, every message given before
is on disk or was acked first, and the queue is told `Persisted`. The backing queues of a worker
share the "store" scheduler; an idle one asks for its sync at the back of the run queue
(`_IdleSync`), so the others stage first, and a sync that finds nothing staged costs nothing.

A transient message is "safe" as soon as the queue accepts it, RabbitMQ's rule. It reaches
storage only when its queue pages (more ready bytes than `queue_page_bytes` in memory), as
RabbitMQ's classic queues v2 do: staged and written like the others, never waited for, dropped
at restart.
A transient queue opens its index the first time it pages (and wipes what a queue of the same
name may have left there); the node drops transient queues' indexes at boot.

A priority queue keeps each priority in an index of its own (rabbit_priority_queue runs one
backing queue per priority, named `<name>\0<priority>`): priority 0 in the queue's index,
priority p > 0 in the index of `lane_name(name, p)`, so that a priority's paged part is read back
in order without reading the others'. Every message names its priority (Msg.priority, PageIn,
PurgeAfter).
Staged writes, cancellation of a message acked before its flush, deliver records and the ack
log all name the priority of the index a message belongs to.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from itertools import islice

import lmdb
from pykka import ActorDeadError

from actors import events, faults
from actors.queue import census
from actors.store import quorum_log
from actors.messages import (DeleteIndex, DropPaged, Forget, KeepOnly, LogBarrier, PageIn, Paged, PagedDropped,
                             Persist, Persisted, PurgeAfter, RecordDelivery, Recover, Recovered,
                             Refused, Stored, StoredMessage)
from actors.core import quorum
from actors.core.queue_stats import DiskCounts
from actors.runtime import LightActor
from actors.store.lanes import lane_name, priorities
from actors.store.storage import Storage, queue_id
from protocol.properties import BasicProperties, delivery_mode
from queue_index import IndexEntry
from queue_index.entry import props_raw as entry_props

log = logging.getLogger("leveret.backing_queue")


class _Sync:
    """Timer -> BackingQueue: the sync interval is over."""

    __slots__ = ()


class _IdleSync:
    """BackingQueue -> itself: idle with confirms pending; sync after the other queues ran."""

    __slots__ = ()


class BackingQueue(LightActor):
    scheduler_name = "store"  # an fsync stalls the other backing queues, never a queue

    def __init__(self, queue_ref, qdef: dict, config, timers=None, mirror: bool = False,
                 counts: DiskCounts | None = None):
        super().__init__()
        self.queue_ref = queue_ref  # the Queue actor this serves
        # messages written to and read back from storage (the management API's disk_writes
        # and disk_reads); the Queue reads them when it samples
        self.counts = counts if counts is not None else DiskCounts()
        self.durable = qdef["durable"]  # only durable queues persist anything
        self.vhost, self.qname = qdef["vhost"], qdef["name"]  # identity (events)
        self.config = config  # node configuration (storage settings)
        self.timers = timers  # the process's timer thread (sync interval)
        self.mirror = mirror  # a mirror's: what it staged is written at its stop (a promoted
        #                       queue adopts the index), transient messages too
        self.storage = Storage.of(config) if self.durable else None  # the node's LMDB env
        self.index = (self.storage.queue_index(qdef["vhost"], qdef["name"])
                      if self.durable else None)  # this queue's queue_index (a transient
        #                                           queue's is opened when it first pages)
        self.qid = queue_id(qdef["vhost"], qdef["name"])  # its key in the environment
        self.lanes = priorities(qdef.get("arguments"))  # priorities, each with its index
        # a quorum queue's messages are all kept, whatever their delivery mode
        self.keep_all = quorum.is_quorum(qdef.get("arguments"))
        self.lane_indexes: dict = {}  # priority (> 0) -> its QueueIndex, opened on first use
        self.pending: dict = {}  # seq_id -> message given in Persist and not written yet: an
        #                          ack before the next flush cancels it (never written)
        self.pending_bytes = 0  # body bytes given in Persist since the last flush (Stored)
        self.pending_acks: list = []  # (priority, seq_id) of written messages acked since the
        #                               last flush
        self.delivered_pending: set = set()  # pending seq_ids delivered: the publish record
        #                                      carries the flag
        self.delivered: set = set()  # (priority, seq_id) written, delivered and not acked: their
        #                              deliver records are written at a clean stop (after a
        #                              crash every entry comes back redelivered anyway)
        self.cancelled: set = set()  # seq_ids acked before their flush since the last _sync
        self.unsynced: list = []  # persistent messages not yet confirmed to the queue
        self.staged = False  # in storage.dirty: the next flush writes what this holds
        self.timer_armed = False  # a _Sync is on its way
        self.idle_sync = False  # an _IdleSync is on its way
        self.deleted = False  # the queue was deleted (its index is gone)
        self.dirty = False  # the last run did not stop cleanly: every entry may be delivered
        self.adopting = False  # recovering what a promoted mirror paged out: keep it all
        self.boot_seq = 0  # entries below this seq_id are from before the start: transient
        #                    ones among them (paged out, not meant to survive) are dropped
        self.stopping = False  # in on_stop: the queue is gone, nothing is told to it
        self.ack_log: int | None = None  # fd of the queue's ack log (durable queues), see _log_acks
        self.ack_logged = False  # the ack log holds acks not yet flushed

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
            elif isinstance(msg, KeepOnly):
                self._keep_only(msg.upto, msg.keep)
            elif isinstance(msg, census.Census):
                self._census(msg)
            elif isinstance(msg, LogBarrier):
                self._tell(msg)  # (everything before it is done)
        finally:
            if (self.unsynced or self.pending) and not self.idle_sync and \
                    self.actor_inbox.empty():
                # idle with publishes staged: sync next turn (staged acks alone wait for the
                # timer: they are in the ack log, and a flush now would hold the next ones up
                # behind its fsyncs)
                self.idle_sync = True
                self.actor_ref.tell(_IdleSync())
            if self.storage is not None:
                self.storage.trim()

    # --- the index of each priority -------------------------------------------------------------
    def _p(self, m) -> int:
        """The priority (lane) whose index holds a message: 0 without x-max-priority."""
        return m.priority if self.lanes > 1 else 0

    def _lane(self, priority: int):
        """The index of a priority, opened on first use (a transient queue's is wiped then).
        Never called inside a flush (opening an index takes a write transaction of its own):
        Persist, Forget and the reads open what the flush will write."""
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

    def _opened(self, priority: int):
        """The index of a priority if it was opened (None: nothing of it was ever written)."""
        return self.index if not priority else self.lane_indexes.get(priority)

    def _open_transient(self, name: str):
        """A transient queue pages (a priority of it) for the first time: the index, emptied
        of whatever a queue of the same name left in it (one deleted while its worker was
        down). Its own transaction: nothing of this index is staged yet."""
        index = self.storage.queue_index(self.vhost, name)
        try:
            self.storage.delete_index(index)
        except lmdb.MapFullError:
            self._map_full()
        return index

    # --- writes ---------------------------------------------------------------------------------
    # Nothing is written when it arrives: Persist and Forget are staged, and one transaction per
    # flush (Storage.flush: every staged backing queue of the process at once) writes the
    # publishes that were not acked meanwhile and the acks of messages written before, each in
    # the index of its priority. A flush happens at the sync (the 200 ms timer or the queue
    # going idle), before any read of any of the queue's indexes, and when FLUSH_BYTES of bodies
    # are staged. Storage commits are durable (sync=True).
    def _persist(self, msgs) -> None:
        for p in {self._p(m) for m in msgs}:
            self._lane(p)  # opened now: the flush writes into it
        storage = self.storage
        incoming = sum(len(m.body) for m in msgs)
        if storage.disk_alarm(storage.staged_bytes() + incoming):
            if self.pending_acks:
                storage.stage(self)  # acks a full store refused before: try them again
            if storage.dirty:  # staged acks free space: write them, then look again
                storage.flush()
            if storage.disk_alarm(storage.staged_bytes() + incoming):
                self.queue_ref.tell(Refused(msgs))  # their publishers get basic.nack
                return
        pending = self.pending
        nbytes = 0
        early = faults.bug("confirm_before_sync", self.qname, self.config.host)
        if early:  # a test-only bug (actors/faults.py): confirmed before it is on disk
            self._tell(Persisted([m for m in msgs if m.persistent]))
        for m in msgs:
            pending[m.seq_id] = m
            nbytes += len(m.body)
            if m.persistent and not early:
                # only persistent messages wait for a sync: a paged-out transient one was
                # confirmed when the queue took it, and is not meant to outlive the node
                self.unsynced.append(m)
        self.pending_bytes += nbytes
        self.storage.stage(self)
        if self.unsynced:
            self._arm_timer()
        if self.pending_bytes >= FLUSH_BYTES:
            self._flush()

    def _arm_timer(self) -> None:
        if not self.timer_armed and self.timers is not None:
            self.timer_armed = True
            self.timers.at(int(time.monotonic() * 1000) + self.config.sync_interval_ms,
                           self.actor_ref, _Sync())

    def _staged(self, m):
        """The staged (not yet written) message of m's seq_id in m's priority, or None."""
        staged = self.pending.get(m.seq_id)
        if staged is not None and self._p(staged) == self._p(m):
            return staged
        return None

    def _record_delivery(self, msgs) -> None:
        for m in msgs:
            if self._staged(m) is not None:
                self.delivered_pending.add(m.seq_id)
            else:
                self.delivered.add((self._p(m), m.seq_id))

    def _forget(self, msgs) -> None:
        if self.storage is None:
            return  # (a transient queue that never paged: nothing of it is stored)
        pending = self.pending
        if not msgs and self.pending_acks:
            self.storage.stage(self)
        acked = []
        for m in msgs:
            seq, p = m.seq_id, self._p(m)
            if self._staged(m) is not None:  # acked before its flush: never written
                del pending[seq]
                self.delivered_pending.discard(seq)
                self.cancelled.add(seq)
                continue
            if self._opened(p) is None:
                if not self.durable:
                    continue  # a priority of a transient queue that never paged
                self._lane(p)  # opened now: the flush acks in it
            acked.append((p, seq))
            self.delivered.discard((p, seq))
        if acked:
            self.pending_acks.extend(acked)
            self._log_acks(acked)
        if self.pending_acks:
            self.storage.stage(self)
            self._arm_timer()
            if len(self.pending_acks) >= FLUSH_ACKS:
                self._flush()

    # An ack of a written message waits for the next flush, like everything else; meanwhile it
    # is appended to the queue's ack log (<data_dir>/messages/acks/<queue id>, big-endian u64
    # records: the priority in the top byte, the seq_id below it; one write() to the page
    # cache, no fsync), so that it survives kill -9 of the worker as a committed LMDB
    # transaction did: recovery replays the log. A flush that wrote the acks truncates it. A
    # power cut may lose the log's tail: those messages come back, redelivered (an ack needs no
    # sync of its own; RabbitMQ's queue index journal the same).
    def _ack_log_path(self) -> str:
        return os.path.join(self.storage.env.path(), "acks", self.qid.hex())

    def _log_acks(self, acks) -> None:
        if not self.durable:
            return  # a transient queue's paged messages do not outlive the node anyway
        if self.ack_log is None:
            os.makedirs(os.path.dirname(self._ack_log_path()), exist_ok=True)
            self.ack_log = os.open(self._ack_log_path(),
                                   os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(self.ack_log, struct.pack(f">{len(acks)}Q",
                                           *[(p << _LANE_SHIFT) | seq for p, seq in acks]))
        self.ack_logged = True

    def _replay_ack_log(self) -> None:
        """At recovery: stage the acks the log kept (a torn last record is ignored; acks of
        seq_ids already acked are counted as unknown and ignored by the index)."""
        try:
            with open(self._ack_log_path(), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        n = len(data) // 8
        if n:
            for rec in struct.unpack(f">{n}Q", data[:n * 8]):
                p = rec >> _LANE_SHIFT
                if p < self.lanes:
                    self._lane(p)
                    self.pending_acks.append((p, rec & _SEQ_MASK))
            self.ack_logged = True
            self.storage.stage(self)

    def _truncate_ack_log(self) -> None:
        if self.ack_logged:
            self.ack_logged = False
            if self.ack_log is not None:
                os.ftruncate(self.ack_log, 0)
            else:
                try:
                    os.truncate(self._ack_log_path(), 0)
                except FileNotFoundError:
                    pass

    def _close_ack_log(self, unlink: bool = False) -> None:
        if self.ack_log is not None:
            os.close(self.ack_log)
            self.ack_log = None
        if unlink and self.durable and self.storage is not None:
            try:
                os.unlink(self._ack_log_path())
            except FileNotFoundError:
                pass

    def write_staged(self, txn, publishes: bool = True, acks: bool = True) -> None:
        """Storage.flush -> here, inside its transaction: write what this queue staged (the
        publishes, the acks, or both), each priority into its own index."""
        store = self.storage.msg_store
        if publishes and self.pending:
            wall_offset = int(time.time() * 1000) - int(time.monotonic() * 1000)
            delivered = self.delivered_pending
            by_lane: dict = {}
            for seq in sorted(self.pending):
                m = self.pending[seq]
                p = self._p(m)
                index = self._opened(p)
                size = len(m.body)
                embedded = index.embeds(size)
                if not embedded:
                    store.put(txn, m.msg_id, m.body)
                by_lane.setdefault(p, []).append(IndexEntry(
                    m.seq_id, m.msg_id, m.exchange, m.routing_key, m.props_raw,
                    m.body if embedded else None, size, m.priority,
                    m.expires_at + wall_offset if m.expires_at else 0,
                    m.redelivered or seq in delivered))
            for p, entries in by_lane.items():
                self._opened(p).publish(txn, entries)
        if acks and self.pending_acks:
            by_lane = {}
            for p, seq in self.pending_acks:
                by_lane.setdefault(p, []).append(seq)
            for p, seqs in by_lane.items():
                released = self._opened(p).ack(txn, seqs)
                if released:
                    store.release(txn, released)

    def acks_written(self) -> None:
        """Storage.flush -> here: the staged acks are on disk."""
        self.pending_acks = []
        self._truncate_ack_log()

    def flushed(self, ok: bool) -> None:
        """Storage.flush -> here, after its transaction committed (ok) or found the store full."""
        written = list(self.pending.values())
        self.pending = {}
        nbytes, self.pending_bytes = self.pending_bytes, 0
        if ok:
            self.counts.writes += len(written)
            if self.delivered_pending:
                self.delivered.update((self._p(m), m.seq_id) for m in written
                                      if m.seq_id in self.delivered_pending)
            self.delivered_pending = set()
            if nbytes:
                self._tell(Stored(nbytes))
            if events.enabled():
                for m in written:
                    where = "index" if self._opened(self._p(m)).embeds(len(m.body)) \
                        else "msg_store"
                    events.put("stored", m.msg_id, (self.vhost, self.qname, m.seq_id, where))
            return
        # the store is full: the publishes are refused (Refused pays their bytes back); a full
        # store cannot even delete (copy-on-write), so the acks stay staged for the next flush,
        # and an acked message never comes back
        self.delivered_pending = set()
        if written:
            gone = {m.seq_id for m in written}
            self.unsynced = [m for m in self.unsynced if m.seq_id not in gone]
            self._tell(Refused(written))
        rest = nbytes - sum(len(m.body) for m in written)  # cancelled ones: no longer pending
        if rest:
            self._tell(Stored(rest))
        # (the acks are staged again by the next Persist or Forget, not here: an idle queue
        # would retry at once, forever, while the store is full)

    def _tell(self, msg) -> None:
        """Tell the queue, unless it is gone (stopping: it stops before its backing queue)."""
        if not self.stopping:
            try:
                self.queue_ref.tell(msg)
            except ActorDeadError:
                self.stopping = True

    def _flush(self) -> None:
        if self.staged:
            self.storage.flush()

    def _write(self, fn) -> bool:
        """One LMDB write transaction (durable when it returns); False when the disk (map) is
        full."""
        try:
            with self.storage.begin(write=True) as txn:
                fn(txn)
            return True
        except lmdb.MapFullError:
            self._map_full()
            return False

    def _map_full(self) -> None:
        log.error("message store full (storage_map_size=%d bytes in %s): refusing "
                  "persistent messages until space is freed", self.config.storage_map_size,
                  self.storage.env.path())

    def _sync(self) -> None:
        """Flush what is staged (one durable transaction): every message given before is then
        on disk or was acked before it had to be written (RabbitMQ confirms those too)."""
        self._flush()  # (a full store refuses the publishes: they left unsynced)
        if not self.unsynced:
            self.cancelled = set()
            return
        done, self.unsynced = self.unsynced, []
        cancelled, self.cancelled = self.cancelled, set()
        if events.enabled():
            for m in done:
                if m.seq_id not in cancelled:
                    events.put("synced", m.msg_id, (self.vhost, self.qname, m.seq_id, None))
        self._tell(Persisted(done))

    def on_stop(self) -> None:
        self.stopping = True  # (the queue stopped first: see Queue.on_stop)
        if self.storage is None:
            return  # (a transient queue that never paged)
        if not self.durable:
            if self.mirror:  # (what it staged after a DeleteIndex is new: written too)
                self._flush()  # a promoted queue adopts what this mirror paged out
            else:
                self._drop_staged()
            return
        self._sync()
        self._close_ack_log()
        if not self.deleted:
            by_lane: dict = {}
            for p, seq in sorted(self.delivered):
                by_lane.setdefault(p, []).append(seq)
            if by_lane:
                def write(txn):
                    for p, seqs in by_lane.items():
                        self._opened(p).deliver(txn, seqs)

                self._write(write)
            self.storage.mark_clean(self.qid)

    def _drop_staged(self) -> None:
        """Forget what is staged without writing it (the queue is gone)."""
        if self.storage is not None:
            self.storage.unstage(self)
        if self.pending_bytes:
            self._tell(Stored(self.pending_bytes))
        self.pending, self.pending_bytes, self.pending_acks = {}, 0, []
        self.delivered_pending, self.delivered, self.cancelled = set(), set(), set()

    def _delete(self) -> None:
        self.deleted = True
        if self.keep_all and self.durable and not self.mirror:
            # a quorum queue leader's log: no complete one here now (a member's Mirror keeps
            # its own marker, in order with its resync)
            quorum_log.mark_incomplete(self.config, self.vhost, self.qname)
        self._drop_staged()
        self._close_ack_log(unlink=True)
        self.ack_logged = False
        if self.durable:  # every priority's index, opened or not
            indexes = [self._lane(p) for p in range(self.lanes)]
        else:
            indexes = [i for i in [self.index, *self.lane_indexes.values()] if i is not None]
        try:
            for index in indexes:
                self.storage.delete_index(index)
        except lmdb.MapFullError:
            self._map_full()
        self.unsynced = []

    def _drop_paged(self, after: int, n: int, priority: int) -> PagedDropped:
        """drop-head of paged messages nothing needs: settled without reaching the queue (their
        acks staged, and logged as a consumer's are)."""
        self._flush()
        index = self._lane(priority)
        with self.storage.begin() as txn:
            entries = index.read(txn, after, n)
        if entries:
            self._forget_entries(entries, priority, log_acks=True)
        pers = [e for e in entries
                if self.keep_all or _persistent(e.props_raw, self._where(), e.seq_id)]
        return PagedDropped(priority, len(entries), sum(e.body_size for e in entries),
                            entries[-1].seq_id if entries else 0, [e.seq_id for e in entries],
                            len(pers), sum(e.body_size for e in pers))

    def _purge_after(self, after: int, priority: int = 0) -> None:
        """Ack every entry after `after`."""
        self._ack_live(priority, after, lambda seqs: seqs)

    def _keep_only(self, upto: int, keep) -> None:
        """A quorum member's kept log, synchronised: of the entries up to `upto`, delete those
        not in `keep` (its master no longer holds them)."""
        self._ack_live(0, -1, lambda seqs: [s for s in seqs if s <= upto and s not in keep],
                       upto)

    def _ack_live(self, priority: int, after: int, pick, upto: int | None = None) -> None:
        """Ack the live entries after `after` (up to `upto`) that `pick` takes of each step,
        PURGE_STEP per transaction, the map trimmed after each: a deep queue's purge in one
        transaction held every page of its index dirty and mapped."""
        self._flush()
        store = self.storage.msg_store
        index = self._lane(priority)
        while True:
            with self.storage.begin() as txn:
                seqs = list(islice(index.live_seq_ids(txn, after), PURGE_STEP))
            if not seqs:
                return
            gone = pick(seqs)
            if gone:
                def write(txn, gone=gone):
                    released = index.ack(txn, gone)
                    if released:
                        store.release(txn, released)

                if not self._write(write):
                    return
                self.storage.trim()
            if upto is not None and seqs[-1] >= upto:
                return
            after = seqs[-1]

    # --- reading back ---------------------------------------------------------------------------
    def _recover(self, limit: int | None, adopt: bool = False, after=None) -> tuple:
        """(next seq_id, first messages [StoredMessage], how many more and
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
        if self.durable:
            self._replay_ack_log()
        self._flush()
        with self.storage.begin() as txn:
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
                with self.storage.begin() as txn:
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
                                  sum(len(x.body) for x in page.entries) -
                                  page.dropped_bytes, 0))
        entries.sort(key=lambda x: x.entry.seq_id)
        if entries and not adopt and entries[0].entry.seq_id < self.boot_seq and \
                faults.bug("drop_synced_at_recovery", self.qname, self.config.host):
            entries = entries[1:]  # a test-only bug (actors/faults.py): never comes back
        next_seq_id = max(max(rec.next_seq_id for rec in recs), 1)
        if self.lanes == 1:
            return next_seq_id, entries, more[0], more_bytes[0]
        return next_seq_id, entries, more, more_bytes

    def _census(self, msg: census.Census) -> None:
        """The queue's census: what its Queue holds in memory plus the paged parts in the
        index (a previous run's transient entries left out: they are dropped when read)."""
        if not events.enabled():
            return
        paged = []
        if msg.paged and not self.deleted:
            self._flush()  # what is staged is in the index before it is read
            with self.storage.begin() as txn:
                for p, after in sorted(msg.paged.items()):
                    index = self._opened(p)
                    if index is not None:
                        paged.append(self._live_kept(index, txn, after))
        census.emit(events, self.vhost, self.qname, msg, paged, self.durable)

    def _live_kept(self, index, txn, after: int) -> list:
        """seq_ids of the live entries after `after` that the queue will read back: a
        previous run's transient ones are not (only their properties are looked at: reading
        the keys alone measured no faster, bench/census_cost.py)."""
        boot, keep_all = self.boot_seq, self.keep_all
        return [s for s, value in index.live_records(txn, after)
                if s >= boot or keep_all or delivery_mode(entry_props(value)) == 2]

    def _page(self, after: int, limit: int, priority: int = 0) -> Paged:
        self._flush()  # what is staged is in the index before it is read
        out, stale = [], []
        index = self._lane(priority)
        with self.storage.begin() as txn:
            entries = index.read(txn, after, limit)
            for e in entries:
                persistent = self.keep_all or _persistent(e.props_raw, self._where(), e.seq_id)
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
                out.append(StoredMessage(e, bytes(body), persistent))
        if stale:
            self._forget_entries(stale, priority)
        self.counts.reads += len(out)
        return Paged(out, len(stale), sum(e.body_size for e in stale), priority)

    def _where(self) -> str:
        return f"queue '{self.qname}' in vhost '{self.vhost}'"

    def _forget_entries(self, entries, priority: int, log_acks: bool = False) -> None:
        """Entries dropped while paging in (or by drop-head): acked in their priority's index
        with the next flush."""
        acks = [(priority, e.seq_id) for e in entries]
        self.pending_acks.extend(acks)
        if log_acks:
            self._log_acks(acks)
        self.storage.stage(self)
        self._arm_timer()


_LANE_SHIFT = 56  # an ack log record: priority << _LANE_SHIFT | seq_id
_SEQ_MASK = (1 << _LANE_SHIFT) - 1


PURGE_STEP = 4096  # entries acked per transaction by a purge
FLUSH_BYTES = 4 << 20  # staged body bytes that make a flush before the sync is due
FLUSH_ACKS = 16384  # staged acks that make a flush before the sync is due


def _persistent(props_raw: bytes, where: str = "", seq_id: int | None = None) -> bool:
    """Whether a stored entry is persistent. Properties that cannot be decoded are a damaged
    record: logged, and kept as persistent (taken for transient, a page-in after a restart
    would drop the message without a word)."""
    try:
        return BasicProperties.decode(props_raw).delivery_mode == 2 if props_raw else False
    except Exception as e:  # noqa: BLE001 - whatever the decoder refuses
        log.error("%s: stored properties of message %s cannot be decoded (%s): kept as "
                  "persistent", where or "queue index", seq_id, e)
        return True
