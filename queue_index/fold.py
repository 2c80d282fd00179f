"""Fold a queue's journal into its segments (rabbit_queue_index's flush_journal).

The journal holds only records that still matter: a publish and its ack cancel as soon as the ack
arrives (QueueIndex.ack), so what reaches the segments is publishes of messages still in the
queue, deliver records, and acks of messages already in a segment. Per segment, the counts
record adds up publishes and acks folded in; when they are equal every message of the segment
is acked and the segment is dropped (its count record and any key left in its range).

Unlike RabbitMQ's segment files, an ack deletes its publish record at once instead of leaving an
ack mark until the whole segment is settled: LMDB can delete from the middle of a segment. The
bodies are not here: a record points into a chunk (chunks.py), which the ack itself releases, so
a fold moves ~100-byte records and never touches a body (a store written before the chunk layout
has its bodies in the records, and folds them as it did).
"""

from __future__ import annotations

import struct

from queue_index.entry import set_delivered
from queue_index.keys import ACK, DEL, J, PUB, S, SEQ, by_number

_COUNTS = struct.Struct(">QQ")  # published, acked


def fold(txn, journal, segments, counts_db, prefix: bytes, meta,
         limit: int | None = None) -> int:
    """Move the journal records of the queue with key `prefix` into its segments, in `txn`:
    every one, or (`limit`) the oldest `limit` records and the rest of the last seq_id's, so
    that one transaction's pages stay bounded (a full journal of 1,500-byte publishes is ~50 MB
    of pages read, copied and written). Returns how many records were folded."""
    n = meta.segment_entries
    plen = len(prefix)
    added: dict[int, list[int]] = {}  # segment -> [publishes, acks] folded by this call
    append = True  # segment keys of new publishes grow: append while no other queue's keys follow

    def write_publish(seq: int, value: bytes) -> None:
        nonlocal append
        seg = seq // n
        key = prefix + S.pack(seg, seq % n, PUB)
        if not (append and txn.put(key, value, append=True, db=segments)):
            append = False
            txn.put(key, value, db=segments)
        added.setdefault(seg, [0, 0])[0] += 1

    cur = txn.cursor(db=journal)
    cur.set_range(prefix)
    pending = None  # (seq_id, value) of a publish record whose deliver record may come next
    folded, last = 0, None  # records folded, the seq_id of the last one
    key = cur.key()
    while key[:plen] == prefix:
        seq, kind = J.unpack_from(key, plen)
        if limit is not None and folded >= limit and seq != last:
            break  # (a seq_id's records are folded together)
        last = seq
        folded += 1  # (each turn deletes one journal record)
        if pending is not None:
            if kind == DEL and pending[0] == seq:
                write_publish(seq, set_delivered(pending[1]))
                pending = None
                cur.delete()
                key = cur.key()
                continue
            write_publish(*pending)
            pending = None
        if kind == PUB:
            pending = (seq, cur.value())
        elif kind == DEL:
            txn.put(prefix + S.pack(seq // n, seq % n, DEL), b"", db=segments)
        elif kind == ACK:
            txn.delete(prefix + S.pack(seq // n, seq % n, PUB), db=segments)
            txn.delete(prefix + S.pack(seq // n, seq % n, DEL), db=segments)
            added.setdefault(seq // n, [0, 0])[1] += 1
        cur.delete()
        key = cur.key()
    if pending is not None:
        write_publish(*pending)
    for seg, (pubs, acks) in sorted(added.items()):
        ckey = prefix + SEQ.pack(seg)
        raw = txn.get(ckey, db=counts_db)
        old_pubs, old_acks = _COUNTS.unpack(raw) if raw is not None else (0, 0)
        pubs, acks = old_pubs + pubs, old_acks + acks
        if pubs == acks:
            txn.delete(ckey, db=counts_db)
            drop_range(txn, segments, prefix + SEQ.pack(seg))
        else:
            txn.put(ckey, _COUNTS.pack(pubs, acks), db=counts_db)
    meta.journal = 0 if limit is None else meta.journal - folded
    return folded


def drop_range(txn, db, key_prefix: bytes) -> int:
    """Delete every key of `db` that starts with key_prefix; returns how many."""
    cur = txn.cursor(db=db)
    cur.set_range(key_prefix)
    plen, dropped = len(key_prefix), 0
    while cur.key()[:plen] == key_prefix:
        cur.delete()
        dropped += 1
    return dropped


def segment_counts(txn, counts_db, prefix: bytes) -> dict[int, tuple[int, int]]:
    """segment -> (published, acked) for every segment of the queue still held."""
    return by_number(txn, counts_db, prefix, _COUNTS.unpack)
