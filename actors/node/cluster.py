"""The replicated definitions log of a cluster: Raft through pysyncobj (docs/cluster.md says why).

Mirrors what mnesia's replicated tables give RabbitMQ: every node holds the same exchanges,
bindings, queues (with their home node and mirrors), users, vhosts, permissions, policies and
cluster members, changed in one order everywhere, and only with a majority's agreement.

Owns:
- `ReplicatedState`: the state machine. Its one replicated method, `commit(entry)`, applies an
  entry's change list (actors/replica.py's change format) and counts it (`seq`, the same on every
  node for the same entry); pysyncobj journals entries under `<data_dir>/cluster/` and dumps the
  whole state when it compacts its log, so a restarted node reloads it before it rejoins;
- `Cluster`: the pysyncobj node (a thread of its own), leadership and connectivity questions;
- `SecureTransport`: pysyncobj's TCP transport, bound on `cluster_address` only, every frame
  encrypted and authenticated with the cluster secret (pysyncobj's `password`: Fernet, checked
  before anything is unpickled), members only (no 'readonly' nodes, no utility commands), and
  a refused peer logged on both sides.

The metadata actor (actors/node/metadata.py) is the only user: the leader's metadata actor executes
operations and commits their changes; every node's metadata actor hears each applied entry
through `listener(seq, entry)` (called on pysyncobj's thread, in log order).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from cryptography.fernet import InvalidToken
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from actors import faults, secure

from actors.node import raft_storage
from actors.core import pause
from actors.core.permissions import AuthDB
from actors.core.routing import Router
from actors.replica import apply_change, state_lists

log = logging.getLogger("leveret.cluster")


class ReplicatedState(SyncObjConsumer):
    def __init__(self):
        # set before SyncObjConsumer.__init__: pysyncobj does not serialise these two
        self.lock = threading.RLock()  # held while applying an entry and while copying state
        self.listener = None  # fn(seq, entry), the metadata actor's inbox
        super().__init__()
        self.router = Router()  # exchanges and bindings of every vhost
        self.auth = AuthDB.default()  # users, vhosts, permissions
        for vhost in self.auth.list_vhosts():
            self.router.add_vhost(vhost)
        self.queues: dict = {}  # (vhost, name) -> qdef, with "home" (a member id)
        self.policies: dict = {}  # (vhost, name) -> policy
        self.op_policies: dict = {}  # (vhost, name) -> operator policy
        self.limits: dict = {}  # ("vhost"|"user", name) -> limits
        self.parameters: dict = {}  # (vhost, component, name) -> value (shovels)
        self.members: dict = {}  # member id (raft address) -> member info
        self.seq = 0  # entries applied: the same number for the same entry on every node

    @replicated
    def commit(self, entry: dict) -> int:
        with self.lock:
            for change in entry["changes"]:
                try:
                    apply_change(self, change)
                except Exception:  # noqa: BLE001 - one bad change must not stop the log
                    log.exception("cluster: could not apply %r", change[:2])
            self.seq += 1
            seq = self.seq
            listener = self.listener
        if listener is not None:
            listener(seq, entry)
        return seq

    def snapshot(self) -> tuple[int, dict]:
        """(seq, state) copied at one point of the log; `listener` must be set by the caller
        under the same lock to hear every entry after it."""
        with self.lock:
            return self.seq, {
                "router": self.router.to_state(), "auth": self.auth.to_state(),
                "queues": [dict(q) for q in self.queues.values()],
                "policies": [dict(p) for p in self.policies.values()],
                **state_lists(self),
                "members": {k: dict(v) for k, v in self.members.items()}}


class Cluster:
    """One node's Raft member. `me` and every member are named by their raft address."""

    def __init__(self, cluster_nodes, me: str, data_dir: str, secret: bytes,
                 on_state_changed=None):
        self.me = me
        self.nodes = list(cluster_nodes)
        self.state = ReplicatedState()
        self.ready = threading.Event()  # the journal is loaded and the log caught up
        folder = os.path.join(os.path.abspath(data_dir), "cluster")
        os.makedirs(folder, exist_ok=True)
        conf = SyncObjConf(
            journalFile=os.path.join(folder, "raft.journal"),
            fullDumpFile=os.path.join(folder, "raft.dump"),
            onReady=self.ready.set,
            onStateChanged=on_state_changed,
            appendEntriesUseBatch=False,  # definitions are few: latency over throughput
            # (the three time-outs are what actors/core/pause.py's leases are computed from)
            raftMinTimeout=pause.RAFT_MIN_TIMEOUT_S, raftMaxTimeout=pause.RAFT_MAX_TIMEOUT_S,
            appendEntriesPeriod=0.1,
            connectionTimeout=pause.CONNECTION_TIMEOUT_S, connectionRetryTime=0.5,
            # a leader cut off from the majority steps down
            leaderFallbackTimeout=pause.LEADER_FALLBACK_S,
            commandsWaitLeader=False,
            useFork=False,  # never fork a process full of threads and ZeroMQ sockets
            bindAddress=me,  # cluster_address's host, not pysyncobj's default 0.0.0.0
            password=secure.raft_password(secret))  # nothing is unpickled without it
        others = [n for n in self.nodes if n != me]
        raft_storage.install()  # fsync what pysyncobj writes (actors/node/raft_storage.py)
        self.raft = SyncObj(me, others, conf=conf, consumers=[self.state],
                            transportClass=SecureTransport)
        if not callable(getattr(self.raft, "_SyncObj__getEntries", None)) or \
                not isinstance(getattr(self.raft, "_SyncObj__raftLastApplied", None), int):
            self.raft.destroy()
            raise RuntimeError("pysyncobj moved SyncObj.__getEntries or .__raftLastApplied: "
                               "check actors/node/cluster.py skip_matching against it")

    def submit(self, entry: dict, callback) -> None:
        """Append an entry; `callback(seq, failed)` runs on pysyncobj's thread."""
        def done(result, error):
            callback(result, error != FAIL_REASON.SUCCESS)
        self.state.commit(entry, callback=done)

    def is_leader(self) -> bool:
        return self.raft._isLeader()

    def leader(self) -> str | None:
        node = self.raft._getLeader()
        return None if node is None else node.id

    def connected(self) -> set:
        """Members this node has a live raft connection to (itself included)."""
        up = {self.me}
        for node in self.raft.otherNodes:
            if self.raft.isNodeConnected(node):
                up.add(node.id)
        return up

    def has_majority(self) -> bool:
        """This node has live raft connections to a majority of the members (itself
        included): otherwise it is in a minority (pause_minority pauses it)."""
        return 2 * len(self.connected()) > len(self.nodes)

    def leader_contact(self) -> bool:
        """This node leads with live raft connections to a majority, or follows a leader it
        has a live raft connection to (pysyncobj forgets its leader when it campaigns, at most
        raftMaxTimeout after the leader's last append_entries). Without it a node may reach a
        majority and still be marked down by a leader it cannot hear (actors/core/pause.py)."""
        if self.is_leader():
            return self.has_majority()
        leader = self.leader()
        return leader is not None and leader in self.connected()

    def close(self) -> None:
        self.raft.destroy_synchronous()


UNAUTHENTICATED_MAX_BYTES = 64 * 1024  # buffered from a peer before its handshake is done


class _CheckedEncryptor:
    """pysyncobj's Fernet for one connection, which logs frames that fail its check (pysyncobj
    drops the connection silently: "Why no logging of security errors?")."""

    def __init__(self, fernet, peer: str, inbound: bool):
        self.fernet = fernet  # pysyncobj's, keyed by the cluster secret
        self.peer = peer  # the remote address, or the member's raft address
        self.inbound = inbound  # the peer connected to us

    def encrypt_at_time(self, data, at):
        return self.fernet.encrypt_at_time(data, at)

    def decrypt(self, data):
        return self.fernet.decrypt(data)

    def extract_timestamp(self, data):  # the first call on every frame received
        try:
            return self.fernet.extract_timestamp(data)
        except InvalidToken:
            secure.throttled(("raft-frame", self.peer.rpartition(":")[0] if self.inbound
                              else self.peer),
                             "cluster: refused the raft connection %s %s: its frames are not "
                             "sealed with our cluster secret (a node with another secret, or "
                             "not a Leveret node)", "from" if self.inbound else "to", self.peer)
            raise


def skip_matching(message: dict, mine: list) -> dict:
    """An append_entries as Raft's receiver rule reads it: "if an existing entry conflicts with
    a new one (same index but different terms), delete the existing entry and all that follow
    it"; pysyncobj 0.3.17 deletes everything after `prevLogIdx` whenever the follower holds
    more, conflict or not, and logs CRITICAL "truncating already-applied log entries" when
    those were applied. That happens without any divergence whenever a leader sends again what
    the follower has (a node that connects late answers several heartbeats in flight with
    "reset": the leader rewinds to it once per answer and resends the same entries).

    `mine`: this node's entries from `prevLogIdx` on, as (command, index, term), as pysyncobj's
    `__getEntries(prevLogIdx)` returns them. Returns the message with the entries this node
    already holds (same index and term) skipped: `prevLogIdx` moved past them, and, when every
    entry sent matched and what this node holds beyond is of the sender's term (a leader never
    rewrites its own entries), to this node's last entry. Anything else (a conflict, a gap, a
    large entry in parts, a snapshot) goes to pysyncobj as it came."""
    if "prevLogIdx" not in message or "transmission" in message or len(mine) < 2:
        return message
    if mine[0][1] != message["prevLogIdx"] or mine[0][2] != message.get("prevLogTerm"):
        return message  # not ours at prevLogIdx: pysyncobj asks the leader to rewind
    entries = list(message.get("entries") or [])
    have = mine[1:]
    k = 0
    while k < len(entries) and k < len(have) and entries[k][1] == have[k][1] \
            and entries[k][2] == have[k][2]:
        k += 1
    if k == len(entries) and all(e[2] == message.get("term") for e in have[k:]):
        last = have[-1]
        return dict(message, prevLogIdx=last[1], prevLogTerm=last[2], entries=[])
    if k == 0:
        return message
    last = entries[k - 1]
    return dict(message, prevLogIdx=last[1], prevLogTerm=last[2], entries=entries[k:])


def _conn_socket(conn):
    return getattr(conn, "_TcpConnection__socket", None)  # pysyncobj 0.3.17's private name


class SecureTransport(TCPTransport):
    """pysyncobj's TCPTransport for cluster members only (pysyncobj 0.3.17: the hooks below are
    its own methods; a new pysyncobj needs them checked, as actors/node/raft_storage.py)."""

    def __init__(self, *args, **kwargs):
        self._handshaking: set = set()  # our outgoing connections waiting for the peer's key
        self._bind_failed_logged = False  # pysyncobj retries a failed bind without a word
        self._heard_leader: tuple | None = None  # (node, monotonic time): its last append_entries
        super().__init__(*args, **kwargs)
        # test-only partitions (actors/faults.py): None unless LEVERET_FAULT_INJECTION is set
        self._faults = faults.from_env(self._selfNode.host)

    def _cut(self, node) -> bool:
        return self._faults is not None and node is not None and \
            self._faults.cut(getattr(node, "address", "").rpartition(":")[0])

    def _onMessageReceived(self, node, message):  # noqa: N802 - every member's message
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "request_vote" and self._ignores_vote_request():
            return  # (pysyncobj's thread: the same one that runs the handler below)
        if kind == "append_entries" and "prevLogIdx" in message:
            # (pysyncobj's thread, which owns the log: read it as its own handler would)
            mine = self._syncObj._SyncObj__getEntries(message["prevLogIdx"])
            sent, message = message, skip_matching(message, mine)
            applied = self._syncObj._SyncObj__raftLastApplied
            if message is not sent and len(mine) > 1 and sent["prevLogIdx"] < applied:
                # (where pysyncobj would have logged CRITICAL "truncating already-applied")
                log.info("cluster: %s sent log entries from %d again; this node holds them "
                         "(applied up to %d): kept, not truncated", node.address,
                         sent["prevLogIdx"] + 1, applied)
        super()._onMessageReceived(node, message)
        if kind == "append_entries" and self._syncObj._getLeader() is node:
            self._heard_leader = (node, time.monotonic())

    def _ignores_vote_request(self) -> bool:
        heard = self._heard_leader
        current = heard is not None and self._syncObj._getLeader() is heard[0]
        return pause.ignores_vote_request(time.monotonic(), heard[1] if current else None,
                                          self._syncObj._isLeader())

    def _connectIfNecessarySingle(self, node):  # noqa: N802
        if self._cut(node):
            return False
        return super()._connectIfNecessarySingle(node)

    def send(self, node, message):
        if self._cut(node):
            return False
        return super().send(node, message)

    def addNode(self, node):  # noqa: N802 - pysyncobj's names
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None and conn.encryptor is not None:
            conn.encryptor = _CheckedEncryptor(conn.encryptor, node.address, inbound=False)

    def _onNewIncomingConnection(self, conn):  # noqa: N802
        super()._onNewIncomingConnection(conn)
        try:
            host, port = _conn_socket(conn).getpeername()[:2]
            peer = f"{host}:{port}"
        except (AttributeError, OSError):
            peer = "an unknown address"
        conn.encryptor = _CheckedEncryptor(conn.encryptor, peer, inbound=True)

    def _onIncomingMessageReceived(self, conn, message):  # noqa: N802
        # after the key exchange, a connecting peer must name itself as a member: pysyncobj
        # would also take 'readonly' (and stream it the log) or a utility command (a list)
        if conn.sendRandKey and not (isinstance(message, str) and
                                     message in self._nodeAddrToNode):
            what = "a readonly node" if message == "readonly" else \
                "a utility command" if isinstance(message, list) else "an unknown member"
            secure.throttled(("raft-who", conn.encryptor.peer.rpartition(":")[0]),
                             "cluster: refused the raft connection from %s: it says it is %s",
                             conn.encryptor.peer, what)
            self._unknownConnections.discard(conn)
            conn.disconnect()
            return
        if conn.sendRandKey and self._cut(self._nodeAddrToNode.get(message)):
            self._unknownConnections.discard(conn)
            conn.disconnect()  # a test cut the link to that member
            return
        super()._onIncomingMessageReceived(conn, message)

    def _onOutgoingConnected(self, conn):  # noqa: N802
        self._handshaking.add(conn)
        super()._onOutgoingConnected(conn)

    def _onOutgoingMessageReceived(self, conn, message):  # noqa: N802
        self._handshaking.discard(conn)
        super()._onOutgoingMessageReceived(conn, message)

    def _onDisconnected(self, conn):  # noqa: N802
        if conn in self._handshaking:
            self._handshaking.discard(conn)
            node = self._connToNode(conn)
            peer = node.address if node is not None else "a member"
            secure.throttled(("raft-refused", peer),
                             "cluster: raft member %s closed our connection during the "
                             "handshake: it refused our cluster secret (does it hold the same "
                             "cluster_secret_file?) or it is stopping", peer)
        super()._onDisconnected(conn)

    def tryGetReady(self):  # noqa: N802 - SyncObj's tick calls it (only) until bound
        try:
            super().tryGetReady()
        finally:
            if not self._ready and self._bindAttempts and not self._bind_failed_logged:
                self._bind_failed_logged = True
                log.warning("cluster: cannot listen on the raft address %s (in use?); this "
                            "node does nothing in the cluster until it can; retrying every "
                            "%ss", self._selfNode.address, self._syncObj.conf.bindRetryTime)
            elif self._ready and self._bind_failed_logged:
                self._bind_failed_logged = False
                log.info("cluster: listening on the raft address %s", self._selfNode.address)

    def _onTick(self):  # noqa: N802
        if self._faults is not None:
            for node, conn in list(self._connections.items()):
                if self._cut(node) and conn.state != CONNECTION_STATE.DISCONNECTED:
                    conn.disconnect()  # a test cut the link (actors/faults.py)
        super()._onTick()
        # a peer that has not proven it holds the secret gets little of our memory: pysyncobj
        # buffers a whole frame of the length it announces before checking anything
        for conn in list(self._unknownConnections):
            buffered = getattr(conn, "_TcpConnection__readBuffer", b"")
            if len(buffered) > UNAUTHENTICATED_MAX_BYTES:
                secure.throttled(("raft-big", conn.encryptor.peer.rpartition(":")[0]),
                                 "cluster: refused the raft connection from %s: %d bytes "
                                 "before its handshake", conn.encryptor.peer, len(buffered))
                self._unknownConnections.discard(conn)
                conn.disconnect()
