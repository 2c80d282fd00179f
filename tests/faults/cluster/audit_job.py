"""The lifecycle job run on a Jepsen-style run's event logs, its output read back and held
against the checker's history (audit.py is the pure comparison; this is its IO).

The nodes run with `--events full` (loopnodes.py `EVENTS`); once they have stopped (a live
process's log ends without `process_stop`, which the job takes for a gap up to the end of the
log), `analyse` runs the job once over every node's `events/` folder, and `audit` reads what it
wrote for one run's queue: its lifecycles (named by the publishers' message_id,
workload.message_id), anomalies and log gaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from tests.faults.cluster import audit
from tests.faults.cluster.workload import History, ident_of_message_id

LIFECYCLE_COLUMNS = ["msg_id", "message_id", "parent_msg_id", "final_state", "log_gap",
                     "deliveries", "acks"]


@dataclass(frozen=True)
class JobOutput:
    """What one run of the job wrote, read back (lists of dicts, as pyarrow gives them)."""
    out: Path
    lifecycles: list
    anomalies: list
    gaps: list
    summary: str  # the job's exit status and its gaps, for a failing test's message


def events_dirs(node_folders: list) -> list:
    """The `data/events` folders of the nodes' folders that have one."""
    return [d for f in node_folders if (d := Path(f) / "data" / "events").is_dir()]


def analyse(dirs: list, out: Path, spark) -> JobOutput:
    """Runs the job (in `spark`) on `dirs`, writing under `out`; raises when it fails."""
    from spark_analysis import lifecycle
    args = lifecycle.parse_args(["--events", ",".join(str(d) for d in dirs), "--out", str(out),
                                 "--no-progress"])
    status = lifecycle.run(args, spark=spark)
    if status != 0:
        raise RuntimeError(f"the lifecycle job exited with {status} on {dirs}")
    lcs = pq.read_table(out / "lifecycles", columns=LIFECYCLE_COLUMNS).to_pylist()
    an = pq.read_table(out / "anomalies").to_pylist()
    gaps = pq.read_table(out / "gaps").to_pylist()
    return JobOutput(out, lcs, an, gaps, f"{len(lcs)} lifecycles, {len(an)} anomalies, "
                     f"{len(gaps)} gaps")


def audit_run(job: JobOutput, h: History, queue: str, drained: bool = False) -> audit.Audit:
    """The job's verdicts on the messages of `queue`'s run against that run's history
    (`drained`: the run's drain left the queue empty on every node)."""
    with h.lock:
        truths = audit.truths_from_history(dict(h.published), list(h.deliveries),
                                           dict(h.attempted_ns))
    views = audit.views_by_message_id(job.lifecycles, job.anomalies,
                                      lambda mid: ident_of_message_id(queue, mid))
    gaps = [audit.Gap(f"{g['node']}/{g['process']}", g["t_from_ns"], g["t_to_ns"],
                      g.get("reason") or "") for g in job.gaps]
    return audit.compare(truths, views, gaps, drained=drained)


def problems(a: audit.Audit) -> list:
    """What fails a run's audit: any disagreement (false `lost`, missed losses, an acked
    message the job calls something else, unseen duplicates)."""
    c = a.counts()
    if not c["disagree"]:
        return []
    return [f"the lifecycle job disagrees with the clients on {c['disagree']} of "
            f"{c['messages']} messages ({c['false_lost']} false lost, {c['missed_losses']} "
            f"missed losses, {c['duplicates_unseen']} duplicates unseen)"]


def spark_session():
    """A local Spark session for `make jepsen` (the test suite shares tests/conftest.py's)."""
    from spark_analysis import session
    return session.build("local[2]", driver_memory="1g", shuffle_partitions=4,
                         driver_java_options=session.SMALL_RUN_JAVA_OPTIONS)
