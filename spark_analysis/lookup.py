"""The lifecycle job's lookup layout: the events laid out so that one message is found, and its
path read, in well under a second on a big analysis (read by actors/management/traces.py with
pyarrow, no Spark).

Writes, under the job's output folder:
    lookup/steps/  every event that names a message, range-partitioned and sorted by
                   (msg_id, t_ns, rank), in small row groups: a filter on msg_id reads the one
                   or two groups whose min/max statistics hold it
    lookup/keys/   one row per (key, value, msg_id): where a message is found by something a
                   client or an operator knows, with the time it first had that value
                   (t_first_ns) and its vhost; sorted by (key, value, t_first_ns)
    lookup/times/  one row per published message (the lifecycles' msg_id, message_id, vhost,
                   final_state, t_first_ns = t_published_ns), sorted by t_first_ns: the
                   messages of a time range are a few consecutive row groups

The keys (KEYS): the publisher's message_id, correlation_id and traceparent (publish_received;
a dead-lettered copy is found through its parent, as the traces page shows it), the routing
key (publish_received, dead_letter_published), and every queue a copy was enqueued in.
"""

from __future__ import annotations

# key -> (event column, kinds of the events that carry it)
KEYS = {
    "message_id": ("message_id", ("publish_received",)),
    "correlation_id": ("correlation_id", ("publish_received",)),
    "traceparent": ("traceparent", ("publish_received",)),
    "routing_key": ("routing_key", ("publish_received", "dead_letter_published")),
    "queue": ("queue", ("enqueued",)),
}
# The columns of a step (what a message's path shows); the others stay in events/.
STEP_COLUMNS = ("msg_id", "t_ns", "rank", "kind", "node", "process", "pid", "actor", "vhost",
                "queue", "connection", "channel", "delivery_tag", "consumer_tag", "exchange",
                "routing_key", "message_id", "correlation_id", "traceparent", "redelivered",
                "requeue", "reason", "where", "no_ack", "count", "queues", "new_msg_id",
                "parent_msg_id", "source_queue", "seq_no", "persistent", "size")
# Row-group size (parquet.block.size): small, so a point lookup reads little; large enough
# that a 10M-event analysis has a footer of a few thousand groups, not hundreds of thousands.
ROW_GROUP_BYTES = 1 << 20


def _under(out: str, *parts: str) -> str:
    """A path under the job's output (a local folder or a Hadoop file system URI)."""
    return "/".join([out.rstrip("/"), *parts])


def steps(events):
    """The steps DataFrame: events that name a message, in lookup order."""
    from pyspark.sql import functions as F
    cols = [c for c in STEP_COLUMNS if c in events.columns]
    return (events.where(F.col("msg_id").isNotNull()).select(*cols)
            .repartitionByRange("msg_id").sortWithinPartitions("msg_id", "t_ns", "rank"))


def keys(events):
    """The keys DataFrame: (key, value, msg_id, t_first_ns, vhost), in lookup order. A key
    whose column the events do not have (a log older than the field) finds nothing."""
    from pyspark.sql import functions as F
    kinds = sorted({k for key, (column, ks) in KEYS.items() if column in events.columns
                    for k in ks})
    # one pass over the events: each row gives the (key, value) pairs it carries
    pairs = F.array(*[F.when(F.col("kind").isin(*ks) & F.col(column).isNotNull(), F.struct(
        F.lit(key).alias("key"), F.col(column).cast("string").alias("value")))
        for key, (column, ks) in KEYS.items() if column in events.columns])
    union = (events.where(F.col("kind").isin(*kinds) & F.col("msg_id").isNotNull())
             .select(F.explode(pairs).alias("p"), "msg_id", "t_ns", "vhost")
             .where(F.col("p").isNotNull())
             # (coalesce: `key` stays a non-nullable column, as a literal's)
             .select(F.coalesce(F.col("p.key"), F.lit("")).alias("key"),
                     F.col("p.value").alias("value"), "msg_id", "t_ns", "vhost"))
    return (union.groupBy("key", "value", "msg_id")
            .agg(F.min("t_ns").alias("t_first_ns"), F.first("vhost", ignorenulls=True)
                 .alias("vhost"))
            .repartitionByRange("key", "value")
            .sortWithinPartitions("key", "value", "t_first_ns", "msg_id"))


def times(lifecycles):
    """The times DataFrame: the published messages in the order they were published."""
    from pyspark.sql import functions as F
    return (lifecycles.where(F.col("t_published_ns").isNotNull())
            .select(F.col("t_published_ns").alias("t_first_ns"), "msg_id", "message_id",
                    "vhost", "final_state")
            .orderBy("t_first_ns", "msg_id"))


def write(events, out: str) -> None:
    """Write lookup/steps, lookup/keys and lookup/times under the job's output `out`, from
    `events` and the lifecycles already written there."""
    lifecycles = events.sparkSession.read.parquet(_under(out, "lifecycles"))
    for name, frame in (("steps", steps(events)), ("keys", keys(events)),
                        ("times", times(lifecycles))):
        write_sorted(frame, _under(out, "lookup", name))


def write_sorted(frame, path: str) -> None:
    """`frame` as Parquet at `path`, in row groups of about ROW_GROUP_BYTES."""
    frame.write.mode("overwrite").option("parquet.block.size", ROW_GROUP_BYTES).parquet(path)
