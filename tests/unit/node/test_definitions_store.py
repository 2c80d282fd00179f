"""The durable definitions store (actors/node/definitions.py): each durable queue is a record of
its own, so a drain of declares writes only those records; a full save replaces everything;
a store written before the records existed (its queues inside the one value) still loads."""
from __future__ import annotations

from actors.node.definitions import _KEY, Definitions
from actors.wire import packb, unpackb


def q(name, vhost="/", **more):
    return {"vhost": vhost, "name": name, "durable": True, "exclusive": "",
            "auto_delete": False, "arguments": {}, **more}


def names(defs) -> list:
    return sorted((x["vhost"], x["name"]) for x in defs.get("queues", []))


def test_an_empty_store_loads_nothing(tmp_path):
    assert Definitions(str(tmp_path)).load() == {}


def test_queue_records_are_written_and_dropped_alone(tmp_path):
    d = Definitions(str(tmp_path))
    d.save({"auth": {"users": ["guest"]}, "exchanges": [["/", "x"]], "queues": [q("a")]})
    d.save_queues([q("b"), q("c", vhost="v")], [])
    d.save_queues([q("b", arguments={"x-max-length": 1})], [("/", "a")])
    got = d.load()
    assert names(got) == [("/", "b"), ("v", "c")]
    assert next(x for x in got["queues"] if x["name"] == "b")["arguments"] == {
        "x-max-length": 1}
    assert got["auth"] == {"users": ["guest"]} and got["exchanges"] == [["/", "x"]]


def test_a_full_save_replaces_every_queue_record(tmp_path):
    d = Definitions(str(tmp_path))
    d.save_queues([q("a"), q("b")], [])
    d.save({"exchanges": [], "queues": [q("b"), q("z")]})
    assert names(d.load()) == [("/", "b"), ("/", "z")]
    d.save({"exchanges": []})
    assert names(d.load()) == []


def test_a_store_of_the_older_shape_loads_and_moves_to_records(tmp_path):
    d = Definitions(str(tmp_path))
    with d.env.begin(write=True) as txn:  # the value with its queues inside, as written before
        txn.put(_KEY, packb({"exchanges": [], "queues": [q("old1"), q("old2")]}))
    assert names(d.load()) == [("/", "old1"), ("/", "old2")]
    d.save_queues([q("new")], [])  # (a declare before any full save: both are read)
    assert names(d.load()) == [("/", "new"), ("/", "old1"), ("/", "old2")]
    d.save(d.load())
    with d.env.begin() as txn:
        assert "queues" not in unpackb(txn.get(_KEY))
    assert names(d.load()) == [("/", "new"), ("/", "old1"), ("/", "old2")]


def test_queue_records_and_the_rest_go_in_one_commit(tmp_path):
    d = Definitions(str(tmp_path))
    d.save({"bindings": [["/", "x", "queue", "a", "k", {}]], "queues": [q("a"), q("b")]})
    # a drain that deleted queue a: its record and its binding (in the one value) go together
    d.save_queues([], [("/", "a")], {"bindings": [], "queues": []})
    got = d.load()
    assert names(got) == [("/", "b")] and got["bindings"] == []
    with d.env.begin() as txn:
        assert "queues" not in unpackb(txn.get(_KEY))
