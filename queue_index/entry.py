"""IndexEntry and its on-disk encoding (the value of a publish record).

struct, not msgpack: the ack path needs only the flags, body size, msg_id and chunk reference of
a record, which a fixed header and a fixed tail give by offset without decoding the rest
(bench/storage_speed.py measures both encodings; docs/storage.md has the figures). Layout,
big-endian:

    flags u8 | priority u8 | body_size u32 | expires_at u64 | msg_id 16s |
    len(exchange) u16 | len(routing_key) u16 | len(props_raw) u32 |
    exchange | routing_key | props_raw | tail

and the tail by the flags:

    CHUNKED    chunk u64 | offset u32   the body is body_size bytes at offset in the queue's
                                        chunk `chunk` (the seq_id that opened it: chunks.py)
    EMBEDDED   body                     the body itself (a store written before the chunk
                                        layout, and empty bodies)
    neither    nothing                  the body is in msg_store under msg_id

The seq_id is the record's key, not part of the value.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

DELIVERED = 1  # flags bit: a deliver record was folded into this publish record
EMBEDDED = 2  # flags bit: the body follows the header (else it is in msg_store under msg_id)
CHUNKED = 4  # flags bit: the body is in one of the queue's chunks, the record ends with the ref

_HEAD = struct.Struct(">BBIQ16sHHI")
HEAD_SIZE = _HEAD.size
_SIZE = struct.Struct(">I")  # body_size at offset 2
_MSG_ID = slice(14, 30)  # msg_id's bytes in the header
_REF = struct.Struct(">QI")  # a CHUNKED record's tail: chunk (its first seq_id), offset in it
REF_SIZE = _REF.size
_new = tuple.__new__  # builds an IndexEntry without NamedTuple.__new__'s argument handling


class IndexEntry(NamedTuple):
    """One message of a queue as the index records it."""

    seq_id: int  # position in the queue, strictly increasing per queue, assigned by the caller
    msg_id: bytes  # 16 bytes; the msg_store key when the body is not embedded
    exchange: str  # exchange it was published to
    routing_key: str  # routing key it was published with
    props_raw: bytes  # encoded AMQP content properties, untouched
    body: bytes | None  # the body when embedded (body_size < embed_msgs_below), else None
    body_size: int  # length of the body wherever it lives
    priority: int = 0  # 0..255
    expires_at: int = 0  # ms since the epoch, 0 = never
    delivered: bool = False  # handed to a consumer at least once (redelivered=true next time)


def encode(e: IndexEntry, embedded: bool) -> bytes:
    """The publish record's value. Raises ValueError on a malformed entry (a caller bug)."""
    mid, props = e.msg_id, e.props_raw
    if len(mid) != 16:
        raise ValueError(f"msg_id must be 16 bytes, got {len(mid)}")
    ex = e.exchange.encode()
    rk = e.routing_key.encode()
    flags = (DELIVERED if e.delivered else 0) | (EMBEDDED if embedded else 0)
    head = _HEAD.pack(flags, e.priority, e.body_size, e.expires_at, mid, len(ex), len(rk),
                      len(props))
    if not embedded:
        return head + ex + rk + props
    body = e.body
    if body is None or len(body) != e.body_size:
        raise ValueError(f"seq_id {e.seq_id}: an embedded entry needs its body of body_size bytes")
    return head + ex + rk + props + body


def encode_chunked(e: IndexEntry, chunk: int, offset: int) -> bytes:
    """The publish record of an entry whose body the caller writes at `offset` of chunk
    `chunk`. Raises ValueError on a malformed entry (a caller bug)."""
    mid, props, body = e.msg_id, e.props_raw, e.body
    if len(mid) != 16:
        raise ValueError(f"msg_id must be 16 bytes, got {len(mid)}")
    if body is None or len(body) != e.body_size:
        raise ValueError(f"seq_id {e.seq_id}: an embedded entry needs its body of body_size bytes")
    ex = e.exchange.encode()
    rk = e.routing_key.encode()
    flags = (DELIVERED if e.delivered else 0) | CHUNKED
    return _HEAD.pack(flags, e.priority, e.body_size, e.expires_at, mid, len(ex), len(rk),
                      len(props)) + ex + rk + props + _REF.pack(chunk, offset)


def decode(seq_id: int, value: bytes, delivered: bool = False,
           chunk: bytes | None = None) -> IndexEntry:
    """The entry of a publish record; `delivered` ORs in a separate deliver record. A CHUNKED
    record's body is cut from `chunk`, the value of the chunk it names (None: body None)."""
    flags, prio, size, expires, mid, lx, lr, lp = _HEAD.unpack_from(value)
    o = HEAD_SIZE + lx
    p = o + lr
    b = p + lp
    if flags & EMBEDDED:
        body = value[b:]
    elif flags & CHUNKED and chunk is not None:
        at = _REF.unpack_from(value, len(value) - REF_SIZE)[1]
        body = chunk[at:at + size]
    else:
        body = None
    return _new(IndexEntry, (seq_id, mid, value[HEAD_SIZE:o].decode(), value[o:p].decode(),
                             value[p:b], body, size, prio, expires,
                             bool(delivered or flags & DELIVERED)))


def chunk_ref(value: bytes) -> tuple[int, int] | None:
    """(chunk, offset) of a CHUNKED record, None for any other."""
    if value[0] & CHUNKED:
        return _REF.unpack_from(value, len(value) - REF_SIZE)
    return None


def chunk_of(value: bytes) -> int | None:
    """The chunk a CHUNKED record's body is in, None for any other record."""
    if value[0] & CHUNKED:
        return _REF.unpack_from(value, len(value) - REF_SIZE)[0]
    return None


def body_size(value: bytes) -> int:
    return _SIZE.unpack_from(value, 2)[0]


def props_raw(value: bytes) -> bytes:
    """The encoded content properties of a publish record, the rest left undecoded."""
    lx, lr, lp = _HEAD.unpack_from(value)[5:]
    at = HEAD_SIZE + lx + lr
    return bytes(value[at:at + lp])


def msg_id(value: bytes) -> bytes:
    return value[_MSG_ID]


def set_delivered(value: bytes) -> bytes:
    return bytes((value[0] | DELIVERED,)) + value[1:]
