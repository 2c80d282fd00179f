"""Sender-selected distribution: the CC and BCC headers of a publish (RabbitMQ's
sender-selected.html, rabbit_basic:header_routes/1 and strip_header/2 in 3.10.8).

A message's routing keys are its publish routing key, then every longstr member of its CC
header, then of its BCC header; the exchange routes it by all of them (each queue once). The BCC
header is removed from the message before it is routed, stored or delivered; CC stays. A CC or
BCC header that is not an array refuses the publish (406, RabbitMQ's text); array members that
are not strings are ignored. Only called when a publish has headers: the hot path never gets
here.
"""

from __future__ import annotations

from actors.core.errors import ChannelError
from protocol.properties import header_types, without_header

ROUTING_HEADERS = ("CC", "BCC")

# rabbit_binary_parser's names of the field types (what RabbitMQ's error shows)
TYPE_NAMES = {
    "S": "longstr", "T": "timestamp", "b": "byte", "B": "unsignedbyte", "s": "short",
    "u": "unsignedshort", "I": "signedint", "i": "unsignedint", "d": "double", "f": "float",
    "l": "long", "L": "long", "t": "bool", "D": "decimal", "F": "table", "A": "array",
    "x": "binary", "V": "void",
}


def routes(headers: dict, props_raw: bytes) -> tuple[list, bytes, dict]:
    """(extra routing keys, the properties to store and deliver, the headers routing sees) of a
    publish whose `headers` hold CC or BCC. Raises ChannelError 406 for a header that is not an
    array."""
    extra: list = []
    for h in ROUTING_HEADERS:
        if h not in headers:
            continue
        v = headers[h]
        if not isinstance(v, list):
            kind = TYPE_NAMES.get(header_types(props_raw).get(h, ""), "unknown")
            raise ChannelError(406, f'invalid message: {{unacceptable_type_in_header,"{h}",'
                                    f'{kind}}}')
        extra.extend(x for x in v if isinstance(x, str))
    if "BCC" in headers:
        props_raw = without_header(props_raw, "BCC")
        headers = {k: v for k, v in headers.items() if k != "BCC"}
    return extra, props_raw, headers
