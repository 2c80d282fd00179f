"""src-delete-after counting (rabbit_shovel_behaviour's remaining / remaining_unacked) and
the restart decision after a shovel stops (rabbit_shovel_dyn_worker_sup)."""

from __future__ import annotations

from actors.shovel import backoff
from actors.shovel.countdown import Countdown


def test_never_is_unlimited():
    c = Countdown.of("never", 5)
    for _ in range(10):
        assert c.may_publish()
        c.published()
        assert not c.settled(1)
    assert not c.finished


def test_queue_length_counts_the_messages_there_at_connection():
    c = Countdown.of("queue-length", 3)
    assert not c.finished
    for _ in range(3):
        assert c.may_publish()
        c.published()
    assert not c.may_publish()  # on-confirm: the 4th delivery waits, requeued at the close
    assert not c.settled(2)
    assert c.settled(1) and c.finished


def test_an_empty_source_with_queue_length_is_done_at_once():
    assert Countdown.of("queue-length", 0).finished
    assert Countdown.of(0, None).finished


def test_a_number_counts_that_many():
    c = Countdown.of(2, 100)
    assert not c.settled(1) and c.settled(1)


def test_restart_after_the_reconnect_delay():
    assert backoff.after_exit("source connection failed", 5) == backoff.Restart(5.0, False)
    assert backoff.after_exit("destination channel closed", 0.5).after == 0.5


def test_a_delay_of_zero_means_not_restarted():
    assert backoff.after_exit("source connection failed", 0) == backoff.Restart(None, False)


def test_autodelete_clears_the_parameter_and_does_not_restart():
    assert backoff.after_exit(backoff.AUTODELETE, 5) == backoff.Restart(None, True)


def test_each_attempt_takes_the_next_uri():
    cycle = backoff.UriCycle(("a", "b"))
    assert [cycle.take() for _ in range(5)] == ["a", "b", "a", "b", "a"]
