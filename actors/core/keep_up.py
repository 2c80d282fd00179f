"""Whether a queue's consumers keep up with its publishers, measured over windows of time.

A queue whose consumers take at least `ratio` (a quarter) of what its publishers bring (over
the last window) gives them the priority: once it holds more than HOLD_BYTES or HOLD_MESSAGES
ready (or its memory budget, if smaller), publisher credit waits (credit_flow) instead of the
queue growing towards paging, so a message waits milliseconds in it, and what is already paged
out drains before more comes in. Paging would cost the same worker a write and a read of every message, which
its consumers, bound by their prefetch round trip, cannot afford: they would fall further
behind until every message goes through the disk.
Consumers that take less than that (slow ones, or none at all) leave the publishers alone:
the queue pages, as RabbitMQ's classic queues do. A consumer that stops taking (a window with
no deliveries) ends the priority at the window's end, so a publisher is never held by a
consumer that does not drain.

rabbit_amqqueue_process does the like by mailbox priorities (`consumer_bias`: consumers' acks
and delivery credit before publishes while egress is below twice the ingress); here publishes
and deliveries cross different actors and processes, so the bias is on the credit.

Pure: times are integer milliseconds of a monotonic clock passed in.
"""

from __future__ import annotations

WINDOW_MS = 1000  # one measurement
# consumers keep up when they take at least this share of what comes in: measured with
# `bench --scenarios b,c` (2026-11-24), at 0.5 a consumer that lagged in its first second (b:
# 10.8k consumed against 29.4k published, 0.37) never got the priority and the queue paged;
# at 0.25 both cases ran publish = consume (34.7k / 34.6k); a consumer at under a quarter of its
# publishers' rate is a slow one, whose queue pages
RATIO = 0.25
# what a queue whose consumers keep up holds ready before publisher credit waits (or its memory
# budget, if smaller): enough to cover the time credit takes to reach a publisher and its next
# publishes to come back, little enough that a message waits tens of milliseconds, not the
# budget's worth (16 MiB of 1,500-byte messages is ~300 ms at 40k msg/s: end-to-end p50 was
# 295 ms in (c) against RabbitMQ's 34). Measured with `python -m bench --scenarios b,c,persistent`
# and `--scenarios c --size 16` (2026-11-25, quiet machine): at 1 MiB / 2,048 messages the e2e
# p50 of (c) is 38 ms, persistent 42 ms, (c) with 16-byte bodies 61 ms (1,298 ms with no count
# bound), publish and consume rates unchanged (4 MiB: 88 ms and 108 ms)
HOLD_BYTES = 1 << 20
HOLD_MESSAGES = 2048


class KeepUp:
    __slots__ = ("window", "ratio", "hold_bytes", "hold_messages", "start", "ins", "outs", "on")

    def __init__(self, window: int = WINDOW_MS, ratio: float = RATIO,
                 hold_bytes: int = HOLD_BYTES, hold_messages: int = HOLD_MESSAGES):
        self.window = window
        self.ratio = ratio
        self.hold_bytes = hold_bytes  # while on: ready bytes past which credit waits
        self.hold_messages = hold_messages  # ... or ready messages
        self.start = 0  # start of the current window (0: none yet)
        self.ins = 0  # messages published in it
        self.outs = 0  # messages delivered in it
        self.on = False  # the last full window's verdict: consumers keep up

    def roll(self, now: int) -> None:
        """Close the window if it is over (a verdict from what it saw) and start the next."""
        if not self.start:
            self.start = now
            return
        if now - self.start < self.window:
            return
        self.on = self.outs > 0 and self.outs >= self.ratio * self.ins
        # a window with no traffic at all keeps no verdict (the next one decides)
        self.start, self.ins, self.outs = now, 0, 0

    def due(self) -> int:
        """When the current window ends (for a timer while the verdict holds credit)."""
        return self.start + self.window
