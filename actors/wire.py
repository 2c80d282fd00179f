"""msgpack with the AMQP field-table types that msgpack lacks (Decimal, datetime), so queue and
binding arguments keep their types across processes and on disk; strings holding raw bytes
(surrogate escapes: a reply text quoting a binary) travel as those bytes."""

from __future__ import annotations

import datetime
import decimal
import threading

import msgpack

_DECIMAL, _DATETIME = 1, 2


def _default(obj):
    if isinstance(obj, decimal.Decimal):
        return msgpack.ExtType(_DECIMAL, str(obj).encode())
    if isinstance(obj, datetime.datetime):
        return msgpack.ExtType(_DATETIME, str(int(obj.timestamp())).encode())
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def _ext_hook(code, data):
    if code == _DECIMAL:
        return decimal.Decimal(data.decode())
    if code == _DATETIME:
        return datetime.datetime.fromtimestamp(int(data), datetime.timezone.utc)
    return msgpack.ExtType(code, data)


_packers = threading.local()  # .packer: this thread's Packer
_KEEP_BELOW = 1 << 20  # a Packer that packed more (a metadata snapshot) is let go


def packb(obj) -> bytes:
    # one Packer per thread: msgpack.packb builds one per call, which allocates its buffer
    # each time (measured 1.4 against 0.6 us per small message; Packers are not thread-safe)
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True, default=_default)
    try:
        out = packer.pack(obj)
        if len(out) > _KEEP_BELOW:  # its buffer grew to that size: not kept for every call
            del _packers.packer
        return out
    except UnicodeEncodeError:
        # a str holding raw bytes (surrogate escapes), as RabbitMQ's reply texts quoting a
        # binary argument do (actors/core/errors.py): they travel as those bytes
        return msgpack.packb(obj, use_bin_type=True, default=_default,
                             unicode_errors="surrogateescape")


def unpackb(data: bytes):
    """What packb made of it; a str that is not UTF-8 comes back with surrogate escapes."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook,
                           unicode_errors="surrogateescape")
