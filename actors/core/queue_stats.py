"""Queue statistics as RabbitMQ's management plugin keeps them: what a queue counts (its half,
in the queue actor) and the table of samples the node keeps from what queues emit every
`collect_statistics_interval` (its half, in the metadata actor), from which rates are derived.

A queue emits only when something changed since its last sample (a node of 10,000 idle queues
receives nothing); the table treats a queue it has not heard from for longer than two intervals
as unchanged, so rates fall to 0 once traffic stops.
"""

from __future__ import annotations

import math

from actors.core import samples

COUNTERS = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty", "ack",
            "redeliver")
GAUGES = ("messages", "messages_ready", "messages_unacknowledged", "consumers")
# where the messages are (QueueCore.storage_stats: rabbit_backing_queue's info items)
STORAGE = ("message_bytes", "message_bytes_ready", "message_bytes_unacknowledged",
           "message_bytes_ram", "message_bytes_paged_out", "messages_ram", "messages_ready_ram",
           "messages_unacknowledged_ram", "messages_paged_out", "messages_persistent",
           "message_bytes_persistent")
# what a sample also carries of the queue's state (None when the queue has no value for it):
# rabbit_backing_queue's info items head_message_timestamp, disk_reads and disk_writes, and
# the consumer holding the queue (QueueConsumers.holders)
HOLDERS = ("single_active_consumer_tag", "single_active_consumer", "exclusive_consumer_tag")
# and a stream's own figures (its offsets, segments and consumers' positions, a dict)
STATE = ("head_message_timestamp", "disk_reads", "disk_writes") + HOLDERS + ("stream",)
# the overview's message_stats keys that come from the queues' storage (rabbit_mgmt_db's
# queue_msg_rates; RabbitMQ leaves them out of a queue's own JSON, format_queue_stats)
DISK = ("disk_reads", "disk_writes")
# messages dead-lettered, by reason and by where they went (rabbit_global_counters'
# messages_dead_lettered_*: "at_most_once" to the queue's dead-letter exchange, "disabled"
# dropped for want of one): counted by the queue core where it decides, for Prometheus
DEAD_LETTER_REASONS = ("expired", "rejected", "maxlen", "delivery_limit")
DEAD_LETTER_STRATEGIES = ("disabled", "at_most_once")
DEAD_LETTERED = tuple(f"dead_lettered_{reason}_{strategy}" for reason in DEAD_LETTER_REASONS
                      for strategy in DEAD_LETTER_STRATEGIES)
# the consumer use state (ConsumerUse.state, wall-clock ms): not a counter, not summed
USE = "use"
USE_HALF_LIFE_MS = 1000.0  # rabbit_queue_consumers' USE_AVG_HALF_LIFE (1 s)
# confirms the queue sent its publishers, by the x-confirm-on mode in effect then (Leveret's
# own, for Prometheus; not in the API's message_stats: RabbitMQ's queues have no such count)
CONFIRM_MODES = ("enqueue", "ack")  # (ack-lite's confirms are sent by the consuming channel)
CONFIRMS = tuple(f"confirmed_{mode}" for mode in CONFIRM_MODES)


class QueueCounters:
    """A queue's cumulative message counts (rabbit_core_metrics' queue counters)."""

    __slots__ = COUNTERS + CONFIRMS + ("emitted",)

    def __init__(self):
        for name in COUNTERS + CONFIRMS:
            setattr(self, name, 0)
        self.emitted: tuple | None = None  # what the last sample said (None: never)

    def delivered(self, channel, items: list, consumers: dict) -> None:
        """Deliveries to one channel (messages.Delivery); consumers: (channel, tag) ->
        Consumer, for each one's ack mode."""
        for d in items:
            c = consumers.get((channel, d.consumer_tag))
            if c is not None and c.no_ack:
                self.deliver_no_ack += 1
            else:
                self.deliver += 1
            if d.redelivered:
                self.redeliver += 1

    def got_empty(self) -> None:
        """basic.get-empty (RabbitMQ's queue get_empty count)."""
        self.get_empty += 1

    def got(self, redelivered: bool, no_ack: bool) -> None:
        if no_ack:
            self.get_no_ack += 1
        else:
            self.get += 1
        self.redeliver += bool(redelivered)

    def confirmed(self, mode: str, n: int) -> None:
        """n publisher confirms sent while the queue's x-confirm-on was `mode`."""
        if mode in CONFIRM_MODES:
            setattr(self, f"confirmed_{mode}", getattr(self, f"confirmed_{mode}") + n)

    def sample(self, gauges: dict, use: tuple | None = None) -> dict | None:
        """The counters, `gauges` (queue depth and consumers, where the messages are
        (STORAGE), what was dead-lettered (DEAD_LETTERED), and the STATE items: the head
        message's timestamp, disk reads and writes, the consumer holding the queue)
        and the consumer use state
        (`ConsumerUse.state` in wall-clock ms: it changes only when the queue's consumers
        become able or unable to take messages) when they changed since the last sample,
        else None (nothing to emit)."""
        values = tuple(getattr(self, n) for n in COUNTERS + CONFIRMS) + \
            tuple(gauges.get(g, 0) for g in GAUGES + STORAGE + DEAD_LETTERED) + \
            tuple(gauges.get(g) for g in STATE) + (use,)
        if values == self.emitted:
            return None
        self.emitted = values
        return dict(zip(COUNTERS + CONFIRMS + GAUGES + STORAGE + DEAD_LETTERED + STATE + (USE,),
                        values))


class DiskCounts:
    """rabbit_variable_queue's disk_write_count and disk_read_count of one queue: messages
    its backing queue wrote to storage (each once, its body in the queue index or in
    msg_store; a transient one too when the queue pages) and messages it read back from
    storage (a page, the recovery). The BackingQueue actor is the only writer (one thread:
    the worker's "store" scheduler); the Queue actor reads both when it samples (plain int
    attributes, as the connection worker's sampler reads its actors')."""

    __slots__ = ("writes", "reads")

    def __init__(self):
        self.writes = 0  # messages written to storage
        self.reads = 0  # messages read back from storage


class ConsumerUse:
    """rabbit_queue_consumers' `use`: whether the queue can deliver to a consumer at once
    (active: some consumer has room) or not (inactive: every consumer is blocked by its
    prefetch, the channel's prefetch or the delivery window), with a moving average of the
    active fraction of time (half-life 1 s). RabbitMQ 3.10's `consumer_utilisation` and
    `consumer_capacity` are `utilisation(state, now)` (pure; times in ms from the caller's
    clock)."""

    __slots__ = ("active", "since", "active_ms", "avg")

    def __init__(self, now: int):
        self.active = True  # rabbit_queue_consumers:new/0: {active, Now, 1.0}
        self.since = now  # when the current state began
        self.active_ms = 0  # inactive only: how long the active state before it lasted
        self.avg = 1.0  # the moving average up to `since`

    def update(self, active: bool, now: int) -> None:
        """update_use/2: a change of state folds the finished active+inactive period into
        the average."""
        if active == self.active:
            return
        if not active:
            self.active_ms, self.since, self.active = now - self.since, now, False
        else:
            self.avg = use_avg(self.active_ms, now - self.since, self.avg)
            self.since, self.active_ms, self.active = now, 0, True

    def state(self, offset: int = 0) -> tuple:
        """What a sample carries: (active, since + offset, active_ms, avg); `offset` turns
        the caller's clock into wall-clock ms (constant, so an idle queue's state is
        unchanged from sample to sample)."""
        return (self.active, self.since + offset, self.active_ms, self.avg)


def use_avg(active: float, inactive: float, avg: float) -> float:
    """rabbit_queue_consumers:use_avg/3 (rabbit_misc:moving_average/4)."""
    if active == 0 and inactive == 0:
        return avg
    span = active + inactive
    weight = math.exp(span * math.log(0.5) / USE_HALF_LIFE_MS)
    return (active / span) * (1 - weight) + avg * weight


def utilisation(state, now: int) -> float:
    """rabbit_queue_consumers:capacity/1 of a sampled state at `now` (the same clock)."""
    active, since, active_ms, avg = state
    if active:
        return use_avg(max(0, now - since), 0, avg)
    return use_avg(active_ms, max(0, now - since), avg)


class StatsTable:
    """The node's latest two samples per queue: counts and rates for the management API."""

    def __init__(self, interval_ms: int):
        self.interval_ms = interval_ms
        self.samples: dict[tuple, samples.Sampled] = {}  # (vhost, name) -> its last two

    def put(self, vhost: str, name: str, at_ms: int, sample: dict) -> None:
        samples.put(self.samples, (vhost, name), at_ms, sample)

    def forget(self, vhost: str, name: str) -> None:
        self.samples.pop((vhost, name), None)

    def last(self, vhost: str, name: str) -> dict | None:
        """The queue's last sample (its depth, consumers and STATE items), None before its
        first: what the management API lists, never asked of the queue per request."""
        entry = self.samples.get((vhost, name))
        return entry.last.stats if entry is not None else None

    def message_stats(self, vhost: str, name: str, now_ms: int) -> dict:
        """RabbitMQ's `message_stats` of one queue: each counter and its `_details.rate`
        (per second, between the last two samples; 0 once the queue has been quiet for two
        intervals), with deliver_get (deliveries and gets, with and without ack)."""
        return self._rated(vhost, name, now_ms, COUNTERS + ("deliver_get",))

    def disk_stats(self, vhost: str, name: str, now_ms: int) -> dict:
        """disk_reads and disk_writes of one queue with their `_details.rate`, as
        message_stats' (the overview sums them: rabbit_mgmt_db's vhost_msg_rates)."""
        return self._rated(vhost, name, now_ms, DISK)

    def _rated(self, vhost: str, name: str, now_ms: int, keys: tuple) -> dict:
        entry = self.samples.get((vhost, name))
        if entry is None:
            return {}
        (t1, s1), prev = entry.last, entry.previous
        quiet = now_ms - t1 > 2 * self.interval_ms
        out = {}
        values = _with_deliver_get(s1)
        if prev is not None:
            t0 = prev.at_ms
            before = _with_deliver_get(prev.stats)
        for key in keys:
            rate = 0.0
            if prev is not None and not quiet and t1 > t0:
                rate = round(increase(before.get(key) or 0, values.get(key) or 0) * 1000.0 /
                             (t1 - t0), 1)
            out[key] = values.get(key) or 0
            out[f"{key}_details"] = {"rate": rate}
        return out

    def consumer_use(self, vhost: str, name: str, now_ms: int) -> dict:
        """RabbitMQ 3.10's `consumer_capacity` and `consumer_utilisation` of a queue from its
        last sample: the fraction of time (moving average, half-life 1 s) it could deliver
        to a consumer at once (the API shows capacity 0 and utilisation null while the queue
        has no consumer)."""
        entry = self.samples.get((vhost, name))
        if entry is None or entry.last.stats.get(USE) is None:
            return {}
        u = utilisation(entry.last.stats[USE], now_ms)
        return {"consumer_capacity": u, "consumer_utilisation": u}

    def idle_since(self, vhost: str, name: str, now_ms: int) -> int | None:
        """When the queue went idle (wall-clock ms), once it has been for more than an
        interval: the time of its last sample (it emits one per interval while anything
        changes), as RabbitMQ shows `idle_since` once a queue process has hibernated; None
        while it is busy."""
        entry = self.samples.get((vhost, name))
        if entry is None:
            return None
        at = entry.last.at_ms
        return at if now_ms - at > self.interval_ms else None

    def depth_rates(self, vhost: str, name: str, now_ms: int) -> dict:
        """The rate of change of the queue's depth (`messages_details`,
        `messages_ready_details`, `messages_unacknowledged_details`) between its last two
        samples, per second (0 once the queue has been quiet for two intervals)."""
        entry = self.samples.get((vhost, name))
        if entry is None:
            return {}
        (t1, s1), prev = entry.last, entry.previous
        quiet = now_ms - t1 > 2 * self.interval_ms
        out = {}
        for key in ("messages", "messages_ready", "messages_unacknowledged"):
            rate = 0.0
            if prev is not None and not quiet and t1 > prev.at_ms:
                rate = round((s1.get(key, 0) - prev.stats.get(key, 0)) * 1000.0 /
                             (t1 - prev.at_ms), 1)
            out[f"{key}_details"] = {"rate": rate}
        return out


def increase(before: int, now: int) -> int:
    """How much a counter grew between two samples. One that went down was reset (its queue
    or worker restarted and counts from 0 again): it grew by its new value, from the new
    baseline, as rabbit_mgmt_metrics_collector takes the stats of a process it has no old
    stats of (get_difference/3) instead of a negative difference."""
    return now - before if now >= before else now


def _with_deliver_get(sample: dict) -> dict:
    """A sample with deliver_get: deliveries and gets, with and without ack."""
    values = dict(sample)
    values["deliver_get"] = sum(sample.get(k, 0) for k in ("deliver", "deliver_no_ack", "get",
                                                           "get_no_ack"))
    return values
