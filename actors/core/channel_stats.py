"""Channel statistics (pure): what a channel counts, as RabbitMQ's channel counters
(rabbit_channel's fine stats and rabbit_global_counters), and how the node turns two samples
of a counter into the management API's `*_details.rate`.

A channel's counters are plain ints only its own actor increments; the connection worker's
sampling thread reads them every collect_statistics_interval (actors/connection/stats.py), sums
the channels of the process (a closed channel's last counts are kept in the process's
`retired` totals, so the sums never go back) and sends them with its ConnectionStats.
"""

from __future__ import annotations

from actors.core.queue_stats import increase

# rabbit_global_counters' protocol counters (names without messages_ / _total), and Leveret's
COUNTERS = (
    "publish",            # basic.publish received (messages_received_total)
    "publish_confirm",    # ... on a channel in confirm mode (messages_received_confirm_total)
    "routed",             # routed to at least one queue (messages_routed_total)
    "drop_unroutable",    # no queue, not mandatory: dropped (messages_unroutable_dropped_total)
    "return_unroutable",  # no queue, mandatory: basic.return (..._unroutable_returned_total)
    "confirm",            # basic.ack to the publisher (messages_confirmed_total)
    "nack",               # basic.nack to the publisher
    "deliver",            # deliveries to consumers that ack (..._delivered_consume_manual_ack)
    "deliver_no_ack",     # deliveries to no-ack consumers (..._delivered_consume_auto_ack)
    "get",                # basic.get-ok, ack mode (..._delivered_get_manual_ack_total)
    "get_no_ack",         # basic.get-ok, no-ack (..._delivered_get_auto_ack_total)
    "get_empty",          # basic.get-empty (messages_get_empty_total)
    "redeliver",          # redelivered=true deliveries and gets (messages_redelivered_total)
    "ack",                # messages acknowledged by the client (messages_acknowledged_total)
    "confirm_lite",       # confirms this channel sent for x-confirm-on=ack-lite queues' messages
)
# confirm latency (seconds from basic.publish received to its basic.ack sent): histogram
# bucket upper bounds, Prometheus' default buckets from 0.5 ms
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)


# the counters the management API also shows per vhost (the overview's and /api/vhosts'
# message_stats: RabbitMQ sums its channels' fine stats per vhost for them; `publish` is the
# messages published into the vhost's exchanges, once however many queues they went to)
VHOST_COUNTERS = ("publish", "confirm", "return_unroutable", "drop_unroutable")


class ChannelCounters:
    """One channel's cumulative counts, its confirm latency histogram, and what it published
    into each exchange (rabbit_channel's exchange_stats and queue_exchange_stats)."""

    __slots__ = COUNTERS + ("latency_counts", "latency_sum", "vhost", "exchanges")

    def __init__(self, vhost: str = ""):
        for name in COUNTERS:
            setattr(self, name, 0)
        # one count per bucket of LATENCY_BUCKETS, then the +Inf bucket (not cumulative)
        self.latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0  # seconds
        self.vhost = vhost  # the channel's virtual host (the per-vhost totals)
        # exchange name -> [publish_in, publish_out]: messages published into it, and the
        # copies it routed to queues (one per queue, as RabbitMQ counts publish_out)
        self.exchanges: dict[str, list] = {}

    def published(self, exchange: str, queues: int) -> None:
        """A publish into `exchange` went to `queues` queues (0: unroutable)."""
        counts = self.exchanges.get(exchange)
        if counts is None:
            counts = self.exchanges[exchange] = [0, 0]
        counts[0] += 1
        counts[1] += queues

    def confirmed_after(self, seconds: float) -> None:
        i = 0
        for bound in LATENCY_BUCKETS:
            if seconds <= bound:
                break
            i += 1
        self.latency_counts[i] += 1
        self.latency_sum += seconds


def add_into(total: dict, c: ChannelCounters) -> None:
    """Add a channel's counts into a totals dict (COUNTERS keys, `latency_counts`,
    `latency_sum`)."""
    for name in COUNTERS:
        total[name] = total.get(name, 0) + getattr(c, name)
    counts = total.setdefault("latency_counts", [0] * (len(LATENCY_BUCKETS) + 1))
    for i, n in enumerate(c.latency_counts):
        counts[i] += n
    total["latency_sum"] = total.get("latency_sum", 0.0) + c.latency_sum
    # per vhost: VHOST_COUNTERS and each exchange's publish_in / publish_out
    v = total.setdefault("vhosts", {}).setdefault(c.vhost, {})
    for name in VHOST_COUNTERS:
        v[name] = v.get(name, 0) + getattr(c, name)
    xs = v.setdefault("exchanges", {})
    for x, (n_in, n_out) in list(c.exchanges.items()):
        e = xs.setdefault(x, {"publish_in": 0, "publish_out": 0})
        e["publish_in"] += n_in
        e["publish_out"] += n_out


def merge(a: dict, b: dict) -> dict:
    """Two totals dicts added (ints and float added, lists added element by element, dicts
    merged the same way)."""
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict):
            out[k] = merge(out.get(k) or {}, v)
        elif isinstance(v, list):
            old = out.get(k) or [0] * len(v)
            out[k] = [x + y for x, y in zip(old, v)]
        elif isinstance(v, (int, float)):
            out[k] = out.get(k, 0) + v
    return out


def flatten(totals: dict, prefix: tuple = ()) -> dict:
    """A totals dict's numbers by path: {("vhosts", "/", "confirm"): 3, ...} (lists left
    out: the latency histogram is Prometheus')."""
    out = {}
    for k, v in totals.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + (k,)))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + (k,)] = v
    return out


def cluster_counts(workers: dict, dead: dict, now_ms: int, interval_ms: int) -> dict:
    """Every connection worker's totals added up, with their rates: path -> (count, rate per
    second). `workers`: worker -> (at_ms, totals, previous samples.Sample or None); `dead`:
    the last totals of workers that are gone (counted, no rate). A worker's rate is between
    its last two samples, 0 once its last one is older than two intervals (it sends nothing
    while nothing changes), as the channels' rates."""
    counts: dict = flatten(dead)
    rates: dict = {}
    for at, totals, previous in workers.values():
        now = flatten(totals)
        for path, n in now.items():
            counts[path] = counts.get(path, 0) + n
        if previous is None or now_ms - at > 2 * interval_ms or at <= previous.at_ms:
            continue
        before = flatten(previous.stats)
        dt = at - previous.at_ms
        for path, n in now.items():
            rates[path] = rates.get(path, 0.0) + increase(before.get(path, 0), n) * 1000.0 / dt
    return {path: (n, round(rates.get(path, 0.0), 1)) for path, n in counts.items()}


def stats_with_rates(counts: dict, prefix: tuple, keys) -> dict:
    """`message_stats`-style {key: count, key_details: {rate}} for `keys` under `prefix` of
    cluster_counts' answer (a key never counted: 0, rate 0.0)."""
    out = {}
    for k in keys:
        n, rate = counts.get(prefix + (k,), (0, 0.0))
        out[k] = n
        out[f"{k}_details"] = {"rate": rate}
    return out


def message_stats(c: ChannelCounters) -> dict:
    """A channel's `message_stats` as rabbit_mgmt_format shows it (the counts only: the node
    adds the rates): every counter, 0 included, as RabbitMQ 3.10 lists them."""
    out = {}
    for key, value in (("publish", c.publish), ("confirm", c.confirm),
                       ("return_unroutable", c.return_unroutable),
                       ("drop_unroutable", c.drop_unroutable), ("deliver", c.deliver),
                       ("deliver_no_ack", c.deliver_no_ack), ("get", c.get),
                       ("get_no_ack", c.get_no_ack), ("get_empty", c.get_empty),
                       ("redeliver", c.redeliver), ("ack", c.ack)):
        out[key] = value
    out["deliver_get"] = c.deliver + c.deliver_no_ack + c.get + c.get_no_ack
    return out


def with_rates(now: dict, before: dict | None, dt_ms: int, keys) -> dict:
    """`now` with a `<key>_details: {"rate": per second}` beside each key of `keys` it has:
    the change since `before` (the previous sample, `dt_ms` earlier; None: no previous, rate
    0), as rabbit_mgmt_stats reports rates between two samples."""
    out = dict(now)
    for k in keys:
        if k not in now:
            continue
        rate = 0.0
        if before is not None and dt_ms > 0:
            rate = increase(before.get(k, 0), now[k]) * 1000.0 / dt_ms
        out[k + "_details"] = {"rate": round(rate, 1)}
    return out
