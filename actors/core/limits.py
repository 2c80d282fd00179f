"""Virtual host limits (rabbit_vhost_limit.erl) and user limits (rabbit_auth_backend_internal's
`user-limits`): validation as rabbit_parameter_validation does it, and the refusals with
RabbitMQ's texts.

- vhost: `max-connections`, `max-queues`; user: `max-connections`, `max-channels`.
- A negative value means no limit (stored as given, ignored when checked); 0 allows none.
"""

from __future__ import annotations

from actors.core.erl_terms import erl_p
from actors.core.errors import ChannelError, ConnectionError_
from actors.core.policies import json_term

KEYS = {"vhost": ("max-connections", "max-queues"),
        "user": ("max-connections", "max-channels")}


def _refuse(text: str) -> ChannelError:
    return ChannelError(406, f"Validation failed\n\n{text}\n")


def validate(scope: str, value) -> dict:
    """The limits as stored; 406 with rabbit_parameter_validation's text otherwise."""
    name = "vhost-limits" if scope == "vhost" else "user-limits"
    if not isinstance(value, dict):
        raise _refuse(f"{name} not a list {erl_p(json_term(value))}")
    unknown = [(json_term(k), json_term(v)) for k, v in value.items() if k not in KEYS[scope]]
    for key in KEYS[scope]:
        if key in value and (not isinstance(value[key], int) or isinstance(value[key], bool)):
            raise _refuse(f"{key} should be a number, actually was {erl_p(json_term(value[key]))}")
    if unknown:
        raise _refuse(f"Unrecognised terms {erl_p(unknown)} in {name}")
    return dict(value)


def limit(limits: dict | None, key: str) -> int | None:
    """rabbit_vhost_limit:get_limit/2: the limit, None when unset or negative."""
    n = (limits or {}).get(key)
    return n if isinstance(n, int) and n >= 0 else None


def check_queue_limit(limits: dict | None, count: int, queue: str, vhost: str) -> None:
    """rabbit_amqqueue:check_vhost_queue_limit/1 before a queue is created (`count`: the
    queues the vhost has)."""
    n = limit(limits, "max-queues")
    if n is not None and count + 1 > n:
        raise ChannelError(406, f"cannot declare queue '{queue}': queue limit in vhost "
                                f"'{vhost}' ({n}) is reached")


def check_vhost_connections(limits: dict | None, count: int, vhost: str, user: str) -> None:
    """rabbit_reader:check_vhost_connection_limit/2 (`count`: connections open to the vhost,
    this one not included)."""
    n = limit(limits, "max-connections")
    if n is not None and count >= n:
        raise ConnectionError_(530, f"access to vhost '{vhost}' refused for user '{user}': "
                                    f"connection limit ({n}) is reached")


def check_user_connections(limits: dict | None, count: int, user: str) -> None:
    """rabbit_reader:check_user_connection_limit/1."""
    n = limit(limits, "max-connections")
    if n is not None and count >= n:
        raise ConnectionError_(530, f"Connection refused for user '{user}': user connection "
                                    f"limit ({n}) is reached")


def check_user_channels(limits: dict | None, count: int, user: str) -> None:
    """rabbit_reader's channel.open check (`count`: the user's open channels)."""
    n = limit(limits, "max-channels")
    if n is not None and count >= n:
        raise ConnectionError_(530, f"number of channels opened for user '{user}' has reached "
                                    f"the maximum allowed user limit of ({n})")
