"""queue.declare / exchange.declare argument checks and equivalence, as RabbitMQ 3.10 does them.

Mirrors (3.10.8):
  * ``rabbit_amqqueue:check_declare_arguments/2`` and its validators (``declare_args/0``),
    restricted to the classic queue type's ``queue_arguments`` capability
    (``rabbit_classic_queue:capabilities/0``), then ``check_arguments_key/4`` which refuses the
    arguments only other queue types take;
  * ``rabbit_amqqueue:check_consume_arguments/3`` (basic.consume arguments);
  * the channel's ``x-dead-letter-exchange`` / ``alternate-exchange`` type check
    (``rabbit_misc:r_arg/4`` in ``rabbit_channel:handle_method/6``);
  * ``rabbit_amqqueue:assert_equivalence/5`` (exclusive owner, durable, auto_delete, then
    ``rabbit_misc:assert_args_equivalence/4`` over the classic queue argument list);
  * ``rabbit_exchange:assert_equivalence/6`` (type, durable, auto_delete, internal, then
    ``alternate-exchange``).

Every failure raises ``ChannelError`` with RabbitMQ's exact text, e.g. ``PRECONDITION_FAILED -
invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}``.

Field values arrive decoded (the codec drops the wire type), so the AMQP type RabbitMQ would
print is inferred by ``amqp_type_name`` the way pika encodes Python values: ``int`` ->
``signedint`` (``long`` outside 32 bits), ``bool`` -> ``bool``, ``str`` -> ``longstr``,
``bytes`` -> ``binary``, ``float`` -> ``double``, ``Decimal`` -> ``decimal``, ``datetime`` ->
``timestamp``, ``dict`` -> ``table``, ``list`` -> ``array``, ``None`` -> ``void``. Any Python
int passes RabbitMQ's integer checks (it takes every integer width).

Leveret differences: ``x-queue-type`` accepts ``classic`` and ``quorum`` (a quorum queue's
arguments, flags and equivalence are actors/core/quorum.py's; ``stream`` is refused with the
same text RabbitMQ gives an unknown type), and Leveret's own ``x-confirm-on``
(``enqueue`` | ``ack`` | ``ack-lite``) is validated and compared for equivalence.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from typing import Any, Callable, Mapping

from actors.core import mirroring, policies, quorum
from actors.core.errors import Atom, ChannelError, erl_p, rs, resource_locked, erl_float, \
    _field_term

__all__ = [
    "amqp_type_name", "type_class", "CLASSIC_QUEUE_ARGUMENTS", "OTHER_QUEUE_TYPE_ARGUMENTS",
    "CLASSIC_CONSUMER_ARGUMENTS", "CONFIRM_ON_VALUES", "MAX_EXPIRY",
    "check_dlx_arg_type", "check_declare_arguments", "validate", "check_consume_arguments",
    "assert_equivalent", "assert_flags_equivalent", "check_alternate_exchange_arg",
    "assert_exchange_equivalent", "values_equal",
]

# rabbit_misc:check_expiry/1: ten years in milliseconds.
MAX_EXPIRY = 315360000000

CONFIRM_ON_VALUES = ("enqueue", "ack", "ack-lite")

# rabbit_classic_queue:capabilities() queue_arguments (3.10.8), plus Leveret's x-confirm-on.
# This is also the list assert_args_equivalence compares, in this order.
CLASSIC_QUEUE_ARGUMENTS = (
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
    "x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
    "x-confirm-on", "x-ha-mode", "x-ha-params", "x-delivery-limit", "x-consumer-timeout",
)
# rabbit_queue_type:arguments(queue_arguments) -- classic's: refused on a classic queue.
OTHER_QUEUE_TYPE_ARGUMENTS = frozenset({
    "x-dead-letter-strategy", "x-max-in-memory-length", "x-max-in-memory-bytes",
    "x-quorum-initial-group-size", "x-queue-leader-locator", "x-max-age",
    "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
})
CLASSIC_CONSUMER_ARGUMENTS = ("x-cancel-on-ha-failover", "x-priority", "x-credit")
_OTHER_CONSUMER_ARGUMENTS = frozenset({"x-stream-offset"})

_CLASSIC_TYPE = "rabbit_classic_queue"

_INT_TYPES = frozenset({"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort",
                        "unsignedint"})


# ------------------------------------------------------------------------------ type helpers


def amqp_type_name(value: Any) -> str:
    """The AMQP field type name RabbitMQ prints for a value (see the module docstring)."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -2 ** 31 <= value < 2 ** 31 else "long"
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    if isinstance(value, float):
        return "double"
    if isinstance(value, _decimal.Decimal):
        return "decimal"
    if isinstance(value, _dt.datetime):
        return "timestamp"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def type_class(type_name: str) -> str:
    """rabbit_misc:type_class/1: every integer width and decimal are ``int``, float and
    double are ``float``."""
    if type_name in _INT_TYPES or type_name == "decimal":
        return "int"
    if type_name in ("float", "double"):
        return "float"
    return type_name


def _as_bytes(v) -> bytes:
    return v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v)


def values_equal(a: Any, b: Any, exact: bool = False) -> bool:
    """Erlang ``==`` on the values RabbitMQ holds: numbers compare numerically across int and
    float, booleans only equal booleans, str and bytes compare by their bytes, decimals by
    (scale, unscaled), timestamps by their seconds, arrays element-wise, tables key by key in
    order. ``exact=True`` is Erlang ``=:=`` (an int never equals a float). Used by the headers
    exchange and argument equivalence."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        if exact and isinstance(a, float) != isinstance(b, float):
            return False
        return isinstance(b, (int, float)) and not isinstance(b, bool) and a == b
    if isinstance(a, (str, bytes, bytearray, memoryview)):
        return isinstance(b, (str, bytes, bytearray, memoryview)) and _as_bytes(a) == _as_bytes(b)
    if isinstance(a, _decimal.Decimal):
        return isinstance(b, _decimal.Decimal) and \
            _field_term(a, "decimal") == _field_term(b, "decimal")
    if isinstance(a, _dt.datetime):
        return isinstance(b, _dt.datetime) and \
            _field_term(a, "timestamp") == _field_term(b, "timestamp")
    if isinstance(a, Mapping):
        if not isinstance(b, Mapping) or len(a) != len(b):
            return False
        return all(_as_bytes(ka) == _as_bytes(kb) and values_equal(va, vb, exact)
                   for (ka, va), (kb, vb) in zip(a.items(), b.items()))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(values_equal(x, y, exact) for x, y in zip(a, b))
    return a == b


def _fmt_raw(v) -> str:
    """``~s`` for a binary value, ``~p`` for anything else (rabbit_misc:val/1)."""
    t = amqp_type_name(v)
    if t in ("longstr", "binary"):
        return v if isinstance(v, str) else bytes(v).decode("utf-8", "surrogateescape")
    if t == "bool":
        return "true" if v else "false"
    if t in ("signedint", "long"):
        return str(v)
    if t == "double":
        return erl_float(v)
    return erl_p(_field_term(v, t))


def _val_typed(v) -> str:
    """rabbit_misc:val({Type, Value})."""
    return f"the value '{_fmt_raw(v)}' of type '{amqp_type_name(v)}'"


def _err(queue: str, vhost: str, key: str, term) -> ChannelError:
    # "invalid arg '~s' for ~s: ~255p"
    return ChannelError(406, f"invalid arg '{key}' for {rs('queue', queue, vhost)}: {erl_p(term)}")


# --------------------------------------------------------------------- rabbit_amqqueue checks

_Check = Callable[[Any, Mapping], Any]  # returns None when ok, else the Erlang error term


def _check_int(v, _args):
    t = amqp_type_name(v)
    if t in _INT_TYPES:
        return None
    return f"expected integer, got {erl_p(Atom(t))}"


def _check_bool(v, _args):
    t = amqp_type_name(v)
    return None if t == "bool" else (Atom("unacceptable_type"), Atom(t))


def _check_non_neg_int(v, args):
    e = _check_int(v, args)
    if e is not None:
        return e
    return None if v >= 0 else (Atom("value_negative"), v)


def _check_expiry(v):
    if v < 0:
        return (Atom("value_negative"), v)
    if v > MAX_EXPIRY:
        return (Atom("value_too_large"), v)
    return None


def _check_expires(v, args):
    e = _check_int(v, args)
    if e is not None:
        return e
    if v == 0:
        return (Atom("value_zero"), v)
    return _check_expiry(v)


def _check_message_ttl(v, args):
    e = _check_int(v, args)
    return e if e is not None else _check_expiry(v)


def _check_max_priority(v, args):
    e = _check_non_neg_int(v, args)
    if e is not None:
        return e
    return None if v <= 255 else (Atom("max_value_exceeded"), v)


def _string_or(v, ok: Callable[[str], Any]):
    t = amqp_type_name(v)
    if t != "longstr":
        return (Atom("unacceptable_type"), Atom(t))
    return ok(v)


def _check_dlxname(v, _args):
    return _string_or(v, lambda s: None)


def _check_dlxrk(v, args):
    return _string_or(v, lambda s: None if "x-dead-letter-exchange" in args
                      else Atom("routing_key_but_no_dlx_defined"))


def _check_overflow(v, _args):
    return _string_or(v, lambda s: None if s in ("drop-head", "reject-publish",
                                                 "reject-publish-dlx")
                      else Atom("invalid_overflow"))


def _check_queue_mode(v, _args):
    return _string_or(v, lambda s: None if s in ("default", "lazy")
                      else f"unsupported queue mode '{s}'")


def _check_queue_version(v, args):
    e = _check_non_neg_int(v, args)
    if e is not None:
        return e
    if v not in (1, 2):
        return f"unsupported queue version '{v}'"
    # Leveret's classic queues store messages one way, which behaves as RabbitMQ's version 2
    # does (small bodies beside the index, paging by the queue itself); version 1's layout is
    # not there to choose, so it is refused rather than accepted and ignored
    return None if v == 2 else \
        "queue version 1 is not implemented: Leveret's classic queues are version 2"


def _check_master_locator(v, _args):
    # RabbitMQ 3.10 takes client-local, min-masters and random (unchecked); Leveret places a
    # queue on the node its client declared it on, so only client-local is true of it
    return _string_or(v, lambda s: None if s == "client-local" else
                      f"queue master locator '{s}' is not implemented: Leveret places every "
                      "queue client-local")


def _check_queue_type(v, _args):
    # RabbitMQ accepts classic, quorum and stream; Leveret implements classic and quorum and
    # refuses stream with the text RabbitMQ gives an unknown type.
    return _string_or(v, lambda s: None if s in ("classic", quorum.QUORUM)
                      else f"unsupported queue type '{s}'")


def _check_ha_mode(v, args):
    # RabbitMQ 2.x's x-ha-policy as two arguments named like the ha-mode/ha-params policy keys
    error = _string_or(v, lambda s: None if s in mirroring.MODES
                       else f"unsupported x-ha-mode value '{s}'")
    if error is None and "x-ha-params" not in args:
        return _ha_params_error(v, None)  # (exactly and nodes need it)
    return error


def _check_ha_params(v, args):
    if "x-ha-mode" not in args:
        return "x-ha-mode must be specified to specify x-ha-params"
    return _ha_params_error(args["x-ha-mode"], v)


def _ha_params_error(mode, params):
    # the ha-params rules and texts of the policy key (rabbit_mirror_queue_mode_*), so that an
    # argument the mirroring cannot apply is refused at declare, never ignored
    error = mirroring.params_error(mode, params)
    return None if error is None else policies.error_text(
        error[0], *map(policies.json_term, error[1]))


def _check_confirm_on(v, _args):
    return _string_or(v, lambda s: None if s in CONFIRM_ON_VALUES
                      else f"unsupported x-confirm-on value '{s}'")


# rabbit_amqqueue:declare_args/0 order, filtered to the classic queue's arguments.
_DECLARE_VALIDATORS: tuple[tuple[str, _Check], ...] = (
    ("x-expires", _check_expires),
    ("x-message-ttl", _check_message_ttl),
    ("x-dead-letter-exchange", _check_dlxname),
    ("x-dead-letter-routing-key", _check_dlxrk),
    ("x-max-length", _check_non_neg_int),
    ("x-max-length-bytes", _check_non_neg_int),
    ("x-max-priority", _check_max_priority),
    ("x-overflow", _check_overflow),
    ("x-queue-mode", _check_queue_mode),
    ("x-queue-version", _check_queue_version),
    ("x-single-active-consumer", _check_bool),
    ("x-queue-type", _check_queue_type),
    ("x-queue-master-locator", _check_master_locator),
    ("x-confirm-on", _check_confirm_on),
    ("x-ha-mode", _check_ha_mode),
    ("x-ha-params", _check_ha_params),
    # S6: a quorum queue's argument in RabbitMQ, taken by Leveret's classic queues too
    ("x-delivery-limit", _check_non_neg_int),
    # S5: ms, 0 = no timeout for this queue's deliveries
    ("x-consumer-timeout", _check_non_neg_int),
)

def _check_cancel_on_failover(v, args):
    e = _check_bool(v, args)
    if e is not None:
        return e
    # Leveret cancels every consumer of a mirrored queue whose master fails over (basic.cancel,
    # docs/cluster.md): what true asks for; false (RabbitMQ moves the consumer to the new
    # master silently) is not implemented, so it is refused rather than ignored
    return None if v else ("x-cancel-on-ha-failover=false is not implemented: Leveret always "
                           "cancels a mirrored queue's consumers when its master fails over")


def _check_credit(v, _args):
    # RabbitMQ 3.10 reads x-credit ({credit: long, drain: bool}) as AMQP 1.0 link credit
    # (rabbit_queue_consumers:parse_credit_args/2): credit that only basic.credit, a method
    # AMQP 0-9-1 does not have, can top up; any other table is ignored and a non-table crashes
    # the queue (541). Leveret speaks 0-9-1 only and refuses it.
    return ("x-credit is AMQP 1.0 link credit, not available over AMQP 0-9-1; "
            "use basic.qos prefetch")


_CONSUME_VALIDATORS: tuple[tuple[str, _Check], ...] = (
    ("x-priority", _check_int),
    ("x-cancel-on-ha-failover", _check_cancel_on_failover),
    ("x-credit", _check_credit),
)


def _run(validators, args: Mapping, queue: str, vhost: str) -> None:
    for key, fun in validators:
        if key in args:
            err = fun(args[key], args)
            if err is not None:
                raise _err(queue, vhost, key, err)


def _check_keys(args: Mapping, invalid: frozenset, queue: str, vhost: str) -> None:
    for key in args:
        if key in invalid:
            raise ChannelError(406, f"invalid arg '{key}' for {rs('queue', queue, vhost)} "
                                    f"of queue type {_CLASSIC_TYPE}")


def check_dlx_arg_type(args: Mapping | None, queue: str, vhost: str) -> None:
    """The channel's check, done for a queue about to be created before permissions and
    argument validation: ``invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue
    'q' in vhost '/'``. (RabbitMQ then checks read on the queue and write on the DLX.)"""
    if args and "x-dead-letter-exchange" in args:
        t = amqp_type_name(args["x-dead-letter-exchange"])
        if t != "longstr":
            raise ChannelError(406, f"invalid type '{t}' for arg 'x-dead-letter-exchange' in "
                                    f"{rs('queue', queue, vhost)}")


def check_declare_arguments(args: Mapping | None, queue: str, vhost: str) -> None:
    """rabbit_amqqueue:check_declare_arguments/2: x-queue-type first, then (classic queue)
    each known argument in RabbitMQ's order, then arguments of other queue types; a quorum
    queue's are quorum.check_declare_arguments'."""
    if not args:
        return
    _run((("x-queue-type", _check_queue_type),), args, queue, vhost)
    if quorum.is_quorum(args):
        quorum.check_declare_arguments(args, queue, vhost)
        return
    _run(_DECLARE_VALIDATORS, args, queue, vhost)
    _check_keys(args, OTHER_QUEUE_TYPE_ARGUMENTS, queue, vhost)


def validate(args: Mapping | None, queue: str, vhost: str, flags: Mapping | None = None) -> None:
    """All argument checks RabbitMQ makes when a queue.declare creates a queue (it makes none
    when the queue exists: then only ``assert_equivalent`` applies). ``flags`` (the declare's
    ``durable``, ``exclusive``, ``auto_delete``): a queue type's own checks of them, after the
    arguments' (rabbit_queue_type:declare/2: a quorum queue is durable only)."""
    check_dlx_arg_type(args, queue, vhost)
    check_declare_arguments(args, queue, vhost)
    if flags is not None and quorum.is_quorum(args):
        exclusive = bool(flags.get("exclusive"))
        quorum.check_declare_flags(bool(flags.get("durable")) and not exclusive, exclusive,
                                   bool(flags.get("auto_delete")), queue, vhost)


def check_consume_arguments(args: Mapping | None, queue: str, vhost: str,
                            queue_type: str = "classic") -> None:
    """rabbit_amqqueue:check_consume_arguments/3 for a classic (or quorum) queue
    (basic.consume)."""
    if not args:
        return
    if queue_type == quorum.QUORUM:
        quorum.check_consume_arguments(args, queue, vhost)
        return
    _run(_CONSUME_VALIDATORS, args, queue, vhost)
    _check_keys(args, _OTHER_CONSUMER_ARGUMENTS, queue, vhost)


# ------------------------------------------------------------------------------ equivalence


def _fail(key: str, kind: str, name: str, vhost: str, received: str, current: str):
    raise ChannelError(406, f"inequivalent arg '{key}' for {rs(kind, name, vhost)}: "
                            f"received {received} but current is {current}")


def _field_equivalence(orig, new, key, kind, name, vhost) -> None:
    """rabbit_misc:assert_field_equivalence/4 for flags / types: ``received 'false' but
    current is 'true'``."""
    if orig == new and type(orig) is type(new):
        return
    _fail(key, kind, name, vhost, _val_plain(new), _val_plain(orig))


def _val_plain(v) -> str:
    # rabbit_misc:val(Value): '~s' for binaries, '~p' otherwise (atoms print bare)
    if isinstance(v, Atom):
        return f"'{erl_p(v)}'"
    return f"'{_fmt_raw(v)}'"


def _args_equivalence(orig: Mapping, new: Mapping, keys, kind, name, vhost) -> None:
    """rabbit_misc:assert_args_equivalence/4."""
    for key in keys:
        o_in, n_in = key in orig, key in new
        if not o_in and not n_in:
            continue
        if o_in and n_in:
            o, n = orig[key], new[key]
            if type_class(amqp_type_name(o)) == type_class(amqp_type_name(n)) and \
                    values_equal(o, n):
                continue
            # assert_field_equivalence(OrigVal, NewVal): the bare values may still be
            # identical (longstr <<"a">> and binary <<"a">>)
            if values_equal(o, n, exact=True):
                continue
            _fail(key, kind, name, vhost, _val_plain(n), _val_plain(o))
        # one side absent: the classic/undefined x-queue-type special case, else fail
        present = orig[key] if o_in else new[key]
        if key == "x-queue-type" and amqp_type_name(present) == "longstr" and \
                present == "classic":
            continue
        _fail(key, kind, name, vhost,
              _val_typed(new[key]) if n_in else "none",
              _val_typed(orig[key]) if o_in else "none")


def assert_equivalent(existing_args: Mapping | None, new_args: Mapping | None, queue: str,
                      vhost: str) -> None:
    """Argument equivalence for a queue.declare of an existing queue. Only the arguments of
    the existing queue's type are compared (``CLASSIC_QUEUE_ARGUMENTS``, or a quorum queue's
    ``quorum.QUORUM_QUEUE_ARGUMENTS``); others may differ freely. A different type fails on
    x-queue-type: ``inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received
    'quorum' but current is 'classic'``.

    Texts: ``inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received the value
    '5' of type 'signedint' but current is none`` (one side absent) and ``... received '5' but
    current is '10'`` (both present, different)."""
    keys = quorum.QUORUM_QUEUE_ARGUMENTS if quorum.is_quorum(existing_args) \
        else CLASSIC_QUEUE_ARGUMENTS
    _args_equivalence(existing_args or {}, new_args or {}, keys, "queue", queue, vhost)


def assert_flags_equivalent(existing: Mapping, new: Mapping, queue: str, vhost: str) -> None:
    """The flag part of rabbit_amqqueue:assert_equivalence/5, in its order: exclusive owner
    (405 RESOURCE_LOCKED), durable, auto_delete (406).

    ``existing``: ``durable``, ``exclusive``, ``auto_delete`` and optionally ``owner`` (the
    owning connection's id of an exclusive queue). ``new``: the declare's ``durable``,
    ``exclusive``, ``auto_delete`` and optionally ``owner`` (the declaring connection's id).
    With owners given the check is RabbitMQ's strict one (the queue's owner must be the
    declaring connection when exclusive, and none when not); without them the exclusive flags
    must agree. The declared durable flag counts as false for an exclusive declare, as in
    RabbitMQ (``Durable = DurableDeclare andalso not ExclusiveDeclare``).
    """
    new_excl = bool(new.get("exclusive", False))
    old_excl = bool(existing.get("exclusive", False))
    if "owner" in existing or "owner" in new:
        want = new.get("owner") if new_excl else None
        have = existing.get("owner") if old_excl else None
        if want != have or new_excl != old_excl:
            raise resource_locked("queue", queue, vhost)
    elif new_excl != old_excl:
        raise resource_locked("queue", queue, vhost)
    durable = bool(new.get("durable", False)) and not new_excl
    _field_equivalence(bool(existing.get("durable", False)), durable, "durable", "queue",
                       queue, vhost)
    _field_equivalence(bool(existing.get("auto_delete", False)),
                       bool(new.get("auto_delete", False)), "auto_delete", "queue", queue, vhost)


def check_alternate_exchange_arg(args: Mapping | None, exchange: str, vhost: str) -> None:
    """The channel's check on exchange.declare creating an exchange: ``invalid type
    'signedint' for arg 'alternate-exchange' in exchange 'e' in vhost '/'``."""
    if args and "alternate-exchange" in args:
        t = amqp_type_name(args["alternate-exchange"])
        if t != "longstr":
            raise ChannelError(406, f"invalid type '{t}' for arg 'alternate-exchange' in "
                                    f"{rs('exchange', exchange, vhost)}")


def _get(obj, key, default=None):
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def assert_exchange_equivalent(existing, new, exchange: str, vhost: str) -> None:
    """rabbit_exchange:assert_equivalence/6. ``existing`` and ``new`` are mappings (or objects
    such as ``routing.ExchangeDef``) with ``type``, ``durable``, ``auto_delete``,
    ``internal``, ``arguments``. Text: ``inequivalent arg 'type' for exchange 'e' in vhost
    '/': received 'fanout' but current is 'direct'``."""
    _field_equivalence(Atom(_get(existing, "type")), Atom(_get(new, "type")), "type",
                       "exchange", exchange, vhost)
    for flag in ("durable", "auto_delete", "internal"):
        _field_equivalence(bool(_get(existing, flag, False)), bool(_get(new, flag, False)),
                           flag, "exchange", exchange, vhost)
    _args_equivalence(_get(existing, "arguments") or {}, _get(new, "arguments") or {},
                      ("alternate-exchange",), "exchange", exchange, vhost)
