"""bench/summary_stats.py, bench/aggregate.py and the confirm bookkeeping of bench/loadgen.py: pure
functions, no broker, no clock."""
import math
from array import array

import pytest

from bench import summary_stats
from bench.aggregate import aggregate, loadgen_cpu
from bench.loadgen import _Unconfirmed


def test_percentile_interpolates_like_numpy_linear():
    v = [1, 2, 3, 4]
    assert summary_stats.percentile(v, 0) == 1
    assert summary_stats.percentile(v, 100) == 4
    assert summary_stats.percentile(v, 50) == 2.5
    assert summary_stats.percentile(v, 25) == pytest.approx(1.75)
    assert summary_stats.percentile(list(range(101)), 99) == pytest.approx(99.0)


def test_percentile_edge_cases():
    assert math.isnan(summary_stats.percentile([], 50))
    assert summary_stats.percentile([7], 99) == 7
    with pytest.raises(ValueError):
        summary_stats.percentile([1, 2], 101)


def test_summarize():
    s = summary_stats.summarize([5, 1, 3, 2, 4])
    assert s["count"] == 5
    assert s["min"] == 1 and s["max"] == 5 and s["mean"] == 3
    assert s["p50"] == 3
    assert set(s) >= {"p95", "p99", "p99.9"}
    empty = summary_stats.summarize([])
    assert empty["count"] == 0 and empty["p50"] is None and empty["mean"] is None


def test_rate_and_ratio():
    assert summary_stats.rate(100, 400, 10.0, 13.0) == 100.0
    assert math.isnan(summary_stats.rate(0, 1, 5.0, 5.0))
    assert summary_stats.ratio(50.0, 100.0) == 0.5
    assert summary_stats.ratio(1.0, 0) is None
    assert summary_stats.ratio(None, 1.0) is None
    assert summary_stats.ratio(1.0, math.nan) is None


def _producer(published, confirmed, t0, t1, lat_ns, pid=1):
    return {"kind": "producer", "pid": pid, "blocked_events": 0,
            "snapshots": [{"label": "measure", "t": t0, "published": 0, "confirmed": 0,
                           "nacked": 0},
                          {"label": "end", "t": t1, "published": published,
                           "confirmed": confirmed, "nacked": 0}],
            "cpu": [("measure", t0, 10.0), ("end", t1, 10.0 + (t1 - t0) / 2)],
            "confirm_latency_ns": array("q", lat_ns).tobytes() if lat_ns is not None else None}


def _consumer(consumed, t0, t1, pid=2):
    return {"kind": "consumer", "pid": pid, "blocked_events": 1,
            "snapshots": [{"label": "measure", "t": t0, "consumed": 10},
                          {"label": "end", "t": t1, "consumed": 10 + consumed}],
            "cpu": [("measure", t0, 1.0), ("end", t1, 1.0 + (t1 - t0))],
            "e2e_latency_ns": array("q", [1_000_000, 3_000_000]).tobytes()}


def test_aggregate_sums_rates_and_pools_latencies():
    roles = [_producer(1000, 900, 0.0, 10.0, [1_000_000] * 9 + [5_000_000], pid=1),
             _producer(500, 500, 0.0, 5.0, [2_000_000], pid=3),
             _consumer(3000, 0.0, 10.0)]
    a = aggregate(roles)
    assert a["publish_rate"] == 200.0            # 100/s + 100/s
    assert a["consume_rate"] == 300.0
    assert a["confirm_rate"] == 190.0            # 90/s + 100/s
    assert a["confirm_latency_ms"]["count"] == 11
    assert a["confirm_latency_ms"]["p50"] == 1.0
    assert a["confirm_latency_ms"]["max"] == 5.0
    assert a["e2e_latency_ms"]["p50"] == 2.0
    assert a["blocked_events"] == 1
    assert a["loadgen_cpu_cores"] == 2.0         # 0.5 + 0.5 + 1.0 (three pids)


def test_aggregate_without_confirms_or_snapshots():
    a = aggregate([_producer(100, 0, 0.0, 1.0, None)])
    assert a["confirm_rate"] is None and a["confirm_latency_ms"] is None
    broken = {"kind": "consumer", "snapshots": [], "cpu": []}
    assert aggregate([broken])["consume_rate"] is None
    assert loadgen_cpu([broken]) is None


def test_unconfirmed_multiple_acks_settle_runs():
    u = _Unconfirmed()
    u.add(1, 64, 1000)
    u.add(65, 64, 2000)
    samples = []
    assert u.confirm(10, True, 5000, samples) == 10
    assert samples == [4000] * 10
    assert u.confirm(70, True, 6000, samples) == 60
    assert samples[10:] == [5000] * 54 + [4000] * 6
    assert u.outstanding == 58
    assert u.confirm(128, True, 6000, None) == 58
    assert u.outstanding == 0 and not u.runs


def test_unconfirmed_single_acks_in_and_out_of_order():
    u = _Unconfirmed()
    u.add(1, 4, 0)
    samples = []
    assert u.confirm(3, False, 10, samples) == 1       # out of order
    assert u.confirm(3, False, 10, samples) == 0       # duplicate is ignored
    assert u.confirm(1, False, 20, samples) == 1
    assert u.confirm(2, False, 30, samples) == 1       # 3 was already settled: head skips it
    assert u.outstanding == 1
    assert list(u.runs) == [[4, 4, 0]]
    assert u.confirm(4, True, 40, samples) == 1
    assert samples == [10, 20, 30, 40]
    assert u.outstanding == 0


def test_unconfirmed_multiple_after_out_of_order_single_does_not_double_count():
    u = _Unconfirmed()
    u.add(1, 5, 0)
    assert u.confirm(4, False, 1, None) == 1
    assert u.confirm(5, True, 2, None) == 4
    assert u.outstanding == 0


def test_combine_runs_takes_medians_and_keeps_runs():
    from bench.aggregate import combine_runs
    runs = [{"scenario": "c", "publish_rate": v, "consume_rate": v / 2, "confirm_rate": v,
             "confirm_latency_ms": {"count": 10, "p50": v / 1000, "p99": v / 100},
             "loadgen_cpu_cores": 0.1, "nacked": 1, "error": None}
            for v in (3000.0, 1000.0, 2000.0)]
    c = combine_runs(runs)
    assert c["publish_rate"] == 2000.0 and c["consume_rate"] == 1000.0
    assert c["confirm_latency_ms"]["p99"] == 20.0
    assert c["nacked"] == 3 and c["repeat"] == 3 and c["runs"] == runs and c["error"] is None
    failed = combine_runs(runs[:2] + [{"scenario": "c", "error": "boom"}])
    assert failed["publish_rate"] == 2000.0 and "1 of 3 runs failed: boom" == failed["error"]
    assert combine_runs([{"scenario": "c", "error": "x"}])["error"] == "x"
