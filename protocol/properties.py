"""Content properties of the basic class (the property list of a content header frame).

Mirrors pamqp's ``pamqp.commands.Basic.Properties`` (attribute names, ``message_type`` for the
``type`` property) and RabbitMQ's ``rabbit_framing_amqp_0_9_1:decode_properties/2`` /
``encode_properties/1`` (flag word, then the present properties in order).  Owns the
``BasicProperties`` value type and its codec; the frame decoder keeps properties as raw bytes
and decodes them only when someone reads ``.properties``.

Differences from pamqp, on purpose: ``timestamp`` is int epoch seconds (pamqp gives a
``datetime``); a property set to ``""`` is encoded as present and empty (pamqp drops it);
``cluster_id`` may be set (pamqp refuses); short-string properties that are not valid UTF-8
decode to ``bytes`` instead of failing, since RabbitMQ passes them through untouched.  Like
RabbitMQ, the two low flag bits (reserved and continuation) are ignored when decoding.
"""

from __future__ import annotations

import datetime
import functools
import struct

from . import fields as _fields
from .codec_errors import SyntaxError_

__all__ = ["BasicProperties", "EMPTY_PROPERTIES", "PROPERTY_FLAGS"]

EMPTY_PROPERTIES = b"\x00\x00"

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")

#: (attribute, type, flag bit) in wire order.
_PROPERTIES = (
    ("content_type", "shortstr", 1 << 15),
    ("content_encoding", "shortstr", 1 << 14),
    ("headers", "table", 1 << 13),
    ("delivery_mode", "octet", 1 << 12),
    ("priority", "octet", 1 << 11),
    ("correlation_id", "shortstr", 1 << 10),
    ("reply_to", "shortstr", 1 << 9),
    ("expiration", "shortstr", 1 << 8),
    ("message_id", "shortstr", 1 << 7),
    ("timestamp", "timestamp", 1 << 6),
    ("message_type", "shortstr", 1 << 5),
    ("user_id", "shortstr", 1 << 4),
    ("app_id", "shortstr", 1 << 3),
    ("cluster_id", "shortstr", 1 << 2),
)
PROPERTY_FLAGS = {name: flag for name, _, flag in _PROPERTIES}

_new = object.__new__


def _shortstr_lenient(buf, offset: int, limit: int):
    if offset >= limit:
        raise _fields.Malformed("short string length runs past the end")
    end = offset + 1 + buf[offset]
    if end > limit:
        raise _fields.Malformed(f"short string of {buf[offset]} bytes runs past the end")
    raw = buf[offset + 1 : end]
    try:
        return raw.decode(), end
    except UnicodeDecodeError:
        return bytes(raw), end


def _octet(buf, offset: int, limit: int):
    if offset >= limit:
        raise _fields.Malformed("octet runs past the end")
    return buf[offset], offset + 1


def _timestamp(buf, offset: int, limit: int):
    if offset + 8 > limit:
        raise _fields.Malformed("timestamp runs past the end")
    return _U64.unpack_from(buf, offset)[0], offset + 8


_DECODERS = {
    "shortstr": _shortstr_lenient,
    "octet": _octet,
    "timestamp": _timestamp,
    "table": _fields._table,
}
_DECODE_PLAN = tuple((name, flag, _DECODERS[ftype]) for name, ftype, flag in _PROPERTIES)
# the same with the headers' wire types kept (fields.decode_table(typed=True))
_DECODE_PLAN_TYPED = tuple(
    (name, flag, functools.partial(_fields._table, depth=0, read=_fields._typed_value)
     if ftype == "table" else _DECODERS[ftype]) for name, ftype, flag in _PROPERTIES)


def _encode_timestamp(value) -> bytes:
    if isinstance(value, datetime.datetime):
        value = _fields._timestamp_seconds(value)
    return _U64.pack(value)


_ENCODERS = {
    "shortstr": _fields.encode_shortstr,
    "octet": _U8.pack,
    "timestamp": _encode_timestamp,
    "table": _fields.encode_table,
}
_ENCODE_PLAN = tuple((name, flag, _ENCODERS[ftype]) for name, ftype, flag in _PROPERTIES)


class BasicProperties:
    """The 14 properties of basic content; every one defaults to None (absent)."""

    __slots__ = tuple(name for name, _, _ in _PROPERTIES)
    FIELDS = __slots__
    CLASS_ID = 60

    def __init__(
        self,
        content_type: str | None = None,
        content_encoding: str | None = None,
        headers: dict | None = None,
        delivery_mode: int | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        expiration: str | None = None,
        message_id: str | None = None,
        timestamp: int | None = None,
        message_type: str | None = None,
        user_id: str | None = None,
        app_id: str | None = None,
        cluster_id: str | None = None,
    ):
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.headers = headers
        self.delivery_mode = delivery_mode
        self.priority = priority
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.expiration = expiration
        self.message_id = message_id
        self.timestamp = timestamp
        self.message_type = message_type
        self.user_id = user_id
        self.app_id = app_id
        self.cluster_id = cluster_id

    def encode(self) -> bytes:
        """Flag word + the present properties (the property list of a content header)."""
        flags = 0
        parts = [b""]
        for name, flag, encoder in _ENCODE_PLAN:
            value = getattr(self, name)
            if value is not None:
                flags |= flag
                try:
                    parts.append(encoder(value))
                except struct.error as exc:
                    raise ValueError(f"cannot encode property {name}={value!r}: {exc}") from None
        if not flags:
            return EMPTY_PROPERTIES
        parts[0] = _U16.pack(flags)
        return b"".join(parts)

    @classmethod
    def decode(cls, buf, offset: int = 0, end: int | None = None,
               typed: bool = False) -> BasicProperties:
        """Read a property list; raises SyntaxError_ (502, class 60) when malformed.
        ``typed``: header values keep their wire types, so encode() writes them back alike."""
        buf = _fields._as_bytes(buf)
        if end is None:
            end = len(buf)
        self = _new(cls)
        name = "flags"
        try:
            if offset + 2 > end:
                raise _fields.Malformed("property flags truncated")
            (flags,) = _U16.unpack_from(buf, offset)
            offset += 2
            for name, flag, decoder in _DECODE_PLAN_TYPED if typed else _DECODE_PLAN:
                if flags & flag:
                    value, offset = decoder(buf, offset, end)
                    setattr(self, name, value)
                else:
                    setattr(self, name, None)
        except _fields.DECODE_ERRORS as exc:
            detail = str(exc) or type(exc).__name__
            raise SyntaxError_(
                502, f"cannot decode basic properties: {name}: {detail}", 60, 0
            ) from None
        if offset != end:
            raise SyntaxError_(
                502, f"cannot decode basic properties: {end - offset} trailing bytes", 60, 0
            )
        return self

    @property
    def type(self):
        """The AMQP name of ``message_type``."""
        return self.message_type

    @type.setter
    def type(self, value) -> None:
        self.message_type = value

    def __eq__(self, other):
        if type(other) is not BasicProperties:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__slots__)

    __hash__ = None

    def __repr__(self) -> str:
        args = ", ".join(
            f"{f}={getattr(self, f)!r}" for f in self.__slots__ if getattr(self, f) is not None
        )
        return f"BasicProperties({args})"

    def as_dict(self) -> dict:
        """The present properties only."""
        return {f: getattr(self, f) for f in self.__slots__ if getattr(self, f) is not None}

    def __reduce__(self):
        return (BasicProperties, tuple(getattr(self, f) for f in self.__slots__))


# --- editing an encoded property list in place ---------------------------------------------------
# RabbitMQ edits a message's properties in two places without touching the rest: the channel
# sets reply_to to the direct reply-to name it generated (rabbit_channel:maybe_set_fast_reply_to)
# and drops the BCC header (rabbit_basic:strip_header). Decoding and re-encoding the whole list
# would lose wire types (an unsigned 'i' header comes back as 'I', an 'S' that is not UTF-8 as
# 'x'), so these work on the bytes: only the edited property changes.

_SKIP_FIXED = {"octet": 1, "timestamp": 8}


def _property_spans(raw) -> dict:
    """{property name: (start, end)} of the present properties of an encoded list (raises
    SyntaxError_ as `decode` does when it is malformed)."""
    buf = _fields._as_bytes(raw)
    end = len(buf)
    spans = {}
    try:
        if end < 2:
            raise _fields.Malformed("property flags truncated")
        (flags,) = _U16.unpack_from(buf, 0)
        offset = 2
        for name, ftype, flag in _PROPERTIES:
            if not flags & flag:
                continue
            start = offset
            if ftype == "shortstr":
                offset += 1 + buf[offset]
            elif ftype == "table":
                offset += 4 + _fields._U32.unpack_from(buf, offset)[0]
            else:
                offset += _SKIP_FIXED[ftype]
            if offset > end:
                raise _fields.Malformed(f"{name} runs past the end")
            spans[name] = (start, offset)
    except _fields.DECODE_ERRORS as exc:
        raise SyntaxError_(502, f"cannot decode basic properties: {exc}", 60, 0) from None
    return spans


def delivery_mode(raw) -> int | None:
    """The delivery_mode of an encoded property list, read past the three properties before
    it without decoding them (a queue census checks it for every entry it names); None when
    absent or the list is malformed."""
    try:
        (flags,) = _U16.unpack_from(raw, 0)
        if not flags & 0x1000:
            return None
        at = 2
        if flags & 0x8000:  # content_type
            at += 1 + raw[at]
        if flags & 0x4000:  # content_encoding
            at += 1 + raw[at]
        if flags & 0x2000:  # headers
            at += 4 + _fields._U32.unpack_from(raw, at)[0]
        return raw[at]
    except (IndexError, struct.error):
        return None


def with_reply_to(raw, reply_to: str) -> bytes:
    """The encoded property list `raw` with its reply_to property set to `reply_to`."""
    buf = bytes(raw)
    value = _fields.encode_shortstr(reply_to)
    span = _property_spans(buf).get("reply_to")
    if span is not None:
        return buf[:span[0]] + value + buf[span[1]:]
    # absent: insert it after the last present property that comes before it
    flag = PROPERTY_FLAGS["reply_to"]
    at = 2
    for name, (_, end) in _property_spans(buf).items():
        if PROPERTY_FLAGS[name] > flag:
            at = end
    (flags,) = _U16.unpack_from(buf, 0) if len(buf) >= 2 else (0,)
    return _U16.pack(flags | flag) + buf[2:at] + value + buf[at:]


def with_long_header(raw, key: str, value: int) -> bytes:
    """The encoded property list `raw` with header `key` set to the long (signed 64-bit)
    `value`: an entry of that name is replaced, else one is appended to the headers table
    (created when absent). The other properties and entries keep their bytes."""
    buf = without_header(bytes(raw), key)
    entry = _fields.encode_shortstr(key) + struct.pack(">cq", b"l", value)
    span = _property_spans(buf).get("headers")
    if span is not None:
        t0, t1 = span
        (n,) = _fields._U32.unpack_from(buf, t0)
        return buf[:t0] + _fields._U32.pack(n + len(entry)) + buf[t0 + 4:t1] + entry + buf[t1:]
    table = _fields._U32.pack(len(entry)) + entry
    flag = PROPERTY_FLAGS["headers"]
    at = 2
    for name, (_, end) in _property_spans(buf).items():
        if PROPERTY_FLAGS[name] > flag:
            at = end
    (flags,) = _U16.unpack_from(buf, 0) if len(buf) >= 2 else (0,)
    return _U16.pack(flags | flag) + buf[2:at] + table + buf[at:]


def header_types(raw) -> dict:
    """{header name: its AMQP field type octet as a one-character str} of the top-level headers
    of an encoded property list (the first entry of a name, as rabbit_misc:table_lookup)."""
    return {key: kind for key, kind, _, _ in _header_entries(bytes(raw))}


def without_header(raw, key: str) -> bytes:
    """The encoded property list `raw` with the first header entry named `key` removed (the
    headers table stays, empty or not), as rabbit_basic:strip_header/2."""
    buf = bytes(raw)
    for name, _, start, end in _header_entries(buf):
        if name == key:
            t0 = _property_spans(buf)["headers"][0]
            (n,) = _fields._U32.unpack_from(buf, t0)
            return buf[:t0] + _fields._U32.pack(n - (end - start)) + buf[t0 + 4:start] + buf[end:]
    return buf


def _header_entries(buf: bytes) -> list:
    """[(name, type char, entry start, entry end)] of the headers table."""
    span = _property_spans(buf).get("headers")
    if span is None:
        return []
    offset, end = span[0] + 4, span[1]
    out = []
    try:
        while offset < end:
            start = offset
            key_end = offset + 1 + buf[offset]
            key = buf[offset + 1:key_end].decode("utf-8", "surrogateescape")
            kind = chr(buf[key_end])
            _, offset = _fields._value(buf, key_end, end, 0)
            out.append((key, kind, start, offset))
    except _fields.DECODE_ERRORS as exc:
        raise SyntaxError_(502, f"cannot decode basic properties: headers: {exc}", 60,
                           0) from None
    return out
