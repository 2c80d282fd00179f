"""The codec the lean client is written on: Leveret's own (protocol/, docs/protocol-api.md),
gathered in the namespace the client and the benchmark's load generator use:

* ``methods``: protocol.methods (``BasicDeliver``, ...)
* ``encode_method(channel, method) -> bytes``
* ``encode_publish(channel, exchange, routing_key, mandatory, properties_raw, body, frame_max)``
* ``encode_deliver(...)`` (the benchmark's self-test plays a broker with it)
* ``encode_ack(channel, delivery_tag, multiple) -> bytes``
* ``FrameDecoder(frame_max, expect_header)`` with ``feed(data)`` and ``frames()``
* ``CommandAssembler()`` with ``process(frame) -> None | Command``
* ``properties_raw(delivery_mode=None, priority=None) -> bytes``
* ``NAME``: "protocol"
"""
from __future__ import annotations

import types

from protocol import frames as fr
from protocol import methods, properties

__all__ = ["load"]

_codec: types.SimpleNamespace | None = None


def _properties_raw(delivery_mode=None, priority=None) -> bytes:
    if delivery_mode is None and priority is None:
        return b"\x00\x00"
    return properties.BasicProperties(delivery_mode=delivery_mode, priority=priority).encode()


def load(name: str = "protocol") -> types.SimpleNamespace:
    """The codec namespace; `name` must be "protocol" (the benchmark records it per run)."""
    global _codec
    if name not in ("protocol", "auto"):
        raise ValueError(f"unknown codec {name!r}: the lean client runs on protocol/ only")
    if _codec is None:
        _codec = types.SimpleNamespace(
            NAME="protocol", methods=methods, encode_method=fr.encode_method,
            encode_publish=fr.encode_publish, encode_deliver=fr.encode_deliver,
            encode_ack=fr.encode_ack, FrameDecoder=fr.FrameDecoder,
            CommandAssembler=fr.CommandAssembler, properties_raw=_properties_raw)
    return _codec
