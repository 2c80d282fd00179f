"""Policies (rabbit_policy.erl): named patterns per vhost whose definition applies to matching
queues or exchanges; the highest priority match wins (equal priorities: the policy whose name
sorts first, so that the choice is deterministic).

Leveret reads these keys from a queue's effective policy: `confirm-on` (see docs/confirm-on.md),
`ha-mode` / `ha-params` (mirrored queues, cluster), `delivery-limit` (S6) and
`consumer-timeout` (S5), non-negative integers. A queue argument (`x-confirm-on`) wins
over the policy, as RabbitMQ's x-arguments win over most policy keys.
"""

from __future__ import annotations

import re

from actors.core.errors import ChannelError

APPLY_TO = ("queues", "exchanges", "all")
KNOWN_KEYS = {"confirm-on": ("enqueue", "ack", "ack-lite"), "ha-mode": ("all", "exactly", "nodes"),
              "ha-params": None, "ha-sync-mode": ("manual", "automatic"),
              "delivery-limit": int, "consumer-timeout": int}


def validate(name: str, pattern: str, definition: dict, priority: int, apply_to: str) -> None:
    """406 (rabbitmqctl shows the text) for what rabbit_policy would refuse."""
    if not name:
        raise ChannelError(406, "policy name must not be empty")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ChannelError(406, f"invalid policy pattern '{pattern}': {e}")
    if apply_to not in APPLY_TO:
        raise ChannelError(406, f"apply-to must be one of {', '.join(APPLY_TO)}")
    if not isinstance(definition, dict) or not definition:
        raise ChannelError(406, "policy definition must be a non-empty JSON object")
    if not isinstance(priority, int):
        raise ChannelError(406, "priority must be an integer")
    for key, value in definition.items():
        if key not in KNOWN_KEYS:
            raise ChannelError(406, f"unrecognised policy key '{key}'")
        allowed = KNOWN_KEYS[key]
        if allowed is int:  # a non-negative integer
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ChannelError(406, f"invalid value {value!r} for policy key '{key}'")
        elif allowed is not None and value not in allowed:
            raise ChannelError(406, f"invalid value {value!r} for policy key '{key}'")


def effective(policies: dict, vhost: str, name: str, kind: str = "queues") -> dict:
    """The definition of the highest-priority policy of `vhost` matching `name` ({} if none).
    policies: {(vhost, policy name): {"pattern", "definition", "priority", "apply_to"}}."""
    best = None
    for (v, pname), p in policies.items():
        if v != vhost or p["apply_to"] not in (kind, "all"):
            continue
        if re.search(p["pattern"], name) is None:
            continue
        key = (-p["priority"], pname)
        if best is None or key < best[0]:
            best = (key, p)
    return dict(best[1]["definition"]) if best else {}


def winner(policy_list, vhost: str, name: str, kind: str = "queues") -> dict | None:
    """The policy (with its name) `effective` takes the definition of, or None; policy_list:
    policies as stored ({"vhost", "name", "pattern", "definition", "priority", "apply_to"})."""
    found = {(p["vhost"], p["name"]): p for p in policy_list}
    best = None
    for (v, pname), p in found.items():
        if v != vhost or p["apply_to"] not in (kind, "all") or \
                re.search(p["pattern"], name) is None:
            continue
        key = (-p["priority"], pname)
        if best is None or key < best[0]:
            best = (key, p)
    return best[1] if best else None
