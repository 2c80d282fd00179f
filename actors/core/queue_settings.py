"""A queue's effective settings, parsed once from its x-arguments and its effective policy.

The Queue actor (actors/queue/queue_process.py) parses them when it starts and again when a policy
changes, and hands the record to its core (QueueCore's constructor, `apply_settings`): neither
reads the raw arguments for these keys again. Which of argument and policy wins is
rabbit_amqqueue_process:process_args_policy/1's rule (policies.queue_settings), the delivery
limit rabbit_queue_type_util:args_policy_lookup's (quorum.delivery_limit for a quorum queue).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from actors.core import policies, quorum
from actors.core.priorities import max_priority_of


class QueueSettings(NamedTuple):
    """What a classic or quorum queue's core reads of its arguments and policy."""

    ttl: int | None  # x-message-ttl / message-ttl (ms), None: none
    expires: int | None  # x-expires / expires (ms unused), None: never
    max_length: int | None  # x-max-length / max-length (messages), None: unbounded
    max_bytes: int | None  # x-max-length-bytes / max-length-bytes, None: unbounded
    overflow: str  # drop-head | reject-publish | reject-publish-dlx
    dlx: str | None  # dead-letter exchange, None: none
    dlrk: str | None  # dead-letter routing key override, None: the message's own
    delivery_limit: int | None  # S6: returns before dead-lettering, None: no limit
    confirm_on: str  # x-confirm-on / confirm-on: enqueue | ack | ack-lite
    queue_type: str  # x-queue-type: classic | quorum (fixed at declare, never a policy's)
    max_priority: int  # x-max-priority, capped; 0: no priorities (fixed at declare)
    single_active: bool  # x-single-active-consumer (fixed at declare)


def parse(arguments: Mapping | None, policy: Mapping | None = None) -> QueueSettings:
    """The settings of a queue declared with `arguments` under the effective `policy`
    definition (policies.effective, with the operator policy's merged in)."""
    args = arguments or {}
    pol = policy or {}
    merged = policies.queue_settings(args, pol)
    qtype = quorum.queue_type(args)
    return QueueSettings(
        ttl=_int(merged.get("x-message-ttl")),
        expires=_int(merged.get("x-expires")),
        max_length=_int(merged.get("x-max-length")),
        max_bytes=_int(merged.get("x-max-length-bytes")),
        overflow=merged.get("x-overflow", "drop-head"),
        dlx=merged.get("x-dead-letter-exchange"),
        dlrk=merged.get("x-dead-letter-routing-key"),
        delivery_limit=_delivery_limit(qtype, args.get("x-delivery-limit"),
                                       pol.get("delivery-limit")),
        confirm_on=_confirm_on(args, pol),
        queue_type=qtype,
        max_priority=max_priority_of(_int(args.get("x-max-priority"))),
        single_active=args.get("x-single-active-consumer") is True)


def _confirm_on(args: Mapping, policy: Mapping) -> str:
    """x-confirm-on, else the policy's confirm-on, else enqueue."""
    if "x-confirm-on" in args:
        mode = args["x-confirm-on"]
        return mode.decode() if isinstance(mode, bytes) else mode
    return policy.get("confirm-on", "enqueue")


def _delivery_limit(qtype: str, arg, pol) -> int | None:
    """S6: a quorum queue's rule (default 20, negative: none); else the smaller integer of
    argument and policy, None if neither is one."""
    if qtype == quorum.QUORUM:
        return quorum.delivery_limit(arg, pol)
    found = [v for v in (arg, pol) if isinstance(v, int) and not isinstance(v, bool)]
    return min(found) if found else None


def _int(v):
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
