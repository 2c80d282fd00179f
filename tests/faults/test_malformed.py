"""Malformed input fed to the broker over raw sockets (E1, E2), with hypothesis.

Every example uses a fresh TCP connection.  Framing errors have one right answer (connection.close
501 FRAME_ERROR, 504 for a command on an unopened channel, 505 for content frames out of place);
arbitrary garbage may get any connection-level error code, a channel.close, a plain TCP close, or
silence (an incomplete frame keeps the broker waiting for the rest), but never a crash.  Meanwhile a
separate pika connection (the witness) holds a consumer with unacked deliveries; at the end it must
still work and have lost nothing.
"""
from __future__ import annotations

import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

import rawamqp
from amqp_helpers import Consumer, declare, get, publish, safe_close, unique, wait_count

pytestmark = pytest.mark.timeout(120)

ERROR_CODES = {501, 502, 503, 504, 505, 530, 540, 541}
ACCEPTED_HEADERS = {b"AMQP\x00\x00\x09\x01", b"AMQP\x01\x01\x00\x09", b"AMQP\x01\x01\x08\x00",
                    b"AMQP\x01\x01\x09\x01"}   # RabbitMQ also accepts the 0-9 and 0-8 headers
FRAME_MAX = 131072
QUIET = 0.25   # how long "no answer" is waited for

SETTINGS = settings(max_examples=50, deadline=None, database=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
SMALL = settings(SETTINGS, max_examples=30)

# methods a client may legally send on an open channel, with plausible arguments
CHANNEL_METHODS = [
    commands.Queue.Declare(queue="fuzz-q", auto_delete=True, arguments={"x-message-ttl": 1000}),
    commands.Queue.Bind(queue="fuzz-q", exchange="amq.direct", routing_key="k"),
    commands.Queue.Purge(queue="fuzz-q"),
    commands.Exchange.Declare(exchange="fuzz-x", exchange_type="topic", auto_delete=True),
    commands.Basic.Qos(prefetch_count=5),
    commands.Basic.Consume(queue="fuzz-q", consumer_tag="ctag"),
    commands.Basic.Get(queue="fuzz-q"),
    commands.Basic.Ack(delivery_tag=1),
    commands.Basic.Nack(delivery_tag=1, requeue=True),
    commands.Basic.Reject(delivery_tag=1),
    commands.Basic.Cancel(consumer_tag="ctag"),
    commands.Basic.Recover(requeue=True),
    commands.Tx.Select(),
    commands.Confirm.Select(),
]
CHANNEL_METHODS_WITH_ARGS = [m for m in CHANNEL_METHODS if m.marshal()]


# -- helpers -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def witness(broker):
    """A consumer holding five unacked deliveries on its own connection for the whole module."""
    conn = broker.connection(heartbeat=0)
    ch = conn.channel()
    q = declare(ch, unique("witness"))
    publish(ch, q, [f"w{i}".encode() for i in range(5)])
    ch.basic_qos(prefetch_count=10)
    cons = Consumer(conn, ch, q)
    cons.wait_for(5)
    yield conn, ch, q, cons
    safe_close(conn)


def _connect(broker, handshake: bool = True, open_channel: bool = True) -> rawamqp.RawClient:
    c = rawamqp.RawClient(broker.host, broker.port, timeout=5)
    if handshake:
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost,
                    frame_max=FRAME_MAX)
        if open_channel:
            c.open_channel(1)
    return c


def _outcome(c: rawamqp.RawClient, quiet: float = QUIET, overall: float = 5.0):
    """What the server did after our input: ('close', code) | ('channel_close', code) | ('eof',)
    | ('silent', frames)."""
    frames = []
    deadline = time.monotonic() + overall
    while True:
        try:
            ch, f = c.read_frame(timeout=min(quiet, max(0.001, deadline - time.monotonic())))
        except rawamqp.Closed:
            return ("eof",)
        except rawamqp.Timeout:
            return ("silent", frames)
        except Exception as e:  # noqa: BLE001 - a frame the test client cannot decode
            return ("undecodable", repr(e))
        if isinstance(f, commands.Connection.Close):
            return ("close", f.reply_code, f.reply_text)
        if isinstance(f, commands.Channel.Close):
            return ("channel_close", f.reply_code, f.reply_text)
        frames.append(f)


def _expect_close(c: rawamqp.RawClient, codes: set[int]):
    out = _outcome(c, quiet=5.0)
    assert out[0] == "close" and out[1] in codes, f"expected connection.close {codes}, got {out}"


def _assert_alive(broker):
    assert broker.alive(), f"broker died\n{broker.log_tail()}"


def _acceptable(out) -> bool:
    if out[0] == "close":
        return out[1] in ERROR_CODES
    return out[0] in ("eof", "silent", "channel_close")


# -- E1: before the handshake ---------------------------------------------------------------------
@SETTINGS
@given(data=st.binary(min_size=8, max_size=64).filter(lambda d: d[:8] not in ACCEPTED_HEADERS))
def test_random_bytes_instead_of_protocol_header__E1(broker, witness, data):
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(data)
        got = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(64)
            except (ConnectionResetError, BrokenPipeError):
                break
            if not chunk:
                break
            got += chunk
        else:
            pytest.fail(f"server kept the connection open after {data!r}; got {got!r}")
    assert got == b"AMQP\x00\x00\x09\x01", (data, got)


@SMALL
@given(data=st.binary(min_size=1, max_size=64))
def test_garbage_instead_of_start_ok__E2(broker, witness, data):
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        c.send(data)
        out = _outcome(c)
        assert _acceptable(out) or (out[0] == "close" and out[1] in (403,)), out
        if out[0] == "silent":
            assert not any(isinstance(f, commands.Connection.Tune) for f in out[1]), out
    finally:
        c.close()
    _assert_alive(broker)


# -- E2: framing errors after the handshake ---------------------------------------------------------
@SETTINGS
@given(ftype=st.sampled_from([1, 2, 3, 8]) | st.integers(0, 255),
       channel=st.sampled_from([0, 1, 2]) | st.integers(0, 65535),
       payload=st.binary(max_size=64),
       end=st.integers(0, 255).filter(lambda b: b != 0xCE))
def test_bad_frame_end__E2(broker, witness, ftype, channel, payload, end):
    c = _connect(broker)
    try:
        c.send(rawamqp.frame(ftype, channel, payload, end=end))
        _expect_close(c, {501})
    finally:
        c.close()


@SETTINGS
@given(ftype=st.integers(0, 255).filter(lambda t: t not in (1, 2, 3, 8)),
       channel=st.sampled_from([0, 1, 2]) | st.integers(0, 65535),
       payload=st.binary(max_size=64))
def test_unknown_frame_type__E2(broker, witness, ftype, channel, payload):
    c = _connect(broker)
    try:
        c.send(rawamqp.frame(ftype, channel, payload))
        _expect_close(c, {501})
    finally:
        c.close()


@SETTINGS
@given(ftype=st.sampled_from([1, 2, 3, 8]) | st.integers(0, 255),
       channel=st.integers(0, 65535),
       size=st.integers(FRAME_MAX + 1, 2 ** 32 - 1))
def test_frame_larger_than_frame_max__E2(broker, witness, ftype, channel, size):
    c = _connect(broker)
    try:
        c.send(struct.pack(">BHI", ftype, channel, size) + b"\x00" * 16)
        _expect_close(c, {501})
    finally:
        c.close()


@SETTINGS
@given(ftype=st.sampled_from([2, 3]), channel=st.sampled_from([0, 1, 2, 100]),
       body=st.binary(max_size=32))
def test_content_frame_out_of_place__E2(broker, witness, ftype, channel, body):
    """A well-formed content header or a body frame where no content is expected: 505."""
    if ftype == 2:
        payload = struct.pack(">HHQ", 60, 0, len(body)) + b"\x00\x00"
    else:
        payload = body
    c = _connect(broker)
    try:
        c.send(rawamqp.frame(ftype, channel, payload))
        _expect_close(c, {505})
    finally:
        c.close()


@SETTINGS
@given(method=st.sampled_from(CHANNEL_METHODS), channel=st.integers(2, 2047))
def test_method_on_unopened_channel__E2(broker, witness, method, channel):
    c = _connect(broker)
    try:
        c.send_method(channel, method)
        _expect_close(c, {504})
    finally:
        c.close()


@SETTINGS
@given(method=st.sampled_from(CHANNEL_METHODS_WITH_ARGS), data=st.data())
def test_truncated_or_padded_method_arguments__E2(broker, witness, method, data):
    """RabbitMQ: 501 "cannot decode"; BEHAVIOUR.md says 502 SYNTAX_ERROR: both accepted."""
    payload = rawamqp.method_payload(method)
    if data.draw(st.booleans(), label="truncate"):
        cut = data.draw(st.integers(4, len(payload) - 1), label="cut")
        payload = payload[:cut]
    else:
        payload += data.draw(st.binary(min_size=1, max_size=16), label="junk")
    c = _connect(broker)
    try:
        c.send(rawamqp.frame(rawamqp.FRAME_METHOD, 1, payload))
        _expect_close(c, {501, 502})
    finally:
        c.close()


@SMALL
@given(data=st.binary(min_size=1, max_size=300))
def test_random_bytes_after_handshake__E2(broker, witness, data):
    c = _connect(broker)
    try:
        c.send(data)
        out = _outcome(c)
        if len(data) >= 7 and struct.unpack(">I", data[3:7])[0] > FRAME_MAX:
            assert out[0] == "close" and out[1] == 501, out
        elif len(data) >= 8 and data[7 + struct.unpack(">I", data[3:7])[0]:][:1] not in (b"", b"\xce"):
            assert out[0] == "close" and out[1] == 501, out
        else:
            assert _acceptable(out), out
    finally:
        c.close()
    _assert_alive(broker)


def _valid_stream(q: str) -> list[bytes]:
    """A valid client stream as a list of frames: declare, publish with content, get, ack."""
    return [
        rawamqp.method_frame(1, commands.Queue.Declare(queue=q, exclusive=True)),
        rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=q)),
        rawamqp.content_frames(1, b"payload-" * 4, commands.Basic.Properties(
            content_type="text/plain", headers={"k": "v", "n": 1}, delivery_mode=2)),
        rawamqp.method_frame(1, commands.Basic.Get(queue=q)),
        rawamqp.method_frame(1, commands.Basic.Ack(delivery_tag=1)),
    ]


@SMALL
@given(data=st.data())
def test_mutated_valid_frame_stream__E2(broker, witness, data):
    q = unique("fuzz")
    stream = bytearray(b"".join(_valid_stream(q)))
    kind = data.draw(st.sampled_from(["flip", "delete", "insert", "truncate"]), label="kind")
    pos = data.draw(st.integers(0, len(stream) - 1), label="pos")
    if kind == "flip":
        stream[pos] ^= data.draw(st.integers(1, 255), label="xor")
    elif kind == "delete":
        del stream[pos:pos + data.draw(st.integers(1, 8), label="n")]
    elif kind == "insert":
        stream[pos:pos] = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
    else:
        del stream[pos:]
    c = _connect(broker)
    try:
        c.send(bytes(stream))
        out = _outcome(c)
        assert _acceptable(out) or out[0] == "undecodable", out
    finally:
        c.close()
    _assert_alive(broker)


@SMALL
@given(data=st.data())
def test_mutated_handshake__E2(broker, witness, data):
    start_ok = rawamqp.method_frame(0, commands.Connection.StartOk(
        client_properties={"product": "fuzz", "capabilities": {"authentication_failure_close": True}},
        mechanism="PLAIN", response=rawamqp.plain_response(broker.user, broker.password)))
    tune_ok = rawamqp.method_frame(0, commands.Connection.TuneOk(channel_max=2047,
                                                                 frame_max=FRAME_MAX, heartbeat=0))
    open_ = rawamqp.method_frame(0, commands.Connection.Open(virtual_host=broker.vhost))
    stream = bytearray(start_ok + tune_ok + open_)
    pos = data.draw(st.integers(0, len(stream) - 1), label="pos")
    stream[pos] ^= data.draw(st.integers(1, 255), label="xor")
    c = rawamqp.RawClient(broker.host, broker.port)
    try:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        c.send(bytes(stream))
        out = _outcome(c)
        ok = _acceptable(out) or out[0] == "undecodable" or \
            (out[0] == "close" and out[1] in (403, 530))
        assert ok, out
    finally:
        c.close()
    _assert_alive(broker)


# -- the witness ---------------------------------------------------------------------------------
def test_witness_connection_kept_working_and_lost_nothing(broker, witness):
    """Runs last in this module: the consumer connection that lived through all the garbage above
    still has its five unacked deliveries (never redelivered), and works normally."""
    conn, ch, q, cons = witness
    cons.settle(0.2)
    assert conn.is_open and ch.is_open
    assert [d.body for d in cons.deliveries] == [f"w{i}".encode() for i in range(5)]
    assert not any(d.redelivered for d in cons.deliveries)
    ch.basic_ack(cons.deliveries[-1].delivery_tag, multiple=True)
    publish(ch, q, [b"after"])
    cons.wait_for(6)
    assert cons.deliveries[5].body == b"after" and not cons.deliveries[5].redelivered
    ch.basic_ack(cons.deliveries[5].delivery_tag)
    ch.basic_cancel(cons.tag)
    wait_count(conn, q, 0)
    assert get(ch, q) is None
    ch.queue_delete(q)
    _assert_alive(broker)
