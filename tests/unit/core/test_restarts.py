"""Restart intensity (actors/core/restarts.py): OTP's intensity/period, without sockets."""
from actors.core.restarts import RestartIntensity


def test_restarts_up_to_intensity_then_gives_up():
    r = RestartIntensity(max_restarts=5, period=10.0)
    assert [r.exited(t) for t in (0.0, 1.0, 2.0, 3.0, 4.0)] == [True] * 5
    assert r.exited(5.0) is False  # a sixth exit within 10 s


def test_old_exits_leave_the_window():
    r = RestartIntensity(max_restarts=2, period=10.0)
    assert r.exited(0.0) and r.exited(1.0)
    assert r.exited(11.5)  # the exit at 0.0 and 1.0 are more than 10 s old: one in the window
    assert r.exited(12.0)
    assert not r.exited(12.5)  # three within 10 s


def test_zero_intensity_gives_up_at_the_first_exit():
    assert RestartIntensity(max_restarts=0, period=10.0).exited(0.0) is False


def test_reset_forgets_exits():
    r = RestartIntensity(max_restarts=1, period=10.0)
    assert r.exited(0.0)
    r.reset()
    assert r.exited(1.0)
    assert not r.exited(2.0)
