"""Turn the workers' raw role results into a scenario's figures (pure: no I/O, no clock)."""
from __future__ import annotations

from array import array

from bench import stats


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
    s = stats.summarize(values_ms, percentiles=(50, 95, 99, 99.9))
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
        "confirm_rate": None,
        "confirm_latency_ms": None,
        "e2e_latency_ms": None,
        "nacked": sum((_delta(r, "nacked") or (0, 0))[0] for r in producers),
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

    for k in ("publish_rate", "consume_rate", "confirm_rate", "loadgen_cpu_cores"):
        base[k] = med(r.get(k) for r in ok)
    for k in ("confirm_latency_ms", "e2e_latency_ms"):
        dicts = [r.get(k) for r in ok if r.get(k)]
        if dicts:
            base[k] = {f: med(d.get(f) for d in dicts) for f in dicts[0]}
    base["nacked"] = sum(r.get("nacked") or 0 for r in ok)
    base["blocked_events"] = sum(r.get("blocked_events") or 0 for r in ok)
    return base
