"""QueueHost: the queue-worker process's own part, and the supervisor of its queues.

It starts queues (a Queue actor and its BackingQueue, or a StreamQueue and its StreamWriter for
a stream) and mirrors when the node says so, promotes
a mirror when its queue comes home here, answers messages for queues that no longer exist the way
RabbitMQ's channel sees a dead queue, and tells queues when a connection worker or a queue worker
with mirrors died, or policies changed.

As rabbit_amqqueue_sup (one_for_one, intensity 5 in 10 s) it watches every Queue, Mirror and
StreamQueue it starts (runtime monitors, told to the worker's control actor): one that crashes
is started again from disk (a durable queue recovers its persistent messages, a transient one
comes back empty, a mirror rejoins its master and syncs), and the node hears of the crash so
that channels nack its unconfirmed publishes and cancel its consumers (QueueDown). After more
than `max_restarts` crashes within `restart_period` seconds it gives up: the queue is marked
crashed (404 "has crashed and failed to restart" to a declare, state "crashed" in the
management API) until it is deleted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pykka

from actors import events
from actors import messages as m
from actors import metadata_ops as ops
from actors.messages import ChannelsDown, MirrorsDown, PolicyChanged
from actors.core.errors import amqp_text
from actors.worker.worker_host import WorkerHost
from actors.naming import queue_actor_name
from actors.queue.mirror import Mirror
from actors.store import storage
from actors.core import confirms, stream
from actors.core.restarts import RestartIntensity
from actors.runtime import monitor
from actors.timers import Sampler
from actors.queue.queue_process import EmitStats, Queue
from actors.queue.stream_member import StreamMember
from actors.queue.stream_queue import StreamQueue

log = logging.getLogger("leveret.queue")


@dataclass
class Child:
    """A supervised actor of the worker: what is needed to start it again."""

    name: str  # its transport name
    kind: str  # "queue", "stream", "mirror" or "stream member"
    qdef: dict  # its queue's definition when it started
    started_to: str  # told QueueStarted once a restarted queue serves (the node)


class QueueHost(WorkerHost):
    """The queue-worker process: starts queues, answers for missing ones."""

    def __init__(self, config, transport, replica, node, index):
        super().__init__(config, transport, replica, node, index)
        self.queues: dict[str, pykka.ActorRef] = {}  # transport name -> Queue or Mirror actor
        self.paused = False  # the node pauses (pause_minority): no queue runs here meanwhile
        self.children: dict[str, Child] = {}  # actor urn -> the supervised actor it names
        self.intensity: dict[str, RestartIntensity] = {}  # transport name -> its recent crashes
        self.crashed: dict[str, dict] = {}  # transport name -> qdef of a queue given up on
        transport.set_fallback(self.missing)

    def start(self) -> None:
        self.sampler = ProcessSampler(self.transport, self.node,
                                      self.config.collect_statistics_interval)
        self.sampler.start()

    def stop(self) -> None:
        if getattr(self, "sampler", None) is not None:
            self.sampler.stop()
        for ref in list(self.queues.values()):
            try:
                ref.stop(timeout=5)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass
        super().stop()

    def pause(self, paused: bool) -> None:
        """The node pauses (pause_minority): every master and mirror of this worker stops at
        once (a master cut off from the majority must not deliver while a mirror is promoted
        there; a mirror misses what its master does meanwhile). Durable queues keep their
        index; when the node resumes it starts what the log then says is its (a master, a
        mirror that syncs from scratch)."""
        self.paused = paused
        if not paused:
            return
        stopping, self.queues = list(self.queues.values()), {}
        for ref in stopping:
            try:
                ref.stop(timeout=10)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass
        if stopping:
            log.warning("node paused: stopped %d queue masters and mirrors", len(stopping))

    def start_queue(self, msg: m.StartQueue) -> None:
        if self.paused:
            return  # (sent before the node paused)
        q = msg.qdef
        name = queue_actor_name(q["vhost"], q["name"])
        me = self.config.cluster_address
        old = self.queues.get(name)
        if q.get("home", me) != me:  # a mirror of a queue homed elsewhere
            if old is None or not old.is_alive():
                if stream.is_stream(q.get("arguments")):
                    self._supervise(StreamMember.start(self, q, me),
                                    Child(name, "stream member", q, ""))
                else:
                    self._supervise(Mirror.start(self, q, me), Child(name, "mirror", q, ""))
            return
        adopted = None
        if old is not None and old.is_alive() and old.actor_class is StreamMember:
            # promotion: the member's log is the leader's from now on (read from disk)
            old.stop(block=True, timeout=30)
            old = None
        if old is not None and old.is_alive():
            if old.actor_class is not Mirror:
                self.transport.send(msg.reply_to, m.QueueStarted(
                    q["vhost"], q["name"], self.transport.address(name)))
                return
            adopted = old.ask(m.TakeMessages())  # promotion: the mirror's messages
            old.stop()
        try:
            # the Queue tells the node itself once it has recovered (Queue.on_start)
            if self.crashed.pop(name, None) is not None:
                self.intensity.pop(name, None)  # declared afresh after its crashed one went
            if stream.is_stream(q.get("arguments")):
                self._supervise(StreamQueue.start(self, q, msg.reply_to),
                                Child(name, "stream", q, msg.reply_to))
            else:
                self._supervise(Queue.start(self, q, msg.recovered, msg.reply_to, adopted),
                                Child(name, "queue", q, msg.reply_to))
        except Exception as e:  # noqa: BLE001 - e.g. lmdb.MapFullError opening its index
            log.exception("queue '%s' in vhost '%s' could not start", q["name"], q["vhost"])
            self.transport.send(msg.reply_to, m.QueueStarted(
                q["vhost"], q["name"], "", f"{type(e).__name__}: {e}"))

    def _supervise(self, ref, child: Child) -> None:
        self.queues[child.name] = ref
        self.children[ref.actor_urn] = child
        monitor(ref, self.control)

    def actor_down(self, msg) -> None:
        """A supervised actor ended: a normal stop is forgotten; a crash is restarted within
        the restart intensity, else given up on (the node marks the queue crashed)."""
        child = self.children.pop(msg.urn, None)
        if child is None or msg.reason == "normal":
            return
        ref = self.queues.get(child.name)
        if ref is not None and ref.actor_urn == msg.urn:
            del self.queues[child.name]
        elif ref is not None:
            return  # (replaced meanwhile, as by a promotion)
        q = child.qdef
        replica = child.kind in ("mirror", "stream member")
        what = f"{child.kind} of queue" if replica else "queue"
        intensity = self.intensity.setdefault(child.name, RestartIntensity(
            self.config.max_restarts, self.config.restart_period))
        restart = not self.paused and intensity.exited(time.monotonic())
        if not replica:
            if events.enabled():  # (what it held in memory is gone; recovery re-announces)
                events.emit("queue_crashed", None, actor="queue", vhost=q["vhost"],
                            queue=q["name"], worker=self.index, reason=msg.reason)
            # channels nack and cancel what was the crashed queue's; the node marks a queue
            # given up on as crashed
            self.transport.send(self.node, ops.rpc("", 0, ops.QueueCrashed(
                vhost=q["vhost"], name=q["name"], address=self.transport.address(child.name),
                gave_up=not restart)))
        if self.paused:
            return  # (it starts again with the others when the node resumes)
        if not restart:
            log.error("%s '%s' in vhost '%s' crashed %d times in %ss: giving up on it",
                      what, q["name"], q["vhost"], self.config.max_restarts + 1,
                      self.config.restart_period)
            if not replica:
                self.crashed[child.name] = q
            return
        log.error("%s '%s' in vhost '%s' crashed (%s): restarting it", what, q["name"],
                  q["vhost"], msg.reason)
        current = dict(self.replica.queue(q["vhost"], q["name"]) or q)
        current.pop("address", None)
        try:
            if replica:
                kind = StreamMember if child.kind == "stream member" else Mirror
                self._supervise(kind.start(self, current, self.config.cluster_address),
                                Child(child.name, child.kind, current, ""))
            elif child.kind == "stream":
                self._supervise(StreamQueue.start(self, current, child.started_to),
                                Child(child.name, "stream", current, child.started_to))
            else:
                self._supervise(Queue.start(self, current, True, child.started_to),
                                Child(child.name, "queue", current, child.started_to))
        except Exception:  # noqa: BLE001 - e.g. lmdb.MapFullError opening its index
            log.exception("%s '%s' in vhost '%s' could not be restarted: giving up on it",
                          what, q["name"], q["vhost"])
            if not replica:
                self.crashed[child.name] = q
                self.transport.send(self.node, ops.rpc("", 0, ops.QueueCrashed(
                    vhost=q["vhost"], name=q["name"],
                    address=self.transport.address(child.name), gave_up=True)))

    def _drop_crashed(self, name: str) -> None:
        """A queue given up on was deleted: what its index kept goes with it (RabbitMQ's
        delete_crashed), so that one declared again under its name starts empty."""
        q = self.crashed.pop(name)
        self.intensity.pop(name, None)
        if not q["durable"] or stream.is_stream(q.get("arguments")):
            return
        from actors.queue.backing_queue import BackingQueue
        bq = BackingQueue.start(self.control, q, self.config, self.timers)
        bq.tell(m.DeleteIndex())
        try:
            bq.stop(block=True, timeout=30)  # (before a queue of the same name recovers)
        except pykka.Timeout:
            log.warning("queue '%s' in vhost '%s': its index is slow to go", q["name"],
                        q["vhost"])

    def worker_down(self, kind, endpoint) -> None:
        notice = ChannelsDown(endpoint + "#") if kind == "conn" else MirrorsDown(endpoint)
        for ref in list(self.queues.values()):
            if ref.is_alive() and ref.actor_class in (Queue, StreamQueue):
                ref.tell(notice)

    def metadata_changed(self, changes) -> None:
        me = self.config.cluster_address
        for c in changes:
            if c[0] not in ("queue_put", "queue_del"):
                continue
            name = queue_actor_name(*(c[1]["vhost"], c[1]["name"]) if c[0] == "queue_put"
                                    else (c[1], c[2]))
            if c[0] == "queue_del" and name in self.crashed:
                self._drop_crashed(name)
            elif c[0] == "queue_del":
                self.intensity.pop(name, None)
            ref = self.queues.get(name)
            if ref is None or not ref.is_alive() or ref.actor_class not in (Mirror,
                                                                             StreamMember):
                continue
            q = c[1] if c[0] == "queue_put" else None
            if q is None or (me not in (q.get("mirrors") or ()) and q.get("home") != me):
                if q is None or me not in (q.get("logs") or ()):
                    # a quorum queue's member whose log no longer counts (the queue is gone,
                    # or another member replaced it): its log goes too (a classic mirror
                    # ignores this: its index is dropped when it starts)
                    ref.tell(m.DeleteIndex())
                ref.stop()  # no longer a mirror here
                self.queues.pop(name, None)
            else:
                ref.tell(m.CheckMaster())  # the master may have moved
        if any(c[0] == "member_put" for c in changes):
            # a node came up (or a member changed): quiet queues, whose statistics timers
            # are disarmed, send their last sample to the nodes that have not had it
            for ref in list(self.queues.values()):
                if ref.is_alive() and ref.actor_class is Queue:
                    ref.tell(EmitStats())
        if any(c[0] in ("policy_put", "policy_del", "op_policy_put", "op_policy_del")
               for c in changes):
            for ref in list(self.queues.values()):
                if ref.is_alive():
                    ref.tell(PolicyChanged())

    def missing(self, name: str, msg) -> None:
        """A message for a queue that is gone: what RabbitMQ's channel sees for a dead queue."""
        t = self.transport
        if self.paused:
            self._paused_answer(name, msg)
            return
        if isinstance(msg, m.Publish):
            seqs = confirms.wanted(msg.items)
            if seqs and msg.sender:
                # a queue the metadata still has lives at another address (its master moved, a
                # node paused and resumed, the route was stale)
                vhost, qname = _queue_of(name)
                deleted = self.replica.queue(vhost, qname) is None
                if not deleted:
                    log.warning("publish for queue '%s' in vhost '%s' reached %s, where it "
                                "does not run: nacked", qname, vhost, t.address(name))
                verdict = confirms.missing_queue(deleted)
                t.send(msg.sender, m.Confirm(t.address(name), seqs, verdict.ok, verdict.reason))
        elif isinstance(msg, (m.Consume, m.Get)):
            t.send(msg.sender, m.RpcReply(msg.req_id, False, None, 404, self._absent(name)))
        elif isinstance(msg, m.QueueOp):
            if msg.op == "info":  # asked by a channel declaring it: it is gone now
                t.send(msg.reply_to, m.RpcReply(msg.req_id, False, None, 404,
                                                self._absent(name)))
            else:
                t.send(msg.reply_to, m.RpcReply(msg.req_id, True, 0))


    def _absent(self, name: str) -> str:
        """The 404 text for a queue that does not serve here: RabbitMQ's for a queue whose
        process crashed (rabbit_amqqueue:priv_absent; restarting or given up on), else for
        a queue that is gone."""
        vhost, qname = _queue_of(name)
        if name in self.crashed or name in self.intensity:  # (missing: not serving now)
            return amqp_text(404, f"queue '{qname}' in vhost '{vhost}' has crashed and "
                                  "failed to restart")
        return amqp_text(404, f"no queue '{qname}' in vhost '{vhost}'")

    def _paused_answer(self, name: str, msg) -> None:
        """A message for a queue while the node is paused: the queue is not gone (a publish
        is not confirmed as if it had been deleted): nacked, or RabbitMQ's 404 for a queue
        whose node is down."""
        t = self.transport
        vhost, qname = _queue_of(name)
        text = amqp_text(404, f"home node '{self.config.node}' of durable queue '{qname}' in "
                              f"vhost '{vhost}' is down or inaccessible")
        if isinstance(msg, m.Publish):
            seqs = confirms.wanted(msg.items)
            if seqs and msg.sender:
                verdict = confirms.missing_queue(deleted=False)  # (not gone: paused)
                t.send(msg.sender, m.Confirm(t.address(name), seqs, verdict.ok, verdict.reason))
        elif isinstance(msg, (m.Consume, m.Get)):
            t.send(msg.sender, m.RpcReply(msg.req_id, False, None, 404, text))
        elif isinstance(msg, m.QueueOp):
            t.send(msg.reply_to, m.RpcReply(msg.req_id, False, None, 404, text))


def _queue_of(name: str) -> tuple[str, str]:
    """(vhost, queue name) of a queue's actor name; for a name that is not one (what a forged
    message may be sent to), the whole name as the queue's: the answer is a 404 all the same."""
    q, _, rest = name.partition("\x1f")
    vhost, sep, qname = rest.partition("\x1f")
    return (vhost, qname) if q == "q" and sep else ("", name)


class ProcessSampler(Sampler):
    """A thread of the queue worker: every interval, the process's totals (events written
    and dropped, its storage's syncs and msg_store reads and writes) to its node's metadata
    actor as WorkerStats, when they changed (Prometheus' leveret_events_written_total and
    /api/nodes' io_sync_* and msg_store_* count every process of the node)."""

    def __init__(self, transport, node: str, interval_ms: int):
        super().__init__(interval_ms, "queue-stats", log)
        self.transport = transport
        self.node = node
        self.last = None

    def sample(self) -> None:
        totals = {"events_written": events.written(), "events_dropped": events.dropped(),
                  "events_syncs": events.syncs(),
                  **storage.io_totals()}
        if totals == self.last:
            return
        self.last = totals
        self.transport.send(self.node, m.WorkerStats(self.transport.endpoint,
                                                     int(time.time() * 1000), totals))
