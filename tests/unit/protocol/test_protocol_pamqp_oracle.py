"""pamqp 4.0.1 as the oracle: encode with Leveret and decode with pamqp, and the reverse
(pamqp.frame.marshal -> Leveret's FrameDecoder), for every method class, random property
sets and random field tables.

The generated values are the subset on which RabbitMQ, Leveret and pamqp agree; the reason
for each restriction is in protocol_strategies.py (decimals below 2**31, timestamps at most
0xFFFFFFFF, 64-bit method fields below 2**63, text long strings).  Where the two encoders
make different but valid choices (pamqp writes floats as 'f', Leveret as 'd'), the reverse
direction compares both decoders on the same bytes instead of comparing with the input.

pamqp validates some arguments against its own policy before marshalling (ticket must be 0,
exchange names must match a regex, capabilities must be empty, cluster_id must be empty...).
That is not wire format, so the reverse direction marshals through a subclass whose
``validate()`` does nothing.
"""

from __future__ import annotations

import datetime
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands as pc
from pamqp import frame as pframe
from pamqp import header as pheader

from protocol import (
    BasicProperties,
    BodyFrame,
    CommandAssembler,
    FrameDecoder,
    HeaderFrame,
    MethodFrame,
    encode_content,
    encode_deliver,
    encode_method,
    encode_publish,
    fields,
)
from protocol import methods as M

sys.path.insert(0, os.path.dirname(__file__))
import protocol_strategies as S  # noqa: E402

SHARED = [cls for idx, cls in sorted(M.METHODS.items()) if idx in pc.INDEX_MAPPING]
IDS = [cls.NAME for cls in SHARED]
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

_unvalidated: dict = {}


def unvalidated(pamqp_cls):
    """pamqp_cls without its argument policy (see the module docstring)."""
    sub = _unvalidated.get(pamqp_cls)
    if sub is None:
        # no __slots__ here: pamqp's marshal() walks self.__slots__, which must stay the parent's
        sub = type(pamqp_cls.__name__, (pamqp_cls,), {"validate": lambda self: None})
        _unvalidated[pamqp_cls] = sub
    return sub


def decode_ours(raw: bytes) -> list:
    dec = FrameDecoder(frame_max=0, expect_header=False)
    dec.feed(raw)
    return dec.frames()


def pamqp_unmarshal_all(raw: bytes) -> list:
    out = []
    while raw:
        consumed, channel, frame = pframe.unmarshal(raw)
        out.append((channel, frame))
        raw = raw[consumed:]
    return out


@pytest.mark.parametrize("cls", SHARED, ids=IDS)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pamqp warns on basic.recover-async
@settings(max_examples=15, deadline=None)
@given(data=st.data(), channel=st.integers(0, 65535))
def test_leveret_encodes_pamqp_decodes(cls, data, channel):
    kwargs = data.draw(S.method_kwargs(cls, S.ORACLE_FIELD_STRATEGIES))
    raw = encode_method(channel, cls(**kwargs))
    consumed, got_channel, theirs = pframe.unmarshal(raw)
    assert (consumed, got_channel, theirs.index) == (len(raw), channel, cls.INDEX)
    for name, value in kwargs.items():
        assert S.normalize(getattr(theirs, name)) == S.normalize(value), name


@pytest.mark.parametrize("cls", SHARED, ids=IDS)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pamqp warns on basic.recover-async
@settings(max_examples=15, deadline=None)
@given(data=st.data(), channel=st.integers(0, 65535))
def test_pamqp_encodes_leveret_decodes(cls, data, channel):
    kwargs = data.draw(S.method_kwargs(cls, S.ORACLE_FIELD_STRATEGIES))
    pamqp_cls = unvalidated(pc.INDEX_MAPPING[cls.INDEX])
    theirs = pamqp_cls(**{k: S.for_pamqp(v) for k, v in kwargs.items()})
    raw = pframe.marshal(theirs, channel)
    (frame,) = decode_ours(raw)
    assert type(frame) is MethodFrame and frame.channel == channel
    assert type(frame.method) is cls
    _, _, reread = pframe.unmarshal(raw)
    for name in cls.FIELDS:
        assert getattr(frame.method, name) == S.normalize(getattr(reread, name)), name
    # and our encoder reproduces pamqp's bytes exactly when no float is involved
    if not S.has_float(kwargs):
        assert encode_method(channel, frame.method) == raw


oracle_props = st.fixed_dictionaries(
    {},
    optional={
        "content_type": S.shortstr.filter(bool),
        "content_encoding": S.shortstr.filter(bool),
        "headers": S.oracle_tables.filter(bool),
        "delivery_mode": st.sampled_from([1, 2]),
        "priority": st.integers(0, 255),
        "correlation_id": S.shortstr.filter(bool),
        "reply_to": S.shortstr.filter(bool),
        "expiration": S.shortstr.filter(bool),
        "message_id": S.shortstr.filter(bool),
        "timestamp": st.integers(0, 0xFFFFFFFF),
        "message_type": S.shortstr.filter(bool),
        "user_id": S.shortstr.filter(bool),
        "app_id": S.shortstr.filter(bool),
        "cluster_id": S.shortstr.filter(bool),
    },
)


def pamqp_props(kwargs: dict):
    conv = dict(kwargs)
    if "timestamp" in conv:
        conv["timestamp"] = EPOCH + datetime.timedelta(seconds=conv["timestamp"])
    if "headers" in conv:
        conv["headers"] = S.for_pamqp(conv["headers"])
    return unvalidated(pc.Basic.Properties)(**conv)


def props_from_pamqp(theirs) -> dict:
    out = {}
    for name in BasicProperties.__slots__:
        value = getattr(theirs, name)
        if value is None or value == "":
            continue
        if name == "timestamp":
            value = int(value.timestamp())
        out[name] = S.normalize(value)
    return out


@settings(max_examples=120, deadline=None)
@given(oracle_props, st.binary(max_size=300), st.integers(1, 65535))
def test_properties_and_content_leveret_to_pamqp(kwargs, body, channel):
    props = BasicProperties(**kwargs)
    raw = encode_content(channel, 60, props.encode(), body, 4096)
    frames = pamqp_unmarshal_all(raw)
    header = frames[0][1]
    assert isinstance(header, pheader.ContentHeader)
    assert (frames[0][0], header.class_id, header.body_size) == (channel, 60, len(body))
    assert props_from_pamqp(header.properties) == S.normalize(kwargs)
    assert b"".join(f.value for _, f in frames[1:]) == body


@settings(max_examples=120, deadline=None)
@given(oracle_props, st.binary(max_size=300), st.integers(1, 65535))
def test_properties_and_content_pamqp_to_leveret(kwargs, body, channel):
    theirs = pamqp_props(kwargs)
    raw = (
        pframe.marshal(pc.Basic.Publish(exchange="x", routing_key="k"), channel)
        + pframe.marshal(pheader.ContentHeader(0, len(body), theirs), channel)
        + (pframe.marshal(pbody.ContentBody(body), channel) if body else b"")
    )
    frames = decode_ours(raw)
    assert type(frames[1]) is HeaderFrame and frames[1].body_size == len(body)
    asm = CommandAssembler()
    (command,) = [c for f in frames if (c := asm.process(f)) is not None]
    assert command.body == body
    reread = pamqp_unmarshal_all(raw)[1][1].properties
    assert command.properties.as_dict() == props_from_pamqp(reread)


@settings(max_examples=150, deadline=None)
@given(S.oracle_tables)
def test_tables_leveret_to_pamqp(table):
    from pamqp import decode as pdecode

    raw = fields.encode_table(table)
    consumed, theirs = pdecode.field_table(raw)
    assert consumed == len(raw)
    assert S.normalize(theirs) == S.normalize(table)


@settings(max_examples=150, deadline=None)
@given(S.oracle_tables)
def test_tables_pamqp_to_leveret(table):
    from pamqp import decode as pdecode
    from pamqp import encode as pencode

    raw = pencode.field_table(S.for_pamqp(table))
    ours, offset = fields.decode_table(raw)
    assert offset == len(raw)
    _, theirs = pdecode.field_table(raw)
    assert ours == S.normalize(theirs)
    # and the bytes mean the input, once pamqp's float32 rounding is applied
    if not S.has_float(table):
        assert ours == S.normalize(table)


@settings(max_examples=60, deadline=None)
@given(
    st.text(max_size=20),
    st.integers(0, 2**63 - 1),
    st.booleans(),
    st.text(max_size=20),
    st.text(max_size=20),
    st.binary(max_size=500),
)
def test_hot_path_frames_decode_in_pamqp(tag, dtag, redelivered, exchange, rk, body):
    raw = encode_deliver(1, tag.encode(), dtag, redelivered, exchange.encode(), rk.encode(),
                         b"\x00\x00", body, 128)
    frames = pamqp_unmarshal_all(raw)
    deliver = frames[0][1]
    assert isinstance(deliver, pc.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered,
            deliver.exchange, deliver.routing_key) == (tag, dtag, redelivered, exchange, rk)
    assert b"".join(f.value for _, f in frames[2:]) == body
    assert all(len(f.value) <= 120 for _, f in frames[2:])
    raw = encode_publish(3, exchange.encode(), rk.encode(), redelivered, b"\x00\x00", body)
    publish = pamqp_unmarshal_all(raw)[0][1]
    assert (publish.exchange, publish.routing_key, publish.mandatory) == (exchange, rk,
                                                                          redelivered)


def test_pamqp_body_frames_decode():
    raw = pframe.marshal(pbody.ContentBody(b"abc"), 4)
    assert decode_ours(raw) == [BodyFrame(4, b"abc")]
