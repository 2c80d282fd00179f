"""A worker's replica after a resync (a node that loaded the log's snapshot, as after a
partition, sends its workers a whole new MetaSnapshot): the hosts learn what the snapshot
changed as if the entries it stands for had come one by one, so a mirror whose master moved
checks it, a mirror that is no longer one stops, and channels consuming from a queue deleted
meanwhile are told (`Replica.load` returns the implied changes; actors/worker/process.py passes them
to the host)."""
from __future__ import annotations

from actors import messages as m
from actors.core.permissions import AuthDB
from actors.core.routing import Router
from actors.replica import Replica
from actors.worker.process import WorkerControl


def state(queues=(), policies=()):
    return {"router": Router().to_state(), "auth": AuthDB().to_state(),
            "queues": [dict(q) for q in queues], "policies": [dict(p) for p in policies],
            "op_policies": [], "limits": [], "members": {}}


Q1 = {"vhost": "/", "name": "q1", "home": "n1", "mirrors": ["n2"]}
Q2 = {"vhost": "/", "name": "q2", "home": "n1", "mirrors": []}
P = {"vhost": "/", "name": "ha", "pattern": ".*", "definition": {"ha-mode": "all"}}


def test_a_first_load_implies_every_queue_and_policy():
    changes = Replica().load(state([Q1], [P]))
    assert ["queue_put", Q1] in changes and ["policy_put", "/", "ha", P] in changes


def test_a_resync_implies_the_queues_moved_and_deleted_and_the_policies_changed():
    r = Replica()
    r.load(state([Q1, Q2], [P]))
    moved = dict(Q1, home="n2", mirrors=["n1"])
    changes = r.load(state([moved], []))
    assert sorted(map(str, changes)) == sorted(map(str, [
        ["queue_del", "/", "q2"], ["queue_put", moved], ["policy_del", "/", "ha"]]))
    assert r.queue("/", "q1") == moved and r.queue("/", "q2") is None


def test_an_unchanged_resync_implies_nothing():
    r = Replica()
    r.load(state([Q1], [P]))
    assert r.load(state([Q1], [P])) == []


class Host:
    def __init__(self):
        self.changed = []

    def metadata_changed(self, changes):
        self.changed.append(changes)


class Transport:
    def send(self, to, msg):
        pass


def test_the_worker_tells_its_host_what_a_resync_changed_but_not_the_first_snapshot():
    host, ready = Host(), []
    control = WorkerControl(Transport(), Replica(), "node#metadata", "queue", 0,
                            lambda: ready.append(1), host)
    control.on_receive(m.MetaSnapshot(state([Q1, Q2]), 1))
    assert ready == [1] and host.changed == []  # the host starts from the replica as it is
    control.on_receive(m.MetaSnapshot(state([Q1]), 2))
    assert host.changed == [[["queue_del", "/", "q2"]]]
