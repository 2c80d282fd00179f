"""tests/faults/cluster/workload.py's `drain` against an in-memory queue (no broker): the drain
ends only once every message reached a drainer that recorded it.

A drainer's session records its master (`master_of`: leveretctl list_queues, seconds under load)
between consume-ok and its first read; meanwhile the queue has delivered it up to its prefetch
(200), unacked, and queue.declare's message_count counts ready messages only. The drain took that
for an empty queue and a silence of `quiet` s, stopped its drainers, and the run counted every
message still in the queue as lost (the short Jepsen run's majority-minority: 202 confirmed
messages "lost", a drain of 1.17 s that recorded nothing)."""

from __future__ import annotations

import threading
import time

from pamqp import commands

import rawamqp
from tests.faults.cluster import workload
from tests.faults.cluster.workload import History, Node


class FakeQueue:
    """One queue, every node's connections on it: ready messages, each connection's
    deliveries (unacked until acked; requeued when it closes)."""

    def __init__(self, idents):
        self.lock = threading.Lock()
        self.ready = list(idents)

    def connect(self, node, timeout):
        return FakeClient(self)


class FakeClient:
    def __init__(self, q: FakeQueue):
        self.q = q
        self.prefetch = 0
        self.consuming = False
        self.inbox: list = []  # delivered, not yet read (in the socket)
        self.unacked: dict = {}  # delivery tag -> ident
        self.tag = 0

    def _fill(self):
        """The queue delivers up to the prefetch (called under q.lock)."""
        while self.consuming and self.q.ready and len(self.unacked) < self.prefetch:
            ident = self.q.ready.pop(0)
            self.tag += 1
            self.unacked[self.tag] = ident
            self.inbox.append(rawamqp.Content(
                1, commands.Basic.Deliver(consumer_tag="c", delivery_tag=self.tag,
                                          redelivered=False, exchange="", routing_key="q"),
                commands.Basic.Properties(), workload.body_for(ident, 64)))

    def rpc(self, channel, method, reply_cls, timeout=None):
        with self.q.lock:
            if isinstance(method, commands.Basic.Qos):
                self.prefetch = method.prefetch_count
                return commands.Basic.QosOk()
            if isinstance(method, commands.Basic.Consume):
                self.consuming = True
                self._fill()
                return commands.Basic.ConsumeOk(consumer_tag=method.consumer_tag)
            if isinstance(method, commands.Queue.Declare):  # passive: ready messages only
                return commands.Queue.DeclareOk(queue=method.queue,
                                                message_count=len(self.q.ready))
        raise AssertionError(method)

    def read_command(self, timeout=None):
        deadline = time.monotonic() + (timeout or 0)
        while True:
            with self.q.lock:
                if self.inbox:
                    return self.inbox.pop(0)
            if time.monotonic() >= deadline:
                raise rawamqp.Timeout("nothing")
            time.sleep(0.005)

    def send_method(self, channel, method):
        assert isinstance(method, commands.Basic.Ack), method
        with self.q.lock:
            self.unacked.pop(method.delivery_tag)
            self._fill()

    def close(self):
        with self.q.lock:  # the broker requeues what the connection held
            self.consuming = False
            self.q.ready[:0] = sorted(self.unacked.values())
            self.unacked.clear()
            self.inbox.clear()


def test_the_drain_waits_for_drainers_that_record_their_master_before_reading(monkeypatch):
    q = FakeQueue(range(1, 301))
    monkeypatch.setattr(workload, "_connect", q.connect)

    def slow_master_of(i):  # leveretctl under load
        time.sleep(0.8)
        return "leveret@node1"

    nodes = [Node(f"leveret@node{i}", "127.0.0.1", 1) for i in (1, 2, 3)]
    h = History()
    r = workload.drain(h, nodes, "q", slow_master_of, timeout=20.0, quiet=0.3)
    got = {d.ident for d in h.deliveries}
    assert r["complete"], r
    assert got == set(range(1, 301)), f"{300 - len(got)} messages never recorded: {r}"
    assert not q.ready


def test_a_drain_that_never_gets_its_drainers_reading_is_not_complete(monkeypatch):
    q = FakeQueue(range(1, 11))
    monkeypatch.setattr(workload, "_connect", q.connect)

    def stuck_master_of(i):  # (longer than the drain may take)
        time.sleep(1.5)
        return None

    nodes = [Node("leveret@node1", "127.0.0.1", 1)]
    r = workload.drain(History(), nodes, "q", stuck_master_of, timeout=1.0, quiet=0.2)
    assert not r["complete"], r
    assert sorted(q.ready) == list(range(1, 11))  # (back in the queue once the drainer left)



def test_a_message_id_names_the_run_and_the_message():
    """The lifecycle job's rows name a message by its message_id: `<queue>/<id>`, unique across
    the runs that share a cluster (audit_job.py reads them back)."""
    mid = workload.message_id("jepsen.q.bridge", 3000000015)
    assert mid == "jepsen.q.bridge/3000000015"
    assert workload.ident_of_message_id("jepsen.q.bridge", mid) == 3000000015
    assert workload.ident_of_message_id("jepsen.q.kill9-home", mid) is None
    assert workload.ident_of_message_id("jepsen.q.bridge", None) is None
    assert workload.properties("q", 7).message_id == "q/7"
    h = History()
    h.attempt(7)
    first = h.attempted_ns[7]
    h.attempt(7)  # (a second attempt keeps the first one's time)
    assert h.attempted_ns[7] == first and h.published[7] == "unknown"
