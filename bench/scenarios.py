"""Benchmark scenarios, as data.

A scenario says how many queues, producer and consumer connections (and channels on each) to
run, the message size, and the acknowledgement / confirm / persistence settings.  The runner
(bench/runner.py) knows nothing about particular scenarios: adding one is adding a `Scenario`
to `SCENARIOS` (or building one with `dataclasses.replace`, as the paper's are below).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

DEFAULT_CONFIRM_WINDOW = 1000      # like PerfTest's --confirm 1000: unconfirmed messages in flight


@dataclasses.dataclass(frozen=True)
class Scenario:
    key: str                          # short name used on the command line ("a", "paper-q4")
    title: str                        # shown in tables
    description: str = ""
    queues: int = 1
    producers: int = 1                # producer connections per queue
    producer_channels: int = 1        # publishing channels per producer connection
    consumers: int = 1                # consumer connections per queue
    consumer_channels: int = 1        # consuming channels per consumer connection
    message_size: int = 1500          # body bytes
    no_ack: bool = False              # basic.consume no_ack (auto-ack)
    prefetch: int | None = None       # basic.qos prefetch_count per channel (None: no qos)
    ack_every: int = 1                # 1: basic.ack per message; N: multiple=true every N
    confirm: int | None = None        # publisher confirms, at most this many unconfirmed per channel
    persistent: bool = False          # delivery_mode 2
    durable: bool = False             # durable queues
    queue_arguments: tuple = ()       # ((key, value), ...) for queue.declare's arguments
    default: bool = False             # part of the default set run by `make bench`

    def __post_init__(self):
        if self.no_ack and self.prefetch:
            raise ValueError(f"{self.key}: prefetch has no effect with no_ack")
        if not self.no_ack and self.prefetch and self.ack_every > self.prefetch:
            raise ValueError(f"{self.key}: ack_every ({self.ack_every}) > prefetch "
                             f"({self.prefetch}) would stall the consumer")
        for field in ("queues", "producers", "producer_channels", "consumer_channels",
                      "ack_every"):
            if getattr(self, field) < 1:
                raise ValueError(f"{self.key}: {field} must be >= 1")
        if self.consumers < 0:
            raise ValueError(f"{self.key}: consumers must be >= 0")
        if self.message_size < 8:
            raise ValueError(f"{self.key}: message_size must be >= 8 (the body carries a "
                             "timestamp)")
        if self.confirm is not None and self.confirm < 1:
            raise ValueError(f"{self.key}: the confirm window must be >= 1")

    @property
    def arguments(self) -> dict:
        return dict(self.queue_arguments)

    @property
    def connections(self) -> int:
        return self.queues * (self.producers + self.consumers)

    def with_queue_arguments(self, extra: Mapping) -> "Scenario":
        if not extra:
            return self
        args = dict(self.queue_arguments)
        args.update(extra)
        return dataclasses.replace(self, queue_arguments=tuple(sorted(args.items())))

    def with_confirm_window(self, window: int) -> "Scenario":
        if self.confirm is None:
            return self
        return dataclasses.replace(self, confirm=window)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["queue_arguments"] = self.arguments
        return d


A = Scenario(
    key="a", title="(a) no-ack, no confirms",
    description="1 producer, 1 consumer, 1 queue, 1500-byte transient messages; the consumer "
                "uses no_ack (automatic acknowledgement); the producer publishes without "
                "confirms, as fast as TCP lets it.",
    no_ack=True, default=True)

B = dataclasses.replace(
    A, key="b", title="(b) manual ack, prefetch 100",
    description="As (a), but the consumer acknowledges every message (basic.ack per message, "
                "all acks from one socket read sent in one write) with basic.qos prefetch 100.",
    no_ack=False, prefetch=100)

C = dataclasses.replace(
    B, key="c", title="(c) manual ack + confirms",
    description="As (b), plus publisher confirms: the producer keeps at most 1000 (--confirm-"
                "window) unconfirmed messages in flight; confirm latency is measured from "
                "handing the message to the socket to receiving its basic.ack.",
    confirm=DEFAULT_CONFIRM_WINDOW)

D = dataclasses.replace(
    C, key="persistent", title="(d) persistent, durable queue",
    description="As (c), with a durable queue and persistent messages (delivery_mode 2), so "
                "confirms wait for the disk.",
    persistent=True, durable=True, default=False)


def paper(queues: int, persistent: bool = False) -> Scenario:
    """The paper's setup: per queue 2 producers x 2 channels and 3 consumers x 3 channels;
    persistent=True is its persistent case ((d): durable queues, delivery_mode 2)."""
    what = "persistent messages to durable queues" if persistent else "transient messages"
    return dataclasses.replace(
        C, key=f"{'d-' if persistent else ''}paper-q{queues}",
        title=f"{'(d) ' if persistent else ''}paper, {queues} queue{'s' if queues > 1 else ''}",
        description=f"{queues} queue(s); per queue 2 producer connections x 2 channels and 3 "
                    f"consumer connections x 3 channels; manual ack, prefetch 100, confirms; "
                    f"{what}.",
        queues=queues, producers=2, producer_channels=2, consumers=3, consumer_channels=3,
        persistent=persistent, durable=persistent, default=False)


CONFIRM_ON = dataclasses.replace(
    C, key="confirm-on", title="(c) with x-confirm-on",
    description="(c) on a queue declared with the x-confirm-on argument; its value comes from "
                "--queue-arg x-confirm-on=VALUE (default 'enqueue').",
    queue_arguments=(("x-confirm-on", "enqueue"),), default=False)

SCENARIOS: dict[str, Scenario] = {s.key: s for s in (
    A, B, C, D, paper(1), paper(2), paper(4), paper(8), paper(1, True), paper(2, True),
    paper(4, True), paper(8, True), CONFIRM_ON)}

GROUPS: dict[str, list[str]] = {
    "default": [k for k, s in SCENARIOS.items() if s.default],
    "paper": ["paper-q1", "paper-q2", "paper-q4", "paper-q8"],
    "persistent": ["c", "persistent", "d-paper-q1", "d-paper-q2", "d-paper-q4", "d-paper-q8"],
    "all": list(SCENARIOS),
}


def select(spec: str) -> list[Scenario]:
    """'a,c' or 'default' or 'paper' or 'all' (comma-separated keys and group names)."""
    out: list[Scenario] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        keys = GROUPS.get(part, [part])
        for k in keys:
            if k not in SCENARIOS:
                raise KeyError(f"unknown scenario {k!r}; known: {', '.join(SCENARIOS)}; "
                               f"groups: {', '.join(GROUPS)}")
            if SCENARIOS[k] not in out:
                out.append(SCENARIOS[k])
    return out
