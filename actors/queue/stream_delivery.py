"""A stream's message as every consumer is sent it: its Delivery fields after the consumer tag,
encoded (messages.delivery_tail), with the ``x-stream-offset`` header in its properties.

Setting the header parses the properties (actors/core/stream.with_offset_header), a quarter of
a replaying queue worker's time; yet the messages of a stream mostly share their exchange,
routing key and properties, and the header's value is a long of fixed width. So the encoding
of a message that shares them with one seen lately is a template with the offset spliced in
twice (the seq_id, the header's eight bytes). A template is used once it gave the bytes the
full encoding gives for a second offset; properties that differ per message (a message id, a
timestamp) are encoded in full. Pure: the StreamQueue's RecentReads calls it.
"""

from __future__ import annotations

import struct

from actors import messages as m
from actors.core import stream
from actors.wire import packb

TEMPLATES_MAX = 1024  # (exchange, routing key, properties) kept; all dropped past it
_LONG = struct.Struct(">q")
_NO_ID = packb(None)
_NONE = object()  # a key whose encoding is not a template's


class DeliveryEncoder:
    def __init__(self):
        # (exchange, routing key, properties) -> (before, after, offset it came from or
        # None once checked) for packb(offset) + before + offset (8 bytes) + after +
        # packb(msg_id); _NONE: the encoding is not a template's
        self.templates: dict = {}

    def __call__(self, x) -> bytes:
        """A log's Message -> its delivery_tail, with its x-stream-offset header."""
        key = (x.exchange, x.routing_key, x.props_raw)
        t = self.templates.get(key)
        if t is not None and t is not _NONE and t[2] is None:
            return _fill(t, x)
        tail = full(x)
        if t is None:
            if len(self.templates) >= TEMPLATES_MAX:
                self.templates.clear()
            self.templates[key] = _template(x, tail)
        elif t is not _NONE and t[2] != x.offset:
            # another message of its kind: the template holds if it gives the same bytes
            # for this other offset (the header's value found where it is, not elsewhere)
            self.templates[key] = (t[0], t[1], None) if _fill(t, x) == tail else _NONE
        return tail


def full(x) -> bytes:
    """The delivery encoded without a template."""
    return m.delivery_tail(x.offset, False, x.exchange, x.routing_key,
                           stream.with_offset_header(x.props_raw, x.offset), msg_id=x.msg_id)


def _fill(t: tuple, x) -> bytes:
    return b"".join((packb(x.offset), t[0], _LONG.pack(x.offset), t[1],
                     _NO_ID if x.msg_id is None else packb(x.msg_id)))


def _template(x, tail: bytes):
    """(before, after, x's offset) around the header's value in ``tail`` (x's full encoding),
    or _NONE when its bytes are not where a template expects them."""
    head = packb(x.offset)
    end = _NO_ID if x.msg_id is None else packb(x.msg_id)
    at = tail.rfind(_LONG.pack(x.offset), len(head), len(tail) - len(end))
    if not tail.startswith(head) or not tail.endswith(end) or at < 0:
        return _NONE
    return (tail[len(head):at], tail[at + 8:len(tail) - len(end)], x.offset)
