"""spark_analysis: the lifecycle job on synthetic logs written with actors/events.py.

One run of the job for the module, on the SparkSession tests/conftest.py shares: the known
workload and the planted anomalies share one log of two nodes; the tests then read what the job
wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from actors import events as writer
from analysis_workload import Sim, gap_workload, known_workload, planted_anomalies
from spark_analysis import lifecycle, log_reader
from spark_analysis import schema as S

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


# -- without Spark -------------------------------------------------------------------------------
def test_reader_schema_is_the_writers():
    assert S.SCHEMA == writer.SCHEMA
    assert set(S.KIND_ORDER) == set(writer.KINDS) and len(S.KIND_ORDER) == len(writer.KINDS)
    assert S.COPY_KINDS == writer.COPY_KINDS and S.PROCESS_KINDS == writer.PROCESS_KINDS
    assert S.MESSAGE_KINDS == writer.MESSAGE_KINDS
    assert S.PUBLISHER_KINDS == writer.PUBLISHER_KINDS
    assert S.LOG_KINDS == writer.LOG_KINDS
    assert S.DEAD_LETTER_KINDS == writer.DEAD_LETTER_KINDS
    assert S.REMOVAL_KINDS == writer.REMOVAL_KINDS and S.TX_KINDS == writer.TX_KINDS
    assert S.REPLICA_KINDS == writer.REPLICA_KINDS


def test_reader_decodes_what_the_writer_wrote(tmp_path):
    lg = writer.EventLog(str(tmp_path), "n1", "queue-0", flush_interval=3600)
    mid = os.urandom(16)
    lg.record("delivered", mid, 1_000, dict(
        queue="q", channel=3, delivery_tag=9, redelivered=True, queues=("a",),
        message_id=b"bytes-id", custom={"x": 1}))
    lg.record("queue_crashed", None, 1_500, dict(queue="q", channel="7"))
    lg.close()
    rows = log_reader.read_dir(str(tmp_path)).to_pylist()
    assert [(r["kind"], r["seq"]) for r in rows] == [
        ("process_start", 0), ("delivered", 1), ("queue_crashed", 2), ("process_stop", 3)]
    assert {r["run_id"] for r in rows} == {lg.run_id}
    rows = rows[1:3]
    r = rows[0]
    assert (r["node"], r["process"], r["msg_id"], r["queue"], r["channel"]) == \
        ("n1", "queue-0", mid, "q", 3)
    assert r["redelivered"] is True and r["queues"] == ["a"] and r["delivery_tag"] == 9
    assert r["message_id"] == "bytes-id"  # coerced to the column's type
    assert r["extra"] == '{"custom": {"x": 1}}'
    assert r["rank"] == S.RANK["delivered"]
    assert rows[1]["msg_id"] is None and rows[1]["channel"] == 7
    assert rows[1]["t_ns"] - r["t_ns"] == 500  # monotonic differences survive
    # the wall clock: the monotonic time mapped by the file header's pair of clocks
    h = log_reader.read_header(lg.paths[0])
    assert r["wall_ns"] == 1_000 + h["wall_ns"] - h["mono_ns"]


def test_script_entry_point_imports_without_the_package_on_the_path():
    env = dict(os.environ, PYTHONPATH="")
    out = subprocess.run([sys.executable, os.path.join(REPO, "spark_analysis", "lifecycle.py"),
                          "--help"], cwd="/", env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--events" in out.stdout and "--master" in out.stdout


# -- one Spark run -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("events")
    sim = Sim(str(root))
    known = known_workload(sim)
    planted = planted_anomalies(sim)
    sim.close()
    out = tmp_path_factory.mktemp("out")
    args = lifecycle.parse_args(["--events", str(root), "--out", str(out), "--no-progress",
                                 "--message", "requeued-once"])
    assert lifecycle.run(args, spark=spark) == 0
    lifecycles = {r["msg_id"]: r for r in pq.read_table(out / "lifecycles").to_pylist()}
    anomalies = pq.read_table(out / "anomalies").to_pylist()
    by_queue = pq.read_table(out / "latency" / "by_queue").to_pylist()
    return dict(known=known, planted=planted, out=out, messages=sim.counter,
                lifecycles=lifecycles, anomalies=anomalies, by_queue=by_queue)


def test_final_states_of_the_known_workload(job):
    lc = job["lifecycles"]
    for msg_id, state in job["known"]["final_states"].items():
        assert lc[msg_id]["final_state"] == state, (msg_id, lc[msg_id]["message_id"])
    assert len(lc) == job["messages"] == len(job["known"]["final_states"]) + 14
    by_message_id = {r["message_id"]: r for r in lc.values()}
    assert by_message_id["recovered"]["final_state"] == "queued"
    assert by_message_id["recovered-silently"]["final_state"] == "queued"
    assert by_message_id["unconfirmed"]["final_state"] == "vanished"


def test_counts_and_columns_of_the_known_workload(job):
    lc, known = job["lifecycles"], job["known"]
    r = lc[known["requeued"]]
    assert (r["deliveries"], r["redeliveries"], r["nacks"], r["requeues"], r["acks"]) == \
        (2, 1, 1, 1, 1)
    assert r["message_id"] == "requeued-once" and r["queues"] == ["q-work"]
    d = lc[known["dead_lettered"]]
    assert dict(d["queue_states"]) == {"q-work": "dead_lettered"} and d["rejects"] == 1
    # the dead-lettered copy is a message of its own, linked both ways
    child = lc[known["dead_letter_copy"]]
    assert d["dead_lettered_to"] == child["msg_id"] and child["parent_msg_id"] == d["msg_id"]
    assert (child["routed_queues"], dict(child["queue_states"]), child["dead_letter_reason"],
            child["message_id"]) == (["q-dlq"], {"q-dlq": "queued"}, "rejected",
                                     "dead-lettered")
    for msg_id in known["closed"]:
        c = lc[msg_id]
        assert (c["deliveries"], c["acks"], c["requeues"]) == (1, 0, 1)
    ok = [r for r in lc.values() if r["queues"] == ["q-ok"]]
    assert len(ok) == 3 and sum(r["message_id"] is None for r in ok) == 1
    assert all(r["persistent"] and r["copies"][0]["durable"] for r in ok)  # it was stored
    returned = [r for r in lc.values() if r["final_state"] == "returned"]
    assert len(returned) == 1 and returned[0]["queues"] == []
    assert returned[0]["t_returned"] is not None and returned[0]["mandatory"] is True
    assert {"msg_id", "message_id", "final_state", "t_published", "t_confirmed",
            "t_first_delivered", "t_first_acked", "redeliveries", "copies"} <= set(ok[0])
    assert ok[0]["t_confirmed_ns"] - ok[0]["t_published_ns"] == 5_000_000  # exact ns
    assert sorted(ok[0]["nodes"]) == ["leveret@a", "leveret@b"]


def test_planted_anomalies_found_and_nothing_else(job):
    found = sorted((a["kind"], a["msg_id"]) for a in job["anomalies"])
    assert found == sorted(job["planted"])
    assert {kind for kind, _ in found} == {"lost", "acked_twice", "delivered_after_ack",
                                          "confirmed_before_synced", "redelivery_loop"}
    lost = [a for a in job["anomalies"] if a["kind"] == "lost"][0]
    assert lost["queue"] == "q-crash" and lost["message_id"] == "lost"
    # a stream's copy, read and acked by two consumers: no anomaly, marked as a stream's
    s = [r for r in job["lifecycles"].values() if r["message_id"] == "stream-read-twice"][0]
    assert [(c["stream"], c["acks"], c["deliveries"]) for c in s["copies"]] == [(True, 2, 2)]


def test_latencies_per_queue(job):
    # every q-ok message: publish, routed, enqueued, stored, synced, confirmed, delivered,
    # acked -- 1 ms apart
    rows = {r["metric"]: r for r in job["by_queue"] if r["queue"] == "q-ok"}
    expected = {"publish_to_confirm": 5.0, "publish_to_first_delivery": 6.0,
                "delivery_to_ack": 1.0, "time_in_queue": 5.0}
    for metric, ms in expected.items():
        r = rows[metric]
        assert r["count"] == 3
        assert r["p50_ms"] == pytest.approx(ms) and r["p99_ms"] == pytest.approx(ms)
        assert r["max_ms"] == pytest.approx(ms)
    whole = {r["metric"]: r for r in job["by_queue"] if r["queue"] == "(all)"}
    confirmed = sum(1 for r in job["lifecycles"].values() if r["t_confirmed"] is not None
                    and r["t_published"] is not None)
    assert whole["publish_to_confirm"]["count"] == confirmed


def test_report_and_plots(job):
    out = job["out"]
    html = (out / "report.html").read_text()
    for png in ("latency.png", "throughput.png", "timeline.png"):
        assert f'src="plots/{png}"' in html
        assert (out / "plots" / png).stat().st_size > 1000
    assert "requeued" in html and job["known"]["requeued"] in html  # the chosen timeline
    assert f"anomalies: {len(job['planted'])}" in html
    assert (out / "latency" / "by_minute").is_dir()


# -- log gaps: a second run, on logs with and without gaps ---------------------------------------
@pytest.fixture(scope="module")
def gap_job(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("gap-events")
    expect = gap_workload(str(root))
    out = tmp_path_factory.mktemp("gap-out")
    args = lifecycle.parse_args(["--events", str(root), "--out", str(out), "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    return dict(expect=expect, out=out,
                lifecycles={r["message_id"]: r for r in
                            pq.read_table(out / "lifecycles").to_pylist()},
                anomalies=pq.read_table(out / "anomalies").to_pylist(),
                gaps=pq.read_table(out / "gaps").to_pylist(),
                runs=pq.read_table(out / "runs").to_pylist())


def test_a_gap_turns_lost_into_unknown_and_a_complete_log_still_says_lost(gap_job):
    lc = gap_job["lifecycles"]
    found: dict[str, set] = {}
    for a in gap_job["anomalies"]:
        found.setdefault(a["message_id"], set()).add(a["kind"])
    for name, (state, kinds) in gap_job["expect"].items():
        assert (name, lc[name]["final_state"], found.get(name, set())) == (name, state, kinds)
        if name.startswith("complete"):
            assert lc[name]["log_gap"] is None
    unknown = [a for a in gap_job["anomalies"] if a["kind"] == "unknown"]
    killed = [a for a in unknown if a["message_id"] == "killed-vanished"]
    assert killed[0]["detail"].startswith("would be lost (confirmed, then vanished")
    assert "log gap in leveret@k2/queue-0 from " in killed[0]["detail"]
    assert "killed by signal SIGKILL" in killed[0]["detail"]
    dropped = lc["dropped-enqueue"]["log_gap"]
    assert dropped.startswith("log gap in leveret@d2/queue-0 from ") and \
        dropped.endswith("(1 events missing)")


def test_gaps_and_runs_tables(gap_job):
    gaps = {(g["node"], g["process"], g["kind"]): g for g in gap_job["gaps"]}
    assert set(gaps) == {("leveret@k2", "queue-0", "no_stop"),
                         ("leveret@d2", "queue-0", "missing_events")}
    k = gaps[("leveret@k2", "queue-0", "no_stop")]
    assert k["seq_to"] is None and k["t_to_ns"] > k["t_from_ns"]
    d = gaps[("leveret@d2", "queue-0", "missing_events")]
    assert (d["seq_from"], d["seq_to"]) == (2, 2)
    runs = gap_job["runs"]
    assert len(runs) == 8  # 3 pairs of runs, a restarted queue process and a node process
    assert sum(not r["stopped"] for r in runs) == 1
    assert {r["run_id"] for r in runs if r["gaps"]} == {k["run_id"], d["run_id"]}
    html = (gap_job["out"] / "report.html").read_text()
    assert "Log coverage" in html and k["reason"] in html
