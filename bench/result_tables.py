"""Markdown tables and JSON files for benchmark results (formatting is pure; only
`write_json` touches the disk)."""
from __future__ import annotations

import json
import math
import os
import time

from bench.summary_stats import ratio

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

def _settings(r: dict) -> dict:
    return r.get("settings") or {}


def _confirms(r: dict) -> bool:
    return bool(_settings(r).get("confirm"))


def _paced(r: dict) -> bool:
    return _settings(r).get("rate") is not None


def _late(r: dict) -> bool:
    return bool(_settings(r).get("consumer_start_delay"))


def _perftest(r: dict) -> bool:
    s = _settings(r)
    return _paced(r) or _late(r) or bool(s.get("exchange_type"))


def _persistent(r: dict) -> bool:
    return bool(_settings(r).get("persistent"))


def _paced_confirms(r: dict) -> bool:
    """The fixed-rate scenarios (ordinary load), where the tail is the figure."""
    return _paced(r) and _confirms(r)


def _measured_cpu(r: dict) -> bool:
    """The broker ran on this machine and its process tree was sampled (bench/procio.py)."""
    return r.get("broker_cpu_us_per_msg") is not None


def _e2e(p: str):
    return lambda r: (r.get("e2e_latency_ms") or {}).get(p)


# (label, getter, kind, applies) for each figure shown per scenario; applies(result) says
# whether the figure means something for it (None: always)
METRICS = [
    ("publish msg/s", lambda r: r.get("publish_rate"), "rate", None),
    ("consume msg/s", lambda r: r.get("consume_rate"), "rate", None),
    ("confirm p50 ms", lambda r: (r.get("confirm_latency_ms") or {}).get("p50"), "ms", _confirms),
    ("confirm p99 ms", lambda r: (r.get("confirm_latency_ms") or {}).get("p99"), "ms", _confirms),
]

# Bytes the broker wrote per message consumed (persistent scenarios, bench/procio.py) and the
# figures of the PerfTest workloads (group `perftest`): a table gets their columns only when one
# of its scenarios has them, so the tables of the other scenarios do not change.
EXTRA_METRICS = [
    ("bytes written / msg", lambda r: r.get("bytes_per_msg"), "count", _persistent),
    ("disk bytes / msg", lambda r: r.get("disk_bytes_per_msg"), "count", _persistent),
    ("target consume msg/s", lambda r: r.get("target_consume_rate"), "rate", _paced),
    ("consume / target", lambda r: ratio(r.get("consume_rate"), r.get("target_consume_rate")),
     "ratio", _paced),
    ("e2e p50 ms", _e2e("p50"), "ms", _perftest),
    ("e2e p95 ms", _e2e("p95"), "ms", _perftest),
    ("e2e p99 ms", _e2e("p99"), "ms", _perftest),
    ("e2e p99.9 ms", _e2e("p99.9"), "ms", _paced_confirms),
    ("confirm p99.9 ms", lambda r: (r.get("confirm_latency_ms") or {}).get("p99.9"), "ms",
     _paced_confirms),
    ("broker CPU µs / msg", lambda r: r.get("broker_cpu_us_per_msg"), "count", _measured_cpu),
    ("broker CPU cores", lambda r: r.get("broker_cpu_cores"), "ms", _measured_cpu),
    ("backlog msgs", lambda r: r.get("backlog"), "count", _late),
    ("backlog drained s", lambda r: r.get("backlog_drained_s"), "s", _late),
    ("drain consume msg/s", lambda r: r.get("drain_consume_rate"), "rate", _late),
    ("caught up s", lambda r: r.get("caught_up_s"), "s", _late),
]


def fmt_rate(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.0f}"


def fmt_ms(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_ratio(v) -> str:
    if v is None:
        return "n/a"
    if v >= 10:
        return f"{v:.1f}x"
    return f"{v:.2f}x"


def fmt_seconds(v) -> str:
    """Seconds until something happened; None: it did not happen within the window."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "not reached"
    return f"{v:.2f}"


def fmt(v, kind: str) -> str:
    if kind in ("rate", "count"):
        return fmt_rate(v)
    if kind == "ratio":
        return fmt_ratio(v)
    if kind == "s":
        return fmt_seconds(v)
    return fmt_ms(v)


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def applies(result: dict, applies_to) -> bool:
    return applies_to is None or applies_to(result)


def metrics_for(results: list[dict]) -> list[tuple]:
    """METRICS, and the EXTRA_METRICS that apply to at least one of the results."""
    return METRICS + [m for m in EXTRA_METRICS if any(m[3](r) for r in results)]


def single_table(results: list[dict], label: str = "") -> str:
    """One broker: a row per scenario."""
    metrics = metrics_for(results)
    head = ["scenario"] + [m[0] for m in metrics]
    lines = [_row(head), _row(["---"] + ["---:"] * len(metrics))]
    for r in results:
        cells = [r.get("title") or r.get("scenario", "?")]
        if r.get("error") and r.get("publish_rate") is None:
            cells += ["error"] * len(metrics)
        else:
            for name, get, kind, to in metrics:
                cells.append(fmt(get(r), kind) if applies(r, to) else "–")
        lines.append(_row(cells))
    return "\n".join(lines)


def compare_table(results: list[dict], reference: list[dict], label: str = "Leveret",
                  ref_label: str = "reference") -> str:
    """Two brokers side by side: a row per (scenario, figure), with the ratio label/reference.
    For latencies and seconds a ratio above 1 means the first broker is slower."""
    ref_by_key = {r["scenario"]: r for r in reference}
    head = ["scenario", "figure", label, ref_label, f"{label} / {ref_label}"]
    lines = [_row(head), _row(["---", "---", "---:", "---:", "---:"])]
    keys = [r["scenario"] for r in results] + [k for k in ref_by_key
                                                if k not in {r["scenario"] for r in results}]
    by_key = {r["scenario"]: r for r in results}
    for key in keys:
        a = by_key.get(key, {})
        b = ref_by_key.get(key, {})
        title = a.get("title") or b.get("title") or key
        any_r = a or b
        for name, get, kind, to in METRICS + EXTRA_METRICS:
            if not applies(any_r, to):
                continue
            va = None if (a.get("error") and a.get("publish_rate") is None) else get(a)
            vb = None if (b.get("error") and b.get("publish_rate") is None) else get(b)
            ca = "error" if a.get("error") and va is None else (fmt(va, kind) if a else "n/a")
            cb = "error" if b.get("error") and vb is None else (fmt(vb, kind) if b else "n/a")
            lines.append(_row([title, name, ca, cb, fmt_ratio(ratio(va, vb))]))
            title = ""
    return "\n".join(lines)


def errors_text(results: list[dict], label: str) -> str:
    out = []
    for r in results:
        if r.get("error"):
            first = r["error"].strip().splitlines()[0] if r["error"].strip() else "?"
            out.append(f"- {label} {r.get('title') or r.get('scenario')}: {first}")
    return "\n".join(out)


def results_path(label: str, when: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when or time.time()))
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)
    return os.path.join(RESULTS_DIR, f"{stamp}-{safe}.json")


def write_json(doc: dict, path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    return path
