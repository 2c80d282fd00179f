"""IndexEntry and its on-disk encoding (the value of a publish record).

struct, not msgpack: the ack path needs only the flags, body size and msg_id of a record, which
a fixed header gives by offset without decoding the rest (bench/storage_speed.py measures both
encodings; docs/storage.md has the figures). Layout, big-endian:

    flags u8 | priority u8 | body_size u32 | expires_at u64 | msg_id 16s |
    len(exchange) u16 | len(routing_key) u16 | len(props_raw) u32 |
    exchange | routing_key | props_raw | body (only when embedded)

The seq_id is the record's key, not part of the value.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

DELIVERED = 1  # flags bit: a deliver record was folded into this publish record
EMBEDDED = 2  # flags bit: the body follows the header (else it is in msg_store under msg_id)

_HEAD = struct.Struct(">BBIQ16sHHI")
HEAD_SIZE = _HEAD.size
_SIZE = struct.Struct(">I")  # body_size at offset 2
_MSG_ID = slice(14, 30)  # msg_id's bytes in the header
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


def decode(seq_id: int, value: bytes, delivered: bool = False) -> IndexEntry:
    """The entry of a publish record; `delivered` ORs in a separate deliver record."""
    flags, prio, size, expires, mid, lx, lr, lp = _HEAD.unpack_from(value)
    o = HEAD_SIZE + lx
    p = o + lr
    b = p + lp
    return _new(IndexEntry, (seq_id, mid, value[HEAD_SIZE:o].decode(), value[o:p].decode(),
                             value[p:b], value[b:] if flags & EMBEDDED else None, size, prio,
                             expires, bool(delivered or flags & DELIVERED)))


def body_size(value: bytes) -> int:
    return _SIZE.unpack_from(value, 2)[0]


def msg_id(value: bytes) -> bytes:
    return value[_MSG_ID]


def set_delivered(value: bytes) -> bytes:
    return bytes((value[0] | DELIVERED,)) + value[1:]
