"""protocol.properties: the 14 basic properties, alone and together, and malformed lists."""

from __future__ import annotations

import datetime
import os
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import EMPTY_PROPERTIES, BasicProperties, PROPERTY_FLAGS
from protocol.codec_errors import SyntaxError_

sys.path.insert(0, os.path.dirname(__file__))
import protocol_strategies as S  # noqa: E402

EXAMPLES = {
    "content_type": ("text/plain", b"\x0atext/plain"),
    "content_encoding": ("gzip", b"\x04gzip"),
    "headers": ({"a": 1}, b"\x00\x00\x00\x04\x01ab\x01"),
    "delivery_mode": (2, b"\x02"),
    "priority": (9, b"\x09"),
    "correlation_id": ("c-1", b"\x03c-1"),
    "reply_to": ("amq.rabbitmq.reply-to", b"\x15amq.rabbitmq.reply-to"),
    "expiration": ("60000", b"\x0560000"),
    "message_id": ("m", b"\x01m"),
    "timestamp": (1700000000, struct.pack(">Q", 1700000000)),
    "message_type": ("order", b"\x05order"),
    "user_id": ("guest", b"\x05guest"),
    "app_id": ("app", b"\x03app"),
    "cluster_id": ("c", b"\x01c"),
}


def test_fourteen_properties_in_wire_order():
    assert BasicProperties.__slots__ == tuple(EXAMPLES)
    assert list(PROPERTY_FLAGS.values()) == [1 << (15 - i) for i in range(14)]
    assert BasicProperties().encode() == EMPTY_PROPERTIES == b"\x00\x00"
    assert BasicProperties.decode(b"\x00\x00") == BasicProperties()


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_each_property_alone(name):
    value, wire = EXAMPLES[name]
    props = BasicProperties(**{name: value})
    raw = props.encode()
    assert raw == struct.pack(">H", PROPERTY_FLAGS[name]) + wire
    back = BasicProperties.decode(raw)
    assert back == props
    assert getattr(back, name) == value
    assert all(getattr(back, other) is None for other in EXAMPLES if other != name)


def test_all_properties_together_and_helpers():
    props = BasicProperties(**{k: v for k, (v, _) in EXAMPLES.items()})
    raw = props.encode()
    assert raw[:2] == b"\xff\xfc"
    assert raw[2:] == b"".join(w for _, w in EXAMPLES.values())
    back = BasicProperties.decode(b"xx" + raw, 2)
    assert back == props
    assert back.type == "order"
    back.type = "other"
    assert back.message_type == "other"
    assert props.as_dict()["priority"] == 9
    assert "priority=9" in repr(props)


def test_empty_strings_are_present_and_datetime_timestamps_accepted():
    raw = BasicProperties(content_type="").encode()
    assert raw == b"\x80\x00\x00"
    assert BasicProperties.decode(raw).content_type == ""
    when = datetime.datetime(1970, 1, 2, tzinfo=datetime.timezone.utc)
    assert BasicProperties.decode(BasicProperties(timestamp=when).encode()).timestamp == 86400


def test_lenient_where_rabbitmq_is():
    # continuation/reserved flag bits are ignored, like rabbit_framing's decode_properties
    assert BasicProperties.decode(b"\x00\x03") == BasicProperties()
    # a short-string property that is not UTF-8 comes back as bytes instead of failing
    assert BasicProperties.decode(b"\x04\x00\x02\xff\xfe").correlation_id == b"\xff\xfe"
    assert BasicProperties(correlation_id=b"\xff\xfe").encode() == b"\x04\x00\x02\xff\xfe"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x80",
        b"\x80\x00",  # content_type flagged, missing
        b"\x80\x00\x05ab",
        b"\x20\x00\x00\x00\x00\x09",  # headers table runs past the end
        b"\x20\x00\x00\x00\x00\x03\x01kZ",  # unknown field type in headers
        b"\x10\x00",  # delivery_mode missing
        b"\x00\x40\x00\x00\x00",  # timestamp truncated
        b"\x00\x00\x00",  # trailing bytes
    ],
    ids=repr,
)
def test_malformed_property_lists_are_502(raw):
    with pytest.raises(SyntaxError_) as info:
        BasicProperties.decode(raw)
    assert info.value.reply_code == 502
    assert info.value.class_id == 60
    assert "basic properties" in info.value.text


def test_encode_errors():
    with pytest.raises(ValueError):
        BasicProperties(priority=256).encode()
    with pytest.raises(ValueError):
        BasicProperties(message_id="x" * 256).encode()


properties = st.builds(
    BasicProperties,
    content_type=st.none() | S.shortstr,
    content_encoding=st.none() | S.shortstr,
    headers=st.none() | S.tables,
    delivery_mode=st.none() | st.integers(0, 255),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | S.shortstr,
    reply_to=st.none() | S.shortstr,
    expiration=st.none() | S.shortstr,
    message_id=st.none() | S.shortstr,
    timestamp=st.none() | st.integers(0, 2**64 - 1),
    message_type=st.none() | S.shortstr,
    user_id=st.none() | S.shortstr,
    app_id=st.none() | S.shortstr,
    cluster_id=st.none() | S.shortstr,
)


@settings(max_examples=150, deadline=None)
@given(properties)
def test_random_properties_round_trip(props):
    back = BasicProperties.decode(props.encode())
    for name in BasicProperties.__slots__:
        assert getattr(back, name) == S.normalize(getattr(props, name)), name


@settings(max_examples=150, deadline=None)
@given(properties)
def test_delivery_mode_read_without_decoding_agrees_with_decode(props):
    from protocol.properties import delivery_mode
    raw = props.encode()
    assert delivery_mode(raw) == BasicProperties.decode(raw).delivery_mode
    assert delivery_mode(memoryview(raw)) == BasicProperties.decode(raw).delivery_mode


def test_delivery_mode_of_a_truncated_list_is_none():
    from protocol.properties import delivery_mode
    raw = BasicProperties(content_type="text/plain", delivery_mode=2).encode()
    assert delivery_mode(raw) == 2
    assert delivery_mode(raw[:-1]) is None and delivery_mode(b"") is None
