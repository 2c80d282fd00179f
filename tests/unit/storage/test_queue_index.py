"""QueueIndex (with MsgStore where bodies leave the index): journal, segments, recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from msg_store import MsgStore
from queue_index import IndexCorrupt, IndexEntry, QueueIndex, Recovery
from storage_helpers import (ack, body_for, crash_model, entry, legacy_publish, mid, open_env,
                             publish)

SMALL = {"segment_entries": 4, "max_journal_entries": 8}


class Node:
    """An environment with a msg_store and queue indexes, reopenable like a restarted node."""

    def __init__(self, path: Path, **qi_config):
        self.path = path  # the environment's directory
        self.qi_config = qi_config  # QueueIndex keyword arguments
        self.env = None  # open lmdb.Environment
        self.ms = None  # MsgStore in it
        self.open()

    def open(self):
        self.env = open_env(self.path)
        self.ms = MsgStore(self.env)

    def reopen(self):
        self.env.sync(True)
        self.env.close()
        self.open()

    def queue(self, queue_id: bytes = b"/|q", **override) -> QueueIndex:
        return QueueIndex(self.env, queue_id, **{**self.qi_config, **override})

    def write(self):
        return self.env.begin(write=True)

    def read(self):
        return self.env.begin()

    def db_entries(self, qi: QueueIndex) -> dict:
        with self.read() as txn:
            return {"journal": txn.stat(qi._journal)["entries"],
                    "segments": txn.stat(qi._segments)["entries"],
                    "counts": txn.stat(qi._counts)["entries"]}


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "node", **SMALL)
    yield n
    n.env.close()


def live(node, qi) -> list[IndexEntry]:
    with node.read() as txn:
        return qi.read(txn, -1, 1 << 30)


# -- embedding -----------------------------------------------------------------------------------

def test_embeds_threshold_edges(node):
    qi = node.queue()
    assert qi.embeds(0) and qi.embeds(4095)
    assert not qi.embeds(4096) and not qi.embeds(4097)
    assert node.queue(b"other", embed_msgs_below=100).embeds(99)
    assert not node.queue(b"other", embed_msgs_below=100).embeds(100)


@pytest.mark.parametrize("fold_first", [False, True])
def test_embedded_bodies_and_msg_store_refs_by_size(node, fold_first):
    qi = node.queue()
    sizes = {1: 4095, 2: 4096, 3: 4097, 4: 0}
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, size) for s, size in sizes.items()])
        if fold_first:
            qi.fold(txn)
    got = {e.seq_id: e for e in live(node, qi)}
    assert got[1].body == body_for(1, 4095) and got[4].body == b""
    assert got[2].body is None and got[3].body is None
    assert {s: e.body_size for s, e in got.items()} == sizes
    assert got[2] == entry(2, 4096)  # every field round-trips
    with node.write() as txn:
        assert node.ms.stats(txn)["bodies"] == 2
        released = qi.ack(txn, [1, 2, 3, 4])
        assert sorted(released) == [mid(2), mid(3)]  # only the non-embedded ones
        node.ms.release(txn, released)
        assert node.ms.stats(txn)["bodies"] == 0


def test_embedded_entry_without_its_body_is_refused(node):
    qi = node.queue()
    with node.write() as txn, pytest.raises(ValueError):
        qi.publish(txn, [entry(1, 10)._replace(body=None)])
    with node.write() as txn, pytest.raises(ValueError):
        qi.publish(txn, [entry(1, 10)._replace(msg_id=b"short")])


# -- journal and segments --------------------------------------------------------------------------

def test_journal_folds_at_exactly_max_journal_entries(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s) for s in range(7)])
        assert qi.stats(txn)["journal"] == 7
    assert node.db_entries(qi) == {"journal": 7, "segments": 0, "counts": 0}
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(7)])
        assert qi.stats(txn)["journal"] == 0
    # seq_ids 0..7 with segment_entries=4: two segments of four publish records
    assert node.db_entries(qi) == {"journal": 0, "segments": 8, "counts": 2}
    assert [e.seq_id for e in live(node, qi)] == list(range(8))


def test_deliver_and_ack_records_count_towards_the_fold(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s) for s in range(4)])
        qi.deliver(txn, [0, 1, 2])
        assert qi.stats(txn)["journal"] == 7
        qi.deliver(txn, [3])
        assert qi.stats(txn)["journal"] == 0
    assert node.db_entries(qi)["segments"] == 4  # delivered flag folded into the publish records
    with node.write() as txn:
        for s in range(4):  # acks of segment entries are journal records too
            qi.ack(txn, [s])
        assert qi.stats(txn)["journal"] == 4


def test_a_full_journal_folds_its_oldest_fold_records_records(node):
    """A write that fills the journal folds only its oldest fold_records records (and the rest
    of the last seq_id's), so one transaction's pages stay bounded; the younger records stay in
    the journal, where their acks still cancel them; reads, recovery and verify see one queue."""
    qi = node.queue(fold_records=3)
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, 5000 if s == 4 else 100) for s in range(6)])
        qi.deliver(txn, [2])  # seq 2: publish + deliver records, folded together
        assert qi.stats(txn)["journal"] == 7
        publish(qi, node.ms, txn, [entry(6)])  # 8 records: fold 0, 1, 2 (+ its deliver)
        assert qi.stats(txn)["journal"] == 4
    assert node.db_entries(qi) == {"journal": 4, "segments": 3, "counts": 1}
    assert [(e.seq_id, e.delivered) for e in live(node, qi)] == \
        [(0, False), (1, False), (2, True), (3, False), (4, False), (5, False), (6, False)]
    with node.write() as txn:
        assert ack(qi, node.ms, txn, [5, 4]) == [mid(4)]  # still in the journal: cancelled
        assert qi.stats(txn)["journal"] == 2
        ack(qi, node.ms, txn, [0])  # in a segment: an ack record
        assert qi.stats(txn)["journal"] == 3
        assert qi.verify(txn) == qi.recover(txn) == Recovery(4, 400, 7, 1)
    node.reopen()
    qi = node.queue(fold_records=3)
    with node.write() as txn:
        # the journal: ack 0, publish 3, 6, then 7..11: at 8 records, 0's ack, 3 and 6 fold
        publish(qi, node.ms, txn, [entry(s) for s in range(7, 12)])
        assert qi.stats(txn)["journal"] == 5
        assert qi.verify(txn) == qi.recover(txn)
    assert [e.seq_id for e in live(node, qi)] == [1, 2, 3, 6, 7, 8, 9, 10, 11]
    with node.write() as txn:
        qi.fold(txn)  # an explicit fold folds everything
        assert qi.stats(txn)["journal"] == 0
        ack(qi, node.ms, txn, [1, 2, 3, 6, 7, 8, 9, 10, 11])
        qi.fold(txn)
        assert qi.verify(txn) == Recovery(0, 0, 12, 0)
        assert node.ms.stats(txn)["bodies"] == 0
    assert node.db_entries(qi) == {"journal": 0, "segments": 0, "counts": 0}


def test_fold_records_must_be_positive(node):
    with pytest.raises(ValueError):
        node.queue(fold_records=0)


def test_publish_and_ack_in_journal_cancel_out(node):
    qi = node.queue()
    for round_ in range(10):  # 40 publishes, 30 delivers, 40 acks: the journal never fills up
        seqs = range(round_ * 4, round_ * 4 + 4)
        with node.write() as txn:
            publish(qi, node.ms, txn, [entry(s, 5000 if s % 2 else 10) for s in seqs])
            qi.deliver(txn, seqs[:3])
            assert qi.stats(txn)["journal"] == 7
            ack(qi, node.ms, txn, seqs)
            assert qi.stats(txn)["journal"] == 0
    assert node.db_entries(qi) == {"journal": 0, "segments": 0, "counts": 0}
    with node.write() as txn:
        qi.fold(txn)
        assert node.ms.stats(txn)["bodies"] == 0
        assert qi.recover(txn) == Recovery(0, 0, 40, 0)
    assert node.db_entries(qi)["segments"] == 0


def test_segment_dropped_when_fully_acked(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, 6000) for s in range(8)])  # folds: segments 0, 1
    assert node.db_entries(qi) == {"journal": 0, "segments": 8, "counts": 2}
    with node.write() as txn:
        ack(qi, node.ms, txn, [0, 1, 2, 5])
        qi.fold(txn)
        assert qi.stats(txn)["segments"] == 2
    assert node.db_entries(qi) == {"journal": 0, "segments": 4, "counts": 2}
    with node.write() as txn:
        ack(qi, node.ms, txn, [3])
        qi.fold(txn)
        assert qi.stats(txn)["segments"] == 1  # segment 0 fully acked: dropped
    assert node.db_entries(qi) == {"journal": 0, "segments": 3, "counts": 1}
    with node.write() as txn:
        ack(qi, node.ms, txn, [4, 6, 7])
        qi.fold(txn)
        assert node.ms.stats(txn)["bodies"] == 0
    assert node.db_entries(qi) == {"journal": 0, "segments": 0, "counts": 0}
    with node.read() as txn:
        assert qi.recover(txn) == Recovery(0, 0, 8, 0)  # next_seq_id outlives the segments


def test_delivered_flag_survives_fold_and_reopen(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(0, delivered=True)] + [entry(s) for s in range(1, 6)])
        qi.deliver(txn, [1])  # journal deliver record, folded with its publish
        qi.fold(txn)
        qi.deliver(txn, [2, 2, 1])  # segment entry: a journal deliver record; repeats ignored
        assert qi.stats(txn)["journal"] == 1
    assert {e.seq_id for e in live(node, qi) if e.delivered} == {0, 1, 2}
    with node.write() as txn:
        qi.fold(txn)  # now a deliver marker in the segment
        qi.deliver(txn, [2])
        assert qi.stats(txn)["journal"] == 0
    node.reopen()
    qi = node.queue()
    assert {e.seq_id for e in live(node, qi) if e.delivered} == {0, 1, 2}
    with node.read() as txn:
        assert qi.recover(txn).delivered == 3
        assert qi.verify(txn) == qi.recover(txn)
    with node.write() as txn:
        ack(qi, node.ms, txn, [2])
        qi.fold(txn)
        assert qi.recover(txn).delivered == 2
        assert qi.verify(txn) == qi.recover(txn)


def test_unknown_and_repeated_acks_and_delivers_are_counted_noops(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s) for s in range(3)])
        qi.fold(txn)
        publish(qi, node.ms, txn, [entry(3)])
        assert qi.ack(txn, [0, 3]) == []
        assert qi.ack(txn, [0, 3, 99, -0]) == []  # 0 in journal ack, 3 cancelled, 99 never
        qi.deliver(txn, [0, 3, 42])
        st = qi.stats(txn)
        assert (st["unknown_acks"], st["unknown_delivers"]) == (4, 3)
        assert qi.recover(txn) == Recovery(2, 200, 4, 0)
        assert qi.verify(txn) == qi.recover(txn)


def test_seq_ids_must_increase(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(5)])
    with node.write() as txn, pytest.raises(ValueError):
        qi.publish(txn, [entry(5)])


def test_read_pages_in_seq_order_across_journal_and_segments(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s) for s in range(0, 40, 2)])  # folds twice
        publish(qi, node.ms, txn, [entry(s) for s in range(40, 45)])  # stays in the journal
        ack(qi, node.ms, txn, [10, 12, 42])
    want = [s for s in list(range(0, 40, 2)) + list(range(40, 45)) if s not in (10, 12, 42)]
    with node.read() as txn:
        pages, after = [], -1
        while page := qi.read(txn, after, 4):
            pages.append([e.seq_id for e in page])
            after = page[-1].seq_id
        assert sum(pages, []) == want and all(len(p) == 4 for p in pages[:-1])
        assert [e.seq_id for e in qi.read(txn, 11, 3)] == [14, 16, 18]
        assert list(qi.live_seq_ids(txn)) == want
        assert list(qi.live_seq_ids(txn, 38)) == [40, 41, 43, 44]


# -- recovery ------------------------------------------------------------------------------------

def test_recovery_after_closing_and_reopening_env(tmp_path):
    node = Node(tmp_path / "node", **SMALL)
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, 5000 if s % 4 == 0 else 100) for s in range(1, 31)])
        qi.deliver(txn, range(1, 11))
        ack(qi, node.ms, txn, range(1, 6))
        ack(qi, node.ms, txn, [29])
    before = live(node, qi)
    node.reopen()
    qi = node.queue()
    assert live(node, qi) == before
    with node.read() as txn:
        rec = qi.recover(txn)
        assert rec == Recovery(24, sum(e.body_size for e in before), 31, 5)
        assert qi.verify(txn) == rec
        for e in before:  # every non-embedded body is where the entry says
            if e.body is None:
                assert node.ms.get(txn, e.msg_id) == body_for(e.seq_id, e.body_size)
    node.env.close()


def test_segment_entries_of_an_existing_queue_are_kept(node):
    qi = node.queue(segment_entries=4)
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s) for s in range(10)])
        qi.fold(txn)
    qi = node.queue(segment_entries=1000)
    with node.write() as txn:
        assert qi.stats(txn)["segment_entries"] == 4
        ack(qi, node.ms, txn, [0, 1, 2, 3])
        qi.fold(txn)
        assert [e.seq_id for e in qi.read(txn, -1, 100)] == list(range(4, 10))
        assert qi.verify(txn).live == 6


def test_verify_detects_tampering(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s) for s in range(8)])
        txn.delete(qi._prefix + bytes(8) + bytes(4) + b"\x00", db=qi._segments)  # seq 0's record
    with node.read() as txn, pytest.raises(IndexCorrupt):
        qi.verify(txn)


# -- queues sharing an environment ----------------------------------------------------------------

def test_queues_in_one_env_do_not_see_each_other(node):
    qa, qb, qc = node.queue(b"q"), node.queue(b"q1"), node.queue(b"\x00q")  # prefixes of each other
    with node.write() as txn:
        for s in range(12):  # interleaved, both fold
            publish(qa, node.ms, txn, [entry(s, 10)])
            publish(qb, node.ms, txn, [entry(s, 20)])
        publish(qc, node.ms, txn, [entry(100, 30)])
        ack(qa, node.ms, txn, [0, 1])
        qb.deliver(txn, [0, 1])
    assert [e.seq_id for e in live(node, qa)] == list(range(2, 12))
    assert [(e.seq_id, e.delivered, e.body_size) for e in live(node, qb)][:3] == \
        [(0, True, 20), (1, True, 20), (2, False, 20)]
    assert [e.seq_id for e in live(node, qc)] == [100]
    with node.write() as txn:
        assert qb.delete(txn) == []
        assert qb.recover(txn) == Recovery(0, 0, 0, 0)
        assert qa.verify(txn) == Recovery(10, 100, 12, 0)
        assert qc.verify(txn) == Recovery(1, 30, 101, 0)
        assert sorted(QueueIndex.queue_ids(node.env, txn)) == [b"\x00q", b"q"]


def test_fanout_body_stored_once_and_released_by_the_third_queue(node):
    queues = [node.queue(name) for name in (b"a", b"b", b"c")]
    with node.write() as txn:
        for seq, qi in enumerate(queues):
            publish(qi, node.ms, txn, [entry(seq, 9000, msg=77)])
        assert node.ms.stats(txn)["bodies"] == 1 and node.ms.refcount(txn, mid(77)) == 3
    with node.write() as txn:
        assert ack(queues[0], node.ms, txn, [0]) == [mid(77)]
        queues[1].fold(txn)
        assert ack(queues[1], node.ms, txn, [1]) == [mid(77)]  # acked from a segment
        assert node.ms.get(txn, mid(77)) == body_for(77, 9000)
    with node.write() as txn:
        assert queues[2].delete(txn) == [mid(77)]  # delete hands back the live refs
        node.ms.release(txn, [mid(77)])
        assert node.ms.get(txn, mid(77)) is None
        assert node.ms.stats(txn)["bodies"] == 0


def test_delete_removes_every_key_of_the_queue(node):
    qi, other = node.queue(b"gone"), node.queue(b"kept")
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, 5000 if s % 2 else 10) for s in range(11)])
        qi.deliver(txn, [1, 2])
        ack(qi, node.ms, txn, [3])
        publish(other, node.ms, txn, [entry(0, 10)])
        released = qi.delete(txn)
        assert sorted(released) == [mid(s) for s in (1, 5, 7, 9)]
        node.ms.release(txn, released)
        assert node.ms.stats(txn)["bodies"] == 0
    assert node.db_entries(qi) == {"journal": 1, "segments": 0, "counts": 0}  # other's publish
    assert live(node, other)[0].seq_id == 0


def test_delete_some_deletes_a_bounded_step_per_transaction(node):
    """Storage.delete_index's steps: the journal folded `limit` records at a time (ack records
    take their publish records out of the segments), then `limit` segment records at a time;
    together they release what delete() releases and leave no key of the queue behind."""
    qi, other = node.queue(b"gone"), node.queue(b"kept")
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, 5000 if s % 2 else 10) for s in range(11)])
        qi.deliver(txn, [1, 2])
        ack(qi, node.ms, txn, [3, 5])  # 3 in a segment (an ack record), 5 too
        publish(qi, node.ms, txn, [entry(s, 5000) for s in range(11, 14)])
        publish(other, node.ms, txn, [entry(0, 10)])
        assert qi.stats(txn)["journal"] == 2 and qi.stats(txn)["segments"] == 3
    released, steps, done = [], 0, False
    while not done:
        with node.write() as txn:
            some, done = qi.delete_some(txn, 2)
            node.ms.release(txn, some)
        released += some
        steps += 1
    assert sorted(released) == [mid(s) for s in (1, 7, 9, 11, 12, 13)]
    assert steps > 4
    with node.read() as txn:
        assert node.ms.stats(txn)["bodies"] == 0
        assert qi.recover(txn) == Recovery(0, 0, 0, 0)  # the meta record is gone too
        assert QueueIndex.queue_ids(node.env, txn) == [b"kept"]
    assert node.db_entries(qi) == {"journal": 1, "segments": 0, "counts": 0}  # other's publish
    assert live(node, other)[0].seq_id == 0


def test_aborted_transaction_changes_nothing(node):
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s) for s in range(5)])
    before = live(node, qi)
    txn = node.write()
    publish(qi, node.ms, txn, [entry(s, 5000) for s in range(5, 20)])
    ack(qi, node.ms, txn, [0, 1, 2])
    qi.deliver(txn, [3])
    txn.abort()
    assert live(node, qi) == before
    with node.write() as txn:  # the QueueIndex object kept nothing of the aborted txn
        publish(qi, node.ms, txn, [entry(5)])
        assert qi.verify(txn) == Recovery(6, 600, 6, 0)


def test_small_configuration_long_run_matches_a_model(node):
    """segment_entries=4, max_journal_entries=8: folds every few operations."""
    qi = node.queue()
    model: dict[int, bool] = {}
    folds_seen = 0
    for i in range(300):
        with node.write() as txn:
            seqs = range(3 * i, 3 * i + 3)
            publish(qi, node.ms, txn, [entry(s, 4096 if s % 5 == 0 else 64) for s in seqs])
            model.update({s: False for s in seqs})
            delivered = [s for s in model if s % 2 == 0 and s < 3 * i - 2]
            qi.deliver(txn, delivered)
            model.update({s: True for s in delivered})
            acked = [s for s in model if s % 3 != 1 and s < 3 * i - 20]
            ack(qi, node.ms, txn, acked)
            for s in acked:
                del model[s]
            folds_seen += qi.stats(txn)["journal"] < 3
    assert folds_seen > 50
    assert {e.seq_id: e.delivered for e in live(node, qi)} == model
    with node.read() as txn:
        assert qi.verify(txn) == qi.recover(txn)
        assert node.ms.stats(txn)["bodies"] == sum(1 for s in model if s % 5 == 0)


# -- chunks: the small bodies of one publish call in one value (issue 12 item 4) ---------------

def _chunks(node, qi) -> dict[int, bytes]:
    """This queue's chunks: first seq_id -> bytes."""
    with node.read() as txn:
        return {int.from_bytes(k[len(qi._prefix):], "big"): v
                for k, v in txn.cursor(db=qi._chunks) if k.startswith(qi._prefix)}


def _records(node, qi) -> list[bytes]:
    """Every record value of this queue, journal and segments."""
    with node.read() as txn:
        return [v for db in (qi._journal, qi._segments)
                for k, v in txn.cursor(db=db) if k.startswith(qi._prefix)]


def _all_chunk_keys(node, qi) -> tuple[int, int]:
    """Entries of qi.chunks and qi.chunk_live, every queue's."""
    with node.read() as txn:
        return txn.stat(qi._chunks)["entries"], txn.stat(qi._chunk_live)["entries"]


def test_small_bodies_of_one_publish_share_one_chunk_and_the_records_stay_small(node):
    """The layout: the bodies below embed_msgs_below of one publish call are one value, in
    order; each record points into it and is ~60 bytes here (no body), so records pack many
    to a page; a body of embed_msgs_below or more still goes to msg_store; an empty body stays
    in its record (nothing to point at)."""
    qi = node.queue()
    es = [entry(s, 1500) for s in range(10)] + [entry(10, 5000), entry(11, 0), entry(12, 7)]
    with node.write() as txn:
        publish(qi, node.ms, txn, es)  # 13 records: the journal folds at 8, so both places
        assert qi.stats(txn)["chunks"] == 1 and qi.stats(txn)["segments"] == 2
        assert node.ms.stats(txn)["bodies"] == 1
    assert _chunks(node, qi) == {0: b"".join(body_for(s, 1500) for s in range(10)) +
                                 body_for(12, 7)}
    assert len(_records(node, qi)) == 13 and max(map(len, _records(node, qi))) < 100
    assert live(node, qi) == es  # every field and body back, the chunk's cut at its offsets
    with node.read() as txn:
        assert qi.verify(txn) == qi.recover(txn) == Recovery(13, 15000 + 5000 + 7, 13, 0)


def test_a_chunk_holds_at_most_chunk_bytes_of_bodies(node):
    qi = node.queue(chunk_bytes=3000)
    es = [entry(s, 1500) for s in range(5)] + [entry(5, 3500)]
    with node.write() as txn:
        publish(qi, node.ms, txn, es)
    # 0+1 fill one; 2+3 the next; 4 and 5 do not fit together, and 4 alone is below
    # INLINE_BELOW: its body stays in its record; a body above chunk_bytes (below
    # embed_msgs_below) is a chunk of its own
    assert {c: len(v) for c, v in _chunks(node, qi).items()} == {0: 3000, 2: 3000, 5: 3500}
    assert live(node, qi) == es
    with pytest.raises(ValueError):
        node.queue(chunk_bytes=0)


def test_bodies_that_would_make_a_chunk_below_inline_below_stay_in_their_records(node):
    """A publisher waiting for each confirm flushes one message at a time: a chunk of one
    1.5 KB body would sit in a leaf page as its record would, and cost two more B-tree paths
    per transaction; so a call whose small bodies come to less than INLINE_BELOW (2 KiB) keeps
    them in its records, and one that comes to more writes a chunk."""
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(0, 1500)])
        publish(qi, node.ms, txn, [entry(1, 1000), entry(2, 1047), entry(3, 5000)])  # 2047
        publish(qi, node.ms, txn, [entry(4, 1000), entry(5, 1048)])  # 2048: a chunk
        assert qi.stats(txn)["chunks"] == 1
        assert qi.verify(txn).live == 6
    assert {c: len(v) for c, v in _chunks(node, qi).items()} == {4: 2048}
    # header 38 + exchange 2 + routing key 4 + props 3 = 47; + (chunk, offset) 12; + a body
    assert sorted(len(v) for v in _records(node, qi)) == [47, 59, 59, 1047, 1094, 1547]
    assert live(node, qi) == [entry(0, 1500), entry(1, 1000), entry(2, 1047), entry(3, 5000),
                              entry(4, 1000), entry(5, 1048)]
    with node.write() as txn:
        ack(qi, node.ms, txn, range(6))
        assert qi.verify(txn).live == 0
    assert _all_chunk_keys(node, qi) == (0, 0)


def test_a_chunk_is_deleted_by_the_ack_of_its_last_live_entry(node):
    """The live count per chunk: acks from the journal (cancelled publishes) and from the
    segments (ack records) take it down; the ack that takes it to 0 deletes the chunk in its
    own transaction, whether or not the acked records have been folded yet; an aborted ack
    deletes nothing."""
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, 1500) for s in range(4)])  # chunk 0
        publish(qi, node.ms, txn, [entry(s, 1500) for s in range(4, 8)])  # chunk 4; folds
        assert qi.stats(txn)["journal"] == 0
        publish(qi, node.ms, txn, [entry(s, 1500) for s in range(8, 10)])  # chunk 8, journal
    with node.write() as txn:
        ack(qi, node.ms, txn, [0, 2, 9])  # 0 and 2 by ack records, 9 cancelled in the journal
        assert qi.verify(txn).live == 7
    assert set(_chunks(node, qi)) == {0, 4, 8}
    txn = node.write()
    ack(qi, node.ms, txn, [1, 3, 8])
    txn.abort()
    assert set(_chunks(node, qi)) == {0, 4, 8}
    with node.write() as txn:
        ack(qi, node.ms, txn, [1, 3, 8])
        assert qi.stats(txn)["chunks"] == 1  # in the same transaction as the acks
        assert qi.verify(txn).live == 4
    assert set(_chunks(node, qi)) == {4}
    assert [e.seq_id for e in live(node, qi)] == [4, 5, 6, 7]
    with node.write() as txn:
        ack(qi, node.ms, txn, [4, 5, 6, 7])
        qi.fold(txn)
        assert qi.verify(txn) == Recovery(0, 0, 10, 0)
    assert _all_chunk_keys(node, qi) == (0, 0)
    assert node.db_entries(qi) == {"journal": 0, "segments": 0, "counts": 0}


class _CountingTxn:
    """A transaction that counts the reads of one database."""

    def __init__(self, txn, db):
        self.txn, self.db, self.gets = txn, db, 0

    def get(self, key, db=None, **kw):
        self.gets += db is self.db
        return self.txn.get(key, db=db, **kw)

    def __getattr__(self, name):
        return getattr(self.txn, name)


def test_a_page_reads_each_chunk_once(node):
    qi = node.queue()
    with node.write() as txn:
        for first in (0, 5, 10):  # three chunks, a msg_store body in each batch
            publish(qi, node.ms, txn, [entry(s, 5000 if s % 5 == 2 else 1500)
                                       for s in range(first, first + 5)])
        ack(qi, node.ms, txn, [6])
    with node.read() as txn:
        counting = _CountingTxn(txn, qi._chunks)
        page = qi.read(counting, -1, 100)
        assert [e.seq_id for e in page] == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14]
        assert counting.gets == 3
        counting = _CountingTxn(txn, qi._chunks)
        assert [e.seq_id for e in qi.read(counting, 7, 4)] == [8, 9, 10, 11]
        assert counting.gets == 2
        assert all(e.body == body_for(e.seq_id, 1500) for e in page if e.body_size == 1500)


def test_a_store_written_before_the_chunk_layout_is_read_acked_and_deleted(node):
    """Records an older node wrote (the body inside the publish record) and new ones (bodies in
    chunks) in one queue, across a reopen: read, deliver, fold, ack, verify, recover and delete
    handle both (docs/storage.md: both layouts are read, nothing is converted)."""
    qi = node.queue()
    sizes = {s: 5000 if s % 3 == 0 else 1500 for s in range(14)}
    with node.write() as txn:
        legacy_publish(qi, node.ms, txn, [entry(s, sizes[s]) for s in range(10)])  # folds
        qi.deliver(txn, [1])
    assert all(v[0] & 2 for v in _records(node, qi) if len(v) > 1000)  # EMBEDDED, old style
    node.reopen()
    qi = node.queue()
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, sizes[s]) for s in range(10, 14)])
        assert qi.stats(txn)["chunks"] == 1
        assert qi.verify(txn) == qi.recover(txn) == Recovery(14, sum(sizes.values()), 14, 1)
    assert live(node, qi) == [entry(s, sizes[s], delivered=s == 1) for s in range(14)]
    with node.write() as txn:
        assert ack(qi, node.ms, txn, [0, 1, 2, 10, 11, 13]) == [mid(0)]
        assert qi.stats(txn)["chunks"] == 0  # 10, 11, 13 were its bodies (12 is msg_store's)
        qi.fold(txn)
        assert qi.verify(txn).live == 8
    with node.write() as txn:
        released = qi.delete(txn)
        node.ms.release(txn, released)
        assert sorted(released) == [mid(3), mid(6), mid(9), mid(12)]
        assert node.ms.stats(txn)["bodies"] == 0
    assert _all_chunk_keys(node, qi) == (0, 0)


@pytest.mark.parametrize("damage", ["chunk deleted", "live count off", "count without chunk",
                                    "chunk cut short", "chunk without count"])
def test_verify_detects_a_damaged_chunk(node, damage):
    qi = node.queue()
    key = qi._prefix + (0).to_bytes(8, "big")
    with node.write() as txn:
        publish(qi, node.ms, txn, [entry(s, 1500) for s in range(3)])
        assert qi.verify(txn).live == 3
        if damage == "chunk deleted":
            txn.delete(key, db=qi._chunks)
        elif damage == "live count off":
            txn.put(key, (2).to_bytes(4, "big") + (3).to_bytes(4, "big"), db=qi._chunk_live)
        elif damage == "count without chunk":
            txn.put(qi._prefix + (99).to_bytes(8, "big"), bytes(8), db=qi._chunk_live)
        elif damage == "chunk cut short":
            txn.put(key, b"x" * 4000, db=qi._chunks)
        else:
            txn.put(qi._prefix + (99).to_bytes(8, "big"), b"x", db=qi._chunks)
    with node.read() as txn, pytest.raises(IndexCorrupt):
        qi.verify(txn)


def test_delete_and_delete_some_remove_the_chunks_of_their_queue_only(node):
    qi, other = node.queue(b"gone"), node.queue(b"kept")
    with node.write() as txn:
        for first in range(0, 30, 3):
            publish(qi, node.ms, txn, [entry(s, 1500) for s in range(first, first + 3)])
        publish(other, node.ms, txn, [entry(0, 1500), entry(1, 1500)])
        assert qi.stats(txn)["chunks"] == 10
    released, steps, done = [], 0, False
    while not done:
        with node.write() as txn:
            some, done = qi.delete_some(txn, 4)  # 30 records in 8 steps, then 10 chunks in 3
            released += some
        steps += 1
    assert released == [] and steps > 8
    assert _all_chunk_keys(node, qi) == (1, 1)  # other's
    assert live(node, other) == [entry(0, 1500), entry(1, 1500)]
    with node.write() as txn:
        assert other.delete(txn) == []
    assert _all_chunk_keys(node, qi) == (0, 0)


# -- kill -9 in the middle of a loop of committed transactions ------------------------------

CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {helpers!r})
    from msg_store import MsgStore
    from queue_index import QueueIndex
    from storage_helpers import ack, crash_plan, open_env, publish
    env = open_env({path!r})
    ms, qi = MsgStore(env), QueueIndex(env, b"/|crash", segment_entries=4, max_journal_entries=8)
    i = 0
    while True:
        pubs, delivers, acks = crash_plan(i)
        with env.begin(write=True) as txn:
            publish(qi, ms, txn, pubs)
            qi.deliver(txn, delivers)
            ack(qi, ms, txn, acks)
        if i % 3 == 0:
            env.sync(True)  # group commit (an OS crash needs it; kill -9 does not)
        print(i, flush=True)
        i += 1
""")


def test_kill_minus_9_mid_loop_keeps_every_committed_transaction(tmp_path):
    path = tmp_path / "node"
    repo = Path(__file__).resolve().parents[3]
    script = CHILD.format(helpers=str(Path(__file__).parent), path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        deadline = time.monotonic() + 20
        while int(proc.stdout.readline() or -1) < 400:
            assert proc.poll() is None and time.monotonic() < deadline, "child did not run"
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read().split()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    last = int(rest[-1]) if rest else 400  # reported after its commit
    env = open_env(path)
    try:
        ms, qi = MsgStore(env), QueueIndex(env, b"/|crash", segment_entries=4,
                                           max_journal_entries=8)
        with env.begin() as txn:
            got = {e.seq_id: e.delivered for e in qi.read(txn, -1, 1 << 30)}
            # the iteration after the last report may have committed before the kill
            assert got in (crash_model(last), crash_model(last + 1))
            rec = qi.verify(txn)
            assert rec == qi.recover(txn) and rec.live == len(got)
            assert rec.next_seq_id in (5 * (last + 1), 5 * (last + 2))
            stored = [e for e in qi.read(txn, -1, 1 << 30) if e.body is None]
            assert ms.stats(txn)["bodies"] == len(stored)
            assert qi.stats(txn)["chunks"] > 0  # the 900-byte bodies: verify() counted them
            assert all(ms.get(txn, e.msg_id) == body_for(e.seq_id, 5000) for e in stored)
        with env.begin(write=True) as txn:  # and it takes writes again (the writer lock is free)
            ack(qi, ms, txn, list(got))
            assert qi.recover(txn).live == 0
    finally:
        env.close()
