"""Direct reply-to names: what a channel consuming from `amq.rabbitmq.reply-to` is reached by.

Mirrors rabbit_direct_reply_to.erl (3.10.8): a channel's reply consumer gets a name
`amq.rabbitmq.reply-to.<encoded channel>.<key>`; a publish to the default exchange with that
routing key goes straight to the channel (rabbit_exchange:route calls
rabbit_channel:deliver_reply), no queue in between. RabbitMQ encodes the channel's pid; Leveret
encodes the channel's transport address (`endpoint#name`, actors/transport.py), so any channel
of any node of the cluster can send the reply there. The key is random per basic.consume: the
receiving channel delivers only what carries its current key, so a name cannot be forged to
reach another channel, nor reach a channel that cancelled and consumed again.

Before a publishing channel sends anything to a decoded address it checks that the endpoint is
a connection worker's of this node or cluster (`endpoint_ok`) and that the name is a channel's:
a forged name cannot make the broker open a ZeroMQ connection to an arbitrary host, nor hand a
reply to a queue actor.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"  # what clients consume from and put in reply_to
PREFIX = PSEUDO_QUEUE + "."  # every generated name starts so
KEY_BYTES = 12  # random bytes of a key (16 base64url characters)
MAX_NAME = 255  # a routing key and the reply_to property are short strings

_CONN_SOCK = re.compile(r"conn-\d+-\d+\.sock")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def new_key(random_bytes) -> str:
    return _b64(random_bytes(KEY_BYTES))


def reply_name(address: str, key: str) -> str:
    """The generated reply_to name of the reply consumer of the channel at `address`."""
    return f"{PREFIX}{_b64(address.encode())}.{key}"


def decode_name(name: str) -> tuple[str, str] | None:
    """(channel address, key) of a generated name, or None when it is not one."""
    if not name.startswith(PREFIX):
        return None
    enc, dot, key = name[len(PREFIX):].partition(".")
    if not dot or not enc or not key or "." in key:
        return None
    try:
        address = base64.urlsafe_b64decode(enc + "=" * (-len(enc) % 4)).decode()
    except (binascii.Error, ValueError):
        return None
    endpoint, sep, actor = address.partition("#")
    if not sep or not actor.startswith("ch/"):
        return None
    return address, key


def endpoint_ok(endpoint: str, own_endpoint: str, members: dict) -> bool:
    """Is `endpoint` a connection worker's of this node or cluster? Alone, the workers' ipc://
    sockets sit in one run folder (conn-<index>-<incarnation>.sock); in a cluster the members'
    tcp:// worker endpoints are in the replica's member table (`workers`: slot -> endpoint)."""
    if endpoint == own_endpoint:
        return True
    if endpoint.startswith("ipc://"):
        folder, _, sock = endpoint.rpartition("/")
        return folder == own_endpoint.rpartition("/")[0] and bool(_CONN_SOCK.fullmatch(sock))
    for info in members.values():
        for slot, ep in (info.get("workers") or {}).items():
            if ep == endpoint and slot.startswith("conn-"):
                return True
    return False


def same_key(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
