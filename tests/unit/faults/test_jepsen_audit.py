"""tests/faults/cluster/audit.py (pure): the job's verdicts against the clients' truth."""

from tests.faults.cluster.audit import (ABSENT, DELIVERED, DISAGREE, EXACT, GAP, LOST,
                                        UNCONFIRMED, Gap, JobView, Truth, compare, judge,
                                        truths_from_history, views_by_message_id)
from tests.faults.cluster.checker import CONFIRMED, NACKED, UNKNOWN, Delivery

GAP_TEXT = "log gap in leveret@node1/queue-0 from T1 to T2 (no process_stop)"


def _v(state, deliveries=1, anomalies=(), log_gap=None):
    return JobView(state, log_gap, deliveries, 1 if state == "acked" else 0, tuple(anomalies))


def test_a_delivered_message_must_be_acked_in_the_job():
    t = Truth(1, CONFIRMED, 1)
    assert judge(t, _v("acked")).agreement == EXACT
    r = judge(t, _v("queued"))
    assert (r.client, r.job, r.agreement) == (DELIVERED, "queued", DISAGREE)
    assert "job says queued" in r.why
    r = judge(t, _v("unknown", log_gap=GAP_TEXT))
    assert (r.agreement, r.why) == (GAP, GAP_TEXT)
    # an unconfirmed publish a consumer got all the same is judged as delivered
    assert judge(Truth(2, UNKNOWN, 1), _v("acked")).agreement == EXACT


def test_a_read_unconfirmed_message_whose_ack_the_broker_never_took_may_vanish():
    """The consumer's ack crossed a pausing node's connection.close (discarded), and the copy
    went with its deposed master: counted, agreed; not for a confirmed message, one the job
    saw acked or read a different number of times, or one it calls lost."""
    audit = compare([Truth(1, UNKNOWN, 1), Truth(2, NACKED, 1)],
                    {1: _v("vanished"), 2: _v("vanished")})
    assert [r.agreement for r in audit.rows] == [EXACT, EXACT]
    assert audit.acks_unseen == [1, 2] and audit.counts()["acks_unseen"] == 2
    assert "acks unseen" in audit.summary()
    for t, v in ((Truth(3, CONFIRMED, 1), _v("vanished")),
                 (Truth(4, UNKNOWN, 1), _v("vanished", deliveries=0)),
                 (Truth(5, UNKNOWN, 2), _v("vanished", deliveries=1)),
                 (Truth(6, UNKNOWN, 1), _v("vanished", anomalies=["lost"])),
                 (Truth(7, UNKNOWN, 1), _v("queued"))):
        audit = compare([t], {t.ident: v})
        assert [r.agreement for r in audit.rows] == [DISAGREE] and not audit.acks_unseen, t


def test_a_delivered_message_the_job_calls_lost_is_a_false_lost():
    audit = compare([Truth(1, CONFIRMED, 1)], {1: _v("vanished", anomalies=["lost"])})
    (r,) = audit.rows
    assert (r.job, r.agreement) == ("lost", DISAGREE)
    assert [x.ident for x in audit.false_lost] == [1]
    assert audit.counts()["false_lost"] == 1 and audit.counts()["disagree"] == 1


def test_a_lost_message_must_be_lost_or_unknown_over_a_gap():
    t = Truth(1, CONFIRMED, 0)
    assert judge(t, _v("vanished", 0, ["lost"])).agreement == EXACT
    assert judge(t, _v("unknown", 0, ["unknown"], GAP_TEXT)).agreement == GAP
    audit = compare([t], {1: _v("queued", 0)})
    assert [(r.client, r.job, r.agreement) for r in audit.missed_losses] == [
        (LOST, "queued", DISAGREE)]


def test_an_unconfirmed_undelivered_message_must_not_be_acked():
    for outcome in (NACKED, UNKNOWN):
        t = Truth(1, outcome, 0)
        for state in ("nacked_to_publisher", "not_enqueued", "published", "vanished"):
            assert judge(t, _v(state, 0)).agreement == EXACT, state
        assert judge(t, None).agreement == EXACT  # it may never have reached the broker
        r = judge(t, _v("acked"))
        assert (r.client, r.agreement) == (UNCONFIRMED, DISAGREE)


def test_no_lifecycle_agrees_only_under_a_gap_at_its_publish():
    gaps = [Gap("conn-0", 10_000_000_000, 11_000_000_000, "no process_stop")]
    at = Truth(1, CONFIRMED, 1, attempted_ns=11_200_000_000)  # within the 0.5 s slack
    r = judge(at, None, gaps)
    assert (r.job, r.agreement) == (ABSENT, GAP) and "conn-0" in r.why
    assert judge(Truth(1, CONFIRMED, 1, 12_000_000_000), None, gaps).agreement == DISAGREE
    assert judge(Truth(1, CONFIRMED, 0, None), None, gaps).agreement == DISAGREE


def test_duplicates_must_agree_one_way():
    r = judge(Truth(1, CONFIRMED, 2), _v("acked", 1))
    assert r.agreement == DISAGREE and "read it 2 times" in r.why
    assert judge(Truth(1, CONFIRMED, 2), _v("acked", 3)).agreement == EXACT
    # the broker delivered twice, the client read once (the first died in flight): counted
    audit = compare([Truth(1, CONFIRMED, 1), Truth(2, CONFIRMED, 2)],
                    {1: _v("acked", 2), 2: _v("acked", 1)})
    assert audit.job_only_duplicates == [1]
    assert [r.ident for r in audit.duplicates_unseen] == [2]
    c = audit.counts()
    assert (c["client_duplicates"], c["duplicates_unseen"], c["job_only_duplicates"]) == (1, 1, 1)
    # a delivery event the job misses may be in a log gap that counts for the message
    r = judge(Truth(1, CONFIRMED, 2), _v("acked", 1, log_gap=GAP_TEXT))
    assert r.agreement == GAP and GAP_TEXT in r.why


def test_after_a_complete_drain_a_queued_verdict_is_stale():
    truths = [Truth(1, NACKED, 0), Truth(2, UNKNOWN, 0), Truth(3, NACKED, 0)]
    views = {1: _v("queued", 0), 2: _v("unacked", 1), 3: _v("nacked_to_publisher", 0)}
    assert compare(truths, views, drained=True).stale == [1, 2]
    assert compare(truths, views).stale == []  # (no drain: it may still be there)
    audit = compare(truths, views, drained=True)
    assert audit.counts()["disagree"] == 0 and "stale" in audit.summary()


def test_counts_and_pairs_of_a_run():
    truths = truths_from_history(
        {1: CONFIRMED, 2: CONFIRMED, 3: NACKED, 4: CONFIRMED, 5: UNKNOWN},
        [Delivery(1, 1, 0.1, False), Delivery(2, 1, 0.2, False), Delivery(2, 2, 0.3, True)],
        {1: 5, 2: 6})
    assert truths[0] == Truth(1, CONFIRMED, 1, 5)
    views = {1: _v("acked"), 2: _v("acked", 2), 3: _v("nacked_to_publisher", 0),
             4: _v("unknown", 0, ["unknown"], GAP_TEXT)}
    audit = compare(truths, views)
    assert audit.counts() == {"messages": 5, "exact": 4, "gap": 1, "disagree": 0,
                              "agree_pct": 100.0, "false_lost": 0, "missed_losses": 0,
                              "client_duplicates": 1, "duplicates_unseen": 0,
                              "job_only_duplicates": 0, "stale": 0, "acks_unseen": 0}
    assert audit.pairs[(DELIVERED, "acked")] == 2 and audit.pairs[(UNCONFIRMED, ABSENT)] == 1
    assert audit.pairs[(LOST, "unknown")] == 1
    assert "DISAGREE" not in audit.summary()
    bad = compare([Truth(9, CONFIRMED, 0)], {9: _v("queued", 0)})
    assert bad.counts()["agree_pct"] == 0.0
    assert "DISAGREE 9: client lost x0, job queued x0" in bad.summary()


def test_views_from_the_jobs_rows():
    def lc(msg, mid, state, parent=None, gap=None):
        return {"msg_id": msg, "message_id": mid, "final_state": state, "deliveries": 2,
                "acks": 1, "parent_msg_id": parent, "log_gap": gap}
    rows = [lc("aa", "q/1", "acked"), lc("bb", "q/2", "vanished"),
            lc("cc", "q/2", "queued", parent="bb"),  # its dead-lettered copy: skipped
            lc("dd", "other/1", "acked"), lc("ee", None, "acked")]
    anomalies = [{"msg_id": "bb", "kind": "lost"}, {"msg_id": "bb", "kind": "acked_twice"}]

    def ident_of(message_id):
        prefix, _, n = (message_id or "").partition("/")
        return int(n) if prefix == "q" else None
    views = views_by_message_id(rows, anomalies, ident_of)
    assert sorted(views) == [1, 2]
    assert views[1] == JobView("acked", None, 2, 1, ())
    assert views[2].anomalies == ("acked_twice", "lost") and views[2].verdict == "lost"
    try:
        views_by_message_id(rows + [lc("ff", "q/1", "acked")], [], ident_of)
    except ValueError as e:
        assert "q/1" in str(e)
    else:
        raise AssertionError("two lifecycles of one message_id must not pass")
