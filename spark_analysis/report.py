"""OUT/report.html with PNG plots (OUT/plots/), and the short summary printed on stdout.

Takes only small, already collected data (plain lists and dicts, see `ReportData`): no Spark
here, so the layout can be tested and changed without a JVM. `render` returns the files as
bytes (the job writes them through Hadoop's FileSystem, storage.py); `write` puts them on the
local disk.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import math
import os
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from spark_analysis.latency import ALL, METRICS  # noqa: E402


@dataclass
class ReportData:
    events_dir: str  # what was read
    files: int  # .events files read
    nodes: list[str]  # node names seen
    events: int  # events read
    events_by_kind: dict[str, int]  # kind -> count
    events_without_msg_id: int  # message kinds whose msg_id was missing (not in lifecycles)
    messages: int  # lifecycle rows
    final_states: dict[str, int]  # final_state -> messages
    anomaly_counts: dict[str, int]  # kind -> rows
    anomalies: list[dict]  # the first rows, for the table
    latency_by_queue: list[dict]  # latency.by_queue rows
    latency_by_minute: list[dict]  # latency.by_minute rows
    latency_samples: dict[str, list[float]]  # metric -> sampled values (ms), for histograms
    throughput: list[tuple[float, str, int]]  # (bucket start, epoch s; kind; events)
    bucket_seconds: float  # width of a throughput bucket
    timeline_msg: dict | None  # the chosen message's lifecycle row (msg_id, final_state, ...)
    timeline: list[dict]  # its events: t_ns, kind, queue, node, process, actor, ...
    seconds: float = 0.0  # job run time
    steps: list[tuple[str, float]] = field(default_factory=list)  # (step, seconds)
    runs: list[dict] = field(default_factory=list)  # gaps.Run rows: the spans the logs cover
    gaps: list[dict] = field(default_factory=list)  # gaps.Gap rows
    files_read: int | None = None  # files this run decoded, when it added to an earlier run's


def _fmt_ms(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def plot_latencies(data: ReportData, path: "str | io.BytesIO") -> None:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, metric in zip(axes.flat, METRICS):
        vals = [v for v in data.latency_samples.get(metric, []) if v is not None and v > 0]
        ax.set_title(metric.replace("_", " "))
        ax.set_xlabel("ms (log scale)")
        if not vals:
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
            continue
        lo, hi = max(min(vals), 1e-3), max(vals)
        bins = [lo * (hi / lo) ** (i / 60) for i in range(61)] if hi > lo else 10
        ax.hist(vals, bins=bins, color="#4c72b0")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("messages")
    fig.suptitle("Latency distributions")
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def plot_throughput(data: ReportData, path: "str | io.BytesIO") -> None:
    fig, ax = plt.subplots(figsize=(11, 4))
    kinds = ("publish_received", "confirmed", "delivered", "fetched", "acked", "requeued",
             "expired", "dead_lettered", "dropped")
    series: dict[str, dict[float, int]] = {}
    for start, kind, n in data.throughput:
        series.setdefault(kind, {})[start] = n
    t0 = min((s for s, _, _ in data.throughput), default=0.0)
    for kind in kinds:
        pts = sorted(series.get(kind, {}).items())
        if pts:
            ax.plot([s - t0 for s, _ in pts], [n / data.bucket_seconds for _, n in pts],
                    label=kind, linewidth=1)
    start = dt.datetime.fromtimestamp(t0, dt.timezone.utc)
    ax.set_xlabel(f"seconds since {start:%Y-%m-%d %H:%M:%S} UTC")
    ax.set_ylabel("events/s")
    ax.set_title(f"Throughput ({data.bucket_seconds:g} s buckets)")
    if series:
        ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def plot_timeline(data: ReportData, path: "str | io.BytesIO") -> None:
    fig, ax = plt.subplots(figsize=(11, 4.5))
    evs = data.timeline
    if not evs:
        ax.text(0.5, 0.5, "no message chosen", ha="center", va="center", transform=ax.transAxes)
    else:
        t0 = evs[0]["t_ns"]
        kinds = []
        for e in evs:
            if e["kind"] not in kinds:
                kinds.append(e["kind"])
        queues = sorted({e.get("queue") or "-" for e in evs})
        colors = {q: plt.cm.tab10(i % 10) for i, q in enumerate(queues)}
        for e in evs:
            x, y = (e["t_ns"] - t0) / 1e6, kinds.index(e["kind"])
            q = e.get("queue") or "-"
            ax.scatter([x], [y], color=colors[q], s=40, zorder=3)
            ax.annotate(f"{e.get('process') or ''}", (x, y), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
        for q in queues:
            ax.scatter([], [], color=colors[q], label=f"queue {q}")
        ax.set_yticks(range(len(kinds)), kinds)
        ax.set_xlabel("ms since the first event of the message")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        m = data.timeline_msg or {}
        ax.set_title(f"Message {m.get('msg_id', '')} ({m.get('final_state', '')})")
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def _table(rows: list[dict], cols: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if c.endswith("_ms"):
                v = _fmt_ms(v)
            cells.append(f"<td>{html.escape('' if v is None else str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _describe(m: dict | None) -> str:
    if not m:
        return "No message chosen."
    pub = f", message_id {m['message_id']}" if m.get("message_id") else ""
    return f"msg_id {m['msg_id']}{pub}: {m.get('final_state')}, {m.get('n_events')} events"


def summary_text(data: ReportData) -> str:
    lines = [f"leveret lifecycle analysis of {data.events_dir}",
             f"  {data.events} events in {data.files} files from {len(data.nodes)} node(s) "
             f"({', '.join(data.nodes)}); {data.messages} messages"]
    if data.files_read is not None:
        lines.append(f"  this run read {data.files_read} new or grown file(s); the others' "
                     f"events were in OUT/events from earlier runs")
    if data.events_without_msg_id:
        lines.append(f"  {data.events_without_msg_id} message events had no msg_id "
                     f"(left out of the lifecycles)")
    lines.append("  final states: " + ", ".join(
        f"{k} {v}" for k, v in sorted(data.final_states.items(), key=lambda kv: -kv[1])))
    found = {k: v for k, v in data.anomaly_counts.items() if k != "unknown"}
    total = sum(found.values())
    lines.append(f"  anomalies: {total}" + (" (" + ", ".join(
        f"{k} {v}" for k, v in sorted(found.items())) + ")" if total else ""))
    broken = len({g["run_id"] for g in data.gaps})
    lines.append(f"  log: {len(data.runs)} process runs, {len(data.gaps)} gaps in {broken} "
                 f"of them; unknown verdicts: {data.anomaly_counts.get('unknown', 0)}")
    for g in data.gaps[:5]:
        lines.append(f"    {g['reason']}")
    lead = max(data.runs, key=lambda r: r.get("clock_lead_ns") or 0, default=None)
    if lead is not None:
        lines.append(f"  clock skew relied on: {(lead.get('clock_lead_ns') or 0) / 1e6:.3f} ms at "
                     f"most ({lead['node']}/{lead['process']}: the hybrid clock ordered its "
                     f"events that far ahead of its own clock)")
    for r in data.latency_by_queue:
        if r.get("queue") == ALL:
            lines.append(f"  {r['metric']:<26} n={r['count']:<9} p50 {_fmt_ms(r['p50_ms'])} ms"
                         f"  p99 {_fmt_ms(r['p99_ms'])} ms  max {_fmt_ms(r['max_ms'])} ms")
    lines.append(f"  {data.seconds:.1f} s")
    return "\n".join(lines)


def _png(plot, data: ReportData) -> bytes:
    buf = io.BytesIO()
    plot(data, buf)
    return buf.getvalue()


def render(data: ReportData) -> dict[str, bytes]:
    """{name under OUT: bytes}: report.html and plots/*.png."""
    files = {"plots/latency.png": _png(plot_latencies, data),
             "plots/throughput.png": _png(plot_throughput, data),
             "plots/timeline.png": _png(plot_timeline, data)}
    lat_cols = ["metric", "queue", "count", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "mean_ms",
                "max_ms"]
    minute_rows = [dict(r, minute=str(r.get("minute"))) for r in data.latency_by_minute]
    an_cols = ["kind", "msg_id", "message_id", "vhost", "queue", "final_state", "t", "detail"]
    tl_cols = ["t", "kind", "node", "process", "actor", "queue", "connection", "channel",
               "delivery_tag", "consumer_tag", "redelivered", "requeue", "reason"]
    t0 = data.timeline[0]["t_ns"] if data.timeline else 0
    tl_rows = [dict(e, t=f"+{(e['t_ns'] - t0) / 1e6:.3f} ms") for e in data.timeline]
    kinds = sorted(data.events_by_kind.items(), key=lambda kv: -kv[1])
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Leveret lifecycle report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: left; }}
th {{ background: #eee; }}
pre {{ background: #f6f6f6; padding: 1em; }}
</style></head><body>
<h1>Leveret lifecycle report</h1>
<pre>{html.escape(summary_text(data))}</pre>
<h2>Final states</h2>
{_table([{"final_state": k, "messages": v} for k, v in sorted(data.final_states.items())],
        ["final_state", "messages"])}
<h2>Anomalies</h2>
{_table([{"kind": k, "rows": v} for k, v in sorted(data.anomaly_counts.items())],
        ["kind", "rows"])}
{_table(data.anomalies, an_cols) if data.anomalies else "<p>None.</p>"}
<h2>Log coverage</h2>
<p>One row per process run: the span its log covers. A gap is a hole in a run's sequence
numbers or a run that ended without <code>process_stop</code>; a verdict that a gap could change
is <code>unknown</code>, never <code>lost</code>. Events are ordered by a hybrid logical clock
carried on every message between processes and nodes; <code>clock_lead_ns</code> is how far a
run's clock was pushed ahead of its own by messages from a process whose clock ran ahead: the
clock skew the ordering relied on.</p>
{_table(data.runs, ["node", "process", "run_id", "pid", "t_first", "t_last", "first_seq",
                    "last_seq", "events", "stopped", "dropped", "clock_lead_ns"])}
<h3>Gaps</h3>
{_table(data.gaps, ["node", "process", "run_id", "pid", "kind", "seq_from", "seq_to",
                    "t_from", "t_to", "reason"]) if data.gaps else "<p>None.</p>"}
<h2>Latencies</h2>
<img src="plots/latency.png" alt="latency distributions">
<h3>Per queue</h3>
{_table(data.latency_by_queue, lat_cols)}
<h3>Per minute</h3>
{_table(minute_rows, ["metric", "minute"] + lat_cols[2:])}
<h2>Throughput</h2>
<img src="plots/throughput.png" alt="throughput over time">
<h2>Timeline of one message</h2>
<p>{html.escape(_describe(data.timeline_msg))}</p>
<img src="plots/timeline.png" alt="timeline">
{_table(tl_rows, tl_cols)}
<h2>Events read</h2>
{_table([{"kind": k, "events": v} for k, v in kinds], ["kind", "events"])}
<h2>Run</h2>
{_table([{"step": s, "seconds": f"{t:.1f}"} for s, t in data.steps], ["step", "seconds"])}
</body></html>
"""
    files["report.html"] = page.encode()
    return files


def write(data: ReportData, out_dir: str) -> str:
    """Writes OUT/plots/*.png and OUT/report.html on the local disk; returns the report's
    path."""
    for name, blob in render(data).items():
        path = os.path.join(out_dir, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(blob)
    return os.path.join(out_dir, "report.html")
