"""The node's metadata actor: sole writer of vhosts, users, permissions, exchanges, queues and
bindings.

Mirrors what rabbit_exchange, rabbit_amqqueue (declare/delete), rabbit_binding, rabbit_vhost and
rabbit_auth_backend_internal do against mnesia in RabbitMQ. Owns:
- the authoritative Router, AuthDB and queue table (actors/replica.py's shapes);
- placement of queues on queue workers;
- durable definitions in LMDB (actors/node/definitions.py);
- broadcasting every change, in order, to every live worker.

Operations arrive as `Rpc(reply_to, req_id, op, args)`; the reply is `RpcReply` to reply_to.
Replies that need a queue's own answer (declare of an existing queue, delete) are forwarded to the
queue actor, which answers the asker directly or through the node.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass

import pykka

from actors import events, faults
from actors import messages as m
from actors.messages import (ClusterEntry, ClusterReady, ClusterTick, CommitFailed, DurableQueues,
                             ReadyWorkers, StatsTimeout, WorkerExited)
from actors.core import limits, policies, queue_args, quorum, stream, stream_replication
from actors.core.errors import ChannelError, ConnectionError_, amqp_text
from actors.core.permissions import AuthDB, hashed_auth_call
from actors.core.queue_stats import StatsTable
from actors.core.samples import Sample, Sampled
from actors.core.routing import (INTERNAL_USER, Router, check_exchange_deletion,
                                 check_exchange_type, validate_binding)
from actors.node import definitions_json
from actors.node.definitions import Definitions
from actors.node.metadata_alarms import AlarmsMixin
from actors.node.metadata_limits import LimitsMixin
from actors.node.metadata_management import ManagementMixin
from actors.node.metadata_shovels import ShovelsMixin
from actors.node.node_stats import NodeTable
from actors.node.metadata_cluster import ClusterMixin
from actors.node.queue_table import QueueTable
from actors.replica import apply_change, parameters_of, state_lists
from actors.runtime import LightActor
from actors.shovel import params as shovel_params

log = logging.getLogger(__name__)



@dataclass
class Worker:
    kind: str  # "conn" or "queue"
    index: int  # slot number, stable across restarts
    endpoint: str  # current incarnation's ZeroMQ endpoint
    control: str  # address of the worker's control actor
    ready: bool = False  # a connection worker is listening


class Metadata(AlarmsMixin, ClusterMixin, ManagementMixin, LimitsMixin, ShovelsMixin,
               LightActor):
    scheduler_name = "node"  # embedded in the node's event loop with its transport

    def __init__(self, transport, config, resources=None, secret: bytes = b"",
                 paused: threading.Event | None = None):
        super().__init__()
        # set while the node is paused (cluster, pause_minority): the node does not listen
        self.paused_flag = paused if paused is not None else threading.Event()
        self.resources = resources  # the node's ResourceMonitor: memory and disk alarms
        self.secret = secret  # the cluster secret (a cluster member's; actors/secure.py)
        data_dir, queue_workers = config.data_dir, config.queue_workers
        self.transport = transport  # this process's Transport
        self.address = transport.address("metadata")  # where workers send Rpc
        self.router = Router()  # authoritative exchanges and bindings
        self.auth = AuthDB.default()  # authoritative users, vhosts, permissions
        self.queues = QueueTable()  # (vhost, name) -> qdef, counted per (home, worker)
        self.policies: dict[tuple[str, str], dict] = {}  # (vhost, policy name) -> policy
        self.op_policies: dict[tuple[str, str], dict] = {}  # (vhost, name) -> operator policy
        self.limits: dict[tuple[str, str], dict] = {}  # ("vhost"|"user", name) -> limits
        # (vhost, component, name) -> value: runtime parameters kept as given (shovels)
        self.parameters: dict[tuple[str, str, str], dict] = {}
        self.defs = Definitions(os.path.join(data_dir, "definitions"))  # durable store
        self.n_queue_workers = queue_workers  # number of queue worker slots
        self.workers: dict[tuple[str, int], Worker] = {}  # live workers by (kind, index)
        self.pending_start: dict[tuple[str, str], list] = {}  # queue -> [(reply_to, req_id, result)]
        self.pending_ops: dict[int, tuple] = {}  # node req id -> (reply_to, req_id, vhost, name)
        self.next_req = 1  # node's own request ids (to queues)
        self.pending_stats: dict[int, tuple] = {}  # node req id -> (list_queues gather, queue)
        # node req id -> the rpc of leveretctl purge_queue, sync_queue, cancel_sync_queue,
        # census (a vhost's census: one _Gather for all its queues)
        self.pending_asks: dict[int, m.Rpc | _Gather] = {}
        # the management API's statistics: what queues emit (actors/core/queue_stats.py)
        self.queue_stats = StatsTable(config.collect_statistics_interval)
        # every member's last two samples of its own figures (/api/nodes: NodeStats)
        self.node_table = NodeTable(config.collect_statistics_interval)
        self.started = time.monotonic()  # when this node's metadata actor started (uptime)
        self.meta_tx = {"disk": 0, "ram": 0}  # change batches applied (see _apply_changes)
        # the node's syncs (io_sync_count, io_sync_time_us) at its previous sample, for
        # io_sync_avg_time over one interval
        self.io_sync_seen: tuple | None = None
        self.conn_stats: dict[str, list] = {}  # connection worker endpoint -> its connections
        # connection worker endpoint -> its last two samples of connection rows: the rates
        # of recv_oct, send_oct and the channels' message_stats come from the two
        self.conn_sampled: dict[str, Sampled] = {}
        self.worker_totals: dict[str, dict] = {}  # conn worker endpoint -> its process totals
        self.dead_totals: dict = {}  # the last totals of connection workers that died
        # the management API's cluster-wide counts: every worker's previous totals
        # (endpoint -> Sample of its totals) for their rates, and every dead worker's last totals
        self.prev_totals: dict[str, Sample] = {}
        self.dead_all: dict = {}
        # Samples of queue_churn, at most one per interval, for the churn rates
        self.churn_snaps: list[Sample] = []
        # counts of exchanges and vhosts deleted (path -> count then): a new one of the same
        # name starts from 0, as RabbitMQ drops an exchange's statistics with it
        self.counts_base: dict[tuple, int] = {}
        # queue churn of the declares and deletes this node's metadata actor decided
        self.queue_churn = {"queues_declared": 0, "queues_created": 0, "queues_deleted": 0}
        self.version = 0  # metadata version: +1 per broadcast change
        self.applied: dict[tuple[str, int], int] = {}  # live worker -> version it has applied
        self.held: deque = deque()  # (version, reply_to, RpcReply) waiting for the workers
        self.recovering: set = set()  # durable queues not yet started after boot
        self.deferred_hellos: list = []  # connection workers waiting for recovery to finish
        self.had_bindings: set = set()  # auto-delete exchanges that have had a binding
        self.members: dict = {}  # cluster members (actors/node/metadata_cluster.py); empty alone
        self._limits_init()
        self._cluster_init(config)
        self._shovels_init(config)

    # --- start-up -------------------------------------------------------------------------------
    def on_start(self) -> None:
        self.transport.register("metadata", self.actor_ref)
        if self.config.clustered:
            self._cluster_start()  # the state comes from the log once it is caught up
            return
        stored = self.defs.load()
        if stored.get("auth"):
            self.auth = AuthDB.from_state(stored["auth"])
        for vhost in self.auth.list_vhosts():
            self.router.add_vhost(vhost)
        for x in stored.get("exchanges", []):
            self.router.declare_exchange(*x)
        for q in stored.get("queues", []):
            q = dict(q, address=None, worker=self._place())
            q.pop("crashed", None)  # (a node's restart starts a queue given up on again)
            self.queues[(q["vhost"], q["name"])] = q
            self.router.add_queue(q["vhost"], q["name"])
        for b in stored.get("bindings", []):
            if self._binding_durable(b):
                self.router.bind(*b)
        for p in stored.get("policies", []):
            if p["vhost"] in self.auth.list_vhosts():
                self.policies[(p["vhost"], p["name"])] = p
        for p in stored.get("op_policies", []):
            if p["vhost"] in self.auth.list_vhosts():
                self.op_policies[(p["vhost"], p["name"])] = p
        for x in stored.get("limits", []):
            self.limits[(x["scope"], x["name"])] = x["value"]
        self.parameters = {k: v for k, v in parameters_of(stored).items()
                           if k[0] in self.auth.list_vhosts()}
        self._persist()
        self._sync_shovels()
        # RabbitMQ's boot recovers durable queues before it starts its listeners: connection
        # workers get their snapshot (and start listening) once every recovered queue is up
        self.recovering = {key for key in self.queues}

    # --- message dispatch -------------------------------------------------------------------------
    def on_stop(self) -> None:
        self.shovels.stop_all()
        if self.cluster is not None:
            self.cluster.close()

    def on_receive(self, msg):
        # no catch-all: an exception here ends the actor as it is, and the node, its
        # supervisor, stops (systemd restarts it from the definitions on disk or the Raft
        # log) rather than serving from state a handler left half-applied
        faults.crash("metadata", "", "", msg, self.config.host)
        if isinstance(msg, ClusterEntry):
            self._cluster_entry(msg)
        elif isinstance(msg, ClusterTick):
            self._cluster_tick()
        elif isinstance(msg, ClusterReady):
            return self._cluster_load()
        elif isinstance(msg, CommitFailed):
            self._commit_failed(msg.epoch, msg.token)
        elif isinstance(msg, m.AlarmsChanged):
            self._alarms_changed(msg)
        elif isinstance(msg, m.NodeTick):
            self._node_tick(msg)
        elif isinstance(msg, m.NodeStats):
            self.node_table.put(msg.node, msg.at_ms, msg.stats)
        elif isinstance(msg, m.ShovelStates):
            self._shovel_states(msg)
        elif not self.loaded:
            if isinstance(msg, m.Rpc) and msg.reply_to:  # leveretctl before we joined
                self._send_local(msg.reply_to, m.RpcReply(msg.req_id, False, None, 541,
                                 amqp_text(541, "this node has not joined its cluster yet")))
        elif isinstance(msg, m.Rpc):
            self._rpc(msg)
        elif isinstance(msg, m.QueueStarted):
            self._queue_started(msg)
        elif isinstance(msg, m.QueueDown):  # (from the node that handled a crash)
            self._queue_down(msg)
        elif isinstance(msg, m.RpcReply):
            if self._relay(msg):
                pass
            elif msg.req_id in self.pending_stats:
                self._stats_reply(msg)
            else:
                self._queue_reply(msg)
        elif isinstance(msg, m.ConnectionStats):
            if not self.transport.is_dead(msg.worker):
                self._connection_sample(msg)
        elif isinstance(msg, m.WorkerStats):
            if not self.transport.is_dead(msg.worker):
                self.worker_totals[msg.worker] = msg.totals
        elif isinstance(msg, m.QueueStats):
            if (msg.vhost, msg.name) in self.queues:
                self.queue_stats.put(msg.vhost, msg.name, msg.at_ms, msg.stats)
        elif isinstance(msg, StatsTimeout):
            self._finish_stats(msg.gather)
        elif isinstance(msg, m.MetaApplied):
            self._meta_applied(msg)

        elif isinstance(msg, m.PeerApplied):
            self._peer_applied(msg)
        elif isinstance(msg, m.LogQuery):
            self._log_query(msg)
        elif isinstance(msg, m.LogPosition):
            self._log_position(msg)
        elif isinstance(msg, WorkerExited):
            self._worker_exited(msg)
        elif isinstance(msg, ReadyWorkers):
            return [k for k, w in self.workers.items() if w.ready]
        elif isinstance(msg, DurableQueues):
            # (a quorum queue's member keeps its log while it counts, down or not)
            return [(*key, q.get("arguments") or {}) for key, q in self.queues.items()
                    if q["durable"]
                    and self.me in (q.get("home", self.me), *(q.get("mirrors") or ()),
                                    *(q.get("logs") or ()))]

    def _rpc(self, rpc: m.Rpc) -> None:
        if rpc.op == "auth" and isinstance(rpc.args, dict):
            rpc = _hash_password(rpc)  # before it is forwarded, logged or committed
        if rpc.op == "connection.closed" and isinstance(rpc.args, dict):
            self._untrack(rpc.args.get("owner", ""))  # this node's count, before forwarding
        elif rpc.op == "definitions.import" and isinstance(rpc.args, dict):
            rpc = rpc._replace(args=dict(rpc.args, doc=definitions_json.hash_plain_passwords(
                rpc.args.get("doc"))))  # likewise
        if self._route_rpc(rpc):
            return
        self._remember_redo(rpc)
        handler = getattr(self, "op_" + rpc.op.replace(".", "_"), None)
        if handler is None:
            self._reply(rpc, False, None, 540, amqp_text(540, f"unknown operation {rpc.op}"))
            return
        args = {k: v for k, v in rpc.args.items() if k != "origin"}  # origin: for declare
        try:
            result = handler(rpc, **args)
        except (ChannelError, ConnectionError_) as e:
            self._reply(rpc, False, None, e.reply_code, e.text)
            return
        except TypeError as e:
            log.exception("bad rpc %s", rpc.op)
            self._reply(rpc, False, None, 541, amqp_text(541, f"bad request {rpc.op}: {e}"))
            return
        except Exception as e:  # noqa: BLE001 - the caller must never wait for a lost reply
            log.exception("rpc %s failed", rpc.op)
            self._reply(rpc, False, None, 541, amqp_text(541, f"{rpc.op} failed: {e!r}"))
            return
        if result is not _DEFERRED:
            self._reply(rpc, True, result)

    def _reply(self, rpc, ok, result=None, code=0, text=""):
        if not rpc.reply_to:
            return
        reply = m.RpcReply(rpc.req_id, ok, result, code, text)
        if rpc.op == "cluster.status":
            # a read of this node's own view: never held behind entries not yet committed (a
            # leader cut off from the majority must still say so, and that it is paused)
            self._send_local(rpc.reply_to, reply._replace(version=self.canonical))
        else:
            self._send_reply(rpc.reply_to, reply)

    def _send_reply(self, reply_to, reply) -> None:
        """In a cluster the leader answers once the changes are committed; then (everywhere)
        replies wait until every live worker has applied every change made so far."""
        if self._cluster_reply(reply_to, reply):
            return
        self._send_local(reply_to, reply._replace(version=self.canonical))

    def _send_local(self, reply_to, reply) -> None:
        self._answered(reply_to, reply)
        if self.held or any(v < self.version for v in self.applied.values()):
            self.held.append((self.version, reply_to, reply))
        else:
            self.transport.send(reply_to, reply)

    def _meta_applied(self, msg: m.MetaApplied) -> None:
        key = (msg.kind, msg.index)
        if key in self.workers:
            self.applied[key] = max(msg.version, self.applied.get(key, 0))
        self._release_replies()

    def _release_replies(self) -> None:
        low = min(self.applied.values(), default=self.version)
        while self.held and self.held[0][0] <= low:
            _, reply_to, reply = self.held.popleft()
            self.transport.send(reply_to, reply)

    # --- changes --------------------------------------------------------------------------------
    def _change(self, *changes) -> None:
        """Apply to the authoritative state, persist durable parts (alone) or commit them to
        the cluster's log, broadcast to every worker."""
        durable = self.cluster is None and self._touches_definitions(changes)  # before applying
        self._apply_changes(list(changes), ahead=self.cluster is not None)
        if self.cluster is None:
            if durable:
                self._persist()  # a synced rewrite: only when what is on disk changes
        else:
            self._cluster_submit(list(changes))

    def _apply_changes(self, changes, ahead: bool = False) -> None:
        """Apply changes here and on this node's workers; start what became ours to start.
        `ahead`: the cluster leader's own changes, applied before the log commits them: a
        mirror promoted here starts only once they are committed (`_start_on_commit`), as
        the leader may lose its leadership first and the log keep the old master."""
        start, gone = [], []
        # counted as RabbitMQ counts its mnesia transactions (/api/nodes): changes to the
        # durable definitions, and the others
        self.meta_tx["disk" if self._touches_definitions(changes) else "ram"] += 1
        for c in changes:
            if c[0] == "member_put":
                old = self.members.get(c[1])
                apply_change(self, c)
                self._member_changed(c[1], old, c[2])
                continue
            apply_change(self, c)
            if c[0] == "router" and c[1] in ("delete_exchange", "remove_vhost"):
                self._reset_counts(("vhosts", *c[2][:2]))
            if c[0] == "queue_put":
                start.append((c[1]["vhost"], c[1]["name"]))
            elif c[0] == "queue_del":
                gone.append((c[1], c[2]))
                self.queue_stats.forget(c[1], c[2])
        self.version += 1
        self._shovels_changed(changes)
        msg = m.MetaChange(list(changes), self.version)
        for w in self.workers.values():
            self.transport.send(w.control, msg)
        if not self.leading and self.pending_start:
            self._answer_waiting_declares(start, gone)
        for key in start:
            q = self.queues.get(key)
            if q is not None and q.get("address") is None:
                if ahead and q.get("promoted") and q.get("home", self.me) == self.me:
                    self._start_on_commit(key)
                else:
                    self._start_queue(q, recovered=q["durable"])
            if q is not None:
                self._start_mirrors(q)

    def _answer_waiting_declares(self, put, gone) -> None:
        """A follower answers passive declares itself (`_route_rpc`); those that waited for
        their queue to start (its home restarting) are answered here as the leader's entries
        arrive: once the queue runs (the channel asks it for its count), is gone, or its home
        is down again. (The leader answers its own in `_queue_started`.)"""
        for key in put:
            waiters = self.pending_start.get(key)
            q = self.queues.get(key)
            if not waiters or q is None:
                continue
            if q.get("address"):
                reply = m.RpcReply(0, True, {"queue_at": q["address"]})
            else:
                try:
                    self._check_home_up(q)
                    continue  # it is starting: wait on
                except ChannelError as e:
                    reply = m.RpcReply(0, False, None, e.reply_code, e.text)
            for reply_to, req_id, _ in self.pending_start.pop(key):
                self._send_local(reply_to, reply._replace(req_id=req_id))
        for vhost, name in gone:
            text = amqp_text(404, f"no queue '{name}' in vhost '{vhost}'")
            for reply_to, req_id, _ in self.pending_start.pop((vhost, name), []):
                self._send_local(reply_to, m.RpcReply(req_id, False, None, 404, text))

    def _touches_definitions(self, changes) -> bool:
        """Would these changes alter what _persist writes? Transient queues coming and going,
        and a queue's address or worker (where it runs now), do not: 10,000 transient declares
        must not mean 20,000 synced rewrites of the definitions."""
        for c in changes:
            kind = c[0]
            if kind == "queue_put":
                q = c[1]
                if _stored_queue(q) != _stored_queue(self.queues.get((q["vhost"], q["name"]))):
                    return True
            elif kind == "queue_del":
                if _stored_queue(self.queues.get((c[1], c[2]))) is not None:
                    return True
            elif kind == "router" and c[1] in ("add_queue", "remove_queue"):
                continue  # its queue_put / queue_del decides (bindings of a stored queue go
                #           with its queue_del)
            elif kind == "router" and c[1] in ("bind", "unbind"):
                if self._binding_durable(c[2]):
                    return True
            elif kind == "member_put":
                continue  # cluster membership lives in the Raft log
            else:
                return True  # exchanges, users, vhosts, permissions, policies
        return False

    def _durable_state(self) -> dict:
        """What survives a restart: what _persist writes to the definitions store."""
        exchanges, bindings = [], []
        for (vhost, name), x in self._all_exchanges():
            if x.durable and not name.startswith("amq.") and name != "":
                exchanges.append([vhost, name, x.type, x.durable, x.auto_delete, x.internal,
                                  dict(x.arguments), x.user])
        for b in self._all_bindings():
            bindings.append(b)
        queues = [s for s in map(_stored_queue, self.queues.values()) if s is not None]
        return {"auth": self.auth.to_state(), "exchanges": exchanges,
                "policies": list(self.policies.values()), **state_lists(self),
                "bindings": [b for b in bindings if self._binding_durable(b)],
                "queues": queues}

    def _persist(self) -> None:
        self.defs.save(self._durable_state())

    def _all_exchanges(self):
        for vhost in self.auth.list_vhosts():
            for name, x in self.router.exchanges(vhost).items():
                yield (vhost, name), x

    def _all_bindings(self):
        for vhost in self.auth.list_vhosts():
            for b in self.router.list_bindings(vhost):
                yield [vhost, b.source, b.dest_kind, b.dest, b.routing_key, dict(b.arguments)]

    def _binding_durable(self, b) -> bool:
        vhost, source, kind, dest = b[0], b[1], b[2], b[3]
        src = self.router.exchange(vhost, source)
        if src is None or not src.durable:
            return False
        if kind == "queue":
            q = self.queues.get((vhost, dest))
            return bool(q and q["durable"])
        dst = self.router.exchange(vhost, dest)
        return bool(dst and dst.durable)

    def snapshot(self) -> dict:
        return {"router": self.router.to_state(), "auth": self.auth.to_state(),
                "queues": list(self.queues.values()),
                "policies": list(self.policies.values()), **state_lists(self),
                "members": self.members}

    # --- workers --------------------------------------------------------------------------------
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
            self._leader_op("cluster.worker_up", {"member": self.me, "slot": f"{kind}-{index}",
                                                  "endpoint": endpoint})
        return {"ok": True}

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
            self._leader_op("cluster.worker_down", {"member": self.me, "kind": ev.kind,
                                                    "index": ev.index, "endpoint": ev.endpoint})
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

    # --- vhosts, users, permissions (leveretctl) -----------------------------------------------
    def op_auth(self, rpc, method, args):
        # add_user / change_password arrive as their hashed forms (`_hash_password`)
        allowed = {"add_user_with_hash", "delete_user", "change_password_hash", "set_user_tags",
                   "add_vhost", "delete_vhost", "set_permissions", "clear_permissions",
                   "set_topic_permissions", "clear_topic_permissions"}
        if method not in allowed:
            raise ChannelError(540, amqp_text(540, f"unknown auth method {method}"))
        probe = AuthDB.from_state(self.auth.to_state())
        try:
            getattr(probe, method)(*args)
        except (KeyError, ValueError) as e:
            raise ChannelError(404, amqp_text(404, str(e).strip("'\"")))
        changes = [["auth", method, list(args)]]
        if method == "add_vhost":
            changes.append(["router", "add_vhost", [args[0]]])
        elif method == "delete_vhost":
            for (vhost, name) in list(self.queues):
                if vhost == args[0]:
                    self._delete_queue(vhost, name, None, 0, reason="vhost_deleted")
            changes.append(["router", "remove_vhost", [args[0]]])
            changes.extend(["policy_del", v, n] for (v, n) in self.policies if v == args[0])
            changes.extend(["op_policy_del", v, n] for (v, n) in self.op_policies
                           if v == args[0])
            if ("vhost", args[0]) in self.limits:
                changes.append(["limits_del", "vhost", args[0]])
            changes.extend(["param_del", *key] for key in self.parameters if key[0] == args[0])
        elif method == "delete_user" and ("user", args[0]) in self.limits:
            changes.append(["limits_del", "user", args[0]])
        self._change(*changes)
        return None

    def op_policy(self, rpc, method, vhost, name, pattern="", definition=None, priority=0,
                  apply_to="all", operator=False):
        """rabbitmqctl set_policy / clear_policy (set_operator_policy / clear_operator_policy
        with ``operator``)."""
        if vhost not in self.auth.list_vhosts():
            raise ChannelError(404, amqp_text(404, f"no vhost '{vhost}'"))
        table, put, delete = ((self.op_policies, "op_policy_put", "op_policy_del") if operator
                              else (self.policies, "policy_put", "policy_del"))
        if method == "set":
            policies.validate(name, pattern, definition, priority, apply_to, operator)
            self._change([put, vhost, name, {
                "vhost": vhost, "name": name, "pattern": pattern, "definition": definition,
                "priority": priority, "apply_to": apply_to}])
            self._remirror()
        elif (vhost, name) in table:
            self._change([delete, vhost, name])
            self._remirror()
        else:
            kind = "operator policy" if operator else "policy"
            raise ChannelError(404, amqp_text(404, f"no {kind} '{name}' in vhost '{vhost}'"))
        return None

    def op_limits(self, rpc, method, scope, name, value=None):
        """rabbitmqctl set_vhost_limits / clear_vhost_limits / set_user_limits /
        clear_user_limits (rabbit_vhost_limit, rabbit_auth_backend_internal's user limits)."""
        if scope == "vhost":
            if name not in self.auth.list_vhosts():
                raise ChannelError(404, amqp_text(404, f"no vhost '{name}'"))
        elif scope == "user":
            if not self.auth.user_exists(name):
                raise ChannelError(404, amqp_text(404, f"no user '{name}'"))
        else:
            raise ChannelError(406, f"unknown limits scope {scope!r}")
        if method == "set":
            value = limits.validate(scope, value)
            self._change(["limits_put", scope, name, value])
        elif method == "clear":
            if (scope, name) in self.limits:
                self._change(["limits_del", scope, name])
        else:
            raise ChannelError(406, f"unknown limits method {method!r}")
        return None

    def op_parameter(self, rpc, method, vhost, component, name, value=None):
        """rabbitmqctl set_parameter / clear_parameter (rabbit_runtime_parameters:set/5,
        clear/4) of the components kept as runtime parameters (`shovel`)."""
        if component not in shovel_params.COMPONENTS:
            raise ChannelError(406, shovel_params.unknown_component(component))
        if vhost not in self.auth.list_vhosts():
            raise ChannelError(404, amqp_text(404, f"no vhost '{vhost}'"))
        if method == "set":
            shovel_params.validate(name, value)
            self._change(["param_put", vhost, component, name, value])
        elif method == "clear":
            if (vhost, component, name) not in self.parameters:
                raise ChannelError(404, "Parameter does not exist")
            self._change(["param_del", vhost, component, name])
        else:
            raise ChannelError(406, f"unknown parameter method {method!r}")
        return None

    # --- definitions export / import (rabbitmqctl export_definitions, import_definitions) ----
    def op_definitions_export(self, rpc):
        return definitions_json.export(self._definitions_state())

    def _definitions_state(self) -> dict:
        """definitions_json's state: every queue, exchange and explicit binding, durable or
        not (RabbitMQ's export lists them all; exclusive queues are left out by the export)."""
        exchanges = [[v, n, x.type, x.durable, x.auto_delete, x.internal, dict(x.arguments)]
                     for (v, n), x in self._all_exchanges() if n and not n.startswith("amq.")]
        return {"auth": self.auth.to_state(), "policies": list(self.policies.values()),
                "op_policies": list(self.op_policies.values()),
                "limits": [[scope, name, value] for (scope, name), value in self.limits.items()],
                "parameters": [[v, c, n, value] for (v, c, n), value in self.parameters.items()],
                "exchanges": exchanges, "bindings": list(self._all_bindings()),
                "queues": [{k: v for k, v in q.items() if k not in ("address", "worker")}
                           for q in self.queues.values()]}

    def op_definitions_import(self, rpc, doc, content_hash=None, skip_if_unchanged=False):
        """Every object of a RabbitMQ definitions document as one change (one Raft entry in a
        cluster), or none of them: a refusal lists every object that failed validation.
        ``content_hash``: remembered (the boot-time load_definitions file's hash) so that an
        unchanged file is skipped next boot when ``skip_if_unchanged``."""
        if skip_if_unchanged and content_hash and content_hash == self.defs.load_hash():
            log.info("definitions unchanged (hash %s): import skipped", content_hash)
            return {"skipped": True, "warnings": [], "changes": 0}
        plan = definitions_json.plan_import(doc, self._definitions_state())
        for w in plan.warnings:
            log.warning("definitions import: %s", w)
        if plan.errors:
            for e in plan.errors:
                log.error("definitions import: %s", e)
            raise ChannelError(406, amqp_text(406, "definitions import failed: " +
                                              "; ".join(plan.errors)))
        changes, placed = [], {}  # placed: worker -> queues placed on it here
        for c in plan.changes:
            if c[0] != "queue_new":
                changes.append(c)
                continue
            q = dict(c[1], exclusive="", address=None, home=self.me, mirrors=[], synced=[])
            q["worker"] = self._place(self.me, placed)
            placed[q["worker"]] = placed.get(q["worker"], 0) + 1
            q["mirrors"] = self._mirrors_for(q)
            changes += [["router", "add_queue", [q["vhost"], q["name"]]], ["queue_put", q]]
        if not self.workers:  # at boot (load_definitions): listen once its queues run too
            self.recovering.update((c[1]["vhost"], c[1]["name"]) for c in changes
                                   if c[0] == "queue_put")
        if changes:
            self._change(*changes)
            if any(c[0] in ("policy_put", "op_policy_put") for c in changes):
                self._remirror()
        if content_hash:
            self.defs.save_hash(content_hash)
        return {"skipped": False, "warnings": plan.warnings, "changes": len(changes)}

    def op_list(self, rpc, what, vhost=None, user=None):
        if what == "topic_permissions":
            return self.auth.list_topic_permissions(vhost, user)
        if what == "users":
            return self.auth.to_state().get("users")
        if what == "vhosts":
            return self.auth.list_vhosts()
        if what == "queues":
            return self._list_queues(rpc)
        if what == "policies":
            return list(self.policies.values())
        if what == "operator_policies":
            return list(self.op_policies.values())
        if what == "parameters":
            return [{"vhost": v, "component": c, "name": n, "value": value}
                    for (v, c, n), value in sorted(self.parameters.items())
                    if vhost in (None, v)]
        if what in ("vhost_limits", "user_limits"):
            scope = what[:-7]
            return [{scope: n, "limits": v} for (s, n), v in sorted(self.limits.items())
                    if s == scope and (what == "user_limits" or vhost in (None, n))]
        if what == "exchanges":
            return [[v, n, x.type] for (v, n), x in self._all_exchanges()]
        if what == "bindings":
            return list(self._all_bindings())
        return None

    def _list_queues(self, rpc):
        """Queue definitions plus each live queue's counts (asked of the queue; a queue that does
        not answer within STATS_TIMEOUT_S is listed without counts)."""
        rows = {}
        for (vhost, name), q in self.queues.items():
            rows[(vhost, name)] = {
                "vhost": vhost, "name": name, "durable": q["durable"],
                "auto_delete": q["auto_delete"], "exclusive": bool(q["exclusive"]),
                "arguments": q["arguments"], "worker": q.get("worker"),
                "node": self._member_name(q.get("home")),
                "mirrors": [self._member_name(x) for x in q.get("mirrors") or []],
                "synchronised_mirrors": [self._member_name(x) for x in q.get("synced") or []]}
        gather = {"rpc": rpc, "rows": rows, "waiting": set()}
        for key, q in self.queues.items():
            if q.get("address"):
                req = self.next_req
                self.next_req += 1
                gather["waiting"].add(req)
                self.pending_stats[req] = (gather, key)
                self.transport.send(q["address"], m.QueueOp(self.address, req, "stats", {}))
        if not gather["waiting"]:
            return list(rows.values())
        timer = threading.Timer(STATS_TIMEOUT_S, self._stats_timeout, (gather,))
        timer.daemon = True  # never keeps a stopping node alive
        gather["timer"] = timer
        timer.start()
        return _DEFERRED

    def _stats_reply(self, reply: m.RpcReply) -> None:
        gather, key = self.pending_stats.pop(reply.req_id)
        gather["waiting"].discard(reply.req_id)
        if reply.ok and isinstance(reply.result, dict):
            gather["rows"][key].update(reply.result)
        if not gather["waiting"]:
            self._finish_stats(gather)

    def _stats_timeout(self, gather) -> None:
        try:
            self.actor_ref.tell(StatsTimeout(gather))
        except pykka.ActorDeadError:
            pass  # the node is stopping

    def _finish_stats(self, gather) -> None:
        if gather["rpc"] is None:
            return  # answered already (time-out)
        if gather.get("timer") is not None:
            gather["timer"].cancel()
        for req in gather["waiting"]:
            self.pending_stats.pop(req, None)
        self._reply(gather["rpc"], True, list(gather["rows"].values()))
        gather["rpc"] = None

    # --- exchanges --------------------------------------------------------------------------------
    def op_exchange_declare(self, rpc, vhost, name, type, passive, durable, auto_delete,
                            internal, arguments, user=None):
        x = self.router.exchange(vhost, name)
        if passive:
            if x is None:
                raise ChannelError(404, amqp_text(404, f"no exchange '{name}' in vhost '{vhost}'"))
            return None
        if name.startswith("amq.") and x is None:
            raise ChannelError(403, amqp_text(
                403, f"exchange name '{name}' contains reserved prefix 'amq.*'"))
        check_exchange_type(type)
        if x is not None:
            queue_args.assert_exchange_equivalent(
                x, dict(type=type, durable=durable, auto_delete=auto_delete, internal=internal,
                        arguments=arguments), name, vhost)
            return None
        if user is not None:  # a client's declare (the channel checked configure): the AE
            self.auth.check_new_exchange(user, vhost, name, arguments)
        self._change(["router", "declare_exchange",
                      [vhost, name, type, durable, auto_delete, internal, arguments,
                       user or INTERNAL_USER]])
        return None

    def op_exchange_delete(self, rpc, vhost, name, if_unused):
        check_exchange_deletion(vhost, name)
        if self.router.exchange(vhost, name) is None:
            return None
        if if_unused and self.router.has_bindings_from(vhost, name):
            raise ChannelError(406, amqp_text(
                406, f"exchange '{name}' in vhost '{vhost}' in use"))
        self._change(["router", "delete_exchange", [vhost, name]])
        self._auto_delete_exchanges(vhost)
        return None

    def _auto_delete_exchanges(self, vhost) -> None:
        """RabbitMQ deletes an auto-delete exchange once its last binding as source is gone."""
        while True:
            victims = [n for n, x in self.router.exchanges(vhost).items()
                       if x.auto_delete and (vhost, n) in self.had_bindings
                       and not self.router.has_bindings_from(vhost, n)]
            if not victims:
                return
            for n in victims:
                self.had_bindings.discard((vhost, n))
                self._change(["router", "delete_exchange", [vhost, n]])

    def _binding_ends(self, vhost, source, kind, dest):
        if self.router.exchange(vhost, source) is None:
            raise ChannelError(404, amqp_text(404, f"no exchange '{source}' in vhost '{vhost}'"))
        if kind == "queue":
            if (vhost, dest) not in self.queues:
                raise ChannelError(404, amqp_text(404, f"no queue '{dest}' in vhost '{vhost}'"))
        elif self.router.exchange(vhost, dest) is None:
            raise ChannelError(404, amqp_text(404, f"no exchange '{dest}' in vhost '{vhost}'"))
        if source == "" or (kind == "exchange" and dest == ""):
            raise ChannelError(403, amqp_text(403, "operation not permitted on the default "
                                                   "exchange"))

    def op_bind(self, rpc, vhost, source, kind, dest, routing_key, arguments, owner=""):
        self._binding_ends(vhost, source, kind, dest)
        self._check_exclusive(vhost, dest, owner, kind)
        # rabbit_binding:add -> the source type's validate_binding (headers: x-match)
        validate_binding(self.router.exchange(vhost, source).type, arguments)
        self.had_bindings.add((vhost, source))
        self._change(["router", "bind", [vhost, source, kind, dest, routing_key, arguments]])
        return None

    def op_unbind(self, rpc, vhost, source, kind, dest, routing_key, arguments, owner=""):
        if source == "" or (kind == "exchange" and dest == ""):
            raise ChannelError(403, amqp_text(403, "operation not permitted on the default "
                                                   "exchange"))
        # RabbitMQ 3.10 answers unbind-ok when the binding, its queue or an exchange is missing
        # (rabbit_binding:remove/3 of a binding that does not exist is ok)
        if self.router.exchange(vhost, source) is None or \
                (kind == "queue" and (vhost, dest) not in self.queues) or \
                (kind == "exchange" and self.router.exchange(vhost, dest) is None):
            return None
        # rabbit_channel:binding_action checks exclusive access for unbind as for bind
        self._check_exclusive(vhost, dest, owner, kind)
        self._change(["router", "unbind", [vhost, source, kind, dest, routing_key, arguments]])
        self._auto_delete_exchanges(vhost)
        return None

    def _check_exclusive(self, vhost, name, owner, kind="queue"):
        if kind != "queue":
            return
        q = self.queues.get((vhost, name))
        if q and q["exclusive"] and q["exclusive"] != owner:
            raise ChannelError(405, amqp_text(405, locked_text(name, vhost)))

    # --- queues -----------------------------------------------------------------------------------
    def op_queue_declare(self, rpc, vhost, name, passive, durable, exclusive, auto_delete,
                         arguments, owner, user=None):
        generated = name == "" and not passive
        if generated:
            name = "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
            if user is not None:  # the channel checked configure on any other name
                self.auth.require(user, vhost, "configure", "queue", name)
        key = (vhost, name)
        q = self.queues.get(key)
        if not passive:
            self.queue_churn["queues_declared"] += 1
        if q is not None:
            self._check_exclusive(vhost, name, owner)
            if q.get("crashed"):  # (rabbit_amqqueue:priv_absent of a crashed queue)
                raise ChannelError(404, amqp_text(404, f"queue '{name}' in vhost '{vhost}' "
                                                       "has crashed and failed to restart"))
            if not passive:
                queue_args.assert_flags_equivalent(
                    {"durable": q["durable"], "exclusive": bool(q["exclusive"]),
                     "auto_delete": q["auto_delete"]},
                    {"durable": durable, "exclusive": exclusive, "auto_delete": auto_delete},
                    name, vhost)
                queue_args.assert_equivalent(q["arguments"], arguments, name, vhost)
            if q.get("address") is None:
                self._check_home_up(q)
                # it holds what it recovered: the declarer asks it for its count once it runs
                self.pending_start.setdefault(key, []).append((rpc.reply_to, rpc.req_id, None))
                return _DEFERRED
            # the channel asks the queue itself, so that the count it gets comes after every
            # message it sent the queue before (Erlang's per-pair ordering, which
            # rabbit_channel's stat call relies on)
            return {"queue_at": q["address"]}
        if passive:
            raise ChannelError(404, amqp_text(404, f"no queue '{name}' in vhost '{vhost}'"))
        if name.startswith("amq.") and not generated:
            raise ChannelError(403, amqp_text(
                403, f"queue name '{name}' contains reserved prefix 'amq.*'"))
        if user is not None:  # a client's declare (the channel checked configure): the DLX
            self.auth.check_new_queue(user, vhost, name, arguments)
        queue_args.validate(arguments, name, vhost, {"durable": durable, "exclusive": exclusive,
                                                     "auto_delete": auto_delete})
        # rabbit_queue_type:declare's check_vhost_queue_limit: the definitions are the cluster's
        vlimits = self.limits.get(("vhost", vhost))
        if vlimits:
            limits.check_queue_limit(vlimits, sum(1 for (v, _) in self.queues if v == vhost),
                                     name, vhost)
        home = rpc.args.get("origin") or self.me  # the declaring client's node, as RabbitMQ
        q = {"vhost": vhost, "name": name, "durable": bool(durable),
             "exclusive": owner if exclusive else "", "auto_delete": bool(auto_delete),
             "arguments": arguments, "worker": self._place(home), "address": None,
             "home": home, "mirrors": [], "synced": []}
        if self.cluster is not None and stream.is_stream(arguments):
            # "initial": the members a stream is declared with stay its members' count
            q["stream_size"] = stream_replication.cluster_size(
                arguments, len(self.config.cluster_nodes), policies.effective(
                    self.policies, vhost, name, "queues", self.op_policies))
        q["mirrors"] = self._mirrors_for(q)
        self.queue_churn["queues_created"] += 1
        self.pending_start.setdefault(key, []).append((rpc.reply_to, rpc.req_id, [name, 0, 0]))
        self._change(["router", "add_queue", [vhost, name]], ["queue_put", q])  # starts it
        return _DEFERRED

    def _check_home_up(self, q) -> None:
        """A queue whose home node is down cannot be used (RabbitMQ's 404 for it)."""
        home = q.get("home")
        if home and home != self.me and not self.members.get(home, {}).get("up"):
            node = self.members.get(home, {}).get("name", home)
            raise ChannelError(404, amqp_text(
                404, f"home node '{node}' of durable queue '{q['name']}' in vhost "
                     f"'{q['vhost']}' is down or inaccessible"))

    def op_queue_delete(self, rpc, vhost, name, if_unused=False, if_empty=False, owner=""):
        q = self.queues.get((vhost, name))
        if q is None:
            return 0
        self._check_exclusive(vhost, name, owner)
        if quorum.is_quorum(q["arguments"]):
            quorum.check_delete(if_unused, if_empty, name, vhost)
        self._delete_queue(vhost, name, rpc, 0, if_unused=if_unused, if_empty=if_empty)
        return _DEFERRED

    def op_queue_delete_self(self, rpc, vhost, name, reason=""):
        """A queue asks to be deleted: auto-delete, x-expires, exclusive owner gone."""
        if (vhost, name) in self.queues:
            log.info("deleting queue '%s' in vhost '%s': %s", name, vhost, reason)
            # the event log's reason: "x-expires", "auto-delete" (the text before the colon)
            self._delete_queue(vhost, name, None, 0, reason=reason.partition(":")[0] or "self")
        return None

    def op_queue_crashed(self, rpc, vhost, name, address, gave_up):
        """A queue worker's supervisor saw a queue crash (actors/queue/host.py): every channel
        of the cluster hears QueueDown (nacks, basic.cancel); a queue it gave up on is marked
        crashed (declares get 404, the management API says "crashed") until it is deleted."""
        self._queue_down(m.QueueDown(address, vhost, name))
        for info in self.members.values():
            if info.get("up") and info.get("metadata") and info.get("metadata") != self.address:
                self.transport.send(info["metadata"], m.QueueDown(address, vhost, name))
        q = self.queues.get((vhost, name))
        if gave_up and q is not None and q.get("address") in (address, None):
            self._change(["queue_put", dict(q, address=None, crashed=True)])
        return None

    def _queue_down(self, down: m.QueueDown) -> None:
        """To every connection worker of this node (their channels)."""
        for (kind, _), w in self.workers.items():
            if kind == "conn":
                self.transport.send(w.control, down)

    def op_connection_closed(self, rpc, owner):
        for q in list(self.queues.values()):
            if q["exclusive"] == owner:
                self._delete_queue(q["vhost"], q["name"], None, 0, reason="exclusive")
        return None

    def _delete_queue(self, vhost, name, rpc, _unused, if_unused=False, if_empty=False,
                      reason="delete"):
        q = self.queues[(vhost, name)]
        req = self.next_req
        self.next_req += 1
        self.pending_ops[req] = (rpc, vhost, name)
        if q.get("address") is None:
            if events.enabled():  # no queue process to say it: the copies it kept on disk go
                events.emit("queue_deleted", None, actor="node", vhost=vhost, queue=name,
                            reason=reason)
            self._finish_delete(req, m.RpcReply(req, True, 0))
            return
        self.transport.send(q["address"], m.QueueOp(
            self.address, req, "delete", {"if_unused": if_unused, "if_empty": if_empty,
                                          "reason": reason}))

    def op_queue_purge(self, rpc, vhost, name):
        """rabbitmqctl purge_queue: the queue drops its ready messages and answers how many."""
        return self._ask_queue(rpc, self._running_queue(vhost, name), "purge")

    def op_queue_census(self, rpc, vhost=None, name=None):
        """leveretctl census: the queue's backing queue writes a `queue_census` event (what it
        holds) and the queue answers its depth; without a name every running queue of the
        vhost (every vhost: None) writes one, and the answer is their names."""
        if name is not None:
            return self._ask_queue(rpc, self._running_queue(vhost, name), "census")
        running = [((v, n), q) for (v, n), q in sorted(self.queues.items())
                   if (vhost is None or v == vhost) and q.get("address") is not None]
        if not running:
            return []
        # answered once every queue has taken its census, so a stop that follows the answer
        # finds each census in its queue's log
        gather = _Gather(rpc, [[v, n] for (v, n), _ in running])
        for _, q in running:
            req = self._ask_id()
            self.pending_asks[req] = gather
            self.transport.send(q["address"], m.QueueOp(self.address, req, "census", {}))
        return _DEFERRED

    def op_queue_sync(self, rpc, vhost, name, cancel=False):
        """rabbitmqctl sync_queue / cancel_sync_queue (rabbit_mirror_queue_misc:sync_queue,
        cancel_sync_queue): the master syncs its manual-sync mirrors still behind eagerly
        (answers how many), or stops the sync under way (answers whether one was)."""
        q = self._running_queue(vhost, name)
        if quorum.is_quorum(q.get("arguments")):
            raise ChannelError(406, amqp_text(406, "quorum_queue_not_supported"))
        return self._ask_queue(rpc, q, "cancel_sync" if cancel else "sync")

    def _running_queue(self, vhost, name) -> dict:
        q = self.queues.get((vhost, name))
        if q is None:
            raise ChannelError(404, amqp_text(404, f"no queue '{name}' in vhost '{vhost}'"))
        if q.get("address") is None:
            raise ChannelError(404, amqp_text(404, f"queue '{name}' in vhost '{vhost}' is "
                                                   "not running (its node is down)"))
        return q

    def _ask_id(self) -> int:
        req = self.next_req
        self.next_req += 1
        return req

    def _ask_queue(self, rpc, q, op):
        """An admin QueueOp to the running queue `q`; its answer is relayed to the asker."""
        req = self._ask_id()
        self.pending_asks[req] = rpc
        self.transport.send(q["address"], m.QueueOp(self.address, req, op, {}))
        return _DEFERRED

    def _queue_reply(self, reply: m.RpcReply) -> None:
        if reply.req_id in self.pending_asks:
            asker = self.pending_asks.pop(reply.req_id)
            if isinstance(asker, _Gather):
                asker.left -= 1
                if asker.left:
                    return
                rpc, reply = asker.rpc, m.RpcReply(0, True, asker.result)
            else:
                rpc = asker
            self._send_reply(rpc.reply_to, m.RpcReply(rpc.req_id, reply.ok, reply.result,
                                                         reply.code, reply.text))
        elif reply.req_id in self.pending_ops:
            self._finish_delete(reply.req_id, reply)

    def _finish_delete(self, req, reply) -> None:
        rpc, vhost, name = self.pending_ops.pop(req)
        self._recovered((vhost, name))
        if reply.ok and (vhost, name) in self.queues:
            sources = {b.source for b in self.router.list_bindings(vhost)
                       if b.dest_kind == "queue" and b.dest == name}
            self._change(["router", "remove_queue", [vhost, name]], ["queue_del", vhost, name])
            self.queue_churn["queues_deleted"] += 1
            if any(self.router.exchange(vhost, s) for s in sources):
                self._auto_delete_exchanges(vhost)
        if rpc is not None:
            self._send_reply(rpc.reply_to, m.RpcReply(rpc.req_id, reply.ok, reply.result,
                                                         reply.code, reply.text))


def _hash_password(rpc: m.Rpc) -> m.Rpc:
    """add_user / change_password with a plaintext password (an older leveretctl, a client of
    our own) become their hashed forms here, at the first node that hears them: only the
    hash reaches the leader, the Raft log, the definitions file and the workers."""
    method, args = rpc.args.get("method"), rpc.args.get("args")
    if not isinstance(method, str) or not isinstance(args, list):
        return rpc
    hashed_method, hashed_args = hashed_auth_call(method, args)
    if hashed_method == method:
        return rpc
    return rpc._replace(args=dict(rpc.args, method=hashed_method, args=hashed_args))


def locked_text(name, vhost) -> str:
    return (f"cannot obtain exclusive access to locked queue '{name}' in vhost '{vhost}'. "
            "It could be originally declared on another connection or the exclusive property "
            "value does not match that of the original declaration.")


STATS_TIMEOUT_S = 5.0  # list_queues: how long to wait for a queue's counts
class _Gather:
    """One rpc answered once several queues have answered (a vhost's census); its result is
    fixed when asked, the queues' answers only count down."""

    __slots__ = ("rpc", "result", "left")

    def __init__(self, rpc, result):
        self.rpc = rpc
        self.result = result
        self.left = len(result)


_DEFERRED = object()  # the reply comes later (from a queue, or when the queue has started)


def _stored_queue(q: dict | None) -> dict | None:
    """What _persist keeps of a queue definition (None: nothing, it is transient or exclusive)."""
    if q is None or not q["durable"] or q["exclusive"]:
        return None
    return {k: v for k, v in q.items() if k not in ("address", "worker", "crashed")}

