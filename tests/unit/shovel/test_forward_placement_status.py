"""What a shovel publishes (rabbit_amqp091_shovel:forward/4), which node runs it in a
cluster, and its status row (rabbit_shovel_mgmt:format/2)."""

from __future__ import annotations

from actors.shovel import forward, params, placement
from actors.shovel.status import RUNNING, STARTING, TERMINATED, ShovelStatus, endpoints

BASE = {"src-uri": "amqp://u:p@h1", "src-queue": "a", "dest-uri": "amqp://h2"}


def spec(**more):
    return params.parse("/", "s1", dict(BASE, **more))


def test_target_keeps_what_the_parameter_does_not_set():
    assert forward.target(spec(), "ex", "rk") == ("ex", "rk")
    assert forward.target(spec(**{"dest-exchange": "d"}), "ex", "rk") == ("d", "rk")
    assert forward.target(spec(**{"dest-exchange": "d", "dest-exchange-key": "k"}),
                          "ex", "rk") == ("d", "k")
    assert forward.target(spec(**{"dest-queue": "q"}), "ex", "rk") == ("", "q")


def test_properties_set_publish_properties_and_leave_the_rest():
    props = {"content_type": "text/plain", "priority": 1, "headers": {"h": 1}}
    out = forward.properties(spec(**{"dest-publish-properties": {"priority": 5}}), props,
                             "c", "amqp://h1", "amqp://h2", 1000)
    assert out == {"content_type": "text/plain", "priority": 5, "headers": {"h": 1}}
    assert props["priority"] == 1  # not modified


def test_forward_and_timestamp_headers():
    out = forward.properties(spec(**{"dest-add-forward-headers": True,
                                     "dest-add-timestamp-header": True,
                                     "dest-queue": "b"}),
                             {"headers": {"x-shovelled": [{"shovel-name": "earlier"}]}},
                             "rabbit@a", "amqp://h1", "amqp://h2", 1234)
    assert out["headers"]["x-shovelled-timestamp"] == 1234
    first, second = out["headers"]["x-shovelled"]
    assert first == {"shovelled-by": "rabbit@a", "shovel-type": "dynamic",
                     "shovel-name": "s1", "shovel-vhost": "/", "src-uri": "amqp://h1",
                     "dest-uri": "amqp://h2", "src-queue": "a", "dest-queue": "b"}
    assert second == {"shovel-name": "earlier"}


def test_placement_one_owner_among_members_up_and_it_moves_when_that_node_goes():
    members = {"n1": {"up": True}, "n2": {"up": True}, "n3": {"up": True}}
    owners = {placement.owner(members, "/", f"s{i}") for i in range(30)}
    assert owners == {"n1", "n2", "n3"}  # spread
    first = placement.owner(members, "/", "s1")
    assert [placement.runs_here(m, members, "/", "s1") for m in members].count(True) == 1
    down = dict(members, **{first: {"up": False}})
    moved = placement.owner(down, "/", "s1")
    assert moved != first and moved is not None
    # the others' shovels stay where they were
    for i in range(30):
        was = placement.owner(members, "/", f"s{i}")
        if was != first:
            assert placement.owner(down, "/", f"s{i}") == was
    assert placement.owner({"n1": {"up": False}}, "/", "s1") is None
    assert placement.runs_here("", {}, "/", "s1")  # alone


def test_status_rows():
    s = spec(**{"dest-exchange": "x", "dest-exchange-key": "k"})
    row = ShovelStatus("/", "s1", RUNNING, "leveret@n1", timestamp=0, src_uri="amqp://h1",
                       dest_uri="amqp://h2", endpoints=endpoints(s)).row()
    assert {k: v for k, v in row.items() if k != "timestamp"} == {
        "node": "leveret@n1", "name": "s1", "vhost": "/", "type": "dynamic",
        "state": "running", "src_uri": "amqp://h1", "src_protocol": "amqp091",
        "dest_protocol": "amqp091", "dest_uri": "amqp://h2", "src_queue": "a",
        "dest_exchange": "x", "dest_exchange_key": "k"}
    assert len(row["timestamp"]) == len("2026-01-01 00:00:00")
    row = ShovelStatus("/", "s1", TERMINATED, "n", reason="source connection failed").row()
    assert row["state"] == "terminated" and row["reason"] == "source connection failed"
    assert "src_uri" not in ShovelStatus("/", "s1", STARTING, "n").row()
