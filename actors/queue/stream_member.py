"""A replicated stream's member on a node other than its leader's: the StreamMember actor.

Mirrors osiris' replica (``osiris_replica.erl``): it joins the stream's leader with its log's
overview (StreamJoin), keeps the prefix of its log the leader says matches (truncating the
rest), then appends the leader's chunks to its own StreamLog at the leader's offsets, times
and epochs, each written and synced before it acknowledges the log's new end (StreamAck).
The leader confirms a publish once a majority of the members (itself included) holds it
(actors/core/stream_replication.py ``committed_offset``).

Its log is kept across its node's restarts: on a join the leader keeps what matches and
sends what follows. A marker (actors/store/quorum_log.py, the quorum queues' file) records
the epoch of the leader whose log this member's is a prefix of, written once the join's
truncation is done; an election (actors/node/metadata_cluster.py) compares members by
(epoch, last offset) and promotes the longest: the member's log is then the new leader's.
"""

from __future__ import annotations

import logging

from actors import messages as m
from actors.core import policies, stream
from actors.naming import queue_actor_name
from actors.store import quorum_log
from actors.store.storage import Storage, queue_id
from actors.store.stream_log import Entry, StreamLog
from actors.queue.stream_queue import RETENTION_CHECK_MS, RetentionTick, wall_ms
from actors.runtime import LightActor

log = logging.getLogger("leveret.stream")


class StreamMember(LightActor):
    # it writes and syncs the leader's chunks itself: on the scheduler of the writers, so a
    # sync never stalls a queue's deliveries
    scheduler_name = "store"

    def __init__(self, host, qdef: dict, member: str):
        super().__init__()
        self.host = host  # the queue worker (replica of the metadata, transport, config)
        self.transport = host.transport  # this process's Transport
        self.config = host.config  # node configuration
        self.vhost, self.qname = qdef["vhost"], qdef["name"]  # identity
        self.member = member  # this node's member id
        self.name = queue_actor_name(self.vhost, self.qname)  # transport name (the queue's)
        self.address = self.transport.address(self.name)  # where the leader sends to
        self.arguments = qdef["arguments"]  # x-arguments (retention)
        self.settings = stream.settings(self.arguments, self.policy())  # as the leader's
        self.storage = Storage.of(host.config)  # the worker's LMDB environment
        self.log = StreamLog(self.storage.env, self.storage.stream_dbs,
                             queue_id(self.vhost, self.qname), self.storage.begin,
                             self.settings.segment_bytes)  # this member's copy
        self.leader = ""  # the leader's address we joined
        self.joined = False  # the leader answered our join (our log is a prefix of its)
        self.epoch = -1  # the epoch of the leader we joined (its answer's)

    def policy(self) -> dict:
        replica = self.host.replica
        with replica.lock:
            return policies.effective(replica.policies, self.vhost, self.qname, "queues",
                                      replica.op_policies)

    def on_start(self):
        self.transport.register(self.name, self.actor_ref)
        self.host.timers.every(RETENTION_CHECK_MS, self.actor_ref, RetentionTick())
        self.check_leader()

    def on_stop(self):
        self.transport.unregister(self.name)

    def on_failure(self, exc_type, exc_value, traceback):
        """Let it crash: QueueHost, its monitor, starts it again from its log (it rejoins the
        leader from where its log stops)."""
        log.error("stream member of '%s' in vhost '%s' failed: %s: %s", self.qname, self.vhost,
                  getattr(exc_type, "__name__", exc_type), exc_value)
        self.transport.unregister(self.name)

    def check_leader(self) -> None:
        """(Re)join when the leader's address is new (first start, or it moved)."""
        q = self.host.replica.queue(self.vhost, self.qname)
        addr = q.get("address") if q else None
        if addr and addr != self.leader and addr != self.address:
            self.leader = addr
            self._join()

    def _join(self) -> None:
        self.joined = False
        self.transport.send(self.leader, m.StreamJoin(self.address, self.member,
                                                      self.log.overview()))

    def on_receive(self, msg):
        handler = _MEMBER.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _from_leader(self, msg: m.StreamChunks) -> None:
        if msg.leader == self.leader:
            self._chunks(msg)

    def _policy_changed(self, msg: m.PolicyChanged) -> None:
        self.settings = stream.settings(self.arguments, self.policy())
        self.log.segment_bytes = self.settings.segment_bytes
        self._retain()

    def _delete_index(self, msg: m.DeleteIndex) -> None:
        """The stream is gone, or this member no longer one: its log goes."""
        quorum_log.mark_incomplete(self.config, self.vhost, self.qname)
        self.log.delete()
        self.storage.trim()

    def _chunks(self, msg: m.StreamChunks) -> None:
        if msg.truncate >= 0:
            cut = self.log.next - msg.truncate
            self.log.truncate(msg.truncate)
            # our log is a prefix of this leader's from now on: on disk (synced) before any
            # acknowledgement of ours counts for it
            quorum_log.mark_complete(self.config, self.vhost, self.qname, msg.epoch)
            self.epoch, self.joined = msg.epoch, True
            log.info("stream '%s' in vhost '%s': joined its leader %s (epoch %d) at offset "
                     "%d%s", self.qname, self.vhost, self.leader, msg.epoch, msg.truncate,
                     f", {cut} offsets of ours dropped" if cut > 0 else "")
        elif not self.joined or msg.epoch != self.epoch:
            return  # (from before our join was answered)
        at = 0
        segments = len(self.log.segments)
        try:
            for first, count, ts, epoch, bloom in msg.chunks:
                entries = [Entry(it.exchange, it.routing_key, it.props_raw, body, it.msg_id, None)
                           for it, body in zip(msg.items[at:at + count],
                                               msg.bodies[at:at + count])]
                at += count
                self.log.append_chunk(first, ts, epoch, bloom, entries)
        except ValueError as e:
            log.warning("stream '%s' in vhost '%s': %s; joining the leader again", self.qname,
                        self.vhost, e)
            self._join()
            return
        if len(self.log.segments) > segments:
            self._retain()  # as the leader's writer does, when a segment rolls
        self.storage.trim()
        self.transport.send(self.leader, m.StreamAck(self.address, self.epoch, self.log.next))

    def _retain(self) -> None:
        """The stream's retention on our copy (the leader applies the same to its own)."""
        s = self.settings
        if s.max_bytes is not None or s.max_age_ms is not None:
            self.log.retain(s.max_bytes, s.max_age_ms, wall_ms())


# what a member takes: message type -> (member, msg)
_MEMBER = {
    m.StreamChunks: StreamMember._from_leader,
    m.CheckMaster: lambda self, msg: self.check_leader(),
    RetentionTick: lambda self, msg: self._retain(),
    m.PolicyChanged: StreamMember._policy_changed,
    m.DeleteIndex: StreamMember._delete_index,
}
