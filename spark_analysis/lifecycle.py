"""The lifecycle job: Leveret's event logs -> lifecycles, latencies, anomalies, report.

    spark-submit spark_analysis/lifecycle.py --events DIR --out DIR [--master URL]
    python -m spark_analysis.lifecycle --events DIR --out DIR [--message MSG_ID]
    make analyze EVENTS=DIR OUT=DIR [MASTER=spark://HOST:PORT]

DIR holds the .events files of one or many nodes (searched recursively; several directories may
be given, comma-separated). DIR and OUT are paths of Hadoop's file systems: plain paths (the
default file system), file://, hdfs://, s3a://... Writes, under OUT:
    events/              Parquet, every event decoded, one row each (log_reader.py, schema.py);
                         a later run into the same OUT appends only the new files' events
    manifest/            Parquet, one row per .events file: what events/ holds of it
                         (manifest.py)
    runs/                Parquet, one row per process run: the span its log covers (gaps.py)
    gaps/                Parquet, one row per log gap: a hole in a run's sequence numbers, or
                         a run that ended without process_stop
    lifecycles/          Parquet, one row per message (lifecycles.py)
    anomalies/           Parquet, one row per anomaly, `kind` column (anomalies.py)
    latency/by_queue/    Parquet, percentiles per metric and queue (latency.py)
    latency/by_minute/   Parquet, percentiles per metric and minute
    report.html, plots/  the report (report.py)
and prints a short summary. local[*] unless --master (or spark-submit's) says otherwise.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys

if __package__ in (None, ""):  # run as a script (spark-submit spark_analysis/lifecycle.py)
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, os.path.dirname(_here))

from spark_analysis import log_reader, report  # noqa: E402
from spark_analysis import schema as S  # noqa: E402

STEPS = ["start Spark", "read events", "log gaps", "lifecycles", "anomalies", "latencies",
         "throughput and timeline", "report"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark_analysis.lifecycle", description=__doc__.split(
        "\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", required=True, help="directory (or comma-separated directories "
                   "and files) holding .events files: a plain path (default file system), "
                   "file://, hdfs://, s3a://...")
    p.add_argument("--out", required=True, help="output directory, any of those too (replaced "
                   "parts: lifecycles/, anomalies/, latency/, plots/, report.html; events/ and "
                   "manifest/ grow with the log)")
    p.add_argument("--master", help="Spark master URL (default local[*], or spark-submit's)")
    p.add_argument("--message", help="msg_id (hex) or publisher message_id of the message whose "
                   "timeline the report draws (default: the first anomaly's, else the message "
                   "with the most events)")
    p.add_argument("--redelivery-threshold", type=int, default=10,
                   help="redelivery_loop: more redeliveries of one copy than this (default 10)")
    p.add_argument("--driver-memory", default="4g", help="when not under spark-submit")
    p.add_argument("--shuffle-partitions", type=int, default=0,
                   help="default: Spark's, coalesced by adaptive execution to the data and "
                   "the cluster (1 for a log of at most 1 MiB)")
    p.add_argument("--full", action="store_true", help="decode every file again (default: "
                   "only the files that are new or grew since the last run into OUT)")
    p.add_argument("--samples", type=int, default=50_000,
                   help="latency values per metric drawn in the histograms")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p.parse_args(argv)


def check_java() -> str | None:
    if shutil.which("java") or os.environ.get("JAVA_HOME"):
        return None
    return ("spark_analysis: Java is required by Spark and was not found; install it with\n"
            "    sudo apt-get install openjdk-17-jre-headless")


def _rows(df) -> list[dict]:
    return [r.asDict(recursive=True) for r in df.collect()]


def run(args: argparse.Namespace, spark=None) -> int:
    """The job; with `spark`, in that session (left running), else in its own."""
    from pyspark import StorageLevel
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from spark_analysis import (anomalies, gaps, hadoop_fs, latency, lifecycles, lookup, manifest,
                                session)
    from spark_analysis.progress import Progress

    prog = Progress(STEPS, enabled=not args.no_progress)
    prog.begin("start Spark")
    own = spark is None
    if own:
        spark = session.build(args.master, args.driver_memory, args.shuffle_partitions)
    prog.attach(spark)
    restore_session = None
    try:
        prog.begin("read events")
        out = hadoop_fs.qualify(spark, args.out)
        inputs = [hadoop_fs.qualify(spark, p) for p in args.events.split(",") if p]
        try:
            listing = log_reader.scan(spark, inputs)
        except AnalysisException as e:
            print(f"spark_analysis: cannot list {args.events}: {e}", file=sys.stderr)
            return 2
        restore_session = session.fit_to_input(spark, sum(f.length for f in listing),
                                               args.shuffle_partitions)
        layout = S.ddl()
        manifest_dir, events_dir = hadoop_fs.join(out, "manifest"), hadoop_fs.join(out, "events")
        previous = None if args.full else manifest.read(spark, manifest_dir)
        if previous is not None and not hadoop_fs.exists(spark, events_dir):
            previous = None  # (OUT/events/ was removed by hand: start again)
        plan = manifest.plan(previous, listing, ",".join(inputs), layout)
        new_headers = log_reader.headers(spark, [f.path for f in plan.read])
        why = manifest.replaced(plan, new_headers)
        if why:  # a file under a recorded name is another file: start again
            run = plan.run
            plan = manifest.plan(None, listing, ",".join(inputs), layout)
            plan.run, plan.why = run, why
            new_headers = log_reader.headers(spark, [f.path for f in plan.read])
        read_paths = [f.path for f in plan.read]
        clock_of = {p: log_reader.clock_key(h, p) for p, h in new_headers.items()}
        known = manifest.offsets(plan, {})
        offsets = manifest.offsets(plan, log_reader.clock_offsets(
            {p: h for p, h in new_headers.items() if clock_of[p] not in known}))
        if not new_headers and not any(e.valid for e in plan.previous.values()):
            print(f"spark_analysis: no {S.SCHEMA} .events files under {args.events}",
                  file=sys.stderr)
            return 2
        # Decoded once (Python workers), kept as Parquet: every later pass reads only the
        # columns it needs, and nothing big has to fit in the JVM's memory. An incremental run
        # appends the new files' events; the manifest is removed first, so a run that dies
        # half-way leaves the next one a full read rather than rows it would add twice.
        hadoop_fs.delete(spark, manifest_dir)
        if plan.full or read_paths:
            log_reader.load(spark, read_paths, offsets, plan.skip).write.mode(
                "overwrite" if plan.full else "append").parquet(events_dir)
        events = spark.read.parquet(events_dir)
        # one pass for the counts per kind and per file and the log's time span
        by_file = _rows(events.groupBy("file", "kind", F.col("msg_id").isNull().alias("no_id"))
                        .agg(F.count(F.lit(1)).alias("count"), F.min("t_ns").alias("t_min"),
                             F.max("t_ns").alias("t_max")))
        t_first = min((r["t_min"] for r in by_file if r["t_min"] is not None), default=0)
        t_last = max((r["t_max"] for r in by_file if r["t_max"] is not None), default=0)
        events_by_kind: dict[str, int] = {}
        per_file: dict[str, int] = {}
        no_id = 0
        for r in by_file:
            events_by_kind[r["kind"]] = events_by_kind.get(r["kind"], 0) + r["count"]
            per_file[r["file"]] = per_file.get(r["file"], 0) + r["count"]
            if r["no_id"] and r["kind"] not in (S.PROCESS_KINDS + S.LOG_KINDS + S.REMOVAL_KINDS
                                                + S.TX_KINDS + S.REPLICA_KINDS):
                no_id += r["count"]
        recorded = manifest.entries(plan, new_headers, clock_of, offsets, per_file,
                                    ",".join(inputs), layout)
        manifest.write(spark, manifest_dir, recorded)

        prog.begin("log gaps")
        run_list, gap_list = gaps.collect(events)
        gaps.runs_frame(spark, run_list, gap_list).write.mode("overwrite").parquet(
            hadoop_fs.join(out, "runs"))
        gap_df = gaps.gaps_frame(spark, gap_list)
        gap_df.write.mode("overwrite").parquet(hadoop_fs.join(out, "gaps"))
        # a complete log pays nothing for the gap rule: no join unless there is a gap
        msg_gaps = gaps.message_gaps(events, gap_df) if gap_list else None

        prog.begin("lifecycles")
        lc_dir = hadoop_fs.join(out, "lifecycles")
        # (the few per-queue and per-channel events: one scan of the log for every rule)
        marks = lifecycles.mark_events(events).persist(StorageLevel.MEMORY_AND_DISK)
        lifecycles.build(events, msg_gaps, marks).write.mode("overwrite").parquet(lc_dir)
        marks.unpersist()
        lookup.write(events, out)  # lookup/: the layout traces read one message from
        lc = spark.read.parquet(lc_dir)
        final_states = {r["final_state"]: r["count"] for r in
                        _rows(lc.groupBy("final_state").count())}

        prog.begin("anomalies")
        an = anomalies.find(lc, args.redelivery_threshold)
        an.write.mode("overwrite").parquet(hadoop_fs.join(out, "anomalies"))
        an = spark.read.parquet(hadoop_fs.join(out, "anomalies"))
        anomaly_counts = {r["kind"]: r["count"] for r in _rows(an.groupBy("kind").count())}
        anomaly_rows = _rows(an.orderBy("kind", "t").limit(50))

        prog.begin("latencies")
        samples = latency.samples(lc).persist(StorageLevel.DISK_ONLY)
        by_queue = latency.by_queue(samples)
        by_minute = latency.by_minute(samples)
        by_queue.write.mode("overwrite").parquet(hadoop_fs.join(out, "latency", "by_queue"))
        by_minute.write.mode("overwrite").parquet(hadoop_fs.join(out, "latency", "by_minute"))
        by_queue_rows = _rows(spark.read.parquet(hadoop_fs.join(out, "latency", "by_queue"))
                              .orderBy("metric", "queue"))
        by_minute_rows = _rows(spark.read.parquet(hadoop_fs.join(out, "latency", "by_minute"))
                               .orderBy("metric", "minute").limit(2000))
        fractions = {}
        for r in by_queue_rows:
            if r["queue"] == latency.ALL:
                fractions[r["metric"]] = min(1.0, args.samples / max(1, r["count"]))
        hist: dict[str, list[float]] = {}
        if fractions:
            once = samples.where((F.col("metric") != "publish_to_confirm") | F.col("first_copy"))
            for r in once.sampleBy("metric", fractions, seed=1).select(
                    "metric", "value_ms").collect():
                hist.setdefault(r["metric"], []).append(r["value_ms"])
        samples.unpersist()

        prog.begin("throughput and timeline")
        seconds = max(1.0, (t_last - t_first) / 1e9)
        bucket = float(max(1, math.ceil(seconds / 600)))
        thr = (events.groupBy((F.floor(F.col("t_ns") / F.lit(1e9 * bucket)) * F.lit(bucket))
                              .alias("s"), "kind").count().collect())
        throughput = [(float(r["s"]), r["kind"], r["count"]) for r in thr]
        chosen = choose_message(lc, an, args.message)
        timeline = []
        if chosen is not None:
            mid = bytes.fromhex(chosen["msg_id"])
            timeline = _rows(events.where(F.col("msg_id") == F.lit(mid))
                             .orderBy("t_ns", "rank").drop("msg_id"))

        prog.begin("report")
        nodes = sorted({e.node for e in recorded if e.valid})
        data = report.ReportData(
            events_dir=args.events, files=sum(e.valid for e in recorded), nodes=nodes,
            events=sum(events_by_kind.values()), events_by_kind=events_by_kind,
            events_without_msg_id=no_id, messages=sum(final_states.values()),
            final_states=final_states, anomaly_counts=anomaly_counts, anomalies=anomaly_rows,
            latency_by_queue=by_queue_rows, latency_by_minute=by_minute_rows,
            latency_samples=hist, throughput=throughput, bucket_seconds=bucket,
            timeline_msg=chosen, timeline=timeline,
            runs=[dict(vars(r), t_first=gaps.iso(r.t_first_ns), t_last=gaps.iso(r.t_last_ns))
                  for r in run_list],
            gaps=[dict(vars(g), t_from=gaps.iso(g.t_from_ns), t_to=gaps.iso(g.t_to_ns))
                  for g in gap_list])
        prog.close()
        data.seconds = prog.elapsed
        data.steps = prog.timings
        data.files_read = None if plan.full else len(read_paths)
        for name, blob in report.render(data).items():
            hadoop_fs.write_bytes(spark, hadoop_fs.join(out, name), blob)
        print(report.summary_text(data))
        path = hadoop_fs.join(out, "report.html")
        print(f"  report: {hadoop_fs.local_path(path) or path}")
        return 0
    finally:
        prog.close()
        if restore_session is not None:
            restore_session()
        if own:
            spark.stop()


def choose_message(lc, an, wanted: str | None) -> dict | None:
    """The lifecycle row (msg_id, final_state, message_id) the report's timeline shows."""
    from pyspark.sql import functions as F

    cols = ["msg_id", "final_state", "message_id", "n_events"]
    if wanted:
        w = wanted.lower()
        row = lc.where((F.col("msg_id") == w) | (F.col("message_id") == wanted)) \
            .select(*cols).first()
        return row.asDict() if row else None
    first = an.orderBy("kind", "t").select("msg_id").first()
    if first is not None:
        row = lc.where(F.col("msg_id") == first["msg_id"]).select(*cols).first()
        if row is not None:
            return row.asDict()
    row = lc.orderBy(F.col("n_events").desc(), "msg_id").select(*cols).first()
    return row.asDict() if row else None


def main(argv=None) -> int:
    args = parse_args(argv)
    problem = check_java()
    if problem:
        print(problem, file=sys.stderr)
        return 3
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
