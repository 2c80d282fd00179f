"""Dead-lettering: the x-death bookkeeping, routing keys and cycle detection of RabbitMQ 3.10.

Mirrors ``rabbit_dead_letter.erl`` (3.10.8): ``make_msg/5``, ``update_x_death_header/2``,
``group_by_queue_and_reason/1``, ``detect_cycles/3`` and ``is_cycle/2``, with the header helpers
of ``rabbit_basic`` (``header_routes/1``, ``prepend_table_header/3``) and
``rabbit_misc:set_table_value/4`` (which re-sorts the whole header table by key).

What the caller does around these functions, as ``rabbit_dead_letter:publish/5`` does:

1. ``headers = dead_letter_headers(props.headers, queue, reason, msg_exchange, msg_routing_keys,
   props.expiration, now, dlx_routing_key)``;
2. remove the ``expiration`` property of the dead-lettered copy (RabbitMQ sets it to
   ``undefined``; the old value survives only as x-death's ``original-expiration``);
3. publish the copy to the queue's dead-letter exchange with routing keys
   ``dead_letter_routing(dlx_routing_key, msg_routing_keys)``; the copy's exchange becomes the
   DLX (so a later death records the DLX in x-death's ``exchange``);
4. drop the target queues that would make a cycle: ``detect_cycles(reason, headers, targets)``
   (or ``is_cycle(headers["x-death"], target, reason)`` per target) -- on the *new* headers;
5. deliver at most once (no publisher confirms, no mandatory).

RabbitMQ 3.10 has no x-last-death-* headers (they arrived in 3.13), only x-first-death-*. The
x-death entry for the same (queue, reason) is not refreshed when it is counted again: only its
``count`` changes (its ``time``, ``exchange``, ``routing-keys`` stay those of the first death),
and it moves to the front. 3.10 also reverses the order of the *other* entries whenever there
were two or more before (a quirk of group_by_queue_and_reason/1's fold); this is reproduced.
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterable, Mapping

from protocol.fields import Long

__all__ = ["REASONS", "dead_letter_headers", "dead_letter_routing", "death_routing_keys",
           "is_cycle", "detect_cycles"]

REASONS = ("rejected", "expired", "maxlen", "delivery_limit")


def _bkey(k) -> bytes:
    return k.encode("utf-8", "surrogateescape") if isinstance(k, str) else bytes(k)


def _sorted_table(t: Mapping) -> dict:
    """rabbit_misc:sort_field_table/1 (keys as binaries, bytewise)."""
    return dict(sorted(t.items(), key=lambda kv: _bkey(kv[0])))


def _same(a, b) -> bool:
    if isinstance(a, (str, bytes, bytearray)) and isinstance(b, (str, bytes, bytearray)):
        return _bkey(a) == _bkey(b)
    return a == b


def _matches(entry, queue, reason) -> bool:
    return isinstance(entry, Mapping) and _same(entry.get("queue"), queue) and \
        _same(entry.get("reason"), reason)


def _header_routes(headers: Mapping) -> list:
    out = []
    for h in ("CC", "BCC"):
        v = headers.get(h)
        if isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, str))  # {longstr, Route} only
    return out


def _group_by_queue_and_reason(tables: list) -> list:
    """rabbit_dead_letter:group_by_queue_and_reason/1: one entry per (queue, reason), the first
    seen, given a count of how many there were if it had none; with two or more tables the
    result comes out reversed (the fold prepends)."""
    tables = [t for t in tables if isinstance(t, Mapping)]
    if len(tables) <= 1:
        return tables
    seen = set()
    acc: list = []
    for t in tables:
        q, r = t.get("queue"), t.get("reason")
        key = (_bkey(q) if isinstance(q, (str, bytes)) else q,
               _bkey(r) if isinstance(r, (str, bytes)) else r)
        matches = [x for x in tables if _matches(x, q, r)]
        first = matches[0]
        if "count" not in first:
            first = {"count": Long(len(matches)), **first}
        if not acc:
            acc = [first]
        elif key not in seen:
            acc.insert(0, first)
        seen.add(key)
    return acc


def death_routing_keys(routing_keys: list[str], headers: Mapping | None) -> list[str]:
    """x-death's ``routing-keys``: the message's first routing key, then its CC and BCC
    header members (``[hd(RoutingKeys) | rabbit_basic:header_routes(Headers)]``)."""
    first = [routing_keys[0]] if routing_keys else []
    return first + _header_routes(headers or {})


def dead_letter_headers(headers: Mapping | None, queue: str, reason: str, exchange: str,
                        routing_keys: list[str], original_expiration: str | None, now: int,
                        dlx_routing_key: str | None = None) -> dict:
    """The dead-lettered copy's headers (a new dict; ``headers`` is not modified).

    ``queue``: the queue the message died in; ``reason``: ``rejected`` | ``expired`` |
    ``maxlen``; ``exchange`` / ``routing_keys``: the message's exchange and routing keys as it
    sits in the queue (the publish routing key first; for a message dead-lettered before,
    the DLX and the dead-letter routing keys); ``original_expiration``: its ``expiration``
    property or None; ``now``: seconds since the epoch; ``dlx_routing_key``: the queue's
    x-dead-letter-routing-key, when it has one the ``CC`` header is removed (as RabbitMQ
    does, so the copy is not also routed by CC).

    x-death entries are dicts with ``count`` (``fields.Long``, RabbitMQ's ``long``), ``reason``,
    ``queue``, ``time`` (a UTC ``datetime``, an AMQP timestamp), ``exchange``, ``routing-keys``
    (list of str) and ``original-expiration`` when the message had a per-message TTL. Pass
    headers decoded with ``typed=True`` and the others keep their wire types.
    """
    h = dict(headers or {})
    info = {
        "reason": reason,
        "queue": queue,
        "time": _dt.datetime.fromtimestamp(int(now), _dt.timezone.utc),
        "exchange": exchange,
        "routing-keys": death_routing_keys(routing_keys, h),
    }
    if original_expiration is not None:
        info["original-expiration"] = original_expiration
    xd = h.get("x-death")
    if "x-death" not in h:
        h["x-first-death-reason"] = reason
        h["x-first-death-queue"] = queue
        h["x-first-death-exchange"] = exchange
        h["x-death"] = [{"count": Long(1), **info}]
    elif isinstance(xd, (list, tuple)):
        grouped = _group_by_queue_and_reason(list(xd))
        matches = [t for t in grouped if _matches(t, queue, reason)]
        others = [t for t in grouped if not _matches(t, queue, reason)]
        if matches:
            entry = dict(matches[0])
            c = entry.get("count")
            entry["count"] = Long(c + 1 if isinstance(c, int) and not isinstance(c, bool) else 1)
        else:
            entry = {"count": Long(1), **info}
        h["x-death"] = [_sorted_table(entry)] + others
    else:
        # "Message has invalid x-death header ... Resetting header"
        h["x-death"] = [{"count": Long(1), **info}]
    h = _sorted_table(h)
    if dlx_routing_key is not None:
        h.pop("CC", None)
    return h


def dead_letter_routing(dlx_routing_key: str | None, original_routing_keys: list[str]) -> list[str]:
    """The routing keys the dead-lettered copy is published with: ``[dlx_routing_key]`` when
    the queue has x-dead-letter-routing-key, else the message's own routing keys (its publish
    key and CC/BCC routes). Route with ``Router.route(vhost, dlx, keys, headers)``."""
    if dlx_routing_key is not None:
        return [dlx_routing_key]
    return list(original_routing_keys)


def is_cycle(x_death, queue: str, reason: str | None = None) -> bool:
    """rabbit_dead_letter:is_cycle/2 for one target queue.

    ``x_death``: the x-death list of the *dead-lettered copy* (``dead_letter_headers``'
    result), ``queue``: a queue the DLX routed the copy to. True when ``queue`` already appears
    in x-death and no death up to and including its first appearance was a rejection: such a
    copy would go round forever without a consumer involved, and RabbitMQ drops it for that
    queue (logging "Dead-letter queues cycle detected"). Deaths by ``rejected`` never count
    as cycles (``reason='rejected'`` returns False without looking), nor does a
    non-list x-death.
    """
    if reason == "rejected":
        return False
    if not isinstance(x_death, (list, tuple)):
        return False
    prefix = []
    for entry in x_death:
        prefix.append(entry)
        if isinstance(entry, Mapping) and _same(entry.get("queue"), queue):
            return all(isinstance(e, Mapping) and not _same(e.get("reason"), "rejected")
                       for e in prefix)
    return False


def detect_cycles(reason: str, headers: Mapping | None,
                  queues: Iterable[str]) -> tuple[list[str], list[list[str]]]:
    """rabbit_dead_letter:detect_cycles/3: split the DLX's target queues into those to
    deliver to and the cycles (each ``[target | queues named in x-death]``, for logging)."""
    queues = list(queues)
    if reason == "rejected" or not headers:
        return queues, []
    deaths = headers.get("x-death")
    if not isinstance(deaths, (list, tuple)):
        return queues, []
    ok, cycles = [], []
    old = [d.get("queue") for d in deaths if isinstance(d, Mapping)
           and isinstance(d.get("queue"), str)]
    for q in queues:
        if is_cycle(deaths, q, reason):
            cycles.append([q] + old)
        else:
            ok.append(q)
    return ok, cycles
