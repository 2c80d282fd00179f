"""The metadata actor's operations as a table (actors/metadata_ops.py, the records;
actors/node/metadata_dispatch.py, record -> handler): every operation has exactly one handler
whose parameters are its record's fields, unknown operations and bad arguments are refused
with a clear error before anything runs, and the cluster's routing reads the records' flags."""
from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from actors import messages as m
from actors import metadata_ops as ops
from actors.node.metadata import HANDLERS, Metadata
from actors.node.metadata_dispatch import build_table, handles


def sample(cls):
    """An instance of `cls` with a placeholder for each required field."""
    return cls(**{f.name: f"<{f.name}>" for f in fields(cls)
                  if f.default is MISSING and f.default_factory is MISSING})


def test_every_operation_has_exactly_one_handler():
    assert set(HANDLERS) == set(ops.OPS.values())
    assert len(set(HANDLERS.values())) == len(HANDLERS)


def test_the_wire_names_are_the_records_names():
    assert ops.OPS["queue.declare"] is ops.QueueDeclare
    assert {cls.NAME for cls in ops.OPS.values()} == set(ops.OPS)


@pytest.mark.parametrize("cls", list(ops.OPS.values()), ids=lambda c: c.NAME)
def test_a_record_goes_over_the_wire_and_back(cls):
    op = sample(cls)
    msg = ops.rpc("tcp://asker#x", 3, op)
    assert (msg.op, msg.req_id) == (cls.NAME, 3)
    back = m.decode(*m.encode(msg))
    assert ops.decode(back.op, back.args) == op


def test_an_unknown_operation_is_refused_540():
    with pytest.raises(ops.OpError) as e:
        ops.decode("queue.frobnicate", {})
    assert (e.value.reply_code, e.value.text) == (540, "unknown operation queue.frobnicate")


def test_an_unexpected_argument_is_refused_541():
    with pytest.raises(ops.OpError) as e:
        ops.decode("queue.purge", {"vhost": "/", "name": "q", "nmae": "q"})
    assert (e.value.reply_code, e.value.text) == (
        541, "bad request queue.purge: unexpected argument 'nmae'")


def test_a_missing_argument_is_refused_541():
    with pytest.raises(ops.OpError) as e:
        ops.decode("queue.purge", {"vhost": "/"})
    assert e.value.text == "bad request queue.purge: missing argument 'name'"


def test_defaults_fill_in_and_the_forwarders_origin_is_not_an_argument():
    op = ops.decode("queue.delete", {"vhost": "/", "name": "q", ops.ORIGIN: "m2"})
    assert op == ops.QueueDelete("/", "q", if_unused=False, if_empty=False, owner="")


def test_arguments_that_are_not_a_map_are_refused():
    with pytest.raises(ops.OpError) as e:
        ops.decode("status", ["x"])
    assert e.value.reply_code == 541


# --- the table refuses to build when handlers and operations do not match -----------------------
class Two:
    @handles(ops.QueuePurge)
    def purge(self, rpc, vhost, name):
        return "purged"

    @handles(ops.Status)
    def status(self, rpc):
        return "ok"


def test_a_matching_table_builds():
    table = build_table(Two, [ops.QueuePurge, ops.Status])
    assert table[ops.QueuePurge](Two(), None, vhost="/", name="q") == "purged"


def test_an_operation_without_a_handler_fails():
    with pytest.raises(TypeError, match="without a handler: QueueSync"):
        build_table(Two, [ops.QueuePurge, ops.Status, ops.QueueSync])


def test_a_handler_of_something_not_an_operation_fails():
    with pytest.raises(TypeError, match="status handles Status, which is not an operation"):
        build_table(Two, [ops.QueuePurge])


def test_two_handlers_of_one_operation_fail():
    class Again(Two):
        @handles(ops.Status)
        def status_again(self, rpc):
            return "again"
    with pytest.raises(TypeError, match="Status has two handlers"):
        build_table(Again, [ops.QueuePurge, ops.Status])


@pytest.mark.parametrize("params", ["vhost", "vhost, name, extra", "vhost, nmae",
                                    "vhost, name='q'"])
def test_a_handler_whose_parameters_differ_from_its_record_fails(params):
    namespace: dict = {}
    exec(f"def purge(self, rpc, {params}): pass", namespace)  # noqa: S102 - a test's handler
    bad = type("Bad", (), {"purge": handles(ops.QueuePurge)(namespace["purge"])})
    with pytest.raises(TypeError, match="purge takes"):
        build_table(bad, [ops.QueuePurge])


# --- the actor's dispatch ----------------------------------------------------------------------
class Node:
    """The fields of Metadata that `_rpc` reads; routing and replies recorded."""
    _rpc = Metadata._rpc

    def __init__(self, forward=False):
        self.replies, self.routed, self.forward = [], [], forward

    def _route_rpc(self, rpc, op):
        self.routed.append(op)
        return self.forward

    def _remember_redo(self, rpc, op):
        pass

    def _reply(self, rpc, ok, result=None, code=0, text=""):
        self.replies.append((ok, result, code, text))

    def _untrack(self, owner):
        pass


def test_an_unknown_operation_is_answered_and_never_forwarded():
    node = Node(forward=True)
    node._rpc(m.Rpc("tcp://asker#x", 1, "queue.frobnicate", {}))
    assert node.replies == [(False, None, 540,
                             "NOT_IMPLEMENTED - unknown operation queue.frobnicate")]
    assert node.routed == []


def test_a_bad_argument_is_answered_541_before_the_handler_runs():
    node = Node()
    node._rpc(m.Rpc("tcp://asker#x", 1, "limits", {"method": "set", "scope": "vhost"}))
    assert node.replies == [(False, None, 541, "INTERNAL_ERROR - bad request limits: missing "
                                               "argument 'name'")]


def test_the_handler_gets_the_records_fields():
    node = Node()
    node.auth = type("Auth", (), {"list_vhosts": staticmethod(lambda: ["/", "v2"])})()
    node._rpc(m.Rpc("tcp://asker#x", 1, "list", {"what": "vhosts"}))
    assert node.replies == [(True, ["/", "v2"], 0, "")]
    assert node.routed == [ops.List("vhosts")]


def test_a_forwarded_request_carries_the_decoded_record_and_its_origin():
    seen = []

    class Forwarding(Node):
        def _route_rpc(self, rpc, op):
            seen.append(rpc)
            return True
    Forwarding()._rpc(m.Rpc("tcp://asker#x", 4, "queue.delete",
                            {"vhost": "/", "name": "q", ops.ORIGIN: "m2"}))
    assert seen == [m.Rpc("tcp://asker#x", 4, "queue.delete",
                          {**ops.args_of(ops.QueueDelete("/", "q")), ops.ORIGIN: "m2"})]


def test_passwords_are_hashed_before_anything_else_sees_them():
    seen = []

    class Forwarding(Node):
        def _route_rpc(self, rpc, op):
            seen.append(op)
            return True
    Forwarding()._rpc(m.Rpc("", 0, "auth", {"method": "add_user", "args": ["u", "secret"]}))
    assert seen[0].method == "add_user_with_hash" and "secret" not in seen[0].args


def test_local_and_redo_flags():
    assert ops.MgmtLogin.LOCAL and ops.ClusterStatus.LOCAL and not ops.QueueDeclare.LOCAL
    assert {c.NAME for c in ops.OPS.values() if c.REDO} == {
        "queue.declare", "exchange.declare", "exchange.delete", "bind", "unbind"}


# --- the actor's message table -------------------------------------------------------------------
def test_messages_before_loading_only_cluster_traffic_and_an_answer_to_requests():
    from actors.node import metadata
    assert not set(metadata._ANY_TIME) & set(metadata._LOADED)
    assert m.Rpc in metadata._LOADED and m.ClusterEntry in metadata._ANY_TIME

    class Unloaded:
        on_receive = Metadata.on_receive
        loaded = False
        config = type("Config", (), {"host": "h"})()

        def __init__(self):
            self.sent = []

        def _send_local(self, reply_to, reply):
            self.sent.append((reply_to, reply))
    node = Unloaded()
    assert node.on_receive(m.Rpc("tcp://ctl#x", 9, "list", {"what": "vhosts"})) is None
    assert node.on_receive(m.QueueStats("/", "q", 1, {})) is None  # dropped until loaded
    [(to, reply)] = node.sent
    assert (to, reply.req_id, reply.ok, reply.code) == ("tcp://ctl#x", 9, False, 541)
    assert reply.text == "INTERNAL_ERROR - this node has not joined its cluster yet"


def test_an_ask_gets_its_handlers_answer():
    class Loaded:
        on_receive = Metadata.on_receive
        loaded = True
        config = type("Config", (), {"host": "h"})()
        workers = {("conn", 0): SimpleWorker(True), ("queue", 0): SimpleWorker(False)}
    assert Loaded().on_receive(m.ReadyWorkers()) == [("conn", 0)]


class SimpleWorker:
    def __init__(self, ready):
        self.ready = ready
