"""The argument checks every queue type shares, and which arguments each type takes.

Mirrors the validators of ``rabbit_amqqueue:declare_args/0`` (3.10.8) that the classic and the
quorum queue type both run (queue_args.py and quorum.py pick theirs from here, in RabbitMQ's
order), ``rabbit_amqqueue``'s ``invalid arg`` text, and the argument lists of
``rabbit_queue_type:arguments/1`` (each type's ``capabilities/0``) that ``check_arguments_key/4``
refuses on a queue of another type. A validator takes the value and the whole argument table
and returns None when the value is good, else the Erlang error term RabbitMQ prints.

Leveret's queue types are RabbitMQ's: ``classic``, ``quorum`` and ``stream``. Imports only
errors.py and erl_terms.py, so that every queue type's module can build on it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from actors.core.errors import ChannelError, rs
from actors.core.erl_terms import INT_TYPES, Atom, amqp_type_name, erl_p

__all__ = [
    "CLASSIC", "QUORUM", "STREAM", "QUEUE_TYPES", "MAX_EXPIRY", "CLASSIC_QUEUE_ARGUMENTS",
    "OTHER_QUEUE_TYPE_ARGUMENTS", "Check", "invalid_arg", "check_int", "check_bool",
    "check_non_neg_int", "check_expires", "check_message_ttl", "string_or", "check_dlxname",
    "check_dlxrk", "check_queue_type", "check_credit",
]

CLASSIC, QUORUM, STREAM = "classic", "quorum", "stream"
QUEUE_TYPES = (CLASSIC, QUORUM, STREAM)  # the x-queue-type values Leveret implements

# rabbit_misc:check_expiry/1: ten years in milliseconds.
MAX_EXPIRY = 315360000000

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

Check = Callable[[Any, Mapping], Any]  # returns None when ok, else the Erlang error term


def invalid_arg(queue: str, vhost: str, key: str, term) -> ChannelError:
    # "invalid arg '~s' for ~s: ~255p"
    return ChannelError(406, f"invalid arg '{key}' for {rs('queue', queue, vhost)}: {erl_p(term)}")


def check_type_arguments(args: Mapping, queue: str, vhost: str, validators, others,
                         queue_type: str) -> None:
    """rabbit_amqqueue:check_declare_arguments/2 for a queue type other than classic
    (x-queue-type was checked already): each of its validators in order, then `others`, the
    arguments of other queue types, refused by name."""
    for key, fun in validators:
        if key in args:
            err = fun(args[key], args)
            if err is not None:
                raise invalid_arg(queue, vhost, key, err)
    for key in args:
        if key in others:
            raise ChannelError(406, f"invalid arg '{key}' for {rs('queue', queue, vhost)} "
                                    f"of queue type {queue_type}")


def check_int(v, _args):
    t = amqp_type_name(v)
    if t in INT_TYPES:
        return None
    return f"expected integer, got {erl_p(Atom(t))}"


def check_bool(v, _args):
    t = amqp_type_name(v)
    return None if t == "bool" else (Atom("unacceptable_type"), Atom(t))


def check_non_neg_int(v, args):
    e = check_int(v, args)
    if e is not None:
        return e
    return None if v >= 0 else (Atom("value_negative"), v)


def _check_expiry(v):
    if v < 0:
        return (Atom("value_negative"), v)
    if v > MAX_EXPIRY:
        return (Atom("value_too_large"), v)
    return None


def check_expires(v, args):
    e = check_int(v, args)
    if e is not None:
        return e
    if v == 0:
        return (Atom("value_zero"), v)
    return _check_expiry(v)


def check_message_ttl(v, args):
    e = check_int(v, args)
    return e if e is not None else _check_expiry(v)


def string_or(v, ok: Callable[[str], Any]):
    t = amqp_type_name(v)
    if t != "longstr":
        return (Atom("unacceptable_type"), Atom(t))
    return ok(v)


def check_dlxname(v, _args):
    return string_or(v, lambda s: None)


def check_dlxrk(v, args):
    return string_or(v, lambda s: None if "x-dead-letter-exchange" in args
                     else Atom("routing_key_but_no_dlx_defined"))


def check_queue_type(v, _args):
    # RabbitMQ 3.10 accepts classic, quorum and stream, as Leveret does
    return string_or(v, lambda s: None if s in QUEUE_TYPES
                     else f"unsupported queue type '{s}'")


def check_credit(v, _args):
    # RabbitMQ 3.10 reads x-credit ({credit: long, drain: bool}) as AMQP 1.0 link credit
    # (rabbit_queue_consumers:parse_credit_args/2): credit that only basic.credit, a method
    # AMQP 0-9-1 does not have, can top up; any other table is ignored and a non-table crashes
    # the queue (541). Leveret speaks 0-9-1 only and refuses it.
    return ("x-credit is AMQP 1.0 link credit, not available over AMQP 0-9-1; "
            "use basic.qos prefetch")
