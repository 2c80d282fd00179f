"""Exchanges, bindings and routing for every vhost: a pure data structure.

Mirrors RabbitMQ 3.10.8:
  * ``rabbit_exchange:route/2`` (default exchange, exchange-to-exchange bindings followed with
    each exchange visited once, alternate exchanges used when an exchange's own type routed
    the message nowhere);
  * ``rabbit_exchange_type_direct`` / ``_fanout`` / ``_topic`` (the trie and its matching,
    ``split_topic_key``) / ``_headers`` (``headers_match`` with all, any, all-with-x and
    any-with-x, ``validate_binding``);
  * ``rabbit_binding`` (binding identity is source, key, destination and the *sorted*
    arguments; the implicit default-exchange bindings in listings);
  * ``rabbit_vhost:do_add`` (the exchanges every vhost is created with).

Routing is on the hot path, so results are cached: per topic exchange by routing key, and per
vhost by (exchange, routing key) for every route that did not pass a headers exchange. Every
change to a vhost clears that vhost's route cache; a bind/unbind clears the topic exchange's.

The router does not raise AMQP errors except where noted: callers check existence, permissions
and reserved names first (RabbitMQ's channel does), then mutate.

Replication: ``to_state()`` / ``from_state()`` give and take plain msgpack-able data, and
``apply(change)`` replays one change list (see ``change_*``). Field-table values that msgpack
cannot carry (Decimal, datetime) or would blur (bytes vs str, tuples) travel tagged: see
``pack_table`` / ``unpack_table``.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import functools
import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from actors.core.erl_terms import Atom, amqp_type_name, erl_p, field_term
from actors.core.errors import ChannelError, ConnectionError_

__all__ = [
    "EXCHANGE_TYPES", "INTERNAL_USER", "PREDECLARED_EXCHANGES", "ExchangeDef", "Binding",
    "Router", "check_exchange_type", "check_exchange_deletion", "validate_binding",
    "split_topic_key", "topic_matches",
    "headers_match", "header_routes", "pack_value", "unpack_value", "pack_table",
    "unpack_table", "change_add_vhost", "change_remove_vhost", "change_declare_exchange",
    "change_delete_exchange", "change_add_queue", "change_remove_queue", "change_bind",
    "change_unbind",
]

EXCHANGE_TYPES = frozenset({"direct", "fanout", "topic", "headers"})

# rabbit_vhost:do_add/3: (name, type, internal); all durable, none auto-delete.
PREDECLARED_EXCHANGES = (
    ("", "direct", False),
    ("amq.direct", "direct", False),
    ("amq.topic", "topic", False),
    ("amq.match", "headers", False),
    ("amq.headers", "headers", False),
    ("amq.fanout", "fanout", False),
    ("amq.rabbitmq.trace", "topic", True),
)

_CACHE_MAX = 16384  # entries per cache before it is simply cleared
_EMPTY: frozenset = frozenset()


def check_exchange_type(type_name: str) -> str:
    """rabbit_exchange:check_type/1: a type without an exchange module is a connection error
    (503), ``COMMAND_INVALID - unknown exchange type 'x-foo'`` when the name is no atom of
    RabbitMQ's VM (binary_to_existing_atom fails) and ``invalid exchange type 'foo'`` when it
    is one."""
    if type_name not in EXCHANGE_TYPES:
        kind = "invalid" if type_name in _rabbitmq_atoms() else "unknown"
        raise ConnectionError_(503, f"{kind} exchange type '{type_name}'")
    return type_name


@functools.cache
def _rabbitmq_atoms() -> frozenset[str]:
    """The atoms of a RabbitMQ 3.10.8 node (Debian's, no plugins) once booted and serving:
    ``rabbitmqctl eval`` of ``[atom_to_binary(binary_to_term(<<131,75,I:24>>)) || I <-
    lists:seq(0, erlang:system_info(atom_count) - 1)]``, one a line. Read only when a
    declare names a type that does not exist."""
    path = Path(__file__).with_name("rabbitmq_atoms.txt.gz")
    with gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape") as f:
        return frozenset(f.read().split("\n"))


def check_exchange_deletion(vhost: str, name: str) -> None:
    """rabbit_channel:check_not_default_exchange/1 then check_exchange_deletion/1: both refuse
    before any permission check, whether the exchange exists or not."""
    if name == "":
        raise ChannelError(403, "operation not permitted on the default exchange")
    if name.startswith("amq."):
        raise ChannelError(403, f"deletion of system exchange '{name}' in vhost '{vhost}' "
                                "not allowed")


# --------------------------------------------------------------------------------- records


INTERNAL_USER = "rmq-internal"  # rabbit's ?INTERNAL_USER: the broker acting on its own


@dataclass(frozen=True)
class ExchangeDef:
    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict = field(default_factory=dict, hash=False, compare=True)
    alternate_exchange: str | None = None
    # who declared it (RabbitMQ's exchange options' user: the management API's
    # user_who_performed_action); the predeclared ones and those of older logs: rmq-internal
    user: str = field(default=INTERNAL_USER, compare=False)


@dataclass(frozen=True)
class Binding:
    source: str
    dest_kind: str  # "queue" | "exchange"
    dest: str
    routing_key: str
    arguments: dict = field(default_factory=dict, hash=False)

    @property
    def destination(self) -> str:
        return self.dest


def _alternate(arguments: Mapping) -> str | None:
    ae = arguments.get("alternate-exchange") if arguments else None
    if isinstance(ae, str):
        return ae
    if isinstance(ae, (bytes, bytearray)):
        return bytes(ae).decode("utf-8", "surrogateescape")
    return None


# ------------------------------------------------------------------ canonical binding args


def _canon(v):
    """A hashable form of a field value that keeps the distinctions RabbitMQ's term
    comparison keeps (1 vs 1.0 vs true, str vs bytes, nested table order)."""
    if v is None:
        return ("V",)
    if isinstance(v, bool):
        return ("t", v)
    if isinstance(v, int):
        return ("I", v)
    if isinstance(v, float):
        return ("d", v)
    if isinstance(v, str):
        return ("S", v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("x", bytes(v))
    if isinstance(v, _decimal.Decimal):
        return ("D", str(v))
    if isinstance(v, _dt.datetime):
        return ("T", _ts(v))
    if isinstance(v, Mapping):
        return ("F", tuple((_key(k), _canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return ("A", tuple(_canon(x) for x in v))
    return ("?", repr(v))


def _key(k) -> str:
    return k if isinstance(k, str) else bytes(k).decode("utf-8", "surrogateescape")


def _ts(d: _dt.datetime) -> int:
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return int(d.timestamp())


def _canon_args(args: Mapping | None):
    """rabbit_misc:sort_field_table/1 then a hashable form: binding identity."""
    if not args:
        return ()
    return tuple(sorted(((_key(k), _canon(v)) for k, v in args.items()),
                        key=lambda kv: kv[0].encode("utf-8", "surrogateescape")))


# ------------------------------------------------------------------ msgpack-safe field values


def pack_value(v) -> list:
    """A field value as a msgpack-safe tagged list ``[tag, payload]``: ``["S", str]``, ``["x",
    bytes]``, ``["I", int]``, ``["t", bool]``, ``["d", float]``, ``["D", "1.50"]``, ``["T",
    seconds]`` (timezone-aware UTC on the way back), ``["F", [[key, packed], ...]]``, ``["A",
    [packed, ...]]``, ``["V", None]``."""
    if v is None:
        return ["V", None]
    if isinstance(v, bool):
        return ["t", v]
    if isinstance(v, int):
        return ["I", v]
    if isinstance(v, float):
        return ["d", v]
    if isinstance(v, str):
        return ["S", v]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ["x", bytes(v)]
    if isinstance(v, _decimal.Decimal):
        return ["D", str(v)]
    if isinstance(v, _dt.datetime):
        return ["T", _ts(v)]
    if isinstance(v, Mapping):
        return ["F", pack_table(v)]
    if isinstance(v, (list, tuple)):
        return ["A", [pack_value(x) for x in v]]
    raise TypeError(f"not a field value: {v!r}")


def unpack_value(p):
    tag, x = p[0], p[1]
    if tag in ("S", "x", "I", "t", "d", "V"):
        return bytes(x) if tag == "x" else x
    if tag == "D":
        return _decimal.Decimal(x)
    if tag == "T":
        return _dt.datetime.fromtimestamp(x, _dt.timezone.utc)
    if tag == "F":
        return unpack_table(x)
    if tag == "A":
        return [unpack_value(y) for y in x]
    raise ValueError(f"bad packed field value {p!r}")


def pack_table(t: Mapping | None) -> list:
    """A field table as ``[[key, packed value], ...]`` (order kept)."""
    return [[_key(k), pack_value(v)] for k, v in (t or {}).items()]


def unpack_table(p) -> dict:
    if isinstance(p, Mapping):  # tolerate a plain table
        return dict(p)
    return {k: unpack_value(v) for k, v in (p or [])}


# ------------------------------------------------------------------------------------ topic


def split_topic_key(key: str) -> list[str]:
    """rabbit_exchange_type_topic:split_topic_key/1: "" has no words, "a..b" has an empty
    middle word, "." is two empty words."""
    if key == "":
        return []
    return key.split(".")


class _TNode:
    __slots__ = ("children", "dests")

    def __init__(self):
        self.children: dict[str, _TNode] = {}
        self.dests: dict[tuple, int] = {}  # (kind, name) -> number of bindings ending here


def _trie_match(root: _TNode, words: list[str]) -> set:
    """rabbit_exchange_type_topic:trie_match/2, with (node, position) pairs visited once so a
    pattern with many '#' cannot blow up (the result is a set either way)."""
    out: set = set()
    seen: set = set()
    n = len(words)
    stack = [(root, 0)]
    while stack:
        node, i = stack.pop()
        k = (id(node), i)
        if k in seen:
            continue
        seen.add(k)
        ch = node.children
        if i == n:
            if node.dests:
                out.update(node.dests)
            h = ch.get("#")
            if h is not None:
                stack.append((h, n))
            continue
        c = ch.get(words[i])
        if c is not None:
            stack.append((c, i + 1))
        c = ch.get("*")
        if c is not None:
            stack.append((c, i + 1))
        c = ch.get("#")
        if c is not None:
            for j in range(i, n + 1):
                stack.append((c, j))
    return out


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Whether a topic binding key matches a routing key (reference, used by tests)."""
    root = _TNode()
    node = root
    for w in split_topic_key(pattern):
        node = node.children.setdefault(w, _TNode())
    node.dests[("queue", "q")] = 1
    return bool(_trie_match(root, split_topic_key(routing_key)))


# ---------------------------------------------------------------------------------- headers

_X_MATCH = ("all", "any", "all-with-x", "any-with-x")


def validate_binding(exchange_type: str, arguments: Mapping | None) -> None:
    """rabbit_exchange_type_headers:validate_binding/2 (the other types accept any binding):
    406 ``Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or
    any-with-x`` / ``Invalid x-match field type signedint (value 5); expected longstr``."""
    if exchange_type != "headers" or not arguments or "x-match" not in arguments:
        return
    v = arguments["x-match"]
    t = amqp_type_name(v)
    if t == "longstr":
        if v in _X_MATCH:
            return
        raise ChannelError(406, f"Invalid x-match field value {erl_p(v.encode())}; expected "
                                "all, any, all-with-x, or any-with-x")
    raise ChannelError(406, f"Invalid x-match field type {erl_p(Atom(t))} (value "
                            f"{erl_p(field_term(v, t))}); expected longstr")


def _header_term(v):
    """The term headers_match/5 compares with ``==`` for a top-level header value: the value
    without its type (a timestamp is its seconds, so ``T 5`` equals ``l 5``), tables and arrays
    with the type of every element (``[{timestamp,5}]`` differs from ``[{long,5}]``), as
    erl_terms.field_term builds them; a boolean is tagged, as Erlang's true is no integer."""
    if v.__class__ is str or v.__class__ is int:
        return v.encode("utf-8", "surrogateescape") if v.__class__ is str else v
    if isinstance(v, bool):
        return (_BOOL, v)
    return field_term(v, amqp_type_name(v))


_BOOL = Atom("bool")


def _compile_headers(args: Mapping | None):
    args = args or {}
    xm = args.get("x-match")
    mode = xm if isinstance(xm, str) and xm in _X_MATCH else "all"
    with_x = mode.endswith("-with-x")
    items = tuple((_key(k), None if v is None else _header_term(v), v is None)
                  for k, v in args.items()
                  if _key(k) != "x-match" and (with_x or not _key(k).startswith("x-")))
    return mode.startswith("all"), items


def _headers_match(compiled, headers: Mapping) -> bool:
    is_all, items = compiled
    if is_all:
        for k, term, void in items:
            if k not in headers:
                return False
            if not void and term != _header_term(headers[k]):
                return False
        return True
    for k, term, void in items:
        if k in headers and (void or term == _header_term(headers[k])):
            return True
    return False


def headers_match(binding_args: Mapping | None, headers: Mapping | None) -> bool:
    """rabbit_exchange_type_headers:headers_match/2: binding keys starting with "x-" are
    ignored unless x-match is all-with-x / any-with-x; a void (None) binding value matches on
    presence; values compare as Erlang ``==`` on the terms RabbitMQ holds (``_header_term``)."""
    return _headers_match(_compile_headers(binding_args), headers or {})


def header_routes(headers: Mapping | None) -> list[str]:
    """rabbit_basic:header_routes/1: the extra routing keys of the CC then BCC headers (string
    members only). A message's routing keys are ``[routing_key] + header_routes(headers)``;
    pass that list to ``Router.route`` for sender-selected distribution."""
    if not headers:
        return []
    out = []
    for h in ("CC", "BCC"):
        v = headers.get(h)
        if isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, str))
    return out


# ----------------------------------------------------------------------------- per-exchange


class _Source:
    """An exchange with the bindings it is the source of, indexed for its type."""

    __slots__ = ("x", "bindings", "index", "topic_cache")

    def __init__(self, x: ExchangeDef):
        self.x = x
        self.bindings: dict[tuple, Binding] = {}  # identity -> Binding (insertion order)
        t = x.type
        if t == "topic":
            self.index: Any = _TNode()
        elif t == "headers":
            self.index = {}  # identity -> (dest, compiled)
        else:
            self.index = {}  # direct: key -> {dest: n}; fanout: dest -> n
        self.topic_cache: dict[str, frozenset] = {}

    def add(self, ident, b: Binding) -> None:
        self.bindings[ident] = b
        dest = (b.dest_kind, b.dest)
        t = self.x.type
        if t == "direct":
            d = self.index.setdefault(b.routing_key, {})
            d[dest] = d.get(dest, 0) + 1
        elif t == "fanout":
            self.index[dest] = self.index.get(dest, 0) + 1
        elif t == "topic":
            node = self.index
            for w in split_topic_key(b.routing_key):
                nxt = node.children.get(w)
                if nxt is None:
                    nxt = node.children[w] = _TNode()
                node = nxt
            node.dests[dest] = node.dests.get(dest, 0) + 1
            self.topic_cache.clear()
        else:
            self.index[ident] = (dest, _compile_headers(b.arguments))

    def remove(self, ident) -> Binding:
        b = self.bindings.pop(ident)
        dest = (b.dest_kind, b.dest)
        t = self.x.type
        if t == "direct":
            d = self.index[b.routing_key]
            _dec(d, dest)
            if not d:
                del self.index[b.routing_key]
        elif t == "fanout":
            _dec(self.index, dest)
        elif t == "topic":
            path = [self.index]
            words = split_topic_key(b.routing_key)
            for w in words:
                path.append(path[-1].children[w])
            _dec(path[-1].dests, dest)
            for i in range(len(words), 0, -1):  # prune empty nodes
                node = path[i]
                if node.dests or node.children:
                    break
                del path[i - 1].children[words[i - 1]]
            self.topic_cache.clear()
        else:
            del self.index[ident]
        return b

    def route(self, keys: list[str], headers: Mapping | None):
        t = self.x.type
        if t == "direct":
            idx = self.index
            if len(keys) == 1:
                d = idx.get(keys[0])
                return d.keys() if d else ()
            out = set()
            for k in keys:
                d = idx.get(k)
                if d:
                    out.update(d)
            return out
        if t == "fanout":
            return self.index.keys()
        if t == "topic":
            cache = self.topic_cache
            if len(keys) == 1:
                k = keys[0]
                r = cache.get(k)
                if r is None:
                    if len(cache) >= _CACHE_MAX:
                        cache.clear()
                    r = cache[k] = frozenset(_trie_match(self.index, split_topic_key(k)))
                return r
            out = set()
            for k in keys:
                out |= self.route([k], None)
            return out
        h = headers or {}
        return {dest for dest, compiled in self.index.values() if _headers_match(compiled, h)}


def _dec(d: dict, k) -> None:
    n = d[k] - 1
    if n:
        d[k] = n
    else:
        del d[k]


class _VHost:
    __slots__ = ("sources", "queues", "by_dest", "cache", "policy_ae")

    def __init__(self):
        self.sources: dict[str, _Source] = {}  # exchange name -> _Source
        self.queues: set[str] = set()
        self.by_dest: dict[tuple, dict] = {}  # (kind, name) -> {identity: None}
        self.cache: dict = {}  # (exchange, routing_key) -> frozenset of queue names
        self.policy_ae: dict[str, str] = {}  # exchange -> alternate-exchange of its policy


# ------------------------------------------------------------------------------------ router


class Router:
    """Exchanges, queues (names only) and bindings of every vhost."""

    def __init__(self):
        self._vhosts: dict[str, _VHost] = {}

    # --- vhosts ----------------------------------------------------------------------------
    def add_vhost(self, vhost: str) -> bool:
        """Create a vhost with RabbitMQ's predeclared exchanges. False if it exists."""
        if vhost in self._vhosts:
            return False
        self._vhosts[vhost] = _VHost()
        for name, type_, internal in PREDECLARED_EXCHANGES:
            self.declare_exchange(vhost, name, type_, True, False, internal, {})
        return True

    def remove_vhost(self, vhost: str) -> bool:
        return self._vhosts.pop(vhost, None) is not None

    def has_vhost(self, vhost: str) -> bool:
        return vhost in self._vhosts

    def vhosts(self) -> list[str]:
        return list(self._vhosts)

    def _vh(self, vhost: str) -> _VHost:
        vh = self._vhosts.get(vhost)
        if vh is None:
            raise KeyError(f"no vhost '{vhost}'")
        return vh

    # --- exchanges -------------------------------------------------------------------------
    def declare_exchange(self, vhost: str, name: str, type: str, durable: bool = True,
                         auto_delete: bool = False, internal: bool = False,
                         arguments: Mapping | None = None, user: str = INTERNAL_USER) -> bool:
        """Create an exchange; False (and no change) if one of that name exists: equivalence
        is the caller's (queue_args.assert_exchange_equivalent). ValueError on a type outside
        EXCHANGE_TYPES (see check_exchange_type for the AMQP error)."""
        vh = self._vh(vhost)
        if name in vh.sources:
            return False
        if type not in EXCHANGE_TYPES:
            raise ValueError(f"unknown exchange type '{type}'")
        args = unpack_table(arguments) if isinstance(arguments, list) else dict(arguments or {})
        x = ExchangeDef(vhost, name, type, bool(durable), bool(auto_delete), bool(internal),
                        args, _alternate(args), user or INTERNAL_USER)
        vh.sources[name] = _Source(x)
        vh.cache.clear()
        return True

    def delete_exchange(self, vhost: str, name: str) -> list[str] | None:
        """Delete an exchange and every binding it is the source or the destination of.
        Returns None if there was no such exchange, else the auto-delete exchanges that lost
        their last binding as a source on the way (RabbitMQ deletes those too: the caller
        does, with delete_exchange, so that the deletions are broadcast)."""
        vh = self._vhosts.get(vhost)
        if vh is None or name not in vh.sources:
            return None
        src = vh.sources.pop(name)
        for ident, b in src.bindings.items():
            self._unindex_dest(vh, ident, b)
        victims = self._remove_dest(vh, ("exchange", name))
        vh.cache.clear()
        return [v for v in victims if v != name]

    def exchange(self, vhost: str, name: str) -> ExchangeDef | None:
        vh = self._vhosts.get(vhost)
        if vh is None:
            return None
        s = vh.sources.get(name)
        return s.x if s is not None else None

    def exchanges(self, vhost: str) -> dict[str, ExchangeDef]:
        vh = self._vhosts.get(vhost)
        return {} if vh is None else {n: s.x for n, s in vh.sources.items()}

    def list_exchanges(self, vhost: str) -> list[ExchangeDef]:
        return list(self.exchanges(vhost).values())

    # --- queues ----------------------------------------------------------------------------
    def add_queue(self, vhost: str, name: str) -> bool:
        vh = self._vh(vhost)
        if name in vh.queues:
            return False
        vh.queues.add(name)
        vh.cache.clear()
        return True

    def remove_queue(self, vhost: str, name: str) -> list[str]:
        """Forget a queue and remove every binding to it. Returns the auto-delete exchanges
        that lost their last binding as a source (to be deleted by the caller)."""
        vh = self._vhosts.get(vhost)
        if vh is None:
            return []
        vh.queues.discard(name)
        victims = self._remove_dest(vh, ("queue", name))
        vh.cache.clear()
        return victims

    def has_queue(self, vhost: str, name: str) -> bool:
        vh = self._vhosts.get(vhost)
        return vh is not None and name in vh.queues

    def list_queues(self, vhost: str) -> list[str]:
        vh = self._vhosts.get(vhost)
        return [] if vh is None else sorted(vh.queues)

    # --- bindings --------------------------------------------------------------------------
    @staticmethod
    def _ident(source, dest_kind, dest, routing_key, arguments):
        return (source, dest_kind, dest, routing_key, _canon_args(arguments))

    def bind(self, vhost: str, source: str, dest_kind: str, dest: str, routing_key: str,
             arguments: Mapping | None = None) -> bool:
        """Add a binding; False if an identical one exists (same source, destination, key and
        arguments as a sorted table). KeyError if the vhost or the source exchange does not
        exist; ValueError for the default exchange as source, or a bad dest_kind. Destination
        existence, validate_binding and permissions are the caller's."""
        vh = self._vh(vhost)
        if dest_kind not in ("queue", "exchange"):
            raise ValueError(f"bad destination kind {dest_kind!r}")
        if source == "":
            raise ValueError("operation not permitted on the default exchange")
        src = vh.sources.get(source)
        if src is None:
            raise KeyError(f"no exchange '{source}' in vhost '{vhost}'")
        args = unpack_table(arguments) if isinstance(arguments, list) else dict(arguments or {})
        ident = self._ident(source, dest_kind, dest, routing_key, args)
        if ident in src.bindings:
            return False
        b = Binding(source, dest_kind, dest, routing_key, args)
        src.add(ident, b)
        vh.by_dest.setdefault((dest_kind, dest), {})[ident] = None
        vh.cache.clear()
        return True

    def unbind(self, vhost: str, source: str, dest_kind: str, dest: str, routing_key: str,
               arguments: Mapping | None = None) -> bool:
        """Remove a binding; False if there was none. The caller then deletes the source if it
        is auto-delete and ``has_bindings_from`` is now False."""
        vh = self._vhosts.get(vhost)
        if vh is None:
            return False
        src = vh.sources.get(source)
        if src is None:
            return False
        args = unpack_table(arguments) if isinstance(arguments, list) else (arguments or {})
        ident = self._ident(source, dest_kind, dest, routing_key, args)
        if ident not in src.bindings:
            return False
        b = src.remove(ident)
        self._unindex_dest(vh, ident, b)
        vh.cache.clear()
        return True

    def has_binding(self, vhost: str, source: str, dest_kind: str, dest: str,
                    routing_key: str, arguments: Mapping | None = None) -> bool:
        vh = self._vhosts.get(vhost)
        src = vh.sources.get(source) if vh is not None else None
        return src is not None and \
            self._ident(source, dest_kind, dest, routing_key, arguments) in src.bindings

    @staticmethod
    def _unindex_dest(vh: _VHost, ident, b: Binding) -> None:
        key = (b.dest_kind, b.dest)
        d = vh.by_dest.get(key)
        if d is not None:
            d.pop(ident, None)
            if not d:
                del vh.by_dest[key]

    @staticmethod
    def _remove_dest(vh: _VHost, key: tuple) -> list[str]:
        """Remove every binding to a destination; return auto-delete sources left unbound."""
        idents = vh.by_dest.pop(key, None)
        if not idents:
            return []
        touched = []
        for ident in idents:
            src = vh.sources.get(ident[0])
            if src is not None and ident in src.bindings:
                src.remove(ident)
                if ident[0] not in touched:
                    touched.append(ident[0])
        return [s for s in touched
                if vh.sources[s].x.auto_delete and not vh.sources[s].bindings]

    def bindings_of_source(self, vhost: str, source: str) -> list[Binding]:
        vh = self._vhosts.get(vhost)
        src = vh.sources.get(source) if vh is not None else None
        return [] if src is None else list(src.bindings.values())

    def bindings_of_destination(self, vhost: str, dest_kind: str, dest: str) -> list[Binding]:
        vh = self._vhosts.get(vhost)
        if vh is None:
            return []
        out = []
        for ident in vh.by_dest.get((dest_kind, dest), ()):
            src = vh.sources.get(ident[0])
            if src is not None and ident in src.bindings:
                out.append(src.bindings[ident])
        return out

    def has_bindings_from(self, vhost: str, exchange: str) -> bool:
        """rabbit_binding:has_for_source/1: the exchange is the source of some binding (used
        for exchange.delete if-unused and auto-delete)."""
        vh = self._vhosts.get(vhost)
        src = vh.sources.get(exchange) if vh is not None else None
        return bool(src is not None and src.bindings)

    def list_bindings(self, vhost: str, implicit: bool = False) -> list[Binding]:
        """The explicit bindings of a vhost, sorted like RabbitMQ's ordered route table
        (source, routing key, destination kind, destination). ``implicit=True`` puts the
        default exchange's implicit binding of each queue first, as rabbit_binding:list/1
        (and rabbitmqctl list_bindings) do."""
        vh = self._vhosts.get(vhost)
        if vh is None:
            return []
        out = [b for s in vh.sources.values() for b in s.bindings.values()]
        out.sort(key=lambda b: (b.source.encode("utf-8", "surrogateescape"),
                                b.routing_key.encode("utf-8", "surrogateescape"), b.dest_kind,
                                b.dest.encode("utf-8", "surrogateescape"),
                                repr(_canon_args(b.arguments))))
        if implicit:
            out = [Binding("", "queue", q, q, {}) for q in sorted(vh.queues)] + out
        return out

    def set_policy_alternates(self, vhost: str, alternates: Mapping[str, str]) -> None:
        """The alternate-exchange each exchange of `vhost` takes from its effective policy
        (used where its own `alternate-exchange` argument is absent)."""
        vh = self._vhosts.get(vhost)
        if vh is not None and vh.policy_ae != alternates:
            vh.policy_ae = dict(alternates)
            vh.cache.clear()

    # --- routing ---------------------------------------------------------------------------
    def route(self, vhost: str, exchange: str, routing_key: str | list[str],
              headers: Mapping | None = None) -> frozenset[str]:
        """The names of the queues a message published to ``exchange`` reaches.

        ``routing_key`` is the publish routing key, or the message's list of routing keys
        (``[routing_key] + header_routes(headers)`` for CC/BCC). The default exchange ("")
        yields the queues named by the keys that exist. Exchange-to-exchange bindings are
        followed, each exchange visited once; an exchange whose own type routes the message
        nowhere (no queue and no exchange destination) passes it to its alternate exchange.
        A missing vhost or exchange routes nowhere. The result is a frozenset shared with the
        cache: do not mutate it."""
        vh = self._vhosts.get(vhost)
        if vh is None:
            return _EMPTY
        single = isinstance(routing_key, str)
        if single:
            ck = (exchange, routing_key)
            hit = vh.cache.get(ck)
            if hit is not None:
                return hit
            keys = [routing_key]
        else:
            keys = list(routing_key)
        if exchange == "":
            qs = vh.queues
            result = frozenset(k for k in keys if k in qs)
            if single:
                if len(vh.cache) >= _CACHE_MAX:
                    vh.cache.clear()
                vh.cache[ck] = result
            return result
        src = vh.sources.get(exchange)
        if src is None:
            return _EMPTY
        queues: set[str] = set()
        cacheable = single
        seen = {exchange}
        work = [src]
        sources = vh.sources
        while work:
            s = work.pop()
            if s.x.type == "headers":
                cacheable = False
            dests = s.route(keys, headers)
            if not dests:
                ae = s.x.alternate_exchange  # the argument wins over the policy
                if ae is None:
                    ae = vh.policy_ae.get(s.x.name)
                if ae is not None:
                    dests = (("exchange", ae),)
            for kind, name in dests:
                if kind == "queue":
                    queues.add(name)
                elif name not in seen:
                    seen.add(name)
                    nxt = sources.get(name)
                    if nxt is not None:
                        work.append(nxt)
        result = frozenset(queues)
        if cacheable:
            if len(vh.cache) >= _CACHE_MAX:
                vh.cache.clear()
            vh.cache[ck] = result
        return result

    def alternates(self, vhost: str, exchange: str, routing_key: str | list[str],
                   headers: Mapping | None = None) -> list[str]:
        """The alternate exchanges a message published to ``exchange`` passes through on its
        way (route's walk, uncached: the event log asks, not the hot path), in order."""
        vh = self._vhosts.get(vhost)
        src = vh.sources.get(exchange) if vh is not None and exchange else None
        if src is None:
            return []
        keys = [routing_key] if isinstance(routing_key, str) else list(routing_key)
        used: list[str] = []
        seen = {exchange}
        work = [src]
        while work:
            s = work.pop()
            dests = s.route(keys, headers)
            if not dests:
                ae = s.x.alternate_exchange
                if ae is None:
                    ae = vh.policy_ae.get(s.x.name)
                if ae is not None:
                    if ae not in seen:
                        used.append(ae)
                    dests = (("exchange", ae),)
            for kind, name in dests:
                if kind != "queue" and name not in seen:
                    seen.add(name)
                    nxt = vh.sources.get(name)
                    if nxt is not None:
                        work.append(nxt)
        return used

    # --- replication -----------------------------------------------------------------------
    def to_state(self) -> dict:
        """Everything, as plain msgpack-able data::

            {"v": 1, "vhosts": {vhost: {
                "exchanges": [[name, type, durable, auto_delete, internal, packed_args,
                               user], ...],
                "queues": [name, ...],
                "bindings": [[source, dest_kind, dest, routing_key, packed_args], ...]}}}
        """
        out = {}
        for vhost, vh in self._vhosts.items():
            out[vhost] = {
                "exchanges": [[s.x.name, s.x.type, s.x.durable, s.x.auto_delete, s.x.internal,
                               pack_table(s.x.arguments), s.x.user]
                              for s in vh.sources.values()],
                "queues": sorted(vh.queues),
                "bindings": [[b.source, b.dest_kind, b.dest, b.routing_key,
                              pack_table(b.arguments)]
                             for s in vh.sources.values() for b in s.bindings.values()],
            }
        return {"v": 1, "vhosts": out}

    @classmethod
    def from_state(cls, state: Mapping) -> "Router":
        r = cls()
        for vhost, d in (state.get("vhosts") or {}).items():
            vh = r._vhosts[vhost] = _VHost()
            for name, type_, durable, auto_delete, internal, args, *user in d.get(
                    "exchanges", []):
                args = unpack_table(args)
                vh.sources[name] = _Source(ExchangeDef(vhost, name, type_, durable, auto_delete,
                                                       internal, args, _alternate(args),
                                                       *user))
            vh.queues.update(d.get("queues", []))
            for source, kind, dest, key, args in d.get("bindings", []):
                r.bind(vhost, source, kind, dest, key, unpack_table(args))
        return r

    def apply(self, change):
        """Replay one change (a list as made by the ``change_*`` functions; msgpack may have
        turned tuples into lists, both are accepted). Returns what the method returned."""
        op = change[0]
        f = _APPLY.get(op)
        if f is None:
            raise ValueError(f"unknown router change {op!r}")
        return f(self, *change[1:])


def _apply_declare(r, vhost, name, type_, durable, auto_delete, internal, args,
                   user=INTERNAL_USER):
    return r.declare_exchange(vhost, name, type_, durable, auto_delete, internal,
                              unpack_table(args), user)


_APPLY = {
    "add_vhost": lambda r, vhost: r.add_vhost(vhost),
    "remove_vhost": lambda r, vhost: r.remove_vhost(vhost),
    "declare_exchange": _apply_declare,
    "delete_exchange": lambda r, vhost, name: r.delete_exchange(vhost, name),
    "add_queue": lambda r, vhost, name: r.add_queue(vhost, name),
    "remove_queue": lambda r, vhost, name: r.remove_queue(vhost, name),
    "bind": lambda r, vhost, s, k, d, key, args: r.bind(vhost, s, k, d, key, unpack_table(args)),
    "unbind": lambda r, vhost, s, k, d, key, args: r.unbind(vhost, s, k, d, key,
                                                            unpack_table(args)),
}


# Change lists for Router.apply: only str/int/bool/None/bytes/float/list in them.
def change_add_vhost(vhost: str) -> list:
    return ["add_vhost", vhost]


def change_remove_vhost(vhost: str) -> list:
    return ["remove_vhost", vhost]


def change_declare_exchange(vhost: str, name: str, type: str, durable: bool = True,
                            auto_delete: bool = False, internal: bool = False,
                            arguments: Mapping | None = None,
                            user: str = INTERNAL_USER) -> list:
    return ["declare_exchange", vhost, name, type, bool(durable), bool(auto_delete),
            bool(internal), pack_table(arguments), user]


def change_delete_exchange(vhost: str, name: str) -> list:
    return ["delete_exchange", vhost, name]


def change_add_queue(vhost: str, name: str) -> list:
    return ["add_queue", vhost, name]


def change_remove_queue(vhost: str, name: str) -> list:
    return ["remove_queue", vhost, name]


def change_bind(vhost: str, source: str, dest_kind: str, dest: str, routing_key: str,
                arguments: Mapping | None = None) -> list:
    return ["bind", vhost, source, dest_kind, dest, routing_key, pack_table(arguments)]


def change_unbind(vhost: str, source: str, dest_kind: str, dest: str, routing_key: str,
                  arguments: Mapping | None = None) -> list:
    return ["unbind", vhost, source, dest_kind, dest, routing_key, pack_table(arguments)]
