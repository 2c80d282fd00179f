"""The replicated definitions log of a cluster: Raft through pysyncobj (docs/cluster.md says why).

Mirrors what mnesia's replicated tables give RabbitMQ: every node holds the same exchanges,
bindings, queues (with their home node and mirrors), users, vhosts, permissions, policies and
cluster members, changed in one order everywhere, and only with a majority's agreement.

Owns:
- `ReplicatedState`: the state machine. Its one replicated method, `commit(entry)`, applies an
  entry's change list (actors/replica.py's change format) and counts it (`seq`, the same on every
  node for the same entry); pysyncobj journals entries under `<data_dir>/cluster/` and dumps the
  whole state when it compacts its log, so a restarted node reloads it before it rejoins;
- `Cluster`: the pysyncobj node (a thread of its own), leadership and connectivity questions.

The metadata actor (actors/node/metadata.py) is the only user: the leader's metadata actor executes
operations and commits their changes; every node's metadata actor hears each applied entry
through `listener(seq, entry)` (called on pysyncobj's thread, in log order).
"""

from __future__ import annotations

import logging
import os
import threading

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from actors.node import raft_storage
from actors.core.permissions import AuthDB
from actors.core.routing import Router
from actors.replica import apply_change

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
                "members": {k: dict(v) for k, v in self.members.items()}}


class Cluster:
    """One node's Raft member. `me` and every member are named by their raft address."""

    def __init__(self, cluster_nodes, me: str, data_dir: str, on_state_changed=None):
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
            raftMinTimeout=0.5, raftMaxTimeout=1.2, appendEntriesPeriod=0.1,
            connectionTimeout=2.0, connectionRetryTime=0.5,
            leaderFallbackTimeout=2.0,  # a leader cut off from the majority steps down
            commandsWaitLeader=False,
            useFork=False)  # never fork a process full of threads and ZeroMQ sockets
        others = [n for n in self.nodes if n != me]
        raft_storage.install()  # fsync what pysyncobj writes (actors/node/raft_storage.py)
        self.raft = SyncObj(me, others, conf=conf, consumers=[self.state])

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

    def close(self) -> None:
        self.raft.destroy_synchronous()
