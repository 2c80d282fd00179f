"""Bugs planted in a real node through the test-only fault file (actors/faults.py), each in a
queue of its own, and the lifecycle job must name each one on the right message: an auditor is
only worth its salt if it catches the bugs it exists for (docs/events.md, "The auditor against
injected bugs").

One node with `--events full` and every bug planted; a pika client does what shows each bug
(publish with confirms, a clean restart, consume, reject to a dead-letter exchange) and records
what it saw; the node stops, the job runs once, and each test reads its verdict on one message.
Beside each bug a control queue without it: the same steps must come out clean.
"""
from __future__ import annotations

import json
import os
import time

import pika
import pyarrow.parquet as pq
import pytest

from conftest import Broker
from tests.faults.cluster import audit

pytestmark = [pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                 reason="plants bugs in Leveret's own node"),
              pytest.mark.timeout(480)]  # (the first test runs the node and the job)

BUGS = {"drop_synced_at_recovery": ["b.recovery"], "confirm_before_sync": ["b.early"],
        "deliver_twice": ["b.twice"], "lose_dead_lettered_copy": ["b.dl"]}


def _props(name):
    return pika.BasicProperties(message_id=name, delivery_mode=2)


def _consume(conn, ch, queue, n, timeout=5.0) -> list:
    """Up to n deliveries of a basic.consume within timeout (each acked), [(tag, message_id,
    redelivered)]."""
    got = []
    tag = ch.basic_consume(queue, lambda _c, m, p, _b: got.append(
        (m.delivery_tag, p.message_id, m.redelivered)), auto_ack=False)
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    conn.process_data_events(0.3)  # (more than asked for shows here)
    ch.basic_cancel(tag)
    for t, _, _ in got:
        ch.basic_ack(t)
    return got


@pytest.fixture(scope="module")
def planted(tmp_path_factory, spark):
    """Runs the scenario and the job; (what the client saw {message_id: Truth-like dict},
    lifecycles by message_id, anomalies)."""
    tmp = tmp_path_factory.mktemp("bugs")
    fault_file = tmp / "faults.json"
    fault_file.write_text(json.dumps({"bugs": BUGS}))
    env = {"LEVERET_FAULT_INJECTION": str(fault_file)}
    broker = Broker.start_leveret(tmp, "--events", "full", env=env)
    seen = {}  # message_id -> (confirmed, times a consumer read it)
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        for q in ("b.recovery", "c.recovery", "b.early", "c.early"):
            ch.queue_declare(q, durable=True)
        for q in ("b.recovery", "c.recovery"):
            for i in (1, 2):
                ch.basic_publish("", q, b"m", _props(f"{q}-{i}"))  # returns once confirmed
                seen[f"{q}-{i}"] = [True, 0]
        conn.close()
        broker.stop()  # a clean stop: the logs stay complete; recovery reads the index back
        broker = Broker.start_leveret(tmp, "--events", "full", port=broker.port, env=env)
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        for q in ("b.recovery", "c.recovery"):
            for _, mid, _ in _consume(conn, ch, q, 2, timeout=3.0):
                seen[mid][1] += 1
        for q in ("b.early", "c.early"):
            ch.basic_publish("", q, b"m", _props(f"{q}-1"))
            seen[f"{q}-1"] = [True, 0]
            for _, mid, _ in _consume(conn, ch, q, 1):
                seen[mid][1] += 1
        for q in ("b.twice", "c.twice"):
            ch.queue_declare(q)
            ch.basic_publish("", q, b"m", _props(f"{q}-1"))
            seen[f"{q}-1"] = [True, 0]
            for _, mid, _ in _consume(conn, ch, q, 2, timeout=2.0):
                seen[mid][1] += 1
        for q in ("b.dl", "c.dl"):
            dlx, dead = f"{q}.dlx", f"{q}.dead"
            ch.exchange_declare(dlx, "fanout")
            ch.queue_declare(dead)
            ch.queue_bind(dead, dlx)
            ch.queue_declare(q, arguments={"x-dead-letter-exchange": dlx})
            ch.basic_publish("", q, b"m", _props(f"{q}-1"))
            seen[f"{q}-1"] = [True, 0]
            m, _, _ = ch.basic_get(q, auto_ack=False)
            ch.basic_reject(m.delivery_tag, requeue=False)
            seen[f"{dead}-copy"] = [False, 0]  # the dead-lettered copy: a message of its own
            for _, mid, _ in _consume(conn, ch, dead, 1, timeout=2.0):
                seen[f"{dead}-copy"][1] += 1
        conn.close()
    finally:
        broker.stop()
    from spark_analysis import lifecycle
    out = tmp / "analysis"
    args = lifecycle.parse_args(["--events", str(broker.data_dir / "events"), "--out", str(out),
                                 "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    rows = pq.read_table(out / "lifecycles").to_pylist()
    anomalies = pq.read_table(out / "anomalies").to_pylist()
    by_name = {}
    for r in rows:
        name = r["message_id"]
        if r["parent_msg_id"] is not None:  # a dead-lettered copy: named after its queue
            name = f"{r['routed_queues'][0]}-copy" if r["routed_queues"] else f"{name}-copy"
        by_name[name] = (r, [a for a in anomalies if a["msg_id"] == r["msg_id"]])
    return seen, by_name


def _verdict(planted, name):
    """(the client's view, the job's verdict, the job's anomaly kinds) of one message, judged
    by audit.py as the Jepsen harness judges its runs."""
    seen, by_name = planted
    confirmed, reads = seen[name]
    lc, anomalies = by_name[name]
    view = audit.view_from_rows(lc, anomalies)
    row = audit.judge(audit.Truth(0, audit.CONFIRMED if confirmed else audit.UNKNOWN, reads),
                      view)
    return row, view


def test_control_queues_come_out_clean(planted):
    seen, by_name = planted
    for name in ("c.recovery-1", "c.recovery-2", "c.early-1", "c.twice-1", "c.dl.dead-copy",
                 "b.recovery-2"):
        row, view = _verdict(planted, name)
        assert row.agreement == audit.EXACT and view.anomalies == (), (name, row, view)
    assert seen["c.twice-1"][1] == 1 and seen["c.dl.dead-copy"][1] == 1
    # the rejected originals: their fate is the client's reject, not a delivery
    for name in ("c.dl-1", "b.dl-1"):
        lc, anomalies = by_name[name]
        assert (lc["final_state"], anomalies) == ("dead_lettered", []), name


def test_a_synced_message_dropped_at_recovery_is_lost(planted):
    """The census the queue takes after its restart does not hold it: `lost`."""
    seen, _ = planted
    assert seen["b.recovery-1"] == [True, 0]  # confirmed, never came back
    row, view = _verdict(planted, "b.recovery-1")
    assert view.verdict == "lost" and "lost" in view.anomalies, view


def test_a_confirm_before_the_sync_is_confirmed_before_synced(planted):
    row, view = _verdict(planted, "b.early-1")
    assert row.agreement == audit.EXACT  # the client saw nothing wrong: acked
    assert view.anomalies == ("confirmed_before_synced",), view


def test_a_message_delivered_twice_is_acked_twice(planted):
    seen, _ = planted
    assert seen["b.twice-1"][1] == 2  # the client read it twice, redelivered=false both times
    row, view = _verdict(planted, "b.twice-1")
    assert row.agreement == audit.EXACT and view.deliveries == 2, (row, view)
    assert "acked_twice" in view.anomalies, view


def test_a_lost_dead_lettered_copy_is_lost(planted):
    seen, by_name = planted
    assert seen["b.dl.dead-copy"][1] == 0  # the client never got the copy
    lc, anomalies = by_name["b.dl.dead-copy"]
    assert lc["final_state"] == "not_enqueued" and lc["dead_letter_reason"] == "rejected"
    assert [a["kind"] for a in anomalies] == ["lost"], anomalies
