"""Hypothesis strategies shared by the protocol tests (not a test module itself).

Two families:

* ``field_values`` / ``tables``: everything Leveret's codec round-trips exactly;
* ``oracle_*``: the subset on which Leveret and pamqp 4.0.1 agree byte for byte, with the
  reason for every restriction:

  - decimals: RabbitMQ (``rabbit_binary_parser``: ``After:32/unsigned``) and Leveret read
    the decimal value as unsigned, pamqp reads and writes it signed, so the value is kept
    below 2**31;
  - timestamps: pamqp reads a 'T' above 0xFFFFFFFF as milliseconds, RabbitMQ (and Leveret)
    always as seconds, so timestamps stay at or below 0xFFFFFFFF;
  - floats: Leveret writes Python floats as 'd' (lossless), pamqp writes them as 'f' (and
    fails past float32's range, so oracle floats are float32 values); each decodes the
    other's choice, so the tests compare both decoders on the same bytes;
  - byte arrays: pamqp only encodes ``bytearray`` and decodes 'x' to ``bytearray``;
    Leveret uses ``bytes``; compared after ``bytes()``;
  - 's' and 'u': RabbitMQ reads 's' as a *signed 16-bit int* and 'u' as unsigned (the 0-9-1
    errata), not the spec's short string; pamqp before 3 followed the spec table, pamqp 4
    agrees with RabbitMQ, so ints of every size are in the oracle; pamqp's
    ``support_deprecated_rabbitmq()`` mode (no 'u'/'i') is not used;
  - pamqp also reads a b'\\x00' type octet as void; RabbitMQ does not (and neither does
    Leveret, which raises 502), so it never appears in generated tables;
  - 64-bit method fields (delivery tags): pamqp reads ``longlong`` signed, AMQP and Leveret
    unsigned, so they stay below 2**63 in the oracle.
"""

from __future__ import annotations

import datetime
import decimal

from hypothesis import strategies as st

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _utf8_len_ok(limit):
    return lambda s: len(s.encode("utf-8")) <= limit


shortstr = st.text(max_size=30).filter(_utf8_len_ok(255))
longstr_text = st.text(max_size=60)
# Long strings that are not valid UTF-8 decode to bytes (like pamqp), so only those are bytes.
longstr_bytes = st.binary(max_size=30).map(lambda b: b"\xff" + b)
keys = st.text(max_size=12).filter(_utf8_len_ok(128))


def _decimal(mantissa_max):
    return st.builds(
        lambda m, s: decimal.Decimal(m).scaleb(-s),
        st.integers(0, mantissa_max),
        st.integers(0, 20),
    )


def _timestamp(max_seconds):
    return st.integers(0, max_seconds).map(lambda s: EPOCH + datetime.timedelta(seconds=s))


def _values(scalars):
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=12,
    )


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-200000, 200000),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
    _decimal(2**32 - 1),
    _timestamp(253402300799),
)
field_values = _values(scalars)
tables = st.dictionaries(keys, field_values, max_size=6)

oracle_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-70000, 70000),
    st.floats(allow_nan=False, width=32),  # pamqp packs floats as float32
    st.text(max_size=20),
    st.binary(max_size=20),
    _decimal(2**31 - 1),
    _timestamp(0xFFFFFFFF),
)
oracle_values = _values(oracle_scalars)
oracle_tables = st.dictionaries(keys, oracle_values, max_size=6)


def for_pamqp(value):
    """The same value as pamqp's encoder wants it (bytes -> bytearray, recursively)."""
    if isinstance(value, bytes):
        return bytearray(value)
    if isinstance(value, dict):
        return {k: for_pamqp(v) for k, v in value.items()}
    if isinstance(value, list):
        return [for_pamqp(v) for v in value]
    return value


def normalize(value):
    """A decoded value in Leveret's representation (bytearray -> bytes, recursively)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


FIELD_STRATEGIES = {
    "bit": st.booleans(),
    "octet": st.integers(0, 255),
    "short": st.integers(0, 65535),
    "long": st.integers(0, 2**32 - 1),
    "longlong": st.integers(0, 2**64 - 1),
    "timestamp": st.integers(0, 2**64 - 1),
    "shortstr": shortstr,
    "longstr": st.one_of(longstr_text, longstr_bytes),
    "table": tables,
}

ORACLE_FIELD_STRATEGIES = dict(
    FIELD_STRATEGIES,
    longlong=st.integers(0, 2**63 - 1),
    longstr=longstr_text,  # pamqp encodes long strings from str only
    table=oracle_tables,
)


def method_kwargs(cls, strategies=None):
    strategies = strategies or FIELD_STRATEGIES
    return st.fixed_dictionaries(
        {name: strategies[ftype] for name, ftype in zip(cls.FIELDS, cls.FIELD_TYPES)}
    )


def has_float(value) -> bool:
    """True when a float is anywhere in value (pamqp writes them as 'f', Leveret as 'd')."""
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(has_float(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_float(v) for v in value)
    return False
