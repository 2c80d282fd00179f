"""The queue's logic without IO: messages ready and unacked, consumers with their prefetch
limits, round-robin delivery, requeue at the original position, TTL, max-length with its
overflow modes, dead-lettering, auto-delete and x-expires.

Mirrors rabbit_amqqueue_process.erl (consumers, limits, TTL, overflow, dead-lettering
decisions) together with the in-memory part of rabbit_variable_queue.erl (q4 and requeue
ordering). The actor shell (actors/queue/queue_process.py) feeds it messages (the channels' through
actors/core/queue_dispatch.py, through `handle`) and carries out what it asks through `out`, its
`QueuePort` of named callables that only send (the decisions are all here):

- `deliver(channel, items, bodies)`  a batch of deliveries (messages.Delivery) to one channel
- `confirm(channel, seqs, ok[, reason])` publisher confirms (ok) or nacks (not ok, reason as
  messages.Confirm says)
- `reply(addr, req_id, ok, result, code, text)`
- `get_reply(channel, req_id, item, message_count, body)` basic.get's answer (item None:
  get-empty)
- `consumer_gone(channel, ctag)`      the broker cancelled a consumer
- `credit(channel, n, nbytes)`        credit_flow bump for a publishing channel
- `demand(channel)`                   ask a channel with a global prefetch for tokens
- `release(channel, n)`               hand back tokens this queue cannot use
- `persist(msgs)`                     hand persistent messages to the backing queue
- `record_delivery(msgs)`              persistent messages handed out for the first time
- `forget(msgs)`                      tell the backing queue these are settled
- `dead_letter(msg, reason[, new_msg_id])` re-publish a message to the dead-letter exchange
  (new_msg_id, with events on: the copy's msg_id in the event log)
- `delete_self(reason)`               ask the node to delete this queue
- `schedule(at_ms)`                   call `tick` again at (monotonic) time at_ms
- `page_in(after_seq, n, priority)`   read the next n paged-out messages of a priority's lane
- `purge_paged(after_seq, priority)`  settle every paged-out message of a lane after after_seq
- `drop_paged(after_seq, n, priority)` settle the next n paged-out messages of a lane unread
  (drop-head with nothing to do with them: no dead-letter exchange, no confirm to answer)
- `now_ms()`                          now, monotonic ms (read once per message `handle` takes)
- `mirror_enqueued(msg, now)`         a mirrored master's: a message entered (its mirrors get it)
- `mirror_forget_messages(msgs)`      ... messages left the queue for good (its mirrors drop them)
- `mirror_confirm_batch()`            ... (batch, low) when a confirm must wait for the batch
  that carries it (MirrorHold), None when there is nothing to wait for

The backing queue answers `stored(nbytes)` once it has written what `persist` gave it,
`persisted(msgs)` once that is synced, `paged_in(...)` with a page and `paged_dropped(...)` once
it dropped what `drop_paged` asked.

Paging (rabbit_variable_queue's delta and q1, a lane per priority): actors/core/paging.py keeps
what is paged out and asks the backing queue for it; actors/core/page_io.py's `PageIO` decides
where each message goes (memory, its lane's tail, or the index) and takes pages back into
memory, given what it needs (no back-reference to this core): this core calls its named steps
and keeps the queue's decisions (drop-head's drops, whether owed drops must be read). Every
queue type pages, as RabbitMQ's classic queues v2. Priorities (rabbit_priority_queue): the
ready messages of each priority and which priority is served next are actors/core/priorities.py's
`PriorityLanes`. Publisher confirms: when each copy's confirm leaves is actors/core/confirms.py's
`QueueConfirms`.

Times are integer milliseconds of a monotonic clock: the port's `now_ms`, read once per message
by `handle`, or passed in by the caller of a method.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

from actors.core import NO_EVENTS, credit_flow, queue_dispatch, quorum
from actors.core.confirms import NOW, ON_SYNC, MirrorHold, QueueConfirms
from actors.core.consumers import ChannelState, Consumer, QueueConsumers
from actors.core.errors import ChannelError
from actors.core.keep_up import KeepUp
from actors.core.page_io import AT_HEAD, PageIO
from actors.core.paging import WAIT, Paging, PersistentCount
from actors.core.priorities import PriorityLanes
from actors.core.queue_args import check_consume_arguments
from actors.core.queue_msg import Msg
from actors.core.queue_settings import QueueSettings
from actors.core.queue_stats import DEAD_LETTERED, ConsumerUse, QueueCounters
from actors.messages import Delivery, PublishItem
from protocol.properties import BasicProperties, with_long_header

# builds a record on the per-message path from all its fields, in order, without NamedTuple's
# argument handling (measured: a fifth of a NamedTuple call's cost)
_new = tuple.__new__
__all__ = ["WAIT", "Msg", "QueueCore", "QueuePort"]
STORE_BEHIND_BYTES = 16 * 1024 * 1024  # bodies on their way to storage before credit waits


class _Arrivals:
    """What one Publish batch leaves to do once its messages are in."""

    __slots__ = ("bounded", "accepted", "refused", "to_persist")

    def __init__(self, bounded: bool):
        self.bounded = bounded  # the queue has a length limit (x-max-length, -bytes)
        self.accepted: list = []  # seq_nos confirmed on arrival
        self.refused: list = []  # seq_nos refused by reject-publish (nacked)
        self.to_persist: list = []  # Msgs to hand to the backing queue, in order


@dataclasses.dataclass(frozen=True, slots=True)
class QueuePort:
    """What QueueCore may do outside itself: its Queue actor's callables, named one by one (as
    ConnectionPort), each of which only sends; the core never reaches into its actor."""

    deliver: Callable[[str, list, list], None]  # (channel, Delivery items, bodies)
    confirm: Callable[..., None]  # (channel, seq_nos, ok, reason="") to the publisher
    reply: Callable[..., None]  # (address, req_id, ok, result=None, code=0, text="")
    get_reply: Callable[[str, int, object, int, object], None]  # basic.get's answer
    consumer_gone: Callable[[str, str], None]  # (channel, consumer tag) cancelled
    credit: Callable[[str, int, int], None]  # (channel, n, nbytes) credit_flow bump
    demand: Callable[[str], None]  # ask a channel for prefetch tokens
    release: Callable[[str, int], None]  # hand tokens back
    persist: Callable[[list], None]  # Msgs to the backing queue's storage
    record_delivery: Callable[[list], None]  # first deliveries of stored Msgs
    forget: Callable[[list], None]  # stored Msgs settled: the backing queue drops them
    page_in: Callable[..., None]  # (after_seq, n, priority) read a page back
    drop_paged: Callable[..., None]  # (after_seq, n, priority) settle paged ones unread
    purge_paged: Callable[..., None]  # (after_seq, priority) a lane's paged part purged
    dead_letter: Callable[..., None]  # (msg, reason, new_msg_id) re-publish to the DLX
    delete_self: Callable[[str], None]  # (reason) ask the node to delete this queue
    schedule: Callable[[int], None]  # call `tick` at this monotonic ms
    now_ms: Callable[[], int]  # now, monotonic ms
    mirror_enqueued: Callable[[Msg, int], None]  # (msg, now) a message for the mirrors
    mirror_forget_messages: Callable[[list], None]  # Msgs the mirrors drop
    mirror_confirm_batch: Callable[[], tuple | None]  # (batch, low) or None: see module doc
    events: object = NO_EVENTS  # the event log (actors.events in the shell)
    random_bytes: Callable[[int], bytes] = os.urandom  # msg ids of stored messages without one

    @classmethod
    def of(cls, shell, mirrors, **given) -> QueuePort:
        """The port of an object that has every callable by its name (the Queue actor), the
        `mirror_*` ones taken from its mirrors (actors/queue/mirror.py's Masters) without the
        prefix, and what is `given` (the event log, ids), which are the process's."""
        return cls(**given, **{f.name: getattr(mirrors, f.name[7:])
                               if f.name.startswith("mirror_") else getattr(shell, f.name)
                               for f in dataclasses.fields(cls)
                               if f.default is dataclasses.MISSING})


class QueueCore:
    def __init__(self, vhost: str, name: str, settings: QueueSettings, out: QueuePort,
                 now: int, auto_delete=False, delivery_window=2000, credit_more=credit_flow.MORE,
                 credit_more_bytes=credit_flow.MORE_BYTES, backlog_bytes=0, durable=False,
                 page_bytes=0, page_size=2048, epoch=0,
                 counters: QueueCounters | None = None):
        self.events = out.events  # (the port's event log and ids, kept at hand)
        # promotions of the queue before this master (the metadata's `epoch`): its events
        # name it, so the analysis can tell this master's copies from a deposed one's
        self.epoch = epoch
        self.random_bytes = out.random_bytes
        self.vhost, self.name = vhost, name  # identity
        self.durable = durable  # persistent messages go to the backing queue's storage
        self._delivered: list = []  # persistent messages delivered for the first time, to record
        self._forgotten: list = []  # messages settled by delivery (no_ack), to tell storage
        self.out = out  # what it may do outside itself (QueuePort, see module docstring)
        self.now_ms = out.now_ms  # (read once per message: kept at hand)
        # the management API's counts of what the queue took and gave (the actor samples them)
        self.counters = counters if counters is not None else QueueCounters()
        # a mirrored master's confirms waiting for its mirrors (or a majority of members)
        self.mirror_hold = MirrorHold()
        a = settings
        self.ttl = a.ttl  # queue TTL ms, None = none
        self.expires = a.expires  # unused-queue expiry ms, None = none
        self.max_length = a.max_length  # messages, None = unbounded
        self.max_bytes = a.max_bytes  # body bytes, None = unbounded
        self.overflow = a.overflow  # drop-head|reject-publish|reject-publish-dlx
        self.dlx = a.dlx  # dead-letter exchange name or None
        self.dlrk = a.dlrk  # routing key override or None
        # x-delivery-limit (S6): a message returned more often than this is dead-lettered
        # (reason delivery_limit) or dropped instead of requeued; None = no limit (the
        # argument and the delivery-limit policy key: queue_settings.parse)
        self.delivery_limit = a.delivery_limit
        # x-queue-type: "classic" or "quorum" (actors/core/quorum.py); a quorum queue stores
        # every message whatever its delivery mode and confirms it once stored (and, in a
        # cluster, once a majority of its members has it: the shell's Masters), as quorum
        # queues keep every message in their Raft log
        self.queue_type = a.queue_type
        self.store_all = self.queue_type == quorum.QUORUM and durable
        # when each copy's confirm leaves (x-confirm-on, seed 003), and the x-confirm-on=ack
        # answers collected until the end of the turn
        self.confirms = QueueConfirms(a.confirm_on)
        # ready messages by priority (x-max-priority), their counts, the order they leave in
        self.prios = PriorityLanes(a.max_priority)
        self.ready = self.prios.lanes  # its Ready by priority (the same list)
        # seq_id -> a message delivered and not yet settled (rabbit_variable_queue's
        # pending_ack), its Msg.channel and consumer_tag set: no record of its own, as a
        # per-delivery object living until the ack costs the collector (measured)
        self.unacked: dict[int, Msg] = {}
        self.unacked_bytes = 0  # body bytes of the unacked messages
        # messages_persistent of the messages in memory (ready or unacked); the paged ones
        # are their lanes' (Lane.pers)
        self.pers_count = PersistentCount()
        # messages dead-lettered or dropped, by reason and strategy (queue_stats.DEAD_LETTERED)
        self.dead_lettered = dict.fromkeys(DEAD_LETTERED, 0)
        # x-single-active-consumer: one consumer receives at a time (RabbitMQ takes the
        # argument when it is the boolean true, anything else is off)
        self.single_active = a.single_active
        self.cons = QueueConsumers(delivery_window, single_active=self.single_active)
        self.consumers = self.cons.by_key  # (channel, tag) -> Consumer, round-robin order
        # whether a consumer could take a message at once, and since when (the management
        # API's consumer_utilisation: rabbit_queue_consumers' `use`)
        self.use = ConsumerUse(now)
        self.channels = self.cons.channels  # channel address -> ChannelState here
        self.limited: set = set()  # channels with a global prefetch (token holders)
        self.hold = False  # runs wait until the shell's mailbox is drained (defer_runs)
        self.run_due = False  # a run was asked for while held
        self.next_seq_id = 1  # the seq_id the next message gets
        self.auto_delete = auto_delete  # delete when the last consumer goes
        self.had_consumer = False  # auto-delete applies only after a first consumer
        self.last_used = now  # for x-expires
        # credit_flow's receiving half: a publisher's credit is bumped after credit_more
        # messages or credit_more_bytes body bytes
        self.credit = credit_flow.ReceiverCredit(credit_more, credit_more_bytes)
        # credit is withheld while more body bytes than this wait (0 = never): publishers slow
        # to the pace the queue drains instead of growing it without bound, as RabbitMQ's memory
        # alarm blocks them; the credit is paid once the backlog is below the mark again
        self.backlog_bytes = backlog_bytes
        # body bytes handed to the backing queue and not yet written (`stored`): past
        # STORE_BEHIND_BYTES publisher credit is withheld too (credit_flow towards msg_store in
        # RabbitMQ), or a publisher of transient messages, confirmed at once, would grow the
        # backing queue's mailbox without bound while the queue pages
        self.store_pending = 0
        self.keep_up = KeepUp()  # do the consumers keep up with the publishers (credit bias)
        # what is paged out, each priority's lane (actors/core/paging.py)
        self.paging = Paging(out, len(self.prios.lanes), page_bytes, page_size)
        # what goes out to the index and comes back (actors/core/page_io.py)
        self.page_io = PageIO(self.paging, self.prios, self.pers_count, self.confirms, durable,
                              out.random_bytes, self._drop_maxlen, self._must_see_drops)
        self.deleted = False  # the queue has been deleted
        self._batches: dict[str, tuple[list, list]] = {}  # channel -> (items, bodies) pending
        self._waiting_gets: list = []  # basic.gets (messages.Get) waiting for a page
        self._scheduled = 0  # the earliest tick asked for, 0 = none
        self._head_ts: dict = {}  # seq_id -> (Msg, its timestamp property) of the heads last
        #                           sampled: a head's properties are decoded once
        if self.expires:
            self._schedule(now + self.expires)

    # --- input ------------------------------------------------------------------------------
    def handle(self, msg) -> None:
        """The one entry for the messages of its channels (queue_dispatch's table); anything
        else is not the core's and is ignored."""
        handler = _TABLE.get(type(msg))
        if handler is not None:
            handler(self, msg, self.now_ms())

    def retry_gets(self, now: int) -> None:
        """A page came back: the basic.gets that waited for it are answered (or wait again)."""
        queue_dispatch.retry_gets(self, now)

    def defer_runs(self, defer: bool) -> None:
        """The shell has more messages waiting (True): delivery runs wait until it has drained
        them, so that many acks or publishes turn into one batch of deliveries."""
        self.hold = defer

    def touch(self, now: int) -> None:
        """The queue was used without a consumer or a message (a passive declare): its
        x-expires counts from now."""
        self.last_used = now

    @property
    def ready_count(self) -> int:
        """Messages ready in memory (PriorityLanes.count)."""
        return self.prios.count

    @property
    def ready_bytes(self) -> int:
        """Their body bytes (PriorityLanes.nbytes)."""
        return self.prios.nbytes

    # --- publishing -------------------------------------------------------------------------
    def publish(self, sender: str, items: list[PublishItem], bodies: list, now: int) -> None:
        """A Publish batch from `sender` (a channel, or "": a dead-lettering queue): each
        message comes in (`_arrive`); then what it left to write goes to the backing queue,
        the publisher hears of its confirms and refusals, and its credit is bumped."""
        batch = _Arrivals(self.max_length is not None or self.max_bytes is not None)
        for item, body in zip(items, bodies):
            self._arrive(sender, item, body, now, batch)
        self._store(batch)
        self._answer_arrivals(sender, batch)
        self._credit_publisher(sender, items, bodies, now)
        self.run(now)

    def _arrive(self, sender: str, item: PublishItem, body, now: int, batch: _Arrivals) -> None:
        """One message: admitted under the queue's length limit, placed (memory, its lane's
        tail or the index), enqueued, its confirm decided, the queue trimmed to its limit."""
        # every field of the PublishItem, in its order (one step on the per-message path)
        pub_seq, exchange, rk, props, persistent, priority, expiry, msg_id = item
        if self.store_all:
            persistent = True  # stored and synced before its confirm (quorum queue)
        if batch.bounded and not self._admit(item, body, persistent, now, batch):
            return
        divert, behind = (self.page_io.placement(priority, batch.to_persist)
                          if self.paging.pageable else AT_HEAD)
        msg = self._enqueue(exchange, rk, props, body, persistent, priority, expiry, now,
                            sender, pub_seq, msg_id, divert, behind)
        if msg is None:
            if pub_seq and self.confirms.confirms_gone():
                batch.accepted.append(pub_seq)  # expired at once (TTL 0): confirmed, as RabbitMQ
            return
        self._confirm_or_store(msg, divert, behind, batch)
        if batch.bounded and self._over_limit():
            self._trim(now, batch)

    def _admit(self, item: PublishItem, body, persistent: bool, now: int,
               batch: _Arrivals) -> bool:
        """A length-limited queue takes the message (drop-head makes room after it comes in),
        or refuses it (reject-publish: nacked; reject-publish-dlx: dead-lettered too)."""
        if self.consumers and self._full_for(len(body)):
            # what a waiting consumer takes does not count: deliver before judging, so a batch
            # fares as the same messages one by one (storage hears of a message before it may
            # hear it is settled)
            self._store(batch)
            self._deliver_ready(now)
        if self.overflow == "drop-head" or not self._full_for(len(body)):
            return True
        if item.seq_no:
            batch.refused.append(item.seq_no)
        if self.overflow == "reject-publish-dlx" and self.dlx is not None:
            # (its msg_id, for the event log's link from the refused publish to its copy)
            self._dead_letter_or_drop(Msg(0, item.exchange, item.routing_key, item.props_raw,
                                          body, persistent, ttl=item.expiry_ms,
                                          msg_id=item.msg_id), "maxlen")
        return False

    def _confirm_or_store(self, msg: Msg, divert: bool, behind: bool,
                          batch: _Arrivals) -> None:
        """When the message's confirm leaves (QueueConfirms.on_arrival) and what it needs
        written: a stored one is confirmed after the sync; one paged out otherwise is written
        but never synced for its own sake (confirmed now, or its ack waiter kept by its lane)."""
        when = self.confirms.on_arrival(msg.persistent and self.durable)
        if when == ON_SYNC:
            if behind:
                self.page_io.write_tail_before(msg, batch.to_persist)
            msg.stored = True
            batch.to_persist.append(msg)  # confirmed when the backing queue has synced it
            return
        if when == NOW and msg.pub_seq:
            batch.accepted.append(msg.pub_seq)
        if divert:
            self.page_io.write_paged(msg, batch.to_persist)

    def _trim(self, now: int, batch: _Arrivals) -> None:
        """Over its limit once a message came in: waiting consumers take what they can, then
        drop-head (the backing queue hears of a message before it may hear it is dropped)."""
        self._store(batch)
        if self.consumers:
            self._deliver_ready(now)
        self._enforce_max_length()

    def _store(self, batch: _Arrivals) -> None:
        """What the batch has left to write so far goes to the backing queue."""
        if batch.to_persist:
            self._persist(batch.to_persist)
            batch.to_persist = []

    def _answer_arrivals(self, sender: str, batch: _Arrivals) -> None:
        """The publisher's confirms of what was taken on arrival, and nacks of what was
        refused."""
        if batch.accepted:
            self.confirm(sender, batch.accepted)
        if batch.refused:
            self._nack(sender, batch.refused, "reject-publish")

    def _credit_publisher(self, sender: str, items: list, bodies: list, now: int) -> None:
        """credit_flow: a publisher's credit is bumped every so many messages or bytes, unless
        the queue withholds it (backlog, storage behind, consumers first)."""
        keep_up = self.keep_up
        keep_up.roll(now)
        keep_up.ins += len(items)
        if sender:
            due = self.credit.received(sender, len(items), sum(map(len, bodies)))
            if due is not None:
                if self._withholding():
                    self.credit.withhold(sender, due)
                    if keep_up.on:
                        self._schedule(keep_up.due())  # a verdict that may end frees it
                else:
                    self.out.credit(sender, *due)

    def persisted(self, msgs: list) -> None:
        """The backing queue made these safe: confirm them to their publishers."""
        for channel, seqs in QueueConfirms.by_publisher(msgs).items():
            self.confirm(channel, seqs)

    def restore(self, next_seq_id: int, entries: list, more: int | list,
                more_bytes: int | list, now: int, wall_now: int) -> None:
        """Start-up of a durable queue: the first messages its index kept, in order
        ([StoredMessage]; expiry times are wall-clock ms in the index), and
        how many more it holds (paged out, read back as the queue drains): ints for a queue
        without priorities, else lists by priority (each lane has an index of its own)."""
        self.page_io.restore(entries, more, more_bytes, now, wall_now)
        self.next_seq_id = max(self.next_seq_id, next_seq_id)
        self._schedule_head()

    def refused(self, msgs: list) -> None:
        """The backing queue could not store these (disk full): they leave the queue and their
        publishers get basic.nack."""
        gone = {msg.seq_id for msg in msgs}
        self.stored(sum(len(msg.body) for msg in msgs))  # not written, but no longer pending
        # x-confirm-on: paged ones lost before any consumer saw them
        for publisher, pub_seq in self.page_io.refused(msgs, gone):
            self._nack(publisher, [pub_seq], "disk")
        self.pers_count.gone(self.prios.remove(gone))
        for channel, seqs in QueueConfirms.by_publisher(msgs).items():
            self._nack(channel, seqs, "disk")

    def _enqueue(self, exchange, rk, props, body, persistent, priority, expiry, now, sender,
                 pub_seq, msg_id=None, divert=False, behind=False):
        ttl = self.ttl
        if expiry is not None and expiry >= 0:
            ttl = expiry if ttl is None else min(ttl, expiry)
        msg = Msg(self.next_seq_id, exchange, rk, props, body, persistent,
                  self.prios.clamp(priority), now + ttl if ttl is not None else 0,
                  expiry if expiry is not None else -1, sender, pub_seq,
                  msg_id or (self.random_bytes(16) if (persistent and self.durable) or divert
                             else None))
        self.next_seq_id += 1
        if persistent and self.durable:
            # (PersistentCount.add inlined: one call less per persistent message)
            msg.pers = True
            pers = self.pers_count
            pers.n += 1
            pers.nbytes += len(body)
        if ttl == 0:
            # TTL 0: delivered only if a consumer can take it right now (RabbitMQ's rule)
            if divert or not self._next_consumer_exists():
                self._expire(msg)
                return None
            msg.expires_at = 0
        if msg.msg_id is not None and self.events.enabled():
            self.events.put("enqueued", msg.msg_id, (self.vhost, self.name, msg.seq_id, divert,
                                                     self.durable, self.epoch, None))
        self.out.mirror_enqueued(msg, now)  # (mirrored: the master sends it to its mirrors)
        if divert:
            self.page_io.page_out(msg)
            return msg
        if behind:
            self.prios.push_behind(msg)
        else:
            self.prios.push(msg)
        return msg

    def _forget(self, msgs) -> None:
        """Messages that left the queue for good: uncounted, and the backing queue told."""
        self.pers_count.gone(msgs)
        self.out.mirror_forget_messages(msgs)
        stored = [x for x in msgs if x.stored]  # persistent, paged out or recovered
        if stored:
            self.out.forget(stored)

    def messages(self) -> list:
        """Every message in memory, ready or unacked, in seq_id order (a mirror's sync)."""
        out = self.prios.messages()
        out += self.unacked.values()
        return sorted(out, key=lambda msg: msg.seq_id)

    def _count(self) -> int:
        """Messages ready, paged ones included (those drop-head took already are not)."""
        return self.prios.count + self.paging.paged - self.paging.owed

    def _full_for(self, size: int) -> bool:
        # paged messages count (classic queues v2: the limit is the queue's, wherever its
        # messages are); the bytes of owed ones count until they are read back and dropped
        if self.max_length is not None and self._count() >= self.max_length:
            return True
        if self.max_bytes is not None and self.prios.nbytes + self.paging.paged_bytes + size > \
                self.max_bytes:
            return True
        return False

    def _over_limit(self) -> bool:
        count = self._count()
        return count > 0 and (
            (self.max_length is not None and count > self.max_length) or
            (self.max_bytes is not None and
             self.prios.nbytes + self.paging.paged_bytes > self.max_bytes))

    def _enforce_max_length(self) -> None:
        """drop-head (rabbit_amqqueue_process:maybe_drop_head): the head goes (from the highest
        priority) until the queue is within its limits. A paged head is owed: counted off now
        and dropped (dead-lettered) when its page is read back; over x-max-length-bytes only,
        its size is not known before then, so the drop waits for the page."""
        while self._over_limit():
            # the head, as a consumer would see it (seen on RabbitMQ 3.10.8)
            p = self._head_lane()
            if p is None:
                break
            if self.ready[p]:
                self._drop(self.prios.pop(p), "maxlen")
                continue
            # its head is paged out: owed, or waited for (over the bytes only)
            if not self.page_io.drop_paged_head(p, self.max_length is not None and
                                                self._count() > self.max_length):
                break
        self.page_io.ask_owing()

    def _drop_maxlen(self, msg: Msg) -> None:
        """drop-head's drop of a message PageIO hands back: an owed one read back, or the
        first of a lane's tail when every paged message before it is owed already."""
        self._drop(msg, "maxlen")

    def _must_see_drops(self) -> bool:
        """Owed drops must be read back, not dropped unread: dead-lettering, x-confirm-on
        nacks or the event log need each message."""
        return self.dlx is not None or self.confirms.late or self.events.enabled()

    def paged_dropped(self, priority: int, n: int, nbytes: int, last_seq: int,
                      pers: int = 0, pers_bytes: int = 0) -> None:
        """The backing queue dropped the next n paged messages of a lane (nbytes, the last
        one's seq_id; `pers` of them persistent, of pers_bytes), as drop_paged asked; with
        nothing more owed, consumers may want the next page."""
        if not self.page_io.paged_dropped(priority, n, nbytes, last_seq, pers, pers_bytes) and \
                self.consumers:
            self.page_io.want_page()

    # --- consumers ----------------------------------------------------------------------------
    def consume(self, channel, tag, no_ack, exclusive, prefetch, channel_prefetch, now,
                arguments=None) -> None:
        """basic.consume (rabbit_amqqueue:basic_consume, then rabbit_amqqueue_process's
        handle_call basic_consume): the arguments are checked (x-priority an integer), an
        exclusive consumer is refused where others consume, and always on a single active
        consumer queue (exclusive_consume_unavailable, which the channel turns into 403)."""
        check_consume_arguments(arguments, self.name, self.vhost, self.queue_type)
        if self.queue_type == quorum.QUORUM:
            quorum.check_consume_qos(channel_prefetch, self.name, self.vhost)
        if exclusive and (self.consumers or self.single_active):
            raise ChannelError(403, f"queue '{self.name}' in vhost '{self.vhost}' in exclusive "
                                    "use")
        if any(c.exclusive for c in self.consumers.values()):
            raise ChannelError(403, f"queue '{self.name}' in vhost '{self.vhost}' in exclusive "
                                    "use")
        priority = arguments.get("x-priority", 0) if arguments else 0
        self.cons.add(channel, tag, no_ack, prefetch, exclusive, priority)
        self._set_channel_limit(channel, channel_prefetch)
        self.had_consumer = True
        self.last_used = now
        self.use.update(True, now)  # rabbit_queue_consumers:add/11

    def cancel(self, channel, tag, now) -> bool:
        c = self.cons.remove(channel, tag)
        self.last_used = now
        if c is not None:
            self._check_auto_delete()
            if self.limited:
                self._balance_tokens()
        return c is not None

    def set_limit(self, channel, limit, now) -> None:
        self._set_channel_limit(channel, limit)
        self.run(now)

    def _set_channel_limit(self, channel, limit) -> None:
        """The channel's global prefetch is now `limit`: a demand is asked again (the channel
        drops pending demands when its limit changes); tokens go with a limit going to 0."""
        st = self._channel(channel)
        if not limit or not st.limit:
            st.tokens = 0
        st.limit = limit
        st.asked = False
        if limit:
            self.limited.add(channel)
        else:
            self.limited.discard(channel)

    def grant(self, channel, n, now) -> None:
        """The channel granted n deliveries under its global prefetch."""
        st = self.channels.get(channel)
        if st is None or not st.limit:
            return
        st.tokens += n
        st.asked = False
        self.run(now)

    def _balance_tokens(self) -> None:
        """Ask for tokens where a consumer waits for one; give back those no consumer can use
        now, so that another queue of the channel gets them."""
        for channel in list(self.limited):
            st = self.channels.get(channel)
            if st is None:
                self.limited.discard(channel)
                continue
            if st.wants and not st.asked and self.prios.count:
                st.asked = True
                self.out.demand(channel)
            st.wants = False
            if st.tokens > 0 and not (self.prios.count and self._usable_by(channel)):
                self.out.release(channel, st.tokens)
                st.tokens = 0

    def _usable_by(self, channel) -> bool:
        """A consumer of the channel below its own prefetch (tokens and writer aside)."""
        receiving = self.cons.receiving
        for c in self.consumers.values():
            if c.channel == channel and not c.no_ack and not (
                    c.prefetch and c.unacked >= c.prefetch) and receiving(c):
                return True
        return False

    def _check_auto_delete(self) -> None:
        if self.auto_delete and self.had_consumer and not self.consumers and not self.deleted:
            self.out.delete_self("auto-delete: last consumer cancelled")

    def _channel(self, channel) -> ChannelState:
        return self.cons.channel(channel)

    # --- delivery -----------------------------------------------------------------------------
    def run(self, now: int, budget: int = 1000) -> bool:
        """Deliver what can be delivered; True if work is left (call again).

        While `hold` is set (the shell has more messages waiting in its mailbox) this only
        notes that a run is due: the shell runs once the mailbox is drained, so that many
        acks or publishes turn into one batch of deliveries (rabbit_amqqueue_process runs
        its delivery loop the same way, after draining)."""
        if self.hold:
            self.run_due = True
            return False
        self.run_due = False
        return self._deliver_ready(now, budget)

    def _deliver_ready(self, now: int, budget: int = 1000) -> bool:
        self.keep_up.roll(now)
        self._expire_head(now)
        prios, ready = self.prios, self.ready
        single = not prios.max_priority  # (one priority: no choice to make per message)
        while prios.count and self.consumers and budget > 0:
            p = 0 if single else self._head_lane()
            if not ready[p].items:
                break  # its head is paged out (its tail waits behind it): wait for the page
            c = self.cons.next()
            if c is None:
                self.use.update(False, now)  # every consumer blocked (deliver/5: undelivered)
                break
            msg = prios.pop(p)
            if msg.expires_at and msg.expires_at <= now:
                self._expire(msg)
                continue
            self._deliver(c, msg)
            budget -= 1
        self.flush()
        if self.limited:
            self._balance_tokens()
        if self.credit.owed:
            self._pay_owed()
        if self.paging.paged:
            self.page_io.want_page()
        self._schedule_head()
        if not self.use.active and self.consumers and self.cons.any_unblocked():
            self.use.update(True, now)  # unblocked (an ack, the writer's window, a token)
        return budget == 0 and prios.count > 0 and self._next_consumer_exists()

    def _head_lane(self):
        """The priority whose head is next, in memory or paged out (owed ones aside); None
        when the queue is empty."""
        return self.prios.head_lane(self.paging.has_head)

    def paged_in(self, entries: list, dropped: int, dropped_bytes: int, now: int,
                 wall_now: int, priority: int = 0) -> None:
        """The backing queue read the next page of a lane: [StoredMessage] in
        order; `dropped` entries were transient ones left from before a restart. Owed ones
        (drop-head) are dropped first (PageIO.paged_in); then the limits apply again."""
        self.page_io.paged_in(entries, dropped, dropped_bytes, now, wall_now, priority)
        if self.max_length is not None or self.max_bytes is not None:
            self._enforce_max_length()
        if self.confirms.answers:
            self._flush_answers()

    def _withholding(self) -> bool:
        """Publisher credit waits: too much ready (queue_backlog_bytes, 0 = no mark) or the
        backing queue is behind with its writes."""
        return (self.store_pending > STORE_BEHIND_BYTES or
                bool(self.backlog_bytes) and self.prios.nbytes > self.backlog_bytes or
                self._consumers_first())

    def _consumers_first(self) -> bool:
        """Consumers that keep up (actors/core/keep_up.py) get the queue before more
        publishes once it holds more than they need to stay busy (or its memory budget):
        credit waits, nothing pages, a message waits milliseconds, not the budget's worth."""
        k = self.keep_up
        pg = self.paging
        return (k.on and pg.pageable and bool(self.consumers) and
                (self.prios.nbytes + pg.paged_bytes > min(pg.page_bytes, k.hold_bytes) or
                 self.prios.count > k.hold_messages))

    def _persist(self, msgs: list) -> None:
        self.store_pending += sum(len(msg.body) for msg in msgs)
        self.out.persist(msgs)

    def stored(self, nbytes: int) -> None:
        """The backing queue wrote (not necessarily synced) `nbytes` of bodies."""
        self.store_pending -= nbytes
        if self.credit.owed:
            self._pay_owed()

    def _pay_owed(self) -> None:
        if not self._withholding():
            for channel, n, nbytes in self.credit.pay():
                self.out.credit(channel, n, nbytes)

    def _next_consumer_exists(self) -> bool:
        return self.cons.any_can_take()

    def _deliver(self, c: Consumer, msg: Msg) -> None:
        self.keep_up.outs += 1
        st = self.channels[c.channel]
        self.cons.delivering(st, len(msg.body))
        items, bodies = self._batches.setdefault(c.channel, ([], []))
        items.append(self._delivery(msg, c.tag, c.no_ack))
        bodies.append(msg.body)
        if c.no_ack:
            if self.confirms.late:
                self._answer(msg, True)  # delivered with no ack to wait for
            self._forgotten.append(msg)
        else:
            if msg.persistent and not msg.redelivered and self.durable:
                self._delivered.append(msg)
            if st.limit:
                st.tokens -= 1
            c.unacked += 1
            st.unacked += 1
            msg.channel, msg.consumer_tag = c.channel, c.tag
            self.unacked[msg.seq_id] = msg
            self.unacked_bytes += len(msg.body)
            msg.redelivered = True

    def _delivery(self, msg: Msg, ctag: str, no_ack: bool) -> Delivery:
        """What the channel is told of a message it gets (ctag "": basic.get)."""
        msg_id = msg.msg_id
        if msg_id is not None and not self.events.enabled():
            msg_id = None  # the event log's id, for the channel's events only
        if msg.pub_seq and self.confirms.carries(no_ack):
            publisher, seq_no = msg.publisher, msg.pub_seq  # the channel confirms on ack
        else:
            publisher, seq_no = "", 0
        return _new(Delivery, (ctag, msg.seq_id, msg.redelivered, msg.exchange, msg.routing_key,
                               with_delivery_count(msg.props_raw, msg.delivery_count)
                               if msg.delivery_count else msg.props_raw,
                               publisher, seq_no, msg_id))

    def flush(self) -> None:
        batches, self._batches = self._batches, {}
        for channel, (items, bodies) in batches.items():
            self.counters.delivered(channel, items, self.consumers)
            self.out.deliver(channel, items, bodies)
        if self._delivered:
            delivered, self._delivered = self._delivered, []
            self.out.record_delivery(delivered)
        if self._forgotten:
            forgotten, self._forgotten = self._forgotten, []
            self._forget(forgotten)
        if self.confirms.answers:
            self._flush_answers()

    def set_confirm_on(self, mode: str) -> None:
        """The queue's effective confirm-on changed (a policy): messages waiting for an ack are
        confirmed as `enqueue` would have (after storage when persistent in a durable queue)."""
        if mode == self.confirms.mode:
            return
        if self.confirms.set_mode(mode):
            waiting = [msg for msg in self.prios.messages() if msg.pub_seq]
            waiting += [msg for msg in self.unacked.values() if msg.pub_seq]
            store = [msg for msg in waiting if msg.persistent and self.durable]
            for msg in store:
                msg.stored = True
            if store:
                self._persist(store)
            for msg in waiting:
                if not msg.stored:
                    self._answer(msg, True)
            # paged out meanwhile: written, confirmed as enqueue's
            for publisher, pub_seq in self.paging.drain_waiters():
                self.confirms.answer(publisher, pub_seq, True)
            self._flush_answers()

    # --- policies ---------------------------------------------------------------------------
    def apply_settings(self, settings: QueueSettings, now: int) -> None:
        """The queue's effective settings changed (a policy or operator policy:
        queue_settings.parse). As rabbit_amqqueue_process:process_args_policy/1: a new
        confirm-on applies as set_confirm_on says, a new message TTL applies to messages
        published from now on, a new max-length / max-length-bytes drops or dead-letters the
        head at once (drop-head) or refuses what comes next (reject-*), a new expires counts
        from the queue's last use. The limit counts paged messages too."""
        self.set_confirm_on(settings.confirm_on)
        self.ttl = settings.ttl
        self.expires = settings.expires
        self.max_length = settings.max_length
        self.max_bytes = settings.max_bytes
        self.overflow = settings.overflow
        self.dlx = settings.dlx
        self.dlrk = settings.dlrk
        self.delivery_limit = settings.delivery_limit
        if self.max_length is not None or self.max_bytes is not None:
            if self.overflow == "drop-head" and self._over_limit():
                self._enforce_max_length()
        if self.expires:
            self._schedule(max(self.last_used + self.expires, now + 1))
        self.run(now)

    def _answer(self, msg: Msg, ok: bool) -> None:
        """x-confirm-on=ack/ack-lite: the publisher's confirm (ok) or nack for this message,
        answered once."""
        self.confirms.answer(msg.publisher, msg.pub_seq, ok)
        msg.pub_seq = 0

    def _flush_answers(self) -> None:
        for (publisher, ok), seqs in self.confirms.take().items():
            if ok:
                self.confirm(publisher, seqs)
            else:  # x-confirm-on: the message left the queue before any consumer acked it
                self._nack(publisher, seqs, "lost")

    def confirm(self, publisher, seqs) -> None:
        """basic.ack to a publisher, unless a mirrored master's mirrors (or a quorum queue's
        majority) do not have the batch that carried these yet: then held until they do
        (`mirrors_acked`)."""
        if not publisher:
            return  # (dead-lettered: no publisher to answer)
        wait = self.out.mirror_confirm_batch()
        if wait is not None and self.mirror_hold.hold(wait[0], publisher, seqs, wait[1]):
            return
        self.out.confirm(publisher, seqs, True)
        self.counters.confirmed(self.confirms.mode, len(seqs))

    def mirrors_acked(self, low: int) -> None:
        """The mirrors (or a majority of members) now have every batch up to `low`: the
        confirms held for them go."""
        for publisher, seqs in self.mirror_hold.release(low):
            self.out.confirm(publisher, seqs, True)
            self.counters.confirmed(self.confirms.mode, len(seqs))

    def _nack(self, publisher, seqs, reason) -> None:
        """basic.nack to a publisher; the reason travels only for the event log."""
        if not publisher:
            return
        if self.events.enabled():
            self.out.confirm(publisher, seqs, False, reason)
        else:
            self.out.confirm(publisher, seqs, False)

    def sent(self, channel, n, now) -> None:
        """The channel's writer put n deliveries on the wire: more may follow."""
        if self.cons.sent(channel, n):
            self.run(now)

    def get(self, channel, no_ack, now):
        """basic.get -> (Delivery, body, message_count), None when empty, or WAIT when the
        next message is paged out (ask again after `paged_in`)."""
        self.last_used = now
        self._expire_head(now)
        p = self._head_lane()
        if p is None:
            return None
        if not self.ready[p]:
            self.page_io.want_page()
            return WAIT
        msg = self.prios.pop(p)
        # rabbit_amqqueue_process:fetch/2 drops the expired messages the fetch brought to the
        # head before get-ok's message-count is taken
        self._expire_head(now)
        self.keep_up.outs += 1
        if no_ack:
            if self.confirms.late:
                self._answer(msg, True)
                self._flush_answers()
            self._forget([msg])
        else:
            if msg.persistent and not msg.redelivered and self.durable:
                self.out.record_delivery([msg])
            st = self._channel(channel)
            st.unacked += 1
            msg.channel, msg.consumer_tag = channel, ""
            self.unacked[msg.seq_id] = msg
            self.unacked_bytes += len(msg.body)
        item = self._delivery(msg, "", no_ack)
        msg.redelivered = True
        if self.paging.paged:
            self.page_io.want_page()
        return item, msg.body, self._count()

    def wait_for_page(self, request) -> None:
        """A basic.get found its head paged out (WAIT): kept until a page is read back."""
        self._waiting_gets.append(request)

    def take_waiting_gets(self) -> list:
        """The basic.gets that waited for a page, to be tried again."""
        gets, self._waiting_gets = self._waiting_gets, []
        return gets

    # --- settlement ---------------------------------------------------------------------------
    def settle(self, channel, op, seq_ids, now) -> None:
        """op: 0 ack, 1 requeue, 2 discard (dead-letter when configured)."""
        done, requeue = [], []
        for seq_id in seq_ids:
            msg = self.unacked.get(seq_id)
            if msg is None or msg.channel != channel:
                continue  # (not this channel's: meant for an earlier incarnation's delivery)
            del self.unacked[seq_id]
            self.unacked_bytes -= len(msg.body)
            self._settled(channel, msg.consumer_tag)
            if op == 1:
                requeue.append(msg)
            else:
                done.append(msg)
                answer = self.confirms.on_settle(op == 0)
                if answer is not None:
                    self._answer(msg, answer)
                if op == 2:
                    self._dead_letter_or_drop(msg, "rejected")
        if done:
            self._forget(done)
        if requeue:
            self._requeue(requeue)
        self.run(now)

    def _settled(self, channel, tag) -> None:
        self.cons.settled(channel, tag)

    def set_delivery_limit(self, limit) -> None:
        """The queue's effective delivery limit (argument and policy) changed; None = none."""
        self.delivery_limit = limit

    def _requeue(self, msgs: list) -> None:
        """Deliveries that ended in a return: back in place, or, past the delivery limit,
        dead-lettered (reason delivery_limit) or dropped (rabbit_fifo's delivery_limit)."""
        for msg in msgs:
            msg.delivery_count += 1
        limit = self.delivery_limit
        if limit is not None:
            dead = [msg for msg in msgs if msg.delivery_count > limit]
            if dead:
                msgs = [msg for msg in msgs if msg.delivery_count <= limit]
                for msg in dead:
                    self._drop(msg, "delivery_limit")
                if not msgs:
                    return
        if self.events.enabled():
            for msg in msgs:
                if msg.msg_id is not None:
                    self.events.emit("requeued", msg.msg_id, actor="queue", vhost=self.vhost,
                                     queue=self.name, seq_id=msg.seq_id)
        for msg in msgs:
            msg.redelivered = True
        self.prios.requeue(msgs)
        self._enforce_max_length()

    def channel_down(self, channel, now) -> None:
        """The channel closed or its connection died: requeue its unacked, drop its consumers."""
        back = [msg for msg in self.unacked.values() if msg.channel == channel]
        for msg in back:
            del self.unacked[msg.seq_id]
            self.unacked_bytes -= len(msg.body)
        self.cons.drop_channel(channel)
        self.limited.discard(channel)
        self.credit.forget(channel)
        if back:
            self._requeue(back)
        self.last_used = now
        self._check_auto_delete()
        self.run(now)

    def channels_down(self, endpoint_prefix: str, now) -> None:
        """Every channel of a dead connection worker."""
        for ch in {msg.channel for msg in self.unacked.values()} | \
                {ch for ch, _ in self.consumers} | set(self.channels):
            if ch.startswith(endpoint_prefix):
                self.channel_down(ch, now)

    # --- expiry, dead-lettering, dropping -----------------------------------------------------
    def _expire_head(self, now) -> None:
        for msg in self.prios.expired(now):
            self._expire(msg)

    def _expire(self, msg) -> None:
        if msg.msg_id is not None and self.events.enabled():
            self.events.emit("expired", msg.msg_id, actor="queue", vhost=self.vhost,
                             queue=self.name, seq_id=msg.seq_id)
        if self.confirms.late:
            self._answer(msg, False)
        self._dead_letter_or_drop(msg, "expired")
        self._forget([msg])

    def _drop(self, msg, reason) -> None:
        if msg.msg_id is not None and self.events.enabled():
            self.events.emit("dropped", msg.msg_id, actor="queue", vhost=self.vhost,
                             queue=self.name, seq_id=msg.seq_id, reason=reason)
        if self.confirms.late:
            self._answer(msg, False)
        self._dead_letter_or_drop(msg, reason)
        self._forget([msg])

    def _count_dead_letter(self, reason: str) -> None:
        """One message dead-lettered for `reason`, to the dead-letter exchange or dropped
        without one (Prometheus' messages_dead_lettered_* by dead_letter_strategy)."""
        strategy = "at_most_once" if self.dlx is not None else "disabled"
        self.dead_lettered[f"dead_lettered_{reason}_{strategy}"] += 1

    def _dead_letter_or_drop(self, msg, reason) -> None:
        self._count_dead_letter(reason)
        if self.dlx is not None:
            if msg.msg_id is not None and self.events.enabled():
                # the copy gets an id of its own, named here so parent and child link both ways
                child = self.random_bytes(16)
                self.events.emit("dead_lettered", msg.msg_id, actor="queue", vhost=self.vhost,
                                 queue=self.name, seq_id=msg.seq_id, reason=reason,
                                 exchange=self.dlx, new_msg_id=child)
                self.out.dead_letter(msg, reason, child)
                return
            self.out.dead_letter(msg, reason)

    def tick(self, now) -> None:
        self._scheduled = 0
        self.keep_up.roll(now)
        if self.credit.owed and self.keep_up.on:
            self._schedule(self.keep_up.due())  # judged again then
        if self.expires and not self.consumers and now - self.last_used >= self.expires:
            if not self.deleted:
                self.out.delete_self("x-expires: unused for %d ms" % self.expires)
            return
        self.run(now)
        if self.expires:
            self._schedule(max(self.last_used + self.expires, now + 1))

    def _schedule_head(self) -> None:
        at = self.prios.next_expiry()
        if at is not None:
            self._schedule(at)

    def _schedule(self, at: int) -> None:
        if not self._scheduled or at < self._scheduled:
            self._scheduled = at
            self.out.schedule(at)

    # --- admin --------------------------------------------------------------------------------
    def adopted(self, mine: set, paged) -> list:
        """Promoted from mirror: of its messages in memory (`mine`, seq_ids), a durable queue
        stores the persistent ones from now on -> those its index does not hold yet (a priority
        in `paged` was written to the index by the mirror when it began paging)."""
        store = []
        for msg in self.messages():
            if msg.seq_id not in mine:
                continue  # read back from the index: stored already
            msg.stored = bool(self.durable and msg.persistent)
            if msg.stored and msg.priority in paged:
                continue
            if msg.stored:
                if not msg.msg_id:
                    msg.msg_id = self.random_bytes(16)
                store.append(msg)
        return store

    def info(self) -> tuple[int, int]:
        return self._count(), len(self.consumers)

    def stats(self) -> dict:
        """rabbitmqctl list_queues' counters."""
        ready, unacked = self._count(), len(self.unacked)
        return {"messages": ready + unacked, "messages_ready": ready,
                "messages_unacknowledged": unacked, "consumers": len(self.consumers)}

    def storage_stats(self) -> dict:
        """rabbit_backing_queue's info items of where the messages are: body bytes ready,
        unacked and in all (`message_bytes*`), those in memory (`messages_ram`,
        `messages_ready_ram`, `messages_unacknowledged_ram`, `message_bytes_ram`; unacked ones
        are always in memory) and those paged out to the index only (`messages_paged_out`,
        `message_bytes_paged_out`; paged messages drop-head took already are not counted,
        their bytes are until they are read back, as `_full_for` counts them)."""
        prios = self.prios
        ready_bytes = prios.nbytes + self.paging.paged_bytes
        paged_pers, paged_pers_bytes = self.paging.persistent()
        return {"message_bytes": ready_bytes + self.unacked_bytes,
                "message_bytes_ready": ready_bytes,
                "message_bytes_unacknowledged": self.unacked_bytes,
                "message_bytes_ram": prios.nbytes + self.unacked_bytes,
                "message_bytes_paged_out": self.paging.paged_bytes,
                "messages_ram": prios.count + len(self.unacked),
                "messages_ready_ram": prios.count,
                "messages_unacknowledged_ram": len(self.unacked),
                "messages_paged_out": self.paging.paged - self.paging.owed,
                "messages_persistent": self.pers_count.n + paged_pers,
                "message_bytes_persistent": self.pers_count.nbytes + paged_pers_bytes}

    def head_message_timestamp(self) -> int | None:
        """rabbit_variable_queue's head_message_timestamp: the smallest `timestamp` property
        (epoch seconds) of the messages at the head of the queue (the next ready message of
        each priority, in memory) and of the oldest delivery not yet acked; None when none of
        them has one (RabbitMQ's '', null in the API). A head that is paged out has none here,
        as RabbitMQ reads it only of messages in memory."""
        heads = self.prios.heads()
        if self.unacked:
            heads.append(self.unacked[next(iter(self.unacked))])
        known, self._head_ts = self._head_ts, {}
        found = []
        for msg in heads:
            seen, ts = known.get(msg.seq_id, (None, None))
            if seen is not msg:
                ts = _timestamp(msg.props_raw)
            self._head_ts[msg.seq_id] = (msg, ts)
            if ts is not None:
                found.append(ts)
        return min(found) if found else None

    def purge(self) -> int:
        n = self._count()
        if not self.deleted and self.events.enabled():
            self._emit_removal("purged", n)
        lost = self.page_io.purge()
        if lost is not None:
            # x-confirm-on: the paged ones are lost: nack
            for publisher, pub_seq in lost:
                self.confirms.answer(publisher, pub_seq, False)
            self._flush_answers()
        dropped = self.prios.clear()
        if dropped:
            if self.confirms.late:
                for msg in dropped:
                    self._answer(msg, False)
                self._flush_answers()
            self._forget(dropped)
        if self.credit.owed:
            self._pay_owed()
        return n

    def delete(self, if_unused: bool, if_empty: bool, reason: str = "delete") -> int:
        """reason: what asked for it ("delete" a client or admin, "x-expires", "auto-delete",
        "exclusive" the owning connection went, "vhost_deleted"), for the event log."""
        if if_unused and self.consumers:
            raise ChannelError(406, f"queue '{self.name}' in vhost '{self.vhost}' in use")
        if if_empty and self._count():
            raise ChannelError(406, f"queue '{self.name}' in vhost '{self.vhost}' not empty")
        n = self._count()
        if self.events.enabled():
            self._emit_removal("queue_deleted", n, reason=reason, unacked=len(self.unacked))
        if self.confirms.late:
            # what was never acked is lost with the queue: its publishers hear it now
            for msg in self.unacked.values():
                self._answer(msg, False)
            for msg in self.prios.messages():
                self._answer(msg, False)
            for publisher, pub_seq in self.paging.drain_waiters():
                self.confirms.answer(publisher, pub_seq, False)
            self._flush_answers()
        for channel, tag in list(self.consumers):
            self.out.consumer_gone(channel, tag)
        self.cons.clear()
        self.deleted = True
        return n

    def _emit_removal(self, kind: str, n: int, **fields) -> None:
        """One event for every copy a purge or a delete removes, however many: the copies are
        those of this queue with seq_id < seq_below still queued (and, for a delete, unacked)
        when it happened, which the job knows from their own events; paged copies are never
        read back to be named."""
        self.events.emit(kind, None, actor="queue", vhost=self.vhost, queue=self.name,
                         count=n, seq_below=self.next_seq_id, **fields)





def with_delivery_count(props_raw, count: int) -> bytes:
    """A redelivery's properties: x-delivery-count = the earlier returns of the message (a
    long, as rabbit_fifo_client adds it on a quorum queue's redeliveries)."""
    return with_long_header(props_raw or b"\x00\x00", "x-delivery-count", count)


def _timestamp(props_raw) -> int | None:
    """The `timestamp` property of a message's encoded properties (None: none, or
    properties that do not decode)."""
    if not props_raw:
        return None
    try:
        return BasicProperties.decode(props_raw).timestamp
    except Exception:  # noqa: BLE001 - the queue stored them as they came: never fatal here
        return None


_TABLE = queue_dispatch.TABLE  # message type -> (core, msg, now) -> None
