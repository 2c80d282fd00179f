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

Field values arrive decoded (the codec drops the wire type): the AMQP type RabbitMQ would
print is erl_terms.amqp_type_name's. Any Python int passes RabbitMQ's integer checks (it takes
every integer width). The validators and argument lists the quorum queue type shares are
declare_args.py's.

Leveret differences: ``x-queue-type`` accepts ``classic``, ``quorum`` and ``stream`` (a quorum
queue's arguments, flags and equivalence are actors/core/quorum.py's, a stream's
actors/core/stream.py's), and Leveret's own ``x-confirm-on``
(``enqueue`` | ``ack`` | ``ack-lite``) is validated and compared for equivalence.
"""

from __future__ import annotations

from typing import Mapping

from actors.core import mirroring, policies, quorum, stream
from actors.core.declare_args import (CLASSIC_QUEUE_ARGUMENTS, OTHER_QUEUE_TYPE_ARGUMENTS, Check,
                                      check_bool, check_credit, check_dlxname, check_dlxrk,
                                      check_expires, check_int, check_message_ttl,
                                      check_non_neg_int, check_queue_type, invalid_arg,
                                      string_or)
from actors.core.erl_terms import Atom, amqp_type_name, erl_float, erl_p, field_term, \
    type_class, values_equal
from actors.core.errors import ChannelError, resource_locked, rs

__all__ = [
    "CLASSIC_CONSUMER_ARGUMENTS", "CONFIRM_ON_VALUES",
    "check_dlx_arg_type", "check_declare_arguments", "validate", "check_consume_arguments",
    "assert_equivalent", "assert_flags_equivalent", "check_alternate_exchange_arg",
    "assert_exchange_equivalent",
]

CONFIRM_ON_VALUES = ("enqueue", "ack", "ack-lite")

CLASSIC_CONSUMER_ARGUMENTS = ("x-cancel-on-ha-failover", "x-priority", "x-credit")
_OTHER_CONSUMER_ARGUMENTS = frozenset({"x-stream-offset"})

_CLASSIC_TYPE = "rabbit_classic_queue"


# ------------------------------------------------------------------------------ type helpers


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
    return erl_p(field_term(v, t))


def _val_typed(v) -> str:
    """rabbit_misc:val({Type, Value})."""
    return f"the value '{_fmt_raw(v)}' of type '{amqp_type_name(v)}'"


# --------------------------------------------------------------------- rabbit_amqqueue checks


def _check_max_priority(v, args):
    e = check_non_neg_int(v, args)
    if e is not None:
        return e
    return None if v <= 255 else (Atom("max_value_exceeded"), v)


def _check_overflow(v, _args):
    return string_or(v, lambda s: None if s in ("drop-head", "reject-publish",
                                                "reject-publish-dlx")
                     else Atom("invalid_overflow"))


def _check_queue_mode(v, _args):
    return string_or(v, lambda s: None if s in ("default", "lazy")
                     else f"unsupported queue mode '{s}'")


def _check_queue_version(v, args):
    e = check_non_neg_int(v, args)
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
    return string_or(v, lambda s: None if s == "client-local" else
                     f"queue master locator '{s}' is not implemented: Leveret places every "
                     "queue client-local")


def _check_ha_mode(v, args):
    # RabbitMQ 2.x's x-ha-policy as two arguments named like the ha-mode/ha-params policy keys
    error = string_or(v, lambda s: None if s in mirroring.MODES
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
    return string_or(v, lambda s: None if s in CONFIRM_ON_VALUES
                     else f"unsupported x-confirm-on value '{s}'")


# rabbit_amqqueue:declare_args/0 order, filtered to the classic queue's arguments.
_DECLARE_VALIDATORS: tuple[tuple[str, Check], ...] = (
    ("x-expires", check_expires),
    ("x-message-ttl", check_message_ttl),
    ("x-dead-letter-exchange", check_dlxname),
    ("x-dead-letter-routing-key", check_dlxrk),
    ("x-max-length", check_non_neg_int),
    ("x-max-length-bytes", check_non_neg_int),
    ("x-max-priority", _check_max_priority),
    ("x-overflow", _check_overflow),
    ("x-queue-mode", _check_queue_mode),
    ("x-queue-version", _check_queue_version),
    ("x-single-active-consumer", check_bool),
    ("x-queue-type", check_queue_type),
    ("x-queue-master-locator", _check_master_locator),
    ("x-confirm-on", _check_confirm_on),
    ("x-ha-mode", _check_ha_mode),
    ("x-ha-params", _check_ha_params),
    # S6: a quorum queue's argument in RabbitMQ, taken by Leveret's classic queues too
    ("x-delivery-limit", check_non_neg_int),
    # S5: ms, 0 = no timeout for this queue's deliveries
    ("x-consumer-timeout", check_non_neg_int),
)

def _check_cancel_on_failover(v, args):
    e = check_bool(v, args)
    if e is not None:
        return e
    # Leveret cancels every consumer of a mirrored queue whose master fails over (basic.cancel,
    # docs/cluster.md): what true asks for; false (RabbitMQ moves the consumer to the new
    # master silently) is not implemented, so it is refused rather than ignored
    return None if v else ("x-cancel-on-ha-failover=false is not implemented: Leveret always "
                           "cancels a mirrored queue's consumers when its master fails over")


_CONSUME_VALIDATORS: tuple[tuple[str, Check], ...] = (
    ("x-priority", check_int),
    ("x-cancel-on-ha-failover", _check_cancel_on_failover),
    ("x-credit", check_credit),
)


def _run(validators, args: Mapping, queue: str, vhost: str) -> None:
    for key, fun in validators:
        if key in args:
            err = fun(args[key], args)
            if err is not None:
                raise invalid_arg(queue, vhost, key, err)


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
    _run((("x-queue-type", check_queue_type),), args, queue, vhost)
    if quorum.is_quorum(args):
        quorum.check_declare_arguments(args, queue, vhost)
        return
    if stream.is_stream(args):
        stream.check_declare_arguments(args, queue, vhost)
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
    if flags is not None and stream.is_stream(args):
        exclusive = bool(flags.get("exclusive"))
        stream.check_declare_flags(bool(flags.get("durable")) and not exclusive, exclusive,
                                   bool(flags.get("auto_delete")), args, queue, vhost)


def check_consume_arguments(args: Mapping | None, queue: str, vhost: str,
                            queue_type: str = "classic") -> None:
    """rabbit_amqqueue:check_consume_arguments/3 for a classic, quorum or stream queue
    (basic.consume)."""
    if not args:
        return
    if queue_type == quorum.QUORUM:
        quorum.check_consume_arguments(args, queue, vhost)
        return
    if queue_type == stream.STREAM:
        stream.check_consume_arguments(args, queue, vhost)
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
        else stream.STREAM_QUEUE_ARGUMENTS if stream.is_stream(existing_args) \
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
