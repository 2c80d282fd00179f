"""actors/core/credit_flow.py: credit_flow.erl's halves, counted in messages and bytes."""

from __future__ import annotations

from actors.core.credit_flow import ReceiverCredit, SenderCredit


def test_sender_runs_out_on_messages_or_bytes_whichever_first():
    s = SenderCredit(initial=3, initial_bytes=100)
    assert not s.spend("q1", 10) and not s.spend("q1", 10)
    assert s.spend("q1", 10)  # third message: message credit used up
    assert s.spend("q2", 150)  # one body over the byte credit: it goes, and the sender stops
    assert s.exhausted()
    s.bump("q1", 1, 0)
    s.bump("q2", 0, 51)
    assert not s.exhausted()


def test_sender_forgets_dead_receivers():
    s = SenderCredit(initial=1, initial_bytes=100)
    s.spend("w1#q1", 1)
    s.spend("w2#q2", 1)
    s.forget(lambda r: r.startswith("w1#"))
    assert list(s.left) == ["w2#q2"]


def test_receiver_bumps_after_messages_or_bytes_and_pays_what_it_withheld():
    r = ReceiverCredit(more=3, more_bytes=1000)
    assert r.received("ch", 2, 20) is None
    assert r.received("ch", 1, 10) == (3, 30)
    assert r.received("ch", 1, 1000) == (1, 1000)
    r.withhold("ch", (3, 30))
    r.withhold("ch", (1, 5))
    assert r.pay() == [("ch", 4, 35)] and r.pay() == []
    r.received("ch", 1, 1)
    r.withhold("ch", (1, 1))
    r.forget("ch")
    assert r.pay() == [] and r.received("ch", 1, 1) is None
