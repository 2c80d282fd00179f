"""The process's timer thread (actors/timers.py): it is woken only for a new earliest deadline
(a statistics timer armed by every queue started must not switch threads each time), and
every timer still fires, in deadline order."""
from __future__ import annotations

import threading
import time

import pytest

from actors.timers import Timers


class Ref:
    def __init__(self, want: int):
        self.got: list = []
        self.done = threading.Event()
        self.want = want

    def tell(self, msg) -> None:
        self.got.append(msg)
        if len(self.got) >= self.want:
            self.done.set()

    def is_alive(self) -> bool:
        return True


class Notifies:
    """Counts the notify() calls of a Timers' condition (the thread only waits on it)."""

    def __init__(self, timers: Timers):
        self.count = 0
        cv = timers._cv
        real = cv.notify

        def notify(n: int = 1) -> None:
            self.count += 1
            real(n)

        cv.notify = notify


@pytest.fixture
def timers():
    """A Timers and the count of its wake-ups; stopped after the test."""
    t = Timers()
    yield t, Notifies(t)
    t.stop()


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def test_only_a_new_earliest_deadline_wakes_the_thread(timers):
    t, cv = timers
    ref = Ref(1)
    base = now_ms()
    t.at(base + 60_000, ref, "far")
    assert cv.count == 1  # the first one is the earliest
    for i in range(50):
        t.at(base + 61_000 + i, ref, f"later {i}")
    assert cv.count == 1
    t.at(base + 30_000, ref, "sooner")
    assert cv.count == 2


def test_every_timer_fires_in_deadline_order_whether_or_not_it_woke_the_thread(timers):
    t, cv = timers
    ref = Ref(4)
    base = now_ms()
    t.at(base + 150, ref, "b")
    t.at(base + 250, ref, "d")  # (no wake-up)
    t.at(base + 200, ref, "c")  # (no wake-up)
    t.at(base + 100, ref, "a")
    assert cv.count == 2
    assert ref.done.wait(5)
    assert ref.got == ["a", "b", "c", "d"]
