"""protocol.fields: every field value type, strings, tables, arrays and their errors."""

from __future__ import annotations

import datetime
import decimal
import os
import struct
import sys
import time

import pytest
from hypothesis import given, settings

from protocol import fields
from protocol.codec_errors import AMQPError, SyntaxError_

sys.path.insert(0, os.path.dirname(__file__))
import protocol_strategies as S  # noqa: E402

UTC = datetime.timezone.utc


def table_bytes(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def entry(key: bytes, type_and_value: bytes) -> bytes:
    return bytes((len(key),)) + key + type_and_value


# (wire bytes after the type octet, type octet, decoded value) for every type RabbitMQ reads
DECODE_CASES = [
    (b"t", b"\x01", True),
    (b"t", b"\x00", False),
    (b"t", b"\x07", True),  # any non-zero octet, as RabbitMQ's (Value /= 0)
    (b"b", b"\xff", -1),
    (b"B", b"\xff", 255),
    (b"s", b"\xff\xfe", -2),
    (b"u", b"\xff\xfe", 65534),
    (b"I", b"\xff\xff\xff\xfe", -2),
    (b"i", b"\xff\xff\xff\xfe", 4294967294),
    (b"l", b"\xff" * 8, -1),
    (b"L", b"\xff" * 8, -1),  # RabbitMQ reads 'L' as signed 64 too
    (b"f", struct.pack(">f", 1.5), 1.5),
    (b"d", struct.pack(">d", -2.25), -2.25),
    (b"D", b"\x02" + struct.pack(">I", 12345), decimal.Decimal("123.45")),
    (b"D", b"\x00" + b"\xff\xff\xff\xff", decimal.Decimal(4294967295)),  # unsigned
    (b"S", b"\x00\x00\x00\x03abc", "abc"),
    (b"S", b"\x00\x00\x00\x02\xff\xfe", b"\xff\xfe"),  # not UTF-8 -> bytes
    (b"S", "é".encode().rjust(6, b"\x00")[:0] + b"\x00\x00\x00\x02" + "é".encode(), "é"),
    (b"A", b"\x00\x00\x00\x03b\x01V", [1, None]),
    (b"T", struct.pack(">Q", 1700000000), datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
    (b"T", struct.pack(">Q", 2**63), 2**63),  # past year 9999: kept as int seconds
    (b"F", b"\x00\x00\x00\x03\x01kV", {"k": None}),
    (b"V", b"", None),
    (b"x", b"\x00\x00\x00\x03\x00\x01\x02", b"\x00\x01\x02"),
]


@pytest.mark.parametrize("kind,wire,value", DECODE_CASES)
def test_decode_every_type_in_table_and_array(kind, wire, value):
    raw = table_bytes(entry(b"key", kind + wire))
    decoded, offset = fields.decode_table(raw)
    assert offset == len(raw)
    assert decoded == {"key": value}
    assert type(decoded["key"]) is type(value)
    arr = struct.pack(">I", 1 + len(wire)) + kind + wire
    assert fields.decode_array(arr) == ([value], len(arr))
    assert fields.decode_value(kind + wire) == (value, 1 + len(wire))


ENCODE_CASES = [
    (True, b"t\x01"),
    (False, b"t\x00"),
    (0, b"b\x00"),
    (-128, b"b\x80"),
    (127, b"b\x7f"),
    (128, b"s\x00\x80"),
    (-129, b"s\xff\x7f"),
    (32767, b"s\x7f\xff"),
    (32768, b"u\x80\x00"),  # pamqp 4's choice: u before I
    (65535, b"u\xff\xff"),
    (65536, b"I\x00\x01\x00\x00"),
    (-32769, b"I\xff\xff\x7f\xff"),
    (2**31 - 1, b"I\x7f\xff\xff\xff"),
    (2**31, b"i\x80\x00\x00\x00"),
    (2**32 - 1, b"i\xff\xff\xff\xff"),
    (2**32, b"l" + struct.pack(">q", 2**32)),
    (-(2**31) - 1, b"l" + struct.pack(">q", -(2**31) - 1)),
    (2**63 - 1, b"l" + struct.pack(">q", 2**63 - 1)),
    (1.5, b"d" + struct.pack(">d", 1.5)),
    (decimal.Decimal("1.25"), b"D\x02\x00\x00\x00\x7d"),
    (decimal.Decimal("1E+2"), b"D\x00\x00\x00\x00\x64"),
    ("héllo", b"S\x00\x00\x00\x06h\xc3\xa9llo"),
    (b"\x00\xff", b"x\x00\x00\x00\x02\x00\xff"),
    (bytearray(b"ab"), b"x\x00\x00\x00\x02ab"),
    (datetime.datetime(1970, 1, 1, 0, 0, 10, tzinfo=UTC), b"T" + struct.pack(">Q", 10)),
    (datetime.datetime(1970, 1, 1, 0, 0, 10), b"T" + struct.pack(">Q", 10)),  # naive = UTC
    (time.gmtime(20), b"T" + struct.pack(">Q", 20)),
    ({"a": 1}, b"F\x00\x00\x00\x04\x01ab\x01"),
    ([1, "x"], b"A\x00\x00\x00\x08b\x01S\x00\x00\x00\x01x"),
    ((1,), b"A\x00\x00\x00\x02b\x01"),
    (None, b"V"),
]


@pytest.mark.parametrize("value,wire", ENCODE_CASES, ids=lambda v: repr(v)[:30])
def test_encode_picks_pamqps_type(value, wire):
    assert fields.encode_value(value) == wire


def test_encode_table_keeps_order_and_length():
    raw = fields.encode_table({"b": 1, "a": "x"})
    assert raw == table_bytes(entry(b"b", b"b\x01"), entry(b"a", b"S\x00\x00\x00\x01x"))
    assert fields.encode_table({}) == b"\x00\x00\x00\x00"
    assert fields.encode_table(None) == b"\x00\x00\x00\x00"


def test_subclasses_encode_like_their_base():
    import enum

    class Color(enum.IntEnum):
        RED = 300

    class Name(str, enum.Enum):
        A = "a"

    assert fields.encode_value(Color.RED) == fields.encode_value(300)
    assert fields.encode_value(Name.A) == fields.encode_value("a")


@pytest.mark.parametrize(
    "value,exc",
    [
        (2**63, ValueError),
        (-(2**63) - 1, ValueError),
        (decimal.Decimal("-1.5"), ValueError),  # RabbitMQ reads decimals unsigned
        (decimal.Decimal("NaN"), ValueError),
        (decimal.Decimal(2**32), ValueError),
        (datetime.datetime(1960, 1, 1, tzinfo=UTC), ValueError),
        (object(), TypeError),
        ({1, 2}, TypeError),
    ],
    # a plain object's repr holds its address: ids the same in every process (pytest-xdist)
    ids=lambda v: "object()" if type(v) is object else repr(v),
)
def test_encode_rejects(value, exc):
    with pytest.raises(exc):
        fields.encode_value(value)


def test_encode_rejects_long_key_and_shortstr():
    with pytest.raises(ValueError):
        fields.encode_table({"k" * 256: 1})
    with pytest.raises(ValueError):
        fields.encode_shortstr("x" * 256)
    assert fields.encode_shortstr("x" * 255)[0] == 255


def test_strings_with_surrogate_escapes_are_written_as_their_raw_bytes():
    """A reply text quoting a binary argument holds its raw bytes as surrogate escapes
    (actors/core/errors.py), as RabbitMQ's texts hold the binary: found by tools.fuzz, the
    channel failed encoding the channel.close of an inequivalent alternate-exchange."""
    assert fields.encode_shortstr("received '\udcae'") == b"\x0creceived '\xae'"
    assert fields.encode_longstr("\udcff") == b"\x00\x00\x00\x01\xff"


def test_string_helpers():
    assert fields.encode_shortstr("abc") == b"\x03abc"
    assert fields.encode_shortstr(b"abc") == b"\x03abc"
    assert fields.encode_longstr("abc") == b"\x00\x00\x00\x03abc"
    assert fields.decode_shortstr(b"\x00\x03abcX", 1) == ("abc", 5)
    assert fields.decode_longstr(b"\x00\x00\x00\x03abc") == ("abc", 7)
    assert fields.decode_longstr(b"\x00\x00\x00\x01\xff") == (b"\xff", 5)
    with pytest.raises(SyntaxError_):
        fields.decode_shortstr(b"\x02\xff\xfe")  # invalid UTF-8
    with pytest.raises(SyntaxError_):
        fields.decode_shortstr(b"\x05abc")
    with pytest.raises(SyntaxError_):
        fields.decode_shortstr(b"")
    with pytest.raises(SyntaxError_):
        fields.decode_longstr(b"\x00\x00\x01\x00abc")


MALFORMED_TABLES = [
    (b"\x00\x00", "length"),
    (b"\x00\x00\x00\x09\x01ab\x01", "runs past"),
    (table_bytes(b"\x05ab"), "entry"),
    (table_bytes(entry(b"k", b"Z\x00")), "unknown field value type"),
    (table_bytes(entry(b"k", b"\x00")), "unknown field value type"),  # pamqp's void; not RabbitMQ's
    (table_bytes(entry(b"k", b"I\x00\x00")), "runs past"),
    (table_bytes(entry(b"k", b"S\x00\x00\x00\x09ab")), "runs past"),
    (table_bytes(entry(b"k", b"F\x00\x00\x00\x09")), "runs past"),
    (table_bytes(entry(b"k", b"A\x00\x00\x00\x02b")), "runs past"),
    (table_bytes(entry(b"k", b"x\x00\x00\x00\x02b")), "runs past"),
    (table_bytes(entry(b"k", b"D\x01")), "runs past"),
    (table_bytes(entry(b"k", b"T\x01")), "runs past"),
    (table_bytes(entry(b"k", b"t")), "runs past"),
    (table_bytes(entry(b"\xff\xfe", b"V")), "UTF-8"),
]


@pytest.mark.parametrize("raw,text", MALFORMED_TABLES, ids=repr)
def test_malformed_tables_raise_502(raw, text):
    with pytest.raises(SyntaxError_) as info:
        fields.decode_table(raw)
    assert info.value.reply_code == 502
    assert text in info.value.text


def test_nesting_is_bounded():
    raw = b"V"
    for _ in range(fields.MAX_NESTING + 5):
        raw = b"A" + struct.pack(">I", len(raw)) + raw
    with pytest.raises(SyntaxError_, match="nested"):
        fields.decode_value(raw)
    ok = b"V"
    for _ in range(fields.MAX_NESTING - 1):
        ok = b"A" + struct.pack(">I", len(ok)) + ok
    fields.decode_value(ok)


@pytest.mark.parametrize("kind,wire,value", DECODE_CASES)
def test_typed_decode_encodes_back_to_the_same_wire_type(kind, wire, value):
    # rabbit_binary_parser then rabbit_binary_generator: every type comes back as it came,
    # except L (written as l) and a non-zero boolean octet (written as 1)
    def table(kind, wire):
        return table_bytes(entry(b"k", kind + wire),
                           entry(b"a", b"A" + struct.pack(">I", 1 + len(wire)) + kind + wire))

    decoded, _ = fields.decode_table(table(kind, wire), typed=True)
    assert decoded == {"k": value, "a": [value]}
    expected = table(b"l" if kind == b"L" else kind, b"\x01" if kind == b"t" and value else wire)
    assert fields.encode_table(decoded) == expected


def test_typed_values_are_their_base_values():
    assert fields.SignedInt(7) == 7 and repr(fields.Long(2)) == "Long(2)"
    assert fields.Long(1) + 1 == 2 and type(fields.Long(1) + 1) is int
    assert fields.encode_value(fields.UnsignedInt(5)) == b"i\x00\x00\x00\x05"
    assert fields.encode_value(fields.LongStr(b"\xff")) == b"S\x00\x00\x00\x01\xff"


def test_nested_table_and_array_values():
    value = {"a": [1, {"b": [None, True, "x", b"\x00"]}], "c": {"d": {"e": 1.5}}}
    raw = fields.encode_table(value)
    assert fields.decode_table(raw) == (value, len(raw))


@settings(max_examples=150, deadline=None)
@given(S.tables)
def test_tables_round_trip(table):
    raw = fields.encode_table(table)
    decoded, offset = fields.decode_table(raw)
    assert offset == len(raw)
    assert decoded == S.normalize(table)


@settings(max_examples=150, deadline=None)
@given(S.field_values)
def test_values_round_trip(value):
    raw = fields.encode_value(value)
    decoded, offset = fields.decode_value(raw)
    assert offset == len(raw)
    expected = list(value) if isinstance(value, tuple) else value
    assert decoded == S.normalize(expected)


@settings(max_examples=200, deadline=None)
@given(S.st.binary(max_size=64))
def test_decode_table_random_bytes_only_amqp_errors(raw):
    for fn in (fields.decode_table, fields.decode_array, fields.decode_value):
        try:
            fn(raw)
        except AMQPError:
            pass
