"""Synthetic event logs for the lifecycle job's tests, written with actors/events.py.

`Sim` plays two nodes, with the events and fields Leveret's actors emit: node A runs the
channel process (conn-0: publishes, routing, confirms, deliveries, acks, channel closes), node B
the queue process (queue-0: enqueues, stores, syncs, requeues, expiry, dead-lettering, drops,
restarts). Events get a virtual clock: each one 1 ms after the previous, so latencies are known
exactly. `known_workload` and `planted_anomalies` write the scenarios the tests check and return
what the job must find; `gap_workload` writes the same journeys into complete logs and into logs
with gaps (a queue process killed -9, a queue process that dropped events on a full buffer).
The logs are the real writer's: sequence numbers, run ids and markers included, and their
fields are the broker's (actors/core/queue.py, actors/queue/*.py, actors/core/channel.py): a
copy event names its `seq_id`, `enqueued` says whether the queue is `durable` (queue_started
does not), `requeued` and `expired` give no reason, recovery announces no message, and a
dead-lettered copy is a message of its own (`new_msg_id`, `dead_letter_published`).
"""

from __future__ import annotations

import os
import time

from actors.events import EventLog

VHOST = "/"


class Sim:
    def __init__(self, root: str, chan_node: str = "leveret@a", queue_node: str = "leveret@b",
                 queue_buffer: int = 1 << 20):
        self.mono = time.monotonic_ns()  # virtual monotonic clock
        self.offset = time.time_ns() - time.monotonic_ns()  # wall = mono + offset
        self.root = root
        self.queue_node = queue_node
        self.chan = self._log(chan_node, "conn-0")
        self.queue = self._log(queue_node, "queue-0", max_buffered=queue_buffer)
        self.node: EventLog | None = None  # the queue node's node process, once it speaks
        self.prefix = os.urandom(8)
        self.counter = 0
        self.seq = 0  # publisher confirm sequence numbers
        self.tags: dict[tuple, int] = {}  # (connection, channel) -> last delivery tag
        self.durable: set = set()  # durable queues (their enqueued events say so)
        self.seq_ids: dict = {}  # (msg_id, queue) -> the copy's seq_id in that queue

    # -- plumbing -------------------------------------------------------------------------------
    def new_id(self) -> bytes:
        self.counter += 1
        return self.prefix + self.counter.to_bytes(8, "big")

    def _log(self, node: str, process: str, **kw) -> EventLog:
        """A process run's log on the virtual clock (its markers too), no timed heartbeats."""
        folder = os.path.join(self.root, node.replace("@", "_"), "events")
        return EventLog(folder, node, process, flush_interval=3600, heartbeat_interval=0,
                        clock=self.mono_now, **kw)

    def now(self) -> tuple[int, int]:
        return self.mono + self.offset, self.mono

    def mono_now(self) -> int:
        return self.mono

    def kill_queue_process(self) -> None:
        """What kill -9 of the queue process leaves: its files as last flushed, no
        process_stop; the node logs process_crashed and starts a new run of it."""
        dead = self.queue
        dead.closed = True  # the writer thread ends without writing what is buffered
        dead.wake.set()
        dead.thread.join()
        if self.node is None:
            self.node = self._log(self.queue_node, "node")
        self._emit(self.node, "process_crashed", None, actor="node", crashed_process="queue-0",
                   crashed_pid=dead.pid, exit_status="killed by signal SIGKILL")
        self.queue = self._log(self.queue_node, "queue-0")

    def _emit(self, log: EventLog, kind: str, mid, **fields) -> None:
        self.mono += 1_000_000  # every event 1 ms after the previous one
        fields.setdefault("vhost", VHOST)
        log.record(kind, mid, self.mono, fields)

    def close(self) -> None:
        for lg in (self.chan, self.queue, self.node):
            if lg is not None:
                lg.close()

    # -- channel side ---------------------------------------------------------------------------
    def publish(self, mid, queues, persistent=False, mandatory=False, message_id=None,
                confirm=True, conn="c1", ch=1, routing_key="rk", correlation_id=None) -> int:
        self.seq += 1
        self._emit(self.chan, "publish_received", mid, actor="channel", connection=conn,
                   channel=ch, seq_no=self.seq if confirm else 0, exchange="amq.direct",
                   routing_key=routing_key, persistent=persistent, message_id=message_id,
                   size=10, correlation_id=correlation_id)
        if queues:
            self._emit(self.chan, "routed", mid, actor="channel", queues=list(queues))
        else:
            self._emit(self.chan, "unroutable", mid, actor="channel", mandatory=mandatory)
            if mandatory:
                self._emit(self.chan, "returned", mid, actor="channel")
        return self.seq

    def confirm(self, mid, seq, conn="c1", ch=1):
        self._emit(self.chan, "confirmed", mid, actor="channel", connection=conn, channel=ch,
                   seq_no=seq)

    def settle(self, kind, mid, q, tag, conn="c2", ch=1, requeue=None, offset=None):
        fields = dict(actor="channel", queue=q, connection=conn, channel=ch, delivery_tag=tag)
        if requeue is not None:
            fields["requeue"] = requeue
        if offset is not None:  # a stream's delivery
            fields["offset"] = offset
        self._emit(self.chan, kind, mid, **fields)

    def channel_closed(self, conn, ch, unacked):
        self._emit(self.chan, "channel_closed", None, actor="channel", connection=conn,
                   channel=ch, unacked=unacked)

    def deliver(self, mid, q, conn="c2", ch=1, redelivered=False, kind="delivered",
                no_ack=False, offset=None) -> int:
        tag = self.tags.get((conn, ch), 0) + 1
        self.tags[(conn, ch)] = tag
        extra = {} if kind == "fetched" else {"consumer_tag": "ctag"}
        if offset is not None:  # a stream's delivery
            extra["offset"] = offset
        self._emit(self.chan, kind, mid, actor="channel", queue=q, connection=conn, channel=ch,
                   delivery_tag=tag, redelivered=redelivered, no_ack=no_ack, **extra)
        return tag

    # -- queue side -----------------------------------------------------------------------------
    def enqueue(self, mid, q):
        self.queue_seq = getattr(self, "queue_seq", 0) + 1
        self.seq_ids[(mid, q)] = self.queue_seq
        self._emit(self.queue, "enqueued", mid, actor="queue", queue=q, seq_id=self.queue_seq,
                   paged=False, durable=q in self.durable)

    def stored(self, mid, q, where="index"):
        self._emit(self.queue, "stored", mid, actor="backing_queue", queue=q,
                   seq_id=self.seq_ids[(mid, q)], where=where)

    def synced(self, mid, q):
        self._emit(self.queue, "synced", mid, actor="backing_queue", queue=q,
                   seq_id=self.seq_ids[(mid, q)])

    def requeue(self, mid, q):
        self._emit(self.queue, "requeued", mid, actor="queue", queue=q,
                   seq_id=self.seq_ids[(mid, q)])

    def queue_event(self, kind, mid, q, **fields):
        self._emit(self.queue, kind, mid, actor="queue", queue=q,
                   seq_id=self.seq_ids[(mid, q)], **fields)

    def dead_letter(self, mid, q, reason, dlx, targets, message_id=None,
                    routing_key="rk") -> bytes:
        """The queue dead-letters its copy to `dlx`: the copy gets an id of its own, announced
        with its parent, then enqueued in the targets; returns the copy's id."""
        child = self.new_id()
        self.queue_event("dead_lettered", mid, q, reason=reason, exchange=dlx, new_msg_id=child)
        self._emit(self.queue, "dead_letter_published", child, actor="queue", parent_msg_id=mid,
                   reason=reason, exchange=dlx, routing_key=routing_key, queues=list(targets),
                   source_queue=q, persistent=False, message_id=message_id)
        for t in targets:
            self.enqueue(child, t)
        return child

    def queue_started(self, q, recovered=0, durable=False):
        """A queue process's start (`durable`: the queue is, for the enqueued events after)."""
        if durable:
            self.durable.add(q)
        self._emit(self.queue, "queue_started", None, actor="queue", queue=q,
                   recovered=recovered)

    def queue_restart(self, q, recovered=0):
        self._emit(self.chan, "queue_crashed", None, actor="node", queue=q, worker=0)
        self.queue_started(q, recovered)

    # -- whole journeys -------------------------------------------------------------------------
    def consumed(self, q="q-ok", message_id=None, persistent=True) -> bytes:
        """publish, route, enqueue, store, sync, confirm, deliver, ack: 8 events, 1 ms apart."""
        mid = self.new_id()
        seq = self.publish(mid, [q], persistent=persistent, message_id=message_id)
        self.enqueue(mid, q)
        self.stored(mid, q)
        self.synced(mid, q)
        self.confirm(mid, seq)
        tag = self.deliver(mid, q)
        self.settle("acked", mid, q, tag)
        return mid


def known_workload(sim: Sim) -> dict:
    """What a pika client would see, message by message: {msg_id hex: final_state} plus the
    figures the job must count."""
    expect: dict[str, str] = {}
    info: dict = {}
    sim.durable.add("q-ok")  # (its persistent messages are stored and synced)
    for i in range(3):  # confirmed, consumed and acked
        expect[sim.consumed(message_id=f"ok-{i}" if i < 2 else None).hex()] = "acked"

    mid = sim.new_id()  # nacked with requeue, redelivered, acked
    seq = sim.publish(mid, ["q-work"], message_id="requeued-once")
    sim.enqueue(mid, "q-work")
    sim.confirm(mid, seq)
    tag = sim.deliver(mid, "q-work")
    sim.settle("nacked", mid, "q-work", tag, requeue=True)
    sim.requeue(mid, "q-work")
    tag = sim.deliver(mid, "q-work", redelivered=True)
    sim.settle("acked", mid, "q-work", tag)
    expect[mid.hex()] = "acked"
    info["requeued"] = mid.hex()

    mid = sim.new_id()  # rejected without requeue into a dead-letter queue
    seq = sim.publish(mid, ["q-work"], message_id="dead-lettered")
    sim.enqueue(mid, "q-work")
    sim.confirm(mid, seq)
    tag = sim.deliver(mid, "q-work")
    sim.settle("rejected", mid, "q-work", tag, requeue=False)
    child = sim.dead_letter(mid, "q-work", "rejected", "dlx", ["q-dlq"],
                            message_id="dead-lettered")
    expect[mid.hex()] = "dead_lettered"
    expect[child.hex()] = "queued"  # the copy, in q-dlq
    info["dead_lettered"] = mid.hex()
    info["dead_letter_copy"] = child.hex()

    mid = sim.new_id()  # dropped from the head by x-max-length overflow
    seq = sim.publish(mid, ["q-small"], message_id="dropped")
    sim.enqueue(mid, "q-small")
    sim.confirm(mid, seq)
    sim.queue_event("dropped", mid, "q-small", reason="maxlen")
    expect[mid.hex()] = "dropped"

    mid = sim.new_id()  # expired by its TTL
    seq = sim.publish(mid, ["q-ttl"], message_id="expired")
    sim.enqueue(mid, "q-ttl")
    sim.confirm(mid, seq)
    sim.queue_event("expired", mid, "q-ttl")
    expect[mid.hex()] = "expired"

    mid = sim.new_id()  # still in its queue at the end of the log
    seq = sim.publish(mid, ["q-work"], message_id="still-queued")
    sim.enqueue(mid, "q-work")
    sim.confirm(mid, seq)
    expect[mid.hex()] = "queued"

    mid = sim.new_id()  # basic.get, then ack
    seq = sim.publish(mid, ["q-work"], message_id="fetched")
    sim.enqueue(mid, "q-work")
    sim.confirm(mid, seq)
    tag = sim.deliver(mid, "q-work", conn="c3", kind="fetched")
    sim.settle("acked", mid, "q-work", tag, conn="c3")
    expect[mid.hex()] = "acked"

    mid = sim.new_id()  # mandatory publish that no queue takes: basic.return, then confirm
    seq = sim.publish(mid, [], mandatory=True, message_id="unroutable")
    sim.confirm(mid, seq)
    expect[mid.hex()] = "returned"

    closed = []  # delivered on channel (c4, 1), which closes: both go back to their queue
    for i in range(2):
        mid = sim.new_id()
        seq = sim.publish(mid, ["q-work"], message_id=f"unacked-{i}")
        sim.enqueue(mid, "q-work")
        sim.confirm(mid, seq)
        sim.deliver(mid, "q-work", conn="c4")
        closed.append(mid)
    sim.channel_closed("c4", 1, unacked=2)
    for mid in closed:
        sim.requeue(mid, "q-work")
        expect[mid.hex()] = "queued"
    info["closed"] = [m.hex() for m in closed]

    mid = sim.new_id()  # consumed with no_ack, then its channel closes: nothing to requeue
    seq = sim.publish(mid, ["q-work"], message_id="no-ack")
    sim.enqueue(mid, "q-work")
    sim.confirm(mid, seq)
    sim.deliver(mid, "q-work", conn="c5", no_ack=True)
    sim.channel_closed("c5", 1, unacked=0)
    expect[mid.hex()] = "acked"
    return {"final_states": expect, **info}


def planted_anomalies(sim: Sim) -> list[tuple[str, str]]:
    """Anomalies of every kind, and near misses that are not anomalies: [(kind, msg_id hex)]."""
    planted = []
    sim.queue_started("q-durable", durable=True)  # its enqueued events say it is durable
    # lost: confirmed, then its queue crashed and came back without it
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-crash"], message_id="lost")
    sim.enqueue(mid, "q-crash")
    sim.confirm(mid, seq)
    sim.queue_restart("q-crash")
    planted.append(("lost", mid.hex()))
    # not lost: persistent, synced in a durable queue that restarted: recovered (which the
    # broker does not announce per message)
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-durable"], persistent=True, message_id="recovered")
    sim.enqueue(mid, "q-durable")
    sim.stored(mid, "q-durable")
    sim.synced(mid, "q-durable")
    sim.confirm(mid, seq)
    mid2 = sim.new_id()  # ... and another
    seq = sim.publish(mid2, ["q-durable"], persistent=True, message_id="recovered-silently")
    sim.enqueue(mid2, "q-durable")
    sim.stored(mid2, "q-durable")
    sim.synced(mid2, "q-durable")
    sim.confirm(mid2, seq)
    sim.queue_restart("q-durable", recovered=2)
    # not lost: never confirmed (no confirm mode), its queue restarted
    mid = sim.new_id()
    sim.publish(mid, ["q-crash"], confirm=False, message_id="unconfirmed")
    sim.enqueue(mid, "q-crash")
    sim.queue_restart("q-crash")

    # acked_twice
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-anom"], message_id="acked-twice")
    sim.enqueue(mid, "q-anom")
    sim.confirm(mid, seq)
    tag = sim.deliver(mid, "q-anom")
    sim.settle("acked", mid, "q-anom", tag)
    sim.settle("acked", mid, "q-anom", tag)
    planted.append(("acked_twice", mid.hex()))

    # not an anomaly: a stream's message read and acked by two consumers (docs/streams.md)
    mid = sim.new_id()
    seq = sim.publish(mid, ["s-stream"], message_id="stream-read-twice")
    sim._emit(sim.queue, "enqueued", mid, actor="queue", queue="s-stream", seq_id=0, offset=0,
              paged=False, durable=True)
    sim.confirm(mid, seq)
    for conn in ("c2", "c3"):
        tag = sim.deliver(mid, "s-stream", conn=conn, offset=0)
        sim.settle("acked", mid, "s-stream", tag, conn=conn, offset=0)

    # delivered_after_ack
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-anom"], message_id="after-ack")
    sim.enqueue(mid, "q-anom")
    sim.confirm(mid, seq)
    tag = sim.deliver(mid, "q-anom")
    sim.settle("acked", mid, "q-anom", tag)
    sim.deliver(mid, "q-anom", redelivered=True)
    planted.append(("delivered_after_ack", mid.hex()))

    # confirmed_before_synced: persistent, durable queue, confirm before the sync ...
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-durable"], persistent=True, message_id="early-confirm")
    sim.enqueue(mid, "q-durable")
    sim.stored(mid, "q-durable")
    sim.confirm(mid, seq)
    sim.synced(mid, "q-durable")
    planted.append(("confirmed_before_synced", mid.hex()))
    # ... or with no sync at all
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-durable"], persistent=True, message_id="never-synced")
    sim.enqueue(mid, "q-durable")
    sim.confirm(mid, seq)
    planted.append(("confirmed_before_synced", mid.hex()))
    # not early: acked before it was ever written, then confirmed (as RabbitMQ does)
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-durable"], persistent=True, message_id="acked-before-sync")
    sim.enqueue(mid, "q-durable")
    tag = sim.deliver(mid, "q-durable")
    sim.settle("acked", mid, "q-durable", tag)
    sim.confirm(mid, seq)
    # not early: transient message in a durable queue, never synced
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-durable"], persistent=False, message_id="transient")
    sim.enqueue(mid, "q-durable")
    sim.confirm(mid, seq)
    # not early: persistent message in a queue nothing says is durable
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-anom"], persistent=True, message_id="transient-queue")
    sim.enqueue(mid, "q-anom")
    sim.confirm(mid, seq)

    # redelivery_loop: 12 redeliveries (threshold 10); 10 redeliveries elsewhere is no loop
    for name, n in (("looping", 12), ("ten-redeliveries", 10)):
        mid = sim.new_id()
        seq = sim.publish(mid, ["q-poison"], message_id=name)
        sim.enqueue(mid, "q-poison")
        sim.confirm(mid, seq)
        tag = sim.deliver(mid, "q-poison")
        for _ in range(n):
            sim.settle("nacked", mid, "q-poison", tag, requeue=True)
            sim.requeue(mid, "q-poison")
            tag = sim.deliver(mid, "q-poison", redelivered=True)
        sim.settle("acked", mid, "q-poison", tag)
        if n > 10:
            planted.append(("redelivery_loop", mid.hex()))
    return planted


def gap_workload(root: str) -> dict[str, tuple[str, set[str]]]:
    """The same journeys with complete logs and with log gaps: {message_id: (final_state,
    anomaly kinds)} the job must report. Queue names differ per pair of runs, so a gap
    of one pair's queue process says nothing of the other's messages."""
    expect: dict[str, tuple[str, set[str]]] = {}

    def journeys(sim: Sim, p: str, q: str) -> dict[str, bytes]:
        """Four confirmed messages; the events of the queue process come last, so a crash
        (or a full buffer) of it takes them: enqueued, synced, the queue's restart."""
        sim.queue_started(q, durable=True)
        ids = {name: sim.new_id() for name in ("vanished", "never-enqueued", "never-synced",
                                                "acked")}
        for name, mid in ids.items():
            seq = sim.publish(mid, [q], persistent=name == "never-synced",
                              message_id=f"{p}-{name}")
            if name != "never-enqueued":
                sim.enqueue(mid, q)
            if name == "never-synced":
                sim.stored(mid, q)
            sim.confirm(mid, seq)
        tag = sim.deliver(ids["acked"], q)
        sim.settle("acked", ids["acked"], q, tag)
        return ids

    # complete logs: the verdicts stand
    sim = Sim(root, "leveret@c", "leveret@c2")
    journeys(sim, "complete", "q-complete")
    sim.queue_restart("q-complete")
    sim.close()
    expect.update({"complete-vanished": ("vanished", {"lost"}),
                   "complete-never-enqueued": ("not_enqueued", {"lost"}),
                   "complete-never-synced": ("vanished", {"lost", "confirmed_before_synced"}),
                   "complete-acked": ("acked", set())})

    # the queue process killed -9 after its last flush: what came after is a gap
    sim = Sim(root, "leveret@k", "leveret@k2")
    sim.queue.flush()
    ids = journeys(sim, "killed", "q-killed")
    resynced = sim.new_id()  # synced before its confirm; only a later write is logged
    seq = sim.publish(resynced, ["q-killed"], persistent=True, message_id="killed-resynced")
    sim.enqueue(resynced, "q-killed")
    sim.stored(resynced, "q-killed")
    sim.queue.flush()
    sim.synced(ids["never-synced"], "q-killed")  # buffered, never written
    sim.synced(resynced, "q-killed")  # buffered, never written
    sim.confirm(resynced, seq)
    sim.kill_queue_process()
    sim.queue_restart("q-killed")
    sim.synced(resynced, "q-killed")  # the next run's write (a promoted mirror's, say)
    tag = sim.deliver(resynced, "q-killed")
    sim.settle("acked", resynced, "q-killed", tag)
    sim.close()
    expect.update({"killed-vanished": ("unknown", {"unknown"}),
                   "killed-never-enqueued": ("unknown", {"unknown"}),
                   "killed-never-synced": ("unknown", {"unknown"}),
                   "killed-acked": ("acked", set()),
                   # a sync logged after the confirm is no proof when a gap may hold an
                   # earlier one
                   "killed-resynced": ("acked", {"unknown"})})

    # the queue process's buffer full: the enqueues it dropped are a hole in its numbers
    sim = Sim(root, "leveret@d", "leveret@d2", queue_buffer=1)
    sim.queue.flush()
    sim.queue_started("q-dropped", durable=True)
    mid = sim.new_id()
    seq = sim.publish(mid, ["q-dropped"], message_id="dropped-enqueue")
    sim.enqueue(mid, "q-dropped")  # the buffer holds one event: dropped
    sim.confirm(mid, seq)
    sim.close()
    expect["dropped-enqueue"] = ("unknown", {"unknown"})
    return expect
