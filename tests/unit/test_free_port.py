"""tests/conftest.py's free_port: the ports one test process picks for its nodes never repeat
while its band lasts, so two picks for one node cannot collide."""
from conftest import _port_band, free_port


def test_picks_do_not_repeat_within_the_band():
    picks = [free_port() for _ in range(500)]
    assert len(set(picks)) == len(picks)
    assert all(p in _port_band() for p in picks)


def test_avoid_is_honoured_and_filled():
    avoid: set = set()
    a, b = free_port(avoid=avoid), free_port(avoid=avoid)
    assert a != b and avoid == {a, b}
