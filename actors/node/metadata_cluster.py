"""The cluster half of the metadata actor: who executes definitions operations, and how their
changes reach every node.

Mirrors RabbitMQ's clustered metadata store in effect (every node sees every definition, a
minority cannot change them) with a Raft log (actors/node/cluster.py) instead of mnesia:
- only the Raft leader's metadata actor executes operations (declare, bind, delete, policies,
  users...): it applies their changes at once, as a lone node does, and commits them to the log;
  an operation is answered only when its changes are committed (a majority has them);
- every other node forwards the operations its channels and leveretctl send to the leader and
  relays the answers, once its own workers have applied the entry the answer depends on;
- every node applies committed entries in log order to its copy and its workers' replicas,
  and tells the other nodes once its workers have applied each one (PeerApplied); the leader
  releases an answer only when every member that is up and connected has applied the entry
  (or VISIBLE_WAIT_S passed: such a member is about to be marked down), as a mnesia
  transaction commits on every node before rabbit_channel answers. So a queue declared on one
  node is routed to by a publish on any other the moment the client has its declare-ok.

Membership is a fact of the log (pause_minority, as rabbit_node_monitor's): a node is up for the
cluster only through a committed `member_put`; the leader marks a member down once it has been
cut off for DOWN_AFTER_S (and only while the leader reaches a majority, and once it has led for
LEASE_S). A node that cannot reach a majority for PAUSE_AFTER_S, or a leader for
LEADERLESS_PAUSE_S (a bridge: it reaches a majority through a member that also reaches the
leader), or that the log lists as down, PAUSES (actors/core/pause.py has the clocks and why they
keep one master per queue): its workers cancel
consumers, nack unconfirmed publishes and close every client connection with 320
CONNECTION_FORCED, the node stops listening, its queue workers stop every master and mirror.
It resumes by itself once it reaches a majority again: it asks the leader to rejoin (a
`cluster.member_up` with a new incarnation, which marks it down then up in the log: its old
masters' mirrors have been promoted, its durable queues that had none wait for it), and when
that entry comes back it starts its queues and mirrors as the log says and listens again.

A new leader first commits an empty entry (a barrier): once it comes back, the leader's copy is
the whole log and it may execute operations. A leader that loses its majority takes the log's
state again (`_cluster_resync`): what it had applied but not committed is gone, and the
operations waiting on it are answered 541.

Member ids are raft addresses (HOST:PORT). Member info, replicated: name, amqp address, the
metadata actor's address, queue worker count, whether it is up, its incarnation (new per boot)
and its workers' endpoints (so every node can tell its workers when another node's die).
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import NamedTuple

from actors import messages as m
from actors import metadata_ops as ops
from actors.messages import ClusterEntry, ClusterTick, CommitFailed
from actors.node.cluster import Cluster
from actors.node.metadata_dispatch import handles
from actors.node.queue_table import QueueTable
from actors.replica import parameters_of
from actors.core import mirroring
from actors.core.pause import DOWN_AFTER_S, PauseClock, may_mark_down
from actors.core.errors import amqp_text
from actors.core.permissions import AuthDB
from actors.core.routing import Router

log = logging.getLogger("leveret.cluster")

FORWARD_WAIT_S = 5.0  # how long an operation waits for a leader before it fails
RELAY_WAIT_S = 15.0  # how long a forwarded operation waits for the leader's answer
# (DOWN_AFTER_S, PAUSE_AFTER_S, LEADERLESS_PAUSE_S, LEASE_S: actors/core/pause.py, with why
# the cut-off node has paused, its masters stopped, before the majority promotes their mirrors)
VISIBLE_WAIT_S = 2.0  # longest an answer waits for a connected member to apply its entry


JOINED = ("", "member_up committed")  # a boot gate beside the durable queues to recover


class Relay(NamedTuple):
    """An operation this node forwarded to the leader, until the leader answers."""
    reply_to: str  # who asked here ("" for this node's own operations, such as member_up)
    req_id: int  # their request id
    deadline: float  # monotonic time after which the asker gets 541
    leader: str  # the member it went to
    rpc: m.Rpc  # the operation as it was asked here (to send again)


class ClusterMixin:
    """Mixed into Metadata; everything here is a no-op when the node is alone."""

    def _cluster_init(self, config) -> None:
        self.config = config
        self.me = config.cluster_address or ""  # member id, "" when alone
        self.cluster: Cluster | None = None
        self.loaded = not config.clustered  # state taken from the log
        self.epoch = None  # our leadership stint, once its barrier came back
        self.barrier = None  # epoch whose barrier entry is on its way
        self.next_token = 1  # entries committed in this epoch
        self.tokens: deque = deque()  # our entries not yet back from the log
        self.leader_held: deque = deque()  # (token, reply_to, RpcReply) waiting for commit
        self.redoable: dict = {}  # leader: (reply_to, req_id) -> an Rpc of an Op.REDO operation, not answered yet
        self.canonical = 0  # seq of the last log entry applied here
        self.awaiting: list = []  # (seq, reply_to, RpcReply) relayed, waiting for that entry
        self.relays: dict = {}  # our req id -> Relay, a forwarded operation
        self.deferred: deque = deque()  # (deadline, Rpc or message) waiting for a leader
        self.incarnation = os.urandom(6).hex()  # this boot of this node
        self.last_seen: dict = {}  # member -> monotonic time its raft link was last up
        self.starting: set = set()  # queues this node asked its workers to start
        self.peer_seq: dict = {}  # member -> last log entry its workers have all applied
        self.visible: deque = deque()  # (seq, deadline, reply_to, RpcReply): leader's answers
        #                                waiting for every member to apply entry seq
        self.joined = False  # the log has listed this boot up once (its first member_up)
        self.paused = False  # pause_minority: no clients, no queues, until the log lists us up
        self.pause_clock = PauseClock()  # since when we lack a majority, a leader's contact
        self.leading_since = None  # monotonic time this node became leader (None: follows)
        self.rejoin_sent = False  # paused: our rejoin (member_up) is on its way to the leader
        self.listed_at = None  # paused: (log entry, monotonic time) we saw our rejoin come back
        self.promoting: dict = {}  # token of our entry -> queues promoted here, started once
        #                            that entry is committed
        self.batch = None  # changes collected into one log entry (`_one_entry`), or None
        self.elections: dict = {}  # leader: quorum queue key -> Election (its leader is gone)
        self.election_ref = 0  # the last election's number (answers name theirs)

    @property
    def leading(self) -> bool:
        """Executes operations: alone, or the leader whose barrier is back."""
        return self.cluster is None or self.epoch is not None

    # --- start-up ---------------------------------------------------------------------------
    def _cluster_start(self) -> None:
        self.cluster = Cluster(self.config.cluster_nodes, self.me, self.config.data_dir,
                               self.secret, on_state_changed=self._raft_state_changed)

    def _raft_state_changed(self, old, new) -> None:  # pysyncobj's thread
        try:
            self.actor_ref.tell(ClusterTick())
        except Exception:  # noqa: BLE001 - stopping
            pass

    def _cluster_load(self) -> bool:
        """Once the log is caught up: take its state and hear every entry after it."""
        if self.loaded:
            return True
        if not self.cluster.ready.is_set():
            return False
        state = self.cluster.state
        with state.lock:
            seq, snap = state.snapshot()
            state.listener = self._on_entry
        self._load_state(seq, snap)
        self.loaded = True
        me = self.me
        self.recovering = {k for k, q in self.queues.items()
                           if q.get("home") == me and q["durable"]}
        self.recovering.add(JOINED)  # listen once the others know this node is up
        self._leader_op(ops.ClusterMemberUp(me, self._member_info({})))
        log.info("cluster: definitions loaded (log entry %d), %d members known", seq,
                 len(self.members))
        return True

    def _member_info(self, workers: dict) -> dict:
        """What `cluster.member_up` says of this node (its current incarnation)."""
        return {"name": self.config.node, "amqp": f"{self.config.host}:{self.config.port}",
                "metadata": self.address, "queue_workers": self.n_queue_workers, "up": True,
                "incarnation": self.incarnation, "workers": workers}

    def _load_state(self, seq, snap) -> None:
        self.router = Router.from_state(snap["router"])
        self.auth = AuthDB.from_state(snap["auth"])
        self.queues = QueueTable(((q["vhost"], q["name"]), q) for q in snap["queues"])
        self.policies = {(p["vhost"], p["name"]): p for p in snap["policies"]}
        self.op_policies = {(p["vhost"], p["name"]): p for p in snap.get("op_policies", [])}
        self.limits = {(x["scope"], x["name"]): x["value"] for x in snap.get("limits", [])}
        self.parameters = parameters_of(snap)
        self.members = snap["members"]
        self.canonical = seq
        self._sync_shovels()  # the log's shovels and members hold from here

    def _on_entry(self, seq, entry) -> None:  # pysyncobj's thread
        try:
            self.actor_ref.tell(ClusterEntry(seq, entry))
        except Exception:  # noqa: BLE001 - stopping
            pass

    # --- the log --------------------------------------------------------------------------------
    def _start_on_commit(self, key) -> None:
        """Leader: a mirror of ours promoted by the entry about to be submitted: its master
        starts once the log has it (`_cluster_entry`), never on a change the log may drop."""
        self.promoting.setdefault(self.next_token, []).append(key)

    def _one_entry(self):
        """`with self._one_entry():` the changes made inside go to the log as one entry (a
        member marked down and its masters' mirrors promoted: the log never holds the first
        without the second)."""
        mixin = self

        class _Batch:
            def __enter__(self):
                self.outer = mixin.batch is not None
                if not self.outer:
                    mixin.batch = []

            def __exit__(self, *exc):
                if not self.outer:
                    changes, mixin.batch = mixin.batch, None
                    if changes:
                        mixin._cluster_submit(changes)
        return _Batch()

    def _cluster_submit(self, changes) -> None:
        if self.batch is not None:
            self.batch.extend(changes)
            return
        token = self.next_token
        self.next_token += 1
        self.tokens.append(token)
        epoch = self.epoch
        entry = {"origin": self.me, "epoch": epoch, "token": token, "changes": changes}
        ref = self.actor_ref

        def done(seq, failed):
            if failed:
                try:
                    ref.tell(CommitFailed(epoch, token))
                except Exception:  # noqa: BLE001 - stopping
                    pass
        self.cluster.submit(entry, done)

    def _cluster_entry(self, msg: ClusterEntry) -> None:
        if msg.seq <= self.canonical:
            return  # already in the snapshot we loaded
        entry = msg.entry
        self.canonical = msg.seq
        own = entry.get("origin") == self.me and entry.get("epoch") is not None
        if own and entry["epoch"] == self.barrier and entry["token"] == 0:
            self.epoch, self.barrier = self.barrier, None
            log.info("cluster: this node leads (entry %d)", msg.seq)
            self._drain_deferred()
            for key, q in list(self.queues.items()):
                if q.get("electing"):  # (the last leader did not finish these)
                    self._elect(key)
        elif own and entry["epoch"] == self.epoch:
            # applied when it was made: release the answers that waited for it
            while self.tokens and self.tokens[0] <= entry["token"]:
                self.tokens.popleft()
            for key in self.promoting.pop(entry["token"], ()):
                q = self.queues.get(key)
                if q is not None and q.get("home") == self.me and q.get("address") is None:
                    self._start_queue(q, recovered=q["durable"])
            while self.leader_held and self.leader_held[0][0] <= entry["token"]:
                _, reply_to, reply = self.leader_held.popleft()
                self._when_visible(msg.seq, reply_to, reply._replace(version=msg.seq))
        else:
            self._apply_changes(entry["changes"])
        while self.awaiting and self.awaiting[0][0] <= self.canonical:
            _, reply_to, reply = self.awaiting.pop(0)
            self._send_local(reply_to, reply)
        self._prune_recovering()
        self._tell_peers_applied(msg.seq)

    def _prune_recovering(self) -> None:
        """Boot waits for the durable queues the log homed here when this node loaded it; one
        the log has since moved to a mirror elsewhere (promoted while this node was down) or
        deleted will not start here: nothing to wait for. (Kept, the node never listened: a
        kill -9'd node restarted while the leader promoted its queue.)"""
        for key in [k for k in self.recovering if k != JOINED]:
            q = self.queues.get(key)
            if q is None or q.get("home") != self.me or q.get("electing"):
                self._recovered(key)  # (electing: it starts here if chosen, boot or not)

    # --- every node has it: answers leave once each member applied their entry ------------------
    def _tell_peers_applied(self, seq) -> None:
        """Tell the other members, once this node's workers have applied every change so far
        (`_send_local` holds it until then), that entry `seq` is applied here."""
        note = m.PeerApplied(self.me, seq)
        for member, info in self.members.items():
            if member != self.me and info.get("up") and info.get("metadata"):
                self._send_local(info["metadata"], note)

    def _peer_applied(self, msg: m.PeerApplied) -> None:
        if msg.seq > self.peer_seq.get(msg.member, 0):
            self.peer_seq[msg.member] = msg.seq
        self._release_visible()
        if self.paused and self.listed_at is not None:
            self._check_pause(self.cluster.has_majority(), time.monotonic())

    def _when_visible(self, seq, reply_to, reply) -> None:
        """Leader: send `reply` once every member up has applied entry `seq`."""
        self.visible.append((seq, time.monotonic() + VISIBLE_WAIT_S, reply_to, reply))
        self._release_visible()

    def _release_visible(self) -> None:
        if not self.visible:
            return
        connected = self.cluster.connected()
        lagging = [self.peer_seq.get(k, 0) for k, v in self.members.items()
                   if k != self.me and v.get("up") and k in connected]
        low = min(lagging, default=self.canonical)
        now = time.monotonic()
        while self.visible and (self.visible[0][0] <= low or self.visible[0][1] < now):
            seq, deadline, reply_to, reply = self.visible.popleft()
            if seq > low:
                log.warning("cluster: answering before every member applied entry %d", seq)
            self._send_local(reply_to, reply)

    def _commit_failed(self, epoch, token) -> None:
        if epoch is not None and epoch == self.epoch:
            log.warning("cluster: entry %s of our leadership was not committed", token)
            self._cluster_resync()

    def _cluster_resync(self) -> None:
        """Leadership lost: the log's state wins over what we applied ahead of it."""
        self.epoch = self.barrier = self.leading_since = None
        self.tokens.clear()
        self.promoting.clear()  # (never committed: the log's master stays)
        self.elections.clear()  # (the next leader holds them again)
        text = amqp_text(541, "cluster leadership changed before the operation was committed")
        redo = self.redoable
        self.redoable = {}
        uncommitted = [(reply_to, reply.req_id) for _, reply_to, reply in self.leader_held]
        self.leader_held.clear()
        while self.visible:  # committed: answered as they are
            self._send_local(*self.visible.popleft()[2:])
        for waiters in self.pending_start.values():
            uncommitted.extend((reply_to, req_id) for reply_to, req_id, _ in waiters)
        self.pending_start.clear()
        deadline = time.monotonic() + FORWARD_WAIT_S
        for reply_to, req_id in uncommitted:
            rpc = redo.get((reply_to, req_id))
            if rpc is not None:
                log.info("cluster: %s not committed before leadership changed: asking the next "
                         "leader", rpc.op)
                self.deferred.append((deadline, rpc))
            else:
                self._send_local(reply_to, m.RpcReply(req_id, False, None, 541, text))
        state = self.cluster.state
        with state.lock:
            seq, snap = state.snapshot()
        before = self.members
        self._load_state(seq, snap)
        for member in set(before) | set(self.members):
            # what we applied ahead of the log (a member marked down, its workers dead) is
            # undone: the log's view of each member's workers holds again
            old, new = before.get(member), self.members.get(member)
            if old != new:
                self._member_changed(member, old or {}, new or {})
        self.version += 1
        snapshot = m.MetaSnapshot(self.snapshot(), self.version)
        for w in self.workers.values():
            self.transport.send(w.control, snapshot)
        self._start_own_queues()

    # --- operations -----------------------------------------------------------------------------
    def _route_rpc(self, rpc: m.Rpc, op: ops.Op) -> bool:
        """True when this node must not execute `rpc` itself (it is forwarded or deferred)."""
        if self.cluster is None or op.LOCAL or self.leading:
            return False
        if isinstance(op, (ops.QueueDeclare, ops.ExchangeDeclare)) and op.passive:
            return False  # a read: this node's copy answers it
        self._forward(rpc, time.monotonic() + FORWARD_WAIT_S)
        return True

    def _forward(self, msg, deadline) -> None:
        leader = self.cluster.leader() if self.loaded else None
        if leader not in self.cluster.connected():
            leader = None  # a leader we cannot reach (pysyncobj keeps the last one it knew)
        target = self.members.get(leader, {}).get("metadata") if leader else None
        if leader == self.me or target is None:
            self.deferred.append((deadline, msg))  # no leader yet, or it is us catching up
            return
        if isinstance(msg, m.Rpc):
            req = self.next_req
            self.next_req += 1
            self.relays[req] = Relay(msg.reply_to, msg.req_id, time.monotonic() + RELAY_WAIT_S,
                                     leader, msg)
            args = dict(msg.args)
            args.setdefault(ops.ORIGIN, self.me)
            msg = m.Rpc(self.address, req, msg.op, args)
        self.transport.send(target, msg)

    def _remember_redo(self, rpc: m.Rpc, op: ops.Op) -> None:
        """Leader: keep a client's request whose op may be redone (`Op.REDO`) until it is
        answered (`_answered`)."""
        if self.cluster is not None and rpc.reply_to and op.REDO:
            self.redoable[(rpc.reply_to, rpc.req_id)] = rpc

    def _answered(self, reply_to, reply) -> None:
        if self.redoable and isinstance(reply, m.RpcReply):
            self.redoable.pop((reply_to, reply.req_id), None)

    def _leader_op(self, op: ops.Op) -> None:
        """An operation this node itself needs the leader to carry out (answer ignored)."""
        self._rpc(ops.rpc("", 0, op))

    def _drain_deferred(self) -> None:
        now = time.monotonic()
        waiting, self.deferred = self.deferred, deque()
        for deadline, msg in waiting:
            if self.leading:
                if isinstance(msg, m.Rpc):
                    self._rpc(msg)
                else:
                    self.on_receive(msg)
            elif now > deadline and not (isinstance(msg, m.Rpc) and not msg.reply_to):
                # (this node's own requests wait as long as it takes)
                if isinstance(msg, m.Rpc) and msg.reply_to:
                    self._send_local(msg.reply_to, m.RpcReply(msg.req_id, False, None, 541, amqp_text(
                        541, "no cluster leader: this node cannot reach a majority of "
                             "cluster_nodes")))
            else:
                self._forward(msg, deadline)

    def _relay(self, reply: m.RpcReply) -> bool:
        dest = self.relays.pop(reply.req_id, None)
        if dest is None:
            return False
        reply_to, req_id = dest.reply_to, dest.req_id
        if not reply_to and not reply.ok:
            # this node's own operation (member_up...): it must happen; again, via the leader
            log.info("cluster: %s answered %s, asking again", dest.rpc.op, reply.code)
            self.deferred.append((time.monotonic() + FORWARD_WAIT_S, dest.rpc))
        elif reply_to:
            out = reply._replace(req_id=req_id)
            if reply.version > self.canonical:
                self.awaiting.append((reply.version, reply_to, out))
                self.awaiting.sort(key=lambda a: a[0])
            else:
                self._send_local(reply_to, out)
        return True

    def _cluster_reply(self, reply_to, reply) -> bool:
        """The leader answers once its changes so far are committed."""
        if self.cluster is None or not self.tokens:
            return False
        self.leader_held.append((self.tokens[-1], reply_to, reply))
        return True

    # --- ticks: leadership and member failures -------------------------------------------------
    def _cluster_tick(self) -> None:
        if self.cluster is None:
            return
        if not self._cluster_load():
            return
        is_leader = self.cluster.is_leader()
        if is_leader and self.epoch is None and self.barrier is None:
            self.barrier = os.urandom(6).hex()
            self.leading_since = time.monotonic()  # (LEASE_S runs from here: not earlier
            #                                         than the election)
            self.cluster.submit({"origin": self.me, "epoch": self.barrier, "token": 0,
                                 "changes": []}, lambda seq, failed: None)
        elif not is_leader and (self.epoch is not None or self.barrier is not None):
            log.warning("cluster: this node no longer leads")
            self._cluster_resync()
        if self.deferred:
            self._drain_deferred()
        if self.elections and self.leading:
            self._check_elections(time.monotonic())
        self._release_visible()
        self._check_relays()
        now = time.monotonic()
        connected = self.cluster.connected()
        majority = 2 * len(connected) > len(self.cluster.nodes)
        self._check_pause(majority, now)
        for member, info in list(self.members.items()):
            if member in connected:
                self.last_seen[member] = now
            elif self.leading and majority and info.get("up") and may_mark_down(
                    now, self.last_seen.setdefault(member, now), self.leading_since):
                # (a leader without a majority marks nobody down: it could commit nothing,
                # and what it applied ahead would promote mirrors on the minority's side; a
                # new leader waits LEASE_S: a deposed leader may not know it yet, and serve)
                log.warning("cluster: member %s (%s) is down", info.get("name"), member)
                self._member_down(member, info)

    # --- pause_minority -------------------------------------------------------------------------
    def _listed_up(self) -> bool:
        """The log lists this node up, as this incarnation."""
        mine = self.members.get(self.me) or {}
        return bool(mine.get("up")) and mine.get("incarnation") == self.incarnation

    def _check_pause(self, majority: bool, now: float) -> None:
        """Pause when cut from the majority for PAUSE_AFTER_S, from any leader for
        LEADERLESS_PAUSE_S (once joined), or listed down by the log; once paused, rejoin when
        a majority and a leader are reachable, resume once the log lists us up."""
        contact = self.cluster.leader_contact()
        self.pause_clock.observe(now, majority, contact or not self.joined)
        if not self.paused:
            why = self.pause_clock.why_pause(now)
            if why is None and self.joined and not self._listed_up():
                why = "the cluster's log lists it as down"
            if why is not None:
                self._pause(why)
            return
        if not (majority and contact):
            return
        if not self._listed_up():
            if not self.rejoin_sent:
                self._rejoin()
            return
        if self.listed_at is None:
            self.listed_at = (self.canonical, now)
        # resume once every other member up and reachable has applied our rejoin (PeerApplied:
        # its workers took our workers' endpoints back, so what ours send them is answered),
        # or VISIBLE_WAIT_S passed (such a member is about to be marked down)
        seq, since = self.listed_at
        connected = self.cluster.connected()
        lagging = [k for k, v in self.members.items() if k != self.me and v.get("up")
                   and k in connected and self.peer_seq.get(k, 0) < seq]
        if not lagging or now - since > VISIBLE_WAIT_S:
            self._resume()

    def _pause(self, why: str) -> None:
        log.warning("cluster: pausing this node (pause_minority): %s. Its client connections "
                    "are closed (320 CONNECTION_FORCED), new ones refused, its queue masters "
                    "and mirrors stopped, until it is a member up again", why)
        self.paused = True
        self.rejoin_sent = False
        self.listed_at = None
        # from now on this node is a new incarnation, which only a rejoin entry lists up: the
        # entries it has not seen yet (it marked down, its masters' mirrors promoted) come
        # before that one, so it never resumes on its stale copy of the log
        self.incarnation = os.urandom(6).hex()
        self.starting.clear()  # nothing of ours runs: what the log says starts on resume
        # queues that started before the pause are stopped now: their QueueStarted must not
        # reach a leader later
        self.deferred = deque(d for d in self.deferred if not isinstance(d[1], m.QueueStarted))
        self.paused_flag.set()  # the node stops listening (actors/node/node.py)
        self._sync_shovels()  # and runs no shovel
        note = m.Pause(True)
        for w in self.workers.values():
            self.transport.send(w.control, note)

    def _rejoin(self) -> None:
        """Paused with a majority in reach: ask the leader to list this node up again, as a
        new incarnation (the leader marks the old one down first: its masters' mirrors take
        over, its durable queues without one wait for it, its transient ones go)."""
        self.rejoin_sent = True
        log.info("cluster: a majority is reachable again: rejoining (incarnation %s)",
                 self.incarnation)
        workers = {f"{k}-{i}": w.endpoint for (k, i), w in self.workers.items()}
        self._leader_op(ops.ClusterMemberUp(self.me, self._member_info(workers)))

    def _resume(self) -> None:
        """The log lists this node up again (entry applied here): start what the log says is
        ours (masters, mirrors), then listen again."""
        self.paused = False
        self.pause_clock.reset()
        log.warning("cluster: resuming: this node is a member up again (log entry %d)",
                    self.canonical)
        note = m.Pause(False)
        for w in self.workers.values():
            self.transport.send(w.control, note)
        self._start_own_queues(stale=True)
        self.paused_flag.clear()
        self._sync_shovels()

    def _check_relays(self) -> None:
        """Forwarded operations whose leader is gone (unreachable DOWN_AFTER_S, or another
        member leads now) or that waited RELAY_WAIT_S: the asker gets 541 (the operation may or
        may not have been committed, as when a connection drops); this node's own operations
        go to the new leader."""
        now = time.monotonic()
        connected = self.cluster.connected()
        leader = self.cluster.leader()
        for req, relay in list(self.relays.items()):
            lost = relay.leader not in connected and \
                now - self.last_seen.get(relay.leader, now) > DOWN_AFTER_S
            replaced = leader is not None and leader != relay.leader and leader in connected
            if not (lost or replaced or now > relay.deadline):
                continue
            del self.relays[req]
            if relay.reply_to:
                self._send_local(relay.reply_to, m.RpcReply(relay.req_id, False, None, 541,
                                 amqp_text(541, "the cluster leader did not answer (it "
                                                "failed, or this node is in a minority)")))
            else:
                self.deferred.append((now + FORWARD_WAIT_S, relay.rpc))

    # --- member changes as they reach this node ---------------------------------------------------
    def _member_changed(self, member, old, new) -> None:
        """Every node: workers of another node that are gone are dead endpoints from now on."""
        if member == self.me and new.get("incarnation") == self.incarnation and new.get("up"):
            self.joined = True
            self._recovered(JOINED)
            if self.paused:
                self._check_pause(self.cluster.has_majority(), time.monotonic())
        if member == self.me or not old:
            return
        if old.get("incarnation") != new.get("incarnation") or not new.get("up"):
            self.peer_seq.pop(member, None)  # a new boot counts again from its own load
        if old.get("metadata") != new.get("metadata"):
            # operations forwarded to its previous boot (its old address: every node's were
            # stale until this entry; after a restart of the whole cluster, the leader's) are
            # lost with it: forward them again, to whoever leads now
            for req, relay in list(self.relays.items()):
                if relay.leader == member:
                    del self.relays[req]
                    self._forward(relay.rpc, time.monotonic() + FORWARD_WAIT_S)
        before = dict(old.get("workers") or {}) if old.get("up") else {}
        after = new.get("workers") or {} if new.get("up") else {}
        if old.get("up") and not new.get("up"):
            # the workers its queues run on are gone too, whether or not the log had their
            # endpoints yet (a worker's hello committed after a leadership change may be
            # missing): a request a channel sent such a queue is answered, never left waiting
            listed = set(before.values())
            for q in self.queues.values():
                endpoint = (q.get("address") or "").partition("#")[0]
                if q.get("home") == member and endpoint and endpoint not in listed:
                    listed.add(endpoint)
                    before[f"queue-of-{q['name']}"] = endpoint
        for slot, endpoint in before.items():
            if after.get(slot) != endpoint:
                self.transport.mark_dead(endpoint)
                self._forget_worker_stats(endpoint)
                down = m.WorkerDown(slot.split("-")[0], endpoint)
                for w in self.workers.values():
                    self.transport.send(w.control, down)
        for slot, endpoint in after.items():
            if before.get(slot) != endpoint and self.transport.is_dead(endpoint):
                # the same process, back (its node was marked down, then rejoined: a
                # partition healed): messages go to it again, here and in every worker
                self.transport.revive(endpoint)
                up = m.WorkerUp(slot.split("-")[0], endpoint)
                for w in self.workers.values():
                    self.transport.send(w.control, up)

    def _start_own_queues(self, stale: bool = False) -> None:
        """Start the masters the log homes here that do not run, and our mirrors. `stale`:
        every master of ours stopped (the node paused), so an address the log still gives
        one of them (the log may list it here with the address it had before the pause) is
        dead: start it all the same (its QueueStarted gives the log the new address)."""
        if self.paused:
            return
        for q in self.queues.values():
            if q.get("home", self.me) == self.me and (stale or q.get("address") is None):
                self._start_queue(q, recovered=q["durable"])
            self._start_mirrors(q)

    # --- cluster operations (leader) ------------------------------------------------------------
    @handles(ops.ClusterMemberUp)
    def op_cluster_member_up(self, rpc, member, info):
        with self._one_entry():  # (down, promotions, up: all or nothing in the log)
            old = self.members.get(member)
            if old and old.get("incarnation") != info.get("incarnation") and old.get("up"):
                self._member_down(member, old)  # restarted before anyone saw it go
            self._change(["member_put", member, info])
            # what cannot outlive a restart of its node: its transient and exclusive queues
            for q in list(self.queues.values()):
                if q.get("home") == member and (not q["durable"] or q["exclusive"]):
                    self._drop_queue(q)
            self._remirror()
        return None

    @handles(ops.ClusterWorkerUp)
    def op_cluster_worker_up(self, rpc, member, slot, endpoint):
        info = self.members.get(member)
        if info is None:
            return None
        workers = dict(info.get("workers") or {})
        workers[slot] = endpoint
        self._change(["member_put", member, dict(info, workers=workers)])
        return None

    @handles(ops.ClusterWorkerDown)
    def op_cluster_worker_down(self, rpc, member, kind, index, endpoint):
        info = self.members.get(member)
        if info is not None:
            workers = {k: v for k, v in (info.get("workers") or {}).items() if v != endpoint}
            self._change(["member_put", member, dict(info, workers=workers)])
        self._worker_gone(member, kind, index, endpoint)
        return None

    @handles(ops.ClusterStatus)
    def op_cluster_status(self, rpc):
        """`leveretctl cluster_status`: every member as the log lists it (up), whether this
        node has a live raft link to it (connected, "reachable"), whether it is paused, who
        leads; and each mirrored queue's master and mirrors."""
        connected = self.cluster.connected() if self.cluster else set()
        leader = self.cluster.leader() if self.cluster else self.me
        if self.cluster and leader not in connected:
            # pysyncobj keeps naming the last leader it heard from until an election starts
            # (up to raftMaxTimeout after a kill -9): one we cannot reach is no leader of ours,
            # as `_forward` has it
            leader = None
        rows = []
        for member in (self.config.cluster_nodes or [""]):
            info = self.members.get(member, {})
            up = bool(info.get("up", not member))
            reachable = member in connected or not member
            if member == self.me or not member:
                paused = self.paused
            elif reachable:
                # a live node the log lists down does not serve: paused (or still booting)
                paused = not up
            else:
                paused = None  # cut off from here: nobody here can tell
            rows.append({"member": member, "name": info.get("name", self.config.node
                                                             if member == self.me else ""),
                         "amqp": info.get("amqp", ""), "up": up, "connected": reachable,
                         "leader": member == leader, "paused": paused})
        queues = []
        for q in self.queues.values():
            if not q.get("mirrors") and self._ha_mode(q)[0] not in mirroring.MODES:
                continue
            queues.append({"vhost": q["vhost"], "name": q["name"],
                           "master": self._member_name(q.get("home")),
                           "running": q.get("address") is not None,
                           "mirrors": [self._member_name(x) for x in q.get("mirrors") or []],
                           "synchronised_mirrors": [self._member_name(x)
                                                    for x in q.get("synced") or []]})
        queues.sort(key=lambda r: (r["vhost"], r["name"]))
        return {"me": self.me, "leader": leader, "paused": self.paused, "members": rows,
                "queues": queues}

    def _member_down(self, member, info) -> None:
        """Leader: a member is gone: its queues move to a mirror, wait for it, or go (one
        log entry: a log that listed it down with its queues still homed on it would leave
        them there, at an address where nothing runs, once it rejoins)."""
        with self._one_entry():
            self._change(["member_put", member, dict(info, up=False, workers={})])
            for q in list(self.queues.values()):
                mirrors = list(q.get("mirrors") or [])
                if q.get("home") == member:
                    self._home_lost(q)
                elif member in mirrors:
                    mirrors.remove(member)
                    synced = [s for s in q.get("synced") or [] if s != member]
                    self._change(["queue_put", dict(q, mirrors=mirrors, synced=synced)])
            self._remirror()

    def _member_name(self, member) -> str:
        if not member:
            return self.config.node
        return self.members.get(member, {}).get("name", member)
