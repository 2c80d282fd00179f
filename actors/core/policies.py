"""Policies and operator policies (rabbit_policy.erl, rabbit_policies.erl): named patterns per
vhost whose definition applies to matching queues or exchanges; the highest priority match wins
(equal priorities: the policy whose name sorts first, so that the choice is deterministic).

Keys (validated as rabbit_policies:validate_policy0/2 and rabbit_mirror_queue_misc do):

- queues: `message-ttl`, `expires`, `max-length`, `max-length-bytes`, `overflow`,
  `dead-letter-exchange`, `dead-letter-routing-key`, `queue-mode` (accepted and ignored, as
  classic queues v2 page by themselves: docs/policies.md), Leveret's `confirm-on`
  (docs/confirm-on.md), `ha-mode` / `ha-params` / `ha-sync-mode` (mirrored queues, cluster:
  checked together by mirroring.policy_error);
  `delivery-limit` (S6) and `consumer-timeout` (S5), non-negative integers; streams'
  `max-age`, `stream-max-segment-size-bytes` and `initial-cluster-size`, and
  `queue-leader-locator` (`client-local` only) (docs/streams.md);
- exchanges: `alternate-exchange`.

Operator policies (`operator_policy`) take only `expires`, `message-ttl`, `max-length`,
`max-length-bytes` and `delivery-limit` (rabbit_policies' operator_policy_validator list of
3.10, without the quorum-only `max-in-memory-*`; delivery-limit applies to classic queues here,
S6). One policy and one operator policy may
match the same queue; their definitions merge key by key, the smaller value winning where both
set one (rabbit_policy:merge_operator_definitions/2, merge_policy_value/3).

A queue's settings then come from its x-arguments and that merged definition as
rabbit_amqqueue_process:process_args_policy/1 resolves them: the smaller of argument and policy
for `expires`, `message-ttl`, `max-length`, `max-length-bytes`; the argument, else the policy,
for the others (`queue_settings`). An exchange's x-argument `alternate-exchange` wins over the
policy's (rabbit_policy:get_arg/3).
"""

from __future__ import annotations

import re

from actors.core import mirroring, stream
from actors.core.erl_terms import Atom, erl_p
from actors.core.errors import ChannelError

APPLY_TO = ("queues", "exchanges", "all")

# key -> (accepted values or a predicate, RabbitMQ's "~p is not ..." text)
def _int_at_least(n):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= n


def _binary(v):
    return isinstance(v, str)


def _one_of(*values):
    return lambda v: isinstance(v, str) and v in values


POLICY_KEYS = {
    "alternate-exchange": (_binary, "~p is not a valid alternate exchange name"),
    "dead-letter-exchange": (_binary, "~p is not a valid dead letter exchange name"),
    "dead-letter-routing-key": (_binary, "~p is not a valid dead letter routing key"),
    "message-ttl": (_int_at_least(0), "~p is not a valid message TTL"),
    "expires": (_int_at_least(1), "~p is not a valid queue expiry"),
    "max-length": (_int_at_least(0), "~p is not a valid maximum length"),
    "max-length-bytes": (_int_at_least(0), "~p is not a valid maximum length in bytes"),
    "queue-mode": (_one_of("default", "lazy"), "~p is not a valid queue-mode value"),
    "overflow": (_one_of("drop-head", "reject-publish", "reject-publish-dlx"),
                 "~p is not a valid overflow value"),
    # Leveret's confirm-on (docs/confirm-on.md)
    "confirm-on": (_one_of("enqueue", "ack", "ack-lite"), "~p is not a valid confirm-on value"),
    # S6 (RabbitMQ's quorum-queue key, here on classic queues) and S5
    "delivery-limit": (_int_at_least(0), "~p is not a valid delivery limit"),
    "consumer-timeout": (_int_at_least(0), "~p is not a valid consumer timeout"),
    # streams' retention and segment size (actors/core/stream.py settings)
    "max-age": (lambda v: stream.check_max_age(v) is not None, "~p is not a valid max age"),
    "stream-max-segment-size-bytes": (
        lambda v: _int_at_least(0)(v) and v <= stream.MAX_SEGMENT_SIZE,
        "~p is not a valid segment size"),
    # a stream's members when it is declared (actors/core/stream_replication.py)
    "initial-cluster-size": (_int_at_least(0), "~p is not a valid cluster size"),
    # Leveret places every leader client-local: the other locators are refused, not ignored
    "queue-leader-locator": (_one_of("client-local"),
                             "~p is not a valid queue leader locator value (Leveret places "
                             "leaders client-local only)"),
}
# rabbit_mirror_queue_misc's keys, checked together (mirroring.policy_error)
HA_KEYS = ("ha-mode", "ha-params", "ha-sync-mode")
OPERATOR_KEYS = ("expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit")
# rabbit_policies:merge_policy_value/3 (policy vs operator policy) and res_min/2 in
# rabbit_amqqueue_process (argument vs policy): the smaller wins
MIN_KEYS = ("expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit")
# what a classic queue reads from its policy: policy key -> x-argument
QUEUE_KEYS = {"expires": "x-expires", "message-ttl": "x-message-ttl",
              "max-length": "x-max-length", "max-length-bytes": "x-max-length-bytes",
              "overflow": "x-overflow", "dead-letter-exchange": "x-dead-letter-exchange",
              "dead-letter-routing-key": "x-dead-letter-routing-key",
              "queue-mode": "x-queue-mode"}


def json_term(v):
    """A decoded JSON value as the Erlang term rabbit_json gives (strings are binaries; an
    Atom a validator names stays an atom)."""
    if isinstance(v, str) and not isinstance(v, Atom):
        return v.encode("utf-8", "surrogateescape")
    if isinstance(v, list):
        return [json_term(x) for x in v]
    if isinstance(v, dict):
        return [(json_term(k), json_term(x)) for k, x in v.items()]
    return v


def error_text(fmt: str, *terms) -> str:
    """io_lib:format(Fmt, Args) of a validator's {error, Fmt, Args} (Erlang terms)."""
    for t in terms:
        fmt = fmt.replace("~p", erl_p(t), 1)
    return fmt


def _refuse(fmt: str, *terms) -> ChannelError:
    # rabbitmqctl prints rabbit_runtime_parameters' {error, Fmt, Args} as "Validation failed"
    return ChannelError(406, f"Validation failed\n\n{error_text(fmt, *terms)}\n")


def validate(name: str, pattern: str, definition: dict, priority: int, apply_to: str,
             operator: bool = False) -> None:
    """406 with rabbit_policy's text for what it would refuse (``operator``: an operator
    policy, which takes only OPERATOR_KEYS)."""
    if not name:
        raise ChannelError(406, "policy name must not be empty")
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise _refuse("~p priority must be a number", priority)
    try:
        re.compile(pattern)
    except re.error as e:
        raise _refuse(f"~p is not a valid regular expression ({e})", json_term(pattern))
    if apply_to not in APPLY_TO:
        raise _refuse(f"apply-to '{apply_to}' unrecognised; should be 'queues', 'exchanges' "
                      "or 'all'")
    if not isinstance(definition, dict):
        raise _refuse("definition must be a dictionary: ~p", json_term(definition))
    if not definition:
        raise _refuse("no policy provided")
    unknown = []
    for key, value in definition.items():
        if operator and key not in OPERATOR_KEYS:
            unknown.append((json_term(key), json_term(value)))
        elif key in POLICY_KEYS:
            ok, text = POLICY_KEYS[key]
            if not ok(value):
                raise _refuse(text, json_term(value))
        elif key not in HA_KEYS:
            unknown.append((json_term(key), json_term(value)))
    ha_error = None if operator else mirroring.policy_error(
        definition.get("ha-mode"), definition.get("ha-params"), definition.get("ha-sync-mode"))
    if ha_error:
        raise _refuse(ha_error[0], *map(json_term, ha_error[1]))
    if unknown:
        raise _refuse("~p are not recognised policy settings", unknown)


def _matches(p: dict, vhost: str, name: str, kind: str) -> bool:
    return p["vhost"] == vhost and p["apply_to"] in (kind, "all") and \
        re.search(p["pattern"], name) is not None


def _best(policy_list, vhost: str, name: str, kind: str) -> dict | None:
    best = None
    for p in policy_list:
        if not _matches(p, vhost, name, kind):
            continue
        key = (-p["priority"], p["name"])
        if best is None or key < best[0]:
            best = (key, p)
    return best[1] if best else None


def _with_names(policies: dict) -> list:
    return [dict(p, vhost=v, name=n) if "name" not in p or "vhost" not in p else p
            for (v, n), p in policies.items()]


def merge(definition: dict | None, op_definition: dict | None) -> dict:
    """rabbit_policy:merge_operator_definitions/2: key by key; where both set a key the
    smaller value of MIN_KEYS wins (other keys cannot be in an operator policy)."""
    out = dict(definition or {})
    for key, op_val in (op_definition or {}).items():
        if key in out and key in MIN_KEYS:
            out[key] = min(out[key], op_val)
        else:
            out[key] = op_val
    return out


def effective(policies: dict, vhost: str, name: str, kind: str = "queues",
              op_policies: dict | None = None) -> dict:
    """The merged definition of the highest-priority policy and operator policy of `vhost`
    matching `name` ({} if none). policies, op_policies: {(vhost, policy name): {"pattern",
    "definition", "priority", "apply_to"}}."""
    p = _best(_with_names(policies), vhost, name, kind)
    op = _best(_with_names(op_policies), vhost, name, kind) if op_policies else None
    return merge(p["definition"] if p else None, op["definition"] if op else None)


def winner(policy_list, vhost: str, name: str, kind: str = "queues") -> dict | None:
    """The policy (with its name) `effective` takes the definition of, or None; policy_list:
    policies as stored ({"vhost", "name", "pattern", "definition", "priority", "apply_to"})."""
    return _best({(p["vhost"], p["name"]): p for p in policy_list}.values(), vhost, name, kind)


def queue_settings(arguments: dict | None, definition: dict) -> dict:
    """The queue's x-arguments with what its effective policy adds
    (rabbit_amqqueue_process:process_args_policy/1): for MIN_KEYS the smaller of argument and
    policy, for the other keys the argument, else the policy."""
    out = dict(arguments or {})
    for key, arg in QUEUE_KEYS.items():
        if key not in definition:
            continue
        pol = definition[key]
        if arg not in out:
            out[arg] = pol
        elif key in MIN_KEYS and isinstance(out[arg], int) and not isinstance(out[arg], bool):
            out[arg] = min(out[arg], pol)
    return out


def alternate_exchange(arguments: dict | None, definition: dict) -> str | None:
    """rabbit_policy:get_arg(<<"alternate-exchange">>, ...): the argument, else the policy's."""
    if arguments and "alternate-exchange" in arguments:
        return arguments["alternate-exchange"]
    return definition.get("alternate-exchange")
