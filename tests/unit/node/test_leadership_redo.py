"""A leader that loses its leadership before its entry is committed hands the requests that
give the same answer twice (declares, binds, exchange deletes) to the next leader instead of
failing the client with 541 (actors/node/metadata_cluster.py `_cluster_resync`, REDO_OPS); the
rest are still answered 541, since the next leader may or may not keep the entry (D1)."""
from __future__ import annotations

import threading
from collections import deque
from types import SimpleNamespace

from actors import messages as m
from actors.node.metadata import Metadata


class State:
    lock = threading.Lock()

    def snapshot(self):
        return 0, {}


class Node:
    """The fields and methods of Metadata that `_rpc`'s bookkeeping and `_cluster_resync` use;
    what the resync reloads from the log is stubbed."""
    _remember_redo = Metadata._remember_redo
    _answered = Metadata._answered
    _cluster_resync = Metadata._cluster_resync

    def __init__(self):
        self.cluster = SimpleNamespace(state=State())
        self.redoable, self.deferred, self.sent = {}, deque(), []
        self.leader_held, self.visible = deque(), deque()
        self.pending_start = {}
        self.tokens, self.promoting, self.elections = deque([1]), {}, {}
        self.epoch = self.barrier = "e"
        self.leading_since = 0.0
        self.members, self.workers, self.version = {}, {}, 0

    def _send_local(self, reply_to, reply):
        self._answered(reply_to, reply)
        self.sent.append((reply_to, reply))

    def _load_state(self, seq, snap):
        pass

    def _start_own_queues(self):
        pass

    def snapshot(self):
        return {}


def rpc(op, req_id, reply_to="tcp://channel#1"):
    return m.Rpc(reply_to, req_id, op, {"vhost": "/", "name": f"q{req_id}"})


def test_uncommitted_declares_go_to_the_next_leader_others_get_541():
    node = Node()
    declare, purge, fresh = rpc("queue.declare", 1), rpc("queue.purge", 2), rpc("bind", 3)
    for r in (declare, purge, fresh):
        node._remember_redo(r)
    # the declare waits for its entry, the purge for its commit, the bind for its queue start
    node.leader_held.extend([(1, declare.reply_to, m.RpcReply(1, True, None)),
                             (1, purge.reply_to, m.RpcReply(2, True, None))])
    node.pending_start[("/", "q3")] = [(fresh.reply_to, 3, None)]
    node._cluster_resync()
    assert [msg for _, msg in node.deferred] == [declare, fresh]
    assert [(to, r.req_id, r.code) for to, r in node.sent] == [(purge.reply_to, 2, 541)]
    assert node.redoable == {} and node.epoch is None


def test_answered_requests_are_forgotten():
    node = Node()
    declare = rpc("exchange.declare", 4)
    node._remember_redo(declare)
    node._send_local(declare.reply_to, m.RpcReply(4, True, None))
    assert node.redoable == {}
    node._remember_redo(rpc("exchange.declare", 5, reply_to=""))  # the node's own: no client
    assert node.redoable == {}

