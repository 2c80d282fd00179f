"""The channel's logic without IO: AMQP channel-class, exchange, queue, basic, confirm and tx
methods for one channel.

Mirrors rabbit_channel.erl: routing publishes through the local exchange/binding table, publisher
confirm bookkeeping (seq no -> queues still to confirm, multiple=true runs), delivery tags and
the unacked map, prefetch (basic.qos) passed to the queues, transactions, consumer bookkeeping,
and the errors RabbitMQ raises with their texts. The actor shell (actors/connection/channel_process.py)
feeds it whole commands and queue/node messages through `handle` (actors/core/channel_dispatch.py's
table) and carries out what it asks through `out`, its `ChannelPort` of named callables:

- `write(data: bytes, sent=None)`   frames to the client; `sent` is [(queue, n)] delivery credit
- `send(address, msg)`              a message to a queue or the node
- `is_dead(address)`                is the process of that address known dead (no answer comes)
- `close_connection(code, text, class_id, method_id)`  a hard error
- `block()` / `unblock()`           credit_flow: stop / resume reading the socket
- `closed()`                        the channel is finished (after close-ok)
- `now_ms()`                        now, monotonic ms (read by `handle` for what needs it)

It never raises on client input: errors become channel.close or a connection close.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import struct
from collections import OrderedDict, deque
from typing import Callable, NamedTuple

from actors.core import (NO_EVENTS, channel_dispatch, credit_flow, direct_reply, policies,
                         routing, sender_selected, stream)
from actors.core.channel_stats import ChannelCounters
from actors.core.confirms import Confirms, LiteConfirms
from actors.core.limiter import Limiter
from actors import messages as m
from actors import metadata_ops as ops
from actors.core.erl_terms import Atom, erl_p
from actors.core.errors import (AMQPError, ChannelError, ConnectionError_, amqp_text,
                                is_hard_error, resource_locked)
from actors.core.permissions import topic_access_refused
from protocol import methods as am
from protocol.codec_errors import AMQPError as CodecError
from protocol.frames import deliver_parts, encode_content, encode_deliver, encode_method
from protocol.properties import BasicProperties, with_reply_to

CONFIRM_FLUSH = object()


class ChannelConsumer(NamedTuple):
    """One basic.consume of the channel, as rabbit_channel's consumer_mapping keeps it (the
    management API's consumer rows read it)."""
    queue_addr: str  # the consumed queue's address
    queue: str  # the queue's name
    no_ack: bool  # basic.consume no-ack
    exclusive: bool = False  # basic.consume exclusive
    arguments: dict = {}  # the consume arguments (x-priority, x-cancel-on-ha-failover...)


class Unacked(NamedTuple):
    """A delivery the client has not settled yet (rabbit_channel's unacked_message_q entry;
    the queue keeps its own side: QueueCore.unacked)."""
    queue: str  # the queue's address: where its Settle goes
    seq_id: int  # its position in that queue
    consumer_tag: str  # the consumer it went to; "": basic.get
    # x-confirm-on=ack-lite: the publishing channel this one confirms to on ack, and that
    # publisher's seq_no ("", 0: none)
    publisher: str
    seq_no: int
    msg_id: bytes | None  # the event log's message id (events on), else None
    delivered_at: int  # ms, the caller's clock: the consumer timeout counts from here


class ReplyConsumer(NamedTuple):
    """The channel's consumer on amq.rabbitmq.reply-to (actors/core/direct_reply.py)."""
    consumer_tag: str
    name: str  # the generated reply-to name its requests carry
    key: str  # the random part of that name, which a DirectReply must match


class HeldPublish(NamedTuple):
    """A publish of a transaction, routed at publish time, sent to its queues at tx.commit."""
    targets: list  # the addresses of the queues it goes to
    item: m.PublishItem
    body: bytes
    method: am.BasicPublish
    cmd: object  # the protocol.frames.Command it came in


class HeldSettle(NamedTuple):
    """An ack, nack or reject of a transaction, applied at tx.commit (or undone by rollback)."""
    entries: list  # [(delivery tag, Unacked)] it settles
    op: int  # messages.ACK, REQUEUE or DISCARD
    kind: str  # its event: "acked", "nacked" or "rejected"


class ConnInfo:
    """What the channel knows of its connection."""

    __slots__ = ("owner", "user", "vhost", "frame_max", "capabilities", "node")

    def __init__(self, owner, user, vhost, frame_max, capabilities, node):
        self.owner = owner  # connection id (exclusive-queue owner)
        self.user = user  # authenticated user name
        self.vhost = vhost  # virtual host of the connection
        self.frame_max = frame_max  # negotiated frame_max
        self.capabilities = capabilities  # client capabilities table
        self.node = node  # the node's metadata actor address


class RefusedPublish:
    """In a Commands batch in place of a basic.publish whose content header the reader refused
    (max_message_size, protocol/frames.py CommandAssembler): the channel closes with `error`,
    in order with the commands before it, as rabbit_channel:check_msg_size does."""

    __slots__ = ("error",)
    CLASS_ID, METHOD_ID, NAME = am.BasicPublish.CLASS_ID, am.BasicPublish.METHOD_ID, \
        am.BasicPublish.NAME

    def __init__(self, error: AMQPError):
        self.error = error  # the 406 PRECONDITION_FAILED to close the channel with


@dataclasses.dataclass(frozen=True, slots=True)
class ChannelPort:
    """What ChannelCore may do outside itself: its Channel actor's callables, named one by one
    (as ConnectionPort), so the core never reaches into its actor."""

    write: Callable[..., None]  # (data, sent=None) frames to the Writer, with delivery credit
    send: Callable[[str, object], None]  # (address, msg) over the transport
    is_dead: Callable[[str], bool]  # is that address's process known dead
    close_connection: Callable[[int, str, int, int], None]  # a hard error: to the Reader
    block: Callable[[], None]  # credit_flow: the Reader stops reading the socket
    unblock: Callable[[], None]  # ... and resumes
    closed: Callable[[], None]  # the channel is finished: the Reader forgets it
    now_ms: Callable[[], int]  # now, monotonic ms
    events: object = NO_EVENTS  # the event log (actors.events in the shell)
    random_bytes: Callable[[int], bytes] = os.urandom  # ids: msg id prefix, consumer tags
    clock: Callable[[], float] | None = None  # seconds, monotonic (confirm latency); None: off

    @classmethod
    def of(cls, shell, send, **given) -> ChannelPort:
        """The port of an object that has every callable by its name (the Channel actor) but
        `send`, the transport's own (so a send costs no extra call), and what is `given` (the
        event log, ids, the clock), which are the process's, not the actor's."""
        return cls(send=send, **given, **{f.name: getattr(shell, f.name)
                                          for f in dataclasses.fields(cls)
                                          if f.name != "send" and f.default is dataclasses.MISSING})


class ChannelCore:
    def __init__(self, number: int, address: str, conn: ConnInfo, replica, out: ChannelPort,
                 credit_initial=credit_flow.INITIAL,
                 credit_initial_bytes=credit_flow.INITIAL_BYTES, consumer_timeout=0,
                 consumer_timeout_action="close-channel"):
        # the port's event log, ids and clock, kept at hand (read on every publish)
        self.events = out.events
        self.clock = out.clock
        # what the statistics sample reads (channel_stats.py)
        self.stats = ChannelCounters(conn.vhost)
        self.published_at: dict[int, float] = {}  # confirm seq no -> clock() at publish
        self.random_bytes = out.random_bytes
        # the last publish's properties as checked: a publisher repeats its properties, they
        # are decoded and checked once
        self.last_props: _Props = _NO_PROPS
        self.number = number  # channel number
        self.address = address  # this channel's transport address
        self.conn = conn  # connection facts
        self.replica = replica  # metadata replica (routing, permissions, queue table)
        self.out = out  # what it may do outside itself (ChannelPort, see module docstring)
        self.state = "open"  # open | closing (sent channel.close) | closed
        self.confirm = False  # confirm.select seen
        self.tx = False  # tx.select seen
        self.tx_publishes: list[HeldPublish] = []  # held until tx.commit
        self.tx_settles: list[HeldSettle] = []  # held until tx.commit
        self.next_seq_no = 1  # next publish seq_no (confirm mode)
        # seq no -> queue addresses still to confirm, and what this turn settled
        self.confirms = Confirms()
        self.next_tag = 1  # next delivery tag
        self.unacked: OrderedDict[int, Unacked] = OrderedDict()  # delivery tag -> its delivery
        # S5 consumer timeout (rabbit_channel's consumer_timeout): the node's default in ms
        # (0 = none), each queue's own (x-consumer-timeout / policy, else the default), the
        # time of the next check (0 = none due) and the last time the caller passed in
        self.consumer_timeout = consumer_timeout
        # what a timeout does: "close-channel" (RabbitMQ 3.x: 406) or "cancel-consumer"
        # (RabbitMQ 4.3: basic.cancel, deliveries back to the queue, the channel stays open)
        self.consumer_timeout_action = consumer_timeout_action
        # delivery tags returned to their queue by a cancel-consumer timeout: a late ack,
        # nack or reject of one is taken and does nothing (the message is back in its queue)
        self.timed_out_tags: set[int] = set()
        self.queue_timeouts: dict[str, int] = {}  # queue address -> timeout ms (0 = none)
        self.check_at = 0  # when consumer_timeout_check should run next (ms), 0 = not needed
        self.now = 0  # ms: the time of the message being handled (on_deliver, on_reply)
        self.lite_confirms = LiteConfirms()  # (publisher, queue) -> seq nos our acks confirm
        self.consumers: dict[str, ChannelConsumer] = {}  # consumer tag -> its consume
        self.prefetch = 0  # basic.qos global=false: limit for consumers created afterwards
        self.limiter = Limiter()  # basic.qos global=true: the channel's limit and its tokens
        # rabbit_limiter's role for global=true: queues ask for tokens (Demand), the channel
        # grants what the limit leaves free; a token becomes an unacked delivery or comes back
        self.queues_used: set = set()  # queues with our consumers or unacked deliveries
        # streams consumed on this channel: address -> name (their deliveries cannot be
        # nacked or rejected, actors/core/stream.py settle_refused)
        self.streams: dict = {}
        self.publish_batches: dict[str, tuple[list, list]] = {}  # queue -> (items, bodies)
        self.settle_batches: dict[tuple, list] = {}  # (queue, op) -> seq_ids
        # credit_flow's sending half: messages and body bytes each queue may still be sent
        self.credit = credit_flow.SenderCredit(credit_initial, credit_initial_bytes)
        self.blocked = False  # the reader was told to stop
        self.waiting: dict[int, object] = {}  # req id -> continuation(reply)
        self.asked: dict[int, str] = {}  # req id -> the queue or worker asked (not the node)
        self.sync_wait = 0  # req id whose reply must come before more commands
        self.backlog: deque = deque()  # commands held while sync_wait
        self.next_req = 1  # request ids
        self.msg_id_prefix = self.random_bytes(8)  # msg ids: this prefix + a counter, node-wide
        self.msg_counter = 0  # persistent messages published on this channel
        self.seq_msg: dict[int, bytes] = {}  # confirm seq no -> msg_id (event log only)
        self.exchange_ok: dict[str, object] = {}  # exchange name -> ExchangeDef (write checked)
        # (exchange, routing key) -> (queue names, their addresses: None where unset); valid
        # while the replica has the version `routes_version` (exchange_ok too)
        self.routes: dict[tuple, tuple] = {}
        self.routes_version = replica.version
        # (exchange, routing key) -> the alternate exchanges a publish passes (event log only),
        # valid while the replica has the version `event_hops_version`
        self.event_hops: dict[tuple, tuple | None] = {}
        self.event_hops_version = replica.version
        # direct reply-to (actors/core/direct_reply.py): the channel's consumer on
        # amq.rabbitmq.reply-to, or None
        self.reply_consumer: ReplyConsumer | None = None
        # basic.cancel notifications that came while a reply was awaited (sync_wait): sent
        # after that reply, as rabbit_channel handles its mailbox after its call returns
        self.held_cancels: list[str] = []

    # --- entry points -------------------------------------------------------------------------
    def handle(self, msg) -> None:
        """The one entry for the messages of its connection, queues and node
        (channel_dispatch's table); anything else is not the core's and is ignored."""
        handler = _TABLE.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def handle_commands(self, commands) -> None:
        for cmd in commands:
            if self.sync_wait:
                if isinstance(cmd.method, am.ChannelClose):
                    # channel.close is served at once, whatever the channel waits for
                    self.sync_wait = 0
                    self.waiting.clear()
                    self.asked.clear()
                    self.backlog.clear()
                else:
                    self.backlog.append(cmd)
                    continue
            self._one(cmd)
        self.flush()

    def _one(self, cmd) -> None:
        method = cmd.method
        if self.state == "closing":
            if isinstance(method, am.ChannelCloseOk):
                self._finish()
            elif isinstance(method, am.ChannelClose):
                self.out.write(encode_method(self.number, am.ChannelCloseOk()))
            return
        if self.state == "closed":
            return
        handler = _HANDLERS.get(type(method))
        try:
            if handler is None and method.CLASS_ID == am.ConnectionStart.CLASS_ID:
                raise ConnectionError_(503, f"{method.NAME} on channel {self.number}",
                                       method.CLASS_ID, method.METHOD_ID)
            if handler is None:
                raise ConnectionError_(540, f"{method.NAME} not implemented on a channel",
                                       method.CLASS_ID, method.METHOD_ID)
            handler(self, method, cmd)
        except CodecError as e:  # content properties are decoded lazily, here
            self.error(ConnectionError_(e.reply_code, e.text, method.CLASS_ID, method.METHOD_ID))
        except AMQPError as e:
            if not e.class_id:
                e = e.with_method(method.CLASS_ID, method.METHOD_ID)
            self.error(e)

    def error(self, e: AMQPError) -> None:
        if isinstance(e, ConnectionError_) or is_hard_error(e.reply_code):
            self.out.close_connection(e.reply_code, e.text, e.class_id, e.method_id)
            return
        self.flush()  # this turn's confirms go out before the channel.close
        self.out.write(encode_method(self.number, am.ChannelClose(
            reply_code=e.reply_code, reply_text=e.text, class_id=e.class_id,
            method_id=e.method_id)))
        self._release()
        self.state = "closing"

    def _release(self) -> None:
        """Requeue what the channel holds: every unacked delivery goes back to its queue."""
        self.flush()
        if self.events.enabled():
            self.events.emit("channel_closed", None, actor="channel", vhost=self.conn.vhost,
                             connection=self.conn.owner, channel=self.number,
                             unacked=len(self.unacked))
        for q in self.queues_used:
            self.out.send(q, m.ChannelDown(self.address))
        self.queues_used = set()
        self.unacked.clear()
        self.check_at = 0
        self.consumers.clear()
        self.reply_consumer = None
        self.confirms.clear()
        self.published_at.clear()
        self.limiter.reset()
        if self.blocked:
            self.blocked = False
            self.out.unblock()

    def _finish(self) -> None:
        self.state = "closed"
        self.out.closed()

    def terminate(self) -> None:
        """The connection is gone: release everything, say nothing."""
        if self.state != "closed":
            self._release()
            self.state = "closed"

    # --- replies from queues and the node --------------------------------------------------
    def on_reply(self, reply, now: int = 0) -> None:
        self.now = now
        self.asked.pop(reply.req_id, None)
        cont = self.waiting.pop(reply.req_id, None)
        if cont is not None and self.state == "open":
            try:
                cont(reply)
            except AMQPError as e:
                self.error(e)
        if reply.req_id == self.sync_wait:
            self.sync_wait = 0
            self._send_held_cancels()
            while self.backlog and not self.sync_wait:
                self._one(self.backlog.popleft())
        self.flush()

    def _ask(self, address, make_msg, cont, sync=True) -> None:
        self.flush()  # what came before the request reaches its queue first
        req = self.next_req
        self.next_req += 1
        self.waiting[req] = cont
        if sync:
            self.sync_wait = req
        if address == self.conn.node:
            self.out.send(address, make_msg(req))
        elif self.out.is_dead(address):  # no answer will come: as if it had said so
            self.on_reply(self._gone(req, address))
        else:
            self.asked[req] = address
            self.out.send(address, make_msg(req))

    def _gone(self, req: int, address: str) -> m.RpcReply:
        """The answer to a request whose queue (or reply-to channel) is on a dead worker or
        node: RabbitMQ's 404 for a queue whose home node is down."""
        tag, _, rest = address.partition("#")[2].partition("\x1f")
        vhost, _, name = rest.partition("\x1f")
        if tag != "q":  # not a queue: a channel asked for direct reply-to
            return m.RpcReply(req, False, None, 404, amqp_text(404, "fast reply consumer does "
                                                                     "not exist"))
        return m.RpcReply(req, False, None, 404, amqp_text(404, self._home_down(vhost, name)))

    def _home_down(self, vhost: str, name: str) -> str:
        q = self.replica.queue(vhost, name) or {}
        home = q.get("home") or ""
        node = self.replica.members.get(home, {}).get("name") or home or "this node"
        return (f"home node '{node}' of durable queue '{name}' in vhost '{vhost}' is down or "
                "inaccessible")

    def _rpc(self, op: ops.Op, cont, sync=True) -> None:
        self._ask(self.conn.node, lambda req: ops.rpc(self.address, req, op), cont, sync)

    # --- deliveries from queues ---------------------------------------------------------------
    def on_deliver(self, msg: m.Deliver, now: int = 0) -> None:
        self.now = now
        if self.state != "open":
            # closing: the queue will requeue them when it sees ChannelDown
            return
        parts: list = []
        n = self.number
        fm = self.conn.frame_max
        tag = self.next_tag
        queue = msg.queue
        names: dict = {}  # str -> its UTF-8 (a batch repeats its tags, exchanges and keys)
        for d, body in zip(msg.items, msg.bodies):
            # every field of the Delivery, in its order (one step on the per-message path)
            ctag, seq_id, redelivered, exchange, rk, props_raw, publisher, seq_no, msg_id = d
            c = self.consumers.get(ctag)
            if c is None:
                # cancelled meanwhile: hand it back
                self.settle_batches.setdefault((queue, m.REQUEUE), []).append(seq_id)
                continue
            if msg_id is not None:  # events on
                # (a stream's delivery also names its offset: one message, many readers)
                self.events.put("delivered", msg_id, (
                    self.conn.vhost, msg.qname, self.conn.owner, n, ctag, tag, redelivered,
                    c.no_ack, seq_id if queue in self.streams else None))
            if c.no_ack:
                self.stats.deliver_no_ack += 1
            else:
                self.stats.deliver += 1
                self.unacked[tag] = _new(Unacked, (queue, seq_id, ctag, publisher, seq_no,
                                                   msg_id, now))
                self.limiter.delivered(tag)
            if redelivered:
                self.stats.redeliver += 1
            b_ctag = names.get(ctag) or names.setdefault(ctag, ctag.encode())
            b_exchange = names.get(exchange) or names.setdefault(exchange, exchange.encode())
            b_rk = names.get(rk) or names.setdefault(rk, rk.encode())
            deliver_parts(parts, n, b_ctag, tag, redelivered, b_exchange, b_rk, props_raw, body,
                          fm)
            tag += 1
        self.next_tag = tag
        if not self.check_at and self.unacked:
            self._arm_timeout_check(queue)
        if self.limiter.granted.get(queue):
            # a queue spends a token on each delivery to a consumer that acks
            self.limiter.spent(queue, sum(1 for d in msg.items
                                          if not self._no_ack(d.consumer_tag)))
        self.out.write(b"".join(parts), [(queue, len(msg.items))])
        self.flush()

    def _no_ack(self, ctag: str) -> bool:
        c = self.consumers.get(ctag)
        return c is not None and c.no_ack

    def on_demand(self, msg: m.Demand) -> None:
        if self.state == "open":
            self.limiter.demand(msg.queue)
            self._grant()

    def on_release(self, msg: m.Release) -> None:
        self.limiter.release(msg.queue, msg.n)
        self._grant()

    def _grant(self) -> None:
        """Share what the channel-wide prefetch leaves free among the queues asking for it."""
        if self.state != "open":
            return
        for q, n in self.limiter.grants():
            self.out.send(q, m.Grant(self.address, n))

    def on_confirm(self, msg: m.Confirm) -> None:
        if msg.ok:
            self.confirms.confirm(msg.seq_nos, msg.queue)
        else:
            self.confirms.reject(msg.seq_nos, msg.reason or "internal")
        self.flush()

    def on_credit(self, msg: m.Credit) -> None:
        self.credit.bump(msg.queue, msg.n, msg.nbytes)
        self._maybe_unblock()

    def _maybe_unblock(self) -> None:
        if self.blocked and not self.credit.exhausted():
            self.blocked = False
            self.out.unblock()

    def on_consumer_gone(self, msg: m.ConsumerGone) -> None:
        if self.consumers.pop(msg.consumer_tag, None) is None or self.state != "open":
            return
        if self.conn.capabilities.get("consumer_cancel_notify"):
            if self.sync_wait:
                # rabbit_channel is in its call to the queue (queue.delete of the consumed
                # queue): the queue's cancel waits in its mailbox and goes out after the reply
                # (delete-ok first; py-amqp raises ConsumerCancelled from a delete otherwise)
                self.held_cancels.append(msg.consumer_tag)
                return
            self.out.write(encode_method(self.number, am.BasicCancel(
                consumer_tag=msg.consumer_tag, nowait=True)))

    def _send_held_cancels(self) -> None:
        held, self.held_cancels = self.held_cancels, []
        if self.state == "open":
            for tag in held:
                self.out.write(encode_method(self.number, am.BasicCancel(consumer_tag=tag,
                                                                         nowait=True)))

    def queues_gone(self, names: set) -> None:
        """Queues were deleted: whatever credit they held back is no longer owed (a publisher
        blocked by a queue that is gone must not stay blocked for good)."""
        self.credit.forget(lambda q: q.partition("#")[2] in names)
        self._maybe_unblock()

    def worker_down(self, endpoint: str) -> None:
        """A worker died (or its node): what was asked of it is answered 'gone'; of a queue
        worker, nack what its queues had not confirmed and cancel their consumers."""
        prefix = endpoint + "#"
        self._gone_where(lambda address: address.startswith(prefix))

    def queue_down(self, address: str) -> None:
        """A queue's process crashed (rabbit_channel's handle_publishing_queue_down with an
        abnormal exit, then handle_consuming_queue_down_or_eol): what it had not confirmed
        is nacked, its consumers are cancelled; its unacked deliveries stay unacked for the
        client (acking them is no error) but their settlements go nowhere, as to a dead
        pid: the restarted queue at the same address redelivers what it recovered."""
        for tag, entry in self.unacked.items():
            if entry.queue == address:
                self.unacked[tag] = entry._replace(queue="")  # ("": settled to no queue)
        self._gone_where(lambda a: a == address)

    def node_paused(self) -> None:
        """The node pauses (cluster, pause_minority; its connection is closed next): as if
        every worker were gone, consumers are cancelled and unconfirmed publishes nacked."""
        self._gone_where(lambda address: True)

    def _gone_where(self, gone) -> None:
        for req in sorted(r for r, a in self.asked.items() if gone(a)):
            if req in self.asked:  # (a continuation may have closed the channel meanwhile)
                self.on_reply(self._gone(req, self.asked[req]))
        self.confirms.reject_queues(gone, "queue_down")
        self.credit.forget(gone)
        self._maybe_unblock()
        for ctag, c in list(self.consumers.items()):
            if gone(c.queue_addr):
                self.on_consumer_gone(m.ConsumerGone(c.queue_addr, ctag))
        self.flush()

    # --- end of turn --------------------------------------------------------------------------
    def flush(self) -> None:
        if self.publish_batches:
            batches, self.publish_batches = self.publish_batches, {}
            for q, (items, bodies) in batches.items():
                self.out.send(q, m.Publish(self.address, items, bodies))
        if self.settle_batches:
            # (events_sync: a queue with x-confirm-on=ack confirms on these acks)
            self.events.sync()
            batches, self.settle_batches = self.settle_batches, {}
            for (q, op), ids in batches.items():
                if q:  # (not a crashed queue's orphaned deliveries: `queue_down`)
                    self.out.send(q, m.Settle(self.address, op, ids))
        if self.lite_confirms:
            self.events.sync()  # (events_sync: the acks this confirm rests on are written)
            for (publisher, q), seqs in self.lite_confirms.take().items():
                if publisher == self.address:
                    self.on_confirm(m.Confirm(q, seqs, True))
                else:
                    self.out.send(publisher, m.Confirm(q, seqs, True))
        if self.confirms.pending():
            self._send_confirms()

    def _send_confirms(self) -> None:
        """This turn's basic.ack/nack frames (Confirms.take), counted and logged."""
        answered = self.confirms.take()
        acks, nacks = answered.acks, answered.nacks
        n = self.number
        out = [encode_method(n, (am.BasicNack if f.nack else am.BasicAck)(
            delivery_tag=f.delivery_tag, multiple=f.multiple)) for f in answered.frames]
        stats = self.stats
        stats.confirm += len(acks)
        stats.nack += len(nacks)
        if self.published_at:
            now = self.clock()
            published_at = self.published_at
            for s in acks:
                t = published_at.pop(s, None)
                if t is not None:
                    stats.confirmed_after(now - t)
            for s in nacks:
                published_at.pop(s, None)
        if self.seq_msg:
            c = self.conn
            pop = self.seq_msg.pop
            for s in acks:
                mid = pop(s, None)
                if mid is not None:  # (None: a message sampled:N leaves out)
                    self.events.put("confirmed", mid, (c.vhost, c.owner, self.number, s))
            for s in nacks:
                mid = pop(s, None)
                if mid is not None:
                    self.events.put("nacked_to_publisher", mid, (
                        c.vhost, c.owner, self.number, s, answered.reasons.get(s, "internal")))
        self.events.sync()  # (events_sync: this process's events are written before the confirm)
        self.out.write(b"".join(out))

    # --- channel class ------------------------------------------------------------------------
    def _close(self, method, cmd):
        self._release()
        self.out.write(encode_method(self.number, am.ChannelCloseOk()))
        self._finish()

    def _close_ok(self, method, cmd):
        raise ConnectionError_(503, "unexpected channel.close-ok on an open channel",
                               method.CLASS_ID, method.METHOD_ID)

    def _flow(self, method, cmd):
        if not method.active:
            raise ConnectionError_(540, "active=false")
        self.out.write(encode_method(self.number, am.ChannelFlowOk(active=True)))

    def _open(self, method, cmd):
        raise ConnectionError_(504, "second 'channel.open' seen")

    # --- permissions --------------------------------------------------------------------------
    def _check(self, perm: str, kind: str, name: str) -> None:
        user, vhost = self.conn.user, self.conn.vhost
        if not self.replica.auth.check_resource(user, vhost, perm, name, kind):
            shown = "amq.default" if kind == "exchange" and name == "" else name
            raise ChannelError(403, f"access to {kind} '{shown}' in vhost '{vhost}' refused "
                                    f"for user '{user}'")

    def _check_topic(self, perm: str, exchange: str, routing_key: str) -> None:
        """rabbit_channel:check_topic_authorisation: a topic exchange's routing key against the
        user's topic permissions (write on publish, read on bind and unbind)."""
        user, vhost = self.conn.user, self.conn.vhost
        if not self.replica.auth.check_topic(user, vhost, exchange, perm, routing_key):
            raise topic_access_refused(routing_key, exchange, vhost, user)

    def _check_topic_source(self, exchange: str, routing_key: str) -> None:
        x = self.replica.router.exchange(self.conn.vhost, exchange)
        if x is not None and x.type == "topic":
            self._check_topic("read", exchange, routing_key)

    # --- exchange class -----------------------------------------------------------------------
    def _exchange_declare(self, method, cmd):
        name = method.exchange
        _check_name(name)
        if name == "":
            # rabbit_channel:check_not_default_exchange/1, passive or not (aiormq's suite:
            # test_channel_closed_reuse declares it passively and expects 403), after the
            # type check of a non-passive declare (the node checks the type of the others)
            if not method.passive:
                routing.check_exchange_type(method.exchange_type)
            raise ChannelError(403, "operation not permitted on the default exchange")
        if not method.passive:
            self._check("configure", "exchange", name)
        op = ops.ExchangeDeclare(
            vhost=self.conn.vhost, name=name, type=method.exchange_type,
            passive=method.passive, durable=method.durable, auto_delete=method.auto_delete,
            internal=method.internal, arguments=method.arguments,
            user=self.conn.user)  # the node checks read/write for alternate-exchange
        self._rpc(op, self._ok_then(am.ExchangeDeclareOk(), method.nowait, method),
                  not method.nowait)

    def _exchange_delete(self, method, cmd):
        routing.check_exchange_deletion(self.conn.vhost, method.exchange)
        self._check("configure", "exchange", method.exchange)
        self.exchange_ok.pop(method.exchange, None)
        self._rpc(ops.ExchangeDelete(vhost=self.conn.vhost, name=method.exchange,
                                     if_unused=method.if_unused),
                  self._ok_then(am.ExchangeDeleteOk(), method.nowait, method),
                  not method.nowait)

    def _exchange_bind(self, method, cmd, unbind=False):
        self._check("write", "exchange", method.destination)
        self._check("read", "exchange", method.source)
        self._check_topic_source(method.source, method.routing_key)
        record = ops.Unbind if unbind else ops.Bind
        ok = am.ExchangeUnbindOk() if unbind else am.ExchangeBindOk()
        self._rpc(record(vhost=self.conn.vhost, source=method.source, kind="exchange",
                         dest=method.destination, routing_key=method.routing_key,
                         arguments=method.arguments, owner=self.conn.owner),
                  self._ok_then(ok, method.nowait, method), not method.nowait)

    def _exchange_unbind(self, method, cmd):
        self._exchange_bind(method, cmd, unbind=True)

    def _ok_then(self, ok_method, nowait, request):
        def cont(reply):
            if not reply.ok:
                raise _reply_error(reply, request)
            if not nowait:
                self.out.write(encode_method(self.number, ok_method))
        return cont

    # --- queue class --------------------------------------------------------------------------
    def _queue_declare(self, method, cmd):
        name = method.queue
        _check_name(name)
        if name.startswith(direct_reply.PSEUDO_QUEUE):
            self._declare_reply(method, name)
            return
        if name and not method.passive:
            self._check("configure", "queue", name)

        def cont(reply):
            if not reply.ok:
                raise _reply_error(reply, method)
            if isinstance(reply.result, dict):  # it exists: its count, after our publishes
                at = reply.result["queue_at"]
                # (a queue on a dead node or worker answers 404 through `_gone`)
                self._ask(at,
                          lambda req: m.QueueOp(self.address, req, "info", {}), cont, True)
                return
            qname, count, consumers = reply.result
            self.last_queue = qname
            if not method.nowait:
                self.out.write(encode_method(self.number, am.QueueDeclareOk(
                    queue=qname, message_count=count, consumer_count=consumers)))

        self._rpc(ops.QueueDeclare(
            vhost=self.conn.vhost, name=name or "", passive=method.passive,
            durable=method.durable, exclusive=method.exclusive,
            auto_delete=method.auto_delete, arguments=method.arguments,
            owner=self.conn.owner,
            # the node checks configure on a server-named queue, read/write for a DLX
            user=self.conn.user), cont, True)

    def _queue_name(self, name: str) -> str:
        """An empty queue name means the channel's last declared queue (AMQP 0-9-1)."""
        if name:
            return name
        last = getattr(self, "last_queue", None)
        if last is None:
            raise ChannelError(404, "no previously declared queue")
        return last

    def _queue_bind(self, method, cmd, unbind=False):
        queue = self._queue_name(method.queue)
        self._check("write", "queue", queue)
        self._check("read", "exchange", method.exchange)
        self._check_topic_source(method.exchange, method.routing_key)
        record = ops.Unbind if unbind else ops.Bind
        ok = am.QueueUnbindOk() if unbind else am.QueueBindOk()
        nowait = getattr(method, "nowait", False)
        self._rpc(record(vhost=self.conn.vhost, source=method.exchange, kind="queue",
                         dest=queue, routing_key=method.routing_key,
                         arguments=method.arguments, owner=self.conn.owner),
                  self._ok_then(ok, nowait, method), not nowait)

    def _queue_unbind(self, method, cmd):
        self._queue_bind(method, cmd, unbind=True)

    def _queue_purge(self, method, cmd):
        queue = self._queue_name(method.queue)
        self._check("read", "queue", queue)
        q = self._existing_queue(queue)

        def cont(reply):
            if not reply.ok:
                raise _reply_error(reply, method)
            if not method.nowait:
                self.out.write(encode_method(self.number, am.QueuePurgeOk(
                    message_count=reply.result)))

        self._ask(q["address"], lambda req: m.QueueOp(self.address, req, "purge", {}), cont,
                  not method.nowait)

    def _queue_delete(self, method, cmd):
        queue = self._queue_name(method.queue)
        self._check("configure", "queue", queue)

        def cont(reply):
            if not reply.ok:
                raise _reply_error(reply, method)
            if not method.nowait:
                self.out.write(encode_method(self.number, am.QueueDeleteOk(
                    message_count=reply.result or 0)))

        self._rpc(ops.QueueDelete(vhost=self.conn.vhost, name=queue,
                                  if_unused=method.if_unused, if_empty=method.if_empty,
                                  owner=self.conn.owner),
                  cont, not method.nowait)

    def _existing_queue(self, name: str) -> dict:
        q = self.replica.queue(self.conn.vhost, name)
        if q is None:
            raise ChannelError(404, f"no queue '{name}' in vhost '{self.conn.vhost}'")
        if q["exclusive"] and q["exclusive"] != self.conn.owner:
            raise resource_locked("queue", name, self.conn.vhost)
        if not q.get("address"):
            raise ChannelError(404, f"queue '{name}' in vhost '{self.conn.vhost}' is "
                                    "restarting after a crash")
        return q

    # --- basic class: publishing --------------------------------------------------------------
    def _publish(self, method, cmd):
        if method.immediate:
            raise ConnectionError_(540, "immediate=true")
        exchange = method.exchange
        if self.routes_version != self.replica.version:  # metadata changed since: look again
            self.routes_version = self.replica.version
            self.routes.clear()
            self.exchange_ok.clear()
        x = self.exchange_ok.get(exchange)
        if x is None:
            x = self.replica.router.exchange(self.conn.vhost, exchange)
            if x is None:
                raise ChannelError(404, f"no exchange '{exchange}' in vhost "
                                        f"'{self.conn.vhost}'")
            if x.internal:
                raise ChannelError(403, f"cannot publish to internal exchange '{exchange}' in "
                                        f"vhost '{self.conn.vhost}'")
            self._check("write", "exchange", exchange)
            self.exchange_ok[exchange] = x
        rk = method.routing_key
        if x.type == "topic" and self.replica.auth.topic_permissions:
            self._check_topic("write", exchange, rk)
        raw = cmd.properties_raw
        lp = self.last_props
        if raw == lp.raw:  # a publisher repeats its properties: decode them once
            _, props, expiry, extra, out_raw, headers = lp
        else:
            props, expiry, extra, out_raw, headers = self._check_props(raw, cmd.properties)
        body = cmd.body or b""
        if extra or headers:
            # the headers go along whatever x's type: a headers exchange reached through an
            # exchange-to-exchange binding or as an alternate exchange matches on them too
            names = self.replica.route(self.conn.vhost, exchange, [rk, *extra] if extra else rk,
                                       headers)
            addresses = self._addresses(names)
        else:
            hit = self.routes.get((exchange, rk))
            if hit is None:
                if len(self.routes) >= ROUTES_CACHED:
                    self.routes.clear()
                names = self.replica.route(self.conn.vhost, exchange, rk, None)
                hit = self.routes[(exchange, rk)] = (names, self._addresses(names))
            names, addresses = hit
        seq = 0
        stats = self.stats
        stats.publish += 1
        if self.confirm:
            seq = self.next_seq_no
            self.next_seq_no += 1
            stats.publish_confirm += 1
            if self.clock is not None:
                self.published_at[seq] = self.clock()
        persistent = props.delivery_mode == 2
        msg_id = None
        ev = self.events.enabled()
        if persistent or ev:
            # names the body in msg_store (written once however many durable queues get it)
            # and the message in the event log
            self.msg_counter += 1
            msg_id = self.msg_id_prefix + _U64.pack(self.msg_counter)
            if ev and not self.events.keeps(msg_id):
                # sampled:N leaves this message out, decided once here: no event of it is built,
                # and a transient one carries no id for the queues to log it by
                ev = False
                if not persistent:
                    msg_id = None
        replies = ()
        if not exchange and (extra or rk.startswith(direct_reply.PREFIX)):
            # rabbit_exchange:route: a reply name on the default exchange is no queue, the
            # message goes to the consuming channel (in a transaction too: at routing time)
            replies = self._send_replies([rk, *extra], rk, out_raw, body,
                                         msg_id if ev else None)
        if ev:
            self._event_publish(seq, msg_id, persistent, props, method, names, len(body),
                                replies, [rk, *extra] if extra else rk, headers)
        targets = []
        for addr in addresses:
            if not addr or self.out.is_dead(addr):
                if seq:
                    # nacked now: the queues it does reach are not asked for a confirm
                    self.confirms.refuse(seq, "queue_down")
                    seq = 0
                continue
            targets.append(addr)
        item = _new(m.PublishItem, (seq, exchange, rk, out_raw, persistent, props.priority or 0,
                                    expiry, msg_id))
        if self.tx:
            self.tx_publishes.append(HeldPublish(targets, item, body, method, cmd))
            return
        self._route_out(targets, item, body, method, cmd)

    def _addresses(self, names) -> tuple:
        """The address of each queue of `names` that exists (None: not running anywhere)."""
        vhost = self.conn.vhost
        qs = (self.replica.queue(vhost, name) for name in names)
        return tuple(q.get("address") for q in qs if q is not None)

    def _check_props(self, raw, props) -> tuple:
        """rabbit_channel's checks of a publish's properties, in its order (fast reply-to,
        user_id, expiration, then the CC/BCC routes of rabbit_basic:message), and what they
        make of it: (props, expiry, CC/BCC keys, raw properties to store, headers to route by).
        Cached in `last_props` unless reply_to names the pseudo-queue (that depends on the
        reply consumer, which may come and go)."""
        out_raw = raw
        cache = True
        if props.reply_to == direct_reply.PSEUDO_QUEUE:
            # rabbit_channel:maybe_set_fast_reply_to
            if self.reply_consumer is None:
                raise ChannelError(406, "fast reply consumer does not exist")
            out_raw = with_reply_to(raw, self.reply_consumer.name)
            cache = False
        if props.user_id is not None and props.user_id != self.conn.user:
            raise ChannelError(406, f"user_id property set to '{props.user_id}' but "
                                    f"authenticated user was '{self.conn.user}'")
        expiry = -1
        if props.expiration is not None:
            expiry = _parse_expiration(props.expiration)
        extra = ()
        headers = props.headers
        if headers and ("CC" in headers or "BCC" in headers):
            extra, out_raw, headers = sender_selected.routes(headers, out_raw)
        self.last_props = _Props(raw, props, expiry, extra, out_raw, headers) if cache \
            else _NO_PROPS
        return props, expiry, extra, out_raw, headers

    def _send_replies(self, keys, rk, props_raw, body, msg_id=None) -> list:
        """Hand a message to the channels its reply names (among `keys`) belong to, each once
        (rabbit_channel:deliver_reply) -> the names it was handed to. A name that does not
        decode, or names no connection worker of ours, is dropped, as one whose channel is
        gone (its process drops it)."""
        own = self.address.partition("#")[0]
        sent = []
        for name in sorted({k for k in keys if k.startswith(direct_reply.PREFIX)}):
            decoded = direct_reply.decode_name(name)
            if decoded is None:
                continue
            address, key = decoded
            endpoint = address.partition("#")[0]
            if not direct_reply.endpoint_ok(endpoint, own, self.replica.members) \
                    or self.out.is_dead(address):
                continue
            self.out.send(address, m.DirectReply(key, "", rk, props_raw, msg_id, [body]))
            sent.append(name)
        return sent

    def _event_publish(self, seq, msg_id, persistent, props, method, names, size, replies=(),
                       keys="", headers=None) -> None:
        c = self.conn
        trace = headers.get("traceparent") if headers else None  # W3C trace context
        # the alternate exchanges it went through, when any (None: the field is left out)
        aes = self._event_hops(c.vhost, method.exchange, keys, headers) \
            if method.exchange else None
        # (tuples, not lists: a buffered record of atoms and tuples is untracked by Python's
        # garbage collector, while one holding a list makes every full collection walk it)
        if names or replies:
            # publish_received and routed in one record (a direct reply goes to its consumer's
            # channel, named by its reply-to name)
            queues = tuple(names) if len(names) == 1 and not replies else \
                tuple(sorted([*names, *replies]))
            self.events.put_published(msg_id, (
                c.vhost, c.owner, self.number, seq, method.exchange, method.routing_key,
                props.message_id, persistent, size, props.correlation_id, trace, queues, aes))
        else:
            put = self.events.put
            put("publish_received", msg_id, (
                c.vhost, c.owner, self.number, seq, method.exchange, method.routing_key,
                props.message_id, persistent, size, props.correlation_id, trace))
            put("unroutable", msg_id, (c.vhost, method.mandatory, aes))
            if method.mandatory:
                put("returned", msg_id, (c.vhost,))
        if seq:
            self.seq_msg[seq] = msg_id

    def _event_hops(self, vhost, exchange, keys, headers) -> tuple | None:
        """The alternate exchanges a publish passes through (routing's walk; None: none),
        remembered per (exchange, routing key) until the metadata changes: a header-routed or
        CC/BCC publish is walked each time, its result depending on more than the key."""
        if headers is not None or type(keys) is not str:
            return tuple(self.replica.router.alternates(vhost, exchange, keys, headers)) or None
        if self.event_hops_version != self.replica.version or \
                len(self.event_hops) >= ROUTES_CACHED:
            self.event_hops_version = self.replica.version
            self.event_hops.clear()
        key = (exchange, keys)
        if key not in self.event_hops:
            self.event_hops[key] = \
                tuple(self.replica.router.alternates(vhost, exchange, keys, headers)) or None
        return self.event_hops[key]

    def _refused(self, method, cmd):
        raise method.error

    def _route_out(self, targets, item: m.PublishItem, body, method, cmd) -> None:
        seq = item.seq_no
        self.stats.published(item.exchange, len(targets))
        if not targets:
            if method.mandatory:
                self.stats.return_unroutable += 1
            else:
                self.stats.drop_unroutable += 1
            if method.mandatory:
                self.out.write(encode_method(self.number, am.BasicReturn(
                    reply_code=312, reply_text="NO_ROUTE", exchange=method.exchange,
                    routing_key=method.routing_key)) + encode_content(
                    self.number, 60, item.props_raw, body, self.conn.frame_max))
            if seq:
                self.confirms.insert(seq, targets)  # (no queue: confirmed at once)
            return
        self.stats.routed += 1
        if seq:
            self.confirms.insert(seq, targets)
        block = False
        for addr in targets:
            batch = self.publish_batches.get(addr)
            if batch is None:
                batch = self.publish_batches[addr] = ([], [])
            items, bodies = batch
            items.append(item)
            bodies.append(body)
            if self.credit.spend(addr, len(body)):
                block = True
        if block and not self.blocked:
            self.blocked = True
            self.out.block()

    # --- basic class: consuming ---------------------------------------------------------------
    def _qos(self, method, cmd):
        if method.prefetch_size:
            raise ConnectionError_(540, f"prefetch_size!=0 ({method.prefetch_size})")
        if method.global_:
            self._set_global_prefetch(method.prefetch_count)
        else:
            self.prefetch = method.prefetch_count
            # RabbitMQ 3.10: a global=false qos unsets the channel-wide limit
            # (rabbit_channel calls rabbit_limiter:unlimit_prefetch)
            self._set_global_prefetch(0)
        self.out.write(encode_method(self.number, am.BasicQosOk()))

    def _set_global_prefetch(self, n: int) -> None:
        if not self.limiter.set_limit(n):
            return
        for q in self.queues_used | {c.queue_addr for c in self.consumers.values()}:
            self.out.send(q, m.SetLimit(self.address, n))
        self._grant()

    def _consume(self, method, cmd):
        queue = self._queue_name(method.queue)
        if queue == direct_reply.PSEUDO_QUEUE:
            self._consume_replies(method)
            return
        self._check("read", "queue", queue)
        q = self._existing_queue(queue)
        tag = method.consumer_tag or "amq.ctag-" + base64.urlsafe_b64encode(
            self.random_bytes(16)).decode().rstrip("=")
        if tag in self.consumers:
            raise ConnectionError_(530, f"attempt to reuse consumer tag '{tag}'")
        addr = q["address"]
        self.queue_timeouts[addr] = self._queue_timeout(q)
        if stream.is_stream(q.get("arguments")):
            self.streams[addr] = queue
        self.consumers[tag] = ChannelConsumer(addr, queue, method.no_ack, method.exclusive,
                                              dict(method.arguments or {}))
        self.queues_used.add(addr)

        def cont(reply):
            if not reply.ok:
                self.consumers.pop(tag, None)
                raise _reply_error(reply, method)
            if not method.nowait:
                self.out.write(encode_method(self.number, am.BasicConsumeOk(consumer_tag=tag)))

        self._ask(addr, lambda req: m.Consume(
            self.address, req, tag, method.no_ack, method.exclusive, self.prefetch,
            self.limiter.limit, self.conn.owner, method.arguments), cont, True)

    def _consume_replies(self, method) -> None:
        """basic.consume from amq.rabbitmq.reply-to (rabbit_channel 3.10.8): no queue, no
        permission check; the channel's reply consumer, at most one, in no-ack mode."""
        tag = method.consumer_tag
        if tag in self.consumers:
            raise ConnectionError_(530, f"attempt to reuse consumer tag '{tag}'")
        if not method.no_ack:
            raise ChannelError(406, "reply consumer cannot acknowledge")
        if self.reply_consumer is not None:
            raise ChannelError(406, "reply consumer already set")
        tag = tag or "amq.ctag-" + base64.urlsafe_b64encode(
            self.random_bytes(16)).decode().rstrip("=")
        key = direct_reply.new_key(self.random_bytes)
        name = direct_reply.reply_name(self.address, key)
        if len(name.encode()) > direct_reply.MAX_NAME:
            raise ChannelError(541, f"INTERNAL_ERROR - the reply-to name of this channel would "
                                    f"be {len(name)} bytes long, more than 255 (the channel's "
                                    f"address is too long: {self.address})")
        self.reply_consumer = ReplyConsumer(tag, name, key)
        if not method.nowait:
            self.out.write(encode_method(self.number, am.BasicConsumeOk(consumer_tag=tag)))

    def on_direct_reply(self, msg: m.DirectReply) -> None:
        """A reply published to our reply name, from any channel of the node or cluster: a
        basic.deliver to the reply consumer if it is still the one the name was made for. As
        RabbitMQ (handle_cast deliver_reply), the delivery tag is the next one, not used up:
        the consumer does not ack."""
        rc = self.reply_consumer
        if self.state != "open" or rc is None or not direct_reply.same_key(msg.key, rc.key):
            return
        self.out.write(encode_deliver(self.number, rc.consumer_tag, self.next_tag, False,
                                      msg.exchange, msg.routing_key, msg.props_raw,
                                      msg.bodies[0], self.conn.frame_max))
        if msg.msg_id is not None and self.events.enabled():
            # a copy of its own: "queue" the reply name, settled as it is sent (no_ack)
            self.events.emit("delivered", msg.msg_id, actor="channel", vhost=self.conn.vhost,
                             queue=rc.name, connection=self.conn.owner, channel=self.number,
                             consumer_tag=rc.consumer_tag, delivery_tag=self.next_tag,
                             redelivered=False, no_ack=True)

    def on_reply_check(self, msg: m.ReplyCheck) -> None:
        """Another channel declares our reply name (rabbit_channel's declare_fast_reply_to
        call): does it still reach our reply consumer?"""
        rc = self.reply_consumer
        ok = rc is not None and direct_reply.same_key(msg.key, rc.key)
        self.out.send(msg.reply_to, m.RpcReply(msg.req_id, ok))

    def _declare_reply(self, method, name: str) -> None:
        """queue.declare of amq.rabbitmq.reply-to or of a generated name: always passive, no
        permission check (rabbit_channel 3.10.8); declare-ok with 0 messages and 1 consumer if
        the name reaches a reply consumer, else 404."""
        name = name.replace("\r", "").replace("\n", "")  # rabbit_channel:strip_cr_lf

        def exists():
            self.last_queue = name
            if not method.nowait:
                self.out.write(encode_method(self.number, am.QueueDeclareOk(
                    queue=name, message_count=0, consumer_count=1)))

        def not_found():
            return ChannelError(404, f"no queue '{name}' in vhost '{self.conn.vhost}'",
                                method.CLASS_ID, method.METHOD_ID)

        if name == direct_reply.PSEUDO_QUEUE:
            exists()
            return
        decoded = direct_reply.decode_name(name)
        if decoded is None:
            raise not_found()
        address, key = decoded
        if not direct_reply.endpoint_ok(address.partition("#")[0],
                                        self.address.partition("#")[0], self.replica.members) \
                or self.out.is_dead(address):
            raise not_found()
        if address == self.address:
            rc = self.reply_consumer
            if rc is None or not direct_reply.same_key(key, rc.key):
                raise not_found()
            exists()
            return

        def cont(reply):
            if not reply.ok:
                raise not_found()
            exists()

        self._ask(address, lambda req: m.ReplyCheck(self.address, req, key), cont, True)

    def _cancel(self, method, cmd):
        tag = method.consumer_tag
        rc = self.reply_consumer
        if rc is not None and rc.consumer_tag == tag:
            self.reply_consumer = None
            if not method.nowait:
                self.out.write(encode_method(self.number, am.BasicCancelOk(consumer_tag=tag)))
            return
        c = self.consumers.pop(tag, None)
        if c is None:
            if not method.nowait:
                self.out.write(encode_method(self.number, am.BasicCancelOk(consumer_tag=tag)))
            return

        def cont(reply):
            if not method.nowait:
                self.out.write(encode_method(self.number, am.BasicCancelOk(consumer_tag=tag)))

        self._ask(c.queue_addr, lambda req: m.Cancel(self.address, req, tag), cont, True)

    def _get(self, method, cmd):
        queue = self._queue_name(method.queue)
        self._check("read", "queue", queue)
        q = self._existing_queue(queue)
        addr = q["address"]
        self.queues_used.add(addr)
        self.queue_timeouts[addr] = self._queue_timeout(q)

        def cont(reply):
            if isinstance(reply, m.RpcReply):
                raise _reply_error(reply, method)
            if reply.item is None:
                self.stats.get_empty += 1
                self.out.write(encode_method(self.number, am.BasicGetEmpty()))
                return
            d: m.Delivery = reply.item
            redelivered = d.redelivered
            if method.no_ack:
                self.stats.get_no_ack += 1
            else:
                self.stats.get += 1
            if redelivered:
                self.stats.redeliver += 1
            tag = self.next_tag
            self.next_tag += 1
            if d.msg_id is not None:  # events on
                self.events.emit("fetched", d.msg_id, actor="channel", vhost=self.conn.vhost,
                                 queue=queue, connection=self.conn.owner, channel=self.number,
                                 delivery_tag=tag, redelivered=redelivered, no_ack=method.no_ack)
            if not method.no_ack:
                self.unacked[tag] = Unacked(addr, d.seq_id, "", d.publisher, d.seq_no,
                                            d.msg_id, self.now)
                if not self.check_at:
                    self._arm_timeout_check(addr)
            self.out.write(encode_method(self.number, am.BasicGetOk(
                delivery_tag=tag, redelivered=redelivered, exchange=d.exchange,
                routing_key=d.routing_key, message_count=reply.message_count)) + encode_content(
                self.number, 60, d.props_raw, reply.bodies[0], self.conn.frame_max))

        self._ask(addr, lambda req: m.Get(self.address, req, method.no_ack, self.conn.owner),
                  cont, True)

    # --- consumer timeout (S5) ------------------------------------------------------------------
    def _queue_timeout(self, q: dict) -> int:
        """The consumer timeout (ms, 0 = none) of a queue's deliveries: the smaller of its
        x-consumer-timeout argument and its effective policy's consumer-timeout, else the
        node's consumer_timeout (rabbit_channel:get_queue_consumer_timeout, which uses
        rabbit_queue_type_util:args_policy_lookup with min)."""
        found = [v for v in ((q.get("arguments") or {}).get("x-consumer-timeout"),
                             self._policy(q).get("consumer-timeout"))
                 if isinstance(v, int) and not isinstance(v, bool)]
        return min(found) if found else self.consumer_timeout

    def _policy(self, q: dict) -> dict:
        policies_ = getattr(self.replica, "policies", None)
        if not policies_:
            return {}
        with self.replica.lock:
            return policies.effective(policies_, q["vhost"], q["name"])

    def _arm_timeout_check(self, queue: str) -> None:
        """A delivery to wait an ack for: check at the latest one interval from now."""
        t = self.queue_timeouts.get(queue, self.consumer_timeout)
        if t:
            self.check_at = self.now + min(t, TIMEOUT_CHECK_MAX)

    def consumer_timeout_check(self, now: int) -> None:
        """rabbit_channel:evaluate_consumer_timeout, run at `check_at`: a delivery unacked for
        longer than its queue's timeout closes the channel (406, RabbitMQ's text; its deliveries
        are requeued); otherwise the next check is set one interval, min(smallest timeout of
        the deliveries waiting, 60 s), ahead (0 when none waits)."""
        self.now = now
        self.check_at = 0
        if self.state != "open":
            return
        timeouts = self.queue_timeouts
        interval = 0
        expired: dict[str, int] = {}  # consumer tag -> the timeout it passed
        for entry in self.unacked.values():
            t = timeouts.get(entry.queue, self.consumer_timeout)
            if not t:
                continue
            if now - entry.delivered_at > t:
                if self._cancel_on_timeout(entry.consumer_tag):
                    expired.setdefault(entry.consumer_tag, t)
                    continue
                self.error(ChannelError(406, f"delivery acknowledgement on channel "
                                             f"{self.number} timed out. Timeout value used: "
                                             f"{t} ms. This timeout value can be configured, "
                                             "see consumers doc guide to learn more"))
                self.flush()
                return
            interval = min(interval, t) if interval else t
        for ctag in expired:
            self._time_out_consumer(ctag)
        if expired:
            # what is left unacked sets the next check
            for entry in self.unacked.values():
                t = timeouts.get(entry.queue, self.consumer_timeout)
                if t:
                    interval = min(interval, t) if interval else t
            self.flush()
        if interval:
            self.check_at = now + min(interval, TIMEOUT_CHECK_MAX)

    def _cancel_on_timeout(self, ctag: str) -> bool:
        """RabbitMQ 4.3's answer applies (cancel the consumer, keep the channel): the setting
        asks for it, the delivery went to a consumer of this channel (not basic.get) and the
        client can hear of a cancel (consumer_cancel_notify). Otherwise the channel closes,
        as RabbitMQ did for basic.get and such clients when it last cancelled on timeout."""
        return (self.consumer_timeout_action == "cancel-consumer" and ctag != "" and
                ctag in self.consumers and
                bool(self.conn.capabilities.get("consumer_cancel_notify")))

    def _time_out_consumer(self, ctag: str) -> None:
        """cancel-consumer: the queue drops the consumer, the client gets basic.cancel, and
        every delivery of that consumer still unacked goes back to its queue (redelivered
        next time); its tags are remembered so that a late ack of one is harmless."""
        addr = self.consumers.pop(ctag).queue_addr
        self._ask(addr, lambda req: m.Cancel(self.address, req, ctag), lambda reply: None,
                  False)
        self.out.write(encode_method(self.number, am.BasicCancel(consumer_tag=ctag,
                                                                 nowait=True)))
        tags = [tag for tag, e in self.unacked.items() if e.consumer_tag == ctag]
        for tag in tags:
            e = self.unacked.pop(tag)
            self.settle_batches.setdefault((e.queue, m.REQUEUE), []).append(e.seq_id)
            self.timed_out_tags.add(tag)
        if self.limiter.settled(iter(tags)):
            self._grant()

    # --- basic class: settling ----------------------------------------------------------------
    def _collect(self, tag: int, multiple: bool) -> list:
        """rabbit_channel:collect_acks: the unacked entries a (tag, multiple) names."""
        if multiple and tag == 0:
            entries = list(self.unacked.items())
            self.unacked.clear()
            return entries
        if tag not in self.unacked:
            if tag in self.timed_out_tags:
                # returned to its queue by a consumer timeout (cancel-consumer): nothing to do
                # for it; a multiple one still settles the deliveries below it
                self.timed_out_tags.discard(tag)
                if not multiple:
                    return []
                entries = []
                while self.unacked and next(iter(self.unacked)) < tag:
                    entries.append(self.unacked.popitem(last=False))
                self.timed_out_tags = {t for t in self.timed_out_tags if t > tag}
                return entries
            raise ChannelError(406, f"unknown delivery tag {tag}")
        if not multiple:
            return [(tag, self.unacked.pop(tag))]
        entries = []
        while self.unacked:
            t, e = self.unacked.popitem(last=False)
            entries.append((t, e))
            if t == tag:
                break
        self.timed_out_tags = {t for t in self.timed_out_tags if t > tag}
        return entries

    def _settle(self, entries, op, kind="acked") -> None:
        if self.tx:
            self.tx_settles.append(HeldSettle(entries, op, kind))
            return
        if op == m.ACK:
            self.stats.ack += len(entries)
        for tag, e in entries:
            # every field of the Unacked, in its order (one step on the per-message path)
            q, seq_id, _, publisher, seq_no, msg_id, _ = e
            if msg_id is not None:
                self.events.put(kind, msg_id, (
                    self.conn.vhost, q.rpartition("\x1f")[2], self.conn.owner, self.number, tag,
                    op == m.REQUEUE, seq_id if q in self.streams else None))
            key = (q, op)
            ids = self.settle_batches.get(key)
            if ids is None:
                ids = self.settle_batches[key] = []
            ids.append(seq_id)
            if seq_no and publisher and op == m.ACK:
                # ack-lite: this channel, not the queue, tells the publisher (seed 003, opt. 2);
                # a reject is not reported (the publisher resends after its time-out)
                self.lite_confirms.acked(publisher, q, seq_no)
                self.stats.confirm_lite += 1
        if self.limiter.settled(tag for tag, _ in entries):
            self._grant()

    def _ack(self, method, cmd):
        self._settle(self._collect(method.delivery_tag, method.multiple), m.ACK)

    def _nack(self, method, cmd):
        entries = self._collect(method.delivery_tag, method.multiple)
        self._refuse_stream_settle(entries)
        self._settle(entries, m.REQUEUE if method.requeue else m.DISCARD, "nacked")

    def _reject(self, method, cmd):
        entries = self._collect(method.delivery_tag, False)
        self._refuse_stream_settle(entries)
        self._settle(entries, m.REQUEUE if method.requeue else m.DISCARD, "rejected")

    def _refuse_stream_settle(self, entries, method="basic.nack and basic.reject") -> None:
        """A stream keeps every message: nacking, rejecting or recovering its delivery
        closes the connection with 540 (RabbitMQ 3.10's answer to nack and reject),
        whatever the requeue flag."""
        for _, e in entries:
            if e.queue in self.streams:
                raise stream.settle_refused(self.streams[e.queue], self.conn.vhost, method)

    def _recover(self, method, cmd):
        if not method.requeue:
            raise ConnectionError_(540, "requeue=false")
        entries = list(self.unacked.items())
        self._refuse_stream_settle(entries, "basic.recover")
        self.unacked.clear()
        for _, e in entries:
            self.settle_batches.setdefault((e.queue, m.REQUEUE), []).append(e.seq_id)
        self.limiter.limited.clear()
        self._grant()
        if isinstance(method, am.BasicRecover):
            self.out.write(encode_method(self.number, am.BasicRecoverOk()))

    # --- confirm and tx -----------------------------------------------------------------------
    def _confirm_select(self, method, cmd):
        if self.tx:
            raise ChannelError(406, "cannot switch from tx to confirm mode")
        self.confirm = True
        if not method.nowait:
            self.out.write(encode_method(self.number, am.ConfirmSelectOk()))

    def _tx_select(self, method, cmd):
        if self.confirm:
            raise ChannelError(406, "cannot switch from confirm to tx mode")
        self.tx = True
        self.out.write(encode_method(self.number, am.TxSelectOk()))

    def _tx_commit(self, method, cmd):
        if not self.tx:
            raise ChannelError(406, "channel is not transactional")
        publishes, self.tx_publishes = self.tx_publishes, []
        settles, self.tx_settles = self.tx_settles, []
        if self.events.enabled():
            self._event_tx("tx_committed", publishes, settles)
        for p in publishes:
            self._route_out(p.targets, p.item, p.body, p.method, p.cmd)
        self.tx = False
        for held in settles:
            self._settle(held.entries, held.op, held.kind)
        self.tx = True
        self.out.write(encode_method(self.number, am.TxCommitOk()))

    def _tx_rollback(self, method, cmd):
        if not self.tx:
            raise ChannelError(406, "channel is not transactional")
        if self.events.enabled():
            self._event_tx("tx_rolled_back", self.tx_publishes, self.tx_settles)
        self.tx_publishes = []
        for held in self.tx_settles:
            for tag, entry in held.entries:
                self.unacked[tag] = entry
        self.unacked = OrderedDict(sorted(self.unacked.items()))
        if not self.check_at:  # the restored deliveries are waited for again (S5)
            for entry in self.unacked.values():
                self._arm_timeout_check(entry.queue)
                if self.check_at:
                    break
        self.tx_settles = []
        self.out.write(encode_method(self.number, am.TxRollbackOk()))

    def _event_tx(self, kind, publishes, settles) -> None:
        """One event per commit or rollback, naming the publishes it settles by msg_id (a
        transaction's publishes are all in memory here, so the list costs nothing to build);
        held acks are emitted one by one only when a commit applies them."""
        c = self.conn
        self.events.emit(kind, None, actor="channel", vhost=c.vhost, connection=c.owner,
                         channel=self.number, publishes=len(publishes),
                         settles=sum(len(held.entries) for held in settles),
                         msg_ids=[p.item.msg_id for p in publishes if p.item.msg_id is not None])


_U64 = struct.Struct(">Q")
# builds a record on the per-message path from all its fields, in order, without NamedTuple's
# argument handling (measured: a fifth of a NamedTuple call's cost)
_new = tuple.__new__
# S5: the longest time between two consumer-timeout checks (RabbitMQ's channel tick, 60 s); a
# shorter timeout is checked every `timeout` ms, so a delivery times out between T and 2T
# (T <= 60 s) or T and T + 60 s after it was sent
TIMEOUT_CHECK_MAX = 60000


class _Props(NamedTuple):
    """A publish's properties as the channel checked them (ChannelCore.last_props)."""
    raw: bytes | None  # as they came
    props: BasicProperties | None  # decoded
    expiry: int  # the expiration property in ms, -1: none
    extra: tuple  # CC/BCC routing keys
    out_raw: bytes | None  # what the queues store (BCC removed, a direct reply-to name set)
    headers: dict | None  # the headers to route by


_NO_PROPS = _Props(None, None, -1, (), None, None)  # no properties cached
ROUTES_CACHED = 1024  # (exchange, routing key) pairs a channel remembers the queues of


def _check_name(name: str) -> None:
    """rabbit_channel:check_name: names are at most 255 bytes (shortstr) and printable."""
    if len(name.encode()) > 255:
        raise ChannelError(406, "name too long")


MAX_EXPIRY_TIMER = 315360000000  # rabbit_misc:check_expiry/1's limit: ten years in ms
_TO_INTEGER = re.compile(r"[+-]?[0-9]+")


def _erl_pair(atom: str, n: int, col: int) -> str:
    """``~p`` of ``{atom, N}`` printed from column ``col``: io_lib_pretty breaks the tuple
    after its first element, aligned under it, when it would reach column 79."""
    flat = f"{{{atom},{n}}}"
    if col + len(flat) <= 78:
        return flat
    return f"{{{atom},\n{' ' * (col + 1)}{n}}}"


def _parse_expiration(value) -> int:
    """The expiration property: a string holding an integer of milliseconds, 0 to
    MAX_EXPIRY_TIMER (rabbit_basic:parse_expiration, rabbit_misc:check_expiry); else 406 with
    RabbitMQ 3.10's text: "invalid expiration 'abc': no_integer", "... {leftover_string,"x"}",
    "... {value_negative,-1}", "... {value_too_large,315360000001}" (a long one wrapped as
    Erlang's ``~p`` wraps it)."""
    text = value if isinstance(value, str) else str(value)
    digits = _TO_INTEGER.match(text)  # string:to_integer/1: a sign, digits, the rest
    prefix = f"invalid expiration '{text}': "
    if digits is None:
        reason = "no_integer"
    else:
        n, rest = int(digits.group()), text[digits.end():]
        if rest:
            reason = erl_p((Atom("leftover_string"), rest))
        elif n < 0:
            reason = _erl_pair("value_negative", n, len(prefix))
        elif n > MAX_EXPIRY_TIMER:
            reason = _erl_pair("value_too_large", n, len(prefix))
        else:
            return n
    raise ChannelError(406, prefix + reason)


def _reply_error(reply, method) -> AMQPError:
    """The error a node or queue answered, naming the request method as RabbitMQ does."""
    cls = ConnectionError_ if is_hard_error(reply.code) else ChannelError
    return cls(reply.code or 541, reply.text or "internal error", method.CLASS_ID,
               method.METHOD_ID)


_HANDLERS = {
    RefusedPublish: ChannelCore._refused,
    am.ChannelClose: ChannelCore._close,
    am.ChannelCloseOk: ChannelCore._close_ok,
    am.ChannelFlow: ChannelCore._flow,
    am.ChannelOpen: ChannelCore._open,
    am.ExchangeDeclare: ChannelCore._exchange_declare,
    am.ExchangeDelete: ChannelCore._exchange_delete,
    am.ExchangeBind: ChannelCore._exchange_bind,
    am.ExchangeUnbind: ChannelCore._exchange_unbind,
    am.QueueDeclare: ChannelCore._queue_declare,
    am.QueueBind: ChannelCore._queue_bind,
    am.QueueUnbind: ChannelCore._queue_unbind,
    am.QueuePurge: ChannelCore._queue_purge,
    am.QueueDelete: ChannelCore._queue_delete,
    am.BasicQos: ChannelCore._qos,
    am.BasicConsume: ChannelCore._consume,
    am.BasicCancel: ChannelCore._cancel,
    am.BasicPublish: ChannelCore._publish,
    am.BasicGet: ChannelCore._get,
    am.BasicAck: ChannelCore._ack,
    am.BasicNack: ChannelCore._nack,
    am.BasicReject: ChannelCore._reject,
    am.BasicRecover: ChannelCore._recover,
    am.BasicRecoverAsync: ChannelCore._recover,
    am.ConfirmSelect: ChannelCore._confirm_select,
    am.TxSelect: ChannelCore._tx_select,
    am.TxCommit: ChannelCore._tx_commit,
    am.TxRollback: ChannelCore._tx_rollback,
}


_TABLE = channel_dispatch.TABLE  # message type -> (core, msg) -> None
