"""Quorum queues (``x-queue-type=quorum``): the pure rules.

Mirrors what RabbitMQ's ``rabbit_quorum_queue.erl`` decides outside its Raft machine:
  * which arguments a quorum queue takes (``capabilities/0`` of 3.10.8: ``queue_arguments``
    and ``consumer_arguments``), checked by ``rabbit_amqqueue:check_declare_arguments/2`` with
    the validators of ``declare_args/0`` in their order, then ``check_arguments_key/4``, which
    refuses the arguments of other queue types with ``invalid arg 'x-max-priority' for queue
    'q' in vhost '/' of queue type rabbit_quorum_queue``;
  * ``declare/2``'s flag checks, in its order (``rabbit_queue_type_util:check_auto_delete/1``,
    ``check_exclusive/1``, ``check_non_durable/1``): ``invalid property 'auto-delete' for
    queue 'q' in vhost '/'``, ``'exclusive-owner'``, ``'non-durable'`` (406);
  * the group size (``get_default_quorum_initial_group_size/1``: the argument, else 3, the
    default ``quorum_cluster_size``), placed on at most as many nodes as the cluster has;
  * the delivery limit (``gather_policy_config/2``: argument and policy resolved by
    ``resolve_delivery_limit/2``, default 20 as RabbitMQ 4.0 has it; a negative limit is
    none);
  * when a publish is safe: once a majority of the members has it on disk (``ra``'s commit
    index), here the master's own sync plus the acknowledgements of ``majority - 1`` mirrors
    that wrote and synced it, one of which must be the oldest synchronised mirror
    (``confirmable_batch``);
  * who leads when the leader is gone: Raft's vote, the member with the most up to date log
    among a majority of the members, or nobody yet (``elect``, ``trim_logs``).

How Leveret builds them (docs/cluster.md, "Quorum queues"): a quorum queue is a durable queue
that stores every message whatever its delivery mode (quorum queues ignore it), whose mirrors
(its members besides the leader) write and sync every message before they acknowledge it, and
whose confirms wait for a majority of its members instead of all of them.

Leveret differences, each refused rather than accepted and ignored: ``x-dead-letter-strategy``
``at-least-once``, ``x-overflow`` ``reject-publish-dlx`` (RabbitMQ logs a warning and uses
drop-head), ``x-max-in-memory-length`` / ``x-max-in-memory-bytes`` (RabbitMQ 4 ignores them;
Leveret pages every queue by ``queue_page_bytes``) and a ``x-queue-leader-locator`` other than
``client-local`` (the leader is the declaring client's node). Leveret's ``x-consumer-timeout``
(S5) applies to quorum queues too, as RabbitMQ 4 has it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from actors.core import declare_args as da
from actors.core.declare_args import CLASSIC_QUEUE_ARGUMENTS, OTHER_QUEUE_TYPE_ARGUMENTS, QUORUM
from actors.core.erl_terms import Atom
from actors.core.errors import ChannelError, rs

__all__ = [
    "QUORUM", "QUORUM_TYPE", "QUORUM_QUEUE_ARGUMENTS", "QUORUM_CONSUMER_ARGUMENTS",
    "DEFAULT_GROUP_SIZE", "DEFAULT_DELIVERY_LIMIT", "queue_type", "is_quorum",
    "check_declare_arguments", "check_declare_flags", "check_consume_arguments", "group_size",
    "majority", "delivery_limit", "confirmable_batch", "check_consume_qos", "check_delete",
]

QUORUM_TYPE = "rabbit_quorum_queue"  # the module name RabbitMQ's texts print
DEFAULT_GROUP_SIZE = 3  # rabbit's quorum_cluster_size default
DEFAULT_DELIVERY_LIMIT = 20  # rabbit_quorum_queue's ?DEFAULT_DELIVERY_LIMIT (4.0)

# rabbit_quorum_queue:capabilities() queue_arguments (3.10.8), plus x-consumer-timeout (S5,
# a quorum queue argument in RabbitMQ 4). Also the list assert_args_equivalence compares for
# an existing quorum queue, in this order.
QUORUM_QUEUE_ARGUMENTS = (
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
    "x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
    "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
    "x-quorum-initial-group-size", "x-delivery-limit", "x-message-ttl",
    "x-queue-leader-locator", "x-consumer-timeout",
)
QUORUM_CONSUMER_ARGUMENTS = ("x-priority", "x-credit")


def queue_type(args: Mapping | None) -> str:
    """The queue type an argument table declares: ``classic`` unless x-queue-type says
    otherwise (bytes or str)."""
    t = (args or {}).get("x-queue-type", "classic")
    if isinstance(t, (bytes, bytearray)):
        t = bytes(t).decode("utf-8", "replace")
    return t if isinstance(t, str) else "classic"


def is_quorum(args: Mapping | None) -> bool:
    return queue_type(args) == QUORUM


# ----------------------------------------------------------------------- declare arguments


def _check_initial_group_size(v, args):
    # rabbit_amqqueue:check_initial_cluster_size_arg/2
    e = da.check_non_neg_int(v, args)
    if e is not None:
        return e
    return (Atom("value_zero"), v) if v == 0 else None


def _check_dlx_strategy(v, _args):
    return da.string_or(v, lambda s: (
        None if s == "at-most-once" else
        "x-dead-letter-strategy at-least-once is not implemented: Leveret dead-letters "
        "at-most-once" if s == "at-least-once" else Atom("invalid_dlx_strategy")))


def _check_overflow(v, _args):
    return da.string_or(v, lambda s: (
        None if s in ("drop-head", "reject-publish") else
        "x-overflow reject-publish-dlx is not supported by quorum queues: use drop-head or "
        "reject-publish" if s == "reject-publish-dlx" else Atom("invalid_overflow")))


def _check_in_memory(v, args):
    e = da.check_non_neg_int(v, args)
    if e is not None:
        return e
    return ("the in-memory limits of quorum queues are not implemented (RabbitMQ 4 ignores "
            "them): Leveret pages every queue's messages past queue_page_bytes")


def _check_leader_locator(v, _args):
    return da.string_or(v, lambda s: (
        None if s == "client-local" else
        f"queue leader locator '{s}' is not implemented: Leveret places every quorum queue's "
        "leader client-local" if s in ("balanced", "random", "least-leaders")
        else Atom("invalid_queue_locator_arg")))


def _check_delivery_limit(v, args):
    # RabbitMQ does not validate x-delivery-limit; an integer is all it reads (a negative
    # one is no limit, as RabbitMQ 4's resolve_delivery_limit/2 has it)
    return da.check_int(v, args)


# rabbit_amqqueue:declare_args/0 order, filtered to QUORUM_QUEUE_ARGUMENTS.
_VALIDATORS: tuple[tuple[str, da.Check], ...] = (
    ("x-expires", da.check_expires),
    ("x-message-ttl", da.check_message_ttl),
    ("x-dead-letter-exchange", da.check_dlxname),
    ("x-dead-letter-routing-key", da.check_dlxrk),
    ("x-dead-letter-strategy", _check_dlx_strategy),
    ("x-max-length", da.check_non_neg_int),
    ("x-max-length-bytes", da.check_non_neg_int),
    ("x-max-in-memory-length", _check_in_memory),
    ("x-max-in-memory-bytes", _check_in_memory),
    ("x-overflow", _check_overflow),
    ("x-single-active-consumer", da.check_bool),
    ("x-queue-type", da.check_queue_type),
    ("x-quorum-initial-group-size", _check_initial_group_size),
    ("x-queue-leader-locator", _check_leader_locator),
    ("x-delivery-limit", _check_delivery_limit),
    ("x-consumer-timeout", da.check_non_neg_int),
)


# rabbit_queue_type:arguments(queue_arguments) less a quorum queue's own: every other type's
# (Leveret's classic ones included: x-confirm-on, x-ha-mode, x-ha-params)
_OTHER_TYPES_ARGUMENTS = (frozenset(CLASSIC_QUEUE_ARGUMENTS) | OTHER_QUEUE_TYPE_ARGUMENTS) - \
    frozenset(QUORUM_QUEUE_ARGUMENTS)


def check_declare_arguments(args: Mapping, queue: str, vhost: str) -> None:
    """rabbit_amqqueue:check_declare_arguments/2 for a quorum queue (x-queue-type was checked
    already): each validator in order, then the arguments of other queue types."""
    da.check_type_arguments(args, queue, vhost, _VALIDATORS, _OTHER_TYPES_ARGUMENTS, QUORUM_TYPE)


def check_declare_flags(durable: bool, exclusive: bool, auto_delete: bool, queue: str,
                        vhost: str) -> None:
    """rabbit_quorum_queue:declare/2's checks, in order. ``durable`` as the channel passes
    it: false for an exclusive declare (``DurableDeclare andalso not ExclusiveDeclare``)."""
    for bad, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"),
                      (not durable, "non-durable")):
        if bad:
            raise ChannelError(406, f"invalid property '{prop}' for "
                                    f"{rs('queue', queue, vhost)}")


def check_consume_arguments(args: Mapping, queue: str, vhost: str) -> None:
    """rabbit_amqqueue:check_consume_arguments/3 for a quorum queue: x-priority is checked,
    Leveret's classic-only x-cancel-on-ha-failover and streams' x-stream-offset refused."""
    if "x-priority" in args:
        err = da.check_int(args["x-priority"], args)
        if err is not None:
            raise da.invalid_arg(queue, vhost, "x-priority", err)
    if "x-credit" in args:
        raise da.invalid_arg(queue, vhost, "x-credit", da.check_credit(args["x-credit"], args))
    for key in args:
        if key in ("x-cancel-on-ha-failover", "x-stream-offset"):
            raise ChannelError(406, f"invalid arg '{key}' for {rs('queue', queue, vhost)} "
                                    f"of queue type {QUORUM_TYPE}")


def check_consume_qos(channel_prefetch: int, queue: str, vhost: str) -> None:
    """rabbit_quorum_queue:consume/3 with the channel's limiter active (basic.qos global):
    rabbit_channel's ``540 NOT_IMPLEMENTED - queue 'q' in vhost '/' does not support global
    qos`` (a connection error)."""
    if channel_prefetch:
        raise ChannelError(540, f"{rs('queue', queue, vhost)} does not support global qos")


def check_delete(if_unused: bool, if_empty: bool, queue: str, vhost: str) -> None:
    """rabbit_quorum_queue:delete/4: queue.delete with if-unused or if-empty is not
    implemented for quorum queues (540, a connection error)."""
    for flag, name in ((if_unused, "if-unused"), (if_empty, "if-empty")):
        if flag:
            raise ChannelError(540, f"cannot delete {rs('queue', queue, vhost)}. queue.delete "
                                    f"operations with {name} flag set are not supported by "
                                    "quorum queues")


# ------------------------------------------------------------------------ members, confirms


def group_size(args: Mapping | None, cluster_size: int) -> int:
    """How many members (leader included) a quorum queue has: x-quorum-initial-group-size,
    else 3, at most the cluster's node count (1 on a lone node)."""
    n = (args or {}).get("x-quorum-initial-group-size", DEFAULT_GROUP_SIZE)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        n = DEFAULT_GROUP_SIZE
    return max(1, min(n, max(1, cluster_size)))


def majority(members: int) -> int:
    return members // 2 + 1


def delivery_limit(arg: Any, policy: Any) -> int | None:
    """The delivery limit of a quorum queue from its x-delivery-limit and the effective
    policy's delivery-limit (rabbit_queue_type_util:args_policy_lookup with
    resolve_delivery_limit/2: the smaller, unless one is negative, then the larger); neither:
    20. None (no limit) when the result is negative."""
    found = [v for v in (policy, arg) if isinstance(v, int) and not isinstance(v, bool)]
    if not found:
        return DEFAULT_DELIVERY_LIMIT
    if len(found) == 2:
        pol, a = found
        limit = max(pol, a) if pol < 0 or a < 0 else min(pol, a)
    else:
        limit = found[0]
    return None if limit < 0 else limit


def confirmable_batch(acked: Mapping[str, int], heir: str | None, needed: int) -> int:
    """The highest batch a quorum queue's master may confirm: ``acked`` is each synchronised
    mirror's last acknowledged batch (a mirror acknowledges a batch once it has written and
    synced it); ``needed`` the mirrors that make a majority with the master (``majority(group)
    - 1``); ``heir`` the oldest synchronised mirror, whose acknowledgement is needed too (when
    it is among ``acked``): it is one the log lists as a voter of an election (``elect``),
    where a mirror that has just finished its sync may not be listed yet. -1 when not enough
    mirrors are there."""
    if needed <= 0:
        return 1 << 62
    ranked = sorted(acked.values(), reverse=True)
    if len(ranked) < needed:
        return -1
    batch = ranked[needed - 1]
    if heir is not None and heir in acked:
        batch = min(batch, acked[heir])
    return batch


# ------------------------------------------------------------------------- choosing a leader
# RabbitMQ's quorum queues elect their leader with Raft (ra): a candidate needs the votes of a
# majority of the members, and a member votes only for a candidate whose log is at least as
# up to date as its own (last term, then last index). Leveret's metadata leader plays the
# election for the queue: it asks the members whose nodes are up for their log's end (one
# round trip, with a time-out) and decides with these two functions. Since a confirmed message
# is on a majority of the members, any majority of the members holds it, and the longest log
# among such a majority holds every confirmed message.


def elect(voters: Sequence[str], answers: Mapping[str, Any], size: int) -> str | None:
    """The member to lead a quorum queue whose leader is gone (or None: wait, as a Raft group
    without a majority does).

    ``voters``: the members whose logs count, in order of preference on a tie (the current
    leader first, then the other members oldest first); ``answers``: what each member that
    answered said of its log: ``(epoch, last_seq)`` (the promotion count of the leader it
    copied, the highest seq_id it wrote and synced), or None when it holds no complete log (a
    resync under way, nothing on disk); ``size``: the queue's group size. None when fewer than
    ``majority(size)`` voters answered, or none of them has a complete log."""
    votes = [v for v in voters if v in answers]
    if len(votes) < majority(size):
        return None
    best, best_pos = None, None
    for v in votes:
        pos = answers[v]
        if pos is None:
            continue
        pos = (int(pos[0]), int(pos[1]))
        if best_pos is None or pos > best_pos:
            best, best_pos = v, pos
    return best


def trim_logs(logs: Sequence[str], home: str | None, mirrors: Sequence[str],
              size: int) -> list:
    """The members besides the leader whose logs count (``logs``, oldest first) once a member
    was added: at most ``size - 1``, dropping first the oldest that is no longer a mirror (its
    node went down and another member replaced it: that one synchronised from the leader
    since, so it holds all the replaced one held that still counts). Never the leader."""
    out = []
    for x in logs:
        if x != home and x not in out:
            out.append(x)
    while len(out) > max(size - 1, 0):
        gone = next((x for x in out if x not in mirrors), None)
        if gone is None:
            break
        out.remove(gone)
    return out
