"""Lifecycles -> latency percentiles per queue and per minute (docs/events.md, "Latencies").

Metrics, in milliseconds:
- publish_to_confirm: publish_received -> confirmed (per message; per queue: each queue the
  message went to counts it);
- publish_to_first_delivery: publish_received -> first delivered/fetched, per queue copy;
- delivery_to_ack: the delivery an ack settled (the last one before the first ack) -> that ack;
- time_in_queue: enqueued -> removed from the queue (acked, expired, dropped, dead-lettered,
  discarded by a reject/nack without requeue); copies still in a queue have none.
Minute buckets are the message's publish minute (its first enqueue when publish_received is not
in the log). `queue` is "(all)" for the whole log and "(no queue)" for messages routed nowhere.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

METRICS = ("publish_to_confirm", "publish_to_first_delivery", "delivery_to_ack",
           "time_in_queue")
QUANTILES = (0.5, 0.9, 0.99, 0.999)
ALL, NO_QUEUE = "(all)", "(no queue)"


def samples(lifecycles: DataFrame) -> DataFrame:
    """One row per (message copy, metric) with a value: metric, queue, minute, value_ms and
    first_copy (true once per message, so per-message figures count a message once)."""
    rows = lifecycles.select("msg_id", "t_published", "t_published_ns", "publish_to_confirm_ms",
                             F.posexplode_outer("copies").alias("pos", "c"))
    c = F.col("c")
    def metric(name, value):
        return F.struct(F.lit(name).alias("metric"), value.cast("double").alias("value_ms"))

    values = F.array(
        metric("publish_to_confirm", F.col("publish_to_confirm_ms")),
        metric("publish_to_first_delivery", (c.getField("t_first_delivered_ns") -
                                             F.col("t_published_ns")) / F.lit(1e6)),
        metric("delivery_to_ack", c.getField("delivery_to_ack_ms")),
        metric("time_in_queue", c.getField("time_in_queue_ms")))
    return (rows.select(
        F.coalesce(c.getField("queue"), F.lit(NO_QUEUE)).alias("queue"),
        F.date_trunc("minute", F.coalesce(F.col("t_published"), c.getField("t_enqueued")))
        .alias("minute"),
        F.coalesce(F.col("pos") == 0, F.lit(True)).alias("first_copy"),
        F.explode(values).alias("v"))
        .select(F.col("v.metric").alias("metric"), "queue", "minute",
                F.col("v.value_ms").alias("value_ms"), "first_copy")
        .where(F.col("value_ms").isNotNull()))


def _percentiles(df: DataFrame, keys: list[str]) -> DataFrame:
    q = F.percentile_approx("value_ms", list(QUANTILES), 10000)
    return (df.groupBy(*keys)
            .agg(F.count("value_ms").alias("count"), q.alias("q"),
                 F.avg("value_ms").alias("mean_ms"), F.max("value_ms").alias("max_ms"))
            .select(*keys, "count", *[F.col("q")[i].alias(f"p{str(x)[2:].ljust(2, '0')}_ms")
                                      for i, x in enumerate(QUANTILES)], "mean_ms", "max_ms"))


def _once_per_message(df: DataFrame) -> DataFrame:
    """publish_to_confirm is a message's figure: count it once in whole-log and minute tables."""
    return df.where((F.col("metric") != "publish_to_confirm") | F.col("first_copy"))


def by_queue(s: DataFrame) -> DataFrame:
    """metric, queue, count, p50_ms, p90_ms, p99_ms, p999_ms, mean_ms, max_ms; plus the
    queue "(all)" rows for the whole log."""
    whole = _percentiles(_once_per_message(s), ["metric"]).withColumn("queue", F.lit(ALL))
    return (_percentiles(s, ["metric", "queue"]).unionByName(whole)
            .orderBy("metric", "queue"))


def by_minute(s: DataFrame) -> DataFrame:
    """metric, minute, count, p50_ms ... max_ms, all queues together."""
    return _percentiles(_once_per_message(s), ["metric", "minute"]).orderBy("metric", "minute")
