"""bench/paper.py without a broker: resend bookkeeping, the roles on a fake connection,
topology, ratio tables and the plot."""
import types
from array import array

import pytest

from amqpclient import codec as codec_mod
from bench import paper
from bench.loadgen import role_class
from bench_fakes import FakeConn, decode

MS = 1_000_000
S = 1_000_000_000


# -- ResendTracker --------------------------------------------------------------------------

def _publish(tr, ids, now_ns=0):
    return [tr.publish(i, f"wire{i}".encode(), now_ns) for i in ids]


def test_tags_follow_the_channel_numbering_and_acks_confirm():
    tr = paper.ResendTracker()
    assert _publish(tr, [10, 11, 12], now_ns=1 * MS) == [1, 2, 3]
    lat = []
    assert tr.ack(2, False, 5 * MS, lat) == 1               # out of order, single
    assert tr.outstanding == 2 and lat == [4 * MS]
    assert tr.ack(3, True, 7 * MS, lat) == 2                # multiple: 1 and 3 (2 is done)
    assert tr.outstanding == 0 and lat == [4 * MS, 6 * MS, 6 * MS]
    assert tr.ack(3, True, 8 * MS) == 0 and tr.redundant == 0
    assert not tr.seqs and not tr.seq_id


def test_expired_messages_are_resent_under_a_new_tag_in_send_order():
    tr = paper.ResendTracker()
    _publish(tr, [1], now_ns=0)
    _publish(tr, [2], now_ns=2 * S)
    assert tr.expired(4 * S, 5 * S) == []
    assert tr.expired(5 * S, 5 * S) == [1]
    assert tr.resend(1, 5 * S) == b"wire1"
    assert tr.next_seq == 4 and tr.pending[1].seq == 3 and tr.pending[1].copies == 2
    assert list(tr.pending) == [2, 1]                        # latest send last
    assert tr.expired(7 * S, 5 * S) == [2]                   # 1 was sent again at 5 s
    assert tr.outstanding == 2                               # messages, not copies


def test_any_copy_confirms_and_later_copies_are_redundant():
    tr = paper.ResendTracker()
    _publish(tr, [7], now_ns=0)
    tr.resend(7, 5 * S)                                      # tag 2
    lat = []
    assert tr.ack(1, False, 6 * S, lat) == 1                 # the first copy arrives late
    assert lat == [6 * S]                                    # from the first send
    assert tr.outstanding == 0
    assert tr.ack(2, False, 7 * S) == 0 and tr.redundant == 1
    assert tr.resend(7, 8 * S) is None                       # confirmed: nothing to resend


def test_nack_of_the_latest_copy_asks_for_a_resend_of_an_older_one_does_not():
    tr = paper.ResendTracker()
    _publish(tr, [1, 2, 3])
    tr.resend(2, 1 * S)                                      # 2's latest copy: tag 4
    n, again = tr.nack(3, True)                              # tags 1..3
    assert n == 3 and again == [1, 3]                        # 2 has a newer copy in flight
    n, again = tr.nack(4, False)
    assert (n, again) == (1, [2])
    assert tr.outstanding == 3                               # nacked is not confirmed
    for mid in (1, 3, 2):
        tr.resend(mid, 2 * S)
    assert tr.ack(7, True, 3 * S) == 3 and tr.outstanding == 0


def test_unknown_tags_are_ignored():
    tr = paper.ResendTracker()
    _publish(tr, [1])
    assert tr.ack(5, False, 0) == 0
    assert tr.nack(9, False) == (0, [])
    assert tr.outstanding == 1


def test_count_duplicates_over_all_consumers():
    a = array("q", [1, 2, 3]).tobytes()
    b = array("q", [3, 4, 1, 1]).tobytes()
    assert paper.count_duplicates([a, b, None, b""]) == {
        "deliveries": 7, "distinct": 4, "duplicates": 3}


# -- topology and specs ---------------------------------------------------------------------

@pytest.mark.parametrize("n,exchanges", [(1, 1), (15, 1), (16, 2), (30, 2)])
def test_a_second_exchange_above_15_queues(n, exchanges):
    ex, bindings = paper.topology(n, "t")
    assert len(ex) == exchanges and len(bindings) == n
    assert all(e == ex[0] for _q, e in bindings[:15])
    assert all(e == ex[1] for _q, e in bindings[15:])
    assert len({q for q, _e in bindings}) == n


def test_specs_are_the_papers_per_queue_layout():
    _ex, bindings = paper.topology(2, "t")
    specs = paper.paper_specs(bindings, resend_timeout=3.0)
    cons = [s for s in specs if s["kind"] == "consumer"]
    prods = [s for s in specs if s["kind"] == "producer"]
    assert specs[:len(cons)] == cons                         # consumers subscribe first
    assert len(cons) == 6 and all(s["channels"] == [1, 2, 3] for s in cons)
    assert len(prods) == 4 and all(s["channels"] == [1, 2] for s in prods)
    assert all(s["persistent"] and s["confirm"] == 1000 and s["message_size"] == 1500
               and s["resend_timeout"] == 3.0 for s in prods)
    assert all(s["routing_key"] == s["queue"] and s["exchange"] == bindings[0][1]
               for s in prods)
    assert len({s["uid"] for s in prods}) == 4
    assert role_class(prods[0]) is paper.ResendProducer
    assert role_class(cons[0]) is paper.IdConsumer
    assert role_class({"kind": "consumer"}).__name__ == "Consumer"


# -- the roles on a fake connection -----------------------------------------------------------

def _cmd(channel, method, body=None):
    return types.SimpleNamespace(channel=channel, method=method, body=body)


def _producer(window=4, timeout=5.0):
    codec = codec_mod.load("auto")
    spec = {"kind": "producer", "queue": "q1", "exchange": "ex1", "routing_key": "q1",
            "channels": [1, 2], "confirm": window, "persistent": True, "message_size": 1500,
            "resend_timeout": timeout, "uid": 3}
    conn = FakeConn(strict=True)
    return codec, conn, paper.ResendProducer(conn, spec, codec)


def test_producer_publishes_ids_through_the_exchange_and_resends():
    codec, conn, p = _producer()
    M = codec.methods
    p.start_streaming()
    p.fill(1 * S)
    cmds = decode(codec, conn.sent)
    assert len(cmds) == 8                                    # window 4 x 2 channels
    pub = cmds[0].method
    ex = pub.exchange.decode() if isinstance(pub.exchange, bytes) else pub.exchange
    assert ex == "ex1"
    ids = [int.from_bytes(c.body[8:16], "big") for c in cmds]
    assert len(set(ids)) == 8 and all(i >> 40 == 3 for i in ids)
    assert all(len(c.body) == 1500 for c in cmds)
    assert p.counters()["published"] == 8
    p.fill(2 * S)
    assert len(conn.sent) == 8 * p.msg_len                   # the window is full
    # a confirm frees room; a nack resends the same bytes under the next tag
    conn.incoming = [_cmd(1, M.BasicAck(delivery_tag=2, multiple=True)),
                     _cmd(2, M.BasicNack(delivery_tag=1, multiple=False, requeue=False))]
    p.on_read(3 * S)
    assert p.confirmed == 2 and p.nacked == 1 and p.resent_nack == 1
    resent = decode(codec, conn.sent[8 * p.msg_len:])
    ch2 = [c for c in cmds if c.channel == 2]
    assert len(resent) == 1 and resent[0].body == ch2[0].body and resent[0].channel == 2
    nacked_id = int.from_bytes(ch2[0].body[8:16], "big")
    assert p.trackers[2].pending[nacked_id].seq == 5
    # 5 s after the first send, what is still unconfirmed goes again (channel 1: 2 messages,
    # channel 2: 3, not the one resent at 3 s), then channel 1 has room for 2 new ones
    before = len(conn.sent)
    p.fill(6 * S)
    assert p.resent_timeout == 5
    again = decode(codec, conn.sent[before:])
    assert len(again) == 7
    old = [int.from_bytes(c.body[8:16], "big") for c in again[:5]]
    assert set(old) == set(ids[2:4]) | (set(ids[4:]) - {nacked_id})
    assert int.from_bytes(again[5].body[8:16], "big") == (3 << 40) | 8
    c = p.counters()
    assert c["resent_timeout"] == 5 and c["resent_nack"] == 1 and c["unconfirmed"] == 8
    assert c["published"] == 8 + 1 + 7


def test_consumer_records_ids_and_acks_each_message():
    codec = codec_mod.load("auto")
    M = codec.methods
    conn = FakeConn(strict=True)
    spec = {"kind": "consumer", "queue": "q1", "channels": [1], "no_ack": False,
            "prefetch": 100, "ack_every": 1}
    c = paper.IdConsumer(conn, spec, codec)

    def body(mid):
        return (5).to_bytes(8, "big") + mid.to_bytes(8, "big") + b"x" * 1484

    conn.incoming = [
        _cmd(1, M.BasicDeliver(consumer_tag="t", delivery_tag=1, redelivered=False,
                               exchange="ex1", routing_key="q1"), body(42)),
        _cmd(1, M.BasicDeliver(consumer_tag="t", delivery_tag=2, redelivered=True,
                               exchange="ex1", routing_key="q1"), body(42)),
    ]
    c.on_read(10)
    assert list(c.ids) == [42, 42] and c.redelivered == 1 and c.consumed == 2
    acks = decode(codec, conn.sent)
    assert [a.method.delivery_tag for a in acks] == [1, 2]
    assert paper.count_duplicates([c.result()["ids"]])["duplicates"] == 1


# -- figures, ratios, tables, plot ------------------------------------------------------------

def _pt(n, mode, rate, **kw):
    r = {"queues": n, "mode": mode, "send_rate": rate, "publish_rate": rate,
         "consume_rate": rate, "confirm_latency_ms": {"p50": 2.0, "p99": 9.0},
         "resends": 0, "duplicates": 0, "error": None}
    r.update(kw)
    return r


RESULTS = [_pt(1, "enqueue", 1000.0), _pt(1, "ack", 3080.0), _pt(1, "ack-lite", 3480.0),
           _pt(5, "enqueue", 2000.0), _pt(5, "ack", 3000.0), _pt(5, "ack-lite", 2000.0),
           _pt(15, "enqueue", 1000.0), _pt(15, "ack", 1409.0),
           _pt(15, "ack-lite", None, error="queue.declare failed: 406")]


def test_ratio_rows_and_mean_gain_above_3():
    rows = paper.ratio_rows(RESULTS)
    assert [r["queues"] for r in rows] == [1, 5, 15]
    assert rows[0]["ack"] == pytest.approx(3.08) and rows[0]["ack-lite"] == pytest.approx(3.48)
    assert rows[0]["paper ack"] == 3.08 and rows[1]["paper ack"] is None
    assert rows[2]["ack-lite"] is None                        # failed point
    assert paper.mean_gain_above(rows, "ack") == pytest.approx((0.5 + 0.409) / 2)
    assert paper.mean_gain_above(rows, "ack-lite") == pytest.approx(0.0)
    assert paper.mean_gain_above(paper.ratio_rows(RESULTS[:3]), "ack") is None


def test_ratio_table_sits_beside_the_papers_figures():
    lines = paper.ratio_table(RESULTS).splitlines()
    assert lines[0] == ("| queues | enqueue send msg/s | ack / enqueue | paper (ack) | "
                        "ack-lite / enqueue | paper (ack-lite) |")
    assert lines[2] == "| 1 | 1,000 | 3.08x (+208.0%) | 3.08x | 3.48x (+248.0%) | 3.48x |"
    assert lines[4] == "| 15 | 1,000 | 1.41x (+40.9%) | +40.9% | – | +52.6% |"
    assert lines[-1] == ("| mean gain above 3 queues |  | +45.5% | +42.9% | +0.0% | "
                         "+56.5% |")
    assert all(line.count("|") == 7 for line in lines)


def test_ratio_table_with_enqueue_only_still_shows_the_paper():
    lines = paper.ratio_table([_pt(1, "enqueue", 500.0)]).splitlines()
    assert lines[2] == "| 1 | 500 | – | 3.08x | – | 3.48x |"


def test_results_table():
    lines = paper.results_table(RESULTS).splitlines()
    assert lines[0].startswith("| queues | x-confirm-on | send msg/s (confirmed) |")
    assert lines[2] == "| 1 | enqueue | 1,000 | 1,000 | 1,000 | 2.00 | 9.00 | 0 | 0 |"
    assert lines[-1] == "| 15 | ack-lite | error | error | error | error | error | error | error |"
    assert len(lines) == 2 + len(RESULTS)


def test_combine_runs_averages_rates_and_sums_counts():
    runs = [_pt(1, "enqueue", 1000.0, resends=2), _pt(1, "enqueue", 2000.0, resends=3),
            _pt(1, "enqueue", None, error="boom")]
    r = paper.combine_runs(runs)
    assert r["send_rate"] == 1500.0 and r["resends"] == 5
    assert r["error"].startswith("1 of 3 runs failed")
    assert len(r["runs"]) == 3


def test_summarize_roles_counts_resends_and_duplicates():
    def snaps(**end):
        base = {k: 0 for k in end}
        return [dict(base, label="start", t=0.0), dict(base, label="measure", t=1.0),
                dict(end, label="end", t=3.0)]
    prod = {"kind": "producer", "snapshots": snaps(published=100, confirmed=60, nacked=0,
                                                   resent_timeout=4, resent_nack=1,
                                                   redundant_confirms=2, unconfirmed=9),
            "confirm_latency_ns": array("q", [MS, 3 * MS]).tobytes(), "cpu": []}
    cons = {"kind": "consumer", "snapshots": snaps(consumed=50, redelivered=1),
            "e2e_latency_ns": b"", "ids": array("q", [1, 2, 2]).tobytes(), "cpu": []}
    out = paper.summarize_roles([prod, cons])
    assert out["send_rate"] == 30.0 and out["publish_rate"] == 50.0
    assert out["consume_rate"] == 25.0
    assert out["resends"] == 5 and out["redundant_confirms"] == 2
    assert out["unconfirmed_at_end"] == 9 and out["redelivered"] == 1
    assert out["duplicates"] == 1 and out["deliveries"] == 3


def test_resend_notes_tell_a_storm_from_lost_messages():
    rs = [_pt(1, "enqueue", 10.0),
          _pt(5, "enqueue", 10.0, resends_timeout=3),
          _pt(30, "ack", 10.0, resends_timeout=2000,
              confirm_latency_ms={"p50": 4000.0, "p99": 6000.0})]
    notes = paper.resend_notes(rs, 5.0)
    assert len(notes) == 2
    assert notes[0] == ("- 5 queues, enqueue: 3 messages resent after 5 s without a confirm "
                        "(confirm p99 9.00 ms)")
    assert "resend storm" in notes[1] and notes[1].startswith("- 30 queues, ack: 2,000")


@pytest.mark.parametrize("results,panels", [(RESULTS, 2), (RESULTS[:1] + RESULTS[3:4], 1)])
def test_plot_is_written(tmp_path, results, panels):
    path = tmp_path / "sub" / "paper.png"
    assert paper.plot(results, str(path), "test") == str(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    width = int.from_bytes(data[16:20], "big")
    assert (width > 1000) == (panels == 2)


def test_quick_defaults_and_option_checks():
    p = paper.build_parser()
    assert paper.resolve(p.parse_args(["--quick"])) == ([1, 2, 5], list(paper.MODES), 5.0, 2.0)
    assert paper.resolve(p.parse_args([])) == (list(paper.ALL_QUEUES), list(paper.MODES),
                                               20.0, 5.0)
    args = p.parse_args(["--quick", "--modes", "enqueue", "--queues", "3", "--seconds", "1"])
    assert paper.resolve(args) == ([3], ["enqueue"], 1.0, 2.0)
    with pytest.raises(SystemExit):
        paper.resolve(p.parse_args(["--modes", "enqueue,bogus"]))
    with pytest.raises(SystemExit):
        paper.resolve(p.parse_args(["--size", "10"]))
