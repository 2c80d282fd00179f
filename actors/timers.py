"""One timer thread per process: `at(when_ms, actor_ref, msg)` tells the actor msg at that
monotonic time. Erlang has `erlang:send_after/3`; pykka has nothing, so this stands in."""

from __future__ import annotations

import heapq
import itertools
import threading
import time


class Timers:
    def __init__(self):
        self._heap: list = []  # (when_ms, n, actor_ref, msg)
        self._n = itertools.count()  # tie-breaker
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="timers", daemon=True)
        self._thread.start()

    def at(self, when_ms: int, actor_ref, msg) -> None:
        with self._cv:
            heapq.heappush(self._heap, (when_ms, next(self._n), actor_ref, msg))
            self._cv.notify()

    def every(self, period_ms: int, actor_ref, msg) -> None:
        """Tell msg every period (re-armed after each tell) until the actor dies."""
        self.at(int(time.monotonic() * 1000) + period_ms, actor_ref, _Every(period_ms, msg))

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopped:
                    now = int(time.monotonic() * 1000)
                    if self._heap and self._heap[0][0] <= now:
                        break
                    timeout = (self._heap[0][0] - now) / 1000 if self._heap else None
                    self._cv.wait(timeout)
                if self._stopped:
                    return
                _, _, ref, msg = heapq.heappop(self._heap)
            if isinstance(msg, _Every):
                if not ref.is_alive():
                    continue
                self.at(int(time.monotonic() * 1000) + msg.period, ref, msg)
                msg = msg.msg
            try:
                ref.tell(msg)
            except Exception:
                pass  # the actor has stopped

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()


class _Every:
    __slots__ = ("period", "msg")

    def __init__(self, period, msg):
        self.period, self.msg = period, msg


class Sampler:
    """A thread that calls its subclass's `sample()` every interval until stopped (a worker's statistics to
    its node); a failed sample is logged and the next one comes as usual."""

    def __init__(self, interval_ms: int, name: str, log):
        self.interval = interval_ms / 1000.0
        self.log = log  # the worker's logger
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample must never end the worker
                self.log.exception("statistics sample failed")
