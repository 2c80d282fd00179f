"""Chunks: the bodies of a queue's small messages, many to one LMDB value.

RabbitMQ's classic queues v2 append the bodies of small messages to a per-queue store file
(rabbit_classic_queue_store_v2) and keep only a small record in the index; the file is deleted
when every message in it is acked. Here that file is a chunk: one value in `qi.chunks` holding
the bodies of one publish call's messages (one backing-queue flush), at most `chunk_bytes` of
them, keyed `prefix | first seq_id u64` (a call whose small bodies come to less than
INLINE_BELOW leaves them in their records: below). A chunk, 2 KiB or more, lives in LMDB
overflow pages, which are written once, never split and never rewritten, and are freed whole
when the chunk is deleted; the publish records that point into it are ~60-130 bytes and pack
30 or more to a page however the B-tree splits. Before this layout each 1.6 KB record carried
its body, two to a leaf page, and every queue but the one whose keys sort last left pages half
empty behind it (docs/storage.md, "Bytes written at 4-15 queues").

Per chunk, `qi.chunk_live` (same key) holds (live u32, bodies u32): how many of its bodies
belong to entries not acked yet, and how many it was written with. Every ack of a chunked entry
takes one off in the same transaction as the ack; at 0 the chunk and its count are deleted
there and then. So after any crash the counts are exactly as consistent as the records
(QueueIndex.verify recounts them from the live records), and nothing is rebuilt at start-up.
"""

from __future__ import annotations

import struct

from queue_index.keys import SEQ, by_number

_LIVE = struct.Struct(">II")  # live bodies, bodies written
INLINE_BELOW = 2048  # a chunk smaller than this is not written: its bodies stay in their records.
#   LMDB keeps a value below about 2 KB (4 KiB pages) in a leaf page, as it keeps a record, so
#   such a chunk would save no page and cost two more B-tree paths per transaction (its leaf in
#   qi.chunks and its count's in qi.chunk_live): a publisher that waits for each confirm, one
#   message per flush, would write three pages a message instead of one


def plan(entries: list, below: int, chunk_bytes: int) -> tuple[list, dict]:
    """The chunks of one publish call: ([(first seq_id, [bodies])], {index in entries:
    (chunk, offset)}) for the non-empty bodies below `below` bytes, end to end in entry order,
    a chunk closed before it passes chunk_bytes (a single body larger than that is a chunk of
    its own); a chunk of less than INLINE_BELOW bytes is left out, and so are its entries.
    Raises ValueError for an entry whose body should be here and is not (a caller bug)."""
    out, refs = [], {}
    first, bodies, members, filled = -1, [], [], 0  # the chunk being filled

    def close():
        if filled >= INLINE_BELOW:
            out.append((first, bodies))
            for i, offset in members:
                refs[i] = (first, offset)

    for i, e in enumerate(entries):
        size = e.body_size
        if not 0 < size < below:
            continue
        if e.body is None or len(e.body) != size:
            raise ValueError(f"seq_id {e.seq_id}: an embedded entry needs its body of "
                             f"body_size bytes")
        if bodies and filled + size > chunk_bytes:
            close()
            bodies, members, filled = [], [], 0
        if not bodies:
            first = e.seq_id
        members.append((i, filled))
        bodies.append(e.body)
        filled += size
    if bodies:
        close()
    return out, refs


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
    return by_number(txn, live_db, prefix, _LIVE.unpack)


def sizes(txn, chunks, prefix: bytes) -> dict[int, int]:
    """chunk -> its length in bytes, for every chunk of the queue (verify)."""
    return by_number(txn, chunks, prefix, len)
