"""Lifecycle events ordered by the hybrid logical clock (actors/hlc.py), not by the processes'
clocks: the queue workers run with their clock 5 s ahead of the connection workers (a test-only
skew, actors/faults.py, standing for two hosts whose clocks disagree). Read by their own
clocks, a message is confirmed and acked before the queue even stored or delivered it; the
Spark job, ordering by the hybrid clock, rebuilds every message as acked with no anomaly and
reports the skew it relied on (C1, C3)."""
from __future__ import annotations

import glob
import json
import os

import pika
import pyarrow.parquet as pq
import pytest

from actors import events
from conftest import Broker

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="reads Leveret's own event log")

SKEW_MS = 5000
N = 20


def _own_clock_times(events_dir) -> dict:
    """{(process kind, event kind, message_id-less msg_id hex): time by the process's own clock}
    read straight from the files (each header maps its monotonic clock onto its wall clock)."""
    times = {}
    for path in glob.glob(os.path.join(events_dir, "*.events")):
        header, evs = events.read_file(path)
        offset = header["wall_ns"] - header["mono_ns"]
        kind_of_process = header["process"].partition("-")[0]
        for ev in evs:
            if ev[1] is not None:
                times[(kind_of_process, ev[0], ev[1].hex())] = ev[3] + offset
    return times


def test_events_of_processes_with_disagreeing_clocks_are_ordered_by_cause__C1(tmp_path, spark):
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"clock_skew_ms": {"queue": SKEW_MS}}))
    broker = Broker.start_leveret(tmp_path, "--events", "full",
                                  env={"LEVERET_FAULT_INJECTION": str(faults)})
    try:
        with broker.connection() as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("skewed", durable=True)
            for i in range(N):
                ch.basic_publish("", "skewed", b"x", pika.BasicProperties(
                    message_id=f"m{i}", delivery_mode=2))
            got = 0
            for method, _, _ in ch.consume("skewed", inactivity_timeout=10):
                assert method is not None, f"only {got} of {N} delivered"
                ch.basic_ack(method.delivery_tag)
                got += 1
                if got == N:
                    break
            ch.cancel()
    finally:
        broker.stop()
    events_dir = broker.data_dir / "events"
    own = _own_clock_times(events_dir)
    # the skew is real: by the processes' own clocks the confirm precedes the store
    confirmed = {mid for (proc, kind, mid) in own if (proc, kind) == ("conn", "confirmed")}
    assert len(confirmed) == N
    assert all(own[("conn", "confirmed", mid)] < own[("queue", "enqueued", mid)] - 10 ** 9
               for mid in confirmed)

    from spark_analysis import lifecycle
    out = tmp_path / "analysis"
    args = lifecycle.parse_args(["--events", str(events_dir), "--out", str(out),
                                 "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    rows = {r["message_id"]: r for r in pq.read_table(out / "lifecycles").to_pylist()}
    assert {k: r["final_state"] for k, r in rows.items()} == {f"m{i}": "acked" for i in range(N)}
    assert pq.read_table(out / "anomalies").to_pylist() == []
    ev = pq.read_table(out / "events", columns=["kind", "msg_id", "t_ns", "process"]).to_pylist()
    at = {(e["kind"], e["msg_id"].hex()): e["t_ns"] for e in ev if e["msg_id"] is not None}
    for mid in confirmed:
        assert at[("publish_received", mid)] < at[("enqueued", mid)] < at[("confirmed", mid)] \
            < at[("acked", mid)]
    runs = pq.read_table(out / "runs").to_pylist()
    lead = max(r["clock_lead_ns"] for r in runs if r["process"].startswith("conn-"))
    assert SKEW_MS * 10 ** 6 * 0.9 < lead < SKEW_MS * 10 ** 6 * 1.5, runs
