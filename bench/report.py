"""Markdown tables and JSON files for benchmark results (formatting is pure; only
`write_json` touches the disk)."""
from __future__ import annotations

import json
import math
import os
import time

from bench.stats import ratio

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# (label, getter) for each figure shown per scenario
METRICS = [
    ("publish msg/s", lambda r: r.get("publish_rate"), "rate"),
    ("consume msg/s", lambda r: r.get("consume_rate"), "rate"),
    ("confirm p50 ms", lambda r: (r.get("confirm_latency_ms") or {}).get("p50"), "ms"),
    ("confirm p99 ms", lambda r: (r.get("confirm_latency_ms") or {}).get("p99"), "ms"),
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


def fmt(v, kind: str) -> str:
    return fmt_rate(v) if kind == "rate" else fmt_ms(v)


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def applies(result: dict, kind: str, label: str) -> bool:
    """Confirm latency only applies to scenarios with publisher confirms."""
    if label.startswith("confirm"):
        return bool((result.get("settings") or {}).get("confirm"))
    return True


def single_table(results: list[dict], label: str = "") -> str:
    """One broker: a row per scenario."""
    head = ["scenario"] + [m[0] for m in METRICS]
    lines = [_row(head), _row(["---"] + ["---:"] * len(METRICS))]
    for r in results:
        cells = [r.get("title") or r.get("scenario", "?")]
        if r.get("error") and r.get("publish_rate") is None:
            cells += ["error"] * len(METRICS)
        else:
            for name, get, kind in METRICS:
                cells.append(fmt(get(r), kind) if applies(r, kind, name) else "–")
        lines.append(_row(cells))
    return "\n".join(lines)


def compare_table(results: list[dict], reference: list[dict], label: str = "Leveret",
                  ref_label: str = "reference") -> str:
    """Two brokers side by side: a row per (scenario, figure), with the ratio label/reference.
    For latencies a ratio above 1 means the first broker is slower."""
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
        for name, get, kind in METRICS:
            if not applies(any_r, kind, name):
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
