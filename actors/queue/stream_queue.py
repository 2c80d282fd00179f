"""Stream queue actors: one StreamQueue and one StreamWriter per stream (x-queue-type=stream).

The StreamQueue mirrors what RabbitMQ 3.10.8 spreads over ``rabbit_stream_queue`` (the
channel-side readers) and osiris' writer process: it takes publishes, has them written as
chunks (one with the writer at a time: what arrives meanwhile is the next), confirms them once
written and synced, and delivers to each consumer from its own position, reading the log by
offset in bounded batches (never the log in memory), each message encoded as a delivery once
for all its readers (actors/queue/stream_recent.py, actors/queue/stream_delivery.py).
The rules are actors/core/stream.py's and actors/core/stream_readers.py's; the log is
actors/store/stream_log.py. The StreamWriter runs on the worker's "store" scheduler, as a
BackingQueue does, so a sync never stalls a queue's deliveries.

It speaks the messages a classic Queue speaks (Publish, Settle, Sent, Consume, Cancel, Get,
ChannelDown, QueueOp...), so channels need not know the queue type except where RabbitMQ's
channel refuses something for streams (basic.nack and basic.reject).
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

import lmdb
import pykka

from actors import events, faults
from actors import messages as m
from actors import metadata_ops as ops
from actors.core import credit_flow, policies, stream, stream_replication
from actors.core.errors import AMQPError
from actors.core.queue_args import check_consume_arguments
from actors.core.queue_stats import QueueCounters
from actors.core.stream_readers import Reader, StreamReaders
from actors.messages import ChannelsDown, PolicyChanged
from actors.naming import queue_actor_name
from actors.store import quorum_log
from actors.store.storage import Storage, queue_id
from actors.queue.stream_delivery import DeliveryEncoder
from actors.store.stream_log import Entry, Message, StreamLog
from actors.queue.stream_recent import RecentReads
from actors.runtime import LightActor
from protocol.properties import BasicProperties

log = logging.getLogger("leveret.stream")

READ_BATCH = 256  # messages read from the log per reader per turn
READ_BATCH_BYTES = 1 << 20  # ...and about this many body bytes
TRIM_AFTER_BYTES = 16 << 20  # bodies read between two trims of the map (its RSS bound)
RECENT_BYTES = 32 << 20  # body bytes of the messages read lately kept for the other readers
RETENTION_CHECK_MS = 10_000  # how often age retention looks at the oldest segment
HOLD_MAX = 64  # at most this many messages handled between two chunks written (a mailbox
#                that never empties still has its publishes written and confirmed)
REPLICATE_BYTES = 1 << 20  # about this many body bytes of chunks per StreamChunks sent
REPLICATE_WINDOW = 20_000  # offsets sent to a member and not yet acknowledged, at most,
REPLICATE_WINDOW_BYTES = 16 << 20  # ...and body bytes (a member's link holds no more)


def wall_ms() -> int:
    return int(time.time() * 1000)


# --- local messages (inside one queue worker) ----------------------------------------------
class Append(NamedTuple):
    """StreamQueue -> StreamWriter: write these entries as one chunk; `confirms` are the
    (publisher channel, seq_no) to confirm once it is synced."""
    entries: list
    confirms: list


class LogState(NamedTuple):
    """What a reader's view of the log needs after a write or a retention run."""
    next: int
    last_chunk: int
    segments: tuple


class Appended(NamedTuple):
    """StreamWriter -> StreamQueue: the chunk is durable at `first` (`ok`), or refused."""
    first: int
    ok: bool
    confirms: list
    msg_ids: list
    state: LogState


class LogChanged(NamedTuple):
    """StreamWriter -> StreamQueue: retention deleted segments."""
    state: LogState


class Retain(NamedTuple):
    """StreamQueue -> StreamWriter: apply retention now (age); `settings` the current ones."""
    settings: stream.StreamSettings


class DeleteLog(NamedTuple):
    """StreamQueue -> StreamWriter: the stream is deleted, its log goes."""


class Run(NamedTuple):
    """StreamQueue -> itself: readers still behind, carry on after other messages."""


class EmitStats(NamedTuple):
    """Timer -> StreamQueue: time for a statistics sample."""


class RetentionTick(NamedTuple):
    """Timer -> StreamQueue: time to apply age retention."""


def _state(lg: StreamLog) -> LogState:
    return LogState(lg.next, lg.last_chunk, tuple(lg.segments))


class StreamWriter(LightActor):
    scheduler_name = "store"  # a sync stalls other writers and backing queues, never a queue

    def __init__(self, queue_ref, storage: Storage, qid: bytes, settings, vhost, qname,
                 epoch: int = 0):
        super().__init__()
        self.epoch = epoch  # the stream's epoch: every chunk it writes carries it
        self.queue_ref = queue_ref  # the StreamQueue this writes for
        self.storage = storage  # the worker's LMDB environment
        self.settings = settings  # retention and layout (stream.StreamSettings)
        self.vhost, self.qname = vhost, qname  # identity (events, logs)
        self.log = StreamLog(storage.env, storage.stream_dbs, qid, storage.begin,
                             settings.segment_bytes)  # the writer's own handle on the log

    def on_receive(self, msg):
        handler = _WRITER.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _retain_by(self, msg: Retain) -> None:
        self.settings = msg.settings
        self.log.segment_bytes = msg.settings.segment_bytes
        if self._retain():
            self._tell(LogChanged(_state(self.log)))

    def _delete_log(self, msg: DeleteLog) -> None:
        self.log.delete()
        self.storage.trim()
        self.stop()

    def _append(self, msg: Append) -> None:
        segments = len(self.log.segments)
        try:
            first = self.log.append(msg.entries, wall_ms(), self.settings.filter_size,
                                    self.epoch).first
            ok = True
        except lmdb.MapFullError:
            log.error("stream '%s' in vhost '%s': message store full, %d messages refused",
                      self.qname, self.vhost, len(msg.entries))
            first, ok = self.log.next, False
        msg_ids = [e.msg_id for e in msg.entries]
        if ok and events.enabled():
            for i, mid in enumerate(msg_ids):
                if mid is not None:
                    events.emit("synced", mid, actor="backing_queue", vhost=self.vhost,
                                queue=self.qname, seq_id=first + i, offset=first + i)
        if ok and len(self.log.segments) > segments:
            self._retain()  # osiris evaluates retention when a segment rolls
        self.storage.trim()
        self._tell(Appended(first, ok, msg.confirms, msg_ids, _state(self.log)))

    def _tell(self, msg) -> None:
        try:
            self.queue_ref.tell(msg)
        except pykka.ActorDeadError:
            pass  # the stream was deleted meanwhile: its DeleteLog follows

    def _retain(self) -> list:
        s = self.settings
        if s.max_bytes is None and s.max_age_ms is None:
            return []
        gone = self.log.retain(s.max_bytes, s.max_age_ms, wall_ms())
        if gone:
            log.info("stream '%s' in vhost '%s': retention deleted %d segments (offsets %d-%d)",
                     self.qname, self.vhost, len(gone), gone[0].first, gone[-1].last)
        return gone


# what the writer takes: message type -> (writer, msg)
_WRITER = {
    Append: StreamWriter._append,
    Retain: StreamWriter._retain_by,
    DeleteLog: StreamWriter._delete_log,
}


class StreamQueue(LightActor):
    scheduler_name = "queue"

    def __init__(self, host, qdef: dict, started_to: str = ""):
        super().__init__()
        self.transport = host.transport  # this process's Transport
        self.replica = host.replica  # metadata (policies)
        self.node = host.node  # the node's metadata actor
        self.timers = host.timers  # this process's timer thread
        self.config = host.config  # node configuration
        self.vhost, self.qname = qdef["vhost"], qdef["name"]  # identity
        self.arguments = qdef["arguments"]  # x-arguments
        self.name = queue_actor_name(self.vhost, self.qname)  # transport name
        self.address = self.transport.address(self.name)  # where channels send to
        self.started_to = started_to  # told QueueStarted once serving (the node)
        self.settings = stream.settings(self.arguments, self.policy())  # retention, layout
        storage = self.storage = Storage.of(host.config)  # the worker's LMDB environment
        qid = queue_id(self.vhost, self.qname)
        self.log = StreamLog(storage.env, storage.stream_dbs, qid, storage.begin,
                             self.settings.segment_bytes)  # the readers' view of the log
        self.epoch = int(qdef.get("epoch") or 0)  # promotions so far (replication)
        self.writer = StreamWriter.start(self.actor_ref, storage, qid, self.settings,
                                         self.vhost, self.qname, self.epoch)  # its one writer
        # members holding the stream (leader included): 1 unless replicated in a cluster
        self.size = (qdef.get("stream_size") or stream_replication.cluster_size(
            self.arguments, len(host.config.cluster_nodes))) if host.config.cluster_nodes else 1
        # the members, what each holds, the end of the log a majority holds (consumers read
        # below it, publishes below it are confirmed) and the confirms waiting for it
        self.replicas = stream_replication.Replicas(
            self.size, self.epoch, self.log.overview() if self.size > 1 else [],
            self.log.next if self.size == 1 else 0)
        self.readers = StreamReaders()  # the consumers and their positions
        self.credit = credit_flow.ReceiverCredit(host.config.credit_more,
                                                 host.config.credit_more_bytes)  # publishers'
        self.entries: list = []  # publishes not yet handed to the writer: the next chunk
        # the chunk with the writer (one at a time, as osiris' writer), None: none
        self.writing: list | None = None
        self.confirms: list = []  # their (channel, seq_no) to confirm once written
        self.senders: dict = {}  # channel -> [messages, body bytes] of the next chunk
        self.held = 0  # messages handled since the last _flush
        self.run_pending = False  # a Run is queued
        self.counters = QueueCounters()  # the management API's message counts
        self.disk_writes = 0  # messages written (rabbit_backing_queue's disk_writes)
        self.disk_reads = 0  # messages read back for deliveries
        self.unmapped_bytes = 0  # bodies read since the map was last trimmed
        self.encode = DeliveryEncoder()  # a message read -> its delivery, encoded
        self.recent = RecentReads(RECENT_BYTES, self.encode)
        self.last_sample: m.QueueStats | None = None  # the last sample sent
        self.serving = False  # registered and answering

    def policy(self) -> dict:
        with self.replica.lock:
            return policies.effective(self.replica.policies, self.vhost, self.qname, "queues",
                                      self.replica.op_policies)

    # --- lifecycle -----------------------------------------------------------------------
    def on_start(self):
        if self.config.cluster_nodes:
            # this log is the stream's of this epoch: an election (even of a stream of one
            # member, whose node came back) reads its position with this epoch
            quorum_log.mark_complete(self.config, self.vhost, self.qname, self.epoch)
        self.transport.register(self.name, self.actor_ref)
        self.serving = True
        self.timers.every(self.config.collect_statistics_interval, self.actor_ref, EmitStats())
        self.timers.every(RETENTION_CHECK_MS, self.actor_ref, RetentionTick())
        if self.log.count:
            log.info("stream '%s' in vhost '%s': %d messages in %d segments (offsets %d-%d)",
                     self.qname, self.vhost, self.log.count, len(self.log.segments),
                     self.log.first, self.log.next - 1)
        if self.started_to:
            self.transport.send(self.started_to, m.QueueStarted(self.vhost, self.qname,
                                                                self.address))
        if events.enabled():
            events.emit("queue_started", None, actor="queue", vhost=self.vhost,
                        queue=self.qname, recovered=self.log.count, durable=True)
        self._emit_stats()

    def on_stop(self):
        if self.serving:
            self.transport.unregister(self.name)
        if self.writer.is_alive():
            self.writer.stop(block=False)

    # --- the mailbox -----------------------------------------------------------------------
    def on_receive(self, msg):
        faults.crash("queue", self.vhost, self.qname, msg, self.config.host)
        self._handle(msg)
        self.held += 1
        if self.held >= HOLD_MAX or self.actor_inbox.empty():
            self.held = 0
            self._flush()

    def on_failure(self, exc_type, exc_value, traceback):
        """Let it crash: the stream stops with its writer (a writer that crashed makes the
        stream's next tell to it fail, so the stream crashes too), channels meet it as a
        queue that is gone (QueueHost.missing: 404, publishes nacked) and QueueHost, its
        monitor, starts it again from its log within the restart intensity."""
        log.error("stream '%s' in vhost '%s' failed: %s: %s", self.qname, self.vhost,
                  getattr(exc_type, "__name__", exc_type), exc_value)
        if self.serving:
            self.transport.unregister(self.name)
        if self.writer.is_alive():
            try:  # (one writer of the log at a time: the restarted stream starts its own)
                self.writer.stop(block=True, timeout=30)
            except pykka.Timeout:
                log.warning("stream '%s' in vhost '%s': its writer did not stop in time",
                            self.qname, self.vhost)

    def _handle(self, msg) -> None:
        handler = _HANDLERS.get(type(msg))
        if handler is not None:
            handler(self, msg)
        # SetLimit, Grant: a stream refuses consumers on a channel with a global prefetch

    def _settle(self, msg: m.Settle) -> None:
        if msg.op == m.ACK:
            self.counters.ack += len(msg.seq_ids)
        # a hand-back (a cancelled consumer's deliveries) frees the credit as an ack does:
        # a stream keeps every message, nothing goes back anywhere
        self.readers.settle(msg.sender, msg.seq_ids)

    def _cancel(self, msg: m.Cancel) -> None:
        ok = self.readers.remove(msg.sender, msg.consumer_tag) is not None
        if msg.req_id:
            self._reply(msg.sender, msg.req_id, True, ok)

    def _get(self, msg: m.Get) -> None:
        e = stream.get_refused(self.qname, self.vhost)
        self._reply(msg.sender, msg.req_id, False, None, e.reply_code, e.text)

    def _channel_down(self, msg: m.ChannelDown) -> None:
        self.readers.drop_channel(msg.sender)
        self.credit.forget(msg.sender)

    def _channels_down(self, msg: ChannelsDown) -> None:
        for r in self.readers.drop_channels(msg.prefix):
            self.credit.forget(r.channel)

    def _run(self, msg: Run) -> None:
        self.run_pending = False  # the turn it asked for came: _flush may ask again

    def _policy_changed(self, msg: PolicyChanged) -> None:
        self.settings = stream.settings(self.arguments, self.policy())
        self.writer.tell(Retain(self.settings))

    def _flush(self) -> None:
        """End of a mailbox drain: write what was published as one chunk; deliver."""
        if self.entries and self.writing is None:
            # what arrived while the last chunk was written is the next chunk: under load a
            # chunk grows to what came during one sync instead of each drain's few messages
            # waiting behind the others' syncs
            self.writer.tell(Append(self.entries, self.confirms))
            # the publishers' credit_flow credit comes back as their messages go to the
            # writer: what a publisher may have sent and not yet written is one chunk being
            # written and one gathering (bounded), and its credit's round trip does not wait
            # for a sync
            for ch, (n, nbytes) in self.senders.items():
                due = self.credit.received(ch, n, nbytes)
                if due is not None:
                    self.transport.send(ch, m.Credit(self.address, *due))
            self.writing = self.entries
            self.entries, self.confirms, self.senders = [], [], {}
        more = self._replicate() if self.replicas else False
        if not self.run_pending and (self._deliver() or more):
            self.run_pending = True
            self.actor_ref.tell(Run())

    # --- publishing ------------------------------------------------------------------------
    def _publish(self, msg: m.Publish) -> None:
        for item, body in zip(msg.items, msg.bodies):
            # every field of the PublishItem, in its order (one step on the per-message path)
            seq_no, exchange, rk, props, _, _, _, msg_id = item
            fv = None
            if props and b"x-stream-filter-value" in props:
                fv = stream.filter_value(_headers(props))
            self.entries.append(Entry(exchange, rk, props or b"", body, msg_id, fv))
            if seq_no and msg.sender:
                self.confirms.append((msg.sender, seq_no))
        self.counters.publish += len(msg.items)
        if msg.sender:
            s = self.senders.setdefault(msg.sender, [0, 0])
            s[0] += len(msg.items)
            s[1] += sum(map(len, msg.bodies))

    def _appended(self, msg: Appended) -> None:
        """A chunk is written and synced: confirm it, let the readers see it."""
        written, self.writing = self.writing, None
        self._adopt(msg.state)
        if msg.ok and written and self.recent.ends_at(msg.first):
            # readers read up to the log's end: they will read this chunk next, and it is
            # here, no need to read it back from the log
            self.recent.add([Message(msg.first + i, e.exchange, e.routing_key, e.props_raw,
                                     e.body, e.msg_id) for i, e in enumerate(written)])
        by_channel: dict = {}
        for ch, seq in msg.confirms:
            by_channel.setdefault(ch, []).append(seq)
        if msg.ok and self.size > 1:
            self.replicas.written(msg.first, msg.first + len(msg.msg_ids), by_channel)
            self._commit()
        else:
            self._confirm(by_channel, msg.ok)
        if msg.ok:
            self.disk_writes += len(msg.msg_ids)
            if events.enabled():
                for i, mid in enumerate(msg.msg_ids):
                    if mid is not None:
                        events.emit("enqueued", mid, actor="queue", vhost=self.vhost,
                                    queue=self.qname, seq_id=msg.first + i,
                                    offset=msg.first + i, paged=False, durable=True)

    def _confirm(self, by_channel: dict, ok: bool) -> None:
        if by_channel:
            events.sync()  # (events_sync: this process's events before the confirms they back)
        for ch, seqs in by_channel.items():
            self.transport.send(ch, m.Confirm(self.address, seqs, ok, "" if ok else "disk"))
            if ok:
                self.counters.confirmed("enqueue", len(seqs))

    def _adopt(self, state: LogState) -> None:
        self.log.next, self.log.last_chunk = state.next, state.last_chunk
        self.log.segments = list(state.segments)
        if self.size == 1:
            self.replicas.commit(self.log.next)  # a lone member's log is all committed

    # --- replication (a stream with members on other nodes) --------------------------------
    def _commit(self) -> None:
        """The end a majority holds moved: confirm what is below it, let readers see it."""
        for by_channel in self.replicas.commit(self.log.next):
            self._confirm(by_channel, True)

    def _member_join(self, msg: m.StreamJoin) -> None:
        """A member (re)joins: it keeps the prefix of its log that matches ours, then is sent
        our chunks from there."""
        keep = self.replicas.join(msg.member_addr, msg.member, msg.overview, self.log.first,
                                  self.log.next)
        log.info("stream '%s' in vhost '%s': member on %s joined at offset %d (log %d-%d)",
                 self.qname, self.vhost, msg.member, keep, self.log.first, self.log.next - 1)
        self.transport.send(msg.member_addr, m.StreamChunks(self.address, self.epoch, keep,
                                                            [], [], []))

    def _member_acked(self, msg: m.StreamAck) -> None:
        member = self.replicas.acked(msg.member_addr, msg.epoch, msg.next)
        if member is not None:
            # it holds what we held when it joined: its log counts in an election from now
            # on (the queue's `logs` in the metadata)
            self.transport.send(self.node, ops.rpc("", 0, ops.QueueSynced(
                self.vhost, self.qname, member)))
        self._commit()

    def _replicate(self) -> bool:
        """Send each member the chunks it lacks, within its window -> whether one may take
        more now (another turn after the mailbox's other messages)."""
        more = read = False
        end = self.log.next
        for addr, offset in self.replicas.due(end, REPLICATE_WINDOW, REPLICATE_WINDOW_BYTES):
            chunks = self.log.read_chunks(offset, REPLICATE_BYTES)
            read = True
            if not chunks:
                continue
            heads, items, bodies = [], [], []
            for c, entries in chunks:
                heads.append(m.ChunkHead(c.first, c.count, c.ts, c.epoch, c.bloom))
                for e in entries:
                    items.append(m.StreamItem(e.exchange, e.routing_key, e.props_raw, e.msg_id))
                    bodies.append(e.body)
            upto = chunks[-1][0].first + chunks[-1][0].count
            self.replicas.sent(addr, upto, sum(map(len, bodies)))
            self.transport.send(addr, m.StreamChunks(self.address, self.epoch, -1, heads,
                                                     items, bodies))
            more = more or upto < end
        if read:
            self.storage.trim()
        return more

    # --- consuming -------------------------------------------------------------------------
    def _consume(self, msg: m.Consume) -> None:
        now = wall_ms()
        try:
            check_consume_arguments(msg.arguments, self.qname, self.vhost, stream.STREAM)
            stream.check_consume(msg.prefetch, msg.no_ack, msg.channel_prefetch, self.qname,
                                 self.vhost)
        except AMQPError as e:
            self._reply(msg.sender, msg.req_id, False, None, e.reply_code, e.text)
            return
        spec = stream.consume_spec(msg.arguments, now)
        ts = spec.offset.value if spec.offset.kind == "timestamp" else None
        start = stream.start_offset(spec.offset, self.log.view(ts))
        self.readers.add(Reader(msg.sender, msg.consumer_tag, start, msg.prefetch,
                                spec.filters, spec.match_unfiltered))
        self._reply(msg.sender, msg.req_id, True, self.qname)

    def _deliver(self) -> bool:
        """One batch to every reader behind the log's end with room -> whether some reader
        may take more now (another turn after the mailbox's other messages)."""
        batches: dict = {}
        recent = self.recent
        more = False
        committed = self.replicas.committed
        wanting = list(self.readers.wanting(committed))
        # readers at the same place (and filter) share one read of the log, and a reader
        # without a filter takes what another read lately from `recent`, each message
        # encoded as a delivery once: a fan-out of ten consumers reads, heads and packs each
        # message once, not ten times
        rooms: dict = {}
        for r in wanting:
            if r.filters:
                place = (r.position, r.filters, r.match_unfiltered)
                rooms[place] = max(rooms.get(place, 0), self.readers.room(r))
        reads: dict = {}
        read_bytes = 0
        for r in wanting:
            room = min(self.readers.room(r), READ_BATCH)
            if not r.filters:
                # (a reader below the log's first offset reads from the first: retention
                # dropped what it would have found held)
                first = r.position = max(r.position, self.log.first)
                tails, bodies = recent.take(first, committed, room, READ_BATCH_BYTES)
                if not tails:
                    # (a whole batch, whatever this reader's room: the rest is held for
                    # the readers behind it and for its own next turn)
                    msgs, _ = self.log.read(first, READ_BATCH, READ_BATCH_BYTES, (), False,
                                            committed)
                    self.disk_reads += len(msgs)
                    read_bytes += sum(len(x.body) for x in msgs)
                    recent.add(msgs)
                    first = msgs[0].offset if msgs else first
                    tails, bodies = recent.take(first, committed, room, READ_BATCH_BYTES)
                offsets = range(first, first + len(tails))
                r.position = first + len(tails)
            else:
                place = (r.position, r.filters, r.match_unfiltered)
                got = reads.get(place)
                if got is None:
                    msgs, after = self.log.read(r.position, min(rooms[place], READ_BATCH),
                                                READ_BATCH_BYTES, r.filters,
                                                r.match_unfiltered, committed)
                    self.disk_reads += len(msgs)
                    read_bytes += sum(len(x.body) for x in msgs)
                    got = reads[place] = (msgs, [self.encode(x) for x in msgs], after)
                msgs, tails, pos = got
                if len(msgs) > room:  # (a reader with less room than another at its place)
                    msgs, tails = msgs[:room], tails[:room]
                    pos = msgs[-1].offset + 1
                offsets = [x.offset for x in msgs]
                bodies = [x.body for x in msgs]
                r.position = pos
            if not tails:
                continue
            batch = batches.get(r.channel)
            if batch is None:
                batch = batches[r.channel] = (m.PackedDeliveries(), [])
            batch[0].add(r.tag, tails)
            batch[1].extend(bodies)
            self.readers.delivered(r, offsets)
            more = more or (r.position < committed and self.readers.room(r) > 0)
        if recent:
            by_key = self.readers.by_key
            recent.forget(min(r.position for r in by_key.values()) if by_key else None)
        for ch, (items, bodies) in batches.items():
            self.counters.deliver += len(items)  # (manual ack, never redelivered)
            self.transport.send(ch, m.Deliver(self.address, self.qname, items, bodies))
        self.unmapped_bytes += read_bytes
        if self.unmapped_bytes >= TRIM_AFTER_BYTES or (batches and not more):
            # the map pages these reads touched leave the process's RSS (they stay in the
            # page cache): a reader of a long backlog costs a few batches, not the log; not
            # after every turn, as dropping the map costs about a millisecond and the next
            # turn's reads fault the same pages back in
            self.unmapped_bytes = 0
            self.storage.trim()
        return more

    # --- admin -----------------------------------------------------------------------------
    def _reply(self, addr, req_id, ok, result=None, code=0, text=""):
        self.transport.send(addr, m.RpcReply(req_id, ok, result, code, text))

    def _queue_op(self, msg: m.QueueOp) -> None:
        if msg.op == "info":
            self._reply(msg.reply_to, msg.req_id, True,
                        [self.qname, self.log.count, len(self.readers)])
        elif msg.op == "stats":
            self._reply(msg.reply_to, msg.req_id, True, self._stats())
        elif msg.op == "purge":
            e = stream.purge_refused(self.qname, self.vhost)
            self._reply(msg.reply_to, msg.req_id, False, None, e.reply_code, e.text)
        elif msg.op == "census":
            if msg.reply_to:
                self._reply(msg.reply_to, msg.req_id, True, self.log.count)
        elif msg.op in ("sync", "cancel_sync"):
            if msg.reply_to:
                self._reply(msg.reply_to, msg.req_id, True, 0 if msg.op == "sync" else False)
        elif msg.op == "delete":
            n = self.log.count
            for r in list(self.readers.by_key.values()):
                self.transport.send(r.channel, m.ConsumerGone(self.address, r.tag))
            if events.enabled():
                events.emit("queue_deleted", None, actor="queue", vhost=self.vhost,
                            queue=self.qname, count=n, unacked=self.readers.unacked(),
                            seq_below=self.log.next,
                            reason=msg.args.get("reason") or "delete")
            self.readers = StreamReaders()
            if self.config.cluster_nodes:  # no log of this name here any more
                quorum_log.mark_incomplete(self.config, self.vhost, self.qname)
            self.writer.tell(DeleteLog())
            self._reply(msg.reply_to, msg.req_id, True, n)
            self.transport.unregister(self.name)
            self.serving = False
            self.stop()

    def _stats(self) -> dict:
        count, nbytes = self.log.count, self.log.nbytes
        unacked = self.readers.unacked()
        return {"messages": count, "messages_ready": count,
                "messages_unacknowledged": unacked, "consumers": len(self.readers),
                "message_bytes": nbytes, "message_bytes_ready": nbytes,
                "message_bytes_unacknowledged": 0, "message_bytes_ram": 0,
                "message_bytes_paged_out": nbytes, "messages_ram": 0,
                "messages_ready_ram": 0, "messages_unacknowledged_ram": 0,
                "messages_paged_out": count, "messages_persistent": count,
                "message_bytes_persistent": nbytes, "disk_reads": self.disk_reads,
                "disk_writes": self.disk_writes, "stream": self.stream_info()}

    def stream_info(self) -> dict:
        """The stream's own figures for the management API: its offsets, segments and each
        consumer's position."""
        return {"first_offset": self.log.first,
                "committed_offset": self.replicas.committed - 1,
                "segments": [{"number": s.number, "first_offset": s.first,
                              "last_offset": s.last, "bytes": s.nbytes}
                             for s in self.log.segments],
                "readers": self.readers.positions()}

    def _emit_stats(self) -> None:
        sample = self.counters.sample(self._stats(), None)
        if sample is not None:
            self.last_sample = m.QueueStats(self.vhost, self.qname, wall_ms(), sample)
            with self.replica.lock:
                others = [info.get("metadata") for info in self.replica.members.values()
                          if info.get("up") and info.get("metadata")]
            for addr in others or [self.node]:
                self.transport.send(addr, self.last_sample)


def _headers(props_raw: bytes) -> dict:
    try:
        return BasicProperties.decode(props_raw).headers or {}
    except Exception:  # noqa: BLE001 - the properties came as the client sent them
        return {}


# message type -> StreamQueue's handler (its one dispatch table)
_HANDLERS = {
    m.Publish: StreamQueue._publish,
    Appended: StreamQueue._appended,
    m.Settle: StreamQueue._settle,
    m.Sent: lambda sq, msg: sq.readers.sent(msg.channel, msg.n),
    m.Consume: StreamQueue._consume,
    m.Cancel: StreamQueue._cancel,
    m.Get: StreamQueue._get,
    m.StreamAck: StreamQueue._member_acked,
    m.StreamJoin: StreamQueue._member_join,
    m.MirrorsDown: lambda sq, msg: sq.replicas.gone(msg.endpoint),
    m.ChannelDown: StreamQueue._channel_down,
    ChannelsDown: StreamQueue._channels_down,
    m.QueueOp: StreamQueue._queue_op,
    LogChanged: lambda sq, msg: sq._adopt(msg.state),
    EmitStats: lambda sq, msg: sq._emit_stats(),
    RetentionTick: lambda sq, msg: sq.writer.tell(Retain(sq.settings)),
    PolicyChanged: StreamQueue._policy_changed,
    Run: StreamQueue._run,
}
