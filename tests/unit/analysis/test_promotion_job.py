"""spark_analysis: what a replica's promotion decides (docs/events.md, "Replicas and
promotions"), over a two-node log written with actors/events.py.

A quorum queue's home on node A is cut off: it goes on enqueueing what its member on B never
gets, B is promoted (epoch 1) and numbers its new messages on from its own log, over seq_ids
the deposed A gave to others. The job must keep what B held, end what it did not, and not take
B's census for one of A's copies under the same seq_id. The replicas' own events (ReplicaLog)
are checked without Spark at the end.
"""

from __future__ import annotations

import types

import pyarrow.parquet as pq
import pytest

from actors import events
from actors.messages import MirrorItem
from actors.queue.replica_log import MEMBER, MIRROR, ReplicaLog
from spark_analysis import lifecycle

Q = "qq"


def _mid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def workload(directory: str) -> None:
    a_conn = events.EventLog(directory, "A", "conn-0", flush_interval=3600)
    a_q = events.EventLog(directory, "A", "queue-0", flush_interval=3600)
    b_q = events.EventLog(directory, "B", "queue-0", flush_interval=3600)
    b_conn = events.EventLog(directory, "B", "conn-0", flush_interval=3600)
    copy = dict(vhost="/", queue=Q)

    def publish(n, name, seq_id, confirmed):
        a_conn.emit("publish_received", _mid(n), dict(
            actor="channel", vhost="/", connection="c1", channel=1, seq_no=n, exchange="",
            routing_key=Q, message_id=name, persistent=True))
        a_conn.emit("routed", _mid(n), dict(actor="channel", vhost="/", queues=[Q]))
        a_q.emit("enqueued", _mid(n), dict(actor="queue", seq_id=seq_id, durable=True,
                                           epoch=0, **copy))
        a_q.emit("synced", _mid(n), dict(actor="backing_queue", seq_id=seq_id, **copy))
        return lambda: a_conn.emit("confirmed" if confirmed else "nacked_to_publisher",
                                   _mid(n), dict(actor="channel", vhost="/", connection="c1",
                                                 channel=1, seq_no=n, reason="queue_down"))

    answers = [publish(1, "acked-on-b", 1, True), publish(2, "carried", 2, True)]
    for n, seq_id in ((1, 1), (2, 2)):
        b_q.emit("replica_enqueued", _mid(n), dict(actor="mirror", role=MEMBER, seq_id=seq_id,
                                                   epoch=0, **copy))
    for answer in answers:
        answer()
    # the partition: A goes on, B hears nothing of these
    publish(3, "confirmed-not-on-b", 3, True)()  # (a real loss: the fault the job must name)
    publish(4, "nacked-not-on-b", 4, False)()  # the stale verdict of old
    a_q.emit("queue_census", None, dict(actor="backing_queue", reason="stopped",
                                        seq_ranges=[1, 4], count=4, seq_below=5, durable=True,
                                        epoch=0, **copy))
    # B leads, epoch 1, and numbers on from its log's end (2): 3 and 4 again
    b_q.emit("promoted", None, dict(actor="queue", epoch=1, role=MEMBER, count=2, **copy))
    b_q.emit("queue_started", None, dict(actor="queue", recovered=False, **copy))
    b_q.emit("queue_census", None, dict(actor="backing_queue", reason="started",
                                        seq_ranges=[1, 2], count=2, seq_below=3, durable=True,
                                        epoch=1, **copy))
    for n, name, seq_id in ((5, "new-on-b", 3), (6, "new-on-b-2", 4)):
        b_conn.emit("publish_received", _mid(n), dict(
            actor="channel", vhost="/", connection="c2", channel=1, seq_no=n, exchange="",
            routing_key=Q, message_id=name, persistent=True))
        b_conn.emit("routed", _mid(n), dict(actor="channel", vhost="/", queues=[Q]))
        b_q.emit("enqueued", _mid(n), dict(actor="queue", seq_id=seq_id, durable=True,
                                           epoch=1, **copy))
        b_q.emit("synced", _mid(n), dict(actor="backing_queue", seq_id=seq_id, **copy))
        b_conn.emit("confirmed", _mid(n), dict(actor="channel", vhost="/", connection="c2",
                                               channel=1, seq_no=n))
    # A comes back as a member: its log is dropped and synced again from B
    a_q.emit("replica_dropped", None, dict(actor="mirror", role=MEMBER, reason="resync",
                                           count=4, epoch=1, **copy))
    for n, seq_id in ((1, 1), (2, 2), (5, 3), (6, 4)):
        a_q.emit("replica_enqueued", _mid(n), dict(actor="mirror", role=MEMBER, seq_id=seq_id,
                                                   epoch=1, **copy))
    for kind in ("delivered", "acked"):
        b_conn.emit(kind, _mid(1), dict(actor="channel", connection="c2", channel=1,
                                        delivery_tag=1, redelivered=True, no_ack=False,
                                        consumer_tag="ct", **copy))
    b_q.emit("queue_census", None, dict(actor="backing_queue", reason="stopped",
                                        seq_ranges=[2, 4], count=3, seq_below=5, durable=True,
                                        epoch=1, **copy))
    # a second queue: B's member restarted (a new log, "b-new") and took message 7; the old
    # member's late `removed` drop names its own log ("b-old"), so B, promoted, still has 7
    q2 = dict(vhost="/", queue="qq2")
    a_conn.emit("publish_received", _mid(7), dict(
        actor="channel", vhost="/", connection="c1", channel=1, seq_no=7, exchange="",
        routing_key="qq2", message_id="carried-past-an-old-drop", persistent=True))
    a_conn.emit("routed", _mid(7), dict(actor="channel", vhost="/", queues=["qq2"]))
    a_q.emit("enqueued", _mid(7), dict(actor="queue", seq_id=1, durable=True, epoch=0, **q2))
    a_q.emit("synced", _mid(7), dict(actor="backing_queue", seq_id=1, **q2))
    b_q.emit("replica_enqueued", _mid(7), dict(actor="mirror", role=MEMBER, seq_id=1, epoch=0,
                                               replica_log="b-new", **q2))
    a_conn.emit("confirmed", _mid(7), dict(actor="channel", vhost="/", connection="c1",
                                           channel=1, seq_no=7))
    b_q.emit("replica_dropped", None, dict(actor="mirror", role=MEMBER, reason="removed",
                                           count=0, epoch=0, replica_log="b-old", **q2))
    b_q.emit("promoted", None, dict(actor="queue", epoch=1, role=MEMBER, count=1, **q2))
    for lg in (a_conn, a_q, b_q, b_conn):
        lg.close()


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("promotion")
    workload(str(root / "events"))
    out = root / "out"
    args = lifecycle.parse_args(["--events", str(root / "events"), "--out", str(out),
                                 "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0
    every = pq.read_table(out / "lifecycles").to_pylist()
    return types.SimpleNamespace(
        rows={r["message_id"]: r for r in every},
        anomalies=pq.read_table(out / "anomalies").to_pylist())


def test_a_promoted_replica_keeps_what_it_held_and_nothing_else(job):
    assert {k: r["final_state"] for k, r in job.rows.items()} == {
        "acked-on-b": "acked",
        "carried": "queued",  # held by B when promoted, and by B's census since
        "confirmed-not-on-b": "vanished",  # not B's seq_id 3, whatever B's census says
        "nacked-not-on-b": "vanished",  # (was `queued`: A dropped it without a word)
        "new-on-b": "queued",
        "new-on-b-2": "queued",
        # (was `vanished`, and `lost`: another log's drop ended it)
        "carried-past-an-old-drop": "queued"}
    for name in ("confirmed-not-on-b", "nacked-not-on-b"):
        (c,) = job.rows[name]["copies"]
        assert c["census_missing"] == "promoted", name
    (c,) = job.rows["carried"]["copies"]
    assert c["census_missing"] is None and c["t_census"] is not None
    kinds = [s["kind"] for s in c["steps"]]
    assert kinds.count("replica_enqueued") == 2  # B's, then A's resync


def test_a_confirmed_message_the_promoted_replica_lacked_is_lost(job):
    found = sorted((a["kind"], a["message_id"], a["detail"]) for a in job.anomalies)
    assert found == [("lost", "confirmed-not-on-b",
                      "confirmed, then not held by the replica promoted to master")]


# -- the replica's events, without Spark ------------------------------------------------------
class _Log:
    def __init__(self, on=True):
        self.on = on
        self.got = []

    def enabled(self):
        return self.on

    def emit(self, kind, msg_id, **fields):
        self.got.append((kind, msg_id, fields))


def _item(seq, msg_id, priority=0):
    return MirrorItem(seq, "", Q, b"", True, priority, 0, msg_id)


def test_replica_log_names_each_message_and_each_drop():
    log = _Log()
    r = ReplicaLog(log, "/", Q, "mirror")
    r.took([_item(1, b"m1"), _item(2, b"m2", priority=3), _item(3, b"m3"), _item(4, None)], 2)
    r.settled([1, 9])  # (9: never held)
    r.purged(1, 3, 2)  # priority 3 after seq 1: m2
    r.dropped("resync", 2)
    assert [(k, m, f.get("seq_id"), f.get("reason"), f.get("count")) for k, m, f in log.got] == [
        ("replica_enqueued", b"m1", 1, None, None),
        ("replica_enqueued", b"m2", 2, None, None),
        ("replica_enqueued", b"m3", 3, None, None),
        ("replica_settled", b"m1", 1, None, None),
        ("replica_dropped", None, None, "purged", 1),
        ("replica_dropped", None, None, "resync", 1)]  # m3
    assert all(f["role"] == "mirror" and f["queue"] == Q for _, _, f in log.got)
    assert log.got[0][2]["epoch"] == 2 and r.ids == {}


def test_replica_log_names_its_log_and_starts_a_new_one_after_a_drop():
    log = _Log()
    r = ReplicaLog(log, "/", Q, MEMBER, log_id="kept")  # a member that kept its log
    r.took([_item(1, b"m1")], 0)
    r.dropped("resync", 0)
    r.took([_item(2, b"m2")], 0)
    r.started_empty(0)
    logs = [(k, f.get("reason"), f.get("replica_log")) for k, _, f in log.got]
    assert logs[:2] == [("replica_enqueued", None, "kept"), ("replica_dropped", "resync", "kept")]
    assert logs[2][0] == "replica_enqueued" and logs[2][2] not in (None, "kept")
    assert logs[3] == ("replica_dropped", "restart", None)  # every earlier log of the node
    assert ReplicaLog(log, "/", Q, MIRROR).log_id != ReplicaLog(log, "/", Q, MIRROR).log_id


def test_replica_log_costs_nothing_with_events_off():
    log = _Log(on=False)
    r = ReplicaLog(log, "/", Q, MEMBER)
    r.took([_item(1, b"m1")], 0)
    r.settled([1])
    r.dropped("restart", 0)
    assert log.got == [] and r.ids == {}
