"""/api/nodes' figures (actors/node/node_stats.py) and the health checks' pure parts
(actors/management/api.py), without a broker."""

import os
import subprocess

from actors.management import api
from actors.node import node_stats


def test_the_probes_read_this_process_from_proc():
    figures = node_stats.measure([os.getpid()])
    assert figures["fd_used"] > 0
    # (this process's thread count may change meanwhile: other tests' threads come and go)
    assert 1 <= figures["run_queue"] <= figures["proc_used"]  # (this thread runs)
    child = subprocess.Popen(["sleep", "30"])  # one thread, forked or exec'd
    try:
        assert node_stats.measure([child.pid])["proc_used"] == 1
        assert node_stats.measure([os.getpid(), child.pid])["proc_used"] > 1
    finally:
        child.kill()
        child.wait()
    assert figures["context_switches"] > 0
    assert figures["io_read_bytes"] >= 0 and figures["io_write_bytes"] >= 0
    assert figures["io_read_count"] > 0 and figures["io_write_count"] >= 0  # (it read /proc)
    assert node_stats.thread_limit() > 0
    # a process that is gone counts nothing (it exited between the listing and the read)
    assert node_stats.measure([2 ** 22 + 1]) == {
        "fd_used": 0, "proc_used": 0, "run_queue": 0, "context_switches": 0,
        "io_read_bytes": 0, "io_write_bytes": 0, "io_read_count": 0, "io_write_count": 0}


def test_the_probes_are_injected():
    figures = node_stats.measure(
        [1, 2], fds=lambda pids: 10 * len(pids),
        tasks=lambda pids: {"threads": 7, "runnable": 2, "context_switches": 99},
        io=lambda pids: {"io_read_bytes": 1, "io_write_bytes": 2})
    assert figures == {"fd_used": 20, "proc_used": 7, "run_queue": 2,
                       "context_switches": 99, "io_read_bytes": 1, "io_write_bytes": 2}


def test_a_member_s_rates_are_between_its_last_two_samples():
    table = node_stats.NodeTable(1000)
    assert table.row("n1", 0) is None
    table.put("n1", 1000, {"mem_used": 1000, "fd_used": 10, "context_switches": 100,
                           "connection_created": 4, "uptime": 1, "mem_alarm": False})
    row = table.row("n1", 1100)
    assert row["mem_used_details"] == {"rate": 0.0} and row["uptime"] == 1
    table.put("n1", 500, {"mem_used": 1})  # late: ignored
    table.put("n1", 3000, {"mem_used": 600, "fd_used": 12, "context_switches": 20,
                           "connection_created": 10, "uptime": 2001, "mem_alarm": True})
    row = table.row("n1", 3100)
    # gauges change both ways; a counter that went down was reset (the node restarted)
    assert row["mem_used_details"] == {"rate": -200.0}
    assert row["fd_used_details"] == {"rate": 1.0}
    assert row["context_switches_details"] == {"rate": 10.0}
    assert row["connection_created_details"] == {"rate": 3.0}
    assert "uptime_details" not in row and row["mem_alarm"] is True
    # quiet for two intervals (the member is gone or stuck): rates are 0
    assert table.row("n1", 9000)["fd_used_details"] == {"rate": 0.0}


def test_a_member_down_or_not_heard_from_has_no_figures():
    sample = {"mem_used": 5, "mem_alarm": True}
    up = {"name": "n1", "up": True}
    assert api.node_json(up, sample) == {"name": "n1", "type": "disc", "running": True,
                                         "mem_used": 5, "mem_alarm": True}
    assert api.node_json(dict(up, up=False), sample) == {
        "name": "n1", "type": "disc", "running": False}
    assert api.node_json(up, None)["running"] is True


def test_health_check_names_and_quorum_critical_queues():
    assert api.alarm_json("n1", "disk") == {"node": "n1", "resource": "disk space"}
    assert api.alarm_json("n1", "memory") == {"node": "n1", "resource": "memory"}
    assert api.normalize_protocol("AMQP0-9-1") == "amqp"
    assert api.normalize_protocol("amqps") == "amqp/ssl"
    assert api.normalize_protocol("http/prometheus") == "http/prometheus"
    names = {"a:1": "n1", "a:2": "n2", "a:3": "n3"}
    qq = {"vhost": "/", "name": "qq", "home": "a:1", "mirrors": ["a:2", "a:3"],
          "arguments": {"x-queue-type": "quorum"}}
    classic = dict(qq, name="cq", arguments={})
    # all three up: stopping n1 leaves two of three, a majority
    assert api.quorum_critical([qq, classic], "n1", {"n1", "n2", "n3"}, names) == []
    # n3 down: stopping n1 would leave one of three
    assert api.quorum_critical([qq, classic], "n1", {"n1", "n2"}, names) == [
        {"readable_name": "queue 'qq' in vhost '/'", "name": "qq", "virtual_host": "/",
         "type": "quorum"}]
    # a node that is no member of the queue is not critical for it
    assert api.quorum_critical([dict(qq, mirrors=["a:2"], arguments={
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 2})], "n3", {"n1", "n3"},
        names) == []


def test_io_sync_avg_time_is_over_the_interval_s_syncs():
    """Milliseconds per sync between two samples; 0.0 when none was done in between."""
    assert node_stats.sync_avg_ms(None, 4, 8000) == 2.0
    assert node_stats.sync_avg_ms((4, 8000), 6, 8500) == 0.25
    assert node_stats.sync_avg_ms((6, 8500), 6, 8500) == 0.0


def test_prometheus_unacked_per_channel_and_dead_lettered_by_type_and_strategy():
    from actors.management import prometheus

    counters = {"now": {"channel_rows": [
        {"vhost": "/", "name": "c1 (1)", "messages_unacknowledged": 3},
        {"vhost": "/", "name": "c1 (2)", "messages_unacknowledged": 2}]},
        "dead_lettered": {"classic": {"dead_lettered_expired_at_most_once": 4,
                                      "dead_lettered_rejected_disabled": 1}}}

    def samples(per_object):
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in prometheus.node_metrics(counters, {}, per_object) for s in f.samples}
    agg, per = samples(False), samples(True)
    assert agg[("rabbitmq_channel_messages_unacked", ())] == 5
    assert per[("rabbitmq_channel_messages_unacked",
                (("channel", "c1 (2)"), ("vhost", "/")))] == 2

    def dead(reason, qtype, strategy):
        return agg[(f"rabbitmq_global_messages_dead_lettered_{reason}_total",
                    (("dead_letter_strategy", strategy), ("queue_type", qtype)))]
    assert dead("expired", "rabbit_classic_queue", "at_most_once") == 4
    assert dead("rejected", "rabbit_classic_queue", "disabled") == 1
    assert dead("maxlen", "rabbit_quorum_queue", "at_most_once") == 0
    assert dead("delivery_limit", "rabbit_classic_queue", "disabled") == 0
