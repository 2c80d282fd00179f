"""The node's metadata actor: sole writer of vhosts, users, permissions, exchanges, queues and
bindings.

Mirrors what rabbit_exchange, rabbit_amqqueue (declare/delete), rabbit_binding, rabbit_vhost and
rabbit_auth_backend_internal do against mnesia in RabbitMQ. Owns:
- the authoritative Router, AuthDB and queue table (actors/replica.py's shapes);
- placement of queues on queue workers;
- durable definitions in LMDB (actors/node/definitions.py);
- broadcasting every change, in order, to every live worker.

Operations arrive as `Rpc(reply_to, req_id, op, args)`, decoded into their record
(actors/metadata_ops.py) and carried out by the one handler the dispatch table names
(actors/node/metadata_dispatch.py); the reply is `RpcReply` to reply_to. Replies that need a
queue's own answer (declare of an existing queue, delete) are forwarded to the queue actor,
which answers the asker directly or through the node.

This module is the actor itself: its state, dispatch, replies and the changes it applies,
persists and broadcasts. The handlers live by concern: metadata_queues.py,
metadata_exchanges.py, metadata_definitions.py (users, vhosts, policies, limits, parameters,
definitions JSON), metadata_workers.py (worker hellos and exits, placement, queue starts),
metadata_limits.py, metadata_alarms.py, metadata_management.py, metadata_shovels.py and, in a
cluster, metadata_cluster.py (the log, leadership, members) and metadata_replicas.py (mirrors,
promotion, quorum elections).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import replace

from actors import faults
from actors import messages as m
from actors import metadata_ops as ops
from actors.messages import (ClusterEntry, ClusterReady, ClusterTick, CommitFailed, DurableQueues,
                             ReadyWorkers, StatsTimeout, WorkerExited)
from actors.core.errors import ChannelError, ConnectionError_, amqp_text
from actors.core.permissions import AuthDB, hashed_auth_call
from actors.core.queue_stats import StatsTable
from actors.core.routing import Router
from actors.core.samples import Sample, Sampled
from actors.node import definitions_json
from actors.node.definitions import Definitions
from actors.node.metadata_alarms import AlarmsMixin
from actors.node.metadata_cluster import ClusterMixin
from actors.node.metadata_definitions import DefinitionsMixin
from actors.node.metadata_dispatch import DEFERRED, build_table
from actors.node.metadata_exchanges import ExchangesMixin
from actors.node.metadata_limits import LimitsMixin
from actors.node.metadata_management import ManagementMixin
from actors.node.metadata_queues import Gather, QueuesMixin
from actors.node.metadata_replicas import ReplicasMixin
from actors.node.metadata_shovels import ShovelsMixin
from actors.node.metadata_workers import Worker, WorkersMixin
from actors.node.node_stats import NodeTable
from actors.node.queue_table import QueueTable
from actors.replica import apply_change, parameters_of, state_lists
from actors.runtime import LightActor

log = logging.getLogger(__name__)


class Metadata(QueuesMixin, ExchangesMixin, DefinitionsMixin, WorkersMixin, AlarmsMixin,
               ClusterMixin, ReplicasMixin, ManagementMixin, LimitsMixin, ShovelsMixin,
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
        # census (a vhost's census: one Gather for all its queues)
        self.pending_asks: dict[int, m.Rpc | Gather] = {}
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
        handler = _ANY_TIME.get(type(msg))
        if handler is not None:
            return handler(self, msg)
        if not self.loaded:
            if isinstance(msg, m.Rpc) and msg.reply_to:  # leveretctl before we joined
                self._send_local(msg.reply_to, m.RpcReply(msg.req_id, False, None, 541,
                                 amqp_text(541, "this node has not joined its cluster yet")))
            return None
        handler = _LOADED.get(type(msg))
        return handler(self, msg) if handler is not None else None

    def _rpc_reply(self, msg: m.RpcReply) -> None:
        """An answer to a request of ours: a relayed operation, a queue's counts, or a
        queue's answer to an admin op or a delete."""
        if self._relay(msg):
            pass
        elif msg.req_id in self.pending_stats:
            self._stats_reply(msg)
        else:
            self._queue_reply(msg)

    def _connection_stats(self, msg: m.ConnectionStats) -> None:
        if not self.transport.is_dead(msg.worker):
            self._connection_sample(msg)

    def _worker_stats(self, msg: m.WorkerStats) -> None:
        if not self.transport.is_dead(msg.worker):
            self.worker_totals[msg.worker] = msg.totals

    def _queue_stats(self, msg: m.QueueStats) -> None:
        if (msg.vhost, msg.name) in self.queues:
            self.queue_stats.put(msg.vhost, msg.name, msg.at_ms, msg.stats)

    def _durable_queues(self, msg: DurableQueues) -> list:
        # (a quorum queue's member keeps its log while it counts, down or not)
        return [(*key, q.get("arguments") or {}) for key, q in self.queues.items()
                if q["durable"]
                and self.me in (q.get("home", self.me), *(q.get("mirrors") or ()),
                                *(q.get("logs") or ()))]

    def _rpc(self, rpc: m.Rpc) -> None:
        try:
            op = ops.decode(rpc.op, rpc.args)
        except ops.OpError as e:  # refused here, never forwarded to a leader
            log.warning("refused rpc from %s: %s", rpc.reply_to or "this node", e.text)
            self._reply(rpc, False, None, e.reply_code, amqp_text(e.reply_code, e.text))
            return
        if isinstance(op, ops.Auth):
            op = _hash_password(op)  # before it is forwarded, logged or committed
        elif isinstance(op, ops.ConnectionClosed):
            self._untrack(op.owner)  # this node's count, before forwarding
        elif isinstance(op, ops.DefinitionsImport):
            op = replace(op, doc=definitions_json.hash_plain_passwords(op.doc))  # likewise
        # what is forwarded, remembered or logged is the decoded record (and its origin)
        origin = {ops.ORIGIN: rpc.args[ops.ORIGIN]} if ops.ORIGIN in rpc.args else {}
        rpc = rpc._replace(args={**ops.args_of(op), **origin})
        if self._route_rpc(rpc, op):
            return
        self._remember_redo(rpc, op)
        try:
            result = HANDLERS[type(op)](self, rpc, **ops.args_of(op))
        except (ChannelError, ConnectionError_) as e:
            self._reply(rpc, False, None, e.reply_code, e.text)
            return
        except Exception as e:  # noqa: BLE001 - the caller must never wait for a lost reply
            log.exception("rpc %s failed", rpc.op)
            self._reply(rpc, False, None, 541, amqp_text(541, f"{rpc.op} failed: {e!r}"))
            return
        if result is not DEFERRED:
            self._reply(rpc, True, result)

    def _reply(self, rpc, ok, result=None, code=0, text=""):
        if not rpc.reply_to:
            return
        reply = m.RpcReply(rpc.req_id, ok, result, code, text)
        if rpc.op == ops.ClusterStatus.NAME:
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


def _hash_password(op: ops.Auth) -> ops.Auth:
    """add_user / change_password with a plaintext password (an older leveretctl, a client of
    our own) become their hashed forms here, at the first node that hears them: only the
    hash reaches the leader, the Raft log, the definitions file and the workers."""
    if not isinstance(op.method, str) or not isinstance(op.args, list):
        return op
    hashed_method, hashed_args = hashed_auth_call(op.method, op.args)
    if hashed_method == op.method:
        return op
    return replace(op, method=hashed_method, args=hashed_args)


def _stored_queue(q: dict | None) -> dict | None:
    """What _persist keeps of a queue definition (None: nothing, it is transient or exclusive)."""
    if q is None or not q["durable"] or q["exclusive"]:
        return None
    return {k: v for k, v in q.items() if k not in ("address", "worker", "crashed")}


HANDLERS = build_table(Metadata)  # operation record -> its handler, checked here at import

# message type -> handler (an ask's answer is what it returns): these at any time, cluster
# traffic included; _LOADED only once the definitions are loaded (in a cluster: caught up)
_ANY_TIME = {
    ClusterEntry: Metadata._cluster_entry,
    ClusterTick: lambda md, msg: md._cluster_tick(),
    ClusterReady: lambda md, msg: md._cluster_load(),
    CommitFailed: lambda md, msg: md._commit_failed(msg.epoch, msg.token),
    m.AlarmsChanged: Metadata._alarms_changed,
    m.NodeTick: Metadata._node_tick,
    m.NodeStats: lambda md, msg: md.node_table.put(msg.node, msg.at_ms, msg.stats),
    m.ShovelStates: Metadata._shovel_states,
}
_LOADED = {
    m.Rpc: Metadata._rpc,
    m.QueueStarted: Metadata._queue_started,
    m.QueueDown: Metadata._queue_down,  # (from the node that handled a crash)
    m.RpcReply: Metadata._rpc_reply,
    m.ConnectionStats: Metadata._connection_stats,
    m.WorkerStats: Metadata._worker_stats,
    m.QueueStats: Metadata._queue_stats,
    StatsTimeout: lambda md, msg: md._finish_stats(msg.gather),
    m.MetaApplied: Metadata._meta_applied,
    m.PeerApplied: Metadata._peer_applied,
    m.LogQuery: Metadata._log_query,
    m.LogPosition: Metadata._log_position,
    WorkerExited: Metadata._worker_exited,
    ReadyWorkers: lambda md, msg: [k for k, w in md.workers.items() if w.ready],
    DurableQueues: Metadata._durable_queues,
}

