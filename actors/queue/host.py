"""QueueHost: the queue-worker process's own part.

It starts queues (a Queue actor and its BackingQueue) and mirrors when the node says so, promotes
a mirror when its queue comes home here, answers messages for queues that no longer exist the way
RabbitMQ's channel sees a dead queue, and tells queues when a connection worker or a queue worker
with mirrors died, or policies changed.
"""

from __future__ import annotations

import logging
import threading
import time

import pykka

from actors import events
from actors import messages as m
from actors.messages import ChannelsDown, MirrorsDown, PolicyChanged
from actors.core.errors import amqp_text
from actors.host import WorkerHost
from actors.naming import queue_actor_name
from actors.queue.mirror import Mirror
from actors.queue import storage
from actors.queue.queue import Queue

log = logging.getLogger("leveret.queue")


class QueueHost(WorkerHost):
    """The queue-worker process: starts queues, answers for missing ones."""

    def __init__(self, config, transport, replica, node, index):
        super().__init__(config, transport, replica, node, index)
        self.queues: dict[str, pykka.ActorRef] = {}  # transport name -> Queue or Mirror actor
        self.paused = False  # the node pauses (pause_minority): no queue runs here meanwhile
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
                self.queues[name] = Mirror.start(self, q, me)
            return
        adopted = None
        if old is not None and old.is_alive():
            if old.actor_class is not Mirror:
                self.transport.send(msg.reply_to, m.QueueStarted(
                    q["vhost"], q["name"], self.transport.address(name)))
                return
            adopted = old.ask(m.TakeMessages())  # promotion: the mirror's messages
            old.stop()
        try:
            # the Queue tells the node itself once it has recovered (Queue.on_start)
            self.queues[name] = Queue.start(self, q, msg.recovered, msg.reply_to, adopted)
        except Exception as e:  # noqa: BLE001 - e.g. lmdb.MapFullError opening its index
            log.exception("queue '%s' in vhost '%s' could not start", q["name"], q["vhost"])
            self.transport.send(msg.reply_to, m.QueueStarted(
                q["vhost"], q["name"], "", f"{type(e).__name__}: {e}"))

    def worker_down(self, kind, endpoint) -> None:
        notice = ChannelsDown(endpoint + "#") if kind == "conn" else MirrorsDown(endpoint)
        for ref in list(self.queues.values()):
            if ref.is_alive() and ref.actor_class is Queue:
                ref.tell(notice)

    def metadata_changed(self, changes) -> None:
        me = self.config.cluster_address
        for c in changes:
            if c[0] not in ("queue_put", "queue_del"):
                continue
            name = queue_actor_name(*(c[1]["vhost"], c[1]["name"]) if c[0] == "queue_put"
                                    else (c[1], c[2]))
            ref = self.queues.get(name)
            if ref is None or not ref.is_alive() or ref.actor_class is not Mirror:
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
            seqs = [it.seq_no for it in msg.items if it.seq_no]
            if seqs and msg.sender:
                # RabbitMQ's channel confirms what it routed to a queue that was deleted (a
                # normal exit); a queue the metadata still has lives at another address (its
                # master moved, a node paused and resumed, the route was stale): the message
                # reached no queue, so the publisher is told it is not safe (nack)
                vhost, qname = _queue_of(name)
                deleted = self.replica.queue(vhost, qname) is None
                if not deleted:
                    log.warning("publish for queue '%s' in vhost '%s' reached %s, where it "
                                "does not run: nacked", qname, vhost, t.address(name))
                t.send(msg.sender, m.Confirm(t.address(name), seqs, deleted,
                                             "" if deleted else "queue_down"))
        elif isinstance(msg, (m.Consume, m.Get)):
            vhost, qname = _queue_of(name)
            text = amqp_text(404, f"no queue '{qname}' in vhost '{vhost}'")
            t.send(msg.sender, m.RpcReply(msg.req_id, False, None, 404, text))
        elif isinstance(msg, m.QueueOp):
            if msg.op == "info":  # asked by a channel declaring it: it is gone now
                vhost, qname = _queue_of(name)
                text = amqp_text(404, f"no queue '{qname}' in vhost '{vhost}'")
                t.send(msg.reply_to, m.RpcReply(msg.req_id, False, None, 404, text))
            else:
                t.send(msg.reply_to, m.RpcReply(msg.req_id, True, 0))


    def _paused_answer(self, name: str, msg) -> None:
        """A message for a queue while the node is paused: the queue is not gone (a publish
        is not confirmed as if it had been deleted): nacked, or RabbitMQ's 404 for a queue
        whose node is down."""
        t = self.transport
        vhost, qname = _queue_of(name)
        text = amqp_text(404, f"home node '{self.config.node}' of durable queue '{qname}' in "
                              f"vhost '{vhost}' is down or inaccessible")
        if isinstance(msg, m.Publish):
            seqs = [it.seq_no for it in msg.items if it.seq_no]
            if seqs and msg.sender:
                t.send(msg.sender, m.Confirm(t.address(name), seqs, False, "queue_down"))
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


class ProcessSampler:
    """A thread of the queue worker: every interval, the process's totals (events written
    and dropped, its storage's syncs and msg_store reads and writes) to its node's metadata
    actor as WorkerStats, when they changed (Prometheus' leveret_events_written_total and
    /api/nodes' io_sync_* and msg_store_* count every process of the node)."""

    def __init__(self, transport, node: str, interval_ms: int):
        self.transport = transport
        self.node = node
        self.interval = interval_ms / 1000.0
        self.last = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="queue-stats", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample must never end the worker
                log.exception("statistics sample failed")

    def sample(self) -> None:
        totals = {"events_written": events.written(), "events_dropped": events.dropped(),
                  **storage.io_totals()}
        if totals == self.last:
            return
        self.last = totals
        self.transport.send(self.node, m.WorkerStats(self.transport.endpoint,
                                                     int(time.time() * 1000), totals))
