"""The metadata actor's part in worker supervision: worker hellos and exits, placing queues
on queue workers and starting them, and boot's wait for recovered queues (what
rabbit_amqqueue:recover and the node's worker bookkeeping do)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from actors import events
from actors import messages as m
from actors import metadata_ops as ops
from actors.core.errors import amqp_text
from actors.messages import WorkerExited
from actors.node.metadata_dispatch import handles

log = logging.getLogger("actors.node.metadata")


@dataclass
class Worker:
    kind: str  # "conn" or "queue"
    index: int  # slot number, stable across restarts
    endpoint: str  # current incarnation's ZeroMQ endpoint
    control: str  # address of the worker's control actor
    ready: bool = False  # a connection worker is listening


class WorkersMixin:
    # --- workers --------------------------------------------------------------------------------
    @handles(ops.WorkerHello)
    def op_worker_hello(self, rpc, kind, index, endpoint, control):
        self.transport.revive(endpoint)
        if kind == "conn" and self.recovering:
            self.deferred_hellos.append((rpc, kind, index, endpoint, control))
            return {"ok": True}
        w = Worker(kind, index, endpoint, control)
        self.workers[(kind, index)] = w
        self.applied.pop((kind, index), None)  # counted again once it has the snapshot
        self.transport.send(control, m.MetaSnapshot(self.snapshot(), self.version))
        self._alarms_to(w)
        if kind == "queue":
            for q in self.queues.values():
                if q["worker"] == index and q.get("home", self.me) == self.me:
                    self._start_queue(q, recovered=q.get("address") is not None or q["durable"])
                elif self.cluster is not None:
                    self._start_mirrors(q)
        if self.cluster is not None:
            self._leader_op(ops.ClusterWorkerUp(self.me, f"{kind}-{index}", endpoint))
        return {"ok": True}

    @handles(ops.WorkerReady)
    def op_worker_ready(self, rpc, kind, index):
        w = self.workers.get((kind, index))
        if w is not None:
            w.ready = True
        return None

    def _worker_exited(self, ev: WorkerExited) -> None:
        w = self.workers.get((ev.kind, ev.index))
        if ev.endpoint.endswith(":*"):
            # a cluster worker picks its port when it binds: the endpoint is the one its hello
            # gave (its successor is spawned after this message, so `w` is not a newer one)
            if w is None:
                return  # it died before its hello: nobody was told its endpoint
            ev = WorkerExited(ev.kind, ev.index, w.endpoint)
        if w is not None and w.endpoint == ev.endpoint:
            del self.workers[(ev.kind, ev.index)]
            self.applied.pop((ev.kind, ev.index), None)
            self._release_replies()
        self.transport.mark_dead(ev.endpoint)
        self._forget_worker_stats(ev.endpoint, own=True)
        if ev.kind == "conn":
            self._untrack_endpoint(ev.endpoint)
        down = m.WorkerDown(ev.kind, ev.endpoint)
        for other in self.workers.values():
            self.transport.send(other.control, down)
        for key, q in self.queues.items():
            if q.get("worker") == ev.index and q.get("home", self.me) == self.me:
                self.starting.discard(key)
        if self.cluster is not None:
            self._leader_op(ops.ClusterWorkerDown(self.me, ev.kind, ev.index, ev.endpoint))
        else:
            self._worker_gone(self.me, ev.kind, ev.index, ev.endpoint)

    def _worker_gone(self, member, kind, index, endpoint) -> None:
        """Leader: a worker of `member` died: its queues wait for the restart (a mirrored
        queue's in-sync mirror takes over at once, as when its node dies), its connections'
        exclusive queues go."""
        if kind == "queue":
            changes, promoted, electing = [], False, []
            for q in list(self.queues.values()):
                # (on that process only: a worker_down that waited for a leader, as while its
                # node was paused, must not touch the queues its successor runs)
                if q["worker"] == index and (q.get("address") or "").startswith(endpoint + "#") \
                        and q.get("home", member) == member:
                    if events.enabled():
                        events.emit("queue_crashed", None, actor="node", vhost=q["vhost"],
                                    queue=q["name"], worker=index)
                    if self.cluster is not None and self._is_quorum(q):
                        # the member with the longest log leads (this node's too: its
                        # index is intact), chosen as a Raft election would
                        changes.append(["queue_put", dict(q, address=None, electing=True)])
                        electing.append((q["vhost"], q["name"]))
                    elif self.cluster is not None and self._promote_mirror(q):
                        promoted = True
                    else:
                        changes.append(["queue_put", dict(q, address=None)])
            if changes:
                self._change(*changes)
            for key in electing:
                self._elect(key)
            if promoted:
                self._remirror()  # the old home becomes a mirror again
        else:
            prefix = endpoint + "/"
            for q in list(self.queues.values()):
                if q["exclusive"] and q["exclusive"].startswith(prefix):
                    self._delete_queue(q["vhost"], q["name"], None, 0, reason="exclusive")

    def _place(self, home: str = "", placed: dict | None = None) -> int:
        """The least loaded queue worker of the queue's home node (`placed`: queues already
        given to each worker but not yet in the table, as a definitions import places many)."""
        n = max(1, self.members.get(home, {}).get("queue_workers", self.n_queue_workers))
        load, placed = self.queues.load, placed or {}
        return min(range(n), key=lambda w: load[(home, w)] + placed.get(w, 0))

    def _start_queue(self, q: dict, recovered: bool) -> None:
        """Only the queue's home node starts it, on its own queue worker (never while the node
        is paused: it starts what the log says once it resumes)."""
        if q.get("home", self.me) != self.me or self.paused or q.get("electing") or \
                q.get("crashed"):
            # (electing: a quorum queue whose leader the cluster leader is choosing; crashed:
            # its queue worker gave up restarting it, it stays down until deleted)
            return
        w = self.workers.get(("queue", q["worker"]))
        key = (q["vhost"], q["name"])
        if w is None or key in self.starting:
            return  # started when the worker says hello
        self.starting.add(key)
        qdef = {k: v for k, v in q.items() if k != "address"}
        self.transport.send(w.control, m.StartQueue(qdef, self.address, recovered))

    def _queue_started(self, msg: m.QueueStarted) -> None:
        key = (msg.vhost, msg.name)
        self.starting.discard(key)
        if self.paused:
            return  # it was stopped with the others; it starts again once the node resumes
        if not self.leading:
            self._recovered(key)  # this node's boot waits for its own queues only
            self._forward(msg, time.monotonic() + 10)
            return
        q = self.queues.get(key)
        if q is None:
            return
        home = q.get("home", self.me)
        if home != self.me and not self.members.get(home, {}).get("up"):
            # news from a node the log lists as down (late over a healed link): its queues
            # stopped when it paused; it starts them again once it has rejoined
            log.info("cluster: ignoring queue '%s' in vhost '%s' started on %s, which is down",
                     msg.name, msg.vhost, self._member_name(home))
            return
        if msg.error:
            # the queue cannot run (its storage is full): the declarers hear it, it is gone
            text = amqp_text(506, f"queue '{msg.name}' in vhost '{msg.vhost}' could not "
                                  f"start: {msg.error}")
            for reply_to, req_id, _ in self.pending_start.pop(key, []):
                self._send_reply(reply_to, m.RpcReply(req_id, False, None, 506, text))
            self._change(["router", "remove_queue", [msg.vhost, msg.name]],
                         ["queue_del", msg.vhost, msg.name])
            self._recovered(key)
            return
        self._change(["queue_put", dict(q, address=msg.address)])
        for reply_to, req_id, result in self.pending_start.pop(key, []):
            # a new queue is empty; one that existed is asked for its count (None)
            result = {"queue_at": msg.address} if result is None else result
            self._send_reply(reply_to, m.RpcReply(req_id, True, result))
        self._recovered(key)

    def _recovered(self, key) -> None:
        if key in self.recovering:
            self.recovering.discard(key)
            if not self.recovering:
                log.info("durable queues recovered")
                hellos, self.deferred_hellos = self.deferred_hellos, []
                for rpc, kind, index, endpoint, control in hellos:
                    self.op_worker_hello(rpc, kind, index, endpoint, control)

