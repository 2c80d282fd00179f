"""QueueIndex + MsgStore against a plain-dict model (RabbitMQ's classic_queue_prop_SUITE idea):
publish (fanned out to one or two queues; some batches written as a node before the chunk
layout wrote them, bodies inside the records), deliver, ack, fold, aborted transactions, queue
delete, and closing and reopening the environment, with small segment and journal sizes so that
folds happen every few steps (queue qb folds its journal two records at a time) and small
chunks (queue qa closes a chunk at 4000 bytes of bodies). verify() after every step checks
each chunk's live count against the live records that point into it."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from msg_store import MsgStore
from queue_index import QueueIndex, Recovery
from storage_helpers import ack, body_for, entry, legacy_publish, mid, open_env, publish

CONFIG = {b"qa": {"segment_entries": 4, "max_journal_entries": 8, "chunk_bytes": 4000},
          b"qb": {"segment_entries": 3, "max_journal_entries": 5, "fold_records": 2}}
SIZES = st.sampled_from([0, 7, 1500, 4095, 4096, 4097, 9000])
QUEUES = st.sampled_from(sorted(CONFIG))


class StorageMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="leveret-storage-")  # the environment's directory
        self.env = self.ms = None  # open environment and its MsgStore
        self.qi: dict[bytes, QueueIndex] = {}  # queue_id -> its index
        self.open()
        self.live = {q: {} for q in CONFIG}  # queue_id -> seq_id -> expected IndexEntry
        self.next_seq = {q: 0 for q in CONFIG}  # queue_id -> max seq_id published + 1
        self.refs: dict[bytes, int] = {}  # msg_id -> references held in msg_store
        self.sizes: dict[bytes, int] = {}  # msg_id -> body size of bodies in msg_store
        self.msgs = 0  # msg numbers handed out

    def open(self):
        self.env = open_env(self.dir, map_size=64 << 20)
        self.ms = MsgStore(self.env)
        self.qi = {q: QueueIndex(self.env, q, **cfg) for q, cfg in CONFIG.items()}

    def teardown(self):
        self.env.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def pick(self, data, q):
        """seq_ids to deliver or ack: mostly live ones, some acked or never published."""
        live = sorted(self.live[q])
        known = st.sampled_from(live) if live else st.nothing()
        anything = st.integers(0, self.next_seq[q] + 2)
        return data.draw(st.lists(st.one_of(known, known, anything), max_size=12, unique=True))

    @rule(dest=st.sampled_from([(b"qa",), (b"qb",), (b"qa", b"qb")]),
          sizes=st.lists(SIZES, min_size=1, max_size=7), delivered=st.booleans(),
          gap=st.integers(0, 2), legacy=st.booleans())
    def publish(self, dest, sizes, delivered, gap, legacy):
        with self.env.begin(write=True) as txn:
            batches = {q: [] for q in dest}
            for size in sizes:
                self.msgs += 1
                for q in dest:
                    seq = self.next_seq[q] + gap
                    self.next_seq[q] = seq + 1
                    e = entry(seq, size, msg=self.msgs, delivered=delivered)
                    batches[q].append(e)
                    self.live[q][seq] = e
                    if e.body is None:
                        self.refs[e.msg_id] = self.refs.get(e.msg_id, 0) + 1
                        self.sizes[e.msg_id] = size
            for q, entries in batches.items():
                (legacy_publish if legacy else publish)(self.qi[q], self.ms, txn, entries)

    @rule(q=QUEUES, data=st.data())
    def deliver(self, q, data):
        seqs = self.pick(data, q)
        with self.env.begin(write=True) as txn:
            self.qi[q].deliver(txn, seqs)
        for s in seqs:
            if s in self.live[q]:
                self.live[q][s] = self.live[q][s]._replace(delivered=True)

    @rule(q=QUEUES, data=st.data())
    def ack(self, q, data):
        seqs = self.pick(data, q)
        with self.env.begin(write=True) as txn:
            released = ack(self.qi[q], self.ms, txn, seqs)
        expected = [self.live[q][s].msg_id for s in seqs
                    if s in self.live[q] and self.live[q][s].body is None]
        assert sorted(released) == sorted(expected)
        for s in seqs:
            self.live[q].pop(s, None)
        self.unref(released)

    @rule(q=QUEUES)
    def fold(self, q):
        with self.env.begin(write=True) as txn:
            self.qi[q].fold(txn)

    @rule(q=QUEUES, data=st.data())
    def aborted(self, q, data):
        """Writes in a transaction the caller aborts leave no trace, in LMDB or in the objects."""
        seqs = self.pick(data, q)
        txn = self.env.begin(write=True)
        publish(self.qi[q], self.ms, txn, [entry(self.next_seq[q] + i, 1500 if i % 2 else 5000,
                                                 msg=10 ** 6 + i) for i in range(9)])
        self.qi[q].deliver(txn, seqs)
        ack(self.qi[q], self.ms, txn, seqs)
        txn.abort()

    @precondition(lambda self: any(self.live.values()))
    @rule(q=QUEUES, step=st.sampled_from([None, 1, 3]))
    def delete_queue(self, q, step):
        if step is None:
            with self.env.begin(write=True) as txn:
                released = self.qi[q].delete(txn)
                self.ms.release(txn, released)
        else:  # a bounded step per transaction, as Storage.delete_index deletes
            released, done = [], False
            while not done:
                with self.env.begin(write=True) as txn:
                    some, done = self.qi[q].delete_some(txn, step)
                    self.ms.release(txn, some)
                released += some
        assert sorted(released) == sorted(e.msg_id for e in self.live[q].values()
                                          if e.body is None)
        self.live[q].clear()
        self.next_seq[q] = 0
        self.unref(released)

    @rule()
    def reopen(self):
        self.env.sync(True)
        self.env.close()
        self.open()

    @rule(q=QUEUES, after=st.integers(-1, 60), limit=st.integers(1, 5))
    def page(self, q, after, limit):
        with self.env.begin() as txn:
            got = self.qi[q].read(txn, after, limit)
        assert got == [self.live[q][s] for s in sorted(self.live[q]) if s > after][:limit]

    def unref(self, msg_ids):
        for m in msg_ids:
            self.refs[m] -= 1
            if not self.refs[m]:
                del self.refs[m], self.sizes[m]

    @invariant()
    def index_matches_model(self):
        with self.env.begin() as txn:
            for q, qi in self.qi.items():
                model = self.live[q]
                assert qi.read(txn, -1, 1 << 30) == [model[s] for s in sorted(model)]
                want = Recovery(len(model), sum(e.body_size for e in model.values()),
                                self.next_seq[q], sum(e.delivered for e in model.values()))
                assert qi.recover(txn) == want
                assert qi.verify(txn) == want
                assert qi.stats(txn)["journal"] < CONFIG[q]["max_journal_entries"]

    @invariant()
    def msg_store_matches_model(self):
        with self.env.begin() as txn:
            st_ = self.ms.stats(txn)
            assert (st_["bodies"], st_["bytes"], st_["unknown_releases"]) == \
                (len(self.refs), sum(self.sizes.values()), 0)
            for m, n in self.refs.items():
                assert self.ms.refcount(txn, m) == n
                assert self.ms.get(txn, m) == body_for(int.from_bytes(m, "big"), self.sizes[m])
            assert self.ms.get(txn, mid(10 ** 6)) is None  # the aborted writes


StorageMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                            deadline=None)
TestStorageMachine = StorageMachine.TestCase
