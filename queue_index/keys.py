"""Key layout of the queue index databases. All queues of a node share the databases; a queue's
keys start with its prefix, (len(queue_id) u16, queue_id), so that no queue's prefix is a prefix
of another's and each queue's keys form one contiguous, ordered range.

    qi.journal   prefix | seq_id u64 | kind u8               -> record
    qi.segments  prefix | segment u64 | rel u32 | kind u8    -> record
    qi.counts    prefix | segment u64                        -> (published u64, acked u64)
    qi.queues    prefix                                      -> QueueMeta
    qi.chunks    prefix | first seq_id u64                   -> bodies (chunks.py)
    qi.chunk_live prefix | first seq_id u64                  -> (live u32, bodies u32)

segment = seq_id // segment_entries, rel = seq_id % segment_entries: big-endian, so cursor
order is queue order in both the journal and the segments, and a seq_id's records are adjacent
(publish, then deliver, then ack).
"""

from __future__ import annotations

import struct

PUB = 0  # publish record: an encoded IndexEntry
DEL = 1  # deliver record: empty value
ACK = 2  # ack record (journal only): empty value

_LEN = struct.Struct(">H")
J = struct.Struct(">QB")  # journal key suffix: seq_id, kind
S = struct.Struct(">QIB")  # segment key suffix: segment, rel, kind
SEQ = struct.Struct(">Q")  # a seq_id or a segment number
MAX_QUEUE_ID = 400  # LMDB keys are at most 511 bytes


def prefix(queue_id: bytes) -> bytes:
    if not 0 < len(queue_id) <= MAX_QUEUE_ID:
        raise ValueError(f"queue_id must be 1..{MAX_QUEUE_ID} bytes")
    return _LEN.pack(len(queue_id)) + queue_id


def queue_id(key_prefix: bytes) -> bytes:
    return key_prefix[2:]


def by_number(txn, db, key_prefix: bytes, decode) -> dict:
    """number -> decode(value) for every `prefix | number u64` key of the queue in `db`
    (segment counts, chunk live counts, chunk sizes)."""
    cur = txn.cursor(db=db)
    plen, out = len(key_prefix), {}
    if not cur.set_range(key_prefix):
        return out
    for key, value in cur:
        if key[:plen] != key_prefix:
            break
        out[SEQ.unpack_from(key, plen)[0]] = decode(value)
    return out
