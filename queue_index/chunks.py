"""Chunks: the bodies of a queue's small messages, many to one LMDB value (issue 12 item 4).

RabbitMQ's classic queues v2 append the bodies of small messages to a per-queue store file
(rabbit_classic_queue_store_v2) and keep only a small record in the index; the file is deleted
when every message in it is acked. Here that file is a chunk: one value in `qi.chunks` holding
the bodies of one publish call's messages (one backing-queue flush), at most `chunk_bytes` of
them, keyed `prefix | first seq_id u64`. A chunk larger than about 2 KB lives in LMDB overflow
pages, which are written once, never split and never rewritten, and are freed whole when the
chunk is deleted; the publish records that point into it are ~100 bytes and pack 30 to a page
however the B-tree splits. Before this layout each 1.6 KB record carried its body, two to a
leaf page, and every queue but the one whose keys sort last left pages half empty behind it
(docs/storage.md, "Bytes written at 4-15 queues").

Per chunk, `qi.chunk_live` (same key) holds (live u32, bodies u32): how many of its bodies
belong to entries not acked yet, and how many it was written with. Every ack of a chunked entry
takes one off in the same transaction as the ack; at 0 the chunk and its count are deleted
there and then. So after any crash the counts are exactly as consistent as the records
(QueueIndex.verify recounts them from the live records), and nothing is rebuilt at start-up.
"""

from __future__ import annotations

import struct

from queue_index.keys import SEQ

_LIVE = struct.Struct(">II")  # live bodies, bodies written


def write(txn, chunks, live_db, prefix: bytes, first: int, bodies: list, append: bool) -> bool:
    """Write a chunk of `bodies` (in the order the records' offsets give) under seq_id `first`
    with all of them live. Returns whether an append=True put worked (the queue's keys are
    the last of the database), so the caller can try it again for its next chunk."""
    key, value = prefix + SEQ.pack(first), b"".join(bodies)
    count = _LIVE.pack(len(bodies), len(bodies))
    if append and txn.put(key, value, append=True, db=chunks):
        if not txn.put(key, count, append=True, db=live_db):
            txn.put(key, count, db=live_db)
        return True
    if not txn.put(key, value, overwrite=False, db=chunks):
        raise ValueError(f"chunk {first} exists already")  # (seq_ids increase: a caller bug)
    txn.put(key, count, db=live_db)
    return False


def release(txn, chunks, live_db, prefix: bytes, acked: dict) -> int:
    """Take acked[chunk] bodies off each chunk's live count; a chunk whose count reaches 0 is
    deleted with its count. Returns how many counts were missing (a corrupt index: verify()
    reports it; an ack must not fail on it)."""
    missing = 0
    for chunk, n in acked.items():
        key = prefix + SEQ.pack(chunk)
        raw = txn.get(key, db=live_db)
        if raw is None:
            missing += 1
            continue
        live, total = _LIVE.unpack(raw)
        if live <= n:
            txn.delete(key, db=live_db)
            txn.delete(key, db=chunks)
        else:
            txn.put(key, _LIVE.pack(live - n, total), db=live_db)
    return missing


class Reader:
    """Bodies of chunked records for one read: each chunk is fetched once (a page of entries
    names its chunks in seq_id order, so the last one is all that needs keeping)."""

    __slots__ = ("txn", "db", "prefix", "chunk", "value")

    def __init__(self, txn, chunks, prefix: bytes):
        self.txn = txn  # the caller's transaction
        self.db = chunks  # qi.chunks
        self.prefix = prefix  # the queue's key prefix
        self.chunk = None  # the chunk fetched last...
        self.value = None  # ...and its bytes (None: missing)

    def get(self, chunk: int):
        if chunk != self.chunk:
            self.chunk = chunk
            self.value = self.txn.get(self.prefix + SEQ.pack(chunk), db=self.db)
        return self.value


def live_counts(txn, live_db, prefix: bytes) -> dict[int, tuple[int, int]]:
    """chunk -> (live, bodies) for every chunk of the queue."""
    cur = txn.cursor(db=live_db)
    plen, out = len(prefix), {}
    if not cur.set_range(prefix):
        return out
    for key, value in cur:
        if key[:plen] != prefix:
            break
        out[SEQ.unpack_from(key, plen)[0]] = _LIVE.unpack(value)
    return out


def sizes(txn, chunks, prefix: bytes) -> dict[int, int]:
    """chunk -> its length in bytes, for every chunk of the queue (verify)."""
    cur = txn.cursor(db=chunks)
    plen, out = len(prefix), {}
    if not cur.set_range(prefix):
        return out
    for key, value in cur:
        if key[:plen] != prefix:
            break
        out[SEQ.unpack_from(key, plen)[0]] = len(value)
    return out
