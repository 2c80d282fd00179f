"""A dynamic shovel in a 3-node cluster runs on exactly one node, every node lists it, and it
moves to another node when its node is killed -9 (docs/shovels.md, "In a cluster"). Its
source and destination are queues of a standalone node, so that only the shovel moves."""

from __future__ import annotations

import json

import pika

from conftest import Broker


def shovel_rows(nodes, i: int, name: str) -> list:
    res = nodes[i].ctl("shovel_status", "--formatter", "json", check=False)
    if res.returncode != 0:
        return []
    return [r for r in json.loads(res.stdout.split("\n", 1)[1]) if r["name"] == name]


def running_on(nodes, alive, name) -> set:
    """The nodes that say they run the shovel (each node's own rows name it)."""
    out = set()
    for i in alive:
        out |= {r["node"] for r in shovel_rows(nodes, i, name)
                if r["state"] == "running" and r["node"] == f"leveret@node{i + 1}"}
    return out


def count(broker, queue) -> int:
    with broker.connection() as c:
        try:
            return c.channel().queue_declare(queue, passive=True).method.message_count
        except pika.exceptions.ChannelClosedByBroker:
            return -1


def publish(broker, queue, numbers) -> None:
    with broker.connection() as c:
        ch = c.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for i in numbers:
            ch.basic_publish("", queue, str(i).encode(), pika.BasicProperties(delivery_mode=2))


def test_a_shovel_runs_on_one_node_and_moves_when_it_is_killed(nodes, tmp_path):
    ends = Broker.start_leveret(tmp_path / "ends")
    try:
        publish(ends, "cs-in", range(50))
        nodes[0].ctl("set_parameter", "shovel", "cs", json.dumps({
            "src-uri": ends.url, "src-queue": "cs-in", "dest-uri": ends.url,
            "dest-queue": "cs-out", "reconnect-delay": 0.5}))
        owner = nodes.wait(lambda: running_on(nodes, range(3), "cs"), 20, "the shovel running")
        assert len(owner) == 1
        nodes.wait(lambda: count(ends, "cs-out") == 50, 20, "the first messages moved")
        first = int(owner.pop()[-1]) - 1  # leveret@nodeN -> index
        nodes.kill9(first)
        alive = [i for i in range(3) if i != first]
        moved = nodes.wait(lambda: running_on(nodes, alive, "cs"), 30,
                           "the shovel running on another node")
        assert len(moved) == 1 and moved != {f"leveret@node{first + 1}"}
        publish(ends, "cs-in", range(50, 80))
        nodes.wait(lambda: count(ends, "cs-out") >= 80, 20, "the later messages moved")
        got = set()
        with ends.connection() as c:
            ch = c.channel()
            for method, _, body in ch.consume("cs-out", auto_ack=True, inactivity_timeout=1):
                if method is None:
                    break
                got.add(int(body))
        assert got == set(range(80))
        # still one runner, and the other live node lists it there too (ShovelStates, every
        # statistics interval)
        assert running_on(nodes, alive, "cs") == moved
        [other] = [i for i in alive if f"leveret@node{i + 1}" not in moved]
        nodes.wait(lambda: [(r["node"], r["state"]) for r in shovel_rows(nodes, other, "cs")]
                   == [(next(iter(moved)), "running")], 15, "the owner's status elsewhere")
        nodes[alive[0]].ctl("clear_parameter", "shovel", "cs")
        nodes.wait(lambda: not running_on(nodes, alive, "cs"), 20, "the shovel stopped")
    finally:
        ends.stop()
