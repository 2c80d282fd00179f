"""Every queue type pages (issue 12 item 1, as RabbitMQ's classic queues v2): priority queues
page each priority apart and never deliver a lower priority while a higher one is paged out;
length limits count paged messages, drop-head drops (dead-letters) a paged head when it is read
back, reject-publish refuses on the total; x-confirm-on queues keep who waits for each paged
message's confirm. `Disk` plays the backing queue: it keeps what `persist` gave it by priority
and answers `page_in` from it, as actors/queue/backing_queue.py does from the indexes."""
from __future__ import annotations

from actors.core.queue import WAIT, QueueCore
from actors.core.queue_settings import parse as queue_settings
from actors.messages import PublishItem, StoredMessage
from core_fakes import QueueOut
from queue_index import IndexEntry

CH1, PUB = "w1#ch/1/1/1", "w1#ch/9/1/3"


class Disk:
    """The backing queue's part: persisted messages by priority, minus the forgotten ones."""

    def __init__(self, q, out):
        self.q, self.out, self.served = q, out, 0
        self.dropped = 0  # messages drop_paged settled unread
        self.gone: set = set()

    def lane(self, p):
        return sorted((m for (msgs,) in self.out.of("persist") for m in msgs
                       if m.priority == p and m.seq_id not in self.gone),
                      key=lambda m: m.seq_id)

    def serve(self):
        """Answer every page_in asked since the last call (and those the answers ask)."""
        while True:
            for (msgs,) in self.out.of("forget"):
                self.gone.update(m.seq_id for m in msgs)
            asks = [c for c in self.out.calls if c[0] in ("page_in", "drop_paged")]
            asks = asks[self.served:]
            if not asks:
                return
            self.served += len(asks)
            for kind, after, n, p in asks:
                page = [m for m in self.lane(p) if m.seq_id > after][:n]
                if kind == "drop_paged":  # settled unread
                    self.gone.update(m.seq_id for m in page)
                    self.dropped += len(page)
                    self.q.paged_dropped(p, len(page), sum(len(m.body) for m in page),
                                         page[-1].seq_id if page else 0)
                    continue
                self.q.paged_in([StoredMessage(IndexEntry(m.seq_id, m.msg_id, m.exchange,
                                                          m.routing_key, m.props_raw, m.body,
                                                          len(m.body), m.priority, 0, False),
                                               m.body, m.persistent) for m in page],
                                0, 0, 0, 0, p)


def mk(args=None, page_bytes=10, page_size=3, durable=False):
    out = QueueOut()
    q = QueueCore("/", "q", queue_settings(args), out.port(), 0, durable=durable, page_bytes=page_bytes,
                  page_size=page_size)
    return q, out, Disk(q, out)


def pub(q, bodies, priorities=None, seqs=None, persistent=False):
    items = [PublishItem((seqs[i] if seqs else 0), "x", "rk", b"\x00\x00", persistent,
                         priorities[i] if priorities else 0, -1) for i in range(len(bodies))]
    q.publish(PUB, items, list(bodies), 0)


def drain(q, out, disk):
    """Consume everything with no_ack, answering pages: the bodies in delivery order."""
    q.consume(CH1, "A", True, False, 0, 0, 0)
    for _ in range(1000):
        q.run(0)
        disk.serve()
        if not q.ready_count and not q.paging.paged:
            break
    q.run(0)
    return [d[2] for d in out.delivered()]


# --- priority queues ------------------------------------------------------------------------
def test_a_priority_queue_pages_each_priority_and_delivers_by_priority_then_order():
    q, out, disk = mk({"x-max-priority": 5})
    bodies = [b"m%03d" % i for i in range(30)]
    prios = [(0, 5, 2)[i % 3] for i in range(30)]
    pub(q, bodies, prios)
    assert q.paging.paged > 0
    assert {m.priority for (msgs,) in out.of("persist") for m in msgs} == {0, 2, 5}
    assert q.stats()["messages"] == 30
    got = drain(q, out, disk)
    want = [b for p in (5, 2, 0) for b, bp in zip(bodies, prios) if bp == p]
    assert got == want  # priorities respected across paged messages, each in order
    assert q.paging.paged == 0 and q.stats()["messages"] == 0


def test_a_lower_priority_waits_while_a_higher_one_is_paged_out():
    q, out, disk = mk({"x-max-priority": 9}, page_size=2)
    pub(q, [b"low-low-low"])                           # priority 0, in memory, 11 bytes
    pub(q, [b"h1", b"h2"], [9, 9])                     # past page_bytes: paged, priority 9
    assert len(q.ready[0]) == 1 and q.paging.lanes[9].paged == 2
    q.consume(CH1, "A", True, False, 0, 0, 0)
    q.run(0)
    assert out.delivered() == []                        # not the in-memory priority 0 one
    assert out.of("page_in") == [(1, 2, 9)]             # lane 9, after seq 1
    disk.serve()
    q.run(0)
    assert [d[2] for d in out.delivered()] == [b"h1", b"h2", b"low-low-low"]


def test_basic_get_waits_for_a_paged_higher_priority():
    q, out, disk = mk({"x-max-priority": 9})
    pub(q, [b"low-low-low", b"high"], [0, 9])
    assert q.get(CH1, True, 0) is WAIT
    disk.serve()
    assert q.get(CH1, True, 0)[1] == b"high"
    assert q.get(CH1, True, 0)[1] == b"low-low-low"
    assert q.get(CH1, True, 0) is None


# --- length-limited queues ------------------------------------------------------------------
def test_max_length_counts_paged_messages_and_drops_a_paged_head_when_read_back():
    q, out, disk = mk({"x-max-length": 4})
    bodies = [b"%06d" % i for i in range(10)]
    pub(q, bodies)
    assert q.stats()["messages"] == 4                  # exact at once: the drops are owed
    assert q.paging.paged and q.paging.owed
    assert out.of("drop_paged")                        # nothing needs them: dropped unread
    disk.serve()
    assert q.paging.owed == 0 and q.stats()["messages"] == 4 and disk.dropped
    assert drain(q, out, disk) == bodies[-4:]


def test_drop_head_dead_letters_paged_messages():
    q, out, disk = mk({"x-max-length": 2, "x-dead-letter-exchange": "dlx"})
    bodies = [b"%06d" % i for i in range(8)]
    pub(q, bodies)
    disk.serve()
    dead = [(msg.body, reason) for msg, reason in out.of("dead_letter")]
    assert dead == [(b, "maxlen") for b in bodies[:6]]  # in order, the paged ones too
    assert drain(q, out, disk) == bodies[6:]
    # every dropped message was settled in storage once (the paged ones were stored)
    forgotten = [m.seq_id for (msgs,) in out.of("forget") for m in msgs]
    assert len(forgotten) == len(set(forgotten))


def test_max_length_bytes_counts_paged_bytes_and_drops_on_read_back():
    q, out, disk = mk({"x-max-length-bytes": 20})
    bodies = [b"%06d" % i for i in range(10)]          # 6 bytes each: 3 fit
    pub(q, bodies)
    disk.serve()
    assert q.ready_bytes + q.paging.paged_bytes <= 20
    assert drain(q, out, disk) == bodies[-3:]


def test_reject_publish_counts_paged_messages():
    q, out, disk = mk({"x-max-length": 5, "x-overflow": "reject-publish"})
    pub(q, [b"%06d" % i for i in range(8)], seqs=list(range(1, 9)))
    assert q.paging.paged > 0 and q.stats()["messages"] == 5
    assert out.of("confirm") == [(PUB, [1, 2, 3, 4, 5], True), (PUB, [6, 7, 8], False)]
    assert drain(q, out, disk) == [b"%06d" % i for i in range(5)]


def test_drop_head_takes_the_highest_priority_even_when_paged():
    """drop-head drops the head a consumer would get: the highest priority's (RabbitMQ 3.10.8,
    test_edge_cases::test_priority_queue_max_length_drops_the_highest_priority_head), paged
    out or not."""
    q, out, disk = mk({"x-max-priority": 3, "x-max-length": 3})
    pub(q, [b"p0-aaaaaa", b"p0-bbbbbb", b"p3-a", b"p0-c", b"p3-b"], [0, 0, 3, 0, 3])
    assert [m.body for (msgs,) in out.of("persist") for m in msgs if m.priority == 3] == \
        [b"p3-a", b"p3-b"]                             # both paged out
    disk.serve()
    assert q.stats()["messages"] == 3
    assert disk.dropped == 2                           # settled unread (DropPaged)
    assert drain(q, out, disk) == [b"p0-aaaaaa", b"p0-bbbbbb", b"p0-c"]


# --- x-confirm-on ---------------------------------------------------------------------------
def test_ack_mode_confirms_a_paged_message_when_its_consumer_acks():
    q, out, disk = mk({"x-confirm-on": "ack"}, durable=True)
    pub(q, [b"aaaaaaaaaaa", b"b", b"c"], seqs=[1, 2, 3], persistent=True)
    assert out.of("confirm") == []
    paged = [m for (msgs,) in out.of("persist") for m in msgs]
    assert [m.seq_id for m in paged] == [2, 3] and not any(m.persistent for m in paged)
    q.persisted(paged)                                 # were they synced: still no confirm
    assert out.of("confirm") == []
    q.consume(CH1, "A", False, False, 0, 0, 0)
    q.run(0)
    disk.serve()
    q.run(0)
    tags = [d.seq_id for _, items, _ in out.of("deliver") for d in items]
    assert tags == [1, 2, 3]
    q.settle(CH1, 0, tags, 0)
    assert out.of("confirm") == [(PUB, [1, 2, 3], True)]


def test_ack_lite_delivery_carries_the_paged_messages_publisher():
    q, out, disk = mk({"x-confirm-on": "ack-lite"})
    pub(q, [b"aaaaaaaaaaa", b"b"], seqs=[7, 8])
    q.consume(CH1, "A", False, False, 0, 0, 0)
    q.run(0)
    disk.serve()
    q.run(0)
    items = [it for _, its, _ in out.of("deliver") for it in its]
    assert [tuple(it[6:8]) for it in items] == [(PUB, 7), (PUB, 8)]


def test_ack_mode_nacks_paged_messages_on_purge_and_on_drop():
    q, out, disk = mk({"x-confirm-on": "ack"})
    pub(q, [b"aaaaaaaaaaa", b"b", b"c"], seqs=[1, 2, 3])
    q.purge()
    assert sorted(s for _, seqs, ok in out.of("confirm") if not ok for s in seqs) == [1, 2, 3]
    q, out, disk = mk({"x-confirm-on": "ack", "x-max-length": 1})
    pub(q, [b"aaaaaaaaaaa", b"b", b"c"], seqs=[1, 2, 3])
    disk.serve()
    assert out.of("confirm") == [(PUB, [1], False), (PUB, [2], False)]


def test_leaving_ack_mode_confirms_the_paged_messages():
    q, out, disk = mk({"x-confirm-on": "ack"})
    pub(q, [b"aaaaaaaaaaa", b"b"], seqs=[1, 2])
    q.set_confirm_on("enqueue")
    assert sorted(s for _, seqs, ok in out.of("confirm") if ok for s in seqs) == [1, 2]
