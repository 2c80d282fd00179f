"""The PerfTest workloads (group `perftest`) without a broker: scenario settings, the pacer and
the paced producer, the late consumer, the connection specs, the drain figures and the result_tables."""
import dataclasses
import struct
import types

import pytest

from amqpclient import codec as codec_mod
from bench import result_tables, scenarios
from bench.aggregate import aggregate, drain_summary, drained_depth
from bench.loadgen import BATCH, PACE_RETRY_NS, PACE_SLACK_NS, Consumer, Pacer, Producer
from bench.scenario_run import BenchError, role_specs, run_scenario
from bench_fakes import FakeConn, decode

MS = 1_000_000
S = 1_000_000_000
T0 = 1000 * S                       # an arbitrary monotonic start instant


# -- scenarios --------------------------------------------------------------------------------

def test_the_perftest_group_is_not_in_the_default_one():
    keys = ["many-queues", "fanout-10", "many-publishers-one-queue", "late-consumers"]
    assert scenarios.GROUPS["perftest"] == keys
    assert [s.key for s in scenarios.select("perftest")] == keys
    assert not set(keys) & set(scenarios.GROUPS["default"])
    assert all(not scenarios.SCENARIOS[k].default for k in keys)


def test_perftest_scenarios_as_the_brief_has_them():
    mq = scenarios.SCENARIOS["many-queues"]
    assert (mq.queues, mq.producers, mq.consumers, mq.rate) == (1000, 1, 1, 10.0)
    assert mq.connections == 2000 and mq.producer_channels == mq.consumer_channels == 1
    assert mq.target_publish_rate == mq.target_consume_rate == 10_000
    assert mq.message_size == 12
    fan = scenarios.SCENARIOS["fanout-10"]
    assert fan.exchange_type == "fanout" and fan.queues == 10 and fan.rate is None
    assert fan.producer_connections == 1 and fan.connections == 11 and fan.copies == 10
    mp = scenarios.SCENARIOS["many-publishers-one-queue"]
    assert (mp.queues, mp.producers, mp.consumers) == (1, 2000, 1)
    assert mp.target_consume_rate == 10_000
    late = scenarios.SCENARIOS["late-consumers"]
    assert late.consumer_start_delay == 5.0 and late.target_publish_rate == 8000
    assert all(s.lean_only for s in scenarios.PERFTEST)
    assert not scenarios.SCENARIOS["c"].lean_only


@pytest.mark.parametrize("changes", [{"rate": 0}, {"rate": -1.0}, {"exchange_type": "topic"},
                                     {"consumer_start_delay": -1.0},
                                     {"consumer_start_delay": 1.0, "consumers": 0}])
def test_bad_perftest_settings_are_refused(changes):
    with pytest.raises(ValueError):
        dataclasses.replace(scenarios.B, **changes)


def test_fanout_producers_count_in_all_not_per_queue():
    s = dataclasses.replace(scenarios.FANOUT_10, producers=2, rate=100.0)
    assert s.producer_connections == 2
    assert s.target_publish_rate == 200 and s.target_consume_rate == 2000


# -- the pacer --------------------------------------------------------------------------------

def test_pacer_slots_fall_at_fixed_intervals():
    p = Pacer(10.0, T0)                       # a slot every 100 ms from T0
    assert p.due(T0 - 1) == 0
    assert p.due(T0) == 1                     # slot 0 at the origin
    p.take(1)
    assert p.next_ns() == T0 + 100 * MS
    assert p.due(T0 + 99 * MS) == 0
    assert p.due(T0 + 350 * MS) == 3          # slots 1, 2, 3
    p.take(3)
    assert p.next_ns() == T0 + 400 * MS
    assert p.skipped == 0


def test_pacer_does_not_store_more_than_max_lag():
    p = Pacer(10.0, T0, max_lag=1.0)          # at most 10 slots owed
    assert p.due(T0 + 5 * S) == 10            # 51 slots passed: 41 skipped
    assert p.skipped == 41
    p.take(10)
    assert p.due(T0 + 5 * S) == 0
    assert p.next_ns() == T0 + 5100 * MS
    slow = Pacer(0.5, T0)                     # one every 2 s: still one may be owed
    assert slow.due(T0 + 10 * S) == 1 and slow.skipped == 5


def test_pacer_rejects_a_zero_rate():
    with pytest.raises(ValueError):
        Pacer(0.0, T0)


# -- the paced producer on a fake connection --------------------------------------------------

def _producer(rate=10.0, phase=0.0, confirm=None, channels=(1,), **extra):
    codec = codec_mod.load("auto")
    spec = {"kind": "producer", "queue": "q1", "channels": list(channels), "confirm": confirm,
            "persistent": False, "message_size": 12, "rate": rate, "phase": phase, **extra}
    conn = FakeConn()
    p = Producer(conn, spec, codec)
    p.start_streaming(T0)
    return codec, conn, p


def test_paced_producer_publishes_on_schedule_and_says_when_to_wake():
    codec, conn, p = _producer(rate=10.0)
    assert p.wake_ns == T0
    assert p.fill(T0) is False                # slot 0 only; the next is 100 ms away
    assert p.counters()["published"] == 1
    assert p.wake_ns == T0 + 100 * MS
    p.fill(T0 + 50 * MS)
    assert p.counters()["published"] == 1     # nothing due
    p.fill(T0 + 100 * MS - PACE_SLACK_NS // 2)
    assert p.counters()["published"] == 2     # within the slack: goes with this write
    p.clock = lambda: T0 + 1 * S + 7            # the clock as the batch is written
    p.fill(T0 + 1 * S)
    assert p.counters()["published"] == 11
    cmds = decode(codec, conn.sent)
    assert len(cmds) == 11 and all(len(c.body) == 12 for c in cmds)
    stamp = struct.unpack(">q", cmds[-1].body[:8])[0]
    assert stamp == T0 + 1 * S + 7            # stamped with the write's time


def test_phase_offsets_the_first_slot():
    _codec, _conn, p = _producer(rate=10.0, phase=0.25)
    assert p.wake_ns == T0 + 25 * MS
    p.fill(T0)
    assert p.counters()["published"] == 0
    p.fill(T0 + 25 * MS)
    assert p.counters()["published"] == 1


def test_paced_producer_sends_at_most_a_batch_per_fill_and_asks_to_come_back():
    _codec, _conn, p = _producer(rate=1000.0)  # max lag 1 s = 1000 slots
    assert p.fill(T0 + 500 * MS) is True       # 501 owed, BATCH sent: busy
    assert p.counters()["published"] == BATCH and p.wake_ns == T0 + 500 * MS


def test_paced_producer_held_back_skips_what_is_more_than_a_second_late():
    _codec, conn, p = _producer(rate=10.0)
    conn.blocked = True
    assert p.fill(T0) is False and p.wake_ns == T0 + PACE_RETRY_NS
    assert p.counters()["published"] == 0
    conn.blocked = False
    p.fill(T0 + 3 * S)                        # 31 slots passed, 10 may be owed
    c = p.counters()
    assert c["published"] == 10 and c["skipped"] == 21


def test_paced_producer_respects_the_confirm_window():
    codec, _conn, p = _producer(rate=1000.0, confirm=5)
    p.fill(T0 + 20 * MS)                      # 21 owed, window 5
    assert p.counters()["published"] == 5
    assert p.wake_ns == T0 + 20 * MS + PACE_RETRY_NS
    M = codec.methods
    _conn.incoming = [types.SimpleNamespace(channel=1, method=M.BasicAck(delivery_tag=5,
                                                                         multiple=True))]
    _read(p, T0 + 21 * MS)
    p.fill(T0 + 21 * MS)
    assert p.counters()["published"] == 10


def test_free_running_producer_is_unchanged():
    codec = codec_mod.load("auto")
    spec = {"kind": "producer", "queue": "q1", "channels": [1], "confirm": None,
            "persistent": False, "message_size": 12}
    conn = FakeConn()
    p = Producer(conn, spec, codec)
    p.start_streaming()
    assert not p.pacers and p.fill(T0) is True
    assert p.counters()["published"] == BATCH and p.counters()["skipped"] == 0


# -- the late consumer ------------------------------------------------------------------------

def _deliver(codec, tag, stamp_ns):
    M = codec.methods
    body = struct.pack(">q", stamp_ns) + b"abcd"
    return types.SimpleNamespace(channel=1, body=body, method=M.BasicDeliver(
        consumer_tag="t", delivery_tag=tag, redelivered=False, exchange="", routing_key="q1"))


def _read(role, t_ns):
    role.clock = lambda: t_ns
    role.on_read(t_ns - 5 * MS)                  # the loop's instant, before the recv


def test_late_consumer_subscribes_at_its_instant_and_marks_the_backlog_drained():
    codec = codec_mod.load("auto")
    conn = FakeConn()
    spec = {"kind": "consumer", "queue": "q1", "channels": [1], "no_ack": False,
            "prefetch": 100, "ack_every": 1, "start_delay": 5.0}
    c = Consumer(conn, spec, codec)
    assert c.start_delay == 5.0 and c.joined_ns is None
    join = T0 + 5 * S
    c.start_consuming(join)
    sent = decode(codec, conn.sent)
    assert len(sent) == 1 and type(sent[0].method) is codec.methods.BasicConsume
    q = sent[0].method.queue
    assert (q.decode() if isinstance(q, bytes) else q) == "q1" and not sent[0].method.no_ack
    conn.incoming = [_deliver(codec, 1, T0), _deliver(codec, 2, T0 + 1 * S)]
    _read(c, join + 10 * MS)
    assert c.backlog_done_ns is None and c.consumed == 2
    conn.incoming = [_deliver(codec, 3, join - 1), _deliver(codec, 4, join + 1),
                     _deliver(codec, 5, join + 2)]
    _read(c, join + 20 * MS)
    assert c.backlog_done_ns == join + 20 * MS and c.backlog == 3
    assert c.consumed == 5
    acks = [a for a in decode(codec, conn.sent) if type(a.method) is codec.methods.BasicAck]
    assert [a.method.delivery_tag for a in acks] == [1, 2, 3, 4, 5]
    r = c.result()
    assert (r["joined_ns"], r["backlog_done_ns"], r["backlog"]) == (join, join + 20 * MS, 3)


def test_latency_is_dated_after_the_read_not_before():
    codec = codec_mod.load("auto")
    conn = FakeConn()
    spec = {"kind": "consumer", "queue": "q1", "channels": [1], "no_ack": True,
            "prefetch": None, "ack_every": 1}
    c = Consumer(conn, spec, codec)
    c.measuring = True
    conn.incoming = [_deliver(codec, 1, T0 + 3 * MS)]
    c.clock = lambda: T0 + 4 * MS              # the recv returned at 4 ms
    c.on_read(T0)                              # the loop looked at the clock at 0 ms
    assert list(c.samples) == [1 * MS]


def test_a_consumer_without_delay_reports_no_drain():
    codec = codec_mod.load("auto")
    spec = {"kind": "consumer", "queue": "q1", "channels": [1], "no_ack": True,
            "prefetch": None, "ack_every": 1}
    c = Consumer(FakeConn(), spec, codec)
    assert c.start_delay == 0.0 and "joined_ns" not in c.result()


# -- connection specs -------------------------------------------------------------------------

def test_many_queues_specs_one_paced_producer_and_one_consumer_per_queue():
    sc = scenarios.SCENARIOS["many-queues"]
    queues = [f"q{i}" for i in range(sc.queues)]
    specs = role_specs(sc, queues)
    cons = [s for s in specs if s["kind"] == "consumer"]
    prods = [s for s in specs if s["kind"] == "producer"]
    assert len(cons) == len(prods) == 1000 and specs[:1000] == cons
    assert [s["queue"] for s in prods] == queues
    assert all(s["rate"] == 10.0 and s["message_size"] == 12 and "exchange" not in s
               for s in prods)
    phases = [s["phase"] for s in prods]
    assert phases[0] == 0.0 and phases[500] == 0.5 and max(phases) < 1.0
    assert all("start_delay" not in s for s in cons)


def test_fanout_specs_publish_to_the_exchange():
    sc = scenarios.SCENARIOS["fanout-10"]
    queues = [f"q{i}" for i in range(10)]
    specs = role_specs(sc, queues, exchange="x1")
    prods = [s for s in specs if s["kind"] == "producer"]
    assert len(prods) == 1 and prods[0]["exchange"] == "x1" and prods[0]["routing_key"] == ""
    assert "rate" not in prods[0]
    assert sorted(s["queue"] for s in specs if s["kind"] == "consumer") == sorted(queues)
    with pytest.raises(ValueError):
        role_specs(sc, queues)                 # no exchange name


def test_late_consumer_specs_carry_the_delay():
    sc = scenarios.SCENARIOS["late-consumers"]
    specs = role_specs(sc, ["a", "b", "c", "d"])
    assert [s.get("start_delay") for s in specs if s["kind"] == "consumer"] == [5.0] * 4
    assert [s["phase"] for s in specs if s["kind"] == "producer"] == [0, 0.25, 0.5, 0.75]


def test_pika_is_refused_for_perftest_scenarios():
    with pytest.raises(BenchError):
        run_scenario(None, scenarios.SCENARIOS["fanout-10"], client="pika")


# -- figures ----------------------------------------------------------------------------------

def _snaps(**end):
    base = {k: 0 for k in end}
    return [dict(base, label="start", t=0.0), dict(base, label="measure", t=1.0),
            dict(end, label="end", t=3.0)]


def _late_consumer(joined, done, backlog, consumed=0):
    return {"kind": "consumer", "snapshots": _snaps(consumed=consumed), "e2e_latency_ns": b"",
            "joined_ns": joined, "backlog_done_ns": done, "backlog": backlog}


def test_drain_summary_from_consumers_and_depth():
    roles = [_late_consumer(T0, T0 + 2 * S, 10_000), _late_consumer(T0, T0 + 4 * S, 12_000)]
    depth = [(0.0, 18_000), (0.25, 21_000), (0.5, 15_000), (1.0, 300), (1.25, 5)]
    out = drain_summary(roles, depth, 500.0)
    assert out["backlog"] == 22_000 and out["backlog_drained_s"] == 4.0
    assert out["drain_consume_rate"] == 5000 + 3000
    assert out["peak_depth"] == 21_000 and out["caught_up_s"] == 1.0
    assert out["depth"] == depth and out["drained_depth"] == 500.0


def test_drain_summary_when_a_queue_did_not_drain():
    roles = [_late_consumer(T0, T0 + 2 * S, 10_000), _late_consumer(T0, None, None)]
    out = drain_summary(roles, [(0.0, 9000), (0.25, 8000)], 500.0)
    assert out["backlog_drained_s"] is None and out["caught_up_s"] is None
    assert out["backlog"] == 10_000                     # what the drained one received
    assert drain_summary([], None, 1.0)["backlog"] is None


def test_drained_depth_is_a_quarter_second_of_the_target():
    assert drained_depth(scenarios.SCENARIOS["late-consumers"]) == 2000.0
    assert drained_depth(scenarios.SCENARIOS["fanout-10"]) == 1000.0


def test_aggregate_sums_skipped_slots():
    prod = {"kind": "producer", "snapshots": _snaps(published=30, confirmed=0, nacked=0,
                                                    skipped=4),
            "confirm_latency_ns": None}
    out = aggregate([prod])
    assert out["publish_rate"] == 15.0 and out["skipped"] == 4


# -- tables -----------------------------------------------------------------------------------

def _result(sc, **figures):
    r = {"scenario": sc.key, "title": sc.key, "settings": sc.to_dict(), "error": None,
         "target_consume_rate": sc.target_consume_rate}
    r.update(figures)
    return r


def test_tables_of_other_scenarios_do_not_change():
    c = _result(scenarios.SCENARIOS["c"], publish_rate=1.0, consume_rate=1.0,
                confirm_latency_ms={"p50": 1.0, "p99": 2.0})
    head = result_tables.single_table([c]).splitlines()[0]
    assert head == ("| scenario | publish msg/s | consume msg/s | confirm p50 ms | "
                    "confirm p99 ms |")
    assert len(result_tables.compare_table([c], [c]).splitlines()) == 2 + 4


def test_perftest_figures_in_the_tables():
    mq = _result(scenarios.SCENARIOS["many-queues"], publish_rate=10_000.0,
                 consume_rate=9_500.0, e2e_latency_ms={"p50": 2.0, "p95": 5.0, "p99": 9.5})
    late = _result(scenarios.SCENARIOS["late-consumers"], publish_rate=8000.0,
                   consume_rate=16_000.0, e2e_latency_ms={"p50": 1.0, "p95": 2.0, "p99": 3.0},
                   backlog=40_000, backlog_drained_s=2.5, drain_consume_rate=16_000.0,
                   caught_up_s=None)
    lines = result_tables.single_table([mq, late]).splitlines()
    assert lines[0].endswith("| target consume msg/s | consume / target | e2e p50 ms | "
                             "e2e p95 ms | e2e p99 ms | backlog msgs | backlog drained s | "
                             "drain consume msg/s | caught up s |")
    assert lines[2] == ("| many-queues | 10,000 | 9,500 | – | – | 10,000 | 0.95x | 2.00 | "
                        "5.00 | 9.50 | – | – | – | – |")
    assert lines[3].endswith("| 40,000 | 2.50 | 16,000 | not reached |")
    rows = result_tables.compare_table([mq], [dict(mq, consume_rate=10_000.0)], "L", "R").splitlines()
    assert "| many-queues | publish msg/s | 10,000 | 10,000 | 1.00x |" in rows
    assert "|  | consume / target | 0.95x | 1.00x | 0.95x |" in rows
    assert len(rows) == 2 + 2 + 5              # publish, consume, target, ratio, e2e x3


def test_fixed_rate_scenarios_pace_one_publisher_with_confirms():
    chosen = scenarios.select("fixed-rate")
    assert len(chosen) == 12
    assert {(s.rate, s.message_size, s.persistent) for s in chosen} == {
        (float(r), size, p) for r in (1000, 5000, 20000) for size in (1500, 16)
        for p in (False, True)}
    for s in chosen:
        assert s.confirm and s.prefetch == 100 and s.durable == s.persistent
        assert s.target_consume_rate == s.rate
    assert [s.rate for s in scenarios.select("fixed-rate-5k")] == [5000.0] * 4
