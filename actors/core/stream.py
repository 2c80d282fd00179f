"""Stream queues (``x-queue-type=stream``): the pure rules.

Mirrors what RabbitMQ 3.10.8's ``rabbit_stream_queue.erl`` and osiris decide outside their
processes:
  * which arguments a stream takes (``capabilities/0``: ``queue_arguments`` and
    ``consumer_arguments``), checked by ``rabbit_amqqueue:check_declare_arguments/2`` with the
    validators of ``declare_args/0`` in their order, then ``check_arguments_key/4`` (``invalid
    arg 'x-message-ttl' for queue 's' in vhost '/' of queue type rabbit_stream_queue``);
  * ``declare/2``'s flag checks (auto-delete, exclusive, non-durable) and
    ``check_max_segment_size_bytes/1``;
  * ``consume/3``'s refusals (no prefetch, automatic acknowledgement, global qos) and
    ``dequeue/4``'s, ``purge/1``'s and ``settle/4``'s (nack and reject) texts;
  * ``rabbit_amqqueue:check_max_age/1`` (``Y M D h m s``) and ``parse_offset_arg/1``
    (``first``, ``last``, ``next``, an offset, an AMQP timestamp, an interval);
  * where a reader starts (osiris ``init_reader``: chunk granularity for ``last`` and a
    timestamp, the offset itself for a number, clamped to the log);
  * retention (osiris ``osiris_log`` ``evaluate_retention``: whole segments, oldest first,
    never the segment being written);
  * RabbitMQ 3.13's stream filtering: a Bloom filter per chunk of the values
    (``x-stream-filter-value``) its messages carry; a consumer with ``x-stream-filter``
    skips the chunks whose filter holds none of its values, and with
    ``x-stream-match-unfiltered`` also reads those holding messages without a value.

Pure: no I/O; the stream's storage is actors/store/stream_log.py, its actor
actors/queue/stream_queue.py.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from typing import Mapping, NamedTuple, Sequence

from actors.core import declare_args as da
from actors.core.declare_args import CLASSIC_QUEUE_ARGUMENTS, OTHER_QUEUE_TYPE_ARGUMENTS
from actors.core.erl_terms import Atom, amqp_type_name, field_term
from actors.core.errors import ChannelError, ConnectionError_, rs
from protocol.properties import with_long_header

__all__ = [
    "STREAM", "STREAM_TYPE", "STREAM_QUEUE_ARGUMENTS", "STREAM_CONSUMER_ARGUMENTS",
    "MAX_SEGMENT_SIZE", "DEFAULT_SEGMENT_SIZE", "DEFAULT_FILTER_SIZE", "is_stream",
    "check_max_age", "check_declare_arguments", "check_declare_flags",
    "check_consume",
    "check_consume_arguments", "get_refused", "purge_refused", "settle_refused",
    "OffsetSpec", "parse_offset", "ConsumeSpec", "consume_spec", "LogView", "start_offset",
    "Segment", "segments_to_drop", "BloomFilter", "chunk_filter", "chunk_matches",
    "settings", "StreamSettings", "with_offset_header", "filter_value",
]

STREAM = "stream"
STREAM_TYPE = "rabbit_stream_queue"  # the module name RabbitMQ's texts print
MAX_SEGMENT_SIZE = 3_000_000_000  # rabbit.hrl ?MAX_STREAM_MAX_SEGMENT_SIZE
DEFAULT_SEGMENT_SIZE = 500_000_000  # osiris' max_segment_size_bytes default
DEFAULT_FILTER_SIZE = 16  # RabbitMQ 3.13's x-stream-filter-size-bytes default
FILTER_SIZE_RANGE = (16, 255)  # ...and its bounds

# rabbit_stream_queue:capabilities() queue_arguments (3.10.8), plus 3.13's
# x-stream-filter-size-bytes; also the list assert_args_equivalence compares for a stream.
STREAM_QUEUE_ARGUMENTS = (
    "x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size", "x-queue-leader-locator", "x-stream-filter-size-bytes",
)
# consumer_arguments (3.10.8: x-stream-offset, x-credit), plus 3.13's filter arguments
STREAM_CONSUMER_ARGUMENTS = ("x-stream-offset", "x-credit", "x-stream-filter",
                             "x-stream-match-unfiltered")
_OTHER_CONSUMER_ARGUMENTS = ("x-priority", "x-cancel-on-ha-failover")

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "D": 86_400_000,
            "M": 30 * 86_400_000, "Y": 365 * 86_400_000}


def is_stream(args: Mapping | None) -> bool:
    t = (args or {}).get("x-queue-type")
    if isinstance(t, (bytes, bytearray)):
        t = bytes(t).decode("utf-8", "replace")
    return t == STREAM


def check_max_age(value) -> int | None:
    """rabbit_amqqueue:check_max_age/1: ``"7D"`` -> 604800000 ms; None when invalid (a
    positive integer and one unit of Y M D h m s, nothing else)."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"([0-9]+)(Y|M|D|h|m|s)", value)
    if m is None or int(m.group(1)) <= 0:
        return None
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


# ----------------------------------------------------------------------- declare arguments


def _check_max_age(v, _args):
    t = amqp_type_name(v)
    if t != "longstr":
        return (Atom("unacceptable_type"), Atom(t))
    return None if check_max_age(v) is not None else Atom("invalid_max_age")


def _check_cluster_size(v, args):
    # rabbit_amqqueue:check_initial_cluster_size_arg/2
    e = da.check_non_neg_int(v, args)
    if e is not None:
        return e
    return (Atom("value_zero"), v) if v == 0 else None


def _check_leader_locator(v, _args):
    return da.string_or(v, lambda s: (
        None if s == "client-local" else
        f"queue leader locator '{s}' is not implemented: Leveret places every stream's "
        "leader client-local" if s in ("balanced", "random", "least-leaders")
        else Atom("invalid_queue_locator_arg")))


def _check_filter_size(v, args):
    e = da.check_int(v, args)
    if e is not None:
        return e
    lo, hi = FILTER_SIZE_RANGE
    return None if lo <= v <= hi else (Atom("value_out_of_range"), v)


# rabbit_amqqueue:declare_args/0 order, filtered to STREAM_QUEUE_ARGUMENTS.
_VALIDATORS: tuple[tuple[str, da.Check], ...] = (
    ("x-max-length-bytes", da.check_non_neg_int),
    ("x-queue-type", da.check_queue_type),
    ("x-max-age", _check_max_age),
    ("x-stream-max-segment-size-bytes", da.check_non_neg_int),
    ("x-initial-cluster-size", _check_cluster_size),
    ("x-queue-leader-locator", _check_leader_locator),
    ("x-stream-filter-size-bytes", _check_filter_size),
)

# every other type's arguments (Leveret's classic ones included)
_OTHER_TYPES_ARGUMENTS = (frozenset(CLASSIC_QUEUE_ARGUMENTS) | OTHER_QUEUE_TYPE_ARGUMENTS |
                          {"x-dead-letter-strategy", "x-quorum-initial-group-size",
                           "x-max-in-memory-length", "x-max-in-memory-bytes"}) - \
    frozenset(STREAM_QUEUE_ARGUMENTS)


def check_declare_arguments(args: Mapping, queue: str, vhost: str) -> None:
    """rabbit_amqqueue:check_declare_arguments/2 for a stream (x-queue-type was checked
    already): each validator in order, then the arguments of other queue types."""
    da.check_type_arguments(args, queue, vhost, _VALIDATORS, _OTHER_TYPES_ARGUMENTS, STREAM_TYPE)


def check_declare_flags(durable: bool, exclusive: bool, auto_delete: bool, args: Mapping,
                        queue: str, vhost: str) -> None:
    """rabbit_stream_queue:declare/2's checks, in order: auto-delete, exclusive,
    non-durable (``durable`` false for an exclusive declare, as the channel passes it), then
    check_max_segment_size_bytes/1."""
    for bad, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"),
                      (not durable, "non-durable")):
        if bad:
            raise ChannelError(406, f"invalid property '{prop}' for "
                                    f"{rs('queue', queue, vhost)}")
    seg = args.get("x-stream-max-segment-size-bytes")
    if isinstance(seg, int) and not isinstance(seg, bool) and seg > MAX_SEGMENT_SIZE:
        raise ChannelError(406, "Exceeded max value for x-stream-max-segment-size-bytes")


# ------------------------------------------------------------------------ consuming


def check_consume_arguments(args: Mapping | None, queue: str, vhost: str) -> None:
    """rabbit_amqqueue:check_consume_arguments/3 for a stream: x-stream-offset parsed
    (``{invalid_stream_offset_arg,...}``), the filter arguments typed, x-credit refused as
    for every queue type, the consumer arguments of other types refused."""
    args = args or {}
    if "x-stream-offset" in args:
        try:
            parse_offset(args["x-stream-offset"], 0)  # (validity does not depend on now)
        except ValueError:
            v = args["x-stream-offset"]
            t = amqp_type_name(v)
            raise da.invalid_arg(queue, vhost, "x-stream-offset", (
                Atom("invalid_stream_offset_arg"), (Atom(t), field_term(v, t))))
    if "x-credit" in args:
        raise da.invalid_arg(queue, vhost, "x-credit", da.check_credit(args["x-credit"], args))
    if "x-stream-filter" in args and _filter_values(args["x-stream-filter"]) is None:
        raise da.invalid_arg(queue, vhost, "x-stream-filter",
                             (Atom("unacceptable_type"), Atom(amqp_type_name(
                                 args["x-stream-filter"]))))
    if "x-stream-match-unfiltered" in args:
        err = da.check_bool(args["x-stream-match-unfiltered"], args)
        if err is not None:
            raise da.invalid_arg(queue, vhost, "x-stream-match-unfiltered", err)
    for key in args:
        if key in _OTHER_CONSUMER_ARGUMENTS:
            raise ChannelError(406, f"invalid arg '{key}' for {rs('queue', queue, vhost)} "
                                    f"of queue type {STREAM_TYPE}")


def check_consume(prefetch: int, no_ack: bool, channel_prefetch: int, queue: str,
                  vhost: str) -> None:
    """rabbit_stream_queue:consume/3's refusals, in its order: no consumer prefetch (406),
    automatic acknowledgement (540), the channel's global qos (rabbit_channel's 540)."""
    if not prefetch:
        raise ChannelError(406, f"consumer prefetch count is not set for "
                                f"'{rs('queue', queue, vhost)}'")
    if no_ack:
        raise ConnectionError_(540, "automatic acknowledgement not supported by stream "
                                    f"queues {rs('queue', queue, vhost)}")
    if channel_prefetch:
        raise ConnectionError_(540, f"{rs('queue', queue, vhost)} does not support global qos")


def get_refused(queue: str, vhost: str) -> ConnectionError_:
    """rabbit_stream_queue:dequeue/4."""
    return ConnectionError_(540, "basic.get not supported by stream queues "
                                 f"{rs('queue', queue, vhost)}")


def purge_refused(queue: str, vhost: str) -> ConnectionError_:
    """queue.purge of a stream (purge/1 answers not_supported; rabbit_channel's text)."""
    return ConnectionError_(540, "queue.purge not supported by stream queues "
                                 f"{rs('queue', queue, vhost)}")


def settle_refused(queue: str, vhost: str,
                   method: str = "basic.nack and basic.reject") -> ConnectionError_:
    """rabbit_stream_queue:settle/4 for requeue and discard: a stream keeps every message,
    so a nack or reject is refused whatever its requeue flag (and basic.recover, on which
    RabbitMQ 3.10.8's channel crashes, with the same words)."""
    return ConnectionError_(540, f"{method} not supported by stream "
                                 f"queues {rs('queue', queue, vhost)}")


class OffsetSpec(NamedTuple):
    """Where a consumer starts: ``kind`` first | last | next | offset | timestamp;
    ``value`` the offset or the timestamp in milliseconds."""
    kind: str
    value: int = 0


def parse_offset(value, now_ms: int) -> OffsetSpec:
    """rabbit_stream_queue:parse_offset_arg/1: absent -> next; "first", "last", "next"; an
    integer -> that offset; an AMQP timestamp (seconds, decoded as a datetime or an
    ``erl_terms`` timestamp) -> ms; any other string an interval (check_max_age) before now.
    ValueError when none of these."""
    if value is None:
        return OffsetSpec("next")
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        if value in ("first", "last", "next"):
            return OffsetSpec(value)
        ms = check_max_age(value)
        if ms is None:
            raise ValueError(value)
        return OffsetSpec("timestamp", now_ms - ms)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return OffsetSpec("timestamp", int(value.timestamp()) * 1000)
    if amqp_type_name(value) == "timestamp":
        return OffsetSpec("timestamp", int(value) * 1000)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return OffsetSpec("offset", value)
    raise ValueError(value)


def _filter_values(v) -> tuple | None:
    """x-stream-filter: one string or an array of strings (3.13); None when neither."""
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("utf-8", "replace")
    if isinstance(v, str):
        return (v,)
    if isinstance(v, (list, tuple)):
        out = []
        for x in v:
            if isinstance(x, (bytes, bytearray)):
                x = bytes(x).decode("utf-8", "replace")
            if not isinstance(x, str):
                return None
            out.append(x)
        return tuple(out)
    return None


class ConsumeSpec(NamedTuple):
    """A stream consumer's arguments, parsed."""
    offset: OffsetSpec
    filters: tuple  # x-stream-filter values; () = every chunk
    match_unfiltered: bool  # x-stream-match-unfiltered


def consume_spec(args: Mapping | None, now_ms: int) -> ConsumeSpec:
    args = args or {}
    return ConsumeSpec(parse_offset(args.get("x-stream-offset"), now_ms),
                       _filter_values(args.get("x-stream-filter", ())) or (),
                       args.get("x-stream-match-unfiltered") is True)


# ------------------------------------------------------------------- where a reader starts


class LogView(NamedTuple):
    """What a reader's start needs of the log: its first offset, the next offset to be
    written, the first offset of its last chunk, and the chunks' (first offset, timestamp
    ms) in order (only read for a timestamp spec)."""
    first: int
    next: int
    last_chunk: int
    chunks: Sequence = ()


def start_offset(spec: OffsetSpec, log: LogView) -> int:
    """The first offset a consumer is delivered (osiris init_reader, then
    rabbit_stream_queue's ``O >= StartOffs``): ``first`` the log's first; ``last`` its last
    chunk's first offset; ``next`` the end; a number itself, clamped to [first, next]; a
    timestamp the first chunk written at or after it (the end when none)."""
    if spec.kind == "first":
        return log.first
    if spec.kind == "last":
        return log.last_chunk if log.next > log.first else log.next
    if spec.kind == "next":
        return log.next
    if spec.kind == "offset":
        return min(max(spec.value, log.first), log.next)
    for first, ts in log.chunks:
        if ts >= spec.value and first >= log.first:
            return first
    return log.next


# ------------------------------------------------------------------------------- retention


class Segment(NamedTuple):
    """One segment of a stream's log: its number, first and last offset, body bytes, and
    its newest chunk's timestamp (ms)."""
    number: int
    first: int
    last: int
    nbytes: int
    last_ts: int


def segments_to_drop(segments: Sequence[Segment], max_bytes: int | None,
                     max_age_ms: int | None, now_ms: int) -> list:
    """osiris' retention: the segment numbers to delete, oldest first. By size: the oldest
    while the whole log is larger than ``max_bytes``; by age: those whose newest chunk is
    older than ``max_age_ms``. The segment being written (the last) always stays, so a log
    never loses its tail and a stream is never emptied by retention alone."""
    drop = []
    if len(segments) <= 1:
        return drop
    closed = list(segments[:-1])
    total = sum(s.nbytes for s in segments)
    for s in closed:
        too_big = max_bytes is not None and total > max_bytes
        too_old = max_age_ms is not None and s.last_ts < now_ms - max_age_ms
        if not (too_big or too_old):
            break  # retention only ever removes the oldest segments
        drop.append(s.number)
        total -= s.nbytes
    return drop


# -------------------------------------------------------------------------- filtering (3.13)

_UNFILTERED = b"\x00unfiltered"  # what a message without a filter value adds to its chunk


class BloomFilter:
    """A chunk's Bloom filter of its messages' filter values: ``size`` bytes, two bit
    positions per value derived from one blake2b digest (false positives, no false
    negatives)."""

    HASHES = 2

    __slots__ = ("bits",)

    def __init__(self, size: int = DEFAULT_FILTER_SIZE, bits: bytes | None = None):
        self.bits = bytearray(bits) if bits is not None else bytearray(size)

    def _positions(self, value: bytes):
        h = hashlib.blake2b(value, digest_size=8).digest()
        h1, h2 = int.from_bytes(h[:4], "big"), int.from_bytes(h[4:], "big") | 1
        m = len(self.bits) * 8
        return [(h1 + i * h2) % m for i in range(self.HASHES)]

    def add(self, value: bytes) -> None:
        for p in self._positions(value):
            self.bits[p >> 3] |= 1 << (p & 7)

    def __contains__(self, value: bytes) -> bool:
        return all(self.bits[p >> 3] & (1 << (p & 7)) for p in self._positions(value))

    def to_bytes(self) -> bytes:
        return bytes(self.bits)


def chunk_filter(values: Sequence, size: int = DEFAULT_FILTER_SIZE) -> bytes | None:
    """The Bloom filter a chunk stores for its messages' filter values (None for a message
    without one): None when no message of the chunk has a value."""
    if not any(v is not None for v in values):
        return None
    bf = BloomFilter(size)
    for v in values:
        bf.add(_UNFILTERED if v is None else v.encode("utf-8", "surrogateescape"))
    return bf.to_bytes()


def chunk_matches(bloom: bytes | None, filters: Sequence[str], match_unfiltered: bool) -> bool:
    """Whether a consumer reads a chunk: every chunk without filters; with filters, a chunk
    whose Bloom filter may hold one of them, or (match_unfiltered) may hold a message
    without a value; a chunk without a Bloom filter (no message had a value) only with
    match_unfiltered."""
    if not filters:
        return True
    if bloom is None:
        return match_unfiltered
    bf = BloomFilter(bits=bloom)
    if match_unfiltered and _UNFILTERED in bf:
        return True
    return any(f.encode("utf-8", "surrogateescape") in bf for f in filters)


def filter_value(headers: Mapping | None) -> str | None:
    """A published message's x-stream-filter-value header (a string), else None."""
    v = (headers or {}).get("x-stream-filter-value")
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("utf-8", "replace")
    return v if isinstance(v, str) else None


# ------------------------------------------------------------------------------- settings


class StreamSettings(NamedTuple):
    """A stream's retention and layout, from its arguments and policy (policy first, as
    rabbit_stream_queue's policy_precedence/2)."""
    max_bytes: int | None
    max_age_ms: int | None
    segment_bytes: int
    filter_size: int


def settings(args: Mapping | None, policy: Mapping | None = None) -> StreamSettings:
    args, policy = args or {}, policy or {}

    def pick(pol_key, arg_key):
        v = policy.get(pol_key)
        return v if v is not None else args.get(arg_key)

    max_bytes = pick("max-length-bytes", "x-max-length-bytes")
    age = pick("max-age", "x-max-age")
    seg = pick("stream-max-segment-size-bytes", "x-stream-max-segment-size-bytes")
    fsize = args.get("x-stream-filter-size-bytes")
    return StreamSettings(
        max_bytes if isinstance(max_bytes, int) and not isinstance(max_bytes, bool) else None,
        check_max_age(age) if age is not None else None,
        seg if isinstance(seg, int) and not isinstance(seg, bool) and seg > 0
        else DEFAULT_SEGMENT_SIZE,
        fsize if isinstance(fsize, int) and not isinstance(fsize, bool)
        else DEFAULT_FILTER_SIZE)


def with_offset_header(props_raw: bytes, offset: int) -> bytes:
    """A message's encoded properties with the ``x-stream-offset`` header (a long) set, as
    rabbit_basic:add_header/4 adds it to every stream delivery."""
    return with_long_header(props_raw or b"\x00\x00", "x-stream-offset", offset)
