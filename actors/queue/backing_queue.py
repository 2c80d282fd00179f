"""BackingQueue actor: the storage half of a queue (rabbit_variable_queue.erl's role).

The Queue actor hands it the persistent messages of a durable queue (actors/messages.py, "local
only: queue worker"): `Persist(msgs)` when they arrive, `RecordDelivery(msgs)` when they are
first handed to a consumer (so that they come back redelivered=true after a crash), `Forget(msgs)`
when they are acked or dropped; `Recover`, `PageIn`, `PurgeAfter` and `DeleteIndex` read back,
page in, purge and drop the index. It answers `Persisted(msgs)` once they are on disk, and the
Queue sends the publisher confirms then. The worker's backing queues share the "store"
scheduler, a thread apart from the worker's event loop, so that an fsync never stalls deliveries.

Group commit (behaviour C7), and writing only what must be written (issue 12): nothing is
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
"""

from __future__ import annotations

import logging
import os
import struct
import time

import lmdb
from pykka import ActorDeadError

from actors import events
from actors.messages import (DeleteIndex, Forget, PageIn, Paged, Persist, Persisted, PurgeAfter,
                             RecordDelivery, Recover, Recovered, Refused, Stored)
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
        self.pending: dict = {}  # seq_id -> message given in Persist and not written yet: an
        #                          ack before the next flush cancels it (never written)
        self.pending_bytes = 0  # body bytes given in Persist since the last flush (Stored)
        self.pending_acks: list = []  # seq_ids of written messages acked since the last flush
        self.delivered_pending: set = set()  # pending seq_ids delivered: the publish record
        #                                      carries the flag
        self.delivered: set = set()  # written seq_ids delivered and not acked: their deliver
        #                              records are written at a clean stop (after a crash every
        #                              entry comes back redelivered anyway)
        self.cancelled: set = set()  # seq_ids acked before their flush since the last _sync
        self.unsynced: list = []  # persistent messages not yet confirmed to the queue
        self.staged = False  # in storage.dirty: the next flush writes what this holds
        self.timer_armed = False  # a _Sync is on its way
        self.idle_sync = False  # an _IdleSync is on its way
        self.deleted = False  # the queue was deleted (its index is gone)
        self.dirty = False  # the last run did not stop cleanly: every entry may be delivered
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
                self.queue_ref.tell(Recovered(*self._recover(msg.limit)))
            elif isinstance(msg, PageIn):
                self._flush()
                self.queue_ref.tell(self._page(msg.after_seq, msg.n))
            elif isinstance(msg, PurgeAfter):
                self._flush()
                self._purge_after(msg.after_seq)
            elif isinstance(msg, DeleteIndex):
                self._delete()
        finally:
            if (self.unsynced or self.pending) and not self.idle_sync and \
                    self.actor_inbox.empty():
                # idle with publishes staged: sync next turn (staged acks alone wait for the
                # timer: they are in the ack log, and a flush now would hold the next ones up
                # behind its fsyncs)
                self.idle_sync = True
                self.actor_ref.tell(_IdleSync())
            if self.storage is not None:
                self.storage.maybe_trim()

    # --- writes ---------------------------------------------------------------------------------
    # Nothing is written when it arrives: Persist and Forget are staged, and one transaction per
    # flush (Storage.flush: every staged backing queue of the process at once) writes the
    # publishes that were not acked meanwhile and the acks of messages written before. A flush
    # happens at the sync (the 200 ms timer or the queue going idle), before any read of the
    # index, and when FLUSH_BYTES of bodies are staged. Storage commits are durable (sync=True).
    def _persist(self, msgs) -> None:
        if self.index is None:
            self._open_transient_index()
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
        for m in msgs:
            pending[m.seq_id] = m
            nbytes += len(m.body)
            if m.persistent:
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

    def _record_delivery(self, msgs) -> None:
        for m in msgs:
            if m.seq_id in self.pending:
                self.delivered_pending.add(m.seq_id)
            else:
                self.delivered.add(m.seq_id)

    def _forget(self, msgs) -> None:
        if self.index is None:
            return
        pending = self.pending
        if not msgs and self.pending_acks:
            self.storage.stage(self)
        acked = []
        for m in msgs:
            seq = m.seq_id
            if pending.pop(seq, None) is not None:  # acked before its flush: never written
                self.delivered_pending.discard(seq)
                self.cancelled.add(seq)
            else:
                acked.append(seq)
                self.delivered.discard(seq)
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
    # seq_ids; one write() to the page cache, no fsync), so that it survives kill -9 of the
    # worker as a committed LMDB transaction did: recovery replays the log. A flush that wrote
    # the acks truncates it. A power cut may lose the log's tail: those messages come back,
    # redelivered (an ack needs no sync of its own; RabbitMQ's queue index journal the same).
    def _ack_log_path(self) -> str:
        return os.path.join(self.storage.env.path(), "acks", self.qid.hex())

    def _log_acks(self, seqs) -> None:
        if not self.durable:
            return  # a transient queue's paged messages do not outlive the node anyway
        if self.ack_log is None:
            os.makedirs(os.path.dirname(self._ack_log_path()), exist_ok=True)
            self.ack_log = os.open(self._ack_log_path(),
                                   os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(self.ack_log, struct.pack(f">{len(seqs)}Q", *seqs))
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
            self.pending_acks.extend(struct.unpack(f">{n}Q", data[:n * 8]))
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
        publishes, the acks, or both)."""
        index, store = self.index, self.storage.msg_store
        if publishes and self.pending:
            wall_offset = int(time.time() * 1000) - int(time.monotonic() * 1000)
            delivered = self.delivered_pending
            entries = []
            for seq in sorted(self.pending):
                m = self.pending[seq]
                size = len(m.body)
                embedded = index.embeds(size)
                if not embedded:
                    store.put(txn, m.msg_id, m.body)
                entries.append(IndexEntry(
                    m.seq_id, m.msg_id, m.exchange, m.routing_key, m.props_raw,
                    m.body if embedded else None, size, m.priority,
                    m.expires_at + wall_offset if m.expires_at else 0,
                    m.redelivered or seq in delivered))
            index.publish(txn, entries)
        if acks and self.pending_acks:
            released = index.ack(txn, self.pending_acks)
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
            self.delivered |= self.delivered_pending
            self.delivered_pending = set()
            if nbytes:
                self._tell(Stored(nbytes))
            if events.enabled():
                index = self.index
                for m in written:
                    events.emit("stored", m.msg_id, actor="backing_queue", vhost=self.vhost,
                                queue=self.qname, seq_id=m.seq_id,
                                where="index" if index.embeds(len(m.body)) else "msg_store")
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

    def _open_transient_index(self) -> None:
        """A transient queue pages for the first time: its index, emptied of whatever a
        queue of the same name left in it (one deleted while its worker was down)."""
        self.storage = Storage.of(self.config)
        self.index = self.storage.queue_index(self.vhost, self.qname)
        self._delete()
        self.deleted = False

    def _write(self, fn) -> bool:
        """One LMDB write transaction (durable when it returns); False when the disk (map) is
        full."""
        try:
            with self.storage.env.begin(write=True) as txn:
                fn(txn)
            return True
        except lmdb.MapFullError:
            log.error("message store full (storage_map_size=%d bytes in %s): refusing "
                      "persistent messages until space is freed", self.config.storage_map_size,
                      self.storage.env.path())
            return False

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
                    events.emit("synced", m.msg_id, actor="backing_queue", vhost=self.vhost,
                                queue=self.qname, seq_id=m.seq_id)
        self._tell(Persisted(done))

    def on_stop(self) -> None:
        self.stopping = True  # (the queue stopped first: see Queue.on_stop)
        if self.index is None:
            return
        if not self.durable:
            self._drop_staged()
            return
        self._sync()
        self._close_ack_log()
        if not self.deleted:
            delivered = sorted(self.delivered)
            if delivered:
                self._write(lambda txn: self.index.deliver(txn, delivered))
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
        self._drop_staged()
        self._close_ack_log(unlink=True)
        self.ack_logged = False
        if self.index is not None:
            store = self.storage.msg_store

            def write(txn):
                released = self.index.delete(txn)
                if released:
                    store.release(txn, released)

            self._write(write)
        self.unsynced = []

    def _purge_after(self, after: int) -> None:
        store = self.storage.msg_store
        with self.storage.env.begin() as txn:
            seqs = list(self.index.live_seq_ids(txn, after))

        def write(txn):
            released = self.index.ack(txn, seqs)
            if released:
                store.release(txn, released)

        self._write(write)

    # --- reading back ---------------------------------------------------------------------------
    def _recover(self, limit: int | None) -> tuple[int, list, int, int]:
        """(next seq_id, first messages [(IndexEntry, body, persistent)], how many more and
        their bytes) of what was published and not acked."""
        if self.index is None:
            return 1, [], 0, 0
        self._replay_ack_log()
        self._flush()
        with self.storage.env.begin() as txn:
            rec = self.index.recover(txn)
        self.boot_seq = rec.next_seq_id
        # after a crash a deliver record may be missing for a message that did reach a client
        # (it is written behind the delivery): all may have been delivered, redelivered=true
        clean = self.storage.was_clean(self.qid)
        self.dirty = rec.live > 0 and not clean
        page = self._page(-1, limit or rec.live + 1)
        more = rec.live - len(page.entries) - page.dropped
        more_bytes = rec.live_bytes - sum(len(b) for _, b, _ in page.entries) - \
            page.dropped_bytes
        return max(rec.next_seq_id, 1), page.entries, max(more, 0), max(more_bytes, 0)

    def _page(self, after: int, limit: int) -> Paged:
        out, stale = [], []
        with self.storage.env.begin() as txn:
            entries = self.index.read(txn, after, limit)
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
            self._forget_entries(stale)
        return Paged(out, len(stale), sum(e.body_size for e in stale))

    def _forget_entries(self, entries) -> None:
        """Entries dropped while paging in: acked with the next flush."""
        self.pending_acks.extend(e.seq_id for e in entries)
        self.storage.stage(self)


FLUSH_BYTES = 4 << 20  # staged body bytes that make a flush before the sync is due
FLUSH_ACKS = 16384  # staged acks that make a flush before the sync is due


def _persistent(props_raw: bytes) -> bool:
    try:
        return BasicProperties.decode(props_raw).delivery_mode == 2 if props_raw else False
    except Exception:  # noqa: BLE001 - an undecodable record: treat as transient
        return False
