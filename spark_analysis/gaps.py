"""Where the logs are incomplete: process runs, the spans their logs cover, and their gaps
(docs/events.md, "Log gaps").

Every event carries its process run's id and a sequence number that the writer spends on every
event, kept or dropped (actors/events.py). A run's log is complete when its numbers have no hole
and it ends with `process_stop`. Two kinds of gap:
- a hole in the numbers (events dropped on a full buffer, a file lost): from the last event
  before the hole to the first after it;
- a run that ends without `process_stop` (kill -9, a crash, power loss): from its last event to
  the moment it is known dead -- the node's `process_crashed` for that pid, else the start of the
  next run of the same process on that node, else the end of the whole log.

Then every message whose verdict could hang on a missing event of such a run gets the gap as its
`log_gap` (`message_gaps`): the runs that wrote any of its events or host a queue it was routed
to, with a gap that ends after the message's first event. lifecycles.py makes such a message's
unsettled verdict `unknown`, never `lost`.

The runs and crash events are small (one row per process run): they are collected and the gaps
worked out here in plain Python (`find`); only the runs whose numbers have holes are sorted.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

QUEUE_ACTORS = ("queue", "backing_queue")  # the actors whose run hosts the queue they name


@dataclass(frozen=True)
class Run:
    """One run of one process, as its events show it."""
    node: str
    process: str
    run_id: str
    pid: int
    t_first_ns: int  # its first event
    t_last_ns: int  # its last event
    first_seq: int
    last_seq: int
    events: int  # events read (numbers between first_seq and last_seq that are there)
    stopped: bool  # it wrote process_stop
    dropped: int  # events it dropped on a full buffer (its last report of them)
    clock_lead_ns: int  # how far its hybrid clock ran ahead of its own clock (skew relied on)


@dataclass(frozen=True)
class Jump:
    """A hole in one run's sequence numbers: `after` is the last number before it."""
    run_id: str
    after: int
    before: int  # the first number after the hole
    t_after_ns: int
    t_before_ns: int


@dataclass(frozen=True)
class Crash:
    """A process_crashed event: the node saw one of its workers die."""
    node: str
    process: str  # the worker that died
    pid: int
    t_ns: int
    exit_status: str


@dataclass(frozen=True)
class Gap:
    node: str
    process: str
    run_id: str
    pid: int
    kind: str  # "missing_events" (a hole in the numbers) or "no_stop" (the run's end is lost)
    seq_from: int  # the first number missing (no_stop: the one after the last event)
    seq_to: int | None  # the last number missing (None: unknown, the run's end)
    t_from_ns: int  # the last event before the gap
    t_to_ns: int  # the first event after it, or when the run was known dead
    reason: str  # "log gap in NODE/PROCESS from T1 to T2 (why)"


GAP_COLUMNS = ("node string, process string, run_id string, pid bigint, kind string, "
               "seq_from bigint, seq_to bigint, t_from_ns bigint, t_to_ns bigint, reason string")
RUN_COLUMNS = ("node string, process string, run_id string, pid bigint, t_first_ns bigint, "
               "t_last_ns bigint, first_seq bigint, last_seq bigint, events bigint, "
               "stopped boolean, dropped bigint, clock_lead_ns bigint, gaps bigint")


def iso(t_ns: int) -> str:
    return dt.datetime.fromtimestamp(t_ns / 1e9, dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def _reason(run: Run, t_from: int, t_to: int, why: str) -> str:
    return f"log gap in {run.node}/{run.process} from {iso(t_from)} to {iso(t_to)} ({why})"


def runs(events: DataFrame) -> DataFrame:
    """One row per process run (events with a run id and a sequence number)."""
    kind = F.col("kind")
    return (events.where(F.col("run_id").isNotNull() & F.col("seq").isNotNull())
            .groupBy("run_id").agg(
                F.first("node").alias("node"), F.first("process").alias("process"),
                F.first("pid").alias("pid"),
                F.min("t_ns").alias("t_first_ns"), F.max("t_ns").alias("t_last_ns"),
                F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
                F.count(F.lit(1)).alias("events"),
                F.max(kind == "process_stop").alias("stopped"),
                F.coalesce(F.max("dropped"), F.lit(0)).alias("dropped"),
                F.coalesce(F.max("clock_lead_ns"), F.lit(0)).alias("clock_lead_ns")))


def jumps(events: DataFrame, run_ids: list[str]) -> DataFrame:
    """The holes in the numbers of the given runs (those whose count fell short)."""
    w = Window.partitionBy("run_id").orderBy("seq")
    ev = (events.where(F.col("run_id").isin(run_ids) & F.col("seq").isNotNull())
          .select("run_id", "seq", "t_ns")
          .withColumn("prev_seq", F.lag("seq").over(w))
          .withColumn("prev_t", F.lag("t_ns").over(w)))
    return ev.where(F.col("seq") > F.col("prev_seq") + 1).select(
        "run_id", F.col("prev_seq").alias("after"), F.col("seq").alias("before"),
        F.col("prev_t").alias("t_after_ns"), F.col("t_ns").alias("t_before_ns"))


def find(run_list: list[Run], jump_list: list[Jump], crashes: list[Crash],
         log_end_ns: int) -> list[Gap]:
    """The gaps of every run (see the module docstring), oldest first."""
    gaps = []
    by_id = {r.run_id: r for r in run_list}
    for j in jump_list:
        r = by_id[j.run_id]
        n = j.before - j.after - 1
        gaps.append(Gap(r.node, r.process, r.run_id, r.pid, "missing_events", j.after + 1,
                        j.before - 1, j.t_after_ns, j.t_before_ns,
                        _reason(r, j.t_after_ns, j.t_before_ns, f"{n} events missing")))
    for r in run_list:
        if r.first_seq > 0:  # the run's first file is gone
            gaps.append(Gap(r.node, r.process, r.run_id, r.pid, "missing_events", 0,
                            r.first_seq - 1, r.t_first_ns, r.t_first_ns,
                            _reason(r, r.t_first_ns, r.t_first_ns,
                                    f"its first {r.first_seq} events missing")))
        if r.stopped:
            continue
        crash = min((c for c in crashes if (c.node, c.process, c.pid) == (r.node, r.process,
                                                                          r.pid)
                     and c.t_ns >= r.t_last_ns), key=lambda c: c.t_ns, default=None)
        later = [o.t_first_ns for o in run_list if (o.node, o.process) == (r.node, r.process)
                 and o.t_first_ns > r.t_last_ns]
        if crash is not None:
            t_to, why = crash.t_ns, f"no process_stop; {crash.exit_status}"
        elif later:
            t_to, why = min(later), "no process_stop; the process started again"
        else:
            t_to, why = max(log_end_ns, r.t_last_ns), "no process_stop; the log ends"
        gaps.append(Gap(r.node, r.process, r.run_id, r.pid, "no_stop", r.last_seq + 1, None,
                        r.t_last_ns, t_to, _reason(r, r.t_last_ns, t_to, why)))
    gaps.sort(key=lambda g: (g.t_from_ns, g.node, g.process))
    return gaps


def collect(events: DataFrame) -> tuple[list[Run], list[Gap]]:
    """The runs and their gaps, worked out on the driver (see the module docstring)."""
    run_list = [Run(**{k: r[k] for k in Run.__dataclass_fields__}) for r in runs(events)
                .collect()]
    short = [r.run_id for r in run_list if r.events < r.last_seq - r.first_seq + 1]
    jump_list = [Jump(**r.asDict()) for r in jumps(events, short).collect()] if short else []
    crashes = [Crash(r["node"], r["crashed_process"], r["crashed_pid"], r["t_ns"],
                     r["exit_status"] or "")
               for r in events.where((F.col("kind") == "process_crashed") &
                                     F.col("crashed_process").isNotNull())
               .select("node", "crashed_process", "crashed_pid", "t_ns", "exit_status")
               .collect()]
    log_end = events.agg(F.max("t_ns")).first()[0] or 0
    return run_list, find(run_list, jump_list, crashes, log_end)


def gaps_frame(spark: SparkSession, gaps: list[Gap]) -> DataFrame:
    return spark.createDataFrame([asdict(g) for g in gaps], GAP_COLUMNS)


def runs_frame(spark: SparkSession, run_list: list[Run], gaps: list[Gap]) -> DataFrame:
    """The runs with the number of gaps each has: the spans the logs cover."""
    count: dict[str, int] = {}
    for g in gaps:
        count[g.run_id] = count.get(g.run_id, 0) + 1
    return spark.createDataFrame([dict(asdict(r), gaps=count.get(r.run_id, 0))
                                  for r in run_list], RUN_COLUMNS)


def message_gaps(events: DataFrame, gaps: DataFrame) -> DataFrame:
    """(msg_id, log_gap, log_gaps, log_gap_until_ns): for every message that a gap could
    hide events of, the earliest such gap's reason, how many there are and when the last of
    them ends (a census after that settles a copy: lifecycles.finish). A gap counts for a message when it is
    in a run that wrote one of its events or hosts a queue it was routed to (whose enqueued
    event the gap could have taken), and ends after the message's first event."""
    ev = events.where(F.col("msg_id").isNotNull())
    first = ev.groupBy("msg_id").agg(F.min("t_ns").alias("t_first_ns"))
    wrote = ev.where(F.col("run_id").isNotNull()).select("msg_id", "run_id").distinct()
    queues = (ev.select("msg_id", "vhost", F.explode(
        F.when(F.col("kind") == "routed", F.col("queues")).otherwise(F.array("queue")))
        .alias("q")).where(F.col("q").isNotNull()).distinct())
    hosts = (events.where(F.col("actor").isin(*QUEUE_ACTORS) & F.col("queue").isNotNull() &
                          F.col("run_id").isNotNull())
             .select(F.col("vhost").alias("h_vhost"), F.col("queue").alias("h_queue"),
                     "run_id").distinct())
    hosted = (queues.join(hosts, (queues.q == hosts.h_queue) &
                          queues.vhost.eqNullSafe(hosts.h_vhost))
              .select("msg_id", "run_id"))
    g = gaps.select("run_id", "t_from_ns", "t_to_ns", "reason")
    hit = (wrote.unionByName(hosted).distinct().join(g, "run_id").join(first, "msg_id")
           .where(F.col("t_to_ns") >= F.col("t_first_ns")))
    return hit.groupBy("msg_id").agg(
        F.min_by("reason", F.struct("t_from_ns", "reason")).alias("log_gap"),
        F.count(F.lit(1)).alias("log_gaps"),
        F.max("t_to_ns").alias("log_gap_until_ns"))  # (a census after it settles a copy)

