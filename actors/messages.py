"""Every message actors send each other, and their wire encoding.

Mirrors the message tuples of RabbitMQ's rabbit_channel / rabbit_amqqueue_process / delegate
(`deliver`, `confirm`, `settle`, `credit`...). Each type is an immutable NamedTuple with a numeric
tag (its position in `_TYPES`); on the wire it is msgpack `[tag, *fields]`. A type whose last
field is `bodies` carries message bodies: they travel, untouched and never inside msgpack, as
one ZeroMQ frame after the payload (the bodies joined; their lengths end the msgpack list), so a
batch of 85 publishes costs three frames, not 87 (measured: per-frame sends were a fifth of a
connection worker's time). New fields go at the end with defaults. The messages of a batch
are named records too (PublishItem, Delivery, MirrorItem), never positional lists.

Messages that never leave their worker process (the "local only" sections below: connection
worker, queue worker) are plain classes with `__slots__`, never encoded. No actor is sent a bare
string or a positional tuple.

Addresses are strings `endpoint#actor` (actors/transport.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from msgpack import UnpackException

from actors.wire import packb, unpackb


# --- metadata (node) -------------------------------------------------------------------------
class Rpc(NamedTuple):
    """A request to the node's metadata actor; answered by RpcReply to reply_to ("": none)."""
    reply_to: str  # address of the asking actor
    req_id: int  # the asker's request number, echoed in the reply
    op: str  # "queue.declare", "exchange.bind", ...
    args: dict  # the operation's arguments


class RpcReply(NamedTuple):
    req_id: int
    ok: bool
    result: Any = None  # operation-specific
    code: int = 0  # AMQP reply code when not ok
    text: str = ""  # AMQP reply text when not ok
    version: int = 0  # cluster: the definitions-log entry the answer depends on (0: none)


class MetaChange(NamedTuple):
    """Node -> every worker: changes to apply to the local metadata replica, in order."""
    changes: list
    version: int = 0  # the node's metadata version after these changes


class MetaSnapshot(NamedTuple):
    """Node -> a starting worker: the whole metadata state."""
    state: dict
    version: int = 0  # the node's metadata version of this state


class MetaApplied(NamedTuple):
    """Worker -> node: its replica is at `version`. The node answers an operation only once
    every live worker has applied the change it made (as a Mnesia transaction has completed on
    every node before rabbit_channel replies), so what a client does next sees it everywhere."""
    kind: str
    index: int
    version: int


class PeerApplied(NamedTuple):
    """Node -> the other nodes' metadata actors (cluster): every worker of `member` has applied
    definitions-log entry `seq`. The leader answers an operation only once every node that is
    up has applied its entry, so what a client does next on any node sees it."""
    member: str
    seq: int


class WorkerDown(NamedTuple):
    """Node -> workers (and a connection worker's host -> its channels): a worker process
    died; its endpoint is dead from now on."""
    kind: str  # "queue" or "conn"
    endpoint: str


class QueueDown(NamedTuple):
    """A queue's process crashed (rabbit_channel's 'DOWN' of a queue pid with an abnormal exit):
    the node's metadata actor -> every connection worker of the node, and -> the other nodes'
    metadata actors, which tell theirs; a connection worker's host -> its channels. Channels
    nack what they had not had confirmed by the queue at `address`, cancel its consumers
    (basic.cancel to clients with consumer_cancel_notify) and forget their unacked deliveries
    from it (their acks no longer reach a queue: the restarted one redelivers them)."""
    address: str  # the crashed queue's address (a restarted one serves at the same address)
    vhost: str
    name: str


class WorkerUp(NamedTuple):
    """Node -> workers (cluster): a worker of another node that was marked dead (its node was
    marked down, as in a partition) is alive again: its endpoint takes messages again."""
    kind: str  # "queue" or "conn"
    endpoint: str


class Pause(NamedTuple):
    """Node -> every worker of the node (cluster, pause_minority): `paused` true: the node cannot
    reach a majority, or the cluster marked it down; connection workers cancel their consumers,
    nack unconfirmed publishes and close every connection with 320 CONNECTION_FORCED, queue
    workers stop every queue master and mirror. False: it is a member up again."""
    paused: bool


class ResourceAlarm(NamedTuple):
    """Node (metadata) -> connection worker: the resource alarms now on ("memory", "disk"); any
    on, publishing connections are blocked (connection.blocked), none, they are unblocked."""
    alarms: list


class QueueStats(NamedTuple):
    """Queue -> the metadata actor of every node up: its counters and depth (a sample of
    actors/core/queue_stats.py), every collect_statistics_interval while they change."""
    vhost: str
    name: str
    at_ms: int  # wall-clock milliseconds of the sample
    stats: dict


class ConnectionStats(NamedTuple):
    """Connection worker -> the metadata actor of every node up: every connection of the
    worker with its channels and consumers (actors/connection/stats.py), when it changed."""
    worker: str  # the worker's endpoint
    at_ms: int
    connections: list
    # the process's cumulative counts (actors/connection/stats.py process_totals): channel
    # counters, connection/channel churn, events written
    totals: dict = {}


class WorkerStats(NamedTuple):
    """Queue worker -> its node's metadata actor: the process's cumulative counts (events
    written to its event log; its syncs and their time, its msg_store reads and writes:
    storage.io_totals), every collect_statistics_interval when they changed (a connection
    worker's come with its ConnectionStats)."""
    worker: str  # the worker's endpoint
    at_ms: int
    totals: dict


class NodeStats(NamedTuple):
    """Node (metadata) -> the metadata actor of every node up, itself included: the node's own
    figures for /api/nodes (actors/node/node_stats.py: memory, disk, alarms, descriptors,
    threads...), every collect_statistics_interval."""
    node: str  # the node's name (config.node)
    at_ms: int  # wall-clock milliseconds of the sample
    stats: dict


class ShovelStates(NamedTuple):
    """Node (metadata) -> the metadata actor of every other node up: the statuses of the
    dynamic shovels this node runs (actors/shovel/status.py rows), every
    collect_statistics_interval, for any node's GET /api/shovels."""
    node: str  # the node's name (config.node)
    at_ms: int  # wall-clock milliseconds of the statuses
    rows: list  # ShovelStatus.row() of each shovel this node runs


class ForceClose(NamedTuple):
    """Node -> connection worker: close one connection with 320 CONNECTION_FORCED (the
    management API's DELETE /api/connections/{name})."""
    conn_id: str
    reason: str


class StartQueue(NamedTuple):
    """Node -> queue worker: start the Queue and BackingQueue actors of one queue."""
    qdef: dict  # name, vhost, durable, exclusive_owner, auto_delete, arguments
    reply_to: str  # the node, told QueueStarted
    recovered: bool = False  # True when restarted after a crash


class QueueStarted(NamedTuple):
    """Queue worker -> node: the queue has recovered and serves at `address` (sent only then:
    a message to a queue still recovering must not reach the missing-queue fallback), or it
    could not start (`error`)."""
    vhost: str
    name: str
    address: str
    error: str = ""


# --- channel -> queue --------------------------------------------------------------------------
class PublishItem(NamedTuple):
    """One message of a Publish batch (its body is the batch's bodies[i])."""
    seq_no: int  # the publisher's confirm sequence number; 0: no confirm wanted
    exchange: str  # the exchange it was published to
    routing_key: str  # the routing key it was published with
    props_raw: bytes  # its encoded content properties (as the queue stores and delivers them)
    persistent: bool  # delivery_mode 2
    priority: int  # its priority property (0: none)
    expiry_ms: int  # its own expiration property in ms; -1: none
    # 16 bytes naming its body in msg_store and the message in the event log (a persistent
    # message, or any with events on); None: the queue makes one if it stores the message
    msg_id: bytes | None = None


class Publish(NamedTuple):
    """A batch of messages for one queue from one channel (or a dead-lettering queue):
    items[i] (a PublishItem) has body bodies[i]."""
    sender: str
    items: list
    bodies: list


class Consume(NamedTuple):
    sender: str  # channel address
    req_id: int
    consumer_tag: str
    no_ack: bool
    exclusive: bool
    prefetch: int  # per-consumer limit (basic.qos global=false), 0 = none
    channel_prefetch: int  # channel-wide limit (global=true), 0 = none
    owner: str  # connection id, for exclusive-queue checks
    arguments: dict


class Cancel(NamedTuple):
    sender: str
    req_id: int  # 0: no reply wanted
    consumer_tag: str


class Settle(NamedTuple):
    """Channel -> queue: what became of delivered messages. op: ACK, REQUEUE or DISCARD."""
    sender: str
    op: int
    seq_ids: list  # positions in the queue (QueueCore seq_id), not message ids


ACK, REQUEUE, DISCARD = 0, 1, 2


class Get(NamedTuple):
    sender: str
    req_id: int
    no_ack: bool
    owner: str


class ChannelDown(NamedTuple):
    """Channel -> queue: the channel closed; requeue its unacked, drop its consumers."""
    sender: str


class SetLimit(NamedTuple):
    """Channel -> queue: new prefetch for the channel's consumers on that queue."""
    sender: str
    channel_prefetch: int


class QueueOp(NamedTuple):
    """Channel or node -> queue: per-queue admin, answered by RpcReply."""
    reply_to: str
    req_id: int
    op: str  # "purge", "info" (a declare's counts), "stats" (list_queues), "delete", "sync",
    #          "cancel_sync" (leveretctl sync_queue / cancel_sync_queue)
    args: dict


# --- queue -> channel --------------------------------------------------------------------------
class Delivery(NamedTuple):
    """One message a queue hands a channel (its body is the batch's bodies[i]), as the
    channel's basic.deliver or basic.get-ok says it, plus what the channel's ack does."""
    consumer_tag: str  # the consumer it goes to; "": a basic.get answer (GetReply)
    seq_id: int  # its position in the queue: what the channel's Settle names
    redelivered: bool
    exchange: str
    routing_key: str
    props_raw: bytes
    # x-confirm-on=ack-lite: the publishing channel and its seq_no, which the consuming
    # channel confirms once the consumer acks ("", 0: none)
    publisher: str = ""
    seq_no: int = 0
    msg_id: bytes | None = None  # the event log's message id (events on), else None


class Deliver(NamedTuple):
    """A batch of deliveries from one queue to one channel: items[i] (a Delivery) has body
    bodies[i]."""
    queue: str  # queue address
    qname: str
    items: list
    bodies: list


def delivery_tail(seq_id: int, redelivered: bool, exchange: str, routing_key: str,
                  props_raw: bytes, publisher: str = "", seq_no: int = 0,
                  msg_id: bytes | None = None) -> bytes:
    """A Delivery's fields after its consumer tag as they go on the wire, encoded once for a
    message that many consumers are sent (a stream's fan-out): PackedDeliveries splices it
    behind each consumer's tag."""
    # (an 8-field list's msgpack less its one-byte header: the fields, one after the other)
    return packb((seq_id, redelivered, exchange, routing_key, props_raw, publisher, seq_no,
                  msg_id))[1:]


# msgpack fixarray headers of a Delivery's field list and of its tail (the fields after the
# consumer tag): derived from the record, so a field added to Delivery changes them too
_DELIVERY_HEAD = bytes((0x90 | len(Delivery._fields),))
_TAIL_HEAD = bytes((0x90 | (len(Delivery._fields) - 1),))


class PackedDeliveries:
    """A Deliver's items as runs of (consumer tag, delivery_tail bytes), one tail per
    message, shared by every run that delivers the message. `encode` splices the bytes
    into the payload as the Delivery lists they stand for, so the receiver decodes and
    checks Delivery records as from any Deliver; in the sending process (a local send, a
    test) the items read as those Delivery records."""

    __slots__ = ("runs", "n")

    def __init__(self):
        self.runs: list = []  # (consumer_tag, [tail, ...]) in delivery order
        self.n = 0  # items in all runs

    def add(self, consumer_tag: str, tails: list) -> None:
        self.runs.append((consumer_tag, tails))
        self.n += len(tails)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for ctag, tails in self.runs:
            for tail in tails:
                yield _new(Delivery, (ctag, *unpackb(_TAIL_HEAD + tail)))

    def __getitem__(self, i: int) -> Delivery:
        return list(self)[i]

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def wire(self) -> bytes:
        """The items as msgpack: one list of the Delivery lists, each its tag then its
        tail."""
        n = self.n
        parts = [bytes((0x90 | n,)) if n < 16 else
                 b"\xdc" + n.to_bytes(2, "big") if n < 65536 else b"\xdd" + n.to_bytes(4, "big")]
        for ctag, tails in self.runs:
            if tails:
                head = _DELIVERY_HEAD + packb(ctag)
                parts.append(head)
                parts.append(head.join(tails))
        return b"".join(parts)


class GetReply(NamedTuple):
    req_id: int
    queue: str
    item: Delivery | None  # consumer_tag "", or None for get-empty
    message_count: int
    bodies: list


class Confirm(NamedTuple):
    """Queue -> publishing channel (or, for x-confirm-on=ack-lite, the consuming channel ->
    the publishing one): seq_nos now accepted (ok) or refused (not ok)."""
    queue: str
    seq_nos: list  # the publisher's seq_nos (PublishItem.seq_no)
    ok: bool
    # why refused (the event log's nack reason): "reject-publish" (overflow), "disk" (the
    # store could not write it), "queue_down", "lost" (x-confirm-on: gone before any ack);
    # "" = not said ("internal" in the log)
    reason: str = ""


class ConsumerGone(NamedTuple):
    """Queue -> channel: the consumer was cancelled by the broker (queue deleted)."""
    queue: str
    consumer_tag: str


class Credit(NamedTuple):
    """Queue -> channel: credit_flow bump, `n` more messages and `nbytes` more body bytes may
    be sent to `queue` (actors/core/credit_flow.py)."""
    queue: str
    n: int
    nbytes: int


class Sent(NamedTuple):
    """Writer -> queue: n deliveries from that queue reached the socket (delivery credit)."""
    channel: str
    n: int


class Demand(NamedTuple):
    """Queue -> channel with a global prefetch (basic.qos global=true): a consumer of that
    channel could take a message here, but the queue holds no prefetch token for it."""
    queue: str


class Grant(NamedTuple):
    """Channel -> queue: n more deliveries to the channel's consumers may go out (tokens of the
    channel-wide prefetch; rabbit_limiter's role)."""
    channel: str
    n: int


class Release(NamedTuple):
    """Queue -> channel: n granted tokens the queue cannot use (it ran dry, or its consumers
    there are at their own limit), handed back for other queues."""
    queue: str
    n: int


# --- channel -> channel: direct reply-to (actors/core/direct_reply.py) ----------------------
class DirectReply(NamedTuple):
    """Publishing channel -> the channel a direct reply-to name belongs to (any connection
    worker of the node or cluster): a message published to the default exchange with that name
    as a routing key (or CC/BCC key). Delivered to the reply consumer if `key` is still its own,
    else dropped (rabbit_channel:deliver_reply)."""
    key: str  # the random key of the name (checked by the receiver)
    exchange: str  # the exchange published to ("")
    routing_key: str  # the publish's routing key (basic.deliver's)
    props_raw: bytes  # the encoded properties (BCC removed)
    # the event log's id of the message (None: events off); before `bodies`, which a message
    # that carries bodies ends with
    msg_id: bytes | None
    bodies: list  # [the body]


class ReplyCheck(NamedTuple):
    """Channel -> the channel a direct reply-to name belongs to: a client declared that name;
    answered by RpcReply(ok=True) if it reaches the reply consumer (rabbit_channel's
    declare_fast_reply_to), ok=False if not (also by the connection worker when the channel is
    gone)."""
    reply_to: str
    req_id: int
    key: str


# --- mirrored queues (actors/queue/mirror.py) -----------------------------------------------
class MirrorJoin(NamedTuple):
    """Mirror -> master: add me; answered with a MirrorPublish(reset=True) of everything, or
    (a quorum queue's member offering the log it kept, quorum_log.offer, of the master's
    epoch) of everything after `last`, with MirrorKeep naming the kept ones it still holds."""
    mirror: str  # the mirror's address
    member: str  # its cluster member id
    epoch: int = -1  # the offered log's epoch (-1: none offered)
    last: int = -1  # the offered log's last seq_id
    # ha-sync-mode manual as the mirror's node has it (it has the policy that made it a
    # mirror, which the master's node may not have applied yet): only what enters from now on
    manual: bool = False


class MirrorKeep(NamedTuple):
    """Master -> a joining quorum member whose offered log (up to `upto`) it accepted, before
    the reset batch and before each page of the sync: of the member's messages up to `upto`,
    these the master still holds; the member keeps them (it deletes the others once the sync
    is done)."""
    master: str
    upto: int
    seq_ids: list


class MirrorItem(NamedTuple):
    """One message of a MirrorPublish batch (its body is the batch's bodies[i])."""
    seq_id: int  # its position in the master's queue (the mirror's key for it)
    exchange: str
    routing_key: str
    props_raw: bytes
    persistent: bool
    priority: int
    expires_at_wall_ms: int  # when its TTL ends, in wall-clock ms (the same on any node); 0: never
    msg_id: bytes | None  # its body's name in msg_store; None: the master has not stored it


class MirrorPublish(NamedTuple):
    """Master -> mirror: messages that entered the queue (reset: they are all of them);
    items[i] (a MirrorItem) has body bodies[i]."""
    master: str
    batch: int  # the master's batch number, acknowledged by MirrorAck
    reset: bool
    items: list
    bodies: list


class MirrorSynced(NamedTuple):
    """Master -> a joining mirror of a quorum queue, before the batch it names: once the
    mirror has acknowledged batch `batch` it is synchronised (its index holds the whole log:
    it writes its complete-log marker, actors/store/quorum_log.py)."""
    master: str
    batch: int


class LogQuery(NamedTuple):
    """Cluster leader -> a member's metadata actor: how far does this node's log of quorum
    queue `name` go? Answered by LogPosition (a leader election)."""
    vhost: str
    name: str
    reply_to: str  # the leader's metadata actor
    ref: int  # the election it is for


class LogPosition(NamedTuple):
    """A member's metadata actor -> the cluster leader: `position` is [epoch, last seq_id] of
    the complete log this node holds of the queue, or None (it holds none)."""
    vhost: str
    name: str
    member: str  # the answering node's member id
    ref: int
    position: list | None = None


class MirrorForget(NamedTuple):
    """Master -> mirror: these messages left the queue (acked, expired, dropped, purged); with
    purge_after >= 0, so did every message of priority `priority` after that seq_id (a purge of
    the master's paged-out part, whose seq_ids it does not hold)."""
    master: str
    seq_ids: list
    purge_after: int = -1
    priority: int = 0


class MirrorAck(NamedTuple):
    """Mirror -> master: every batch up to `batch` is accepted."""
    mirror: str
    batch: int


# --- replicated streams (actors/queue/stream_queue.py, actors/queue/stream_member.py) --------
class StreamJoin(NamedTuple):
    """Stream member -> its leader: add me; my log's overview is `overview` ([[epoch, last
    offset], ...], StreamLog.overview). Answered by a StreamChunks with `truncate` set."""
    member_addr: str  # the member's address
    member: str  # its cluster member id
    overview: list


class ChunkHead(NamedTuple):
    """One chunk of a StreamChunks batch: where it sits in the leader's log and what the
    member's copy of its record must say."""
    first: int  # its first offset
    count: int  # how many messages (the next `count` of the batch's items)
    ts: int  # wall-clock ms of the leader's write
    epoch: int  # the leader's epoch when it took these publishes
    bloom: bytes | None  # its filter values' Bloom filter (None: none filtered)


class StreamItem(NamedTuple):
    """One message of a StreamChunks batch (its body is the batch's bodies[i])."""
    exchange: str
    routing_key: str
    props_raw: bytes
    msg_id: bytes | None  # the event log's id (None with events off)


class StreamChunks(NamedTuple):
    """Stream leader -> member: `truncate` >= 0 (the answer to a join): keep your log below
    that offset only, then take chunks from there; then whole chunks of the leader's log in
    order, `chunks` [ChunkHead] (lists on the wire: the member reads each by unpacking) and
    their messages, `items` [StreamItem] in offset order."""
    leader: str
    epoch: int  # the leader's epoch (the queue's in the metadata)
    truncate: int
    chunks: list
    items: list
    bodies: list


class StreamAck(NamedTuple):
    """Stream member -> leader: my log holds, written and synced, every offset below `next`
    (a prefix of the leader's log of `epoch`)."""
    member_addr: str
    epoch: int
    next: int


# --- local only: inside one worker process, never encoded ------------------------------------
# Plain slotted classes (NamedTuples cost more to build on the per-read path); `_TYPES` leaves
# them out, so `encode` refuses them.

# --- local only: connection worker ------------------------------------------------------------
class Data:
    """netio -> Reader: bytes read from the client's socket."""
    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


class SocketClosed:
    """netio / Writer -> Reader: the socket is gone (why: for the log)."""
    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


class Drained:
    """netio -> Writer: everything it wrote is on the wire; held delivery credit can go back."""
    __slots__ = ()


class CreditDue:
    """Timer -> Writer: the delivery credit it held back goes to the queues now."""
    __slots__ = ()


class HeartbeatTick:
    """Timer -> Reader -> Writer: time to check (Reader) or send (Writer) heartbeats."""
    __slots__ = ()


class Block:
    """Channel -> Reader: channel `channel` ran out of credit (on) or has it again (off)."""
    __slots__ = ("channel", "on")

    def __init__(self, channel: int, on: bool):
        self.channel, self.on = channel, on


class Write:
    """Reader / Channel -> Writer: frames to send, and the delivery credit to give back to
    queues once they are on the wire: sent = [((queue address, channel address), n)]."""
    __slots__ = ("data", "sent")

    def __init__(self, data: bytes, sent=None):
        self.data, self.sent = data, sent


class SetHeartbeat:
    """Reader -> Writer: the negotiated heartbeat interval (seconds, 0 = off)."""
    __slots__ = ("seconds",)

    def __init__(self, seconds: int):
        self.seconds = seconds


class CloseConnection:
    """Channel -> Reader: close the whole connection with this error (a hard error)."""
    __slots__ = ("code", "text", "class_id", "method_id")

    def __init__(self, code: int, text: str, class_id: int = 0, method_id: int = 0):
        self.code, self.text, self.class_id, self.method_id = code, text, class_id, method_id


class NodePaused:
    """ConnectionHost -> Channel: the node pauses (pause_minority): cancel every consumer
    (basic.cancel to clients that asked for consumer_cancel_notify) and nack every publish not
    yet confirmed, before the Reader closes the connection with 320."""
    __slots__ = ()


class QueuesGone:
    """ConnectionHost -> Channel: these queues were deleted (transport names, the part of
    their address after '#'); credit_flow credit they withheld is forgiven, as RabbitMQ's
    channel forgets a dead queue's credit when its monitor fires."""
    __slots__ = ("names",)

    def __init__(self, names: set):
        self.names = names


class ChannelFinished:
    """Channel -> Reader: the channel number is free again (`ref`: the channel that ended)."""
    __slots__ = ("number", "ref")

    def __init__(self, number: int, ref):
        self.number, self.ref = number, ref


class Commands:
    """Reader -> Channel: whole AMQP commands for this channel (protocol.frames.Command: method,
    properties, body), in order, one batch per socket read."""
    __slots__ = ("commands",)

    def __init__(self, commands: list):
        self.commands = commands


class Terminate:
    """Reader -> Channel: the connection is gone; release what the channel holds and stop."""
    __slots__ = ()


class CloseSocket:
    """Reader -> Writer: the connection is torn down; flush what is buffered, close the socket
    and stop. `linger` > 0 (after connection.close-ok): the socket is closed only when the
    client closes its end, or after that many seconds (netio.Conn.close)."""
    __slots__ = ("linger",)

    def __init__(self, linger: float = 0.0):
        self.linger = linger


class Shutdown:
    """ConnectionHost -> Reader: the worker stops; close the connection with 320
    CONNECTION_FORCED, as RabbitMQ does at shutdown."""
    __slots__ = ()


class CloseTimeout:
    """Timer -> Reader: connection.close-ok did not come back in time; tear the connection
    down."""
    __slots__ = ()


# --- local only: queue worker -----------------------------------------------------------------
# Queue (and Mirror) -> BackingQueue: what the storage half of a queue is told. `msgs` are the
# queue core's Msg records (actors/core/queue.py).
class Persist:
    """Queue -> BackingQueue: store these messages (persistent ones of a durable queue, or a
    promoted mirror's); answered by Persisted once synced, or Refused (disk full)."""
    __slots__ = ("msgs",)

    def __init__(self, msgs: list):
        self.msgs = msgs


class RecordDelivery:
    """Queue -> BackingQueue: these stored messages went to a consumer for the first time (the
    deliver records: after a crash they come back redelivered=true)."""
    __slots__ = ("msgs",)

    def __init__(self, msgs: list):
        self.msgs = msgs


class Forget:
    """Queue -> BackingQueue: these stored messages left the queue (acked, dropped,
    dead-lettered): ack records, and their bodies released from msg_store."""
    __slots__ = ("msgs",)

    def __init__(self, msgs: list):
        self.msgs = msgs


class Recover:
    """Queue -> BackingQueue: read the index back at start, at most `limit` messages into memory
    (None: all); answered by Recovered. `adopt`: a promoted mirror's queue: the index holds what
    the mirror paged out (transient ones too: keep them, and a transient queue's index is not
    wiped)."""
    __slots__ = ("limit", "adopt", "after")

    def __init__(self, limit, adopt: bool = False, after=None):
        self.limit, self.adopt = limit, adopt
        self.after = after or {}  # priority -> the adopted in-memory part ends at this seq_id


class PageIn:
    """Queue -> BackingQueue: the next `n` paged-out messages after seq_id `after_seq` of one
    priority's lane (0 without x-max-priority); answered by Paged."""
    __slots__ = ("after_seq", "n", "priority", "sync")

    def __init__(self, after_seq: int, n: int, priority: int = 0, sync: bool = False):
        self.after_seq, self.n, self.priority = after_seq, n, priority
        self.sync = sync  # read for a joining mirror's sync: the queue's paged part unchanged


class PurgeAfter:
    """Queue -> BackingQueue: the queue was purged; drop the paged-out messages (index entries
    after seq_id `after_seq`) of one priority's lane."""
    __slots__ = ("after_seq", "priority")

    def __init__(self, after_seq: int, priority: int = 0):
        self.after_seq, self.priority = after_seq, priority


class DropPaged:
    """Queue -> BackingQueue: drop-head took the next `n` paged-out messages after seq_id
    `after_seq` of a priority's lane: settle them unread; answered by PagedDropped."""
    __slots__ = ("after_seq", "n", "priority")

    def __init__(self, after_seq: int, n: int, priority: int = 0):
        self.after_seq, self.n, self.priority = after_seq, n, priority


class PagedDropped:
    """BackingQueue -> Queue (local only): `n` paged messages of `nbytes` dropped (their
    seq_ids: the mirrors forget them too), the last with seq_id `last_seq` (0 if none);
    `pers` of them persistent, of `pers_bytes` (messages_persistent)."""
    __slots__ = ("priority", "n", "nbytes", "last_seq", "seq_ids", "pers", "pers_bytes")

    def __init__(self, priority: int, n: int, nbytes: int, last_seq: int, seq_ids=(),
                 pers: int = 0, pers_bytes: int = 0):
        self.priority, self.n, self.nbytes, self.last_seq = priority, n, nbytes, last_seq
        self.seq_ids = seq_ids
        self.pers, self.pers_bytes = pers, pers_bytes


class DeleteIndex:
    """Queue (deleted), Mirror (starting) -> BackingQueue: drop the queue's whole index."""
    __slots__ = ()


class LogBarrier:
    """Mirror -> BackingQueue -> Mirror (local only): sent back as it is, once everything told
    to the backing queue before it is done (a quorum member's index drop, before its marker)."""
    __slots__ = ()


class KeepOnly:
    """Mirror -> BackingQueue (local only): of the index's entries up to `upto`, delete those
    not in `keep` (a kept log's messages its master no longer holds)."""
    __slots__ = ("upto", "keep")

    def __init__(self, upto: int, keep):
        self.upto, self.keep = upto, keep


class CheckMaster:
    """QueueHost -> Mirror: the queue's definition changed; join again if its master moved."""
    __slots__ = ()


class TakeMessages:
    """QueueHost -> Mirror (ask): promotion; the answer is an Adopted; the mirror leaves the
    transport."""
    __slots__ = ()


class StoredMessage(NamedTuple):
    """A message read back from a queue's index (Paged, Recovered) or handed over by a promoted
    mirror (Adopted), as QueueCore restores it."""
    entry: Any  # its queue_index.IndexEntry (seq_id, msg_id, exchange, ...)
    body: bytes
    persistent: bool  # its delivery mode is 2 (or its queue stores every message)


class Adopted(NamedTuple):
    """A promoted mirror's answer to TakeMessages, which the new master Queue restores from."""
    messages: list  # [StoredMessage] the mirror held in memory, in seq_id order
    # the priorities it paged out to this node's index for the queue (written before the
    # answer; the persistent in-memory ones of those priorities of a durable queue are there
    # too)
    paged: list


# --- local only: queue worker (backing queue and host -> queue) ------------------------------
class Persisted:
    """BackingQueue -> Queue (local only): these messages are safe now."""

    __slots__ = ("msgs",)

    def __init__(self, msgs):
        self.msgs = msgs


class Stored:
    """BackingQueue -> Queue (local only): `nbytes` of bodies given in `Persist` are written
    (not necessarily synced): the queue's credit towards its backing queue."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        self.nbytes = nbytes


class Refused:
    """BackingQueue -> Queue (local only): these could not be stored (disk full)."""

    __slots__ = ("msgs",)

    def __init__(self, msgs):
        self.msgs = msgs


class Paged:
    """BackingQueue -> Queue (local only): the next page of paged-out messages of one
    priority's lane, [StoredMessage], and how many stale transient entries were dropped."""

    __slots__ = ("entries", "dropped", "dropped_bytes", "priority", "sync")

    def __init__(self, entries, dropped, dropped_bytes, priority=0, sync=False):
        self.entries, self.dropped, self.dropped_bytes = entries, dropped, dropped_bytes
        self.priority = priority
        self.sync = sync  # the answer to a PageIn for a mirror's sync


class Recovered:
    """BackingQueue -> Queue (local only): what the index kept: the next seq_id, the first
    page of messages [StoredMessage], how many more and their bytes (lists by priority for a
    priority queue: each priority has an index of its own)."""

    __slots__ = ("next_seq_id", "entries", "more", "more_bytes")

    def __init__(self, next_seq_id, entries, more, more_bytes):
        self.next_seq_id, self.entries, self.more, self.more_bytes = \
            next_seq_id, entries, more, more_bytes


class ChannelsDown:
    """QueueHost -> Queue (local only): every channel of a dead connection worker."""

    __slots__ = ("prefix",)

    def __init__(self, prefix):
        self.prefix = prefix


class Admitted:
    """ConnectionHost -> Reader (local only): the node's answer to a connection.open
    (channel 0) or channel.open (its number) that waited for its vhost/user limit count."""

    __slots__ = ("channel", "ok", "code", "text")

    def __init__(self, channel, ok, code=0, text=""):
        self.channel = channel  # 0: the connection; else the channel number
        self.ok = ok  # admitted
        self.code = code  # 530 when refused
        self.text = text  # RabbitMQ's refusal text


class PolicyChanged:
    """QueueHost -> Queue (local only): policies changed; recompute what they decide."""

    __slots__ = ()


class MirrorsDown:
    """QueueHost -> Queue (local only): a queue worker died; mirrors in it are gone."""

    __slots__ = ("endpoint",)

    def __init__(self, endpoint):
        self.endpoint = endpoint


# --- local only: node (supervisor, pysyncobj -> metadata actor) -------------------------------
class WorkerExited:
    """Supervisor -> metadata (local only): a worker process ended."""

    __slots__ = ("kind", "index", "endpoint")

    def __init__(self, kind: str, index: int, endpoint: str):
        self.kind, self.index, self.endpoint = kind, index, endpoint


class ReadyWorkers:
    """Supervisor -> metadata (local only, ask): the (kind, index) of every worker ready."""

    __slots__ = ()


class DurableQueues:
    """Supervisor -> metadata (local only, ask): the (vhost, name, arguments) of every durable
    queue this node holds (home or mirror): the indexes to keep at boot (a priority queue's
    priorities have one each)."""

    __slots__ = ()


class StatsTimeout:
    """Timer thread -> metadata (local only): the workers' statistics for `gather` are late;
    answer with what came."""

    __slots__ = ("gather",)

    def __init__(self, gather: dict):
        self.gather = gather


class ClusterEntry:
    """pysyncobj thread -> metadata (local only): entry `seq` of the log was applied."""

    __slots__ = ("seq", "entry")

    def __init__(self, seq, entry):
        self.seq, self.entry = seq, entry


class ClusterTick:
    """Node -> metadata (local only): look at leadership and member connectivity."""

    __slots__ = ()


class ClusterReady:
    """Node -> metadata (local only, ask): is the definitions log loaded and caught up? Loads
    it the first time it is (True), else False."""

    __slots__ = ()


class AlarmsChanged:
    """Node's supervision thread -> metadata (local only): the resource monitor set or cleared
    an alarm; `alarms` is every alarm now on."""

    __slots__ = ("alarms",)

    def __init__(self, alarms):
        self.alarms = alarms


class NodeTick:
    """Node's supervision thread -> metadata (local only), every collect_statistics_interval:
    what it measured of the node process and its workers (node_stats.measure), for the node's
    sample (NodeStats)."""

    __slots__ = ("figures",)

    def __init__(self, figures: dict):
        self.figures = figures


class CommitFailed:
    """pysyncobj thread -> metadata (local only): the log entry `token` this node submitted as
    leader in `epoch` was not committed."""

    __slots__ = ("epoch", "token")

    def __init__(self, epoch, token: int):
        self.epoch, self.token = epoch, token


_TYPES: list[type] = [
    Rpc, RpcReply, MetaChange, MetaSnapshot, WorkerDown, StartQueue, QueueStarted,
    Publish, Consume, Cancel, Settle, Get, ChannelDown, SetLimit, QueueOp,
    Deliver, GetReply, Confirm, ConsumerGone, Credit, Sent, Demand, Grant, Release,
    MetaApplied, MirrorJoin, MirrorPublish, MirrorForget, MirrorAck, PeerApplied,
    ResourceAlarm, DirectReply, ReplyCheck, QueueStats, ConnectionStats, ForceClose,
    WorkerStats, WorkerUp, Pause, NodeStats, MirrorSynced, LogQuery, LogPosition,
    MirrorKeep, ShovelStates, StreamJoin, StreamChunks, StreamAck, QueueDown,
]
_TAG = {cls: i for i, cls in enumerate(_TYPES)}
_HAS_BODIES = {cls: cls._fields[-1] == "bodies" for cls in _TYPES}


def encode(msg) -> tuple[bytes, list]:
    """-> (msgpack payload, the frames after it: [the bodies joined] or none)."""
    cls = type(msg)
    if _HAS_BODIES[cls]:
        bodies = msg[-1]
        if cls is Deliver and type(msg.items) is PackedDeliveries:
            return _packed_deliver(msg)
        lengths = [len(b) for b in bodies]
        if not bodies:
            return packb((_TAG[cls], *msg[:-1], lengths)), ()
        blob = bodies[0] if len(bodies) == 1 else b"".join(bodies)
        return packb((_TAG[cls], *msg[:-1], lengths)), (blob,)
    return packb((_TAG[cls], *msg)), ()


def _packed_deliver(msg: Deliver) -> tuple[bytes, list]:
    """encode's Deliver of PackedDeliveries: the same bytes as of its Delivery records."""
    bodies = msg.bodies
    head = packb((_TAG[Deliver], msg.queue, msg.qname))[1:]  # (less the 3-list's header)
    payload = b"".join((b"\x95", head, msg.items.wire(), packb(list(map(len, bodies)))))
    if not bodies:
        return payload, ()
    return payload, (bodies[0] if len(bodies) == 1 else b"".join(bodies),)


class Malformed(ValueError):
    """A message from another process that is not one this module encodes: refused on receipt
    (the transport logs it with what it can tell of its sender and drops it)."""


# Checked on receipt, cheaply (decode runs for every message between processes): the tag, the
# field count, every field's type (as annotated), that bodies match their frame, the shape of
# batch items and the elements receivers use as keys (seq numbers, consumer tags), which are
# handed over as the named records the sender built (PublishItem, Delivery, MirrorItem: msgpack
# sends a NamedTuple as a list). Other elements of an item are checked where they are used.

# what an annotation means on the wire: the types a received field may have (a bool field
# takes an int too: a truth value; None: not checked)
_WIRE_TYPES: dict[str, Any] = {
    "str": str, "int": int, "bool": int, "dict": dict, "list": list, "bytes": bytes,
    "list | None": (list, type(None)), "Delivery | None": (list, type(None)),
    "bytes | None": (bytes, type(None)), "Any": None,
}
_INTS = frozenset((int,))
_new = tuple.__new__


def _publish_items(items: list) -> list | None:
    """The PublishItems of a Publish's list of lists (msg_id may be left out), or None if one
    is not one (its seq_no is the key the publisher's confirm comes back by)."""
    # one comprehension for the whole items a current sender sends (a loop that appends
    # costs twice as much a message); the rest is the rare case
    out = [_new(PublishItem, it) for it in items
           if type(it) is list and len(it) == 8 and type(it[0]) is int]
    if len(out) == len(items):
        return out
    out = []
    for it in items:
        if type(it) is not list or not 7 <= len(it) <= 8 or type(it[0]) is not int:
            return None
        out.append(_new(PublishItem, it) if len(it) == 8 else PublishItem(*it))
    return out


def _one_body(items: list) -> list | None:
    """DirectReply: exactly one body (its properties are checked as a field)."""
    return items if len(items) == 1 else None


def _deliveries(items: list) -> list | None:
    """The Deliveries of a Deliver's (or GetReply's) list of lists (older senders leave out
    the fields that have defaults), or None if one is not one (its consumer tag and seq_id
    are the keys the channel acts by)."""
    out = [_new(Delivery, it) for it in items
           if type(it) is list and len(it) == 9 and type(it[0]) is str and type(it[1]) is int]
    if len(out) == len(items):
        return out
    out = []
    for it in items:
        if type(it) is not list or not 6 <= len(it) <= 9 or type(it[0]) is not str or \
                type(it[1]) is not int:
            return None
        out.append(_new(Delivery, it) if len(it) == 9 else Delivery(*it))
    return out


def _mirror_items(items: list) -> list | None:
    """The MirrorItems of a MirrorPublish's list of lists, or None if one is not one (its
    seq_id is the mirror's key)."""
    out = [_new(MirrorItem, it) for it in items
           if type(it) is list and len(it) == 8 and type(it[0]) is int]
    return out if len(out) == len(items) else None


def _stream_items(items: list) -> list | None:
    """The StreamItems of a StreamChunks' list of lists, or None if one is not one."""
    out = []
    for it in items:
        if type(it) is not list or len(it) != 4:
            return None
        out.append(_new(StreamItem, it))
    return out


def _wire_type(annotation):
    """The types a field annotated so may have on the wire (a NamedTuple keeps its annotations
    as written: strings, under `from __future__ import annotations`)."""
    return _WIRE_TYPES[getattr(annotation, "__forward_arg__", annotation)]


def _spec(cls: type) -> tuple:
    """How messages of one type are checked on receipt, from its NamedTuple fields: (cls, least
    and most wire-list length, (index, types) of the fields always there, of those older
    senders may leave out, index of a list of ints (0: none), whether it carries bodies, and
    its items' check)."""
    n = len(cls._fields)
    lo = n - len(cls._field_defaults)
    checks = [(i + 1, _wire_type(cls.__annotations__[f])) for i, f in enumerate(cls._fields)
              if f != "bodies"]
    checks = [(i, t) for i, t in checks if t is not None]
    ints = {Confirm: "seq_nos", Settle: "seq_ids", MirrorForget: "seq_ids",
            MirrorKeep: "seq_ids"}.get(cls)
    items = {Publish: _publish_items, Deliver: _deliveries, MirrorPublish: _mirror_items,
             GetReply: _deliveries, DirectReply: _one_body,
             StreamChunks: _stream_items}.get(cls)
    return (cls, lo + 1, n + 1, tuple((i, t) for i, t in checks if i <= lo),
            tuple((i, t) for i, t in checks if i > lo),
            1 + cls._fields.index(ints) if ints else 0, _HAS_BODIES[cls], items)


_SPECS = {tag: _spec(cls) for tag, cls in enumerate(_TYPES)}
_UNPACK_ERRORS = (ValueError, TypeError, ArithmeticError, OSError, UnpackException)


def decode(payload: bytes, frames: list):
    """The message `encode` made of it, checked (see above); Malformed if it is not one."""
    try:
        fields = unpackb(payload)
    except _UNPACK_ERRORS as e:  # arbitrary bytes: any of msgpack's refusals
        raise Malformed(f"undecodable payload ({type(e).__name__}: {e})") from None
    if type(fields) is not list:
        raise Malformed(f"a payload that is a {type(fields).__name__}, not a list")
    try:
        cls, lo, hi, required, optional, ints, has_bodies, items = _SPECS[fields[0]]
    except (KeyError, TypeError, IndexError):
        raise Malformed(f"unknown tag {fields[0]!r:.40}" if fields else "no tag") from None
    n = len(fields)
    if not lo <= n <= hi:
        raise Malformed(f"{cls.__name__} with {n - 1} fields")
    for i, types in required:
        if not isinstance(fields[i], types):
            raise _field_error(cls, fields, i)
    for i, types in optional:
        if i < n and not isinstance(fields[i], types):
            raise _field_error(cls, fields, i)
    if ints and not _INTS.issuperset(map(type, fields[ints])):
        raise Malformed(f"{cls.__name__}.{cls._fields[ints - 1]} holds a non-int")
    if not has_bodies:
        if frames:
            raise Malformed(f"{cls.__name__} with {len(frames)} frames after it")
        # tuple.__new__: the NamedTuple without its __new__'s argument handling (the count is
        # checked), unless an older sender left out fields that have defaults
        return _new(cls, fields[1:]) if n == hi else cls(*fields[1:])
    bodies = _bodies(cls.__name__, fields[-1], frames)
    if cls is GetReply:
        listed = [] if fields[3] is None else [fields[3]]
    elif cls is DirectReply:
        listed = [fields[-2]]  # one message: its properties, then its body
    else:
        listed = fields[-2]
    records = items(listed) if len(listed) == len(bodies) else None
    if records is None:
        raise Malformed(f"{cls.__name__} with {len(listed)} items for {len(bodies)} bodies: "
                        f"{listed!r:.80}")
    if cls is GetReply:
        fields[3] = records[0] if records else None
    elif cls is not DirectReply:
        fields[-2] = records  # the named records the receiver reads
    fields[-1] = bodies
    return _new(cls, fields[1:])


def _field_error(cls: type, fields: list, i: int) -> Malformed:
    return Malformed(f"{cls.__name__}.{cls._fields[i - 1]} is a {type(fields[i]).__name__}")


def _bodies(what: str, lengths, frames: list) -> list:
    """The bodies cut out of their joined frame, which must be exactly as long as announced."""
    if type(lengths) is not list:
        raise Malformed(f"{what}: bodies' lengths are a {type(lengths).__name__}")
    if not lengths:
        if frames:
            raise Malformed(f"{what} with no bodies and {len(frames)} frames after it")
        return []
    if len(frames) != 1:
        raise Malformed(f"{what} with {len(lengths)} bodies in {len(frames)} frames")
    blob = frames[0]
    if len(lengths) == 1:
        if lengths[0] != len(blob) or type(lengths[0]) is not int:
            raise Malformed(f"{what}: a body of {lengths[0]!r:.20} bytes announced, "
                            f"{len(blob)} received")
        return [bytes(blob)]
    blob = bytes(blob)
    bodies, at = [], 0
    try:
        for n in lengths:
            bodies.append(blob[at:at + n])
            at += n
    except TypeError:
        raise Malformed(f"{what}: body lengths {lengths!r:.60}") from None
    if at != len(blob):  # (a negative length only cuts other bodies than announced)
        raise Malformed(f"{what}: bodies of {at} bytes announced, {len(blob)} received")
    return bodies


_SENDER_FIELDS = ("sender", "reply_to", "queue", "channel", "mirror", "master", "address")


def claimed_sender(payload: bytes) -> str:
    """The sender's address a (malformed) message claims, when its tag is known and it names one
    (for the log only: it is what the message says, not who sent it); "" otherwise."""
    try:
        fields = unpackb(payload)
        cls = _TYPES[fields[0]]
        for f in _SENDER_FIELDS:
            if f in cls._fields:
                value = fields[1 + cls._fields.index(f)]
                return value[:200] if isinstance(value, str) else ""
    except Exception:  # noqa: BLE001 - best effort on bytes already known to be bad
        pass
    return ""
