"""Progress while the job runs: one tqdm bar of the job's steps, its postfix showing the running
Spark stages' tasks (polled from the SparkContext's status tracker every half second; Spark's
own console bar is switched off in session.py so the two do not fight over the terminal).
When stderr is not a terminal (make ... > log), one plain line per step instead."""

from __future__ import annotations

import sys
import threading
import time

from tqdm import tqdm


class Progress:
    def __init__(self, steps: list[str], enabled: bool = True):
        self.tracker = None  # the SparkContext's status tracker, once attach()ed
        self.tty = enabled and sys.stderr.isatty()  # a live bar, else plain lines
        self.lines = enabled and not self.tty  # one line per step
        self.total = len(steps)  # steps in the job
        self.done = 0  # steps finished
        self.bar = tqdm(total=len(steps), unit="step", disable=not self.tty, dynamic_ncols=True,
                        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}] {postfix}")
        self.step = ""  # the step running now
        self.started = time.monotonic()  # for the stdout summary
        self.timings: list[tuple[str, float]] = []  # (step, seconds) done so far
        self.t_step = self.started  # when the current step began
        self.stop = threading.Event()  # ends the poller
        self.poller = threading.Thread(target=self._poll, daemon=True, name="progress")

    def attach(self, spark) -> None:
        """Show the running Spark stages from now on."""
        self.tracker = spark.sparkContext.statusTracker()
        if self.tty:
            self.poller.start()

    def begin(self, step: str) -> None:
        self._end_step()
        self.step = step
        self.t_step = time.monotonic()
        self.bar.set_description_str(step)
        if self.lines:
            print(f"[{self.done + 1}/{self.total}] {step} (at {self.elapsed:.1f} s)",
                  file=sys.stderr, flush=True)

    def _end_step(self) -> None:
        if self.step:
            self.timings.append((self.step, time.monotonic() - self.t_step))
            self.bar.update(1)
            self.done += 1
            self.step = ""

    def _poll(self) -> None:
        while not self.stop.wait(0.5):
            try:
                parts = []
                for sid in self.tracker.getActiveStageIds():
                    info = self.tracker.getStageInfo(sid)
                    if info is not None:
                        parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} "
                                     f"tasks")
                self.bar.set_postfix_str("; ".join(parts), refresh=True)
            except Exception:  # the context is going away
                return

    def close(self) -> None:
        self._end_step()
        self.stop.set()
        if self.poller.is_alive():
            self.poller.join(timeout=2)
        self.bar.set_postfix_str("")
        self.bar.close()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
