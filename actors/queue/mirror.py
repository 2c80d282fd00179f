"""Mirrored queues: the mirror actor on each mirror node, and the master's side of the protocol.

Mirrors what RabbitMQ's classic mirrored queues did (rabbit_mirror_queue_master / _slave), in a
simpler shape:
- the master (the Queue actor on the queue's home node) sends every message that enters the
  queue to every mirror (MirrorPublish, in batches) and every message that leaves it
  (MirrorForget); a publisher's confirm waits until every live mirror has acknowledged the batch
  that carried the message (MirrorAck), as the confirms guide says ("for mirrored queues, this
  means that all mirrors have accepted the message");
- a mirror joins by MirrorJoin and is sent everything the master holds (an eager sync, as
  ha-sync-mode: automatic); it is *synchronised* once it has acknowledged that batch, and only a
  synchronised mirror may take over (the leader promotes it, actors/node/metadata_cluster.py);
  with ha-sync-mode: manual it is sent only what enters from then on and is synchronised once
  every older message has left the queue, or when `leveretctl sync_queue` syncs it eagerly;
- a mirror keeps its messages in memory (the master's disk has the persistent ones) up to
  `queue_page_bytes` of bodies, then pages the rest out to this node's index for the queue (a
  backing queue of its own, by priority, written and never synced, as the master pages); promoted,
  it hands the in-memory ones to a new master Queue actor, which recovers the paged ones from the
  same index, stores the persistent in-memory ones of a durable queue there and delivers them all
  with redelivered=true (any may have been delivered);
- a master with paged-out messages syncs a joining mirror by reading them back from its index a
  page at a time (`PageIn(sync=True)`), holding everything else meanwhile, as RabbitMQ's eager
  sync blocks the master (rabbit_mirror_queue_sync).

Quorum queues (x-queue-type=quorum, actors/core/quorum.py) are built on the same protocol with
two differences: a quorum queue's mirror writes and syncs every message to its node's index
before it acknowledges the batch that carried it (nothing in memory; promoted, the new master
recovers them all from that index), and the master confirms a batch once a majority of the
queue's members has it (its own sync and `majority - 1` synchronised mirrors' acknowledgements,
the oldest synchronised one's among them: `quorum.confirmable_batch`), not every mirror; with fewer mirrors up,
confirms wait until enough are back and synchronised.

A quorum queue's member keeps its log (its node's index for the queue) across its node's
restarts: it is dropped only when a live leader synchronises the member again (the reset batch
of its join), or when the queue is deleted or the member is no longer one whose log counts. A
marker says when the index holds a complete log (actors/store/quorum_log.py: removed before a
resync drops the index, written once the member has acknowledged the batch that ends its
sync, `MirrorSynced`): a leader election (actors/node/metadata_cluster.py) promotes the member
with the longest complete log among a majority of the members.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import Callable

import pykka

from actors import events, faults
from actors import messages as m
from actors.core import policies, quorum
from actors.core.queue import Msg
from actors.store import quorum_log
from actors.queue.replica_log import MEMBER, MIRROR, ReplicaLog
from actors.naming import queue_actor_name
from actors.runtime import LightActor
from queue_index.entry import IndexEntry

log = logging.getLogger("leveret.mirror")


def wall_ms(now_mono_ms: int, expires_at: int) -> int:
    """A monotonic expiry (ms) as wall-clock ms, which means the same on another node."""
    if not expires_at:
        return 0
    return int(time.time() * 1000) + (expires_at - now_mono_ms)


class Masters:
    """The master's view of its mirrors: who they are, what each acknowledged, which confirms
    wait for them (the batch numbers the master's core holds its confirms by: QueueCore's
    MirrorHold). Owned by one Queue actor; sends through `send(address, msg)`."""

    def __init__(self, send, address: str, synced_cb, needed: int | None = None,
                 heir=None):
        self.send = send
        self.address = address  # the master queue's address
        self.synced_cb = synced_cb  # fn(member): a mirror finished its sync
        # a quorum queue's: the synchronised mirrors' acknowledgements a confirm needs (majority
        # of its members - 1; 0 on a lone node); None: a mirrored classic queue's (every mirror)
        self.needed = needed
        self.heir = heir  # quorum: fn() -> the oldest synchronised member, or None
        # mirror address -> {member, acked, sync_batch, upto, missing (manual sync: messages
        # it lacks, held here with seq_id < below), below}
        self.mirrors: dict[str, dict] = {}
        self.batch = 0  # batches sent
        self.items: list = []  # enqueued, not yet sent
        self.bodies: list = []

    def __bool__(self):
        return bool(self.mirrors)

    @staticmethod
    def _item(msg, now_ms: int) -> m.MirrorItem:
        return m.MirrorItem(msg.seq_id, msg.exchange, msg.routing_key, msg.props_raw,
                            msg.persistent, msg.priority, wall_ms(now_ms, msg.expires_at),
                            msg.msg_id)

    def enqueued(self, msg, now_ms: int) -> None:
        if self.mirrors:
            self.items.append(self._item(msg, now_ms))
            self.bodies.append(msg.body)

    def flush(self) -> None:
        if not self.items:
            return
        self.batch += 1
        items, bodies, self.items, self.bodies = self.items, self.bodies, [], []
        for addr in self.mirrors:
            self.send(addr, m.MirrorPublish(self.address, self.batch, False, items, bodies))

    def forget_messages(self, msgs: list) -> None:
        """Messages (QueueCore's Msgs) left the master for good."""
        if self.mirrors:
            self.forget([x.seq_id for x in msgs])

    def forget(self, seq_ids: list) -> None:
        if self.mirrors and seq_ids:
            self.flush()  # a mirror hears of a message before it hears it left
            for addr in self.mirrors:
                self.send(addr, m.MirrorForget(self.address, seq_ids))
            for st in self.mirrors.values():
                if st["missing"] > 0:
                    st["missing"] -= sum(1 for s in seq_ids if s < st["below"])
                    if st["missing"] <= 0:
                        self._caught_up(st)

    def _caught_up(self, st) -> None:
        """A manual-sync mirror lacks nothing any more (what it missed has left the queue): it
        is synchronised once it has acknowledged everything sent so far."""
        st["missing"] = 0
        st["sync_batch"] = self.batch
        if st["acked"] >= self.batch:
            st["sync_batch"] = 0
            self.synced_cb(st["member"])

    def unsynchronised(self) -> list:
        """(address, member) of the manual-sync mirrors still missing messages."""
        return [(a, st["member"]) for a, st in self.mirrors.items() if st["missing"] > 0]

    def sync_cancelled(self, mirror: str, missing: int, below: int) -> None:
        """An eager sync of `mirror` stopped half way: it may lack any of the `missing`
        messages held now (seq_id < `below`), as a manual-sync join does."""
        st = self.mirrors.get(mirror)
        if st is not None:
            st.update(sync_batch=None, missing=missing, below=below)
            if missing <= 0:
                self._caught_up(st)

    def purge_paged(self, after_seq: int, priority: int) -> None:
        """The master's paged-out messages of a priority (after after_seq) were purged."""
        if self.mirrors:
            self.flush()
            for addr in self.mirrors:
                self.send(addr, m.MirrorForget(self.address, [], after_seq, priority))

    def sync_page(self, mirror: str, items: list, bodies: list) -> int:
        """Part of a joining mirror's sync: paged-out messages read back (no batch of its own:
        the mirror is synchronised once it acknowledges `sync_done`'s). Of a kept log's part,
        only which ones are still here (MirrorKeep). -> how many were sent."""
        st = self.mirrors.get(mirror)
        if st is None:
            return 0
        upto = st["upto"]
        if upto >= 0 and items and items[0].seq_id <= upto:
            self.send(mirror, m.MirrorKeep(self.address, upto,
                                           [it.seq_id for it in items if it.seq_id <= upto]))
            bodies = [b for it, b in zip(items, bodies) if it.seq_id > upto]
            items = [it for it in items if it.seq_id > upto]
            if not items:
                return 0
        self.send(mirror, m.MirrorPublish(self.address, self.batch, False, items, bodies))
        return len(items)

    def sync_messages(self, mirror: str, messages: list, now_ms: int) -> int:
        """Part of a joining mirror's sync: messages in memory behind a lane's paged part (its
        tail), sent once that paged part has been."""
        return self.sync_page(mirror, [self._item(x, now_ms) for x in messages],
                              [x.body for x in messages])

    def sync_done(self, mirror: str) -> None:
        """Every paged-out message went to the joining mirror: one more (empty) batch for every
        mirror, which makes the joining one synchronised once acknowledged."""
        st = self.mirrors.get(mirror)
        if st is None:
            return
        self.flush()
        self.batch += 1
        if self.needed is not None:  # a quorum queue's member: its log is whole from there
            self.send(mirror, m.MirrorSynced(self.address, self.batch))
        for addr in self.mirrors:
            self.send(addr, m.MirrorPublish(self.address, self.batch, False, [], []))
        st["sync_batch"] = self.batch

    def confirm_batch(self) -> tuple[int, int] | None:
        """A confirm is due: (the batch that carries its messages, the highest batch the
        mirrors or a majority have), or None when no mirror need have it."""
        if self.needed is not None:
            if self.needed == 0:
                return None  # a quorum queue of one member: its own sync is the majority
        elif not self.mirrors:
            return None
        self.flush()  # (the batch that carries these messages goes out first)
        return self.batch, self._low()

    def _low(self) -> int:
        """The highest batch the confirms may go for: a majority's (quorum), else the one
        every live mirror has acknowledged."""
        if self.needed is not None:
            return self._confirmable()
        return min((st["acked"] for st in self.mirrors.values()), default=self.batch)

    def _confirmable(self) -> int:
        """Quorum: the highest batch a majority of the members has (quorum.confirmable_batch
        over the synchronised mirrors)."""
        acked = {st["member"]: st["acked"] for st in self.mirrors.values()
                 if st["sync_batch"] == 0}
        return quorum.confirmable_batch(acked, self.heir() if self.heir else None,
                                        self.needed)

    def join(self, mirror: str, member: str, messages: list, now_ms: int,
             more: bool = False, upto: int = -1, missing: int = 0, below: int = 0) -> None:
        """A mirror joins: it is sent what the master holds in memory; `more`: paged-out
        messages follow (sync_page), and sync_done ends the sync. `upto` >= 0: a quorum
        member keeps its log up to that seq_id (this epoch's: what it holds there is what the
        master sent it): of those, it is told which are still here (MirrorKeep, always sent:
        it says the offer was taken), not sent them again. `missing` > 0: ha-sync-mode manual
        (`messages` empty): it lacks the `missing` messages held now (seq_id < `below`) and is
        synchronised once they have left (`forget`) or an eager join sent them."""
        self.flush()
        self.batch += 1
        if upto >= 0:
            self.send(mirror, m.MirrorKeep(self.address, upto,
                                           [x.seq_id for x in messages if x.seq_id <= upto]))
            messages = [x for x in messages if x.seq_id > upto]
        items = [self._item(x, now_ms) for x in messages]
        self.mirrors[mirror] = {"member": member, "acked": self.batch - 1,
                                "sync_batch": None if more or missing > 0 else self.batch,
                                "upto": upto, "missing": missing, "below": below}
        if self.needed is not None and not more:  # (before the batch it names)
            self.send(mirror, m.MirrorSynced(self.address, self.batch))
        self.send(mirror, m.MirrorPublish(self.address, self.batch, True, items,
                                          [x.body for x in messages]))
        log.info("queue %s: mirror on %s joined, syncing %d messages%s", self.address, member,
                 len(items), f" ({missing} missing: ha-sync-mode manual)" if missing > 0 else "")

    def acked(self, mirror: str, batch: int) -> int | None:
        """-> the highest batch the confirms may now go for (QueueCore.mirrors_acked), None
        when the ack is not a mirror's of this master."""
        st = self.mirrors.get(mirror)
        if st is None:
            return None
        st["acked"] = max(st["acked"], batch)
        if st["sync_batch"] and batch >= st["sync_batch"]:  # (None: still syncing)
            st["sync_batch"] = 0
            self.synced_cb(st["member"])
        return self._low()

    def down(self, endpoint: str) -> int:
        """Mirrors in a dead process are gone: confirms stop waiting for them -> the highest
        batch the confirms may now go for."""
        for addr in [a for a in self.mirrors if a.startswith(endpoint + "#")]:
            del self.mirrors[addr]
        return self._low()


class _Stored:
    """What BackingQueue's Forget needs of a message the mirror paged out."""

    __slots__ = ("seq_id", "priority")

    def __init__(self, seq_id: int, priority: int):
        self.seq_id, self.priority = seq_id, priority


class _Batch:
    """A quorum mirror's batch not yet acknowledged: how many of its messages wait for their
    sync."""

    __slots__ = ("batch", "unsynced")

    def __init__(self, batch: int, unsynced: int):
        self.batch = batch  # the master's batch number
        self.unsynced = unsynced  # its messages not yet synced


class Mirror(LightActor):
    """One queue's mirror on this node: holds what the master holds, acknowledges batches."""

    scheduler_name = "queue"

    def __init__(self, host, qdef: dict, member: str):
        super().__init__()
        self.host = host
        self.transport = host.transport
        self.vhost, self.qname = qdef["vhost"], qdef["name"]
        self.qdef = qdef
        self.member = member  # this node's member id
        self.name = queue_actor_name(self.vhost, self.qname)
        self.address = self.transport.address(self.name)
        self.master = ""  # the master we joined
        # seq_id -> (MirrorItem, body) in memory, in seq_id order
        self.msgs: dict[int, tuple[m.MirrorItem, bytes]] = {}
        self.mem_bytes = 0  # their body bytes
        self.page_bytes = host.config.queue_page_bytes  # past this in memory, new ones page out
        self.paging: set = set()  # priorities whose new messages go to the index (until reset)
        # in-memory messages also in the index: a durable queue's persistent ones, written when
        # their priority began paging (the index takes seq_ids in ascending order only)
        self.written: set = set()
        self.bq = None  # BackingQueue writing this node's index for the queue, once needed
        # a quorum queue's mirror: every message written and synced before its batch is
        # acknowledged, none kept in memory
        self.durably = quorum.is_quorum(qdef.get("arguments")) and qdef["durable"]
        self.held: dict[int, int] = {}  # durably: seq_id -> priority of what the index holds
        self.acks: deque[_Batch] = deque()  # durably: batches not yet acked, in order
        self.unsynced: set = set()  # durably: id() of the Msgs given to Persist since the last
        #                             join (a Persisted of an earlier join's must not count)
        self.broken = False  # durably: the index refused a write (disk full): no more acks
        self.config = host.config  # node configuration (where the log's marker lives)
        self.epoch = 0  # durably: the promotion count of the master we joined (the log's)
        self.sync_master = ""  # durably: the master whose MirrorSynced we hold
        self.sync_batch = 0  # durably: acknowledging this batch completes our log (0: none)
        self.last_acked = 0  # durably: the last batch acknowledged to the current master
        self.dropping = 0  # durably: index drops the backing queue has not done yet (the
        #                    marker is written only after them: LogBarrier comes back)
        self.held_ack = 0  # durably: the batch ending our sync, acknowledged once the drop
        #                    or prune before it is done and the marker written
        self.offered = -1  # durably: last seq_id of the kept log our MirrorJoin offered
        self.keep: set | None = None  # durably: kept seq_ids the master still holds (a
        #                               keeping sync, until its prune)
        self.keep_upto = -1  # durably: the end of the kept log being synchronised
        self.joined_manual = False  # our last join asked for ha-sync-mode manual
        # what this replica says in the event log (and the msg_ids it holds, events on)
        # (a quorum member's log on disk, complete or partly so, keeps its name in the event
        # log across restarts: its marker holds it)
        self.rlog = ReplicaLog(events, self.vhost, self.qname,
                               MEMBER if self.durably else MIRROR,
                               quorum_log.log_id_of(self.config, self.vhost, self.qname)
                               if self.durably else None)

    def on_start(self):
        if not self.durably or quorum_log.epoch_of(self.config, self.vhost, self.qname) is None:
            # a classic mirror starts empty, and so does a quorum member without a complete
            # log: whatever this node held of the queue before (in an earlier replica's memory,
            # or its index) is not held any more
            self.rlog.started_empty(int(self.qdef.get("epoch") or 0))
        if self.qdef["durable"] and not self.durably:
            # what this node held of the queue before is not the queue: dropped, in order,
            # before anything the mirror or a promotion writes there (a quorum queue's member
            # keeps it: it is its log, which a leader election may need; a live master's
            # reset batch drops it)
            self._bq().tell(m.DeleteIndex())
        self.transport.register(self.name, self.actor_ref)
        self.check_master()

    def on_stop(self):
        # (no replica_dropped here: a stopped mirror is never promoted, and the next one on
        # this node says `restart` before it takes anything, while this stop may be logged
        # after that one's first messages)
        self.transport.unregister(self.name)
        if self.bq is not None:
            self.bq.stop(block=False)

    def _bq(self):
        if self.bq is None:
            from actors.queue.backing_queue import BackingQueue
            self.bq = BackingQueue.start(self.actor_ref, self.qdef, self.host.config,
                                         self.host.timers, mirror=True)
        return self.bq

    def _take(self, items, bodies) -> None:
        """Messages from the master: in memory, or paged out (written, not synced: the master
        has the persistent ones on disk) once the mirror holds page_bytes."""
        out = []
        mono, wall = int(time.monotonic() * 1000), int(time.time() * 1000)
        self.rlog.took(items, self.epoch)

        def stored(item: m.MirrorItem, body) -> Msg:
            expires = item.expires_at_wall_ms
            msg = Msg(item.seq_id, item.exchange, item.routing_key, item.props_raw, body, False,
                      item.priority or 0, mono + (expires - wall) if expires else 0,
                      msg_id=item.msg_id)
            msg.redelivered = True  # promoted, every message may have been delivered
            return msg

        for item, body in zip(items, bodies):
            priority = item.priority or 0
            if self.page_bytes and (priority in self.paging or self.mem_bytes > self.page_bytes):
                if priority not in self.paging:
                    self.paging.add(priority)
                    if self.qdef["durable"]:
                        # the persistent ones in memory first (ascending seq_ids), so that a
                        # promotion finds them in the index as the master's would be
                        for seq, (held, held_body) in self.msgs.items():
                            if (held.priority or 0) == priority and held.persistent:
                                if not held.msg_id:
                                    # kept with the id it is written under: a promotion hands
                                    # over the same one
                                    held = held._replace(msg_id=os.urandom(16))
                                    self.msgs[seq] = (held, held_body)
                                self.written.add(seq)
                                out.append(stored(held, held_body))
                if not item.msg_id:
                    item = item._replace(msg_id=os.urandom(16))
                out.append(stored(item, body))
                continue
            self.msgs[item.seq_id] = (item, body)
            self.mem_bytes += len(body)
        if out:
            self._bq().tell(m.Persist(out))

    def _forget(self, msg) -> None:
        self.rlog.settled(msg.seq_ids)
        gone = []
        for seq_id in msg.seq_ids:
            held = self.msgs.pop(seq_id, None)
            if held is not None:
                _, body = held
                self.mem_bytes -= len(body)
                if seq_id in self.written:
                    self.written.discard(seq_id)
                    gone.append(seq_id)
            elif self.paging:
                gone.append(seq_id)
        if msg.purge_after >= 0:
            p = msg.priority
            for seq_id in [s for s, (item, _) in self.msgs.items()
                           if s > msg.purge_after and (item.priority or 0) == p]:
                _, body = self.msgs.pop(seq_id)
                self.mem_bytes -= len(body)
                self.written.discard(seq_id)  # (its index entry goes with PurgeAfter)
            if p in self.paging:
                self._bq().tell(m.PurgeAfter(msg.purge_after, p))
            self.rlog.purged(msg.purge_after, p, self.epoch)
        if gone:
            # paged out (the index ignores a seq_id a priority does not hold)
            self._bq().tell(m.Forget([_Stored(seq_id, p) for p in self.paging
                                      for seq_id in gone]))

    # --- a quorum queue's mirror: on disk before acknowledged --------------------------------
    def _take_durably(self, batch: int, items, bodies) -> None:
        """Messages from the master, written to this node's index and synced (Persist); the
        batch is acknowledged once they are (`_synced`)."""
        mono, wall = int(time.monotonic() * 1000), int(time.time() * 1000)
        self.rlog.took(items, self.epoch)
        msgs = []
        for item, body in zip(items, bodies):
            expires = item.expires_at_wall_ms
            msg = Msg(item.seq_id, item.exchange, item.routing_key, item.props_raw, body, True,
                      item.priority or 0, mono + (expires - wall) if expires else 0,
                      msg_id=item.msg_id or os.urandom(16))
            msg.redelivered = True  # promoted, every message may have been delivered
            msgs.append(msg)
            self.unsynced.add(id(msg))
            self.held[item.seq_id] = item.priority or 0
        if msgs:
            self._bq().tell(m.Persist(msgs))
        self.acks.append(_Batch(batch, len(msgs)))
        self._synced(())

    def _synced(self, msgs) -> None:
        """These messages are on disk (in Persist order): acknowledge every batch now whole."""
        n = 0
        for msg in msgs:
            if id(msg) in self.unsynced:
                self.unsynced.discard(id(msg))
                n += 1
        last = None
        while self.acks:
            head = self.acks[0]
            take = min(n, head.unsynced)
            head.unsynced -= take
            n -= take
            if head.unsynced:
                break
            last = self.acks.popleft().batch
        if last is not None and not self.broken:
            self.last_acked = last
            if self.dropping and self.sync_batch and self.sync_master == self.master \
                    and last >= self.sync_batch:
                self.held_ack = last  # (LogBarrier: the marker first, then this)
                return
            self._maybe_complete()  # on disk before the acknowledgement that makes us count
            events.sync()  # (events_sync: our replica_enqueued before the confirm they back)
            self.transport.send(self.master, m.MirrorAck(self.address, last))

    def _maybe_complete(self) -> None:
        """Once we have acknowledged the batch that ends our sync (and the index's drop of the
        reset is done), our index holds the whole log of the master we joined: say so on
        disk."""
        if self.sync_batch and self.sync_master == self.master and not self.dropping \
                and not self.broken and self.last_acked >= self.sync_batch:
            self.sync_batch = 0
            quorum_log.mark_complete(self.config, self.vhost, self.qname, self.epoch,
                                     self.rlog.log_id)

    def _drop_log(self, reason: str) -> None:
        """Our log is dropped (`reason`: `resync`, or `removed`: the queue gone, or our log no
        longer counts): no complete log here from now on (on disk first), then the index."""
        self.rlog.dropped(reason, self.epoch)
        quorum_log.mark_incomplete(self.config, self.vhost, self.qname)
        self.keep = None
        self.dropping += 1
        self._bq().tell(m.DeleteIndex())
        self._bq().tell(m.LogBarrier())  # comes back once the drop is done

    def _reset(self, msg) -> bool:
        """A live master (re)syncs us: its reset batch. Our log is kept when the master took
        the one we offered (its MirrorKeep came first): complete up to the offer's end until
        the sync is done (a partial marker), pruned then of what the master no longer holds.
        Otherwise it is dropped. False: the master kept a log we did not offer (we cannot
        append to what we dropped): we ask for everything again."""
        keeping = self.keep is not None and self.keep_upto == self.offered >= 0
        self.held.clear()
        self.acks.clear()
        self.unsynced.clear()
        self.broken = False
        self.last_acked = 0
        self.held_ack = 0
        if not (self.sync_master == msg.master and self.sync_batch >= msg.batch):
            self.sync_batch = 0  # (a MirrorSynced for this join comes first)
        self.offered = -1
        if keeping:
            self.held.update(dict.fromkeys(self.keep, 0))
            quorum_log.mark_partial(self.config, self.vhost, self.qname, self.epoch,
                                    self.keep_upto, self.rlog.log_id)
            log.info("mirror of quorum queue '%s' in vhost '%s': keeps its log up to %d, "
                     "%d messages of it still in the queue", self.qname, self.vhost,
                     self.keep_upto, len(self.keep))
            return True
        wrong = self.keep is not None  # (a MirrorKeep for a log we did not offer)
        self._drop_log("resync")
        if wrong:
            # nothing acknowledged (nor marked complete) until the reset of the join we ask
            # for again: the batches of this one lack what it did not resend
            self.broken = True
            self.transport.send(self.master, m.MirrorJoin(self.address, self.member))
            return False
        return True

    def _keep(self, msg) -> None:
        """MirrorKeep: which of our kept log's messages the master still holds."""
        if self.keep is None or msg.upto != self.keep_upto:  # the first, before the reset
            self.keep, self.keep_upto = set(), msg.upto
        self.keep.update(msg.seq_ids)
        for seq in msg.seq_ids:
            self.held[seq] = 0  # (a quorum queue has no priorities: lane 0)

    def _prune_if_synced(self, batch: int) -> None:
        """The batch that ends a keeping sync: every MirrorKeep came before it, so what the
        master no longer holds of our kept log goes now (the marker waits: LogBarrier)."""
        if self.keep is not None and self.sync_master == self.master and self.sync_batch \
                and batch >= self.sync_batch:
            keep, self.keep = self.keep, None
            self.dropping += 1
            self._bq().tell(m.KeepOnly(self.keep_upto, frozenset(keep)))
            self._bq().tell(m.LogBarrier())

    def _forget_durably(self, msg) -> None:
        self.rlog.settled(msg.seq_ids)
        gone = [_Stored(seq, self.held.pop(seq)) for seq in msg.seq_ids if seq in self.held]
        if msg.purge_after >= 0:
            for seq in [s for s, p in self.held.items()
                        if s > msg.purge_after and p == msg.priority]:
                del self.held[seq]
            self._bq().tell(m.PurgeAfter(msg.purge_after, msg.priority))
            self.rlog.purged(msg.purge_after, msg.priority, self.epoch)
        if gone:
            self._bq().tell(m.Forget(gone))

    def check_master(self) -> None:
        """(Re)join when the master's address is new (first start, or it restarted)."""
        q = self.host.replica.queue(self.vhost, self.qname)
        addr = q.get("address") if q else None
        if addr and addr != self.master and addr != self.address:
            fresh = not self.master and self.bq is None  # (nothing written since we started)
            self.master = addr
            self.epoch = int(q.get("epoch") or 0)
            self.last_acked = 0
            self.held_ack = 0
            self.offered = -1
            self.keep = None
            if self.durably and fresh:
                kept = quorum_log.offer(self.config, self.vhost, self.qname)
                kept_epoch, kept_last = kept if kept is not None else (None, -1)
                if kept_epoch == self.epoch:
                    self.offered = kept_last  # the log we kept, of this master's epoch
            self._join()

    def _join(self) -> None:
        self.joined_manual = not self.durably and self._manual_sync()
        self.transport.send(self.master, m.MirrorJoin(self.address, self.member,
                                                      self.epoch if self.offered >= 0 else -1,
                                                      self.offered, self.joined_manual))

    def _manual_sync(self) -> bool:
        replica = self.host.replica
        with replica.lock:
            return policies.effective(replica.policies, self.vhost, self.qname, "queues",
                                      replica.op_policies).get("ha-sync-mode") == "manual"

    def _policy_changed(self) -> None:
        """No longer ha-sync-mode manual: the master is asked to sync the mirrors still behind
        (it may have joined us manual on the old policy after it saw the new one)."""
        if self.joined_manual and self.master and not self._manual_sync():
            self.joined_manual = False
            self.transport.send(self.master, m.QueueOp("", 0, "sync", {}))

    def on_failure(self, exc_type, exc_value, tb):
        """An exception in on_receive ends the mirror (a slave's crash in RabbitMQ): its name
        leaves the transport and its backing queue stops; QueueHost, its monitor, starts a
        new one, which joins its master and syncs from scratch."""
        self.transport.unregister(self.name)
        if self.bq is not None:
            try:  # (before the new mirror drops the index)
                self.bq.stop(block=True, timeout=30)
            except (pykka.ActorDeadError, pykka.Timeout):
                log.warning("mirror of queue '%s': its backing queue did not stop in time",
                            self.qname)

    def on_receive(self, msg):
        faults.crash("mirror", self.vhost, self.qname, msg, self.config.host)
        kind = type(msg)
        handler = (_DURABLE if self.durably else _IN_MEMORY).get(kind) or _EITHER.get(kind)
        if handler is not None:  # (anything else is ignored)
            return handler(self, msg)
        return None

    # --- a quorum queue's member (durably: every message in its index) ----------------------
    def _publish_durably(self, msg: m.MirrorPublish) -> None:
        if msg.master != self.master:
            return
        # (re)joined a live master: it sends us its whole log again, or what comes
        # after the log we kept
        if msg.reset and not self._reset(msg):
            return
        self._prune_if_synced(msg.batch)
        self._take_durably(msg.batch, msg.items, msg.bodies)

    def _master_synced(self, msg: m.MirrorSynced) -> None:
        if msg.master == self.master:
            self.sync_master, self.sync_batch = msg.master, msg.batch
            self._maybe_complete()

    def _log_barrier(self, msg: m.LogBarrier) -> None:
        self.dropping -= 1
        self._maybe_complete()
        if not self.dropping and self.held_ack and not self.broken:
            last, self.held_ack = self.held_ack, 0
            events.sync()
            self.transport.send(self.master, m.MirrorAck(self.address, last))

    def _refused(self, msg: m.Refused) -> None:
        log.error("mirror of quorum queue '%s' in vhost '%s': its index refused %d "
                  "messages (disk full): it acknowledges nothing until it rejoins",
                  self.qname, self.vhost, len(msg.msgs))
        # what it writes after them would make its log's end claim them: no complete
        # log here (no vote to lead) until a master resyncs it
        quorum_log.mark_incomplete(self.config, self.vhost, self.qname)
        self.broken = True
        self._synced(msg.msgs)

    def _hand_over_log(self, msg: m.TakeMessages) -> m.Adopted:
        """Promotion: every message is in the index, synced (the new master recovers them all
        from there: nothing in memory, paged out at priority 0)."""
        self.transport.unregister(self.name)
        if self.bq is not None:
            bq, self.bq = self.bq, None
            bq.stop(block=True, timeout=30)  # its writes are in before the new master
        return m.Adopted([], [0])

    # --- a classic queue's mirror (in memory, paging what does not fit) ---------------------
    def _publish(self, msg: m.MirrorPublish) -> None:
        if msg.master != self.master:
            return
        if msg.reset:
            self.rlog.dropped("resync", self.epoch)
            self.msgs.clear()
            self.mem_bytes = 0
            if self.paging:
                self._bq().tell(m.DeleteIndex())
                self.paging.clear()
                self.written.clear()
        self._take(msg.items, msg.bodies)
        events.sync()  # (events_sync: our replica_enqueued before the confirm they back)
        self.transport.send(msg.master, m.MirrorAck(self.address, msg.batch))

    def _hand_over_messages(self, msg: m.TakeMessages) -> m.Adopted:
        """Promotion: everything, as index entries a Queue restores from."""
        entries = []
        for seq_id in sorted(self.msgs):
            item, body = self.msgs[seq_id]
            entries.append(m.StoredMessage(
                IndexEntry(seq_id, item.msg_id or b"", item.exchange, item.routing_key,
                           item.props_raw, None, len(body), item.priority,
                           item.expires_at_wall_ms, True), body, item.persistent))
        self.transport.unregister(self.name)
        paged = sorted(self.paging)
        if self.bq is not None:
            bq, self.bq = self.bq, None
            bq.stop(block=True, timeout=30)  # its writes are in before the new master
        return m.Adopted(entries, paged)


def _from_master(handle: Callable) -> Callable:
    """A handler for what only the mirror's current master may send (others' is ignored)."""
    return lambda mirror, msg: handle(mirror, msg) if msg.master == mirror.master else None


# what a mirror takes, message type -> (mirror, msg) -> the answer to an ask, or None; a
# quorum queue's member (`durably`) and a classic mirror take some of them differently
_DURABLE: dict[type, Callable] = {
    m.MirrorPublish: Mirror._publish_durably,
    m.MirrorKeep: _from_master(Mirror._keep),
    m.MirrorSynced: Mirror._master_synced,
    m.LogBarrier: Mirror._log_barrier,
    # (QueueHost: the queue is gone, or our log no longer counts)
    m.DeleteIndex: lambda mirror, msg: mirror._drop_log("removed"),
    m.Persisted: lambda mirror, msg: mirror._synced(msg.msgs),
    m.Refused: Mirror._refused,
    m.MirrorForget: _from_master(Mirror._forget_durably),
    m.TakeMessages: Mirror._hand_over_log,
}
_IN_MEMORY: dict[type, Callable] = {
    m.MirrorPublish: Mirror._publish,
    m.MirrorForget: _from_master(Mirror._forget),
    m.TakeMessages: Mirror._hand_over_messages,
}
_EITHER: dict[type, Callable] = {
    m.CheckMaster: lambda mirror, msg: mirror.check_master(),
    m.PolicyChanged: lambda mirror, msg: mirror._policy_changed(),
}
