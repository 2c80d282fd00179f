"""Finding a message and its path in what the lifecycle job wrote (actors/management/traces.py
on spark_analysis/lookup.py's layout), and in an analysis written before that layout.

One run of the real job, on the SparkSession tests/conftest.py shares, over synthetic logs of
the real writer (tests/unit/analysis/analysis_workload.py); then pyarrow only.
"""

from __future__ import annotations

import io
import os
import shutil
import sys

import pyarrow.parquet as pq
import pytest

from actors.ctl import commands
from actors.management import traces
from actors.management.api import ApiError
from spark_analysis import lifecycle

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "analysis"))
from analysis_workload import Sim  # noqa: E402


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("events")
    sim = Sim(str(root))
    ids = {}
    # three orders, one of them rejected into a dead-letter queue; a reply sharing a
    # correlation id with the first order; a message without a message_id
    for i, name in enumerate(("order-1", "order-2", "order-3")):
        mid = sim.new_id()
        ids[name] = mid
        seq = sim.publish(mid, ["q-orders"], message_id=name, routing_key="orders.new",
                          correlation_id=f"corr-{i + 1}")
        sim.enqueue(mid, "q-orders")
        sim.confirm(mid, seq)
    t_between = sim.now()[0]  # after the orders were published, before the reply
    reply = ids["reply"] = sim.new_id()
    sim.publish(reply, ["q-replies"], message_id="reply-1", routing_key="replies",
                correlation_id="corr-1")
    sim.enqueue(reply, "q-replies")
    bare = ids["bare"] = sim.new_id()
    sim.publish(bare, ["q-replies"], routing_key="replies")
    sim.enqueue(bare, "q-replies")
    tag = sim.deliver(ids["order-1"], "q-orders")
    sim.settle("acked", ids["order-1"], "q-orders", tag)
    tag = sim.deliver(ids["order-2"], "q-orders")
    sim.settle("nacked", ids["order-2"], "q-orders", tag, requeue=True)
    sim.requeue(ids["order-2"], "q-orders")
    tag = sim.deliver(ids["order-2"], "q-orders", redelivered=True)
    sim.settle("rejected", ids["order-2"], "q-orders", tag, requeue=False)
    # (as the broker logs it: the copy has an id of its own, announced with its parent)
    child = ids["child"] = sim.dead_letter(ids["order-2"], "q-orders", "rejected", "dlx",
                                           ["q-dead"], message_id="order-2",
                                           routing_key="orders.new")  # (enqueued in q-dead)
    sim.close()
    data_dir = tmp_path_factory.mktemp("data")
    out = data_dir / "analysis"
    args = lifecycle.parse_args(["--events", str(root), "--out", str(out), "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    # an analysis of the same logs as the job wrote them before its lookup layout
    shutil.copytree(out, data_dir / "old", ignore=shutil.ignore_patterns("lookup"))
    return dict(out=out, old=data_dir / "old", data_dir=data_dir, t_between=t_between,
                ids={k: v.hex() for k, v in ids.items()})


@pytest.fixture(params=["lookup", "scan"])
def analysis(job, request):
    """Each test twice: on the lookup layout, and on an analysis without it (the old scan)."""
    return job["out"] if request.param == "lookup" else job["old"]


def test_lookup_layout_is_sorted_with_statistics_per_row_group(job):
    steps = pq.ParquetDataset(job["out"] / "lookup" / "steps")
    rows = steps.read(columns=["msg_id", "t_ns", "rank"]).to_pylist()
    keys_seen = [(r["msg_id"], r["t_ns"], r["rank"]) for r in rows]
    assert keys_seen == sorted(keys_seen) and len(rows) > 20
    for f in steps.files:
        meta = pq.ParquetFile(f).metadata
        col = meta.schema.names.index("msg_id")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            assert stats is not None and stats.has_min_max  # what a lookup prunes by
    keys = pq.read_table(job["out"] / "lookup" / "keys").to_pylist()
    assert [(k["key"], k["value"]) for k in keys] == sorted((k["key"], k["value"])
                                                            for k in keys)
    assert {k["key"] for k in keys} == {"message_id", "correlation_id", "routing_key", "queue"}
    times = pq.read_table(job["out"] / "lookup" / "times").to_pylist()
    assert [t["t_first_ns"] for t in times] == sorted(t["t_first_ns"] for t in times)
    assert len(times) == 5  # the published messages; the dead-lettered copy is its parent's


def test_find_by_each_key(job, analysis):
    ids = job["ids"]

    def found(key, value, **kw):
        return [r["msg_id"] for r in traces.find(analysis, key, value, **kw)]
    assert found("message_id", "order-1") == [ids["order-1"]]
    # a dead-lettered copy carries its parent's message_id but is found through the parent
    assert found("message_id", "order-2") == [ids["order-2"]]
    assert found("correlation_id", "corr-1") == [ids["order-1"], ids["reply"]]  # in time order
    assert found("routing_key", "orders.new") == [ids["order-1"], ids["order-2"],
                                                  ids["order-3"], ids["child"]]
    assert found("routing_key", "orders.new", limit=2) == [ids["order-1"], ids["order-2"]]
    assert found("queue", "q-replies") == [ids["reply"], ids["bare"]]
    assert found("queue", "q-dead") == [ids["child"]]
    assert found("msg_id", ids["bare"]) == [ids["bare"]]
    assert found("traceparent", "00-anything") == []  # not in these logs: finds nothing
    assert found("message_id", "nope") == [] and found("msg_id", "zz") == []
    assert found("routing_key", "orders.new", t_from_ns=job["t_between"]) == [ids["child"]]
    assert found("routing_key", "orders.new", t_to_ns=job["t_between"]) == [
        ids["order-1"], ids["order-2"], ids["order-3"]]
    (row,) = traces.find(analysis, "queue", "q-dead")
    assert (row["key"], row["value"], row["vhost"]) == ("queue", "q-dead", "/")
    assert row["t_first"].startswith("20")
    with pytest.raises(ApiError):
        traces.find(analysis, "exchange", "x")


def test_find_by_time_range(job, analysis):
    ids = job["ids"]
    before = [r["msg_id"] for r in traces.published_between(analysis, None, job["t_between"])]
    after = traces.published_between(analysis, job["t_between"], None)
    assert before == [ids["order-1"], ids["order-2"], ids["order-3"]]
    assert [r["msg_id"] for r in after] == [ids["reply"], ids["bare"]]
    assert after[0]["message_id"] == "reply-1" and after[0]["final_state"] == "queued"
    assert traces.published_between(analysis, None, None, limit=1)[0]["msg_id"] == \
        ids["order-1"]


def test_a_message_path_steps_in_order_with_dead_letter_links(job, analysis):
    ids = job["ids"]
    p = traces.message_path(analysis, ids["order-2"])
    assert [s["kind"] for s in p["steps"]] == [
        "publish_received", "routed", "enqueued", "confirmed", "delivered", "nacked",
        "requeued", "delivered", "rejected", "dead_lettered"]
    assert [s["t_ns"] for s in p["steps"]] == sorted(s["t_ns"] for s in p["steps"])
    assert (p["message_id"], p["correlation_id"]) == ("order-2", "corr-2")
    assert p["dead_lettered_to"] == [ids["child"]] and p["parent_msg_id"] is None
    enq = p["steps"][2]
    assert (enq["node"], enq["process"], enq["actor"], enq["queue"]) == \
        ("leveret@b", "queue-0", "queue", "q-orders")
    assert p["steps"][0]["node"] == "leveret@a" and p["steps"][0]["after_ms"] == 0
    # every event of the workload is 1 ms after the one before: 21 events from its publish
    assert [s["after_ms"] for s in p["steps"]][-1] == 21.0
    c = traces.message_path(analysis, ids["child"])
    assert c["parent_msg_id"] == ids["order-2"]
    assert [s["kind"] for s in c["steps"]] == ["dead_letter_published", "enqueued"]
    # the old route: by message_id or msg_id, the same path
    assert traces.lifecycle(analysis, "order-2") == p
    assert traces.lifecycle(analysis, ids["order-2"]) == p
    with pytest.raises(ApiError) as e:
        traces.message_path(analysis, "00" * 16)
    assert e.value.status == 404


def test_leveretctl_trace_prints_the_path(job, capsys):
    ids = job["ids"]
    data_dir = str(job["data_dir"])
    assert commands.main(["--data-dir", data_dir, "trace", "order-2"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith(f"msg_id {ids['order-2']}, message_id order-2, "
                               "correlation_id corr-2")
    assert [ln.split()[2] for ln in lines[1:11]] == [
        "publish_received", "routed", "enqueued", "confirmed", "delivered", "nacked",
        "requeued", "delivered", "rejected", "dead_lettered"]
    assert "leveret@b queue-0 queue  queue=q-orders" in lines[3]
    assert f"leveretctl trace {ids['child']} --by msg_id" in lines[-1]
    assert commands.main(["--data-dir", data_dir, "trace", "corr-3", "--by", "correlation_id",
                     "--analysis", "old"]) == 0
    assert capsys.readouterr().out.startswith(f"msg_id {ids['order-3']}, message_id order-3")
    assert commands.main(["--data-dir", data_dir, "trace", "q-replies", "--by", "queue"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("2 messages with queue 'q-replies'")
    assert [ln.split()[0] for ln in listed[1:]] == [ids["reply"], ids["bare"]]
    assert commands.main(["--data-dir", data_dir, "trace", "nope"]) == 1
    assert "no message with message_id 'nope'" in capsys.readouterr().err
    out = io.StringIO()
    from actors.ctl import trace
    assert trace.trace(data_dir, ids["child"], by="msg_id", out=out) == 0
    assert f"parent_msg_id {ids['order-2']}" in out.getvalue().splitlines()[0]
