"""The node's shovels follow the parameters and the members: started when owned, stopped when
cleared, changed (then started with the new value) or moved; a stopped runner's late status
is not kept (actors/shovel/supervisor.py). Runners are fakes: no sockets, no threads."""

from __future__ import annotations

import threading

from actors.shovel.status import RUNNING, ShovelStatus
from actors.shovel.supervisor import ShovelSupervisor

VALUE = {"src-uri": "amqp://h", "src-queue": "a", "dest-uri": "amqp://h"}


class FakeRunner:
    made: list = []

    def __init__(self, spec, node, cluster_name, report, on_autodelete):
        self.spec, self.report, self.on_autodelete = spec, report, on_autodelete
        self.stopping = threading.Event()
        self.started = False
        FakeRunner.made.append(self)

    def start(self):
        self.started = True

    def stop(self):
        self.stopping.set()


def supervisor(deleted=None):
    FakeRunner.made = []
    return ShovelSupervisor("n1", "n1", lambda v, n: deleted.append((v, n))
                            if deleted is not None else None, runner=FakeRunner)


def test_starts_owned_shovels_and_restarts_one_whose_value_changed():
    sup = supervisor()
    sup.sync({("/", "shovel", "s1"): VALUE, ("/", "operator_policy", "p"): {}}, "", {})
    assert [(r.spec.name, r.started) for r in FakeRunner.made] == [("s1", True)]
    assert [r["state"] for r in sup.rows()] == ["starting"]
    first = FakeRunner.made[0]
    sup.sync({("/", "shovel", "s1"): VALUE}, "", {})
    assert len(FakeRunner.made) == 1  # unchanged: left running
    sup.sync({("/", "shovel", "s1"): dict(VALUE, **{"ack-mode": "no-ack"})}, "", {})
    assert first.stopping.is_set() and FakeRunner.made[1].spec.ack_mode == "no-ack"


def test_cleared_shovels_stop_and_their_late_statuses_are_dropped():
    sup = supervisor()
    sup.sync({("/", "shovel", "s1"): VALUE}, "", {})
    runner = FakeRunner.made[0]
    runner.report(ShovelStatus("/", "s1", RUNNING, "n1"))
    assert sup.rows()[0]["state"] == "running"
    sup.sync({}, "", {})
    assert runner.stopping.is_set() and sup.rows() == []
    runner.report(ShovelStatus("/", "s1", RUNNING, "n1"))  # its thread, after the stop
    assert sup.rows() == []


def test_only_the_owner_runs_it_and_it_moves_when_the_owner_goes():
    members = {"a": {"up": True}, "b": {"up": True}}
    on_a, on_b = supervisor(), supervisor()
    params = {("/", "shovel", "s1"): VALUE}
    on_a.sync(params, "a", members)
    on_b.sync(params, "b", members)
    runners = [s for s in (on_a, on_b) if s.runners]
    assert len(runners) == 1
    owner, other = (on_a, on_b) if on_a.runners else (on_b, on_a)
    gone = "a" if owner is on_a else "b"
    members = dict(members, **{gone: {"up": False}})
    other.sync(params, "b" if gone == "a" else "a", members)
    assert other.runners


def test_restart_and_autodelete_reach_the_metadata_callback():
    deleted = []
    sup = supervisor(deleted)
    sup.sync({("/", "shovel", "s1"): VALUE}, "", {})
    assert sup.restart(("/", "s1")) and len(FakeRunner.made) == 2
    assert FakeRunner.made[0].stopping.is_set() and FakeRunner.made[1].started
    assert not sup.restart(("/", "nope"))
    FakeRunner.made[1].on_autodelete(FakeRunner.made[1].spec)
    assert deleted == [("/", "s1")]
