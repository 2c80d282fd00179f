"""Prometheus metrics with rabbitmq_prometheus' names (pure: built from what the management
listener read from the node; rendered with prometheus-client).

/metrics aggregates over every queue as rabbitmq_prometheus does by default; /metrics/per-object
labels queue metrics with `vhost` and `queue` (and connection metrics with `vhost` and
`connection`); /metrics/detailed takes `family=queue_coarse_metrics` /`queue_metrics`
(per-object queue depth and counters) and `vhost=` filters.

Channel, connection and churn counters are the node's own (op `mgmt_counters`: what its
connection workers' channels counted, actors/core/channel_stats.py, sent with their
ConnectionStats every collect_statistics_interval), so a dashboard that sums over the nodes
counts each once. Queue metrics are the node's own queues' too: those whose master runs on it
(a mirrored queue is reported by its master's node only, as rabbitmq_prometheus reads each
node's local queue metrics), so a sum over the nodes counts every queue once.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                   HistogramMetricFamily)

from actors.core.channel_stats import LATENCY_BUCKETS
from actors.core.queue_stats import CONFIRM_MODES, DEAD_LETTER_STRATEGIES
from actors.core.quorum import QUORUM, QUORUM_TYPE

from actors.management.api import VERSION

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (metric, help, row field) for each queue: depth and consumers (gauges)
QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers",
     "messages_ready"),
    ("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged",
     "messages_unacknowledged"),
    ("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth",
     "messages"),
    ("rabbitmq_queue_consumers", "Consumers on a queue", "consumers"),
)
# (metric without _total, help, message_stats key) for each queue: counters
QUEUE_COUNTERS = (
    ("rabbitmq_queue_messages_published", "Total number of messages published to queues",
     "publish"),
    ("rabbitmq_queue_messages_delivered", "Total number of messages delivered to consumers "
     "that acknowledge them", "deliver"),
    ("rabbitmq_queue_messages_delivered_no_ack", "Total number of messages delivered to "
     "consumers in automatic acknowledgement mode", "deliver_no_ack"),
    ("rabbitmq_queue_messages_fetched", "Total number of messages fetched with basic.get "
     "in manual acknowledgement mode", "get"),
    ("rabbitmq_queue_messages_fetched_no_ack", "Total number of messages fetched with "
     "basic.get in automatic acknowledgement mode", "get_no_ack"),
    ("rabbitmq_queue_messages_acked", "Total number of messages acknowledged by consumers",
     "ack"),
    ("rabbitmq_queue_messages_redelivered", "Total number of messages redelivered to "
     "consumers", "redeliver"),
)
# (metric, help, row field) for each queue: where its messages are (gauges; rabbitmq_prometheus'
# queue_metrics)
QUEUE_STORAGE = (
    ("rabbitmq_queue_messages_ram", "Ready and unacknowledged messages stored in memory",
     "messages_ram"),
    ("rabbitmq_queue_messages_ram_bytes", "Size of ready and unacknowledged messages stored in "
     "memory", "message_bytes_ram"),
    ("rabbitmq_queue_messages_ready_ram", "Ready messages stored in memory",
     "messages_ready_ram"),
    ("rabbitmq_queue_messages_unacked_ram", "Unacknowledged messages stored in memory",
     "messages_unacknowledged_ram"),
    ("rabbitmq_queue_messages_persistent", "Persistent messages", "messages_persistent"),
    ("rabbitmq_queue_messages_persistent_bytes", "Size in bytes of persistent messages",
     "message_bytes_persistent"),
    ("rabbitmq_queue_messages_bytes", "Size in bytes of ready and unacknowledged messages",
     "message_bytes"),
    ("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages",
     "message_bytes_ready"),
    ("rabbitmq_queue_messages_unacked_bytes", "Size in bytes of all unacknowledged messages",
     "message_bytes_unacknowledged"),
    ("rabbitmq_queue_messages_paged_out", "Messages paged out to disk", "messages_paged_out"),
    ("rabbitmq_queue_messages_paged_out_bytes", "Size in bytes of messages paged out to disk",
     "message_bytes_paged_out"),
)
# (metric without _total, help, row field) for each queue: its storage counters (the queue's
# sample: rabbit_backing_queue's disk_reads / disk_writes)
QUEUE_DISK = (
    ("rabbitmq_queue_disk_reads", "Total number of times queue read messages from disk",
     "disk_reads"),
    ("rabbitmq_queue_disk_writes", "Total number of times queue wrote messages to disk",
     "disk_writes"),
)
# the timestamp property of a queue's head message (per object only: a sum of timestamps
# means nothing; a queue whose head has none has no sample, as RabbitMQ skips '')
HEAD_TIMESTAMP = ("rabbitmq_queue_head_message_timestamp", "Timestamp of the first message "
                  "in the queue, if any", "head_message_timestamp")
FAMILIES = {"queue_coarse_metrics": ("rabbitmq_queue_messages_ready",
                                     "rabbitmq_queue_messages_unacked",
                                     "rabbitmq_queue_messages"),
            "queue_consumer_count": ("rabbitmq_queue_consumers",),
            "queue_metrics": tuple(n for n, _, _ in QUEUE_GAUGES + QUEUE_COUNTERS +
                                   QUEUE_STORAGE + QUEUE_DISK) + (HEAD_TIMESTAMP[0],)}


# (metric without _total, help, counter of the node's totals): rabbitmq_prometheus' channel
# metrics (rabbit_core_metrics' channel_queue_exchange / channel counters, summed)
CHANNEL_COUNTERS = (
    ("rabbitmq_channel_messages_published", "Total number of messages published into an "
     "exchange on a channel", "publish"),
    ("rabbitmq_channel_messages_confirmed", "Total number of messages published into an "
     "exchange and confirmed on the channel", "confirm"),
    ("rabbitmq_channel_messages_unroutable_returned", "Total number of messages published as "
     "mandatory into an exchange and returned to the publisher as unroutable",
     "return_unroutable"),
    ("rabbitmq_channel_messages_unroutable_dropped", "Total number of messages published as "
     "non-mandatory into an exchange and dropped as unroutable", "drop_unroutable"),
    ("rabbitmq_channel_get_ack", "Total number of messages fetched with basic.get in manual "
     "acknowledgement mode", "get"),
    ("rabbitmq_channel_get", "Total number of messages fetched with basic.get in automatic "
     "acknowledgement mode", "get_no_ack"),
    ("rabbitmq_channel_messages_delivered_ack", "Total number of messages delivered to "
     "consumers in manual acknowledgement mode", "deliver"),
    ("rabbitmq_channel_messages_delivered", "Total number of messages delivered to consumers "
     "in automatic acknowledgement mode", "deliver_no_ack"),
    ("rabbitmq_channel_messages_redelivered", "Total number of messages redelivered to "
     "consumers", "redeliver"),
    ("rabbitmq_channel_messages_acked", "Total number of messages acknowledged by consumers",
     "ack"),
    ("rabbitmq_channel_get_empty", "Total number of times basic.get operations fetched no "
     "message", "get_empty"),
    ("rabbitmq_connections_opened", "Total number of connections opened",
     "connections_opened"),
    ("rabbitmq_connections_closed", "Total number of connections closed or terminated",
     "connections_closed"),
    ("rabbitmq_channels_opened", "Total number of channels opened", "channels_opened"),
    ("rabbitmq_channels_closed", "Total number of channels closed", "channels_closed"),
    ("rabbitmq_queues_declared", "Total number of queues declared", "queues_declared"),
    ("rabbitmq_queues_created", "Total number of queues created", "queues_created"),
    ("rabbitmq_queues_deleted", "Total number of queues deleted", "queues_deleted"),
)
# rabbit_global_counters (label protocol="amqp091"): (metric without _total, help, value)
GLOBAL_COUNTERS = (
    ("rabbitmq_global_messages_received", "Total number of messages received from publishers",
     lambda t: t.get("publish", 0)),
    ("rabbitmq_global_messages_received_confirm", "Total number of messages received from "
     "publishers expecting confirmations", lambda t: t.get("publish_confirm", 0)),
    ("rabbitmq_global_messages_routed", "Total number of messages routed to queues or "
     "streams", lambda t: t.get("routed", 0)),
    ("rabbitmq_global_messages_unroutable_dropped", "Total number of messages published as "
     "non-mandatory into an exchange and dropped as unroutable",
     lambda t: t.get("drop_unroutable", 0)),
    ("rabbitmq_global_messages_unroutable_returned", "Total number of messages published as "
     "mandatory into an exchange and returned to the publisher as unroutable",
     lambda t: t.get("return_unroutable", 0)),
    ("rabbitmq_global_messages_confirmed", "Total number of messages confirmed to publishers",
     lambda t: t.get("confirm", 0)),
    ("rabbitmq_global_messages_delivered", "Total number of messages delivered to consumers",
     lambda t: sum(t.get(k, 0) for k in ("deliver", "deliver_no_ack", "get", "get_no_ack"))),
    ("rabbitmq_global_messages_delivered_consume_manual_ack", "Total number of messages "
     "delivered to consumers using basic.consume with manual acknowledgment",
     lambda t: t.get("deliver", 0)),
    ("rabbitmq_global_messages_delivered_consume_auto_ack", "Total number of messages "
     "delivered to consumers using basic.consume with automatic acknowledgment",
     lambda t: t.get("deliver_no_ack", 0)),
    ("rabbitmq_global_messages_delivered_get_manual_ack", "Total number of messages delivered "
     "to consumers using basic.get with manual acknowledgment", lambda t: t.get("get", 0)),
    ("rabbitmq_global_messages_delivered_get_auto_ack", "Total number of messages delivered "
     "to consumers using basic.get with automatic acknowledgment",
     lambda t: t.get("get_no_ack", 0)),
    ("rabbitmq_global_messages_get_empty", "Total number of times basic.get operations "
     "fetched no message", lambda t: t.get("get_empty", 0)),
    ("rabbitmq_global_messages_redelivered", "Total number of messages redelivered to "
     "consumers", lambda t: t.get("redeliver", 0)),
    ("rabbitmq_global_messages_acknowledged", "Total number of messages acknowledged by "
     "consumers", lambda t: t.get("ack", 0)),
)
# rabbit_global_counters' dead-letter counters (labels queue_type, dead_letter_strategy):
# (reason, help); counted by each queue where it dead-letters or drops (queue_stats)
DEAD_LETTER_COUNTERS = (
    ("expired", "Total number of messages dead-lettered due to message TTL exceeded"),
    ("rejected", "Total number of messages dead-lettered due to basic.reject or basic.nack"),
    ("maxlen", "Total number of messages dead-lettered due to overflow drop-head or "
     "reject-publish-dlx"),
    ("delivery_limit", "Total number of messages dead-lettered due to delivery-limit "
     "exceeded"),
)
QUEUE_TYPE_MODULES = {"classic": "rabbit_classic_queue", QUORUM: QUORUM_TYPE}
# (metric without _total, help, connection row field): rabbitmq_prometheus' connection metrics
CONNECTION_COUNTERS = (
    ("rabbitmq_connection_incoming_bytes", "Total number of bytes received on a connection",
     "recv_oct"),
    ("rabbitmq_connection_outgoing_bytes", "Total number of bytes sent on a connection",
     "send_oct"),
    ("rabbitmq_connection_incoming_packets", "Total number of packets received on a "
     "connection", "recv_cnt"),
    ("rabbitmq_connection_outgoing_packets", "Total number of packets sent on a connection",
     "send_cnt"),
)


def node_metrics(counters: dict, processes: dict, per_object: bool) -> list:
    """The node's channel, connection and churn metrics (`counters`: op mgmt_counters),
    process file descriptors and sockets (`processes`: open_fds, max_fds, open_tcp_sockets,
    max_tcp_sockets), and Leveret's own."""
    now = counters.get("now", {})
    out = [_gauge("rabbitmq_connections", "Connections currently open", now.get(
                  "connections", 0)),
           _gauge("rabbitmq_channels", "Channels currently open", now.get("channels", 0)),
           _gauge("rabbitmq_channel_consumers", "Consumers on a channel",
                  now.get("consumers", 0)),
           _gauge("rabbitmq_channel_messages_unconfirmed", "Published but not yet confirmed "
                  "messages", now.get("messages_unconfirmed", 0)),
           _channel_unacked(now.get("channel_rows", []), per_object),
           *_dead_lettered(counters.get("dead_lettered") or {})]
    for name, help_, key in CHANNEL_COUNTERS:
        c = CounterMetricFamily(name, help_)
        c.add_metric([], counters.get(key, 0))
        out.append(c)
    for name, help_, value in GLOBAL_COUNTERS:
        c = CounterMetricFamily(name, help_, labels=["protocol"])
        c.add_metric(["amqp091"], value(counters))
        out.append(c)
    for name, help_, key in (("rabbitmq_global_publishers", "Current number of publishers",
                              "publishers"),
                             ("rabbitmq_global_consumers", "Current number of consumers",
                              "consumers")):
        g = GaugeMetricFamily(name, help_, labels=["protocol"])
        g.add_metric(["amqp091"], now.get(key, 0))
        out.append(g)
    rows = now.get("connection_rows", [])
    for name, help_, key in CONNECTION_COUNTERS:
        c = CounterMetricFamily(name, help_, labels=["vhost", "connection"] if per_object
                                else [])
        if per_object:
            for r in rows:
                c.add_metric([r.get("vhost", ""), r["name"]], r.get(key, 0))
        else:
            c.add_metric([], sum(r.get(key, 0) for r in rows))
        out.append(c)
    for key, help_ in (("open_fds", "Open file descriptors"),
                       ("max_fds", "Open file descriptors limit"),
                       ("open_tcp_sockets", "Open TCP sockets"),
                       ("max_tcp_sockets", "Open TCP sockets limit")):
        if processes.get(key) is not None:
            out.append(_gauge(f"rabbitmq_process_{key}", help_, processes[key]))
    # Leveret's own
    counts = counters.get("latency_counts") or [0] * (len(LATENCY_BUCKETS) + 1)
    buckets, running = [], 0
    for bound, n in zip([*map(str, LATENCY_BUCKETS), "+Inf"], counts):
        running += n
        buckets.append((bound, running))
    out.append(HistogramMetricFamily(
        "leveret_confirm_latency_seconds", "Seconds from a basic.publish received on a "
        "channel in confirm mode to its basic.ack sent", buckets=buckets,
        sum_value=counters.get("latency_sum", 0.0)))
    c = CounterMetricFamily("leveret_confirms", "Publisher confirms sent, by the x-confirm-on "
                            "mode of the queue (ack-lite: sent by the consuming channel)",
                            labels=["mode"])
    for mode in CONFIRM_MODES:
        c.add_metric([mode], counters.get(f"confirmed_{mode}", 0))
    c.add_metric(["ack-lite"], counters.get("confirm_lite", 0))
    out.append(c)
    c = CounterMetricFamily("leveret_events_written", "Lifecycle events written to the event "
                            "log by the node's processes (docs/events.md)")
    c.add_metric([], counters.get("events_written", 0))
    out.append(c)
    c = CounterMetricFamily("leveret_events_dropped", "Lifecycle events dropped because the "
                            "event log's buffer was full (each leaves a hole in its process's "
                            "sequence numbers that the analysis reports as a gap)")
    c.add_metric([], counters.get("events_dropped", 0))
    out.append(c)
    c = CounterMetricFamily("leveret_events_syncs", "Writes (or fsyncs) of the event log a "
                            "publisher confirm waited for (events_sync; docs/events.md)")
    c.add_metric([], counters.get("events_syncs", 0))
    out.append(c)
    g = GaugeMetricFamily("leveret_events_sync", "The events_sync setting: 1 for the mode in "
                          "force (off, write, fsync)", labels=["mode"])
    for mode in ("off", "write", "fsync"):
        g.add_metric([mode], 1 if counters.get("events_sync", "off") == mode else 0)
    out.append(g)
    return out


def _channel_unacked(rows: list, per_object: bool) -> GaugeMetricFamily:
    """rabbitmq_channel_messages_unacked: each channel's deliveries not yet acked (labelled
    by vhost and channel in /metrics/per-object, summed in /metrics)."""
    g = GaugeMetricFamily("rabbitmq_channel_messages_unacked", "Delivered but not yet "
                          "acknowledged messages", labels=["vhost", "channel"] if per_object
                          else [])
    if per_object:
        for r in rows:
            g.add_metric([r["vhost"], r["name"]], r["messages_unacknowledged"])
    else:
        g.add_metric([], sum(r["messages_unacknowledged"] for r in rows))
    return g


def _dead_lettered(by_type: dict) -> list:
    """rabbitmq_global_messages_dead_lettered_<reason>_total for each queue type and strategy
    (`by_type`: queue type -> queue_stats.DEAD_LETTERED name -> count), 0 where none was."""
    out = []
    for reason, help_ in DEAD_LETTER_COUNTERS:
        c = CounterMetricFamily(f"rabbitmq_global_messages_dead_lettered_{reason}", help_,
                                labels=["queue_type", "dead_letter_strategy"])
        for qtype, module in QUEUE_TYPE_MODULES.items():
            for strategy in DEAD_LETTER_STRATEGIES:
                c.add_metric([module, strategy], (by_type.get(qtype) or {}).get(
                    f"dead_lettered_{reason}_{strategy}", 0))
        out.append(c)
    return out


def metrics(node: str, cluster: str, queues: list, stats: dict, status: dict,
            per_object: bool, only: set | None = None, vhosts: set | None = None,
            counters: dict | None = None, processes: dict | None = None) -> list:
    """The metric families. queues: the queues' rows from their samples (the metadata
    actor's `_sampled_queue_rows`; only those whose `node`, the master's, is `node` are
    reported); stats: (vhost, name) -> message_stats;
    status: the node's resources (`op_status`); `only`: metric names to keep (detailed);
    counters / processes: node_metrics'."""
    out = []

    def keep(name):
        return only is None or name in only

    # the queues whose master is this node (mirrors are reported by the master's node only)
    rows = [r for r in queues if r.get("node", node) == node and
            (vhosts is None or r["vhost"] in vhosts)]
    if only is None:
        info = GaugeMetricFamily("rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info",
                                 labels=["rabbitmq_version", "prometheus_plugin_version",
                                         "erlang_version", "product"])
        info.add_metric([VERSION, VERSION, "none", "Leveret"], 1)
        ident = GaugeMetricFamily("rabbitmq_identity_info", "RabbitMQ node & cluster identity "
                                  "info", labels=["rabbitmq_node", "rabbitmq_cluster"])
        ident.add_metric([node, cluster], 1)
        out += [info, ident]
        out.append(_gauge("rabbitmq_queues", "Queues available", len(rows)))
        out.append(_gauge("rabbitmq_consumers", "Consumers currently connected",
                          sum(r.get("consumers", 0) for r in rows)))
        alarms = set(status.get("alarms") or ())
        out.append(_gauge("rabbitmq_alarms_memory_used_watermark", "is 1 if VM memory "
                          "watermark alarm is in effect", int("memory" in alarms)))
        out.append(_gauge("rabbitmq_alarms_free_disk_space_watermark", "is 1 if free disk "
                          "space watermark alarm is in effect", int("disk" in alarms)))
        for name, help_, key in (
                ("rabbitmq_process_resident_memory_bytes", "Memory used in bytes",
                 "memory_used"),
                ("rabbitmq_resident_memory_limit_bytes", "Memory high watermark in bytes",
                 "memory_limit"),
                ("rabbitmq_disk_space_available_bytes", "Disk space available in bytes",
                 "disk_free"),
                ("rabbitmq_disk_space_available_limit_bytes", "Free disk space low watermark "
                 "in bytes", "disk_free_limit")):
            if status.get(key) is not None:
                out.append(_gauge(name, help_, status[key]))
        out += node_metrics(counters or {}, processes or {}, per_object)
    labels = ["vhost", "queue"] if per_object else []
    for name, help_, field in QUEUE_GAUGES + QUEUE_STORAGE:
        if keep(name):
            g = GaugeMetricFamily(name, help_, labels=labels)
            _fill(g, rows, per_object, lambda r: r.get(field, 0))
            out.append(g)
    for name, help_, key in QUEUE_COUNTERS:
        if keep(name):
            c = CounterMetricFamily(name, help_, labels=labels)
            _fill(c, rows, per_object,
                  lambda r: stats.get((r["vhost"], r["name"]), {}).get(key, 0))
            out.append(c)
    for name, help_, field in QUEUE_DISK:
        if keep(name):
            c = CounterMetricFamily(name, help_, labels=labels)
            _fill(c, rows, per_object, lambda r: r.get(field) or 0)
            out.append(c)
    name, help_, field = HEAD_TIMESTAMP
    if per_object and keep(name):
        g = GaugeMetricFamily(name, help_, labels=labels)
        _fill(g, [r for r in rows if r.get(field) is not None], True, lambda r: r[field])
        out.append(g)
    return out


def _gauge(name, help_, value):
    g = GaugeMetricFamily(name, help_)
    g.add_metric([], value)
    return g


def _fill(family, rows, per_object, value) -> None:
    if per_object:
        for r in rows:
            family.add_metric([r["vhost"], r["name"]], value(r))
    else:
        family.add_metric([], sum(value(r) for r in rows))


class _Families:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return iter(self.families)


def render(families: list) -> bytes:
    """The text exposition format of `families`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)
