"""Prometheus metrics with rabbitmq_prometheus' names (pure: built from what the management
listener read from the node; rendered with prometheus-client).

/metrics aggregates over every queue as rabbitmq_prometheus does by default; /metrics/per-object
labels queue metrics with `vhost` and `queue`; /metrics/detailed takes `family=queue_coarse_metrics`
/`queue_metrics` (per-object queue depth and counters) and `vhost=` filters. Only what Leveret
measures is exported: channel-level global counters (received, routed, confirmed...) are not
emitted by the channels yet and are absent rather than approximated.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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
FAMILIES = {"queue_coarse_metrics": ("rabbitmq_queue_messages_ready",
                                     "rabbitmq_queue_messages_unacked",
                                     "rabbitmq_queue_messages"),
            "queue_consumer_count": ("rabbitmq_queue_consumers",),
            "queue_metrics": tuple(n for n, _, _ in QUEUE_GAUGES + QUEUE_COUNTERS)}


def metrics(node: str, cluster: str, queues: list, stats: dict, status: dict,
            per_object: bool, only: set | None = None, vhosts: set | None = None) -> list:
    """The metric families. queues: list_queues rows; stats: (vhost, name) -> message_stats;
    status: the node's resources (`op_status`); `only`: metric names to keep (detailed)."""
    out = []

    def keep(name):
        return only is None or name in only

    rows = [r for r in queues if vhosts is None or r["vhost"] in vhosts]
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
    labels = ["vhost", "queue"] if per_object else []
    for name, help_, field in QUEUE_GAUGES:
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
