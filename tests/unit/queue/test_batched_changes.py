"""The metadata actor hands a drain's changes to a queue worker as one batch (actors/node/
change_feed.py); the worker must end up as if each change list had gone out alone, in order.
Two things follow, driven here through the metadata actor's flush, the worker's control
dispatch, its QueueHost and real Mirror actors (their on_receive called directly; no
scheduler, no sockets):

- a mirror's StartQueue arrives behind the drain's later changes: one that they made stale
  (this node no longer listed) starts nothing, as if started, then stopped by that change;
- a mirror told of each change's master in order rejoins a master that restarted at the
  address it joined before: a quorum queue's leader elected again on the same queue worker, a
  classic master whose node paused and resumed. A member that started while its node's copy
  of the log still gave the master's address from before (where nothing served) sent its join
  there; without this it waited for a master it had already "joined" for good, and a publish
  to the quorum queue was never confirmed (test_confirms_need_a_majority__C5)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from actors import messages as m
from actors.config import Config
from actors.naming import queue_actor_name
from actors.node.change_feed import ChangeFeed
from actors.node.metadata import Metadata
from actors.queue import queue_host as queue_host_module
from actors.queue.mirror import Mirror
from actors.queue.queue_host import QueueHost
from actors.replica import Replica
from actors.store.storage import Storage
from actors.worker.process import _CONTROL
from storage_fakes import Ref

ME, LEADER = "n2:1", "n1:1"
MASTER = "tcp://n1:5#" + queue_actor_name("/", "q")
QQ = {"x-queue-type": "quorum"}


class Transport:
    def __init__(self):
        self.sent = []

    def set_fallback(self, fn):
        pass

    def address(self, name):
        return "tcp://n2:7#" + name

    def register(self, name, ref):
        return self.address(name)

    def unregister(self, name):
        pass

    def send(self, to, msg):
        self.sent.append((to, msg))

    def joins(self) -> list:
        return [to for to, x in self.sent if isinstance(x, m.MirrorJoin)]


class LocalRef:
    """A Mirror's reference as QueueHost holds it, the actor run in place."""

    actor_class = Mirror
    actor_urn = "urn:mirror"

    def __init__(self, actor):
        self.actor, self.alive = actor, True

    def is_alive(self):
        return self.alive

    def tell(self, msg):
        self.actor.on_receive(msg)

    def stop(self, block=True, timeout=None):
        self.alive = False


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A queue worker of node ME: its replica, QueueHost and control dispatch (MetaChange,
    StartQueue as WorkerControl applies them); the Mirrors it starts run in place, each
    with a backing queue that keeps what it is told."""
    config = Config(data_dir=str(tmp_path), storage_map_size=1 << 26, cluster_address=ME,
                    cluster_nodes=[LEADER, ME, "n3:1"])
    store = Storage(config)
    monkeypatch.setattr(Storage, "of", classmethod(lambda cls, c: store))
    host = QueueHost(config, Transport(), Replica(), "tcp://n2:1#metadata", 0)
    monkeypatch.setattr(queue_host_module, "monitor", lambda ref, watcher: None)

    def start_mirror(host_, q, member):
        mirror = Mirror(host_, q, member)
        monkeypatch.setattr(mirror, "_bq", lambda bq=Ref(): bq)
        mirror.on_start()
        return LocalRef(mirror)
    monkeypatch.setattr(Mirror, "start", start_mirror)
    control = SimpleNamespace(replica=host.replica, host=host, _applied=lambda version: None,
                              snapshot_seen=False, on_ready=lambda: None)

    def apply(msg):
        _CONTROL[type(msg)](control, msg)
    yield host, apply
    host.stop()


def qdef(**more) -> dict:
    return {"vhost": "/", "name": "q", "durable": True, "exclusive": "", "auto_delete": False,
            "arguments": QQ, "home": LEADER, "mirrors": [ME], "logs": [ME], "worker": 0,
            **more}


def running_mirror(host):
    ref = host.queues.get(queue_actor_name("/", "q"))
    return ref if ref is not None and ref.is_alive() else None


# --- a StartQueue behind the later changes of its queue ----------------------------------------
class Node:
    """The metadata actor's flush, its workers' control addresses and the wire."""
    _start_at = Metadata._start_at
    _flush_changes = Metadata._flush_changes

    def __init__(self):
        self.feed = ChangeFeed()
        self.workers = {("queue", 0): SimpleNamespace(control="q0#control"),
                        ("conn", 0): SimpleNamespace(control="c0#control")}
        self.sent = []
        self.transport = SimpleNamespace(send=lambda to, msg: self.sent.append((to, msg)))
        self.actor_ref = SimpleNamespace(tell=lambda msg: None)  # (FlushChanges: called below)
        self.version = 0

    def change(self, *changes):
        """What `_apply_changes` hands the feed for one change list."""
        self.version += 1
        self.feed.add(list(changes), self.version, False)

    def _persist(self, changes):
        pass

    def _release_replies(self):
        pass

    def to(self, control) -> list:
        return [msg for to, msg in self.sent if to == control]


def test_a_mirror_started_then_unlisted_in_the_same_drain_does_not_run(worker):
    host, apply = worker
    node = Node()
    listed = qdef(address=MASTER)
    node.change(["queue_put", listed])
    node._start_at("q0#control", m.StartQueue(dict(listed, address=None), "node", False))
    node.change(["queue_put", dict(listed, mirrors=[], logs=[])])  # (this node no longer holds one)
    node._flush_changes()
    for msg in node.to("q0#control"):
        apply(msg)
    assert running_mirror(host) is None
    # the conn worker only needs the changes: one MetaChange with both
    assert [len(x.changes) for x in node.to("c0#control")] == [2]


def test_a_mirror_unlisted_then_listed_again_in_the_same_drain_runs_anew(worker):
    host, apply = worker
    node = Node()
    listed = qdef(address=MASTER)
    apply(m.MetaSnapshot({"router": {}, "auth": {}, "queues": [listed]}, 0))
    apply(m.StartQueue(dict(listed, address=None), "node", False))
    first = running_mirror(host)
    node.change(["queue_put", dict(listed, mirrors=[])])  # its node marked down and up again
    node.change(["queue_put", listed])
    node._start_at("q0#control", m.StartQueue(dict(listed, address=None), "node", False))
    node._flush_changes()
    for msg in node.to("q0#control"):
        apply(msg)
    again = running_mirror(host)
    assert not first.is_alive() and again is not None and again is not first
    assert host.transport.joins() == [MASTER, MASTER]  # (the new one joined afresh)


# --- a master back at the address joined before ---------------------------------------------------
def test_a_member_that_joined_a_stale_address_rejoins_the_leader_elected_there(worker):
    host, apply = worker
    # this node restarted while the leader's node was paused: its copy of the log still gives
    # the leader's address from before the pause, where nothing serves: the join is lost
    stale = qdef(address=MASTER, epoch=0)
    apply(m.MetaSnapshot({"router": {}, "auth": {}, "queues": [stale]}, 0))
    apply(m.StartQueue(dict(stale, address=None), "node", False))
    assert host.transport.joins() == [MASTER]
    # one batch: the leader's node is listed down (an election), the election restarts the
    # queue on it (the next epoch), which serves at the same address again
    apply(m.MetaChange([["queue_put", dict(stale, address=None, electing=True)],
                        ["queue_put", dict(stale, address=None, electing=False, epoch=1)],
                        ["queue_put", dict(stale, address=MASTER, electing=False, epoch=1)]],
                       1))
    assert host.transport.joins() == [MASTER, MASTER]
    join = host.transport.sent[-1][1]
    assert join.mirror == host.transport.address(queue_actor_name("/", "q"))


def test_a_classic_mirror_rejoins_its_master_back_at_the_same_address(worker):
    host, apply = worker
    classic = qdef(address=MASTER, arguments={}, logs=None)
    apply(m.MetaSnapshot({"router": {}, "auth": {}, "queues": [classic]}, 0))
    apply(m.StartQueue(dict(classic, address=None), "node", False))
    # its master's node paused and resumed: no master for a while, then the same worker
    # serves it again, at the same address and epoch
    apply(m.MetaChange([["queue_put", dict(classic, address=None)]], 1))
    apply(m.MetaChange([["queue_put", dict(classic, address=MASTER)]], 2))
    assert host.transport.joins() == [MASTER, MASTER]


def test_a_mirror_whose_master_stays_does_not_join_again(worker):
    host, apply = worker
    q = qdef(address=MASTER, epoch=2)
    apply(m.MetaSnapshot({"router": {}, "auth": {}, "queues": [q]}, 0))
    apply(m.StartQueue(dict(q, address=None), "node", False))
    apply(m.MetaChange([["queue_put", dict(q, synced=[ME])],
                        ["queue_put", dict(q, synced=[ME], mirrors=[ME, "n3:1"])]], 1))
    assert host.transport.joins() == [MASTER]  # (a join again would resync it from scratch)


def test_a_mirror_that_started_on_a_newer_state_keeps_its_join(worker):
    """A mirror started while its worker applied a batch reads the replica with the whole
    batch in it; the check of an earlier change of that batch (no master yet) must not
    make it join again (each join resyncs it from scratch)."""
    host, apply = worker
    q = qdef(address=MASTER, epoch=1)
    apply(m.MetaSnapshot({"router": {}, "auth": {}, "queues": [dict(q, address=None)]}, 0))
    host.replica.apply([["queue_put", q]])  # (the batch, applied before the mirror's start)
    apply(m.StartQueue(dict(q, address=None), "node", False))
    assert host.transport.joins() == [MASTER]
    running_mirror(host).tell(m.CheckMaster(host.replica.version))  # (told for that batch)
    assert host.transport.joins() == [MASTER]
