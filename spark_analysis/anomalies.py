"""Lifecycles -> anomalies, one row per (kind, message[, queue]) (docs/events.md, "Anomalies").

- lost: confirmed to the publisher (or a dead-lettered copy, the broker's once its parent left
  its queue for it), yet neither acked, nor still queued (or unacked) at the end of
  the log, nor removed by a rule (expiry, overflow, dead-lettering, a reject/nack without
  requeue): a copy that vanished (its queue restarted, or its consumer's channel closed and no
  requeue followed), or routed but never enqueued anywhere;
- acked_twice: a queue's copy acked more than once;
- delivered_after_ack: a copy delivered (or fetched) again after its first ack;
  (neither for a stream's copy: every consumer reads and acks it, docs/streams.md)
- confirmed_before_synced: a persistent message's copy in a durable queue, enqueued before the
  confirm, confirmed before that copy was synced to disk (unless it had already left the queue:
  acked before the sync);
- redelivery_loop: a copy redelivered more than `redelivery_threshold` times;
- unknown: a message that would be lost or confirmed_before_synced, but a log gap (gaps.py)
  could hold the event that clears it (the ack, the enqueue, the sync): the detail says what it
  would be and names the gap. A verdict over a gap is never `lost`, and never silently fine.
- partial_enqueue: routed to N queues, enqueued in some of them but not all.
- missing_from_census: a copy queued (or unacked) in the job's view that a census of its
  running queue (at a clean stop, or on demand) does not hold, of a message not confirmed
  (a confirmed one is `lost`).
A copy that the census its queue took after a restart does not hold has vanished: `lost` when
confirmed, or when it had been synced (recovery should have brought it back).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

KINDS = ("lost", "acked_twice", "delivered_after_ack", "confirmed_before_synced",
         "redelivery_loop", "unknown", "partial_enqueue", "missing_from_census")

COLUMNS = ("kind", "msg_id", "message_id", "vhost", "queue", "final_state", "t", "detail")


def _row(df: DataFrame, kind: str, queue: Column, t: Column, detail: Column) -> DataFrame:
    return df.select(F.lit(kind).alias("kind"), "msg_id", "message_id", "vhost",
                     queue.alias("queue"), "final_state", t.alias("t"),
                     detail.alias("detail"))


def _unless_gap(df: DataFrame, kind: str, queue: Column, t: Column,
                detail: Column, gap: Column | None = None) -> DataFrame:
    """A `kind` row, or an `unknown` one when a log gap (`gap`, else the message's) could
    hide what would clear it."""
    gap = F.col("log_gap") if gap is None else gap
    return df.select(F.when(gap.isNull(), F.lit(kind)).otherwise(F.lit("unknown"))
                     .alias("kind"), "msg_id", "message_id", "vhost", queue.alias("queue"),
                     "final_state", t.alias("t"),
                     F.when(gap.isNull(), detail).otherwise(F.concat(
                         F.lit(f"would be {kind} ("), detail, F.lit("), but "), gap))
                     .alias("detail"))


def find(lifecycles: DataFrame, redelivery_threshold: int = 10) -> DataFrame:
    """The anomalies DataFrame (COLUMNS) of a lifecycles DataFrame (lifecycles.build)."""
    confirmed = F.col("t_confirmed_ns").isNotNull()
    # (a transient copy a restart's census does not hold went as RabbitMQ's rule says)
    vanished = F.filter("copies", lambda c: (c.getField("state") == "vanished") & ~(
        (F.coalesce(c.getField("census_missing"), F.lit("")) == "started") &
        ~F.coalesce(c.getField("persistent"), F.col("persistent"), F.lit(False))))
    never_enqueued = (F.col("final_state") == "not_enqueued") | (
        (F.col("final_state") == "unknown") & (F.size("copies") == 0) &
        (F.size(F.coalesce("routed_queues", F.array())) > 0))
    # synced to disk, and the census its queue took after a restart does not hold it:
    # recovery lost it, confirmed or not
    not_recovered = F.filter("copies", lambda c: (c.getField("state") == "vanished") &
                             (c.getField("census_missing") == "started") &
                             c.getField("t_synced_ns").isNotNull())
    # a dead-lettered copy is the broker's as soon as its parent has left its queue for it
    dead_lettered = F.col("parent_msg_id").isNotNull()
    owned = confirmed | dead_lettered
    whose = F.when(confirmed, F.lit("confirmed")).when(dead_lettered, F.lit("dead-lettered copy"))
    counted = F.when(owned, vanished).otherwise(not_recovered)
    missed = F.filter(counted, lambda c: c.getField("census_missing").isNotNull())
    lost = lifecycles.where((owned & ((F.size(vanished) > 0) | never_enqueued)) |
                            (F.size(not_recovered) > 0))
    lost = _unless_gap(lost, "lost",
                F.when(F.size(counted) > 0, F.array_join(F.transform(
                    counted, lambda c: c.getField("queue")), ","))
                .otherwise(F.array_join(F.col("routed_queues"), ",")),
                F.coalesce(F.col("t_confirmed"), F.col("t_published"), F.col("t_last_event")),
                F.when(F.size(missed) > 0, F.when(F.try_element_at(missed, F.lit(1)).getField(
                    "census_missing") == "promoted", F.concat(
                        whose.otherwise(F.lit("synced")),
                        F.lit(", then not held by the replica promoted to master"))).otherwise(
                    F.format_string(
                    "%s, then missing from its queue's census (%s)",
                    whose.otherwise(F.lit("synced")),
                    F.try_element_at(missed, F.lit(1)).getField("census_missing"))))
                .when(F.size(vanished) > 0, F.concat(whose, F.lit(", then vanished from its queue")))
                .otherwise(F.concat(whose, F.lit(", routed, never enqueued"))),
                # (a census that held its copies after the gaps leaves them nothing to hide)
                F.when(~F.col("census_settled"), F.col("log_gap")))

    copies = lifecycles.select("*", F.explode("copies").alias("c"))
    c = F.col("c")
    cq = c.getField("queue")
    queue_copy = ~F.coalesce(c.getField("stream"), F.lit(False))
    acked_twice = _row(copies.where(queue_copy & (c.getField("acks") > 1)), "acked_twice", cq,
                       c.getField("t_first_acked"),
                       F.format_string("acked %d times", c.getField("acks")))
    after_ack = _row(copies.where(queue_copy & F.coalesce(c.getField("delivered_after_ack"),
                                                          F.lit(False))),
                     "delivered_after_ack", cq, c.getField("t_last_delivered"),
                     F.format_string("delivered %d times, first ack at %s",
                                     c.getField("deliveries"),
                                     c.getField("t_first_acked").cast("string")))
    synced, conf = c.getField("t_synced_ns"), F.col("t_confirmed_ns")
    early = (confirmed &
             F.coalesce(c.getField("persistent"), F.col("persistent"), F.lit(False)) &
             F.coalesce(c.getField("durable"), F.lit(False)) &
             (c.getField("t_enqueued_ns") <= conf) &  # a copy made later (dead-lettered) is
             #                                          not what the confirm promised
             ~F.coalesce(c.getField("t_removed_ns") <= conf, F.lit(False)) &
             (synced.isNull() | (synced > conf)))
    # the first sync logged after the confirm is proof only on a complete log: a gap may hold
    # an earlier one (a master killed -9 synced it; its promoted mirror's write is logged)
    before_synced = _unless_gap(copies.where(early & synced.isNotNull()),
                                "confirmed_before_synced", cq, F.col("t_confirmed"),
                                F.format_string("confirmed %.3f ms before the sync",
                                                (synced - conf) / F.lit(1e6)))
    never_synced = _unless_gap(copies.where(early & synced.isNull()),
                               "confirmed_before_synced", cq, F.col("t_confirmed"),
                               F.lit("confirmed, never synced"))
    loop = _row(copies.where(c.getField("redeliveries") > redelivery_threshold),
                "redelivery_loop", cq, c.getField("t_last_delivered"),
                F.format_string("redelivered %d times (threshold %d)",
                                c.getField("redeliveries"), F.lit(redelivery_threshold)))
    # gone from a running queue (a census at its stop or on demand does not hold it): never
    # a rule's doing; `lost` already counts a confirmed (or synced, at a restart) message
    missing = _unless_gap(
        copies.where(c.getField("census_missing").isin("stopped", "requested") & ~confirmed),
        "missing_from_census", cq, c.getField("t_last_event"),
        F.format_string("queued in the job's view, absent from its queue's census (%s)",
                        c.getField("census_missing")),
        F.when(~F.col("census_settled"), F.col("log_gap")))
    return (lost.unionByName(acked_twice).unionByName(after_ack).unionByName(before_synced)
            .unionByName(never_synced).unionByName(loop).unionByName(missing)
            .unionByName(partial_enqueue(lifecycles)))


def partial_enqueue(lifecycles: DataFrame) -> DataFrame:
    """Routed to queues of which some hold a copy and others none (with no copy at all it is
    `not_enqueued`, `rolled_back` or `nacked_to_publisher`, and `lost` when confirmed)."""
    held = F.transform(F.filter("copies", lambda c: c.getField("state") != "not_enqueued"),
                       lambda c: c.getField("queue"))
    routed = F.coalesce(F.col("routed_queues"), F.array())
    missing = F.array_except(routed, held)
    rows = lifecycles.where((F.size(missing) > 0) & (F.size(F.array_intersect(routed, held)) > 0))
    return _row(rows, "partial_enqueue", F.array_join(F.array_sort(missing), ","),
                F.coalesce(F.col("t_routed"), F.col("t_published")),
                F.format_string("routed to %d queues, enqueued in %d", F.size(routed),
                                F.size(F.array_intersect(routed, held))))
