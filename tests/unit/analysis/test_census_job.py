"""spark_analysis: what a queue census decides (docs/events.md, "Census"), over a log the real
cores wrote.

The channel and queue cores run joined by core_fakes.Wire with actors/events.py as their log
(as in test_fates_job.py); the backing queue's part is played by what it does in the broker:
`persisted()` and its `synced` event, `restore()` of the entries an index gave back, and
`census.emit` of `census.snapshot` of the core, the functions the Queue and BackingQueue call.
"""

from __future__ import annotations

import os
import sys
import types

import pyarrow.parquet as pq
import pytest

from actors import events
from actors.core.queue import QueueCore
from actors.core.queue_settings import parse as queue_settings
from actors.messages import StoredMessage
from actors.queue import census
from protocol import methods as am
from protocol.properties import BasicProperties
from queue_index import IndexEntry

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core"))
from core_fakes import Wire, cmd, publish, qaddr  # noqa: E402

from spark_analysis import lifecycle  # noqa: E402

QUEUES = {"recovered": {}, "running": {}}


def _send(w, *methods_or_cmds):
    w.client(*[c if not isinstance(c, am.Method) else cmd(c) for c in methods_or_cmds])


def _sync(w, name) -> None:
    """The backing queue's sync: everything handed to it is on disk, then the queue hears."""
    core, out = w.q(name), w.qouts[name]
    for (msgs,) in out.of("persist"):
        for msg in msgs:
            events.emit("synced", msg.msg_id, actor="backing_queue", vhost="/", queue=name,
                        seq_id=msg.seq_id)
        core.persisted(msgs)
    out.clear()
    w.run()


def _restart(w, name, keep: set) -> QueueCore:
    """The queue process starts again and its index gives back the messages named in `keep`
    (the others are what a faulty recovery lost): what Queue.on_start/_serve then do."""
    old = w.q(name)
    kept = sorted((x for x in old.messages() if x.props_raw and x.seq_id in keep),
                  key=lambda x: x.seq_id)
    entries = [StoredMessage(IndexEntry(x.seq_id, x.msg_id, x.exchange, x.routing_key,
                                        x.props_raw, x.body, len(x.body), delivered=True),
                             x.body, True) for x in kept]
    core = QueueCore("/", name, queue_settings({}), w.qouts[name].port(events=events), w.now,
                     durable=True)
    core.restore(old.next_seq_id, entries, 0, 0, w.now, 0)
    w.queues[qaddr(name)] = core
    events.emit("queue_started", None, actor="queue", vhost="/", queue=name, recovered=True)
    census.emit(events, "/", name, census.snapshot(core, "started"), [], True)
    return core


def _named(msg, message_id) -> bool:
    return BasicProperties.decode(msg.props_raw).message_id == message_id


def _seq(w, name, message_id) -> int:
    return next(x.seq_id for x in w.q(name).messages() if _named(x, message_id))


def workload(directory) -> None:
    """What happens; the comments say what the job must conclude."""
    events.configure(types.SimpleNamespace(data_dir=directory, events="full"), "w", "n1")
    try:
        w = Wire(QUEUES, events=events)
        w.queues[qaddr("recovered")] = QueueCore("/", "recovered", queue_settings({}),
                                                 w.qouts["recovered"].port(events=events),
                                                 w.now, durable=True)
        # before confirm.select: never confirmed
        _send(w, publish("recovered", delivery_mode=2, message_id="synced-not-recovered"),
              publish("recovered", delivery_mode=1, message_id="transient-not-recovered"),
              publish("running", message_id="gone-from-running"))
        _send(w, am.ConfirmSelect())
        _send(w, publish("recovered", delivery_mode=2, message_id="recovered"),
              publish("recovered", delivery_mode=2, message_id="confirmed-not-recovered"),
              publish("recovered", delivery_mode=2, message_id="unacked-recovered"),
              publish("recovered", delivery_mode=1, message_id="confirmed-transient"),
              publish("running", message_id="held-by-census"),
              publish("running", message_id="confirmed-gone-from-running"))
        _sync(w, "recovered")
        _send(w, am.BasicGet(queue="recovered", no_ack=False))  # unacked-recovered, unacked
        keep = {_seq(w, "recovered", n) for n in ("recovered", "unacked-recovered")}
        _restart(w, "recovered", keep)

        # a running queue loses two messages without a word (what the census is there to
        # catch), then takes its census; a publish after it is not judged by it
        running = w.q("running")
        for name in ("gone-from-running", "confirmed-gone-from-running"):
            (msg,) = [x for x in running.ready[0].items if _named(x, name)]
            running.prios.remove({msg.seq_id})
        census.emit(events, "/", "running", census.snapshot(running, "requested"), [], False)
        _send(w, publish("running", message_id="after-census"))
        w.run()
    finally:
        events.close()


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("census")
    workload(str(root))
    out = root / "out"
    args = lifecycle.parse_args(["--events", str(root / "events"), "--out", str(out),
                                 "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    every = pq.read_table(out / "lifecycles").to_pylist()
    return types.SimpleNamespace(
        rows={r["message_id"]: r for r in every},
        anomalies=pq.read_table(out / "anomalies").to_pylist())


def test_census_decides_the_copies_it_judges(job):
    assert {k: r["final_state"] for k, r in job.rows.items()} == {
        "recovered": "queued",
        "unacked-recovered": "queued",  # recovery requeued it
        "confirmed-not-recovered": "vanished",
        "synced-not-recovered": "vanished",
        "transient-not-recovered": "vanished",
        "confirmed-transient": "vanished",
        "held-by-census": "queued",
        "gone-from-running": "vanished",
        "confirmed-gone-from-running": "vanished",
        "after-census": "queued"}


def test_a_copy_a_census_holds_is_confirmed_there(job):
    for name in ("recovered", "unacked-recovered", "held-by-census"):
        (copy,) = job.rows[name]["copies"]
        assert copy["t_census"] is not None and copy["census_missing"] is None, name
    (copy,) = job.rows["after-census"]["copies"]
    assert copy["t_census"] is None  # taken before it came


def test_what_a_census_misses_is_lost_or_missing(job):
    found = sorted((a["kind"], a["message_id"], a["queue"], a["detail"]) for a in job.anomalies)
    assert found == [
        ("lost", "confirmed-gone-from-running", "running",
         "confirmed, then missing from its queue's census (requested)"),
        ("lost", "confirmed-not-recovered", "recovered",
         "confirmed, then missing from its queue's census (started)"),
        ("lost", "synced-not-recovered", "recovered",
         "synced, then missing from its queue's census (started)"),
        ("missing_from_census", "gone-from-running", "running",
         "queued in the job's view, absent from its queue's census (requested)"),
    ]  # (a transient message that did not come back after a restart, confirmed or not, is no
    #    anomaly: RabbitMQ's rule)


# -- the census itself, without Spark ---------------------------------------------------------
def test_seq_ranges_are_inclusive_runs():
    assert census.seq_ranges([]) == []
    assert census.seq_ranges([3, 4, 5, 5, 9, 11, 12]) == [3, 5, 9, 9, 11, 12]
    r = census.seq_ranges([1, 2, 7])
    assert census.count(r) == 3
    assert [s for s in range(10) if census.holds(r, s)] == [1, 2, 7]


class _Log:
    def __init__(self):
        self.got = []

    def enabled(self):
        return True

    def emit(self, kind, msg_id, **fields):
        self.got.append((kind, msg_id, fields))


def test_emit_merges_memory_and_paged_parts_below_the_snapshot():
    log = _Log()
    snap = census.Census("requested", [1, 2, 9], {0: 2}, below=12)
    n = census.emit(log, "/", "q", snap, [[3, 4, 5, 12, 13]], durable=True)
    (kind, mid, fields), = log.got
    assert (kind, mid, n) == ("queue_census", None, 6)
    assert fields == dict(actor="backing_queue", vhost="/", queue="q", reason="requested",
                          seq_ranges=[1, 5, 9, 9], count=6, seq_below=12, durable=True,
                          epoch=0)


def test_the_jobs_range_search_agrees_with_the_census_module(spark):
    from pyspark.sql import functions as F

    from spark_analysis.lifecycles import _in_ranges
    cases = [[], [4, 4], [1, 3, 5, 5, 8, 10, 20, 30], list(range(0, 2000, 2))]  # 1000 ranges
    rows = [(i, r, s) for i, r in enumerate(cases) for s in range(-1, 2002)]
    df = spark.createDataFrame(rows, "case int, ranges array<bigint>, seq bigint")
    starts = F.filter("ranges", lambda x, i: i % 2 == 0)
    ends = F.filter("ranges", lambda x, i: i % 2 == 1)
    got = {(r["case"], r["seq"]): r["held"] for r in df.select(
        "case", "seq", _in_ranges(starts, ends, F.col("seq")).alias("held")).collect()}
    assert got == {(i, s): census.holds(r, s) for i, r, s in rows}
