"""Issue 5 end to end: a real node with events=full, a pika workload whose outcome the client
knows, then the Spark job (local mode) must rebuild exactly those per-message states and counts.
Messages are named by the publisher's message_id property, which the job reports beside the
broker's msg_id."""
from __future__ import annotations

import os

import pika
import pyarrow.parquet as pq
import pytest

from amqp_helpers import safe_close, wait_until
from conftest import Broker, free_port
from test_management import Api

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="reads Leveret's own event log")


def _props(name, persistent=False):
    return pika.BasicProperties(message_id=name, delivery_mode=2 if persistent else 1)


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
