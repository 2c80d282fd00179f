"""Issue 5 end to end: a real node with events=full, a pika workload whose outcome the client
knows, then the Spark job (local mode) must rebuild exactly those per-message states and counts.
Messages are named by the publisher's message_id property, which the job reports beside the
broker's msg_id."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time

import pika
import pyarrow.parquet as pq
import pytest

from amqp_helpers import safe_close, wait_until
from conftest import Broker, free_port
from test_management import Api

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="reads Leveret's own event log")


def _props(name, persistent=False):
    return pika.BasicProperties(message_id=name, correlation_id="c-" + name,
                                delivery_mode=2 if persistent else 1)


def test_spark_job_rebuilds_what_the_client_saw(tmp_path, spark):
    broker = Broker.start_leveret(tmp_path, "--events", "full")
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("dlx", "fanout")
        ch.queue_declare("dead")
        ch.queue_bind("dead", "dlx")
        ch.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
        ch.queue_declare("durable-work", durable=True)
        for name in ("acked-1", "acked-2", "requeued-then-acked", "rejected-to-dlx",
                     "left-unacked", "still-queued"):
            ch.basic_publish("", "work", name.encode(), _props(name))
        ch.basic_publish("", "durable-work", b"p", _props("persistent-acked", True))
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("", "no-such-queue", b"x", _props("unroutable"), mandatory=True)

        def take(queue):
            return _get(ch, queue)

        seen = {}
        for _ in range(3):
            m, props, _ = take("work")
            seen[props.message_id] = m
        ch.basic_ack(seen["acked-1"].delivery_tag)
        ch.basic_ack(seen["acked-2"].delivery_tag)
        ch.basic_nack(seen["requeued-then-acked"].delivery_tag, requeue=True)
        m, props, _ = take("work")
        assert props.message_id == "requeued-then-acked" and m.redelivered
        ch.basic_ack(m.delivery_tag)
        # what the client saw of that message: its two delivery tags, on channel 1
        tags = [seen["requeued-then-acked"].delivery_tag, m.delivery_tag]
        m, props, _ = take("work")
        assert props.message_id == "rejected-to-dlx"
        ch.basic_reject(m.delivery_tag, requeue=False)
        # a second channel takes one and closes with it unacked: it goes back to the queue
        ch2 = conn.channel()
        m2 = _get(ch2, "work")
        assert m2[1].message_id == "left-unacked"
        ch2.close()
        m, props, _ = take("durable-work")
        ch.basic_ack(m.delivery_tag)
        wait_until(lambda: ch.queue_declare("work", passive=True).method.message_count == 2)
        wait_until(lambda: ch.queue_declare("dead", passive=True).method.message_count == 1)
        safe_close(conn)
    finally:
        broker.stop()                               # the node's processes flush their events

    from spark_analysis import lifecycle
    out = broker.data_dir / "analysis"  # where `make analyze` writes (DATA/analysis)
    args = lifecycle.parse_args(["--events", str(broker.data_dir / "events"),
                                 "--out", str(out), "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    every = pq.read_table(out / "lifecycles").to_pylist()
    rows = {r["message_id"]: r for r in every if r["parent_msg_id"] is None}
    states = {k: rows[k]["final_state"] for k in rows}
    # the dead-lettered copy is a message of its own, linked to its parent, still in "dead"
    (child,) = [r for r in every if r["parent_msg_id"] is not None]
    assert child["parent_msg_id"] == rows["rejected-to-dlx"]["msg_id"]
    assert rows["rejected-to-dlx"]["dead_lettered_to"] == child["msg_id"]
    assert (child["final_state"], child["message_id"]) == ("queued", "rejected-to-dlx")
    assert states == {
        "acked-1": "acked", "acked-2": "acked", "requeued-then-acked": "acked",
        "rejected-to-dlx": "dead_lettered",
        "left-unacked": "queued", "still-queued": "queued", "persistent-acked": "acked",
        "unroutable": "returned"}
    assert rows["requeued-then-acked"]["redeliveries"] == 1
    assert rows["left-unacked"]["redeliveries"] == 0    # taken back, not yet delivered again
    anomalies = pq.read_table(out / "anomalies").to_pylist()
    assert anomalies == [], anomalies
    _traces_in_the_management_api(tmp_path)
    _find_a_message_by_what_the_client_knows(tmp_path, broker.data_dir, tags)


def _find_a_message_by_what_the_client_knows(tmp_path, data_dir, tags):
    """Where did my message go: the job's lookup layout finds a message by its message_id,
    correlation_id, routing key, queue or publish time, through /api/traces and
    `leveretctl trace`, and its path is what the client did, step by step."""
    port = free_port()
    broker = Broker.start_leveret(tmp_path, "--management-port", str(port))
    try:
        http = Api(port)

        def find(query):
            status, rows = http("GET", "/api/traces/analysis?" + query)
            assert status == 200, rows
            return rows
        (row,) = find("message_id=requeued-then-acked")
        assert find("correlation_id=c-requeued-then-acked") == \
            [dict(row, key="correlation_id", value="c-requeued-then-acked")]
        status, path = http("GET", f"/api/traces/analysis/{row['msg_id']}")
        assert status == 200 and path["msg_id"] == row["msg_id"]
        assert (path["message_id"], path["correlation_id"]) == \
            ("requeued-then-acked", "c-requeued-then-acked")
        kinds = [s["kind"] for s in path["steps"]]
        # the client's actions, in its order: publish, get, nack (requeue), get again, ack
        assert [k for k in kinds if k in ("publish_received", "fetched", "nacked", "requeued",
                                          "acked")] == [
            "publish_received", "fetched", "nacked", "requeued", "fetched", "acked"], kinds
        assert {"routed", "enqueued", "confirmed"} <= set(kinds)
        fetched = [s for s in path["steps"] if s["kind"] == "fetched"]
        assert [(s["delivery_tag"], s["channel"], s["queue"], s.get("redelivered"))
                for s in fetched] == [(tags[0], 1, "work", False), (tags[1], 1, "work", True)]
        times = [s["t_ns"] for s in path["steps"]]
        assert times == sorted(times) and times[0] == row["t_first_ns"]
        assert all(s["node"] and s["process"] and s["actor"] and s["time"]
                   for s in path["steps"])
        assert path["steps"][0]["time"] == row["t_first"]
        # a dead-lettered message: found by its correlation id, its copy one link away, and
        # the copy found by the queue it went to
        (parent,) = find("correlation_id=c-rejected-to-dlx")
        p = http("GET", f"/api/traces/analysis/{parent['msg_id']}")[1]
        (child_id,) = p["dead_lettered_to"]
        assert [r["msg_id"] for r in find("queue=dead")] == [child_id]
        child = http("GET", f"/api/traces/analysis/{child_id}")[1]
        assert child["parent_msg_id"] == parent["msg_id"]
        assert [s["kind"] for s in child["steps"]][:2] == ["dead_letter_published", "enqueued"]
        # by routing key: the six messages published to "work", and the copy (routed by the
        # parent's key), earliest first; limited
        work = find("routing_key=work")
        assert len(work) == 7 and child_id in {r["msg_id"] for r in work}
        assert [r["t_first_ns"] for r in work] == sorted(r["t_first_ns"] for r in work)
        assert find("routing_key=work&limit=2") == work[:2]
        # by publish time: between the first and the last publish to "work" (exclusive)
        first, last = work[0], work[5]
        between = find(f"from={_seconds(first['t_first_ns'])}"
                       f"&to={_seconds(last['t_first_ns'])}")
        assert [r["msg_id"] for r in between] == [r["msg_id"] for r in work[:5]]
        assert between[0]["message_id"] == "acked-1"
        assert find("traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") == []
        assert find("message_id=nope") == []
        assert http("GET", "/api/traces/analysis?message_id=a&queue=b")[0] == 400
        assert http("GET", "/api/traces/analysis")[0] == 400
        assert http("GET", "/api/traces/analysis?from=yesterday")[0] == 400
        assert http("GET", "/api/traces/analysis/00ff")[0] == 404
        assert http("GET", "/api/traces/nope?message_id=x")[0] == 404
        assert http("GET", "/api/traces/analysis?message_id=x", password="x")[0] == 401
    finally:
        broker.stop()
    # leveretctl prints the same path (no node needed: it reads the analysis folder)
    out = subprocess.run([sys.executable, "-m", "actors.ctl.commands", "--data-dir", str(data_dir),
                          "trace", "c-requeued-then-acked", "--by", "correlation_id"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == (f"msg_id {row['msg_id']}, message_id requeued-then-acked, "
                        "correlation_id c-requeued-then-acked")
    assert [ln.split()[2] for ln in lines[1:]] == kinds
    assert [ln.split()[0] for ln in lines[1:]] == [s["time"] for s in path["steps"]]


def _seconds(t_ns: int) -> str:
    """Unix seconds, exact to the ns, as the API's from= and to= take them."""
    return f"{t_ns // 1_000_000_000}.{t_ns % 1_000_000_000:09d}"


def _traces_in_the_management_api(tmp_path):
    """Issue 14 item 7: the node lists the analysis in its data dir and shows one message's
    lifecycle step by step (kind, actor, node, time) from the job's Parquet output."""
    port = free_port()
    broker = Broker.start_leveret(tmp_path, "--management-port", str(port))
    try:
        http = Api(port)
        status, found = http("GET", "/api/leveret/analyses")
        assert status == 200 and [(a["name"], a["messages"]) for a in found] == [
            ("analysis", 9)]
        listed = {m["message_id"]: m for m in
                  http("GET", "/api/leveret/analyses/analysis/messages")[1]}
        assert listed["requeued-then-acked"]["final_state"] == "acked"
        trace = http("GET", "/api/leveret/analyses/analysis/messages/requeued-then-acked")[1]
        kinds = [s["kind"] for s in trace["steps"]]
        assert kinds[0] == "publish_received" and kinds[-1] == "acked"
        assert kinds.count("fetched") == 2 and "requeued" in kinds, kinds
        assert all(s["node"] and s["actor"] and s["time"] for s in trace["steps"])
        by_id = http("GET", f"/api/leveret/analyses/analysis/messages/{trace['msg_id']}")[1]
        assert by_id["steps"] == trace["steps"]
        assert http("GET", "/api/leveret/analyses/analysis/messages/nope")[0] == 404
        # a dead-lettered message's client id names it, not its copy; the copy is one link away
        status, parent = http("GET", "/api/leveret/analyses/analysis/messages/rejected-to-dlx")
        assert status == 200, parent
        (dl,) = [s for s in parent["steps"] if s["kind"] == "dead_lettered"]
        child = http("GET", f"/api/leveret/analyses/analysis/messages/{dl['new_msg_id']}")[1]
        assert child["steps"][0]["kind"] == "dead_letter_published"
        assert child["steps"][0]["parent_msg_id"] == parent["msg_id"]
        assert http("GET", "/api/leveret/analyses/..%2Fdata/messages")[0] in (400, 404)
    finally:
        broker.stop()


def test_spark_job_sees_every_fate_the_client_caused(tmp_path, spark):
    """Purge, queue.delete, x-expires, an exclusive queue's owner leaving, tx.rollback and
    commit, a reject dead-lettered then consumed from the DLQ, a publish one of two queues
    refused: the job's verdict for each is what the client did."""
    broker = Broker.start_leveret(tmp_path, "--events", "full")
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.queue_declare("purge-me")
        for name in ("purged-1", "purged-2"):
            ch.basic_publish("", "purge-me", name.encode(), _props(name))
        wait_until(lambda: ch.queue_declare("purge-me", passive=True).method.message_count == 2)
        assert ch.queue_purge("purge-me").method.message_count == 2
        ch.basic_publish("", "purge-me", b"after", _props("after-purge"))

        ch.queue_declare("delete-me")
        for name in ("deleted-ready", "deleted-unacked"):
            ch.basic_publish("", "delete-me", name.encode(), _props(name))
        m, props, _ = _get(ch, "delete-me")
        assert props.message_id == "deleted-ready"  # held unacked from here on
        ch.queue_delete("delete-me")

        ch.queue_declare("expire-me", arguments={"x-expires": 300})
        ch.basic_publish("", "expire-me", b"e", _props("expired-queue"))

        owner = broker.connection()
        och = owner.channel()
        och.queue_declare("mine", exclusive=True)
        och.basic_publish("", "mine", b"x", _props("exclusive-owner-gone"))
        wait_until(lambda: och.queue_declare("mine", passive=True).method.message_count == 1)
        safe_close(owner)

        tx = conn.channel()
        tx.queue_declare("tx-q")
        tx.tx_select()
        tx.basic_publish("", "tx-q", b"r", _props("rolled-back"))
        tx.tx_rollback()
        tx.basic_publish("", "tx-q", b"c", _props("committed"))
        tx.tx_commit()

        ch.exchange_declare("dlx", "fanout")
        ch.queue_declare("dead")
        ch.queue_bind("dead", "dlx")
        ch.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
        ch.basic_publish("", "work", b"d", _props("rejected-to-dlx"))
        m, props, _ = _get(ch, "work")
        ch.basic_reject(m.delivery_tag, requeue=False)
        m, props, _ = _get(ch, "dead")
        assert props.message_id == "rejected-to-dlx"
        ch.basic_ack(m.delivery_tag)

        ch.exchange_declare("both", "fanout")
        ch.queue_declare("takes-it")
        ch.queue_declare("refuses-it", arguments={"x-max-length": 0,
                                                  "x-overflow": "reject-publish"})
        ch.queue_bind("takes-it", "both")
        ch.queue_bind("refuses-it", "both")
        ch.basic_publish("both", "", b"p", _props("partial"))
        confirming = conn.channel()
        confirming.confirm_delivery()
        with pytest.raises(pika.exceptions.NackError):
            confirming.basic_publish("", "refuses-it", b"n", _props("nacked"))

        wait_until(lambda: ch.queue_declare("takes-it", passive=True).method.message_count == 1)
        wait_until(lambda: ch.queue_declare("tx-q", passive=True).method.message_count == 1)
        # (a passive declare counts as a use: probe less often than the queue expires)
        wait_until(lambda: _gone(conn, "expire-me"), timeout=10, interval=0.5,
                   message="x-expires to delete expire-me")
        wait_until(lambda: _gone(conn, "mine"), message="the exclusive queue to go")
        safe_close(conn)
    finally:
        broker.stop()

    from spark_analysis import lifecycle
    out = tmp_path / "analysis"
    args = lifecycle.parse_args(["--events", str(broker.data_dir / "events"),
                                 "--out", str(out), "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    every = pq.read_table(out / "lifecycles").to_pylist()
    rows = {r["message_id"]: r for r in every if r["parent_msg_id"] is None}
    assert {k: r["final_state"] for k, r in rows.items()} == {
        "purged-1": "purged", "purged-2": "purged", "after-purge": "queued",
        "deleted-ready": "deleted", "deleted-unacked": "deleted",
        "expired-queue": "deleted", "exclusive-owner-gone": "deleted",
        "rolled-back": "rolled_back", "committed": "queued",
        "rejected-to-dlx": "dead_lettered", "partial": "queued",
        "nacked": "nacked_to_publisher"}
    assert rows["nacked"]["nack_reason"] == "reject-publish"
    (child,) = [r for r in every if r["parent_msg_id"] is not None]
    parent = rows["rejected-to-dlx"]
    assert child["parent_msg_id"] == parent["msg_id"] == \
        bytes.fromhex(child["parent_msg_id"]).hex()
    assert parent["dead_lettered_to"] == child["msg_id"]
    assert (child["final_state"], child["dead_letter_reason"], child["exchange"],
            child["routed_queues"], child["acks"]) == ("acked", "rejected", "dlx", ["dead"], 1)
    assert [c["queue"] for c in parent["copies"]] == ["work"]  # the copy is the child's
    anomalies = pq.read_table(out / "anomalies").to_pylist()
    assert [(a["kind"], a["message_id"], a["queue"]) for a in anomalies] == [
        ("partial_enqueue", "partial", "refuses-it")], anomalies


def _gone(conn, name) -> bool:
    """The queue no longer exists (a passive declare on a throwaway channel fails with 404)."""
    probe = conn.channel()
    try:
        probe.queue_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as e:
        return e.reply_code == 404
    safe_close(probe)
    return False


def _get(ch, queue):
    return wait_until(lambda: _nonempty(ch.basic_get(queue, auto_ack=False)),
                      message=f"a message in {queue}")


def _nonempty(got):
    return got if got[0] is not None else None


class Traffic:
    """A confirming publisher and an acking consumer on the durable queue `work`, each in a
    thread of its own that reconnects after any error (a killed worker or node): what the
    client saw is in `confirmed` (basic_publish returned: the broker confirmed it) and
    `consumed` (acked by the consumer)."""

    def __init__(self, broker: Broker):
        self.broker = broker  # host and port stay the same across a restart of the node
        self.confirmed: set[str] = set()  # message ids the publisher saw confirmed
        self.confirmed_at: dict[str, int] = {}  # message id -> wall clock ns of its confirm
        self.consumed: set[str] = set()  # message ids the consumer acked
        self.publishing = threading.Event()  # cleared: the publisher stops
        self.consuming = threading.Event()  # cleared: the consumer stops
        self.threads = [threading.Thread(target=self._publish),
                        threading.Thread(target=self._consume)]

    def start(self) -> None:
        with self.broker.connection() as conn:
            conn.channel().queue_declare("work", durable=True)
        self.publishing.set()
        self.consuming.set()
        for t in self.threads:
            t.start()

    def _publish(self) -> None:
        i = 0
        while self.publishing.is_set():
            try:
                with self.broker.connection() as conn:
                    ch = conn.channel()
                    ch.confirm_delivery()
                    while self.publishing.is_set():
                        name = f"m{i}"
                        i += 1
                        ch.basic_publish("", "work", name.encode(), _props(name, True))
                        self.confirmed_at[name] = time.time_ns()
                        self.confirmed.add(name)
            except pika.exceptions.AMQPError:
                time.sleep(0.2)  # a nack, or a connection closed by the kill

    def _consume(self) -> None:
        while self.consuming.is_set():
            try:
                with self.broker.connection() as conn:
                    ch = conn.channel()
                    while self.consuming.is_set():
                        m, props, _ = ch.basic_get("work", auto_ack=False)
                        if m is None:
                            time.sleep(0.01)
                            continue
                        ch.basic_ack(m.delivery_tag)
                        self.consumed.add(props.message_id)
            except pika.exceptions.AMQPError:
                time.sleep(0.2)

    def wait_for(self, confirmed: int, consumed: int = 0) -> None:
        wait_until(lambda: len(self.confirmed) >= confirmed and len(self.consumed) >= consumed,
                   timeout=60, message=f"{confirmed} confirmed, {consumed} consumed")

    def drain(self) -> None:
        """Stop publishing; consume until every confirmed message is acked and none is left."""
        self.publishing.clear()
        self.threads[0].join(30)
        with self.broker.connection() as conn:
            ch = conn.channel()
            wait_until(lambda: self.confirmed <= self.consumed and ch.queue_declare(
                "work", durable=True, passive=True).method.message_count == 0, timeout=60,
                message="the consumer to take every confirmed message")
        self.stop()

    def stop(self) -> None:
        self.publishing.clear()
        self.consuming.clear()
        for t in self.threads:
            if t.is_alive():
                t.join(30)


def _job_says_no_confirmed_message_is_lost(events_dir, out, spark,
                                           traffic: Traffic) -> list[dict]:
    """Runs the job; every confirmed message is acked, or unknown with a log gap as the
    reason, and none is lost; one whose every event was in the killed processes' buffers (its
    whole life within their last flush interval) is not in the lifecycles at all, and then a
    gap of a connection worker (which would have logged its publish and confirm) must span
    the moment of its confirm. Returns the gaps table."""
    from spark_analysis import lifecycle
    args = lifecycle.parse_args(["--events", str(events_dir), "--out", str(out),
                                 "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    rows = {r["message_id"]: r for r in pq.read_table(out / "lifecycles").to_pylist()}
    # the consumer took every message in the end: no lost verdict can be right, whether or
    # not the client saw its confirm (one confirmed as its connection died)
    lost = [a for a in pq.read_table(out / "anomalies").to_pylist() if a["kind"] == "lost"]
    assert not lost, lost[:5]
    confirmed = traffic.confirmed
    gaps = pq.read_table(out / "gaps").to_pylist()
    slack = 100_000_000  # the client's clock read against the broker's events: 0.1 s
    for name in confirmed - set(rows):
        t = traffic.confirmed_at[name]
        assert any(g["process"].startswith("conn-") and
                   g["t_from_ns"] - slack <= t <= g["t_to_ns"] + slack for g in gaps), \
            (name, t, gaps)
    for name in confirmed & set(rows):
        r = rows[name]
        assert r["final_state"] in ("acked", "unknown"), (name, r["final_state"])
        if r["final_state"] == "unknown":
            assert r["log_gap"].startswith("log gap in "), r["log_gap"]
    # connection ids carry their worker's run id: none can be taken for another run's
    ev = pq.read_table(out / "events", columns=["kind", "run_id", "connection"]).to_pylist()
    published = [e for e in ev if e["kind"] == "publish_received"]
    assert published and all(f"/{e['run_id']}." in e["connection"] for e in published)
    return gaps


@dataclasses.dataclass
class TwoKills:
    """What the module's kill run left: the job's gaps table and the pids killed."""
    gaps: list[dict]
    queue_worker_pid: int  # the queue worker killed -9 while its node ran on
    node_pid: int  # the node killed -9 (its workers with it) and started again on its data


@pytest.fixture(scope="module")
def two_kills(tmp_path_factory, spark) -> TwoKills:
    """Traffic on one node (events on, one queue worker) through two kills: its queue worker
    killed -9 (the node restarts it), then the whole node killed -9 and started again on its
    data; every confirmed message consumed, then one run of the job over the log holding both
    (a job run costs more than the traffic) and its checks
    (_job_says_no_confirmed_message_is_lost)."""
    tmp = tmp_path_factory.mktemp("kills")
    options = ("--events", "full", "--queue-workers", "1")
    broker = Broker.start_leveret(tmp, *options)
    traffic = Traffic(broker)  # (host and port stay the same across the node's restart)
    try:
        traffic.start()
        traffic.wait_for(confirmed=300, consumed=100)
        [victim] = broker.queue_worker_pids().values()
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: broker.queue_worker_pids() and
                   victim not in broker.queue_worker_pids().values(), timeout=30)
        traffic.wait_for(confirmed=len(traffic.confirmed) + 200)
        node_pid = broker.pid
        broker = broker.restart(tmp, "kill9", *options)
        traffic.wait_for(confirmed=len(traffic.confirmed) + 200)
        traffic.drain()
    finally:
        traffic.stop()
        broker.stop()
    gaps = _job_says_no_confirmed_message_is_lost(broker.data_dir / "events", tmp / "analysis",
                                                  spark, traffic)
    return TwoKills(gaps, victim, node_pid)


def test_kill_9_of_a_queue_worker_mid_traffic_leaves_no_confirmed_message_lost(two_kills):
    """A publisher (confirms) and a consumer (acks) run against a durable queue while its queue
    worker is killed -9: the worker's last buffered events are gone, its log has no
    process_stop. Every message the publisher saw confirmed must come out of the job `acked`
    or `unknown` with the gap as the reason, never `lost`, and the gap must be reported."""
    gaps = two_kills.gaps
    killed = [g for g in gaps
              if g["process"] == "queue-0" and g["pid"] == two_kills.queue_worker_pid]
    assert [g["kind"] for g in killed] == ["no_stop"], gaps
    assert "killed by signal SIGKILL" in killed[0]["reason"]  # the node saw it die


def test_kill_9_of_the_node_mid_traffic_leaves_no_confirmed_message_lost(two_kills):
    """The same traffic while the whole node is killed -9 (its workers die with it) and
    started again on its data: no process of the first boot wrote process_stop, and nothing
    saw them die; the job ends each of their gaps where the process started again."""
    gaps = two_kills.gaps
    node = [g for g in gaps if g["process"] == "node" and g["pid"] == two_kills.node_pid]
    assert [g["kind"] for g in node] == ["no_stop"], gaps
    assert "the process started again" in node[0]["reason"]
    assert {g["process"] for g in gaps if g["kind"] == "no_stop"} >= {"node", "queue-0",
                                                                      "conn-0"}
