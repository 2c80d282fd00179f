"""spark_analysis: the job's rules for fates decided outside a copy's own events (purge, queue
deletion, tx.rollback, dead-lettering, partial enqueue), over a log the real cores wrote.

The channel and queue cores run joined by core_fakes.Wire (no sockets, no processes) with
actors/events.py as their event log, so every field the job reads is one the broker's code
emits; then one run of the job for the module.
"""

from __future__ import annotations

import os
import sys
import types

import pyarrow.parquet as pq
import pytest

from actors import events
from protocol import methods as am

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core"))
from core_fakes import Wire, cmd, publish  # noqa: E402

from spark_analysis import lifecycle  # noqa: E402

QUEUES = {
    "purged": {}, "deleted": {}, "crashed": {}, "tx": {}, "dead": {}, "takes": {},
    "work": {"x-dead-letter-exchange": "dlx"},
    "refuses": {"x-max-length": 0, "x-overflow": "reject-publish"},
    "refuses-dlx": {"x-max-length": 0, "x-overflow": "reject-publish-dlx",
                    "x-dead-letter-exchange": "dlx"},
}


def _send(w, *methods_or_cmds):
    w.client(*[c if not isinstance(c, am.Method) else cmd(c) for c in methods_or_cmds])


def _get(w, queue) -> int:
    """basic.get on the wire's channel: the delivery tag it got."""
    _send(w, am.BasicGet(queue=queue, no_ack=False))
    return max(w.channel.unacked)


def workload(directory) -> None:
    """What a client does; the comments say what the job must conclude."""
    events.configure(types.SimpleNamespace(data_dir=directory, events="full"), "w", "n1")
    try:
        w = Wire(QUEUES, events=events, dead_letters=True)
        router = w.replica.router
        router.declare_exchange("/", "dlx", "fanout")
        router.bind("/", "dlx", "queue", "dead", "")
        router.declare_exchange("/", "both", "fanout")
        router.bind("/", "both", "queue", "takes", "")
        router.bind("/", "both", "queue", "refuses", "")

        _send(w, publish("purged", message_id="purged-1"),
              publish("purged", message_id="purged-2"))
        w.q("purged").purge()  # what the queue shell does on queue.purge
        _send(w, publish("purged", message_id="after-purge"))  # queued

        _send(w, publish("deleted", message_id="deleted-unacked"),
              publish("deleted", message_id="deleted-ready"))
        _get(w, "deleted")
        w.q("deleted").delete(False, False, "x-expires")  # both copies deleted

        _send(w, publish("work", message_id="rejected"))
        _send(w, am.BasicReject(delivery_tag=_get(w, "work"), requeue=False))
        _send(w, am.BasicAck(delivery_tag=_get(w, "dead")))  # the child, acked

        _send(w, publish("takes", exchange="both", message_id="partial"))
        _send(w, publish("refuses-dlx", message_id="refused-to-dlx"))  # dead-lettered at once

        # last: the channel stays transactional after tx.select
        # a copy lost in a crash stays lost when its queue is deleted later (the queue_crashed
        # event as the node's metadata actor emits it)
        _send(w, publish("crashed", message_id="lost-in-crash"))
        events.emit("queue_crashed", None, actor="node", vhost="/", queue="crashed", worker=0)
        w.q("crashed").delete(False, False, "delete")

        _send(w, am.TxSelect(), publish("tx", message_id="rolled-back"), am.TxRollback(),
              publish("tx", message_id="committed"), am.TxCommit())

        confirming = Wire(QUEUES, events=events)  # a second channel, in confirm mode
        _send(confirming, am.ConfirmSelect(), publish("refuses", message_id="nacked"))
        w.run()
    finally:
        events.close()


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("fates")
    workload(str(root))
    out = root / "out"
    args = lifecycle.parse_args(["--events", str(root / "events"), "--out", str(out),
                                 "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    every = pq.read_table(out / "lifecycles").to_pylist()
    return types.SimpleNamespace(
        every=every, rows={r["message_id"]: r for r in every if r["parent_msg_id"] is None},
        anomalies=pq.read_table(out / "anomalies").to_pylist(),
        events=pq.read_table(out / "events", columns=["kind", "durable"]).to_pylist())


def test_final_states(job):
    assert {k: r["final_state"] for k, r in job.rows.items()} == {
        "purged-1": "purged", "purged-2": "purged", "after-purge": "queued",
        "deleted-unacked": "deleted", "deleted-ready": "deleted",
        "rolled-back": "rolled_back", "committed": "queued",
        "rejected": "dead_lettered", "partial": "queued", "nacked": "nacked_to_publisher",
        "refused-to-dlx": "dead_lettered", "lost-in-crash": "vanished"}
    assert job.rows["nacked"]["nack_reason"] == "reject-publish"
    assert {r["nack_reason"] for r in job.every} == {None, "reject-publish"}


def test_enqueue_events_say_durable(job):
    enqueued = [r for r in job.events if r["kind"] == "enqueued"]
    assert enqueued and {r["durable"] for r in enqueued} == {False}


def test_purged_and_deleted_copies_have_a_removal_time(job):
    for name in ("purged-1", "deleted-unacked"):
        (copy,) = job.rows[name]["copies"]
        assert copy["t_removed"] is not None and copy["time_in_queue_ms"] >= 0


def _child(job, parent):
    (child,) = [r for r in job.every if r["parent_msg_id"] == parent["msg_id"]]
    return child


def test_dead_lettered_child_links_to_its_parent(job):
    parent = job.rows["rejected"]
    child = _child(job, parent)
    assert child["parent_msg_id"] == parent["msg_id"]
    assert parent["dead_lettered_to"] == child["msg_id"]
    assert (child["final_state"], child["dead_letter_reason"], child["exchange"],
            child["routed_queues"], child["message_id"]) == (
        "acked", "rejected", "dlx", ["dead"], "rejected")
    assert [c["queue"] for c in parent["copies"]] == ["work"]


def test_a_publish_refused_to_the_dlx_links_to_its_copy(job):
    parent = job.rows["refused-to-dlx"]
    child = _child(job, parent)
    assert parent["dead_lettered_to"] == child["msg_id"]
    assert (child["final_state"], child["dead_letter_reason"], child["routed_queues"]) == (
        "queued", "maxlen", ["dead"])


def test_partial_enqueue_is_the_only_anomaly(job):
    assert [(a["kind"], a["message_id"], a["queue"], a["detail"]) for a in job.anomalies] == [
        ("partial_enqueue", "partial", "refuses", "routed to 2 queues, enqueued in 1")]
