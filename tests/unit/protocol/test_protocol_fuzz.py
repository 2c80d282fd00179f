"""Random and mutated bytes into FrameDecoder + CommandAssembler: nothing but AMQPError may
ever escape (no struct.error, UnicodeDecodeError, IndexError, RecursionError, ValueError...),
including when the lazily decoded properties of headers and commands are read."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import (
    PROTOCOL_HEADER,
    AMQPError,
    BasicProperties,
    CommandAssembler,
    FrameDecoder,
    HeaderFrame,
    encode_content,
    encode_frame,
    encode_method,
    encode_publish,
)
from protocol import methods as M

PROPS = BasicProperties(
    content_type="a", headers={"x": [1, {"y": b"z"}, 2.5, None]}, delivery_mode=2, timestamp=5
).encode()

VALID_FRAMES = [
    encode_method(0, M.ConnectionStartOk(client_properties={"p": {"q": [1, "2"]}})),
    encode_method(0, M.ConnectionTuneOk(2047, 131072, 60)),
    encode_method(1, M.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 5})),
    encode_method(1, M.ExchangeDeclare(exchange="e", arguments={"alternate-exchange": "ae"})),
    encode_method(1, M.BasicConsume(queue="q", consumer_tag="c")),
    encode_publish(1, b"e", b"k", False, PROPS, b"hello world" * 3, 16),
    encode_method(1, M.BasicAck(3, True)),
    encode_method(1, M.BasicNack(4, False, True)),
    encode_content(1, 60, PROPS, b"", 4096),
    encode_frame(8, 0, b""),
]


def run(data: bytes, expect_header: bool, chunk: int) -> None:
    dec = FrameDecoder(frame_max=4096, expect_header=expect_header)
    asm = CommandAssembler()
    try:
        for i in range(0, len(data), chunk):
            dec.feed(data[i : i + chunk])
            for frame in dec.frames():
                if type(frame) is HeaderFrame:
                    frame.properties
                command = asm.process(frame) if frame.__class__.__name__ != "ProtocolHeader" else None
                if command is not None and command.properties_raw is not None:
                    command.properties
                    command.method.encode()
    except AMQPError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans(), st.integers(1, 64))
def test_random_bytes(data, expect_header, chunk):
    run(data, expect_header, chunk)


@st.composite
def mutated_streams(draw):
    frames = draw(st.lists(st.sampled_from(VALID_FRAMES), min_size=1, max_size=6))
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "size"]))
        pos = draw(st.integers(0, len(data) - 1)) if data else 0
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and data:
            del data[pos : pos + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "size" and len(data) >= 7:
            # rewrite a frame's size field or a length inside the payload
            at = draw(st.integers(0, max(0, len(data) - 4)))
            data[at : at + 4] = struct.pack(">I", draw(st.integers(0, 2**32 - 1)))
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_streams(), st.booleans(), st.integers(1, 512))
def test_mutated_valid_streams(data, with_header, chunk):
    run(PROTOCOL_HEADER + data if with_header else data, with_header, chunk)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFFFFFF), st.binary(max_size=80))
def test_random_method_payloads(index, args):
    # a well framed method frame with random class/method id (biased to real ones) and args
    for idx in (index, list(M.METHODS)[index % len(M.METHODS)]):
        run(encode_frame(1, 1, struct.pack(">I", idx) + args), False, 4096)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_random_property_lists(raw):
    try:
        BasicProperties.decode(raw)
    except AMQPError:
        pass
    try:
        HeaderFrame(1, 60, 0, raw).properties
    except AMQPError:
        pass


def test_deeply_nested_headers_are_a_502_not_a_recursion_error():
    value = b"V"
    for _ in range(5000):
        value = b"F" + struct.pack(">I", len(value) + 2) + b"\x01k" + value
    table = value[1:]  # the outer table, without its type octet
    raw = b"\x20\x00" + table
    try:
        BasicProperties.decode(raw)
    except AMQPError as exc:
        assert exc.reply_code == 502
    else:  # pragma: no cover
        raise AssertionError("accepted 5000 nested tables")
