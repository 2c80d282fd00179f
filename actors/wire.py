"""msgpack with the AMQP field-table types that msgpack lacks (Decimal, datetime), so queue and
binding arguments keep their types across processes and on disk."""

from __future__ import annotations

import datetime
import decimal

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


def packb(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, default=_default)


def unpackb(data: bytes):
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)
