"""Benchmark scenarios, as data.

A scenario says how many queues, producer and consumer connections (and channels on each) to
run, the message size, and the acknowledgement / confirm / persistence settings, and, for the
workloads of RabbitMQ's PerfTest (group `perftest`), a fixed publishing rate per channel, a
fanout exchange in front of the queues and a delay before the consumers subscribe.  The runner
(bench/scenario_run.py) knows nothing about particular scenarios: adding one is adding a `Scenario`
to `SCENARIOS` (or building one with `dataclasses.replace`, as the paper's are below).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

DEFAULT_CONFIRM_WINDOW = 1000      # like PerfTest's --confirm 1000: unconfirmed messages in flight
EXCHANGE_TYPES = ("", "fanout")    # "": the default exchange, routing key = queue name


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
    consumer_arguments: tuple = ()    # ((key, value), ...) for basic.consume's arguments
    default: bool = False             # part of the default set run by `make bench`
    rate: float | None = None         # msg/s per publishing channel (PerfTest's --rate); None: as
                                      # fast as the broker takes them
    exchange_type: str = ""           # "fanout": one exchange bound to every queue, and
                                      # `producers` connections in all publish to it
    consumer_start_delay: float = 0.0  # s from the start until consumers subscribe (PerfTest's
                                       # --consumer-start-delay); the measured window starts then

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
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"{self.key}: rate must be > 0 msg/s (None: unlimited)")
        if self.exchange_type not in EXCHANGE_TYPES:
            raise ValueError(f"{self.key}: exchange_type must be one of {EXCHANGE_TYPES}")
        if self.consumer_start_delay < 0:
            raise ValueError(f"{self.key}: consumer_start_delay must be >= 0")
        if self.consumer_start_delay and self.consumers < 1:
            raise ValueError(f"{self.key}: consumer_start_delay needs consumers")

    @property
    def arguments(self) -> dict:
        return dict(self.queue_arguments)

    @property
    def producer_connections(self) -> int:
        """Per queue on the default exchange; in all with an exchange of its own."""
        return self.producers if self.exchange_type else self.queues * self.producers

    @property
    def connections(self) -> int:
        return self.producer_connections + self.queues * self.consumers

    @property
    def copies(self) -> int:
        """Queues each published message is routed to."""
        return self.queues if self.exchange_type == "fanout" else 1

    @property
    def target_publish_rate(self) -> float | None:
        """msg/s all publishing channels together should publish (None: unlimited)."""
        if self.rate is None:
            return None
        return self.rate * self.producer_connections * self.producer_channels

    @property
    def target_consume_rate(self) -> float | None:
        """msg/s the consumers together should receive once publishing runs at its target."""
        t = self.target_publish_rate
        return None if t is None else t * self.copies

    @property
    def lean_only(self) -> bool:
        """Settings the pika load generator (bench/pikaworker.py) does not implement."""
        return bool(self.rate is not None or self.exchange_type or self.consumer_start_delay)

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
        d["consumer_arguments"] = dict(self.consumer_arguments)
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

# -- the workloads RabbitMQ's team runs with PerfTest ------------------------------------------
# Every producer and consumer is a connection of its own with one channel (the load generator
# holds the 2,000 connections of many-queues in its processes' select loops, so nothing is
# multiplexed), bodies are PerfTest's default 12 bytes (`--size 12`), consumers ack each
# message with basic.qos prefetch 100 as in (b), no publisher confirms (PerfTest's default).
# Paced publishers start spread over one interval of their rate (PerfTest spreads them with
# --producer-random-start-delay), so a thousand of them do not publish in lock-step.
PERFTEST_SIZE = 12

MANY_QUEUES = dataclasses.replace(
    B, key="many-queues",
    title="many-queues: 1,000 queues, 1,000 P / 1,000 C at 10 msg/s each",
    description="1,000 queues with one producer and one consumer connection each (2,000 "
                "connections, one channel each, not multiplexed); every producer publishes "
                "12-byte messages at 10 msg/s (10,000 msg/s in all). PerfTest: --queue-pattern "
                "'perf-test-%d' --queue-pattern-from 1 --queue-pattern-to 1000 --producers 1000 "
                "--consumers 1000 --rate 10 --size 12.",
    queues=1000, message_size=PERFTEST_SIZE, rate=10.0, default=False)

FANOUT_10 = dataclasses.replace(
    B, key="fanout-10", title="fanout-10: 1 P -> fanout exchange -> 10 queues / 10 C",
    description="One producer publishes 12-byte messages as fast as the broker takes them to a "
                "fanout exchange bound to 10 queues, each with one consumer (every message is "
                "delivered 10 times). PerfTest: --exchange-type fanout --producers 1 "
                "--consumers 10 --size 12 (a queue per consumer).",
    queues=10, message_size=PERFTEST_SIZE, exchange_type="fanout", default=False)

MANY_PUBLISHERS = dataclasses.replace(
    B, key="many-publishers-one-queue",
    title="many-publishers-one-queue: 2,000 P at 5 msg/s -> 1 queue / 1 C",
    description="2,000 producer connections publish 12-byte messages at 5 msg/s each (10,000 "
                "msg/s in all) into one queue with one consumer. PerfTest: --producers 2000 "
                "--consumers 1 --rate 5 --size 12.",
    producers=2000, message_size=PERFTEST_SIZE, rate=5.0, default=False)

LATE_CONSUMERS = dataclasses.replace(
    B, key="late-consumers",
    title="late-consumers: 4 queues, 4 P at 2,000 msg/s, C join after 5 s",
    description="4 queues with one producer and one consumer each; the producers publish "
                "12-byte messages at 2,000 msg/s each (8,000 msg/s in all) from the start, the "
                "consumers subscribe 5 s later (a backlog of about 40,000 messages). The "
                "measured window starts when they join (--warmup does not apply); reported: "
                "the backlog, how long until the last message published before the join is "
                "delivered, the consume rate until then, and how long until the queues' depth "
                "is back to a quarter of a second of publishing. PerfTest: --queue-pattern "
                "'perf-test-%d' --queue-pattern-from 1 --queue-pattern-to 4 --producers 4 "
                "--consumers 4 --rate 2000 --size 12 --consumer-start-delay 5.",
    queues=4, message_size=PERFTEST_SIZE, rate=2000.0, consumer_start_delay=5.0, default=False)

PERFTEST = (MANY_QUEUES, FANOUT_10, MANY_PUBLISHERS, LATE_CONSUMERS)

STREAM = dataclasses.replace(
    B, key="stream",
    title="stream: 1 P -> 1 stream / 10 C from first, 1,500 B",
    description="One producer with confirms publishes persistent 1,500-byte messages to a "
                "stream (x-queue-type stream); 10 consumer connections read it from its first "
                "offset (x-stream-offset first), each its own position, manual ack with "
                "prefetch 100 (a stream refuses consumers without one). Every message is "
                "delivered 10 times.",
    consumers=10, confirm=DEFAULT_CONFIRM_WINDOW, persistent=True, durable=True,
    queue_arguments=(("x-queue-type", "stream"),),
    consumer_arguments=(("x-stream-offset", "first"),), default=False)

# -- ordinary load: one publisher with confirms and one consumer with acks at a fixed rate, where
# the figures that matter are latency and CPU per message rather than the peak.
FIXED_RATES = (1000, 5000, 20000)
FIXED_SIZES = (1500, 16)


def fixed_rate(rate: int, size: int, persistent: bool) -> Scenario:
    """1 P (confirms) -> 1 queue -> 1 C (manual ack, prefetch 100) at `rate` msg/s."""
    what = "persistent, durable queue" if persistent else "transient"
    return dataclasses.replace(
        C, key=f"rate-{rate // 1000}k-{size}b{'-p' if persistent else ''}",
        title=f"fixed {rate:,} msg/s, {size} B, {what}",
        description=f"One producer with confirms publishes {size}-byte messages ({what}) at "
                    f"{rate:,} msg/s to one queue with one consumer (manual ack, prefetch 100). "
                    "The load most deployments see: end-to-end and confirm latency and the "
                    "broker's CPU per message are the figures, not the peak rate.",
        message_size=size, rate=float(rate), persistent=persistent, durable=persistent,
        default=False)


FIXED_RATE = tuple(fixed_rate(r, size, p) for size in FIXED_SIZES for p in (False, True)
                   for r in FIXED_RATES)

SCENARIOS: dict[str, Scenario] = {s.key: s for s in (
    A, B, C, D, paper(1), paper(2), paper(4), paper(8), paper(15), paper(1, True),
    paper(2, True), paper(4, True), paper(8, True), paper(15, True), CONFIRM_ON, *PERFTEST,
    STREAM, *FIXED_RATE)}

GROUPS: dict[str, list[str]] = {
    "default": [k for k, s in SCENARIOS.items() if s.default],
    "paper": ["paper-q1", "paper-q2", "paper-q4", "paper-q8", "paper-q15"],
    "persistent": ["c", "persistent", "d-paper-q1", "d-paper-q2", "d-paper-q4", "d-paper-q8",
                   "d-paper-q15"],
    "perftest": [s.key for s in PERFTEST],
    "fixed-rate": [s.key for s in FIXED_RATE],
    "fixed-rate-5k": [s.key for s in FIXED_RATE if s.rate == 5000],
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
