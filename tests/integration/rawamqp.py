"""A tiny blocking raw-socket AMQP 0-9-1 client for tests that need to see individual frames.

Frames are split with struct here and method/header payloads are built and read with pamqp (used
only as a test tool, independent from Leveret's own codec).  The client never sends anything on
its own (no heartbeats), which is what the heartbeat and malformed-input tests need.
"""
from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

from pamqp import commands, header
from pamqp import frame as pframe

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"

DEFAULT_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}


CONNECTION_CLOSE = commands.Connection.Close.index
CHANNEL_CLOSE = commands.Channel.Close.index


class Closed(Exception):
    """The server closed the TCP connection (EOF or reset)."""


class Timeout(Exception):
    """No complete frame arrived in time."""


@dataclass
class RawHeader:
    """A protocol header received from the server (E1)."""

    data: bytes


@dataclass
class UnknownFrame:
    type: int
    channel: int
    payload: bytes


@dataclass
class Heartbeat:
    channel: int = 0


@dataclass
class Content:
    """A content-carrying method (deliver/get-ok/return) with its header and body assembled."""

    channel: int
    method: object
    properties: commands.Basic.Properties
    body: bytes
    body_frames: list = field(default_factory=list)  # sizes of the body frames as received
    header_payload: bytes = b""  # the content header frame's payload as it came on the wire


def frame(frame_type: int, channel: int, payload: bytes, end: int = FRAME_END) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([end])


def method_frame(channel: int, method) -> bytes:
    return pframe.marshal(method, channel)


def method_payload(method) -> bytes:
    return struct.pack(">I", method.index) + method.marshal()


def content_frames(channel: int, body: bytes, properties=None, frame_max: int = 131072) -> bytes:
    props = properties or commands.Basic.Properties()
    out = [pframe.marshal(header.ContentHeader(0, len(body), props), channel)]
    chunk = frame_max - 8
    for i in range(0, len(body), chunk):
        out.append(frame(FRAME_BODY, channel, body[i:i + chunk]))
    return b"".join(out)


def typed_value(buf: bytes, pos: int) -> tuple[tuple, int]:
    """((type char, value), next position) for the field value at pos, as RabbitMQ's
    rabbit_binary_parser keeps it: the wire type with the value (tables and arrays nested the
    same way, longstr as bytes), so tests can check types that pamqp and pika normalise."""
    t = chr(buf[pos])
    pos += 1
    fixed = {"b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I", "l": ">q",
             "L": ">q", "f": ">f", "d": ">d", "T": ">Q"}
    if t in fixed:
        (v,) = struct.unpack_from(fixed[t], buf, pos)
        return (t, v), pos + struct.calcsize(fixed[t])
    if t == "t":
        return (t, buf[pos] != 0), pos + 1
    if t == "V":
        return (t, None), pos
    if t == "D":
        return (t, struct.unpack_from(">BI", buf, pos)), pos + 5
    (n,) = struct.unpack_from(">I", buf, pos)
    raw, end = buf[pos + 4:pos + 4 + n], pos + 4 + n
    if t in "Sx":
        return (t, raw), end
    if t == "F":
        return (t, typed_table(raw)), end
    if t == "A":
        out, p = [], 0
        while p < len(raw):
            v, p = typed_value(raw, p)
            out.append(v)
        return (t, out), end
    raise ValueError(f"unknown field type {t!r}")


def typed_table(raw: bytes) -> list:
    """A field table's body (without its length) as [(key, type char, value), ...] in wire
    order."""
    out, pos = [], 0
    while pos < len(raw):
        n = raw[pos]
        key = raw[pos + 1:pos + 1 + n].decode()
        (t, v), pos = typed_value(raw, pos + 1 + n)
        out.append((key, t, v))
    return out


def content_headers(header_payload: bytes) -> list:
    """The headers property of a content header frame's payload, typed (typed_table), or []."""
    (flags,) = struct.unpack_from(">H", header_payload, 12)
    pos = 14
    for bit in (15, 14):  # content-type, content-encoding: short strings before headers
        if flags & (1 << bit):
            pos += 1 + header_payload[pos]
    if not flags & (1 << 13):
        return []
    (n,) = struct.unpack_from(">I", header_payload, pos)
    return typed_table(header_payload[pos + 4:pos + 4 + n])


def content_header_frame(channel: int, body_size: int, headers_table: bytes) -> bytes:
    """A basic content header frame carrying only the headers property, given as an encoded
    table body (without its length), so a test can send field types no client library picks."""
    payload = struct.pack(">HHQHI", 60, 0, body_size, 1 << 13, len(headers_table)) + headers_table
    return frame(FRAME_HEADER, channel, payload)


def plain_response(user: str, password: str) -> str:
    return f"\x00{user}\x00{password}"


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.default_timeout = timeout
        self.frame_max = 131072
        self.start = None
        self.tune = None
        self.eof = False

    # -- low level -------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method) -> None:
        self.send(method_frame(channel, method))

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes,
                properties=None, mandatory: bool = False) -> None:
        self.send(method_frame(channel, commands.Basic.Publish(
            exchange=exchange, routing_key=routing_key, mandatory=mandatory))
            + content_frames(channel, body, properties, self.frame_max))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout()
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            raise Timeout() from None
        except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as e:
            self.eof = True
            raise Closed(str(e)) from None
        if not data:
            self.eof = True
            raise Closed("EOF")
        self.buf += data

    def read_raw(self, n: int, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (timeout or self.default_timeout)
        while len(self.buf) < n:
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self, timeout: float | None = None):
        """Next frame as (channel, object): a pamqp method, ContentHeader, bytes (body), Heartbeat,
        RawHeader or UnknownFrame."""
        deadline = time.monotonic() + (self.default_timeout if timeout is None else timeout)
        while True:
            if len(self.buf) >= 8 and self.buf[:4] == b"AMQP":
                hdr, self.buf = self.buf[:8], self.buf[8:]
                return 0, RawHeader(hdr)
            if len(self.buf) >= 7:
                ftype, channel, size = struct.unpack(">BHI", self.buf[:7])
                if len(self.buf) >= 8 + size:
                    payload = self.buf[7:7 + size]
                    end = self.buf[7 + size]
                    self.buf = self.buf[8 + size:]
                    if end != FRAME_END:
                        raise AssertionError(f"server sent a bad frame end {end:#x}")
                    return channel, self._decode(ftype, channel, payload)
            self._fill(deadline)

    @staticmethod
    def _decode(ftype: int, channel: int, payload: bytes):
        if ftype == FRAME_METHOD:
            index = struct.unpack(">I", payload[:4])[0]
            m = commands.INDEX_MAPPING[index]()
            try:
                m.unmarshal(payload[4:])
            except UnicodeDecodeError:
                if index not in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                    raise
                # RabbitMQ quotes the offending octets in reply_text, which need not be UTF-8
                code, n = struct.unpack(">HB", payload[4:7])
                text = payload[7:7 + n].decode("utf-8", errors="replace")
                cls, meth = struct.unpack(">HH", payload[7 + n:11 + n])
                m = commands.INDEX_MAPPING[index](reply_code=code, reply_text=text,
                                                  class_id=cls, method_id=meth)
            return m
        if ftype == FRAME_HEADER:
            h = header.ContentHeader()
            h.unmarshal(payload)
            h.raw_payload = bytes(payload)  # pamqp normalises field types; tests read the wire
            return h
        if ftype == FRAME_BODY:
            return bytes(payload)
        if ftype == FRAME_HEARTBEAT:
            return Heartbeat(channel)
        return UnknownFrame(ftype, channel, payload)

    def read_until_closed(self, timeout: float | None = None) -> list:
        """Read frames until EOF; returns every frame seen. Raises Timeout when the socket stays
        open past the deadline."""
        deadline = time.monotonic() + (self.default_timeout if timeout is None else timeout)
        frames = []
        while True:
            try:
                frames.append(self.read_frame(timeout=max(0.0, deadline - time.monotonic()) or 0.001))
            except Closed:
                return frames

    def expect(self, cls, channel: int | None = None, timeout: float | None = None,
               skip_heartbeats: bool = True):
        """Read the next (non-heartbeat) frame and check it is an instance of cls."""
        while True:
            ch, f = self.read_frame(timeout)
            if skip_heartbeats and isinstance(f, Heartbeat):
                continue
            if not isinstance(f, cls):
                why = f" {f.reply_code} {f.reply_text!r}" if hasattr(f, "reply_code") else ""
                raise AssertionError(f"expected {cls.__name__}, got {f!r}{why} on channel {ch}")
            if channel is not None:
                assert ch == channel, f"expected channel {channel}, got {ch} for {f!r}"
            return f

    def read_command(self, timeout: float | None = None):
        """Next method with its content assembled (Content) when it carries one."""
        while True:
            ch, f = self.read_frame(timeout)
            if isinstance(f, Heartbeat):
                continue
            if isinstance(f, (commands.Basic.Deliver, commands.Basic.GetOk, commands.Basic.Return)):
                _, h = self.read_frame(timeout)
                assert isinstance(h, header.ContentHeader), h
                parts, sizes = [], []
                got = 0
                while got < h.body_size:
                    _, b = self.read_frame(timeout)
                    assert isinstance(b, bytes), b
                    parts.append(b)
                    sizes.append(len(b))
                    got += len(b)
                return Content(ch, f, h.properties, b"".join(parts), sizes, h.raw_payload)
            return ch, f

    # -- handshake -------------------------------------------------------------------------------
    def handshake(self, user="guest", password="guest", vhost="/", heartbeat=0,
                  frame_max=131072, channel_max=2047, mechanism="PLAIN", response=None,
                  capabilities=None, open_vhost=True):
        self.send(PROTOCOL_HEADER)
        self.start = self.expect(commands.Connection.Start, channel=0)
        props = {"product": "leveret-tests-rawamqp",
                 "capabilities": dict(DEFAULT_CAPABILITIES if capabilities is None else capabilities)}
        self.send_method(0, commands.Connection.StartOk(
            client_properties=props, mechanism=mechanism,
            response=plain_response(user, password) if response is None else response))
        self.tune = self.expect(commands.Connection.Tune, channel=0)
        self.frame_max = frame_max
        self.send_method(0, commands.Connection.TuneOk(
            channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat))
        if open_vhost:
            self.send_method(0, commands.Connection.Open(virtual_host=vhost))
            self.expect(commands.Connection.OpenOk, channel=0)
        return self

    def open_channel(self, channel: int = 1) -> None:
        self.send_method(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk, channel=channel)

    def rpc(self, channel: int, method, reply_cls, timeout: float | None = None):
        self.send_method(channel, method)
        return self.expect(reply_cls, channel=channel, timeout=timeout)

    def expect_connection_close(self, timeout: float | None = None, reply_close_ok=True):
        """Skip frames until connection.close (channel 0); returns it. Raises AssertionError on EOF
        without it."""
        deadline = time.monotonic() + (self.default_timeout if timeout is None else timeout)
        seen = []
        while True:
            try:
                ch, f = self.read_frame(timeout=max(0.001, deadline - time.monotonic()))
            except Closed:
                raise AssertionError(f"connection closed without connection.close; saw {seen!r}")
            seen.append(f)
            if isinstance(f, commands.Connection.Close):
                assert ch == 0, f"connection.close on channel {ch}"
                if reply_close_ok:
                    try:
                        self.send_method(0, commands.Connection.CloseOk())
                    except OSError:
                        pass
                return f

    def expect_channel_close(self, channel: int, timeout: float | None = None):
        deadline = time.monotonic() + (self.default_timeout if timeout is None else timeout)
        while True:
            ch, f = self.read_frame(timeout=max(0.001, deadline - time.monotonic()))
            if isinstance(f, commands.Channel.Close) and ch == channel:
                self.send_method(channel, commands.Channel.CloseOk())
                return f
            if isinstance(f, commands.Connection.Close):
                raise AssertionError(f"expected channel.close, got connection.close {f!r}")
