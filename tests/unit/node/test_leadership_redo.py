"""A leader that loses its leadership before its entry is committed hands the requests that
give the same answer twice (declares, binds, exchange deletes) to the next leader instead of
failing the client with 541 (actors/node/metadata_cluster.py `_cluster_resync`, `Op.REDO` in actors/metadata_ops.py); the
rest are still answered 541, since the next leader may or may not keep the entry (D1)."""
from __future__ import annotations

import threading
from collections import deque
from types import SimpleNamespace

from actors import messages as m
from actors import metadata_ops as ops
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


def remember(node, op, req_id, reply_to="tcp://channel#1"):
    """The request as `_rpc` hands it to `_remember_redo`: the Rpc and its decoded record."""
    msg = ops.rpc(reply_to, req_id, op)
    node._remember_redo(msg, op)
    return msg


def exchange_declare(name):
    return ops.ExchangeDeclare("/", name, "direct", False, True, False, False, {})


def test_uncommitted_declares_go_to_the_next_leader_others_get_541():
    node = Node()
    declare = remember(node, ops.QueueDeclare("/", "q1", False, True, False, False, {}, ""), 1)
    purge = remember(node, ops.QueuePurge("/", "q2"), 2)
    fresh = remember(node, ops.Bind("/", "x", "queue", "q3", "", {}), 3)
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
    declare = remember(node, exchange_declare("x4"), 4)
    assert node.redoable  # (remembered until answered)
    node._send_local(declare.reply_to, m.RpcReply(4, True, None))
    assert node.redoable == {}
    remember(node, exchange_declare("x5"), 5, reply_to="")  # the node's own: no client
    assert node.redoable == {}
