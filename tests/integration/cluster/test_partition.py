"""Network partitions in a 3-node cluster (issue 15, items 1-3): pause_minority, one master per
queue, healed nodes rejoin.

Each node has a loopback address of its own (127.0.0.2-4: its Raft and ZeroMQ endpoints) and
the nodes run with LEVERET_FAULT_INJECTION (actors/faults.py), a file this test writes to cut
the links between two nodes both ways (Raft connections dropped and refused, ZeroMQ messages
dropped) and empties to heal them: no root, no firewall rules, nothing outside the nodes.

Behaviours: C5 (a confirm on a mirrored queue means every mirror has it), C6 (a queue that
cannot take responsibility nacks), as RabbitMQ's pause_minority (rabbit_node_monitor) pauses a
node cut from the majority: 320 CONNECTION_FORCED to its clients, no listener, no queue
masters, and a resume without restart."""

from __future__ import annotations

import json
import os
import time

import pika
import pytest
from pamqp import commands

from tests.integration.cluster.nodes import CLUSTER_START_TIMEOUT, Nodes
from tests.integration.rawamqp import Content, RawClient

pytestmark = pytest.mark.timeout(300)

HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
HEAL_S = 30  # the cluster serves through every node this soon after a heal
PROMOTE_S = 40  # a mirror of an isolated master is promoted this soon


class Partitioned(Nodes):
    """Three nodes whose links a test cuts and heals (actors/faults.py)."""

    def __init__(self, tmp_path):
        self.faults = tmp_path / "faults.json"
        super().__init__(tmp_path, 3, hosts=HOSTS,
                         env={"LEVERET_FAULT_INJECTION": str(self.faults)})

    def cut(self, *pairs) -> None:
        tmp = self.faults.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cut": [[HOSTS[a], HOSTS[b]] for a, b in pairs]}))
        os.replace(tmp, self.faults)

    def isolate(self, i: int) -> None:
        self.cut(*[(i, j) for j in range(3) if j != i])

    def heal(self) -> None:
        self.cut()

    def mend(self, timeout: float = CLUSTER_START_TIMEOUT) -> None:
        self.heal()  # (a test that failed before its own heal left its cut)
        super().mend(timeout)


@pytest.fixture(scope="module")
def cluster_starter():
    return Partitioned


@pytest.fixture
def cluster(mended):
    """The module's partitionable cluster, whole at the start of each test, healed and mended
    after it (conftest.py's KeptCluster)."""
    return mended


def ha_all(nodes) -> None:
    nodes[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')


def connect(nodes, i: int):
    """A connection to node i, or None while it refuses (paused)."""
    try:
        return nodes[i].connection(socket_timeout=2, stack_timeout=4)
    except pika.exceptions.AMQPError:
        return None


def round_trip(nodes, i: int, queue: str, body: bytes) -> bool:
    """Through node i: publish `body` to `queue` with a confirm, then get it back."""
    c = connect(nodes, i)
    if c is None:
        return False
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            method, _, got = ch.basic_get(queue, auto_ack=True)
            if method is not None:
                assert got == body, (got, body)
                return True
            time.sleep(0.05)
        return False
    except (pika.exceptions.AMQPError, pika.exceptions.NackError,
            pika.exceptions.UnroutableError):
        return False
    finally:
        try:
            c.close()
        except pika.exceptions.AMQPError:
            pass


def every_node_serves(nodes, queues) -> None:
    """Within HEAL_S: through every node, a publish with confirm and a get on every queue
    (declared on whichever node: their homes differ)."""
    deadline = time.monotonic() + HEAL_S
    for i in range(3):
        for q in queues:
            while not round_trip(nodes, i, q, b"via node%d to %s" % (i + 1, q.encode())):
                assert time.monotonic() < deadline, \
                    f"node{i + 1} does not serve {q} {HEAL_S} s after the heal:\n{nodes.logs()}"
                time.sleep(0.2)


def test_the_minority_pauses_closes_its_clients_with_320_and_resumes_after_the_heal(cluster):
    nodes = cluster
    with nodes[0].connection() as c:
        c.channel().queue_declare("plain.q1", durable=True)  # home: node 1
    with nodes[2].connection() as c:
        c.channel().queue_declare("plain.q3", durable=True)  # home: node 3
    client = nodes[2].connection()
    ch = client.channel()
    ch.basic_consume("plain.q1", lambda *a: None)

    nodes.isolate(2)
    # the client of node 3 is closed with RabbitMQ's 320 and its text
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            client.process_data_events(0.2)
    assert (closed.value.reply_code, closed.value.reply_text) == (320, SHUTDOWN_TEXT)
    # node 3 refuses new connections, and says why
    nodes.wait(lambda: connect(nodes, 2) is None, 15, "node3 to refuse connections")
    rows = nodes.status_rows(2)
    assert rows["leveret@node3"]["paused"] == "true", rows
    assert rows["leveret@node1"]["reachable"] == rows["leveret@node2"]["reachable"] == "false"
    assert "paused" in nodes[2].ctl("cluster_status").stdout.splitlines()[0]
    # the majority marks it down (through the log) and goes on
    nodes.wait(lambda: nodes.status_rows(0)["leveret@node3"]["up"] == "false", 20,
               "node1 to list node3 down")
    rows = nodes.status_rows(0)
    assert rows["leveret@node3"]["reachable"] == "false"
    assert rows["leveret@node3"]["paused"] == "unknown"  # node 1 cannot tell
    assert rows["leveret@node1"]["paused"] == rows["leveret@node2"]["paused"] == "false"
    assert round_trip(nodes, 1, "plain.q1", b"majority")

    nodes.heal()
    healed = time.monotonic()
    nodes.wait(lambda: connect(nodes, 2) is not None, HEAL_S, "node3 to accept again")
    every_node_serves(nodes, ["plain.q1", "plain.q3"])
    assert time.monotonic() - healed < HEAL_S
    def settled(i):  # every member up, reachable, not paused, and one leader, as node i sees it
        rows = nodes.status_rows(i)
        leaders = [name for name, r in rows.items() if r["leader"] == "true"]
        return (all(r["up"] == "true" and r["reachable"] == "true" and r["paused"] == "false"
                    for r in rows.values()) and len(leaders) == 1 and
                rows[leaders[0]]["up"] == "true")
    for i in range(3):  # no restart: the same processes; the links come back within the heal
        assert nodes[i].proc.poll() is None
        nodes.wait(lambda: settled(i), max(1.0, HEAL_S - (time.monotonic() - healed)),
                   f"node{i + 1}'s cluster_status to settle")


def test_one_master_the_isolated_home_stops_and_rejoins_as_a_synchronised_mirror__C5_C6(
        cluster):
    nodes = cluster
    ha_all(nodes)
    with nodes[0].connection() as c:
        c.channel().queue_declare("ha.q", durable=True)  # home: node 1
    nodes.wait(lambda: len(json.loads(nodes.queue_status(1).get("ha.q", {}).get(
        "synchronised_mirrors", "[]"))) == 2, 30, "2 synchronised mirrors")
    sent = 300
    with nodes[1].connection() as c:  # a backlog, confirmed (every mirror has it: C5)
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(sent):
            ch.basic_publish("", "ha.q", b"%d" % i, pika.BasicProperties(delivery_mode=2))

    # a consumer on the home node (a raw client: every frame seen, in order) acks 100, then
    # holds 10 unacked
    con = RawClient("127.0.0.1", nodes[0].port, timeout=10).handshake()
    con.open_channel(1)
    con.rpc(1, commands.Basic.Qos(prefetch_count=10), commands.Basic.QosOk)
    con.rpc(1, commands.Basic.Consume(queue="ha.q", consumer_tag="c1"),
            commands.Basic.ConsumeOk)
    acked, held = [], []
    while len(held) < 10:
        got = con.read_command()
        assert isinstance(got, Content), got
        if len(acked) < 100:
            acked.append(int(got.body))
            con.send_method(1, commands.Basic.Ack(delivery_tag=got.method.delivery_tag))
        else:
            held.append(int(got.body))
    # a publish on the same channel, confirmed: the master handled the acks before it, and
    # its mirrors the forgets before its batch (C5)
    con.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    con.publish(1, "", "ha.q", b"%d" % sent, commands.Basic.Properties(delivery_mode=2))
    con.expect(commands.Basic.Ack, channel=1)
    sent += 1
    pub = nodes[0].connection()
    pch = pub.channel()
    pch.confirm_delivery()

    nodes.isolate(0)
    late = None  # a publish to the isolated master: nacked (C6) or confirmed
    try:
        pch.basic_publish("", "ha.q", b"late", pika.BasicProperties(delivery_mode=2))
        late = True
    except pika.exceptions.NackError:
        late = False
    except pika.exceptions.AMQPError:
        late = False  # closed (320) before any confirm: not confirmed either
    # the consumer on the isolated home gets basic.cancel, then 320
    frames = []
    while not any(isinstance(f, commands.Connection.Close) for f in frames):
        frames.append(con.read_frame(timeout=15)[1])
    close = frames[-1]
    assert (close.reply_code, close.reply_text) == (320, SHUTDOWN_TEXT)
    assert any(isinstance(f, commands.Basic.Cancel) and f.consumer_tag == "c1"
               for f in frames), f"no basic.cancel before the close: {frames}"
    con.close()
    # the majority promotes a mirror: one master, on node 2 or 3 (within PROMOTE_S, as the
    # test below: 20 s were too few on a busy machine, in a fresh-clone run)
    try:
        nodes.wait(lambda: nodes.queue_status(1).get("ha.q", {}).get("master") in
                   ("leveret@node2", "leveret@node3"), PROMOTE_S, "a mirror promoted")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{nodes.logs()}") from None

    nodes.heal()
    # the old home rejoins as a mirror of the new master and synchronises
    nodes.wait(lambda: "leveret@node1" in nodes.queue_status(1).get("ha.q", {}).get(
        "synchronised_mirrors", ""), HEAL_S, "node1 a synchronised mirror again")
    row = nodes.queue_status(0)["ha.q"]
    assert row["master"] in ("leveret@node2", "leveret@node3") and row["running"] == "true"
    # everything left is delivered once, from the one master, through the old home
    got, redelivered = [], set()
    deadline = time.monotonic() + HEAL_S
    while True:
        c = connect(nodes, 0)
        if c is not None:
            break
        assert time.monotonic() < deadline, "node1 does not accept connections after the heal"
        time.sleep(0.2)
    with c:
        ch = c.channel()
        for method, props, body in ch.consume("ha.q", inactivity_timeout=3):
            if method is None:
                break
            got.append(body)
            if method.redelivered:
                redelivered.add(body)
            ch.basic_ack(method.delivery_tag)
    numbers = [int(b) for b in got if b != b"late"]
    assert len(numbers) == len(set(numbers)), "a message delivered twice after the heal"
    assert not set(numbers) & set(acked), "a message acked on the old master came back"
    assert set(numbers) | set(acked) == set(range(sent)), "a confirmed message was lost"
    assert {b"%d" % i for i in held} <= redelivered  # unacked at the cut: redelivered
    # a nack from the paused master is not proof the message went nowhere: its mirrors may
    # have taken it just before the cut and been promoted (a nacked-yet-delivered message,
    # which the publisher sends again, as after any nack); never twice, never lost if confirmed
    assert got.count(b"late") <= 1
    if late:
        assert b"late" in got, "a confirmed publish was lost"
    every_node_serves(nodes, ["ha.q"])


def test_a_healed_nodes_workers_are_reachable_again_from_every_node(cluster):
    """The other nodes marked the isolated node's workers dead; after the heal they take
    messages again: a queue homed on the healed node is used from the others, and the healed
    node's clients use queues homed on the others."""
    nodes = cluster
    for i in range(3):
        with nodes[i].connection() as c:
            c.channel().queue_declare(f"home{i + 1}", durable=True)
    nodes.isolate(1)
    nodes.wait(lambda: nodes.status_rows(0)["leveret@node2"]["up"] == "false", 20,
               "node1 to list node2 down")
    # node 2's durable queue waits for it (404 as RabbitMQ's, from the majority)
    with nodes[0].connection() as c:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            c.channel().queue_declare("home2", passive=True)
        assert e.value.reply_code == 404 and "is down or inaccessible" in e.value.reply_text
    nodes.heal()
    every_node_serves(nodes, ["home1", "home2", "home3"])
    # a consumer on the healed node of a queue homed elsewhere, fed through a third node
    with nodes[1].connection() as c, nodes[2].connection() as p:
        ch = c.channel()
        pch = p.channel()
        pch.confirm_delivery()
        for i in range(20):
            pch.basic_publish("", "home1", b"%d" % i, pika.BasicProperties(delivery_mode=2))
        bodies = []
        for method, _, body in ch.consume("home1", inactivity_timeout=5):
            if method is None:
                break
            bodies.append(body)
            ch.basic_ack(method.delivery_tag)
            if len(bodies) == 20:
                break
        assert sorted(int(b) for b in bodies) == list(range(20))


def test_after_two_partitions_in_a_row_every_mirror_is_back_and_synchronised__C5(cluster):
    """The issue's run: after two partitions the mirrored queue had no mirror left with every
    node running. Here the home is isolated, then (after the heal) the new master's node: each
    time a mirror takes over, and after each heal the queue has its two synchronised mirrors
    again and nothing confirmed is lost."""
    nodes = cluster
    ha_all(nodes)
    with nodes[0].connection() as c:
        ch = c.channel()
        ch.queue_declare("ha.twice", durable=True)
        nodes.wait(lambda: len(json.loads(nodes.queue_status(0).get("ha.twice", {}).get(
            "synchronised_mirrors", "[]"))) == 2, 30, "2 synchronised mirrors")
        ch.confirm_delivery()
        for i in range(100):
            ch.basic_publish("", "ha.twice", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    names = ["leveret@node1", "leveret@node2", "leveret@node3"]
    for _ in range(2):
        master = names.index(nodes.queue_status(0)["ha.twice"]["master"])
        observer = (master + 1) % 3
        nodes.isolate(master)
        # (the majority's leader marks the master's node down DOWN_AFTER_S after the cut, and
        # only once it has led LEASE_S: a new leader's 9 s, ticks and the promotion on a busy
        # machine; one clean-clone run took over 20 s)
        try:
            nodes.wait(lambda: nodes.queue_status(observer).get("ha.twice", {}).get("master")
                       not in (None, names[master]), PROMOTE_S, "a mirror promoted")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{nodes.logs()}") from None
        nodes.heal()
        nodes.wait(lambda: sorted(json.loads(nodes.queue_status(observer)["ha.twice"][
            "synchronised_mirrors"])) == sorted(n for n in names if n != nodes.queue_status(
                observer)["ha.twice"]["master"]), HEAL_S, "both mirrors synchronised again")
    for i in range(3):
        rows = nodes.status_rows(i)
        assert all(r["up"] == "true" and r["paused"] == "false" for r in rows.values()), rows
    got = nodes.drain(2, "ha.twice")
    assert got == set(range(100))


def test_a_bridged_cut_keeps_the_leader_and_the_bridge_serving(cluster):
    """Node A cut from the leader C, both still reach the bridge B (issue 15: each heal caused
    3-5 elections). A loses its leader and pauses (pause_minority's view: it cannot hear one),
    and campaigns; B, hearing C, must not take A's higher term and drop C (Raft's rule that a
    server that has heard from a current leader within the minimum election timeout ignores
    vote requests, Ongaro's thesis 4.2.3). So through the cut C keeps leading, B follows it and
    serves; A pauses, and comes back after the heal."""
    nodes = cluster
    c = nodes.leader(0)
    a, b = [j for j in range(3) if j != c]
    with nodes[b].connection() as conn:
        conn.channel().queue_declare("bridge.q", durable=True)  # home: the bridge
    nodes.cut((a, c))
    cut = time.monotonic()
    seen = []
    while time.monotonic() - cut < 8:
        status = nodes.status(b)
        seen.append([j for j in range(3) if status[f"leveret@node{j + 1}"][1]])
        assert round_trip(nodes, b, "bridge.q", b"through the bridge"), \
            f"the bridge node{b + 1} stopped serving {time.monotonic() - cut:.1f} s into the " \
            f"cut; leaders seen from it: {seen}\n{nodes.logs()}"
        time.sleep(0.3)
    assert all(s == [c] for s in seen), (c, seen)
    nodes.wait(lambda: connect(nodes, a) is None, 10, f"node{a + 1} (cut from the leader) to "
               "pause")
    nodes.heal()
    every_node_serves(nodes, ["bridge.q"])
