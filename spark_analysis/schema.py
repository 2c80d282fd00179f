"""The event files' layout, shared by the writer (actors/events.py) and the reader (reader.py):
the kinds, the fields of each kind in their record order, and the columns the job sees
(docs/events.md). tests/unit/analysis checks the writer against this module. v3 and v2 files
share the layout (the records' numbers and values); v3 writes them in columnar chunks
(chunk.py), v2 one msgpack array per record.

No Spark import here: the reader's Python workers and the writer's tests use it too.
"""

from __future__ import annotations

SCHEMA = "leveret-events v3"  # records in columnar chunks (chunk.py)
SCHEMA_V2 = "leveret-events v2"  # files of older writers: one array per record
SCHEMA_V1 = "leveret-events v1"  # files of older writers: field maps with string keys
SCHEMAS = (SCHEMA, SCHEMA_V2, SCHEMA_V1)  # what the readers accept
TABLE_SCHEMAS = (SCHEMA, SCHEMA_V2)  # headers that carry the layout table (`kinds`)

# Every kind, in the order the steps of one message happen: timestamp ties (events of two
# processes in the same nanosecond) are broken by this rank.
KIND_ORDER = (
    "publish_received", "routed", "unroutable", "returned", "enqueued", "stored", "synced",
    "confirmed", "nacked_to_publisher", "delivered", "fetched", "acked", "nacked", "rejected",
    "requeued", "expired", "dead_lettered", "dropped",
    "queue_crashed", "queue_started", "queue_census", "channel_closed", "connection_closed",
    "process_crashed",
    "process_start", "heartbeat", "events_dropped", "process_stop",
)
# Kinds where a message's fate changes outside its copy events (after the others on a tie).
DEAD_LETTER_KINDS = ("dead_letter_published",)  # the child's first event, msg_id its own
REMOVAL_KINDS = ("purged", "queue_deleted")  # no msg_id: every copy of the queue it removed
TX_KINDS = ("tx_committed", "tx_rolled_back")  # no msg_id: `msg_ids` lists the publishes
# A queue's mirrors and quorum members (replica_log.py): per message, what a replica took from
# its master and was told left; no msg_id: all it held dropped, a sync done, a promotion.
REPLICA_COPY_KINDS = ("replica_enqueued", "replica_settled")
REPLICA_KINDS = REPLICA_COPY_KINDS + ("replica_dropped", "replica_synced", "promoted")
KIND_ORDER = KIND_ORDER + DEAD_LETTER_KINDS + REMOVAL_KINDS + TX_KINDS + REPLICA_KINDS
RANK = {kind: i for i, kind in enumerate(KIND_ORDER)}

MESSAGE_KINDS = ("publish_received", "routed", "unroutable", "returned")
PUBLISHER_KINDS = ("confirmed", "nacked_to_publisher")
COPY_KINDS = ("enqueued", "stored", "synced", "delivered", "fetched", "acked", "nacked",
              "rejected", "requeued", "expired", "dead_lettered", "dropped")
# The steps of a queue's copy: its own events and what the queue's replicas did with it.
COPY_STEP_KINDS = COPY_KINDS + REPLICA_COPY_KINDS
PROCESS_KINDS = ("queue_crashed", "queue_started", "queue_census", "channel_closed",
                 "connection_closed", "process_crashed")
# The log's own events: where a process run's log starts, that it is alive, what it dropped,
# that it ended cleanly (the gaps between them are the job's "log gaps", gaps.py).
LOG_KINDS = ("process_start", "heartbeat", "events_dropped", "process_stop")

DELIVERY_KINDS = ("delivered", "fetched")
# Kinds that change where a queue's copy of a message is; the last one decides its state.
STATE_KINDS = ("enqueued", "requeued", "delivered", "fetched", "acked", "nacked", "rejected",
               "expired", "dead_lettered", "dropped")

# The v2/v3 record layout: each kind's actor (None: the kind has none, or several and then `actor`
# is one of its fields) and its fields in record order. A record is
# [code, msg_id, mono_ns, seq, hlc_ns, [values in this order]], code the kind's index in
# KIND_ORDER + COMPOSITE_KINDS (in v3, the same record's columns in a chunk); a value past the
# declared ones, when a map, holds fields the table does not declare. Every file header
# carries this table (`kinds`), so a reader decodes a file by the table it was written with:
# append new fields at the end of a kind and new kinds at the end.
LAYOUT = {
    "publish_received": ("channel", ("vhost", "connection", "channel", "seq_no", "exchange",
                                     "routing_key", "message_id", "persistent", "size",
                                     "correlation_id", "traceparent")),
    "routed": ("channel", ("vhost", "queues", "alternate_exchanges")),
    "unroutable": ("channel", ("vhost", "mandatory", "alternate_exchanges")),
    "returned": ("channel", ("vhost",)),
    "enqueued": ("queue", ("vhost", "queue", "seq_id", "paged", "durable", "epoch", "offset")),
    "stored": ("backing_queue", ("vhost", "queue", "seq_id", "where")),
    "synced": ("backing_queue", ("vhost", "queue", "seq_id", "offset")),
    "confirmed": ("channel", ("vhost", "connection", "channel", "seq_no")),
    "nacked_to_publisher": ("channel", ("vhost", "connection", "channel", "seq_no", "reason")),
    "delivered": ("channel", ("vhost", "queue", "connection", "channel", "consumer_tag",
                              "delivery_tag", "redelivered", "no_ack", "offset")),
    "fetched": ("channel", ("vhost", "queue", "connection", "channel", "delivery_tag",
                            "redelivered", "no_ack")),
    "acked": ("channel", ("vhost", "queue", "connection", "channel", "delivery_tag", "requeue",
                          "offset")),
    "nacked": ("channel", ("vhost", "queue", "connection", "channel", "delivery_tag", "requeue",
                           "offset")),
    "rejected": ("channel", ("vhost", "queue", "connection", "channel", "delivery_tag",
                             "requeue", "offset")),
    "requeued": ("queue", ("vhost", "queue", "seq_id", "reason")),
    "expired": ("queue", ("vhost", "queue", "seq_id")),
    "dead_lettered": ("queue", ("vhost", "queue", "seq_id", "reason", "exchange", "new_msg_id")),
    "dropped": ("queue", ("vhost", "queue", "seq_id", "reason")),
    "queue_crashed": (None, ("actor", "vhost", "queue", "worker", "reason")),
    "queue_started": ("queue", ("vhost", "queue", "recovered", "durable")),
    "queue_census": ("backing_queue", ("vhost", "queue", "reason", "seq_ranges", "count",
                                       "seq_below", "durable", "epoch")),
    "channel_closed": ("channel", ("vhost", "connection", "channel", "unacked")),
    "connection_closed": ("reader", ("vhost", "connection", "reason", "channels")),
    "process_crashed": ("node", ("crashed_process", "crashed_pid", "exit_status")),
    "process_start": (None, ()),
    "heartbeat": (None, ("dropped",)),
    "events_dropped": (None, ("count", "dropped")),
    "process_stop": (None, ("dropped",)),
    "dead_letter_published": ("queue", ("vhost", "parent_msg_id", "reason", "exchange",
                                        "routing_key", "queues", "source_queue", "persistent",
                                        "message_id")),
    "purged": ("queue", ("vhost", "queue", "count", "seq_below")),
    "queue_deleted": (None, ("actor", "vhost", "queue", "count", "unacked", "seq_below",
                             "reason")),
    "tx_committed": ("channel", ("vhost", "connection", "channel", "publishes", "settles",
                                 "msg_ids")),
    "tx_rolled_back": ("channel", ("vhost", "connection", "channel", "publishes", "settles",
                                   "msg_ids")),
    "replica_enqueued": ("mirror", ("vhost", "queue", "role", "seq_id", "epoch",
                                    "replica_log")),
    "replica_settled": ("mirror", ("vhost", "queue", "role", "seq_id", "replica_log")),
    "replica_dropped": ("mirror", ("vhost", "queue", "role", "reason", "count", "epoch",
                                   "replica_log")),
    "replica_synced": ("queue", ("vhost", "queue", "member", "role", "epoch")),
    "promoted": ("queue", ("vhost", "queue", "epoch", "role", "count")),
    # composite: a publish and its routing, one record of the channel (PARTS)
    "published": ("channel", ("vhost", "connection", "channel", "seq_no", "exchange",
                              "routing_key", "message_id", "persistent", "size",
                              "correlation_id", "traceparent", "queues",
                              "alternate_exchanges")),
}
# Composite kinds: one record that stands for several events of one actor at one moment (its
# seq and hlc_ns are lists, one per part, or one number for the first part and the next
# numbers for the others); each part takes the fields its own kind declares.
# Never a row of the job: the reader gives the parts.
PARTS = {"published": ("publish_received", "routed")}
COMPOSITE_KINDS = tuple(PARTS)
CODE = {kind: i for i, kind in enumerate(KIND_ORDER + COMPOSITE_KINDS)}  # number in records


def layout_table() -> list:
    """The table a v2 file header carries, by code: [kind, actor, [field, ...]] and, for a
    composite kind, a fourth element: its parts' kinds."""
    return [[kind, LAYOUT[kind][0], list(LAYOUT[kind][1])] +
            ([list(PARTS[kind])] if kind in PARTS else [])
            for kind in KIND_ORDER + COMPOSITE_KINDS]


def parts_of(table: list, code: int, values) -> list[tuple[str, dict]]:
    """[(kind, {field: value})] of a v2 record's code and values, by a header's table: the
    actor as a field, absent values (None) left out, undeclared fields merged in; a composite
    record gives one pair per part, each with the fields its kind declares."""
    entry = table[code]
    kind, actor, names = entry[0], entry[1], entry[2]
    fields = {} if actor is None else {"actor": actor}
    fields.update((n, v) for n, v in zip(names, values) if v is not None)
    if len(values) > len(names) and isinstance(values[-1], dict):
        fields.update(values[-1])
    if len(entry) < 4:
        return [(kind, fields)]
    by_kind = {e[0]: e for e in table}
    out = []
    for part in entry[3]:
        _, part_actor, part_names = by_kind[part][:3]
        own = {} if part_actor is None else {"actor": part_actor}
        own.update((n, fields[n]) for n in part_names if n in fields)
        out.append((part, own))
    return out


# Event fields that become columns, with their Spark SQL types; anything else goes, as JSON,
# into the `extra` column.
FIELD_COLUMNS = (
    ("actor", "string"),
    ("vhost", "string"),
    ("queue", "string"),
    ("connection", "string"),
    ("channel", "bigint"),
    ("seq_no", "bigint"),
    ("delivery_tag", "bigint"),
    ("consumer_tag", "string"),
    ("message_id", "string"),
    ("exchange", "string"),
    ("routing_key", "string"),
    ("requeue", "boolean"),
    ("redelivered", "boolean"),
    ("persistent", "boolean"),
    ("durable", "boolean"),
    ("mandatory", "boolean"),
    ("reason", "string"),
    ("where", "string"),  # stored: "index" or "msg_store"
    ("count", "bigint"),
    ("queues", "array<string>"),
    ("new_msg_id", "binary"),
    ("seq_id", "bigint"),  # the queue's position of the message
    ("no_ack", "boolean"),  # delivered/fetched with auto-ack: settled by the delivery
    ("unacked", "bigint"),  # channel_closed: deliveries it held
    ("channels", "bigint"),  # connection_closed: channels it had
    ("recovered", "bigint"),  # queue_started: messages recovered from disk
    ("size", "bigint"),  # publish_received: body bytes
    ("paged", "boolean"),  # enqueued straight to disk (deep durable queue)
    ("worker", "bigint"),  # queue_crashed: the queue worker that died
    ("dropped", "bigint"),  # heartbeat, events_dropped, process_stop: the run's drops so far
    ("crashed_process", "string"),  # process_crashed: the worker ("queue-0") that died
    ("crashed_pid", "bigint"),  # process_crashed: its pid
    ("exit_status", "string"),  # process_crashed: how it ended
    ("seq_below", "bigint"),  # purged, queue_deleted: removed copies have a smaller seq_id
    ("parent_msg_id", "binary"),  # dead_letter_published: the message it is a copy of
    ("source_queue", "string"),  # dead_letter_published: the queue it was dead-lettered from
    ("msg_ids", "array<binary>"),  # tx_committed, tx_rolled_back: the publishes it ended
    # queue_census: the seq_ids the queue held, inclusive ranges [first, last, first, last...]
    ("seq_ranges", "array<bigint>"),
    ("traceparent", "string"),  # publish_received: the W3C trace context header, when sent
    ("alternate_exchanges", "array<string>"),  # routed, unroutable: the AEs it went through
    ("correlation_id", "string"),  # publish_received: the publisher's property
    # a stream's message (enqueued, synced, delivered, acked): its offset in the stream
    ("offset", "bigint"),
    ("epoch", "bigint"),  # enqueued, queue_census, replica_*, promoted: the master's promotions
    ("role", "string"),  # replica_*, promoted: "mirror" (classic) or "member" (quorum)
    # replica_enqueued/settled/dropped: which log of the replica (a quorum member's outlives
    # its actor, kept with its marker); a drop without one ends every earlier log of its node
    ("replica_log", "string"),
)

# Columns every row gets from its file's header and the event record itself.
RECORD_COLUMNS = (
    ("node", "string"),
    ("process", "string"),
    ("pid", "bigint"),
    ("file", "string"),
    ("kind", "string"),
    ("rank", "int"),
    ("msg_id", "binary"),
    ("t_ns", "bigint"),  # the hybrid clock: causal order across processes and hosts (reader.py)
    ("wall_ns", "bigint"),
    ("mono_ns", "bigint"),
    ("run_id", "string"),  # the process run (file header): seq numbers are per run
    ("seq", "bigint"),  # the event's number in its run; null in files of older writers
    ("clock_lead_ns", "bigint"),  # t_ns minus the process's own clock: the skew relied on
)

COLUMNS = RECORD_COLUMNS + FIELD_COLUMNS + (("extra", "string"),)


def ddl() -> str:
    """The events DataFrame's schema as a Spark DDL string."""
    return ", ".join(f"`{name}` {typ}" for name, typ in COLUMNS)


_TABLE = None  # this version's layout_table(), built on first use by named()


def named(kind: str, values) -> list[tuple[str, dict]]:
    """[(kind, fields)] of a kind's values by this version's table, a composite kind's parts
    (tests' event recorders)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = layout_table()
    return parts_of(_TABLE, CODE[kind], values)
