"""`python -m bench` (make bench): run the scenarios against Leveret (a node started for the
run, or --url) and optionally against a reference broker (--compare-url), print Markdown tables
and write the JSON results to bench/results/.  See docs/bench.md."""
from __future__ import annotations

import argparse
import os
import sys
import time

from bench import result_tables, scenarios
from bench.machine import machine_info
from bench.aggregate import combine_runs
from bench.refbroker import server_version
from amqpclient.url import parse_url


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Leveret throughput benchmark (1 producer / 1 consumer / 1 queue, 1500-byte "
                    "messages by default). Without --url it starts a Leveret node itself.")
    p.add_argument("--url", help="benchmark this broker (amqp://user:pass@host:port/vhost) "
                                 "instead of starting a Leveret node")
    p.add_argument("--label", help="name of the first broker in the tables (default: "
                                   "'Leveret', or the server's product and version with --url)")
    p.add_argument("--compare-url", help="also run every scenario against this broker and "
                                         "print both side by side with the ratio")
    p.add_argument("--pid", type=int,
                   help="with --url: the broker's process on this machine; the bytes it and its "
                        "descendants write (/proc/PID/io) are reported per message")
    p.add_argument("--compare-pid", type=int,
                   help="the same for --compare-url (bench.compare passes it)")
    p.add_argument("--compare-label", help="name of the reference broker (default: its product "
                                           "and version from connection.start)")
    p.add_argument("--seconds", type=float, default=10.0,
                   help="measured seconds per scenario (default 10)")
    p.add_argument("--warmup", type=float, default=2.0,
                   help="warm-up seconds before measuring (default 2)")
    p.add_argument("--scenarios", default="default",
                   help="comma-separated scenario keys or groups (default: a,b,c and "
                        "cluster; groups: "
                        f"{', '.join(scenarios.GROUPS)}; 'scale' only when named); see --list")
    p.add_argument("--repeat", type=int, default=1,
                   help="run every scenario this many times and report the median of each "
                        "figure (default 1); the runs are kept in the JSON")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--size", type=int, help="message body size in bytes (default: the "
                                            "scenario's, 1500)")
    p.add_argument("--confirm-window", type=int, default=scenarios.DEFAULT_CONFIRM_WINDOW,
                   help="unconfirmed messages in flight per publishing channel in scenarios "
                        "with confirms (default 1000, like PerfTest --confirm 1000)")
    p.add_argument("--queue-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra queue.declare argument for every scenario (repeatable); "
                        "integers and true/false are converted")
    p.add_argument("--client", choices=["lean", "pika"], default="lean",
                   help="load generator: the lean client on protocol/ (default) or pika")
    p.add_argument("--procs", type=int, default=16,
                   help="at most this many load-generator processes per scenario (connections "
                        "are spread over them; default 16)")
    sg = p.add_mutually_exclusive_group()
    sg.add_argument("--no-selftest", action="store_true",
                    help="skip measuring the load generator's own capacity")
    sg.add_argument("--selftest-only", action="store_true",
                    help="only measure the load generator's own capacity")
    p.add_argument("--selftest-seconds", type=float, default=2.0,
                   help="seconds per self-test mode (default 2)")
    p.add_argument("--json", help="write the JSON results here (default bench/results/"
                                  "<time>-<label>.json)")
    p.add_argument("--server", help="leveret-server executable (default REPO/.venv/bin/"
                                    "leveret-server)")
    p.add_argument("--keep-node-dir", action="store_true",
                   help="keep the started Leveret node's data directory and log")
    return p


def parse_queue_args(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--queue-arg wants KEY=VALUE, not {item!r}")
        k, v = item.split("=", 1)
        if v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
        else:
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
        # keep strings as strings
    return out


def list_scenarios() -> str:
    lines = []
    for k, s in scenarios.SCENARIOS.items():
        mark = "*" if s.default else " "
        lines.append(f"{mark} {k:12s} {s.title}\n      {s.description}")
    from bench.mirroring_cost import SCENARIO as sc
    lines.append(f"* {sc.key:12s} {sc.title}\n      {sc.description}")
    from bench import scale
    lines.append(f"  {scale.KEY:12s} {scale.TITLE}\n      bench/scale.py with its defaults; "
                 "python -m bench.scale takes the counts")
    lines.append("(* = run by default)  groups: " +
                 ", ".join(f"{g}={','.join(v)}" for g, v in scenarios.GROUPS.items()))
    return "\n".join(lines)


def bottleneck_warnings(selftest: list[dict] | None, results: list[dict],
                        threshold: float = 0.5) -> list[str]:
    """Warn when a connection ran at more than `threshold` of what one load-generator process
    managed against the fake broker (then the load generator may be what limits the figure)."""
    if not selftest:
        return []
    cap = {r["mode"]: r.get("rate") for r in selftest if not r.get("error")}
    pub_cap = min((v for k, v in cap.items() if k.startswith("publish") and v), default=None)
    con_cap = min((v for k, v in cap.items() if k.startswith("consume") and v), default=None)
    out = []
    for r in results:
        if r.get("error") and r.get("publish_rate") is None:
            continue
        for rate_key, n_key, capacity in (("publish_rate", "producers", pub_cap),
                                          ("consume_rate", "consumers", con_cap)):
            rate, n = r.get(rate_key), r.get(n_key)
            if rate and n and capacity and rate / n > threshold * capacity:
                out.append(f"WARNING: {r.get('broker', '')} {r['title']}: "
                           f"{rate_key.split('_')[0]} {rate / n:,.0f} msg/s per connection is "
                           f"over {threshold:.0%} of the load generator's capacity "
                           f"({capacity:,.0f} msg/s per process): the load generator may be "
                           "the bottleneck.")
    return out


def run_target(url: str, label: str, chosen, args, pid: int | None = None) -> list[dict]:
    from bench.scenario_run import run_scenario
    target = parse_url(url)
    results = []
    for i, sc in enumerate(chosen):
        if i:
            time.sleep(1.0)                  # let the broker settle after the queue deletion
        runs = []
        for n in range(max(1, args.repeat)):
            if n:
                time.sleep(1.0)
            log(f"[{label}] {sc.title}: {args.warmup:g}s warm-up + {args.seconds:g}s"
                + (f" (run {n + 1} of {args.repeat})" if args.repeat > 1 else "") + " ...")
            try:
                r = run_scenario(target, sc, seconds=args.seconds, warmup=args.warmup,
                                 client=args.client, codec="protocol", max_procs=args.procs,
                                 log=log, broker_pid=pid)
            except Exception as e:
                r = {"scenario": sc.key, "title": sc.title, "settings": sc.to_dict(),
                     "error": f"{type(e).__name__}: {e}"}
            if args.repeat > 1 and not r.get("error"):
                log(f"[{label}]   run {n + 1}: publish {result_tables.fmt_rate(r.get('publish_rate'))}"
                    f" msg/s, consume {result_tables.fmt_rate(r.get('consume_rate'))} msg/s")
            runs.append(r)
        r = runs[0] if len(runs) == 1 else combine_runs(runs)
        r["broker"] = label
        if r.get("error"):
            log(f"[{label}]   error: {r['error'].strip().splitlines()[0]}")
        else:
            cl = r.get("confirm_latency_ms") or {}
            extra = (f", confirm p50 {result_tables.fmt_ms(cl.get('p50'))} ms p99 "
                     f"{result_tables.fmt_ms(cl.get('p99'))} ms" if cl else "")
            if r.get("bytes_per_msg") is not None:
                extra += (f", {result_tables.fmt_rate(r['bytes_per_msg'])} bytes written per message "
                          f"(disk: {result_tables.fmt_rate(r.get('disk_bytes_per_msg'))})")
            log(f"[{label}]   publish {result_tables.fmt_rate(r.get('publish_rate'))} msg/s, consume "
                f"{result_tables.fmt_rate(r.get('consume_rate'))} msg/s{extra} (load generator used "
                f"{r.get('loadgen_cpu_cores')} cores)")
        results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        print(list_scenarios())
        return 0
    from bench import mirroring_cost, scale
    spec, want_cluster = mirroring_cost.split_spec(args.scenarios)
    spec, want_scale = scale.split_spec(spec)
    try:
        chosen = scenarios.select(spec) if spec else []
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    qargs = parse_queue_args(args.queue_arg)
    import dataclasses
    chosen = [s.with_queue_arguments(qargs).with_confirm_window(args.confirm_window)
              for s in chosen]
    if args.size:
        chosen = [dataclasses.replace(s, message_size=args.size) for s in chosen]
    cluster_scenario = mirroring_cost.SCENARIO.with_queue_arguments(qargs).with_confirm_window(
        args.confirm_window)
    if args.size:
        cluster_scenario = dataclasses.replace(cluster_scenario, message_size=args.size)

    doc: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info(),
                 "args": vars(args), "selftest": None, "brokers": []}
    failed = False

    if not args.no_selftest:
        from bench.selftest import run_selftest, selftest_table
        log(f"measuring the load generator itself ({args.selftest_seconds:g}s per mode) ...")
        rows = run_selftest(seconds=args.selftest_seconds, warmup=0.5, codec="protocol",
                            size=args.size or 1500, log=log)
        doc["selftest"] = rows
        print("\n### Load generator capacity (against a do-nothing fake broker)\n")
        print(selftest_table(rows))
        for r in rows:
            if r.get("error"):
                log(f"self-test {r['label']}: {r['error']}")
                failed = True
        if args.selftest_only:
            path = args.json or result_tables.results_path("selftest")
            result_tables.write_json(doc, path)
            print(f"\nJSON: {path}")
            return 1 if failed else 0

    # -- the broker under test -------------------------------------------------------------
    main_results: list[dict] = []
    label = args.label
    node = None
    if not chosen:                          # --scenarios cluster: no single node
        label = label or "Leveret"
    elif args.url:
        target = parse_url(args.url)
        label = label or server_version(target.host, target.port) or target.display
        main_results = run_target(args.url, label, chosen, args, args.pid)
        doc["brokers"].append({"label": label, "url": target.display, "results": main_results})
    else:
        from bench.leveret_node import LeveretNode, SERVER
        label = label or "Leveret"
        node = LeveretNode(server=args.server or SERVER, log=log, keep_dir=args.keep_node_dir)
        try:
            node.start()
        except Exception as e:
            log(f"could not start Leveret: {e}")
            main_results = [{"scenario": s.key, "title": s.title, "settings": s.to_dict(),
                             "error": f"Leveret did not start: {str(e).splitlines()[0]}"}
                            for s in chosen]
            node = None
        if node is not None:
            try:
                version = node.version()
                log(f"Leveret node pid {node.pid} on {node.url} ({version})")
                main_results = run_target(node.url, label, chosen, args, node.pid)
            finally:
                node.stop()
                if args.keep_node_dir:
                    log(f"node directory kept: {node.dir}")
        doc["brokers"].append({"label": label, "url": "started by the benchmark",
                               "results": main_results})

    # -- the reference broker --------------------------------------------------------------
    ref_results: list[dict] | None = None
    ref_label = None
    if args.compare_url and chosen:
        rt = parse_url(args.compare_url)
        ref_label = args.compare_label or server_version(rt.host, rt.port) or rt.display
        ref_results = run_target(args.compare_url, ref_label, chosen, args, args.compare_pid)
        doc["brokers"].append({"label": ref_label, "url": rt.display, "results": ref_results})

    # -- the cluster scenario (bench/mirroring_cost.py): 3 nodes of its own --------------------------
    cluster_results: list[dict] = []
    if want_cluster and args.url:
        log("cluster scenario skipped: it runs on nodes the benchmark starts, not on --url")
    elif want_cluster:
        cluster_results = mirroring_cost.run(args, cluster_scenario, log=log)
        doc["cluster"] = {"nodes": mirroring_cost.NODES, "results": cluster_results}

    # -- the scale scenario (bench/scale.py): nodes of its own, RabbitMQ with a reference ------
    scale_doc = None
    if want_scale and args.url:
        log("scale scenario skipped: it runs on nodes the benchmark starts, not on --url")
    elif want_scale:
        scale_doc = scale.run(scale.options_from_bench(args, bool(args.compare_url)), log=log)
        doc["scale"] = scale_doc

    # -- report ----------------------------------------------------------------------------
    secs = f"{args.seconds:g} s measured after {args.warmup:g} s warm-up"
    if args.repeat > 1:
        secs += f", median of {args.repeat} runs"
    client = "lean client" if args.client == "lean" else "pika"
    if chosen:
        print(f"\n### {label} ({secs}, {client}, {machine_info()['cpus']} CPUs)\n")
        print(result_tables.single_table(main_results))
    if ref_results is not None:
        print(f"\n### {ref_label}\n")
        print(result_tables.single_table(ref_results))
        print(f"\n### {label} vs {ref_label}\n")
        print(result_tables.compare_table(main_results, ref_results, label, ref_label))
    if cluster_results:
        print(f"\n### {mirroring_cost.SCENARIO.title} ({secs}, {client})\n")
        print(mirroring_cost.tables(cluster_results))
    if scale_doc:
        print(f"\n### {scale.TITLE}\n")
        print(scale.table(scale_doc) + f"\n\n{scale.NOTE}")
        if scale.log_text(scale_doc):
            print("\nError lines in the brokers' logs:\n" + scale.log_text(scale_doc))
    warnings = bottleneck_warnings(doc.get("selftest"), main_results + (ref_results or []))
    if warnings:
        print("\n" + "\n".join(warnings))
    errs = "\n".join(t for t in (result_tables.errors_text(main_results, label),
                                 result_tables.errors_text(ref_results or [], ref_label or ""),
                                 result_tables.errors_text(cluster_results, "cluster"),
                                 scale.errors_text(scale_doc) if scale_doc else "") if t)
    if errs:
        print("\nErrors:\n" + errs)
        failed = True
    path = args.json or result_tables.results_path(label + (f"-vs-{ref_label}" if ref_label else ""))
    result_tables.write_json(doc, path)
    print(f"\nJSON: {os.path.relpath(path)}")
    return 1 if failed else 0
