"""Field values: short/long strings, field tables and arrays.

Mirrors pamqp's ``pamqp.encode`` / ``pamqp.decode`` (the choice of wire type for a Python
value) and RabbitMQ's ``rabbit_binary_parser:parse_table/1`` / ``parse_array/1`` and
``rabbit_binary_generator`` (which wire types exist and how they are read).  Owns the value
codec used by method arguments (``methods``) and content properties (``properties``).

Wire types, as RabbitMQ reads them (see rabbit_binary_parser.erl and the 0-9-1 errata):

====  ===================  ==========================================================
type  wire                 Python
====  ===================  ==========================================================
t     octet, 0 = false     bool (any non-zero octet is True)
b     int8                 int
B     uint8                int
s     int16                int   (RabbitMQ/pamqp 4: short *int*, not the spec's short string)
u     uint16               int
I     int32                int
i     uint32               int
l     int64                int
L     int64                int   (read only; RabbitMQ reads 'L' as signed 64 too)
f     float32              float (read only; Python floats are written as 'd')
d     float64              float
D     scale u8, value u32  decimal.Decimal (value unsigned, as RabbitMQ reads it)
S     u32 length + bytes   str when valid UTF-8, else bytes
A     u32 length + values  list
T     uint64 seconds       datetime.datetime (UTC); an int when past year 9999
F     u32 length + table   dict
V     nothing              None
x     u32 length + bytes   bytes
====  ===================  ==========================================================

Encoding picks the type from the Python value the way pamqp 4 does for ints (the smallest of
``b, s, u, I, i, l`` that fits) and for bool/str/dict/list/None/datetime/Decimal, except:
floats are written as ``d`` (pamqp writes a lossy ``f``), ``bytes`` and ``bytearray`` are
written as ``x`` (pamqp only takes bytearray), and table keys keep insertion order (pamqp sorts
them).  Encoders raise ``TypeError``/``ValueError`` for values that cannot be encoded; decoders
raise only ``protocol.codec_errors.SyntaxError_`` (502).

``decode_table(buf, typed=True)`` keeps each value's wire type as rabbit_binary_parser does
(``{Name, Type, Value}``): integers and 32-bit floats come back as the int/float subclasses
below (``SignedInt(7)`` for an ``I``), a non-UTF-8 ``S`` as ``LongStr`` bytes and a timestamp past
year 9999 as ``Timestamp``; the encoder writes each of them with its own type, so a table that
is decoded, edited and encoded again (dead-lettering) keeps the types it came with, as
rabbit_binary_generator does (``L`` comes back as ``l``, as RabbitMQ writes it).
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import struct
import time

from .codec_errors import SyntaxError_

__all__ = [
    "encode_table",
    "decode_table",
    "encode_array",
    "decode_array",
    "encode_value",
    "decode_value",
    "encode_shortstr",
    "decode_shortstr",
    "encode_longstr",
    "decode_longstr",
    "MAX_NESTING",
    "Byte", "UnsignedByte", "Short", "UnsignedShort", "SignedInt", "UnsignedInt", "Long",
    "Float32", "Timestamp", "LongStr",
]

#: Deepest nesting of tables/arrays the decoder accepts (guards the Python stack).
MAX_NESTING = 100

_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_D = struct.Struct(">d")
_DEC = struct.Struct(">BI")
_TAG_B = struct.Struct(">cb")
_TAG_S = struct.Struct(">ch")
_TAG_U = struct.Struct(">cH")
_TAG_BI = struct.Struct(">ci")
_TAG_LI = struct.Struct(">cI")
_TAG_L = struct.Struct(">cq")
_TAG_D = struct.Struct(">cd")
_TAG_T = struct.Struct(">cQ")
_TAG_LEN = struct.Struct(">cI")

#: Fixed-size numeric types: type octet -> (Struct, size).
_FIXED = {
    ord("b"): (struct.Struct(">b"), 1),
    ord("B"): (struct.Struct(">B"), 1),
    ord("s"): (struct.Struct(">h"), 2),
    ord("u"): (struct.Struct(">H"), 2),
    ord("I"): (struct.Struct(">i"), 4),
    ord("i"): (struct.Struct(">I"), 4),
    ord("l"): (struct.Struct(">q"), 8),
    ord("L"): (struct.Struct(">q"), 8),
    ord("f"): (struct.Struct(">f"), 4),
    ord("d"): (struct.Struct(">d"), 8),
}

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MAX_DATETIME_TS = 253402300799  # 9999-12-31T23:59:59Z
_ONE_SECOND = datetime.timedelta(seconds=1)
_EMPTY_TABLE = b"\x00\x00\x00\x00"

_T_S = ord("S")
_T_F = ord("F")
_T_A = ord("A")
_T_T = ord("T")
_T_t = ord("t")
_T_D = ord("D")
_T_V = ord("V")
_T_x = ord("x")


class _TypedInt(int):
    """An integer field value that keeps its wire type (see decode_table(typed=True))."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"


class Byte(_TypedInt):
    """b: int8."""


class UnsignedByte(_TypedInt):
    """B: uint8."""


class Short(_TypedInt):
    """s: int16."""


class UnsignedShort(_TypedInt):
    """u: uint16."""


class SignedInt(_TypedInt):
    """I: int32."""


class UnsignedInt(_TypedInt):
    """i: uint32."""


class Long(_TypedInt):
    """l (and L, read as signed 64 bits and written back as l, as RabbitMQ does)."""


class Timestamp(_TypedInt):
    """T: seconds past what datetime holds (year 9999); earlier ones decode to datetime."""


class Float32(float):
    """f: a 32-bit float."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Float32({float(self)!r})"


class LongStr(bytes):
    """S whose octets are not UTF-8 (a plain str when they are), written back as S, not x."""

    __slots__ = ()


def _as_bytes(buf):
    """bytes and bytearray as they are; anything else bytes-like (memoryview) copied."""
    if buf.__class__ is bytes or isinstance(buf, (bytes, bytearray)):
        return buf
    return bytes(buf)


class Malformed(ValueError):
    """Internal: raised by the decoders below, turned into SyntaxError_ by the public API."""


# ---------------------------------------------------------------------------------------------
# Strings


def encode_shortstr(value: str | bytes) -> bytes:
    """A short string with its 1-octet length. Raises ValueError past 255 bytes. A str with
    surrogate escapes (raw bytes: a reply text quoting a binary, as RabbitMQ's do) is written
    as those bytes."""
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
    if len(raw) > 255:
        raise ValueError(f"short string of {len(raw)} bytes exceeds 255")
    return _U8.pack(len(raw)) + raw


def encode_longstr(value: str | bytes) -> bytes:
    """A long string with its 4-octet length (surrogate escapes written as their bytes)."""
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
    if len(raw) > 0xFFFFFFFF:
        raise ValueError("long string exceeds 4 GiB")
    return _U32.pack(len(raw)) + raw


def _shortstr(buf, offset: int, limit: int) -> tuple[str, int]:
    if offset >= limit:
        raise Malformed("short string length runs past the end")
    end = offset + 1 + buf[offset]
    if end > limit:
        raise Malformed(f"short string of {buf[offset]} bytes runs past the end")
    try:
        return buf[offset + 1 : end].decode(), end
    except UnicodeDecodeError:
        raise Malformed("short string is not valid UTF-8") from None


def _longstr(buf, offset: int, limit: int) -> tuple[str | bytes, int]:
    if offset + 4 > limit:
        raise Malformed("long string length runs past the end")
    (n,) = _U32.unpack_from(buf, offset)
    end = offset + 4 + n
    if end > limit:
        raise Malformed(f"long string of {n} bytes runs past the end")
    raw = buf[offset + 4 : end]
    try:
        return raw.decode(), end
    except UnicodeDecodeError:
        return bytes(raw), end


def decode_shortstr(buf, offset: int = 0) -> tuple[str, int]:
    """(str, new_offset). Raises SyntaxError_ when short or not valid UTF-8."""
    buf = _as_bytes(buf)
    try:
        return _shortstr(buf, offset, len(buf))
    except (Malformed, IndexError, struct.error, TypeError) as exc:
        raise SyntaxError_(502, f"cannot decode short string: {exc}") from None


def decode_longstr(buf, offset: int = 0) -> tuple[str | bytes, int]:
    """(str, new_offset), or (bytes, new_offset) when not valid UTF-8. Raises SyntaxError_."""
    buf = _as_bytes(buf)
    try:
        return _longstr(buf, offset, len(buf))
    except (Malformed, IndexError, struct.error, TypeError) as exc:
        raise SyntaxError_(502, f"cannot decode long string: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Encoding


def _int_bytes(value: int) -> bytes:
    # pamqp 4's table_integer(): the smallest of b, s, u, I, i, l that holds the value.
    if -128 <= value <= 127:
        return _TAG_B.pack(b"b", value)
    if -32768 <= value <= 32767:
        return _TAG_S.pack(b"s", value)
    if 0 <= value <= 65535:
        return _TAG_U.pack(b"u", value)
    if -2147483648 <= value <= 2147483647:
        return _TAG_BI.pack(b"I", value)
    if 0 <= value <= 4294967295:
        return _TAG_LI.pack(b"i", value)
    if -9223372036854775808 <= value <= 9223372036854775807:
        return _TAG_L.pack(b"l", value)
    raise ValueError(f"integer {value} does not fit a signed 64-bit field value")


def _decimal_bytes(value: decimal.Decimal) -> bytes:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise ValueError(f"cannot encode {value} as a decimal")
    if exponent > 0:
        scale, mantissa = 0, int(value)
    else:
        scale = -exponent
        mantissa = int(value.scaleb(scale))
    if not 0 <= scale <= 255:
        raise ValueError(f"decimal scale {scale} outside 0..255")
    if not 0 <= mantissa <= 0xFFFFFFFF:
        # RabbitMQ reads the value as unsigned 32 bits: negatives would not survive.
        raise ValueError(f"decimal value {mantissa} outside 0..4294967295")
    return b"D" + _DEC.pack(scale, mantissa)


def _timestamp_seconds(value) -> int:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            value = value.replace(tzinfo=datetime.timezone.utc)  # naive means UTC, as in pamqp
        return (value - _EPOCH) // _ONE_SECOND
    if isinstance(value, time.struct_time):
        return calendar.timegm(value)
    return int(value)


def _timestamp_bytes(value) -> bytes:
    seconds = _timestamp_seconds(value)
    if not 0 <= seconds <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"timestamp {value!r} outside the unsigned 64-bit range")
    return _TAG_T.pack(b"T", seconds)


def _encode_value(value, out: list) -> None:
    kind = type(value)
    if kind is str:
        raw = value.encode("utf-8")
        out.append(_TAG_LEN.pack(b"S", len(raw)))
        out.append(raw)
    elif kind is bool:
        out.append(b"t\x01" if value else b"t\x00")
    elif kind is int:
        out.append(_int_bytes(value))
    elif kind is dict:
        out.append(b"F")
        out.append(encode_table(value))
    elif kind is list or kind is tuple:
        out.append(b"A")
        out.append(encode_array(value))
    elif value is None:
        out.append(b"V")
    elif kind is float:
        out.append(_TAG_D.pack(b"d", value))
    elif kind is bytes or kind is bytearray or kind is memoryview:
        raw = bytes(value)
        out.append(_TAG_LEN.pack(b"x", len(raw)))
        out.append(raw)
    elif kind is decimal.Decimal:
        out.append(_decimal_bytes(value))
    elif kind is datetime.datetime or kind is time.struct_time:
        out.append(_timestamp_bytes(value))
    elif kind in _TYPED_PACK:
        tag, codec = _TYPED_PACK[kind]
        out.append(codec.pack(tag, value))
    elif kind is LongStr:
        out.append(_TAG_LEN.pack(b"S", len(value)))
        out.append(bytes(value))
    # Subclasses (IntEnum, StrEnum, OrderedDict, ...): the same choices, by isinstance.
    elif isinstance(value, bool):
        out.append(b"t\x01" if value else b"t\x00")
    elif isinstance(value, int):
        out.append(_int_bytes(int(value)))
    elif isinstance(value, str):
        raw = str.encode(value, "utf-8")  # not str(value): an Enum's str() is its name
        out.append(_TAG_LEN.pack(b"S", len(raw)))
        out.append(raw)
    elif isinstance(value, float):
        out.append(_TAG_D.pack(b"d", value))
    elif isinstance(value, decimal.Decimal):
        out.append(_decimal_bytes(value))
    elif isinstance(value, (datetime.datetime, time.struct_time)):
        out.append(_timestamp_bytes(value))
    elif isinstance(value, dict):
        out.append(b"F")
        out.append(encode_table(value))
    elif isinstance(value, (list, tuple)):
        out.append(b"A")
        out.append(encode_array(value))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _encode_value(bytes(value), out)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} {value!r} as a field value")


#: Typed value class -> (type octet, Struct of the octet and the value).
_TYPED_PACK = {
    Byte: (b"b", _TAG_B), UnsignedByte: (b"B", struct.Struct(">cB")), Short: (b"s", _TAG_S),
    UnsignedShort: (b"u", _TAG_U), SignedInt: (b"I", _TAG_BI), UnsignedInt: (b"i", _TAG_LI),
    Long: (b"l", _TAG_L), Timestamp: (b"T", _TAG_T), Float32: (b"f", struct.Struct(">cf")),
}


def encode_value(value) -> bytes:
    """One field value with its type octet."""
    out: list = []
    _encode_value(value, out)
    return b"".join(out)


def encode_table(table: dict | None) -> bytes:
    """A field table with its 4-octet length; None and {} give an empty table."""
    if not table:
        return _EMPTY_TABLE
    out: list = [b""]
    append = out.append
    for key, value in table.items():
        raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        if len(raw) > 255:
            raise ValueError(f"table key of {len(raw)} bytes exceeds 255")
        append(_U8.pack(len(raw)))
        append(raw)
        _encode_value(value, out)
    body = b"".join(out)
    return _U32.pack(len(body)) + body


def encode_array(values) -> bytes:
    """A field array with its 4-octet length."""
    out: list = []
    for value in values:
        _encode_value(value, out)
    body = b"".join(out)
    return _U32.pack(len(body)) + body


# ---------------------------------------------------------------------------------------------
# Decoding: every function takes (buf, offset, limit, depth) and never reads past limit.


def _value(buf, offset: int, limit: int, depth: int):
    """(value, new_offset) for the typed value at offset."""
    kind = buf[offset]
    offset += 1
    if kind == _T_S:
        return _longstr(buf, offset, limit)
    fixed = _FIXED.get(kind)
    if fixed is not None:
        codec, size = fixed
        if offset + size > limit:
            raise Malformed(f"field value of type {chr(kind)!r} runs past the end")
        return codec.unpack_from(buf, offset)[0], offset + size
    if kind == _T_F:
        return _table(buf, offset, limit, depth + 1)
    if kind == _T_t:
        if offset >= limit:
            raise Malformed("boolean field value runs past the end")
        return buf[offset] != 0, offset + 1
    if kind == _T_T:
        if offset + 8 > limit:
            raise Malformed("timestamp field value runs past the end")
        (seconds,) = _U64.unpack_from(buf, offset)
        if seconds <= _MAX_DATETIME_TS:
            return _EPOCH + datetime.timedelta(seconds=seconds), offset + 8
        return seconds, offset + 8
    if kind == _T_V:
        return None, offset
    if kind == _T_A:
        return _array(buf, offset, limit, depth + 1)
    if kind == _T_D:
        if offset + 5 > limit:
            raise Malformed("decimal field value runs past the end")
        scale, mantissa = _DEC.unpack_from(buf, offset)
        return decimal.Decimal(mantissa).scaleb(-scale), offset + 5
    if kind == _T_x:
        if offset + 4 > limit:
            raise Malformed("byte array length runs past the end")
        (n,) = _U32.unpack_from(buf, offset)
        end = offset + 4 + n
        if end > limit:
            raise Malformed(f"byte array of {n} bytes runs past the end")
        return bytes(buf[offset + 4 : end]), end
    raise Malformed(f"unknown field value type {bytes((kind,))!r}")


#: Type octet -> the class a typed decode gives its number.
_TYPED_NUMBERS = {
    ord("b"): Byte, ord("B"): UnsignedByte, ord("s"): Short, ord("u"): UnsignedShort,
    ord("I"): SignedInt, ord("i"): UnsignedInt, ord("l"): Long, ord("L"): Long,
    ord("f"): Float32,
}


def _typed_value(buf, offset: int, limit: int, depth: int):
    """_value, keeping the wire type of numbers, non-UTF-8 longstrs and large timestamps, and
    reading nested tables and arrays the same way."""
    kind = buf[offset]
    if kind == _T_F:
        return _table(buf, offset + 1, limit, depth + 1, _typed_value)
    if kind == _T_A:
        return _array(buf, offset + 1, limit, depth + 1, _typed_value)
    value, end = _value(buf, offset, limit, depth)
    cls = _TYPED_NUMBERS.get(kind)
    if cls is not None:
        return cls(value), end
    if kind == _T_S and value.__class__ is bytes:
        return LongStr(value), end
    if kind == _T_T and value.__class__ is int:
        return Timestamp(value), end
    return value, end


def _table(buf, offset: int, limit: int, depth: int = 0, read=_value) -> tuple[dict, int]:
    if depth > MAX_NESTING:
        raise Malformed(f"tables nested deeper than {MAX_NESTING}")
    if offset + 4 > limit:
        raise Malformed("table length runs past the end")
    (n,) = _U32.unpack_from(buf, offset)
    offset += 4
    end = offset + n
    if end > limit:
        raise Malformed(f"table of {n} bytes runs past the end")
    result = {}
    while offset < end:
        key_end = offset + 1 + buf[offset]
        if key_end >= end:
            raise Malformed("table entry runs past the end of the table")
        try:
            key = buf[offset + 1 : key_end].decode()
        except UnicodeDecodeError:
            raise Malformed("table key is not valid UTF-8") from None
        result[key], offset = read(buf, key_end, end, depth)
    return result, end


def _array(buf, offset: int, limit: int, depth: int = 0, read=_value) -> tuple[list, int]:
    if depth > MAX_NESTING:
        raise Malformed(f"arrays nested deeper than {MAX_NESTING}")
    if offset + 4 > limit:
        raise Malformed("array length runs past the end")
    (n,) = _U32.unpack_from(buf, offset)
    offset += 4
    end = offset + n
    if end > limit:
        raise Malformed(f"array of {n} bytes runs past the end")
    result = []
    append = result.append
    while offset < end:
        value, offset = read(buf, offset, end, depth)
        append(value)
    return result, end


#: Everything a decoder can raise on malformed input, caught and turned into SyntaxError_.
DECODE_ERRORS = (
    ValueError,  # includes Malformed, UnicodeDecodeError
    IndexError,
    KeyError,
    TypeError,
    OverflowError,
    ArithmeticError,  # decimal.InvalidOperation
    RecursionError,
    struct.error,
)


def decode_table(buf, offset: int = 0, typed: bool = False) -> tuple[dict, int]:
    """(dict, new_offset) for the field table (with its length) at offset; ``typed``: values
    keep their wire types (see the module docstring)."""
    buf = _as_bytes(buf)
    try:
        return _table(buf, offset, len(buf), 0, _typed_value if typed else _value)
    except DECODE_ERRORS as exc:
        raise SyntaxError_(502, f"cannot decode field table: {exc}") from None


def decode_array(buf, offset: int = 0) -> tuple[list, int]:
    """(list, new_offset) for the field array (with its length) at offset."""
    buf = _as_bytes(buf)
    try:
        return _array(buf, offset, len(buf))
    except DECODE_ERRORS as exc:
        raise SyntaxError_(502, f"cannot decode field array: {exc}") from None


def decode_value(buf, offset: int = 0):
    """(value, new_offset) for the typed field value (type octet first) at offset."""
    buf = _as_bytes(buf)
    try:
        return _value(buf, offset, len(buf), 0)
    except DECODE_ERRORS as exc:
        raise SyntaxError_(502, f"cannot decode field value: {exc}") from None
