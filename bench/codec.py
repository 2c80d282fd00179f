"""The codec the lean client is written on.

``load("protocol")`` returns Leveret's own codec (``protocol/``, see docs/protocol-api.md);
``load("pamqp")`` returns a small adapter with the same subset of that API built on pamqp (used
to cross-check the lean client, and as a stand-in while ``protocol/`` is missing or broken);
``load("auto")`` prefers ``protocol``.

The subset the lean client uses:

* ``methods``: a namespace of method classes named as in protocol.methods (``BasicDeliver``..)
* ``encode_method(channel, method) -> bytes``
* ``encode_publish(channel, exchange, routing_key, mandatory, properties_raw, body, frame_max)``
* ``encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key,
  properties_raw, body, frame_max)`` (only the self-test's fake broker uses it)
* ``encode_ack(channel, delivery_tag, multiple) -> bytes``
* ``FrameDecoder(frame_max, expect_header)`` with ``feed(data)`` and ``frames()``
* ``CommandAssembler()`` with ``process(frame) -> None | Command`` (``.channel``, ``.method``,
  ``.properties_raw``, ``.body``)
* ``properties_raw(delivery_mode=None) -> bytes``
* ``NAME``: "protocol" or "pamqp"
"""
from __future__ import annotations

import struct
import types

_cache: dict[str, types.SimpleNamespace] = {}


class CodecUnavailable(ImportError):
    pass


def load(name: str = "auto") -> types.SimpleNamespace:
    if name in _cache:
        return _cache[name]
    if name == "auto":
        try:
            c = load("protocol")
        except CodecUnavailable:
            c = load("pamqp")
        _cache["auto"] = c
        return c
    if name == "protocol":
        c = _load_protocol()
    elif name == "pamqp":
        c = _load_pamqp()
    else:
        raise ValueError(f"unknown codec {name!r} (protocol, pamqp or auto)")
    _cache[name] = c
    return c


def _load_protocol() -> types.SimpleNamespace:
    try:
        import protocol
        from protocol import methods, properties
        from protocol import frames as fr
        needed = [fr.FrameDecoder, fr.CommandAssembler, fr.encode_method, fr.encode_publish,
                  fr.encode_ack, fr.encode_deliver, properties.BasicProperties,
                  methods.BasicDeliver, methods.ConnectionStartOk]
        del needed
    except (ImportError, AttributeError) as e:
        raise CodecUnavailable(f"protocol/ codec is not usable yet: {e}") from e

    def properties_raw(delivery_mode=None, priority=None) -> bytes:
        if delivery_mode is None and priority is None:
            return b"\x00\x00"
        return properties.BasicProperties(delivery_mode=delivery_mode,
                                          priority=priority).encode()

    return types.SimpleNamespace(
        NAME="protocol",
        methods=methods,
        encode_method=fr.encode_method,
        encode_publish=fr.encode_publish,
        encode_deliver=fr.encode_deliver,
        encode_ack=fr.encode_ack,
        FrameDecoder=fr.FrameDecoder,
        CommandAssembler=fr.CommandAssembler,
        properties_raw=properties_raw,
        module=protocol,
    )


# ---------------------------------------------------------------------------------------------
# pamqp adapter
# ---------------------------------------------------------------------------------------------
_FRAME_HDR = struct.Struct(">BHI")
_FRAME_END = b"\xce"


def _load_pamqp() -> types.SimpleNamespace:
    try:
        from pamqp import commands as pc
    except ImportError as e:                      # pragma: no cover
        raise CodecUnavailable(f"pamqp is not installed: {e}") from e

    class _Methods:
        """protocol.methods-style names (BasicDeliver) for pamqp's classes (Basic.Deliver)."""

        def __getattr__(self, name: str):
            for split in range(1, len(name)):
                if name[split].isupper():
                    cls = getattr(pc, name[:split], None)
                    if cls is not None and hasattr(cls, name[split:]):
                        value = getattr(cls, name[split:])
                        setattr(self, name, value)
                        return value
            raise AttributeError(name)

    methods = _Methods()
    index_mapping = pc.INDEX_MAPPING
    content_methods = {pc.Basic.Deliver.index, pc.Basic.GetOk.index, pc.Basic.Return.index,
                       pc.Basic.Publish.index}

    def frame(ftype: int, channel: int, payload: bytes) -> bytes:
        return _FRAME_HDR.pack(ftype, channel, len(payload)) + payload + _FRAME_END

    def encode_method(channel: int, method) -> bytes:
        return frame(1, channel, struct.pack(">I", method.index) + method.marshal())

    def encode_content(channel, class_id, properties_raw, body, frame_max) -> bytes:
        parts = [frame(2, channel, struct.pack(">HHQ", class_id, 0, len(body)) + properties_raw)]
        step = frame_max - 8
        for i in range(0, len(body), step):
            parts.append(frame(3, channel, body[i:i + step]))
        return b"".join(parts)

    def encode_publish(channel, exchange, routing_key, mandatory, properties_raw, body,
                       frame_max=131072) -> bytes:
        m = pc.Basic.Publish(exchange=_s(exchange), routing_key=_s(routing_key),
                             mandatory=bool(mandatory))
        return encode_method(channel, m) + encode_content(channel, 60, properties_raw, body,
                                                          frame_max)

    def encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key,
                       properties_raw, body, frame_max=131072) -> bytes:
        m = pc.Basic.Deliver(consumer_tag=_s(consumer_tag), delivery_tag=delivery_tag,
                             redelivered=redelivered, exchange=_s(exchange),
                             routing_key=_s(routing_key))
        return encode_method(channel, m) + encode_content(channel, 60, properties_raw, body,
                                                          frame_max)

    def encode_ack(channel, delivery_tag, multiple) -> bytes:
        return encode_method(channel, pc.Basic.Ack(delivery_tag=delivery_tag,
                                                   multiple=multiple))

    class FrameDecoder:
        def __init__(self, frame_max=131072, expect_header=True):
            self.buf = bytearray()

        def set_frame_max(self, n):
            pass

        def feed(self, data):
            self.buf += data

        def frames(self):
            out = []
            buf = self.buf
            pos = 0
            n = len(buf)
            while n - pos >= 8:
                ftype, channel, size = _FRAME_HDR.unpack_from(buf, pos)
                end = pos + 7 + size
                if end >= n:
                    break
                if buf[end] != 0xCE:
                    raise ValueError("frame end byte is not 0xCE")
                out.append((ftype, channel, bytes(buf[pos + 7:end])))
                pos = end + 1
            if pos:
                del buf[:pos]
            return out

    class Command:
        __slots__ = ("channel", "method", "properties_raw", "body")

        def __init__(self, channel, method, properties_raw=None, body=None):
            self.channel = channel
            self.method = method
            self.properties_raw = properties_raw
            self.body = body

    class CommandAssembler:
        def __init__(self):
            self.pending: dict[int, list] = {}

        def process(self, fr):
            ftype, channel, payload = fr
            if ftype == 1:
                idx = struct.unpack_from(">I", payload)[0]
                m = index_mapping[idx]()
                m.unmarshal(payload[4:])
                if idx in content_methods:
                    self.pending[channel] = [m, None, 0, []]
                    return None
                return Command(channel, m)
            if ftype == 2:
                p = self.pending[channel]
                p[2] = struct.unpack_from(">Q", payload, 4)[0]
                p[1] = payload[12:]
                if p[2] == 0:
                    del self.pending[channel]
                    return Command(channel, p[0], p[1], b"")
                return None
            if ftype == 3:
                p = self.pending[channel]
                p[3].append(payload)
                p[2] -= len(payload)
                if p[2] <= 0:
                    del self.pending[channel]
                    body = p[3][0] if len(p[3]) == 1 else b"".join(p[3])
                    return Command(channel, p[0], p[1], body)
                return None
            return None                               # heartbeat

    def properties_raw(delivery_mode=None, priority=None) -> bytes:
        flags, values = 0, b""
        if delivery_mode is not None:
            flags, values = 0x1000, bytes([delivery_mode])   # flag bit 12: delivery-mode
        if priority is not None:
            flags, values = flags | 0x0800, values + bytes([priority])   # bit 11: priority
        return flags.to_bytes(2, "big") + values

    return types.SimpleNamespace(
        NAME="pamqp",
        methods=methods,
        encode_method=encode_method,
        encode_publish=encode_publish,
        encode_deliver=encode_deliver,
        encode_ack=encode_ack,
        FrameDecoder=FrameDecoder,
        CommandAssembler=CommandAssembler,
        properties_raw=properties_raw,
        module=None,
    )


def _s(v) -> str:
    return v.decode() if isinstance(v, (bytes, bytearray)) else v
