"""Turn the workers' raw role results into a scenario's figures (pure: no I/O, no clock)."""
from __future__ import annotations

from array import array

from bench import summary_stats


def _snap(role: dict, label: str) -> dict | None:
    for s in role["snapshots"]:
        if s["label"] == label:
            return s
    return None


def _delta(role: dict, key: str) -> tuple[int, float] | None:
    a, b = _snap(role, "measure"), _snap(role, "end")
    if a is None or b is None:
        return None
    return b[key] - a[key], b["t"] - a["t"]


def _rate_sum(roles: list[dict], key: str) -> float | None:
    total = 0.0
    seen = False
    for r in roles:
        d = _delta(r, key)
        if d is None or d[1] <= 0:
            continue
        total += d[0] / d[1]
        seen = True
    return total if seen else None


def _samples_ms(blobs) -> list[float]:
    out: list[float] = []
    for b in blobs:
        if not b:
            continue
        a = array("q")
        a.frombytes(b)
        out.extend(v / 1e6 for v in a)
    return out


def latency_summary(values_ms: list[float]) -> dict:
    s = summary_stats.summarize(values_ms, percentiles=(50, 95, 99, 99.9))
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()}


def loadgen_cpu(roles: list[dict]) -> float | None:
    """CPU seconds per second (i.e. cores) the load-generator processes used while measuring."""
    per_pid: dict[int, float] = {}
    for r in roles:
        cpu = {label: (t, c) for label, t, c in r.get("cpu", [])}
        if "measure" in cpu and "end" in cpu:
            (t0, c0), (t1, c1) = cpu["measure"], cpu["end"]
            if t1 > t0:
                per_pid[r.get("pid", id(r))] = (c1 - c0) / (t1 - t0)
    return round(sum(per_pid.values()), 3) if per_pid else None


def aggregate(roles: list[dict]) -> dict:
    producers = [r for r in roles if r["kind"] == "producer"]
    consumers = [r for r in roles if r["kind"] == "consumer"]
    out = {
        "publish_rate": _rate_sum(producers, "published"),
        "consume_rate": _rate_sum(consumers, "consumed"),
        "consumed": sum((_delta(r, "consumed") or (0, 0))[0] for r in consumers),
        "confirm_rate": None,
        "confirm_latency_ms": None,
        "e2e_latency_ms": None,
        "nacked": sum((_delta(r, "nacked") or (0, 0))[0] for r in producers),
        "skipped": sum((_delta(r, "skipped") or (0, 0))[0] for r in producers
                       if "skipped" in (_snap(r, "end") or {})),
        "blocked_events": sum(r.get("blocked_events", 0) for r in roles),
        "loadgen_cpu_cores": loadgen_cpu(roles),
        "producers": len(producers),
        "consumers": len(consumers),
    }
    if any(r.get("confirm_latency_ns") is not None for r in producers):
        out["confirm_rate"] = _rate_sum(producers, "confirmed")
        out["confirm_latency_ms"] = latency_summary(
            _samples_ms(r.get("confirm_latency_ns") for r in producers))
    if consumers:
        out["e2e_latency_ms"] = latency_summary(
            _samples_ms(r.get("e2e_latency_ns") for r in consumers))
    for k in ("publish_rate", "consume_rate", "confirm_rate"):
        if out[k] is not None:
            out[k] = round(out[k], 1)
    return out


def drained_depth(scenario) -> float:
    """Queue depth (ready messages, all queues) at which a late-consumer scenario counts as
    caught up: a quarter of a second of publishing at its target rate (1,000 messages when
    the producers are not paced)."""
    t = scenario.target_consume_rate
    return 1000.0 if t is None else max(1.0, 0.25 * t)


def drain_summary(roles: list[dict], depth: list | None, threshold: float) -> dict:
    """A late-consumer run's figures from its consumers' join and backlog instants (bench/
    loadgen.py) and the queue depths polled from the join on ((s since the join, depth)):

    - backlog: messages published before the consumers joined (what they received before the
      first message published after it; with one consumer per queue and FIFO queues, that is
      all of them);
    - backlog_drained_s: from the join until the last queue's backlog was delivered (None when a
      consumer did not get there within the window);
    - drain_consume_rate: deliveries per second until then (sum over the consumers);
    - caught_up_s: from the join until the polled depth first fell to `threshold` or below
      after its peak (None if it did not); peak_depth: the highest depth polled."""
    consumers = [r for r in roles if r["kind"] == "consumer" and "joined_ns" in r]
    out = {"backlog": None, "backlog_drained_s": None, "drain_consume_rate": None,
           "caught_up_s": None, "peak_depth": None, "drained_depth": threshold,
           "depth": depth}
    done = [r for r in consumers if r.get("joined_ns") is not None
            and r.get("backlog_done_ns") is not None]
    if done:
        out["backlog"] = sum(r["backlog"] for r in done)
        rate = 0.0
        for r in done:
            dt = (r["backlog_done_ns"] - r["joined_ns"]) / 1e9
            if dt > 0:
                rate += r["backlog"] / dt
        out["drain_consume_rate"] = round(rate, 1)
    if consumers and len(done) == len(consumers):
        out["backlog_drained_s"] = round(
            max(r["backlog_done_ns"] - r["joined_ns"] for r in done) / 1e9, 3)
    if depth:
        peak_i = max(range(len(depth)), key=lambda i: depth[i][1])
        out["peak_depth"] = depth[peak_i][1]
        for t, d in depth[peak_i:]:
            if d <= threshold:
                out["caught_up_s"] = t
                break
    return out


def combine_runs(runs: list[dict]) -> dict:
    """One result from several runs of a scenario: the median of every figure over the runs
    that did not fail (latency percentiles too: the median of each run's p50, p99...); the runs
    themselves are kept under "runs"."""
    import statistics

    ok = [r for r in runs if not r.get("error")]
    base = dict(ok[0] if ok else runs[0])
    base["runs"] = runs
    base["repeat"] = len(runs)
    if not ok:
        return base
    base["error"] = None if len(ok) == len(runs) else \
        f"{len(runs) - len(ok)} of {len(runs)} runs failed: " + \
        next(r["error"] for r in runs if r.get("error"))

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    for k in ("publish_rate", "consume_rate", "confirm_rate", "loadgen_cpu_cores", "backlog",
              "backlog_drained_s", "drain_consume_rate", "caught_up_s", "peak_depth"):
        if any(k in r for r in ok):
            base[k] = med(r.get(k) for r in ok)
    for k in ("bytes_per_msg", "disk_bytes_per_msg", "broker_cpu_cores", "broker_cpu_us_per_msg"):
        if any(r.get(k) is not None for r in ok):
            base[k] = med(r.get(k) for r in ok)
    for k in ("confirm_latency_ms", "e2e_latency_ms"):
        dicts = [r.get(k) for r in ok if r.get(k)]
        if dicts:
            base[k] = {f: med(d.get(f) for d in dicts) for f in dicts[0]}
    base["nacked"] = sum(r.get("nacked") or 0 for r in ok)
    base["blocked_events"] = sum(r.get("blocked_events") or 0 for r in ok)
    return base
