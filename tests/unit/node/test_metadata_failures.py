"""The metadata actor never leaves a caller without a reply, and one queue it cannot work the
mirrors of out does not stop the others (actors/node/metadata.py `_rpc`,
actors/node/metadata_cluster.py `_remirror`): on main a policy with ha-params "banana" made
int() raise inside the actor, the caller waited for ever and every later re-mirror pass
aborted at the first matching queue."""
from __future__ import annotations

import logging
from types import SimpleNamespace

from actors import messages as m
from actors.node.metadata import Metadata


class Node:
    """The fields of Metadata that `_rpc` and `_remirror` read, and those methods."""
    _rpc = Metadata._rpc
    _remirror = Metadata._remirror
    _mirrors_for = Metadata._mirrors_for
    _ha_mode = Metadata._ha_mode

    def __init__(self, queues=(), policies=None):
        self.replies, self.changes = [], []
        self.cluster = object()  # clustered: the mirrors are worked out
        self.me = "m1"
        self.config = SimpleNamespace(cluster_nodes=["m1", "m2", "m3"])
        self.members = {x: {"up": True, "name": f"n{x[1]}"} for x in ("m1", "m2", "m3")}
        self.queues = {(q["vhost"], q["name"]): q for q in queues}
        self.policies = policies or {}
        self.op_policies = {}

    def _route_rpc(self, rpc, op):
        return False

    def _remember_redo(self, rpc, op):
        pass

    def _reply(self, rpc, ok, result=None, code=0, text=""):
        self.replies.append((ok, code, text))

    def _change(self, *changes):
        self.changes.extend(changes)

    class resources:  # the resource monitor `status` asks, failing as int("banana") does
        @staticmethod
        def status():
            raise ValueError("invalid literal for int() with base 10: 'banana'")


def queue(name, **more):
    return {"vhost": "/", "name": name, "home": "m1", "mirrors": [], "synced": [],
            "arguments": {}, **more}


def test_an_operation_that_fails_unexpectedly_is_answered_with_an_error(caplog):
    node = Node()
    with caplog.at_level(logging.ERROR):
        node._rpc(m.Rpc("tcp://asker#x", 7, "status", {}))
    assert node.replies == [(False, 541, "INTERNAL_ERROR - status failed: ValueError(\"invalid "
                                          "literal for int() with base 10: 'banana'\")")]
    assert "rpc status failed" in caplog.text


def test_a_stored_policy_with_bad_ha_params_gives_no_mirrors_and_no_failure():
    bad = {"vhost": "/", "name": "bad", "pattern": "^b", "priority": 0, "apply_to": "all",
           "definition": {"ha-mode": "exactly", "ha-params": "banana"}}
    good = {"vhost": "/", "name": "good", "pattern": "^g", "priority": 0, "apply_to": "all",
            "definition": {"ha-mode": "nodes", "ha-params": ["n3"]}}
    node = Node([queue("b.q"), queue("g.q")], {("/", "bad"): bad, ("/", "good"): good})
    node._remirror()
    assert node.changes == [["queue_put", queue("g.q", mirrors=["m3"])]]


def test_one_queue_that_cannot_be_worked_out_does_not_stop_the_others(caplog):
    node = Node([queue("broken", arguments=["not", "a", "table"]),
                 queue("ha.q", arguments={"x-ha-mode": "all"})])
    with caplog.at_level(logging.ERROR):
        node._remirror()
    assert node.changes == [["queue_put", queue("ha.q", arguments={"x-ha-mode": "all"},
                                                mirrors=["m2", "m3"])]]
    assert "the mirrors of queue 'broken' in vhost '/' could not be worked out" in caplog.text
