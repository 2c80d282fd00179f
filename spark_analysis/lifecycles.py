"""Events -> one row per message with its whole lifecycle (docs/events.md, "Lifecycles").

The events are shuffled once, by msg_id (`build`); then two groupings on the rows of each
partition:
1. group the events by (msg_id, queue of copy events): one row for the publish side of a
   message (publish_received, routed, unroutable, returned, confirmed, nacked_to_publisher) and
   one per queue that held a copy of it (enqueued ... acked / expired / dead_lettered / dropped);
   a copy's state is decided by its last step (`copy_state`), then a copy a later purge or queue
   deletion removed becomes `purged` / `deleted` (`removed_by`), then a copy that was queued or
   unacked and then disappeared -- its queue restarted, or its consumer's channel closed without
   a requeue -- becomes `vanished`; a publish a tx.rollback discarded gets that event under its
   msg_id first (`with_rolled_back`);
2. group those rows by msg_id into the lifecycle row: publish-side timestamps, the copies (one
   struct each, with their steps), counts, latencies, `final_state`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_analysis import schema as S

# final_state of a message: the state shared by the copies in the queues it was routed to (a
# dead-letter queue's copy keeps its own state in `copies`), "mixed" when they differ, or, with
# no copy at all: returned, unroutable, nacked_to_publisher, rolled_back (tx.rollback),
# not_enqueued (routed, never enqueued), published (nothing after publish_received). A
# dead-lettered copy is a message of its own (msg_id new, parent_msg_id its parent's), routed
# to the DLX's target queues. A copy's state: queued, unacked,
# acked (by the consumer, or a no_ack delivery), discarded (nack/reject without requeue and no
# dead-letter exchange), expired, dead_lettered, dropped, vanished (see copy_states).
COPY_STATES = ("queued", "unacked", "acked", "discarded", "expired", "dead_lettered", "dropped",
               "vanished", "not_enqueued")  # not_enqueued: stored/synced, never enqueued
# Copy states that a missing event could change (an ack, a requeue, an enqueue the log lost)
# and message states with no copy that a missing enqueue could explain: with a log gap over
# the message (gaps.py) its final_state is `unknown` instead, the gap in `log_gap`.
UNSETTLED_STATES = ("queued", "unacked", "vanished", "not_enqueued")
UNSETTLED_FINAL = ("published", "not_enqueued")
# A copy's fate decided by a per-queue event rather than its own (removed_by): purged (ready
# when its queue was purged), deleted (ready or unacked when its queue was deleted).
REMOVED_STATES = ("purged", "deleted")


def ns_to_ts(col: Column) -> Column:
    return F.timestamp_micros(F.floor(col / F.lit(1000)).cast("long"))


def _ms(later: Column, earlier: Column) -> Column:
    return (later - earlier) / F.lit(1e6)


def _is(*kinds: str) -> Column:
    return F.col("kind").isin(list(kinds))


def _t_min(*kinds: str) -> Column:
    return F.min(F.when(_is(*kinds), F.col("t_ns")))


def _t_max(*kinds: str) -> Column:
    return F.max(F.when(_is(*kinds), F.col("t_ns")))


def _n(cond: Column) -> Column:
    return F.count(F.when(cond, 1))


def _union_lists(col: Column) -> Column:
    """The distinct items of the lists, sorted: the same whatever order the rows arrive in (on a
    cluster that order is the shuffle's)."""
    return F.array_sort(F.array_distinct(F.flatten(F.collect_list(col))))


def _discard() -> Column:
    """nack/reject that does not requeue (AMQP's default requeue is true)."""
    return _is("nacked", "rejected") & ~F.coalesce(F.col("requeue"), F.lit(True))


def _auto_ack() -> Column:
    """A delivery with no_ack: the message leaves the queue as it is sent."""
    return _is(*S.DELIVERY_KINDS) & F.coalesce(F.col("no_ack"), F.lit(False))


def copy_state(last: Column) -> Column:
    """The state a copy is left in by its last step (steps hold STATE_KINDS only)."""
    kind = last.getField("kind")
    requeue = F.coalesce(last.getField("requeue"), F.lit(True))
    return (F.when(kind.isin("enqueued", "requeued"), "queued")
            .when(kind.isin(*S.DELIVERY_KINDS),
                  F.when(F.coalesce(last.getField("no_ack"), F.lit(False)), "acked")
                  .otherwise("unacked"))
            .when(kind == "acked", "acked")
            .when(kind.isin("nacked", "rejected"), F.when(requeue, "queued").otherwise("discarded"))
            .when(kind.isin("expired", "dead_lettered", "dropped"), kind)
            .otherwise("not_enqueued"))


def group_rows(events: DataFrame) -> DataFrame:
    """Shuffle 1: one row per (msg_id, queue) -- queue null for the publish side."""
    ev = events.where(F.col("msg_id").isNotNull()).withColumn(
        "copy_queue", F.when(_is(*S.COPY_STEP_KINDS), F.col("queue")))
    step = F.struct(
        F.col("t_ns"), F.col("rank"), F.col("kind"), ns_to_ts(F.col("t_ns")).alias("t"),
        F.col("node"), F.col("actor"),
        F.col("requeue"), F.col("redelivered"), F.col("connection"), F.col("channel"),
        F.col("delivery_tag"), F.col("consumer_tag"), F.col("no_ack"), F.col("where"),
        F.col("reason"), F.col("seq_id"), F.col("replica_log"))
    delivery = _is(*S.DELIVERY_KINDS)
    return ev.groupBy("msg_id", "copy_queue").agg(
        F.count(F.lit(1)).alias("n_events"),
        F.collect_set("node").alias("nodes"),
        F.first("message_id", ignorenulls=True).alias("message_id"),
        F.first("vhost", ignorenulls=True).alias("vhost"),
        # publish side
        F.first(F.when(_is("publish_received", *S.DEAD_LETTER_KINDS), F.col("exchange")),
                ignorenulls=True).alias("exchange"),
        F.first(F.when(_is("publish_received", *S.DEAD_LETTER_KINDS), F.col("routing_key")),
                ignorenulls=True).alias("routing_key"),
        F.max("persistent").alias("persistent"),
        F.max(F.when(_is("publish_received", "unroutable"), F.col("mandatory")))
        .alias("mandatory"),
        F.first(F.when(_is("publish_received"), F.col("connection")), ignorenulls=True)
        .alias("publisher_connection"),
        F.first(F.when(_is("publish_received", "confirmed", "nacked_to_publisher"),
                       F.col("seq_no")), ignorenulls=True).alias("seq_no"),
        F.first(F.when(_is("publish_received"), F.col("traceparent")), ignorenulls=True)
        .alias("traceparent"),
        _union_lists(F.when(_is("routed", "unroutable"), F.col("alternate_exchanges")))
        .alias("alternate_exchanges"),
        _t_min("publish_received").alias("t_published_ns"),
        _t_min("routed").alias("t_routed_ns"),
        # a dead-lettered copy is routed by its DLX: its target queues
        _union_lists(F.when(_is("routed", *S.DEAD_LETTER_KINDS), F.col("queues")))
        .alias("routed_queues"),
        F.first("parent_msg_id", ignorenulls=True).alias("parent_msg_id"),
        F.first(F.when(_is(*S.DEAD_LETTER_KINDS), F.col("reason")), ignorenulls=True)
        .alias("dead_letter_reason"),
        _t_min("tx_rolled_back").alias("t_rolled_back_ns"),
        F.first(F.when(_is("nacked_to_publisher"), F.col("reason")), ignorenulls=True)
        .alias("nack_reason"),
        _t_min("unroutable").alias("t_unroutable_ns"),
        _t_min("returned").alias("t_returned_ns"),
        _t_min("confirmed").alias("t_confirmed_ns"),
        _t_min("nacked_to_publisher").alias("t_nacked_to_publisher_ns"),
        # copy side
        F.max(F.when(_is(*S.COPY_KINDS), F.col("durable"))).alias("durable"),
        # a stream's copy (its events name an offset): read by every consumer, never removed
        # by an ack (docs/streams.md)
        F.max(F.when(_is(*S.COPY_KINDS), F.col("offset").isNotNull())).alias("stream"),
        _t_min("enqueued").alias("t_enqueued_ns"),
        # the promotions of its queue before the master that enqueued it (promotion_verdicts)
        F.min(F.when(_is("enqueued"), F.col("epoch"))).alias("copy_epoch"),
        _t_min("stored").alias("t_stored_ns"),
        _t_min("synced").alias("t_synced_ns"),
        _t_min(*S.DELIVERY_KINDS).alias("t_first_delivered_ns"),
        _t_max(*S.DELIVERY_KINDS).alias("t_last_delivered_ns"),
        _n(delivery).alias("deliveries"),
        _n(delivery & F.coalesce(F.col("redelivered"), F.lit(False))).alias("redeliveries"),
        _n(_is("acked")).alias("acks"),
        _t_min("acked").alias("t_first_acked_ns"),
        _n(_is("nacked")).alias("nacks"),
        _n(_is("rejected")).alias("rejects"),
        _n(_is("requeued")).alias("requeues"),
        _n(_is("expired")).alias("expirations"),
        _n(_is("dead_lettered")).alias("dead_letterings"),
        _n(_is("dropped")).alias("drops"),
        F.min(F.when(_is("acked", "expired", "dropped", "dead_lettered") | _discard() |
                     _auto_ack(), F.col("t_ns"))).alias("t_removed_ns"),
        _n(_auto_ack()).alias("auto_acks"),
        F.max(F.when(_is(*S.COPY_KINDS), F.col("t_ns"))).alias("t_last_event_ns"),
        _union_lists(F.when(_is("dead_lettered"), F.col("queues"))).alias("dead_letter_queues"),
        F.first(F.when(_is("dead_lettered"), F.col("new_msg_id")), ignorenulls=True)
        .alias("dead_lettered_to"),
        F.array_sort(F.collect_list(F.when(_is(*S.COPY_STEP_KINDS), step))).alias("steps"),
    )


def copy_states(rows: DataFrame, events: DataFrame) -> DataFrame:
    """Adds state, delivery_to_ack_ms, delivered_after_ack and vanished to the copy rows."""
    is_copy = F.col("copy_queue").isNotNull()
    state_steps = F.filter("steps", lambda s: s.getField("kind").isin(list(S.STATE_KINDS)))
    last = F.try_element_at(state_steps, F.lit(-1))
    acked_at = F.col("t_first_acked_ns")
    before_ack = F.filter("steps", lambda s: s.getField("kind").isin(list(S.DELIVERY_KINDS)) &
                          (s.getField("t_ns") <= acked_at))
    rows = (rows
            .withColumn("state", F.when(is_copy, copy_state(last)))
            .withColumn("t_last_state_ns", last.getField("t_ns"))
            .withColumn("last_connection", last.getField("connection"))
            .withColumn("last_channel", last.getField("channel"))
            .withColumn("delivery_to_ack_ms", _ms(acked_at, F.try_element_at(
                before_ack, F.lit(-1)).getField("t_ns")))
            .withColumn("delivered_after_ack", F.exists("steps", lambda s: s.getField(
                "kind").isin(list(S.DELIVERY_KINDS)) & (s.getField("t_ns") > acked_at))))

    # A queue restart after a copy's last step, while it was queued or unacked: gone with it
    # (a durable queue re-announces what it recovers with `enqueued`, reason "recovered").
    # A synced copy survives it (recovery need not announce what it recovered). The queue
    # events also say whether the queue is durable, when its copy events do not.
    restarts = (events.where(_is("queue_crashed", "queue_started") & F.col("queue").isNotNull())
                .groupBy("vhost", "queue").agg(F.max("t_ns").alias("t_restart_ns"),
                                               F.max("durable").alias("q_durable"))
                .withColumnRenamed("vhost", "r_vhost").withColumnRenamed("queue", "r_queue"))
    rows = (rows.join(restarts, (rows.copy_queue == restarts.r_queue) &
                      rows.vhost.eqNullSafe(restarts.r_vhost), "left")
            .withColumn("durable", F.when(is_copy, F.coalesce(
                F.col("durable"), F.col("q_durable"), F.col("t_stored_ns").isNotNull()))))
    rows = promotion_verdicts(rows, events)
    rows = removed_by(rows, events)
    rows = census_verdicts(rows, events)
    # A channel (or its connection) closed after a copy was delivered on it, and no requeue
    # since. Latest close per channel and per connection: one row per key, so the joins keep
    # one row per copy (channel numbers are reused: only a close after the delivery counts).
    # No broadcast hint: the closes grow with the clients, so Spark (adaptive execution, from
    # the sizes it measures) chooses how to join them.
    ch_closes = (events.where(_is("channel_closed") & F.col("connection").isNotNull())
                 .groupBy(F.col("connection").alias("cc_connection"),
                          F.col("channel").alias("cc_channel"))
                 .agg(F.max("t_ns").alias("t_ch_close_ns")))
    conn_closes = (events.where(_is("connection_closed") & F.col("connection").isNotNull())
                   .groupBy(F.col("connection").alias("k_connection"))
                   .agg(F.max("t_ns").alias("t_conn_close_ns")))
    rows = (rows
            .join(ch_closes, (rows.last_connection == ch_closes.cc_connection) &
                  (rows.last_channel == ch_closes.cc_channel), "left")
            .join(conn_closes, rows.last_connection == conn_closes.k_connection,
                  "left"))
    closed_under_it = F.greatest("t_ch_close_ns", "t_conn_close_ns") > F.col("t_last_event_ns")
    restarted = ((F.col("t_restart_ns") > F.col("t_last_event_ns")) &
                 ~F.coalesce(F.col("t_synced_ns") <= F.col("t_restart_ns"), F.lit(False)))
    # (a copy a census after its last step judged is not guessed about: the census said)
    gone = ~F.col("census_judged") & (
        (F.col("state").isin("queued", "unacked") & F.coalesce(restarted, F.lit(False))) | (
            (F.col("state") == "unacked") & F.coalesce(closed_under_it, F.lit(False))))
    return (rows.withColumn("state", F.when(gone, F.lit("vanished")).otherwise(F.col("state")))
            .drop("r_vhost", "r_queue", "t_restart_ns", "q_durable", "cc_connection",
                  "cc_channel", "t_ch_close_ns", "k_connection", "t_conn_close_ns",
                  "last_connection", "last_channel", "t_last_state_ns", "census_judged",
                  "copy_epoch", "promotion_gone"))


def promotion_verdicts(rows: DataFrame, events: DataFrame) -> DataFrame:
    """Copies still queued or unacked when a mirror or quorum member of their queue was
    promoted to master (`promoted`, of a later epoch than the master that enqueued them): a
    copy lives on only where the promoted replica held it -- a `replica_enqueued` of it on
    the promoted node before the promotion, and no `replica_dropped` of that replica's log
    (or of every log of that node) between the two. Otherwise it went with the deposed
    master (it had it, the new one never did): `vanished`, `census_missing` "promoted"
    (census_verdicts: the promotion judged it as a census would). The promotions and drops
    of a queue are one broadcast row: no shuffle of the copy rows."""
    marks_ev = events.where(_is("promoted", "replica_dropped") & F.col("queue").isNotNull())
    if marks_ev.where(_is("promoted")).isEmpty():  # (no promotion: nothing to judge)
        return rows.withColumn("promotion_gone", F.lit(False))
    mark = F.struct("t_ns", "kind", "node", "epoch", "replica_log")
    marks = (marks_ev.groupBy(F.col("vhost").alias("pm_vhost"), F.col("queue").alias("pm_queue"))
             .agg(F.array_sort(F.collect_list(mark)).alias("pm_marks")))
    rows = rows.join(F.broadcast(marks), (rows.copy_queue == marks.pm_queue) &
                     rows.vhost.eqNullSafe(marks.pm_vhost), "left")
    open_copy = F.col("state").isin("queued", "unacked") & F.col("copy_epoch").isNotNull()

    def carried(p):
        def held(s):
            dropped_since = F.exists("pm_marks", lambda d: (d.getField("kind") ==
                                                            "replica_dropped") &
                                     (d.getField("node") == p.getField("node")) &
                                     _same_log(d.getField("replica_log"),
                                               s.getField("replica_log")) &
                                     (d.getField("t_ns") > s.getField("t_ns")) &
                                     (d.getField("t_ns") < p.getField("t_ns")))
            return ((s.getField("kind") == "replica_enqueued") &
                    (s.getField("node") == p.getField("node")) &
                    (s.getField("t_ns") < p.getField("t_ns")) & ~dropped_since)
        return F.exists("steps", held)

    ended_by = F.try_element_at(F.filter(
        F.coalesce("pm_marks", F.array()),
        lambda p: open_copy & (p.getField("kind") == "promoted") &
        (p.getField("epoch") > F.col("copy_epoch")) & ~carried(p)), F.lit(1))
    gone = ended_by.isNotNull()
    return (rows.withColumn("promotion_gone", gone)
            .withColumn("state", F.when(F.col("promotion_gone"), F.lit("vanished"))
                        .otherwise(F.col("state")))
            .drop("pm_vhost", "pm_queue", "pm_marks"))


def _same_log(dropped: Column, took: Column) -> Column:
    """Whether a replica_dropped ends what a replica_enqueued took: the same replica log, or
    either names none (a drop at a replica's empty start ends every earlier log of its node;
    logs written before replicas named their logs)."""
    return dropped.isNull() | took.isNull() | (dropped == took)


def census_verdicts(rows: DataFrame, events: DataFrame) -> DataFrame:
    """Copies still queued or unacked, judged by the `queue_census` events of their queue
    taken after their last state step (and naming seq_ids below theirs): absent from one, the
    copy is `vanished` then (`census_missing` says which census: `started` after a restart,
    `stopped`, `requested`); held by all of them, it is confirmed there, and an unacked copy
    that a restart's census holds is `queued` again (recovery requeues it). `t_census_ns`:
    the latest census that held it (before one that did not): what a log gap ending before it
    hid cannot change the copy's fate (finish). `census_judged` says a census decided, so the
    guesses from restarts and closed channels stay out. The censuses of a queue are one
    broadcast row (their times, epochs and ranges, split into starts and ends); whether one
    holds a copy's seq_id is a binary search of its starts: no shuffle, no join of the copy
    rows. A census of an epoch before the copy's master's does not judge it (seq_ids are a
    master's log's), and a copy the promotion rule ended is `census_missing` "promoted"."""
    cen = events.where(_is("queue_census") & F.col("queue").isNotNull())
    promoted = F.col("promotion_gone")
    if cen.isEmpty():  # (a log without censuses: the job costs what it did)
        return (rows.withColumn("census_missing", F.when(promoted, F.lit("promoted"))
                                .cast("string"))
                .withColumn("census_judged", promoted)
                .withColumn("t_census_ns", F.lit(None).cast("bigint")))
    pairs = F.when(F.size("seq_ranges") >= 2, F.sequence(
        F.lit(0), (F.size("seq_ranges") / 2 - 1).cast("int"))).otherwise(F.array())
    census = F.struct(
        "t_ns", "reason", "seq_below", "epoch",
        F.transform(pairs, lambda i: F.element_at("seq_ranges", i * 2 + 1)).alias("starts"),
        F.transform(pairs, lambda i: F.element_at("seq_ranges", i * 2 + 2)).alias("ends"))
    marks = (cen.groupBy(F.col("vhost").alias("cn_vhost"), F.col("queue").alias("cn_queue"))
             .agg(F.array_sort(F.collect_list(census)).alias("censuses")))
    seq = F.try_element_at(F.filter("steps", lambda s: s.getField("seq_id").isNotNull()),
                           F.lit(1)).getField("seq_id")
    rows = (rows.withColumn("copy_seq_id", F.when(F.col("copy_queue").isNotNull(), seq))
            .join(F.broadcast(marks), (rows.copy_queue == marks.cn_queue) &
                  rows.vhost.eqNullSafe(marks.cn_vhost), "left"))
    open_copy = F.col("state").isin("queued", "unacked")
    copy_seq = F.col("copy_seq_id")
    rows = rows.withColumn("census_after", F.filter(
        F.coalesce("censuses", F.array()),
        lambda c: open_copy & (c.getField("t_ns") > F.col("t_last_state_ns")) &
        (copy_seq < c.getField("seq_below")) &
        # (an earlier master's seq_ids are not this copy's: a new master numbers on from
        # its own log, past which a deposed one may have numbered others)
        F.coalesce(c.getField("epoch") >= F.col("copy_epoch"), F.lit(True))))

    def holds(c):
        return _in_ranges(c.getField("starts"), c.getField("ends"), copy_seq)

    missing = F.try_element_at(F.filter("census_after", lambda c: ~holds(c)), F.lit(1))
    rows = rows.withColumn("missing", missing)
    missing = F.col("missing")
    held_before = F.filter("census_after", lambda c: holds(c) & F.coalesce(
        c.getField("t_ns") < missing.getField("t_ns"), F.lit(True)))
    after_restart = F.exists("census_after", lambda c: c.getField("reason") == "started")
    judged = F.size("census_after") > 0
    return (rows.withColumn("census_missing", F.when(promoted, F.lit("promoted"))
                            .otherwise(missing.getField("reason")))
            .withColumn("census_judged", judged | promoted)
            .withColumn("t_census_ns", F.array_max(
                F.transform(held_before, lambda c: c.getField("t_ns"))))
            .withColumn("state", F.when(judged & missing.isNotNull(), F.lit("vanished"))
                        .when(judged & after_restart & (F.col("state") == "unacked"),
                              F.lit("queued"))
                        .otherwise(F.col("state")))
            .drop("cn_vhost", "cn_queue", "censuses", "census_after", "missing",
                  "copy_seq_id"))


def _in_ranges(starts: Column, ends: Column, seq: Column) -> Column:
    """Whether seq is in one of the inclusive ranges (starts[i], ends[i]), starts ascending:
    a binary search for the last start <= seq (40 halvings: far more than any census)."""
    n = F.size(starts)

    def halve(acc, _):
        lo, hi = acc.getField("lo"), acc.getField("hi")
        mid = ((lo + hi) / 2).cast("int")
        right = F.element_at(starts, mid + 1) <= seq
        return F.when(lo < hi, F.when(right, F.struct((mid + 1).alias("lo"), hi.alias("hi")))
                      .otherwise(F.struct(lo.alias("lo"), mid.alias("hi")))).otherwise(acc)

    found = F.aggregate(F.sequence(F.lit(1), F.lit(40)),
                        F.struct(F.lit(0).alias("lo"), n.alias("hi")), halve).getField("lo")
    return F.coalesce(F.when(found > 0, F.element_at(ends, found) >= seq), F.lit(False))


def removed_by(rows: DataFrame, events: DataFrame) -> DataFrame:
    """Copies a purge or a queue deletion removed: the first `purged` (copy ready) or
    `queue_deleted` (ready or unacked) event of its queue at or after the copy's last state
    step -- unless a restart of the queue came first that the copy did not survive (not synced
    before it): that copy vanished then, and a later deletion must not hide it. One row per
    queue (its removals and restarts, sorted), joined as Spark chooses."""
    marks = (events.where(_is(*S.REMOVAL_KINDS, "queue_crashed", "queue_started") &
                          F.col("queue").isNotNull())
             .groupBy(F.col("vhost").alias("rm_vhost"), F.col("queue").alias("rm_queue"))
             .agg(F.array_sort(F.collect_list(F.struct("t_ns", "kind"))).alias("marks")))
    # (a queue without a purge or deletion keeps its copies' states: no need to look further)
    marks = marks.where(F.exists("marks", lambda r: r.getField("kind").isin(
        list(S.REMOVAL_KINDS))))
    rows = rows.join(marks, (rows.copy_queue == marks.rm_queue) &
                     rows.vhost.eqNullSafe(marks.rm_vhost), "left")
    state, synced = F.col("state"), F.col("t_synced_ns")

    def matters(r):
        kind = r.getField("kind")
        removes = (state == "queued") | ((state == "unacked") & (kind == "queue_deleted"))
        survives = F.coalesce(synced <= r.getField("t_ns"), F.lit(False))
        return (r.getField("t_ns") >= F.col("t_last_state_ns")) & F.when(
            kind.isin(list(S.REMOVAL_KINDS)), removes).otherwise(
            state.isin("queued", "unacked") & ~survives)

    first = F.try_element_at(F.filter(F.coalesce("marks", F.array()), matters), F.lit(1))
    hit = F.col("removal")  # computed once: the state it is judged by changes below
    kind = hit.getField("kind")
    return (rows.withColumn("removal", first)
            .withColumn("state", F.when(kind == "purged", F.lit("purged"))
                        .when(kind == "queue_deleted", F.lit("deleted")).otherwise(state))
            .withColumn("t_removed_ns", F.when(kind.isin(list(S.REMOVAL_KINDS)), F.coalesce(
                "t_removed_ns", hit.getField("t_ns"))).otherwise(F.col("t_removed_ns")))
            .drop("rm_vhost", "rm_queue", "marks", "removal"))


COPY_FIELDS = ("state", "durable", "persistent", "deliveries", "redeliveries", "acks",
               "auto_acks", "nacks",
               "rejects", "requeues", "expirations", "dead_letterings", "drops",
               "delivery_to_ack_ms", "delivered_after_ack", "dead_letter_queues",
               "census_missing", "stream")
COPY_TIMES = ("t_enqueued", "t_stored", "t_synced", "t_first_delivered", "t_last_delivered",
              "t_first_acked", "t_removed", "t_last_event", "t_census")
PUBLISH_TIMES = ("t_published", "t_routed", "t_unroutable", "t_returned", "t_confirmed",
                 "t_nacked_to_publisher", "t_rolled_back")


def assemble(rows: DataFrame, msg_gaps: DataFrame | None = None) -> DataFrame:
    """Shuffle 2: one row per message. Copy columns are finished on the flat copy rows first,
    so each copy struct is built once (no rewriting of nested arrays afterwards). `msg_gaps`:
    gaps.message_gaps, when the logs have gaps."""
    pub = F.col("copy_queue").isNull()
    rows = rows.withColumn("time_in_queue_ms", _ms(F.col("t_removed_ns"),
                                                   F.col("t_enqueued_ns")))
    for t in COPY_TIMES:
        rows = rows.withColumn(t, ns_to_ts(F.col(f"{t}_ns")))

    def side(name):
        return F.first(F.when(pub, F.col(name)), ignorenulls=True).alias(name)

    def copies_min(name, alias):
        return F.min(F.when(~pub, F.col(name))).alias(alias)

    def copies_sum(name):
        return F.coalesce(F.sum(F.when(~pub, F.col(name))), F.lit(0)).alias(name)

    copy = F.struct(
        F.col("copy_queue").alias("queue"),
        *[F.col(c) for c in COPY_FIELDS], F.col("time_in_queue_ms"),
        *[F.col(t) for t in COPY_TIMES],
        *[F.col(f"{t}_ns") for t in COPY_TIMES],
        F.col("steps"))
    msgs = rows.groupBy("msg_id").agg(
        F.first("message_id", ignorenulls=True).alias("message_id"),
        F.first("vhost", ignorenulls=True).alias("vhost"),
        side("exchange"), side("routing_key"), side("mandatory"), side("publisher_connection"),
        side("seq_no"), side("routed_queues"), side("parent_msg_id"), side("dead_letter_reason"),
        side("nack_reason"), side("traceparent"), side("alternate_exchanges"),
        *[side(f"{t}_ns") for t in PUBLISH_TIMES],
        F.max("persistent").alias("persistent"),
        F.sum("n_events").alias("n_events"),
        _union_lists(F.col("nodes")).alias("nodes"),
        _union_lists(F.col("dead_letter_queues")).alias("dead_letter_queues"),
        F.first("dead_lettered_to", ignorenulls=True).alias("dead_lettered_to"),
        F.array_sort(F.collect_list(F.when(~pub, F.col("copy_queue")))).alias("queues"),
        F.array_sort(F.collect_list(F.when(~pub, F.struct(F.col("copy_queue").alias("queue"),
                                                          F.col("state")))))
        .alias("queue_state_list"),
        copies_min("t_enqueued_ns", "t_first_enqueued_ns"),
        copies_min("t_first_delivered_ns", "t_first_delivered_ns"),
        copies_min("t_first_acked_ns", "t_first_acked_ns"),
        F.max(F.when(~pub, F.col("t_last_event_ns"))).alias("t_last_event_ns"),
        *[copies_sum(f) for f in ("deliveries", "redeliveries", "acks", "nacks", "rejects",
                                  "requeues")],
        F.array_sort(F.collect_list(F.when(~pub, copy))).alias("copies"),
    )
    if msg_gaps is None:
        msgs = msgs.withColumn("log_gap", F.lit(None).cast("string")).withColumn(
            "log_gaps", F.lit(0).cast("bigint")).withColumn(
            "log_gap_until_ns", F.lit(None).cast("bigint"))
    else:
        msgs = msgs.join(msg_gaps, "msg_id", "left").withColumn(
            "log_gaps", F.coalesce(F.col("log_gaps"), F.lit(0).cast("bigint")))
    return finish(msgs)


def final_state(states: Column, dl_queues: Column, routed: Column) -> Column:
    """From [(queue, state)] of the copies: the state shared by the copies in the queues the
    publish was routed to (or, when the log has no routed event, those that no dead_lettered
    event names as a target)."""
    origin = F.filter(states, lambda c: F.when(F.size(routed) > 0, F.array_contains(
        routed, c.getField("queue"))).otherwise(~F.array_contains(dl_queues,
                                                                   c.getField("queue"))))
    distinct = F.array_distinct(F.transform(
        F.when(F.size(origin) > 0, origin).otherwise(states), lambda c: c.getField("state")))
    return (F.when(F.size(states) == 0,
                   F.when(F.col("t_returned_ns").isNotNull(), "returned")
                   .when(F.col("t_unroutable_ns").isNotNull(), "unroutable")
                   .when(F.col("t_nacked_to_publisher_ns").isNotNull(), "nacked_to_publisher")
                   .when(F.col("t_rolled_back_ns").isNotNull(), "rolled_back")
                   .when(F.size(routed) > 0, "not_enqueued")
                   .otherwise("published"))
            .when(F.size(distinct) == 1, distinct.getItem(0))
            .otherwise("mixed"))


def finish(msgs: DataFrame) -> DataFrame:
    """Final columns: hex ids, timestamps, latencies in ms, counts, final_state."""
    published = F.col("t_published_ns")
    state = final_state(F.col("queue_state_list"),
                        F.coalesce(F.col("dead_letter_queues"), F.array()),
                        F.coalesce(F.col("routed_queues"), F.array()))
    # a copy a census held after every gap that counts for the message ends: what the gaps
    # hid happened before the census, and the copy's fate since is all in the log
    def held_after_gap(c):
        return F.coalesce(c.getField("t_census_ns") > F.col("log_gap_until_ns"), F.lit(False))

    open_copy = F.exists("copies", lambda c: c.getField("state").isin(*UNSETTLED_STATES) &
                         ~held_after_gap(c))
    hidden = F.col("log_gap").isNotNull() & (open_copy | state.isin(*UNSETTLED_FINAL))
    census_settled = (F.col("log_gap").isNotNull() & ~hidden &
                      F.exists("copies", held_after_gap))
    return msgs.select(
        F.lower(F.hex("msg_id")).alias("msg_id"),
        "message_id", "vhost", "exchange", "routing_key", "persistent", "mandatory",
        F.when(hidden, F.lit("unknown")).otherwise(state).alias("final_state"),
        "log_gap", "log_gaps", census_settled.alias("census_settled"),
        "queues", "routed_queues", "dead_letter_queues",
        F.map_from_entries("queue_state_list").alias("queue_states"),
        *[ns_to_ts(F.col(f"{t}_ns")).alias(t) for t in PUBLISH_TIMES],
        *[ns_to_ts(F.col(f"{t}_ns")).alias(t) for t in
          ("t_first_enqueued", "t_first_delivered", "t_first_acked", "t_last_event")],
        "deliveries", "redeliveries", "acks", "nacks", "rejects", "requeues",
        _ms(F.col("t_confirmed_ns"), published).alias("publish_to_confirm_ms"),
        _ms(F.col("t_first_delivered_ns"), published).alias("publish_to_first_delivery_ms"),
        F.lower(F.hex("dead_lettered_to")).alias("dead_lettered_to"),
        F.lower(F.hex("parent_msg_id")).alias("parent_msg_id"), "dead_letter_reason",
        "nack_reason", "traceparent", "alternate_exchanges",
        "seq_no", "publisher_connection", "n_events", "nodes", "copies",
        *[f"{t}_ns" for t in PUBLISH_TIMES],  # exact times (the anomaly checks use them)
    )


# The events copy_states reads besides the copies' own (a few per queue, channel and
# connection), and the columns it reads of them.
MARK_KINDS = ("queue_crashed", "queue_started", "queue_census", "channel_closed",
              "connection_closed", "promoted", "replica_dropped") + S.REMOVAL_KINDS
MARK_COLUMNS = ("kind", "t_ns", "node", "vhost", "queue", "connection", "channel", "durable",
                "reason", "epoch", "replica_log", "seq_below", "seq_ranges")


def mark_events(events: DataFrame) -> DataFrame:
    """The events copy_states joins to the copies (MARK_KINDS, MARK_COLUMNS): persisted by the
    job, they are read from the log once instead of once per rule."""
    return events.where(_is(*MARK_KINDS)).select(*MARK_COLUMNS)


def build(events: DataFrame, msg_gaps: DataFrame | None = None,
          marks: DataFrame | None = None) -> DataFrame:
    """The lifecycles DataFrame (one row per msg_id) of an events DataFrame. `msg_gaps`
    (gaps.message_gaps) turns the unsettled verdicts a log gap could hide into `unknown`.

    One shuffle of the events, by msg_id: both groupings (by msg_id and queue, then by msg_id)
    find their rows already together, as long as Spark broadcasts the per-queue and
    per-channel tables joined between them (it does when they are small; a large one is
    joined by shuffling, as before). Left to itself Spark shuffles by (msg_id, queue) and then
    again by msg_id, moving every copy's steps twice (a 2M-event log: about a third more CPU).
    `marks`: mark_events(events), when the caller keeps them."""
    by_message = (with_rolled_back(events).where(F.col("msg_id").isNotNull())
                  .repartition("msg_id"))
    if marks is None:
        marks = mark_events(events)
    return assemble(copy_states(group_rows(by_message), marks), msg_gaps)


def with_rolled_back(events: DataFrame) -> DataFrame:
    """The events plus one `tx_rolled_back` row per publish a rollback discarded (the event
    lists them in `msg_ids`), so the rollback groups with the message's other events."""
    return events.unionByName(
        events.where(_is("tx_rolled_back") & (F.size("msg_ids") > 0))
        .withColumn("msg_id", F.explode("msg_ids")))
