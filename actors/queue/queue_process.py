"""Queue worker actors: one Queue actor and one BackingQueue actor per AMQP queue.

The Queue actor mirrors rabbit_amqqueue_process.erl: it owns consumers, delivery and settlement
(all decisions live in actors/core/queue.py, which takes its channels' messages through
`QueueCore.handle` and acts through its `QueuePort`, the callables of this shell and of its
Masters, which only send). The BackingQueue
actor mirrors the storage half of rabbit_variable_queue.erl: it is where persistent messages of
durable queues are made safe before their confirm goes out; it runs beside the Queue in the same
OS process so a slow fsync never stalls deliveries (see actors/queue/backing_queue.py).

The process's own part, QueueHost, is in actors/queue/queue_host.py.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, NamedTuple

import pykka

from actors import events, faults
from actors import messages as m
from actors import metadata_ops as ops
from actors.messages import (MirrorsDown, Paged, Persisted, PolicyChanged, Recovered, Refused,
                             Stored)
from actors.queue.backing_queue import BackingQueue
from actors.core import policies, queue_settings, quorum
from actors.queue import census
from actors.store import quorum_log
from actors.core.errors import ChannelError
from actors.core.queue_stats import DiskCounts, QueueCounters
from actors.core.queue import QueueCore, QueuePort
from actors.queue.dead_letter_publish import dead_letter_publish
from actors.queue.mirror import Masters
from actors.naming import queue_actor_name
from actors.runtime import LightActor

log = logging.getLogger("leveret.queue")


def now_ms() -> int:
    return int(time.monotonic() * 1000)


HOLD_MAX = 64  # at most this many messages between delivery runs


class Tick:
    """Timer -> queue (local only): time to look at TTLs and expiry."""

    __slots__ = ()


class Run:
    """Queue -> itself: delivery budget ran out, carry on after other messages."""

    __slots__ = ()


class EmitStats:
    """Timer (or its host, when a node joined) -> queue (local only): time for a statistics
    sample (management API)."""

    __slots__ = ("timer",)

    def __init__(self, timer: bool = False):
        self.timer = timer  # the queue's own timer (one is armed at a time)


class _SyncLane(NamedTuple):
    """One priority's paged part still to send a joining mirror (Queue.sync["lanes"])."""
    priority: int
    after: int  # read from the index after this seq_id
    stop: int | None  # the seq_id of the lane's tail in memory (sent apart), None: no tail;
    #                   0: the lane is done


class SyncMirrors:
    """Queue -> itself (local only): sync the manual-sync mirrors still behind, once the
    paged sync under way is done (one at a time)."""

    __slots__ = ()


# what a queue handles while it syncs a joining mirror (everything else waits): its backing
# queue's answers, its mirrors' acks and deaths, its statistics
_DURING_SYNC = (Stored, Persisted, Refused, m.MirrorAck, MirrorsDown, EmitStats)


class Queue(LightActor):
    scheduler_name = "queue"

    def __init__(self, host: "QueueHost", qdef: dict, recovered: bool, started_to: str = "",
                 adopted: m.Adopted | None = None):
        super().__init__()
        self.transport = host.transport  # this process's Transport
        self.replica = host.replica  # metadata, for dead-letter routing
        self.node = host.node  # the node's metadata actor
        self.timers = host.timers  # this process's timer thread
        self.vhost, self.qname = qdef["vhost"], qdef["name"]  # identity
        self.durable = qdef["durable"]  # survives restarts (with its persistent messages)
        self.config = host.config  # node configuration (a quorum queue's log marker)
        self.epoch = int(qdef.get("epoch") or 0)  # quorum: promotions of the queue so far
        self.arguments = qdef["arguments"]  # x-arguments
        self.name = queue_actor_name(self.vhost, self.qname)  # transport name
        self.address = self.transport.address(self.name)  # where channels send to
        settings = queue_settings.parse(self.arguments, self.policy())  # (parsed here only)
        needed = None  # a quorum queue's confirms wait for a majority of its members
        if settings.queue_type == quorum.QUORUM:
            size = quorum.group_size(self.arguments, len(host.config.cluster_nodes or ()))
            needed = quorum.majority(size) - 1
        self.mirrors = Masters(self.transport.send, self.address, self._mirror_synced, needed,
                               self._heir)
        self.counters = QueueCounters()  # the management API's message counts (its core's)
        self.core = QueueCore(self.vhost, self.qname, settings,
                              QueuePort.of(self, self.mirrors, events=events), now_ms(),
                              auto_delete=qdef["auto_delete"],
                              credit_more=host.config.credit_more,
                              credit_more_bytes=host.config.credit_more_bytes,
                              backlog_bytes=host.config.queue_backlog_bytes,
                              durable=self.durable,
                              page_bytes=host.config.queue_page_bytes,
                              page_size=host.config.queue_page_size, epoch=self.epoch, counters=self.counters)
        self.disk = DiskCounts()  # messages its backing queue wrote and read back
        self.bq = BackingQueue.start(self.actor_ref, qdef, host.config, host.timers,
                                     counts=self.disk)  # storage half
        self.run_pending = False  # a Run message is queued
        self.held = 0  # messages handled since the last delivery run
        self.recovered = recovered  # restarted after a crash
        self.started_to = started_to  # told QueueStarted once recovered (the node)
        # a promoted mirror's messages in memory (index entries), and whether it paged others
        # out to this node's index (recovered from there)
        self.adopted = adopted
        self.sync: dict | None = None  # a joining mirror's sync of the paged part: its state
        self.stale_pages = 0  # page reads of a cancelled sync still to come back (dropped)
        # recovered and serving, not deleted: what it holds is what a census would say
        self.serving = False
        self.last_sample: m.QueueStats | None = None  # the last sample sent
        self.sampled_to: set = set()  # the metadata actors it went to (the nodes up then)
        self.stats_interval = host.config.collect_statistics_interval
        # a quiet queue (nothing changed over a whole interval) disarms its statistics timer
        # until a message comes, as RabbitMQ's hibernating queues stop emitting: with 100,000
        # idle queues, a timer each firing every interval kept the workers busy
        self.stats_armed = False
        # wall-clock ms minus now_ms(): the consumer use state goes out in wall-clock time
        self.clock_offset = int(time.time() * 1000) - now_ms()

    # --- its core's port (QueuePort.of): each only sends -----------------------------------
    now_ms = staticmethod(now_ms)

    def deliver(self, channel, items, bodies) -> None:
        self.transport.send(channel, m.Deliver(self.address, self.qname, items, bodies))
        if faults.bug("deliver_twice", self.qname, self.config.host):
            # a test-only bug (actors/faults.py): the same messages, flags and all, again
            self.transport.send(channel, m.Deliver(self.address, self.qname, items, bodies))

    def confirm(self, channel, seqs, ok, reason="") -> None:
        events.sync()  # (events_sync: this process's events before the confirm they back)
        self.transport.send(channel, m.Confirm(self.address, seqs, ok, reason))

    def reply(self, addr, req_id, ok, result=None, code=0, text="") -> None:
        self.transport.send(addr, m.RpcReply(req_id, ok, result, code, text))

    def get_reply(self, channel, req_id, item, count, body) -> None:
        self.transport.send(channel, m.GetReply(req_id, self.address, item, count,
                                                [] if item is None else [body]))

    def consumer_gone(self, channel, tag) -> None:
        self.transport.send(channel, m.ConsumerGone(self.address, tag))

    def credit(self, channel, n, nbytes) -> None:
        self.transport.send(channel, m.Credit(self.address, n, nbytes))

    def demand(self, channel) -> None:
        self.transport.send(channel, m.Demand(self.address))

    def release(self, channel, n) -> None:
        self.transport.send(channel, m.Release(self.address, n))

    def persist(self, msgs) -> None:
        self.bq.tell(m.Persist(msgs))

    def record_delivery(self, msgs) -> None:
        self.bq.tell(m.RecordDelivery(msgs))

    def forget(self, msgs) -> None:
        self.bq.tell(m.Forget(msgs))

    def page_in(self, after_seq, n, priority=0) -> None:
        self.bq.tell(m.PageIn(after_seq, n, priority))

    def drop_paged(self, after_seq, n, priority=0) -> None:
        self.bq.tell(m.DropPaged(after_seq, n, priority))

    def purge_paged(self, after_seq, priority=0) -> None:
        self.mirrors.purge_paged(after_seq, priority)  # (its mirrors purge the same part)
        self.bq.tell(m.PurgeAfter(after_seq, priority))

    def dead_letter(self, msg, reason, new_msg_id=None) -> None:
        dead_letter_publish(self, msg, reason, new_msg_id)

    def delete_self(self, reason) -> None:
        self.transport.send(self.node, ops.rpc(self.address, 0, ops.QueueDeleteSelf(
            vhost=self.vhost, name=self.qname, reason=reason)))

    def schedule(self, at_ms) -> None:
        self.timers.at(at_ms, self.actor_ref, Tick())

    def _heir(self):
        """The oldest synchronised mirror, as this node's replica has it (a quorum queue's
        confirms need its acknowledgement: it is a voter of the log, quorum.confirmable_batch)."""
        q = self.replica.queue(self.vhost, self.qname) or {}
        synced = q.get("synced") or ()
        return next((x for x in q.get("mirrors") or () if x in synced), None)

    def _mirror_synced(self, member) -> None:
        if events.enabled():
            # its per-message replica_enqueued events said what the sync sent; this says that
            # the replica now holds everything this master holds
            events.emit("replica_synced", None, actor="queue", vhost=self.vhost,
                        queue=self.qname, member=member, epoch=self.epoch,
                        role="member" if self.mirrors.needed is not None else "mirror")
        self.transport.send(self.node, ops.rpc("", 0, ops.QueueSynced(
            vhost=self.vhost, name=self.qname, member=member)))

    def policy(self) -> dict:
        """The merged definition of the policy and operator policy that apply to this queue."""
        with self.replica.lock:
            return policies.effective(self.replica.policies, self.vhost, self.qname, "queues",
                                      self.replica.op_policies)

    def on_start(self):
        if self.mirrors.needed is not None and self.durable:
            # a quorum queue's leader: its index is the queue's log, complete, of this
            # promotion count (a leader election compares it with the members')
            quorum_log.mark_complete(self.config, self.vhost, self.qname, self.epoch)
        adopted = self.adopted.messages if self.adopted else []
        paged = self.adopted.paged if self.adopted else []
        if self.durable or paged:
            # what the index kept (after a restart or a crash, or what a promoted mirror paged
            # out) is back before anyone is served: the queue registers its name (channels
            # reach it) once Recovered is in; it does not wait for it (the worker's other
            # queues keep running meanwhile)
            limit = self.core.paging.page_size if self.core.paging.pageable else None
            after = {}  # per priority, where the mirror's in-memory messages end
            for x in adopted:
                p = self.core.prios.clamp(x.entry.priority)
                after[p] = max(after.get(p, 0), x.entry.seq_id)
            self.bq.tell(m.Recover(limit, adopt=self.adopted is not None, after=after))
            return
        if adopted:
            self.core.restore(adopted[-1].entry.seq_id + 1, adopted, 0, 0, now_ms(),
                              int(time.time() * 1000))
        self._serve()

    def _recovered(self, msg: Recovered) -> None:
        entries, next_seq_id = msg.entries, msg.next_seq_id
        adopted = self.adopted.messages if self.adopted else []
        if adopted:  # the promoted mirror's in-memory messages come before what it paged
            entries = sorted(adopted + entries, key=lambda x: x.entry.seq_id)
            next_seq_id = max(next_seq_id, adopted[-1].entry.seq_id + 1)
        self.core.restore(next_seq_id, entries, msg.more, msg.more_bytes, now_ms(),
                          int(time.time() * 1000))
        more = sum(msg.more) if isinstance(msg.more, list) else msg.more  # by priority
        if msg.entries or more:
            log.info("queue '%s' in vhost '%s': %d persistent messages recovered",
                     self.qname, self.vhost, len(msg.entries) + more)
        self._serve()

    def _serve(self) -> None:
        """Recovered (or nothing to recover): take the promoted mirror's messages, then let
        channels and the node know."""
        if self.adopted:
            self._adopt(self.adopted)
        self.transport.register(self.name, self.actor_ref)
        self._emit_stats()
        self._arm_stats()
        if self.started_to:
            self.transport.send(self.started_to, m.QueueStarted(self.vhost, self.qname,
                                                                self.address))
        self.serving = True
        if events.enabled():
            if self.adopted is not None:
                # a mirror or member became this master: it held what it said it took
                # (replica_enqueued), and no copy of an earlier master it did not hold lives on
                events.emit("promoted", None, actor="queue", vhost=self.vhost,
                            queue=self.qname, epoch=self.epoch,
                            role="member" if self.mirrors.needed is not None else "mirror",
                            count=self.core.stats()["messages"])
            events.emit("queue_started", None, actor="queue", vhost=self.vhost,
                        queue=self.qname, recovered=self.recovered)
            self._census("started")

    def _census(self, reason: str) -> None:
        """Its backing queue writes the census of what this queue holds now (census.py)."""
        if events.enabled():
            self.bq.tell(census.snapshot(self.core, reason))

    def _arm_stats(self) -> None:
        if not self.stats_armed:
            self.stats_armed = True
            self.timers.at(int(time.monotonic() * 1000) + self.stats_interval, self.actor_ref,
                           EmitStats(timer=True))

    def _stats_tick(self, msg: EmitStats) -> None:
        if msg.timer:
            self.stats_armed = False
        if self._emit_stats():
            self._arm_stats()  # else quiet until the next message

    def _emit_stats(self) -> bool:
        """A sample to every node's metadata actor when the counts changed (every
        collect_statistics_interval); the last one, as it was, to a node that came up since
        (its API lists every queue of the cluster from the samples it holds: an idle queue
        would otherwise stay without figures there until it changed). True when something
        was sent."""
        sample = self.counters.sample(self._stats(), self.core.use.state(self.clock_offset))
        addresses = self._metadata_addresses()
        if sample is not None:
            self.last_sample = m.QueueStats(self.vhost, self.qname, int(time.time() * 1000),
                                            sample)
            targets = addresses
        else:
            targets = [a for a in addresses if a not in self.sampled_to]
        self.sampled_to = set(addresses)
        if self.last_sample is None or not targets:
            return False
        for addr in targets:
            self.transport.send(addr, self.last_sample)
        return True

    def _stats(self) -> dict:
        """The queue's depth and consumers (QueueCore.stats), where its messages are
        (storage_stats), which consumer holds it (single active / exclusive), what it
        dead-lettered or dropped by reason, its head message's timestamp and what its backing
        queue wrote and read back (rabbit_backing_queue's info items
        head_message_timestamp, disk_writes, disk_reads): its samples, and list_queues'."""
        return dict(self.core.stats(), **self.core.storage_stats(), **self.core.cons.holders(),
                    **self.core.dead_lettered,
                    head_message_timestamp=self.core.head_message_timestamp(),
                    disk_reads=self.disk.reads, disk_writes=self.disk.writes)

    def _metadata_addresses(self) -> list:
        with self.replica.lock:
            others = [info.get("metadata") for info in self.replica.members.values()
                      if info.get("up") and info.get("metadata")]
        return others or [self.node]

    def _adopt(self, adopted) -> None:
        """Promoted from mirror: its messages (restored with what it paged out), all
        redelivered; the persistent in-memory ones of a durable queue go into this node's
        index."""
        paged = adopted.paged
        store = self.core.adopted({x.entry.seq_id for x in adopted.messages}, paged)
        if store:
            self.persist(store)
        log.warning("queue '%s' in vhost '%s': promoted from mirror with %d messages in "
                    "memory%s", self.qname, self.vhost, len(adopted.messages),
                    " and more paged out" if paged else "")

    def on_stop(self):
        if self.serving:
            self._census("stopped")
        self.transport.unregister(self.name)
        self.bq.stop(block=False)  # after what it was told; the worker's exit waits for it

    def on_failure(self, exc_type, exc_value, tb):
        """An exception in on_receive ends the queue as it is (rabbit_amqqueue_process crashes
        and its supervisor restarts it from disk): nothing half-applied goes on running. Its
        name leaves the transport (what is sent meanwhile gets the missing queue's answers:
        nacks, 404) and its backing queue stops with it, after what it was told, so that the
        restarted queue recovers what the index holds; QueueHost, its monitor, decides."""
        self.serving = False
        self.transport.unregister(self.name)
        try:  # (its writes are in before the restarted queue reads the index back)
            self.bq.stop(block=True, timeout=30)
        except (pykka.ActorDeadError, pykka.Timeout):
            log.warning("queue '%s' in vhost '%s': its backing queue did not stop in time",
                        self.qname, self.vhost)

    def on_receive(self, msg):
        faults.crash("queue", self.vhost, self.qname, msg, self.config.host)
        if isinstance(msg, Paged) and msg.sync:
            if self.stale_pages:
                self.stale_pages -= 1  # (the read of a cancelled sync)
                return
            self._sync_page(msg)
            return
        if self.sync is not None and isinstance(msg, m.QueueOp) and msg.op == "cancel_sync":
            self._queue_op(msg, now_ms())  # (the one operation a sync does not hold back)
            return
        if self.sync is not None and not isinstance(msg, _DURING_SYNC):
            self.sync["stash"].append(msg)  # the queue waits for its mirror's sync
            return
        core = self.core
        if not self.stats_armed and not isinstance(msg, EmitStats):
            self._arm_stats()  # a quiet queue has news again
        # run deliveries once per drained mailbox (or every HOLD_MAX messages), not per message
        self.held += 1
        core.defer_runs(self.held < HOLD_MAX and not self.actor_inbox.empty())
        own = _OWN.get(type(msg))
        if own is None:
            core.handle(msg)  # (what the core does not take either is ignored)
        else:
            own(self, msg, now_ms())
        if core.hold:
            return
        self.mirrors.flush()
        self.held = 0
        if not self.run_pending and (core.run_due or (core.ready_count and core.consumers)):
            if core.run(now_ms()):
                self.run_pending = True
                self.actor_ref.tell(Run())

    def manual_sync(self) -> bool:
        """ha-sync-mode manual (a classic queue's policy; quorum members always sync)."""
        return self.mirrors.needed is None and self.policy().get("ha-sync-mode") == "manual"

    def _depth(self) -> int:
        return self.core.stats()["messages"]  # (ready, paged out or not, and unacked)

    def _sync_mirrors(self, now) -> int:
        """Eagerly sync every manual-sync mirror still missing messages (leveretctl
        sync_queue, or the policy no longer manual) -> how many."""
        behind = self.mirrors.unsynchronised()
        for addr, member in behind:
            if self.sync is not None:  # a paged sync started: the others once it is done
                self.sync["stash"].append(SyncMirrors())
                break
            self._join(m.MirrorJoin(addr, member), now, eager=True)
        return len(behind)

    def _cancel_sync(self) -> bool:
        """leveretctl cancel_sync_queue: stop the eager sync of the paged part under way (the
        mirror stays unsynchronised, as a manual-sync one); False when none is."""
        sync, self.sync = self.sync, None
        if sync is None:
            return False
        self.stale_pages += 1  # (a sync waits for one page read at a time)
        self.mirrors.sync_cancelled(sync["mirror"], self._depth(), self.core.next_seq_id)
        log.info("queue '%s' in vhost '%s': sync of mirror %s cancelled", self.qname,
                 self.vhost, sync["mirror"])
        for held in sync["stash"]:
            self.on_receive(held)
        return True

    def _join(self, msg: m.MirrorJoin, now, eager: bool = False) -> None:
        """A mirror joins: what is in memory at once; the paged-out part read back from the
        index a page at a time, everything else held meanwhile (RabbitMQ's eager sync blocks
        its master the same way). With ha-sync-mode manual (the mirror's view, unless
        `eager`) it is sent only what enters from now on."""
        core = self.core
        # a mirror that asks is alive: its process may be one this worker marked dead while
        # its node was cut off, and not yet told is back (WorkerUp)
        self.transport.revive(msg.mirror.partition("#")[0])
        if msg.manual and not eager and self._depth() and self.mirrors.needed is None:
            self.mirrors.join(msg.mirror, msg.member, [], now, missing=self._depth(),
                              below=core.next_seq_id)
            return
        # A mirror is sent each lane in seq_id order, as an index takes them (a quorum queue's
        # member writes every message to its index; a mirror that pages, the rest): what is in
        # memory up to a lane's paged part now, the paged part read back from the index, then
        # what is in memory after it (the lane's tail), once that lane's paged part is sent.
        after = {p: lane.page_after for p, lane in enumerate(core.paging.lanes) if lane.paged}
        first, behind = [], {}
        for x in core.messages():
            if x.priority in after and x.seq_id > after[x.priority]:
                behind.setdefault(x.priority, []).append(x)
            else:
                first.append(x)
        # a quorum member offering the log it kept of this epoch (seq_ids this master gave)
        upto = msg.last if self.mirrors.needed is not None and msg.epoch == self.epoch \
            and 0 <= msg.last < core.next_seq_id else -1
        self.mirrors.join(msg.mirror, msg.member, first, now, more=bool(core.paging.paged),
                          upto=upto)
        if core.paging.paged:
            # each lane's paged part, up to its tail (in memory: `behind`; when persistent it
            # follows the paged part in the index too)
            lanes = [_SyncLane(p, lane.page_after, core.prios.tail_start(p))
                     for p, lane in enumerate(core.paging.lanes) if lane.paged]
            self.sync = {"mirror": msg.mirror, "lanes": lanes, "stash": [], "sent": 0,
                         "behind": behind}
            self._sync_next()

    def _sync_next(self) -> None:
        sync = self.sync
        if sync["lanes"]:
            lane = sync["lanes"][0]
            self.bq.tell(m.PageIn(lane.after, self.core.paging.page_size, lane.priority, sync=True))
            return
        self.mirrors.sync_done(sync["mirror"])
        log.info("queue '%s' in vhost '%s': %d paged-out messages synced to mirror %s",
                 self.qname, self.vhost, sync["sent"], sync["mirror"])
        stash, self.sync = sync["stash"], None
        for held in stash:
            self.on_receive(held)

    def _sync_page(self, msg: Paged) -> None:
        sync = self.sync
        if sync is None:
            return
        stop = sync["lanes"][0].stop
        entries = msg.entries
        if stop is not None and entries and entries[-1].entry.seq_id >= stop:
            entries = [x for x in entries if x.entry.seq_id < stop]  # the tail: sent already
            stop = 0  # this lane is done
        if entries:
            sync["sent"] += self.mirrors.sync_page(sync["mirror"], [
                m.MirrorItem(e.seq_id, e.exchange, e.routing_key, e.props_raw, persistent,
                             e.priority, e.expires_at, e.msg_id) for e, _, persistent in entries],
                [body for _, body, _ in entries])
            sync["lanes"][0] = _SyncLane(msg.priority, entries[-1].entry.seq_id, stop)
        if stop == 0 or not entries and not msg.dropped:
            sync["lanes"].pop(0)
            tail = sync["behind"].pop(msg.priority, None)
            if tail:
                sync["sent"] += self.mirrors.sync_messages(sync["mirror"], tail, now_ms())
        self._sync_next()

    def _paged(self, msg: Paged, now) -> None:
        self.core.paged_in(msg.entries, msg.dropped, msg.dropped_bytes, now,
                           int(time.time() * 1000), msg.priority)
        self.core.retry_gets(now)

    def _paged_dropped(self, msg: m.PagedDropped, now) -> None:
        self.core.paged_dropped(msg.priority, msg.n, msg.nbytes, msg.last_seq, msg.pers,
                                msg.pers_bytes)
        self.mirrors.forget(list(msg.seq_ids))
        self.core.retry_gets(now)

    def _resume(self, msg: Run, now) -> None:
        """The Run it told itself came: the delivery run after this message may ask again."""
        self.run_pending = False

    def _policy_changed(self, now) -> None:
        self.core.apply_settings(queue_settings.parse(self.arguments, self.policy()), now)
        if not self.manual_sync():  # (rabbit_mirror_queue_misc:maybe_auto_sync)
            self._sync_mirrors(now)

    def _mirror_acked(self, msg: m.MirrorAck) -> None:
        low = self.mirrors.acked(msg.mirror, msg.batch)
        if low is not None:
            self.core.mirrors_acked(low)

    def _queue_op(self, msg: m.QueueOp, now) -> None:
        if msg.op == "info":
            count, consumers = self.core.info()
            self.core.touch(now)
            self.reply(msg.reply_to, msg.req_id, True, [self.qname, count, consumers])
        elif msg.op == "stats":
            self.reply(msg.reply_to, msg.req_id, True, self._stats())
        elif msg.op == "purge":
            self.reply(msg.reply_to, msg.req_id, True, self.core.purge())
        elif msg.op == "sync":  # (from a mirror, after a policy change: no answer)
            n = self._sync_mirrors(now)
            if msg.reply_to:
                self.reply(msg.reply_to, msg.req_id, True, n)
        elif msg.op == "cancel_sync":
            self.reply(msg.reply_to, msg.req_id, True, self._cancel_sync())
        elif msg.op == "census":  # (leveretctl census: the queue's messages now, in its log)
            if self.serving:
                self._census("requested")
            if msg.reply_to:
                self.reply(msg.reply_to, msg.req_id, True, self._depth())
        elif msg.op == "delete":
            try:
                n = self.core.delete(msg.args.get("if_unused"), msg.args.get("if_empty"),
                                     msg.args.get("reason") or "delete")
            except ChannelError as e:
                self.reply(msg.reply_to, msg.req_id, False, None, e.reply_code, e.text)
                return
            self.core.purge()
            self.serving = False
            self.bq.tell(m.DeleteIndex())
            self.reply(msg.reply_to, msg.req_id, True, n)
            self.transport.unregister(self.name)
            self.stop()


# what only the actor takes (the core's handle, through queue_dispatch, the rest): message type -> (queue, msg, now)
_OWN: dict[type, Callable] = {
    Paged: Queue._paged,
    m.PagedDropped: Queue._paged_dropped,
    m.QueueOp: Queue._queue_op,
    Stored: lambda q, msg, now: q.core.stored(msg.nbytes),
    Persisted: lambda q, msg, now: q.core.persisted(msg.msgs),
    Refused: lambda q, msg, now: q.core.refused(msg.msgs),
    Recovered: lambda q, msg, now: q._recovered(msg),
    PolicyChanged: lambda q, msg, now: q._policy_changed(now),
    Tick: lambda q, msg, now: q.core.tick(now),
    EmitStats: lambda q, msg, now: q._stats_tick(msg),
    Run: Queue._resume,
    m.MirrorJoin: Queue._join,
    SyncMirrors: lambda q, msg, now: q._sync_mirrors(now),
    m.MirrorAck: lambda q, msg, now: q._mirror_acked(msg),
    MirrorsDown: lambda q, msg, now: q.core.mirrors_acked(q.mirrors.down(msg.endpoint)),
}
