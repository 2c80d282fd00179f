"""Queue censuses on a real node (docs/events.md, "Census"): after recovery (kill -9 and clean
restarts), at a clean stop and on demand (leveretctl census, the management API), and what
the lifecycle job concludes from them. A node of its own with a tiny page size, so the
durable queue's census has to read its paged part back from the index."""
from __future__ import annotations

import os
import time

import lmdb
import pika
import pyarrow.parquet as pq
import pytest

from amqp_helpers import wait_until
from conftest import Broker, free_port
from test_management import Api

from actors.store.storage import queue_id
from msg_store import MsgStore
from protocol.properties import BasicProperties
from queue_index import QueueIndex

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="reads Leveret's own event log and store")

N = 400  # messages of 1 KB: most of them paged out at 64 KB of memory per queue


def _start(tmp_path, cfg, mgmt, port=None) -> Broker:
    return Broker.start_leveret(tmp_path, "--config", str(cfg), "--events", "full",
                                "--management-port", str(mgmt), port=port)


def _lose_from_index(data_dir, vhost, queue, message_id) -> None:
    """A recovery fault, made by hand while the node is down: one message's entry acked in
    the queue's index (its body embedded: nothing in msg_store to release)."""
    env = lmdb.open(str(data_dir / "messages"), subdir=True, map_size=64 << 30,
                    max_dbs=len(MsgStore.db_names()) + len(QueueIndex.db_names()) + 1)
    try:
        index = QueueIndex(env, queue_id(vhost, queue))
        with env.begin(write=True) as txn:
            (seq,) = [e.seq_id for e in index.read(txn, -1, 1 << 30)
                      if BasicProperties.decode(e.props_raw).message_id == message_id]
            assert index.ack(txn, [seq]) == []
    finally:
        env.close()


def _censuses(out, queue) -> list:
    ev = pq.read_table(out / "events", columns=["kind", "queue", "reason", "count",
                                                 "seq_ranges", "t_ns"]).to_pylist()
    return sorted((e for e in ev if e["kind"] == "queue_census" and e["queue"] == queue),
                  key=lambda e: e["t_ns"])


def test_census_after_kill_9_and_restarts_settles_what_recovery_kept__C8(tmp_path, spark):
    cfg = tmp_path / "leveret.toml"
    cfg.write_text("queue_page_bytes = 65536\nqueue_page_size = 100\n")
    mgmt = free_port()
    broker = _start(tmp_path, cfg, mgmt)
    try:
        conn = broker.connection()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("deep", durable=True)
        ch.queue_declare("tampered", durable=True)
        for i in range(N):  # every 10th transient: dropped at a restart, paged out or not
            ch.basic_publish("", "deep", b"%04d" % i + b"." * 1020, pika.BasicProperties(
                message_id=f"d{i}", delivery_mode=1 if i % 10 == 0 else 2))
        for name in ("t0", "t1", "t2"):
            ch.basic_publish("", "tampered", name.encode(),
                             pika.BasicProperties(message_id=name, delivery_mode=2))
        conn.close()
        time.sleep(1)  # every process wrote what it buffered (a flush every 0.2 s): the
        #                kill's log gaps then hide nothing about these messages but their end
        broker = broker.restart(tmp_path, "kill9", "--config", str(cfg), "--events", "full",
                                "--management-port", str(mgmt))
        conn = broker.connection()  # the queues answer once they have recovered
        ch = conn.channel()
        assert ch.queue_declare("deep", passive=True).method.message_count >= N - N // 10
        assert ch.queue_declare("tampered", passive=True).method.message_count == 3
        conn.close()
        wait_until(lambda: Api(mgmt)("GET", "/api/overview")[0] == 200)
        said = broker.ctl("census", "deep").stdout
        assert "Census of queue 'deep' in vhost '/'" in said, said
        status, body = Api(mgmt)("POST", "/api/leveret/census/%2F/tampered", {})
        assert (status, body) == (200, {"queue": "tampered", "messages": 3})
        status, body = Api(mgmt)("POST", "/api/leveret/census/%2F", {})
        assert status == 200 and sorted(body["queues"]) == ["deep", "tampered"], body
        assert Api(mgmt)("POST", "/api/leveret/census/%2F/nope", {})[0] == 404
        broker.stop()  # a clean stop: every queue's census, then recovery loses t1
        _lose_from_index(broker.data_dir, "/", "tampered", "t1")
        broker = _start(tmp_path, cfg, mgmt, port=broker.port)
    finally:
        broker.stop()

    from spark_analysis import lifecycle
    out = tmp_path / "analysis"
    args = lifecycle.parse_args(["--events", str(broker.data_dir / "events"), "--out",
                                 str(out), "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0

    persistent = N - N // 10
    # deep: after the kill, on demand (twice: by name and the vhost's), at the clean stop,
    # after the clean start, at the last stop; the transient messages were never recovered
    deep = _censuses(out, "deep")
    assert [(c["reason"], c["count"]) for c in deep] == [
        ("started", 0), ("started", persistent), ("requested", persistent),
        ("requested", persistent), ("stopped", persistent), ("started", persistent),
        ("stopped", persistent)]
    assert [(c["reason"], c["count"]) for c in _censuses(out, "tampered")] == [
        ("started", 0), ("started", 3), ("requested", 3), ("requested", 3), ("stopped", 3),
        ("started", 2), ("stopped", 2)]

    rows = {r["message_id"]: r for r in pq.read_table(out / "lifecycles").to_pylist()}
    for i in range(N):
        r = rows[f"d{i}"]
        if i % 10:  # the kill left a log gap over it, the censuses after it settle it
            assert (r["final_state"], r["census_settled"]) == ("queued", True), r
            assert r["copies"][0]["t_census"] is not None
        else:  # gone at the restart, as transient messages go (a gap could hide an ack)
            assert r["final_state"] == "unknown" and r["copies"][0]["state"] == "vanished"
    assert rows["t0"]["final_state"] == rows["t2"]["final_state"] == "queued"
    assert rows["t1"]["final_state"] == "vanished"
    anomalies = [(a["kind"], a["message_id"], a["queue"], a["detail"])
                 for a in pq.read_table(out / "anomalies").to_pylist()]
    assert anomalies == [("lost", "t1", "tampered",
                          "confirmed, then missing from its queue's census (started)")]
