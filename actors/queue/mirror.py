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
- a mirror keeps its messages in memory (the master's disk has the persistent ones); promoted, it
  hands them to a new master Queue actor, which stores the persistent ones of a durable queue in
  this node's index and delivers them all with redelivered=true (any may have been delivered).
"""

from __future__ import annotations

import logging
import time
from collections import deque

from actors import messages as m
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
    wait for them. Owned by one Queue actor; sends through `send(address, msg)`."""

    def __init__(self, send, address: str, synced_cb):
        self.send = send
        self.address = address  # the master queue's address
        self.synced_cb = synced_cb  # fn(member): a mirror finished its sync
        self.mirrors: dict[str, dict] = {}  # mirror address -> {member, acked, sync_batch}
        self.batch = 0  # batches sent
        self.items: list = []  # enqueued, not yet sent
        self.bodies: list = []
        self.held: deque = deque()  # (batch, channel, seqs) confirms waiting for the mirrors

    def __bool__(self):
        return bool(self.mirrors)

    def enqueued(self, msg, now_ms: int) -> None:
        if self.mirrors:
            self.items.append([msg.seq_id, msg.exchange, msg.routing_key, msg.props_raw,
                               msg.persistent, msg.priority, wall_ms(now_ms, msg.expires_at),
                               msg.msg_id])
            self.bodies.append(msg.body)

    def flush(self) -> None:
        if not self.items:
            return
        self.batch += 1
        items, bodies, self.items, self.bodies = self.items, self.bodies, [], []
        for addr in self.mirrors:
            self.send(addr, m.MirrorPublish(self.address, self.batch, False, items, bodies))

    def forget(self, seq_ids: list) -> None:
        if self.mirrors and seq_ids:
            self.flush()  # a mirror hears of a message before it hears it left
            for addr in self.mirrors:
                self.send(addr, m.MirrorForget(self.address, seq_ids))

    def confirm(self, channel, seqs) -> bool:
        """True when the confirm must wait for the mirrors (it is kept here)."""
        if not self.mirrors:
            return False
        self.flush()
        if all(st["acked"] >= self.batch for st in self.mirrors.values()):
            return False
        self.held.append((self.batch, channel, seqs))
        return True

    def join(self, mirror: str, member: str, messages: list, now_ms: int) -> None:
        self.flush()
        self.batch += 1
        items = [[x.seq_id, x.exchange, x.routing_key, x.props_raw, x.persistent, x.priority,
                  wall_ms(now_ms, x.expires_at), x.msg_id] for x in messages]
        self.mirrors[mirror] = {"member": member, "acked": self.batch - 1,
                                "sync_batch": self.batch}
        self.send(mirror, m.MirrorPublish(self.address, self.batch, True, items,
                                          [x.body for x in messages]))
        log.info("queue %s: mirror on %s joined, syncing %d messages", self.address, member,
                 len(items))

    def acked(self, mirror: str, batch: int) -> list:
        """-> confirms [(channel, seqs)] every live mirror has now accepted."""
        st = self.mirrors.get(mirror)
        if st is None:
            return []
        st["acked"] = max(st["acked"], batch)
        if st["sync_batch"] and batch >= st["sync_batch"]:
            st["sync_batch"] = 0
            self.synced_cb(st["member"])
        return self._release()

    def down(self, endpoint: str) -> list:
        """Mirrors in a dead process are gone: confirms stop waiting for them."""
        for addr in [a for a in self.mirrors if a.startswith(endpoint + "#")]:
            del self.mirrors[addr]
        return self._release()

    def _release(self) -> list:
        low = min((st["acked"] for st in self.mirrors.values()), default=self.batch)
        out = []
        while self.held and self.held[0][0] <= low:
            _, channel, seqs = self.held.popleft()
            out.append((channel, seqs))
        return out


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
        self.msgs: dict[int, tuple] = {}  # seq_id -> (item, body), in seq_id order

    def on_start(self):
        if self.qdef["durable"]:
            self._drop_index()  # what this node held of the queue before is not the queue
        self.transport.register(self.name, self.actor_ref)
        self.check_master()

    def on_stop(self):
        self.transport.unregister(self.name)

    def _drop_index(self) -> None:
        from actors.queue.backing_queue import BackingQueue
        bq = BackingQueue.start(self.actor_ref, self.qdef, self.host.config, self.host.timers)
        bq.tell(m.DeleteIndex())  # in order, before anything a promotion later writes there
        bq.stop(block=False)

    def check_master(self) -> None:
        """(Re)join when the master's address is new (first start, or it restarted)."""
        q = self.host.replica.queue(self.vhost, self.qname)
        addr = q.get("address") if q else None
        if addr and addr != self.master and addr != self.address:
            self.master = addr
            self.transport.send(addr, m.MirrorJoin(self.address, self.member))

    def on_receive(self, msg):
        try:
            if isinstance(msg, m.MirrorPublish):
                if msg.master != self.master:
                    return
                if msg.reset:
                    self.msgs.clear()
                for item, body in zip(msg.items, msg.bodies):
                    self.msgs[item[0]] = (item, body)
                self.transport.send(msg.master, m.MirrorAck(self.address, msg.batch))
            elif isinstance(msg, m.MirrorForget):
                if msg.master == self.master:
                    for seq_id in msg.seq_ids:
                        self.msgs.pop(seq_id, None)
            elif isinstance(msg, m.CheckMaster):
                self.check_master()
            elif isinstance(msg, m.TakeMessages):
                # promotion: everything, as index entries a Queue restores from
                entries = []
                for seq_id in sorted(self.msgs):
                    item, body = self.msgs[seq_id]
                    seq, exchange, rk, props, persistent, priority, expires, msg_id = item
                    entries.append((IndexEntry(seq, msg_id or b"", exchange, rk, props, None,
                                               len(body), priority, expires, True), body,
                                    persistent))
                self.transport.unregister(self.name)
                return entries
        except Exception:
            log.exception("mirror of queue '%s' failed on %s", self.qname, type(msg).__name__)
