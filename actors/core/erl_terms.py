"""Erlang terms: the terms RabbitMQ holds for AMQP field values, and how io_lib prints them.

Mirrors how ``io_lib:format`` prints terms (``~p``, ``~w``, with OTP's shortest float digits),
the term ``rabbit_binary_parser`` builds for each AMQP field value, ``rabbit_misc:type_class/1``
and Erlang's ``==`` / ``=:=`` on those terms. Many RabbitMQ error texts embed such output
(``{value_negative,-1}``, ``<<"foo">>``), and argument equivalence and the headers exchange
compare values the way Erlang does; the error texts (errors.py), argument checks
(queue_args.py, declare_args.py) and routing all build on this module, which imports none of
them. Pure: no I/O, no pykka/zmq/socket.

Field values arrive decoded (the codec drops the wire type), so the AMQP type RabbitMQ would
print is inferred by ``amqp_type_name`` the way pika encodes Python values: ``int`` ->
``signedint`` (``long`` outside 32 bits), ``bool`` -> ``bool``, ``str`` -> ``longstr``,
``bytes`` -> ``binary``, ``float`` -> ``double``, ``Decimal`` -> ``decimal``, ``datetime`` ->
``timestamp``, ``dict`` -> ``table``, ``list`` -> ``array``, ``None`` -> ``void``.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import re as _re
from typing import Any, Mapping

__all__ = [
    "Atom", "erl_p", "erl_w", "erl_float", "erl_value_p", "field_term", "amqp_type_name",
    "type_class", "values_equal", "INT_TYPES",
]

# every AMQP integer width: RabbitMQ's integer checks take them all
INT_TYPES = frozenset({"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort",
                       "unsignedint"})

# ---------------------------------------------------------------------------------------------
# Erlang term printing (io_lib ~p / ~w), for error texts that embed terms.
#
# Python -> Erlang term mapping used by erl_p / erl_w:
#   Atom("x") -> atom x;  tuple -> {..};  list -> [..];  str -> a *string* (char list of the
#   UTF-8 bytes, as rabbit_misc:format("~s", [Bin]) produces);  bytes -> a binary;
#   bool -> true/false;  None -> undefined;  int;  float.
# ---------------------------------------------------------------------------------------------


class Atom(str):
    """An Erlang atom in a term given to erl_p/erl_w."""

    __slots__ = ()


_RESERVED = frozenset(
    "after and andalso band begin bnot bor bsl bsr bxor case catch cond div end fun if let "
    "maybe not of or orelse receive rem try when xor".split())
_ATOM_RE = _re.compile(r"[a-z][a-zA-Z0-9_@]*\Z")

# io_lib:printable_latin1_list/1: \b \t \n \v \f \r \e, 32..126 and 160..255.
_PRINTABLE = frozenset([8, 9, 10, 11, 12, 13, 27, *range(32, 127), *range(160, 256)])
_ESCAPES = {8: b"\\b", 9: b"\\t", 10: b"\\n", 11: b"\\v", 12: b"\\f", 13: b"\\r",
            27: b"\\e", 34: b'\\"', 92: b"\\\\"}


def _atom(a: str) -> bytes:
    if _ATOM_RE.match(a) and a not in _RESERVED:
        return a.encode()
    body = a.encode("utf-8", "surrogateescape").replace(b"\\", b"\\\\").replace(b"'", b"\\'")
    return b"'" + body + b"'"


def _quoted(raw: bytes) -> bytes:
    return b'"' + b"".join(_ESCAPES.get(c, bytes((c,))) for c in raw) + b'"'


def erl_float(f: float) -> str:
    """Erlang's ``~p``/``~w`` of a float (shortest round-trip digits; the shorter of the
    plain and the exponent form, the plain one on a tie, the exponent one from 2^53 up):
    100.0, 1.0e3, 0.0001, 1.23e-4, 9.007199254740992e15."""
    if f != f or f in (float("inf"), float("-inf")):
        return repr(f)
    sign = "-" if f < 0 or (f == 0 and str(f).startswith("-")) else ""
    f = abs(f)
    if f == 0:
        return sign + "0.0"
    r = repr(f)
    if "e" in r:
        mant, exp = r.split("e")
        exp_i = int(exp)
    else:
        mant, exp_i = r, 0
    if "." in mant:
        ip, fp = mant.split(".")
    else:
        ip, fp = mant, ""
    digits = (ip + fp).lstrip("0")
    # decimal exponent of the first significant digit
    lead_zeros = len(ip + fp) - len((ip + fp).lstrip("0"))
    point = len(ip) - lead_zeros + exp_i  # digits before the point in "0.DIGITS" * 10^point
    digits = digits.rstrip("0") or "0"
    e = point - 1
    sci = digits[0] + "." + (digits[1:] or "0") + "e" + str(e)
    if point <= 0:
        plain = "0." + "0" * (-point) + digits
    elif point >= len(digits):
        plain = digits + "0" * (point - len(digits)) + ".0"
    else:
        plain = digits[:point] + "." + digits[point:]
    # OTP's float_to_list(F, [short]): the shorter form (plain on a tie), never the plain form
    # from 2^53 up.
    return sign + (plain if len(plain) <= len(sci) and f < 2.0 ** 53 else sci)


def _term(t, pretty: bool) -> bytes:
    if t is None:
        return b"undefined"
    if t is True:
        return b"true"
    if t is False:
        return b"false"
    if isinstance(t, Atom):
        return _atom(t)
    if isinstance(t, int):
        return str(t).encode()
    if isinstance(t, float):
        return erl_float(t).encode()
    if isinstance(t, (bytes, bytearray)):
        raw = bytes(t)
        if pretty and all(c in _PRINTABLE for c in raw):
            return b"<<" + _quoted(raw) + b">>"
        return b"<<" + b",".join(str(c).encode() for c in raw) + b">>"
    if isinstance(t, str):
        raw = t.encode("utf-8", "surrogateescape")
        if pretty and all(c in _PRINTABLE for c in raw):
            return _quoted(raw)
        return b"[" + b",".join(str(c).encode() for c in raw) + b"]"
    if isinstance(t, tuple):
        return b"{" + b",".join(_term(x, pretty) for x in t) + b"}"
    if isinstance(t, list):
        return b"[" + b",".join(_term(x, pretty) for x in t) + b"]"
    return repr(t).encode()


def erl_p(term) -> str:
    """``io_lib:format("~p", [Term])`` for short terms (no line wrapping)."""
    return _term(term, True).decode("utf-8", "surrogateescape")


def erl_w(term) -> str:
    """``io_lib:format("~w", [Term])``."""
    return _term(term, False).decode("utf-8", "surrogateescape")


def field_term(value, type_name):
    """The Erlang term rabbit_binary_parser produces for an AMQP field value."""
    if type_name in ("longstr", "binary"):
        return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
    if type_name == "decimal":
        sign, digits, exp = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        if isinstance(exp, int) and exp > 0:
            unscaled *= 10 ** exp
            exp = 0
        return (-exp if isinstance(exp, int) else 0, unscaled)
    if type_name == "timestamp":
        return _timestamp(value)
    if type_name == "table":
        out = []
        for k, v in value.items():
            tn = amqp_type_name(v)
            out.append((k.encode() if isinstance(k, str) else bytes(k), Atom(tn),
                        field_term(v, tn)))
        return out
    if type_name == "array":
        return [(Atom(amqp_type_name(v)), field_term(v, amqp_type_name(v))) for v in value]
    if type_name == "void":
        return None
    return value


def _timestamp(value) -> int:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return int(value.timestamp())
    return int(value)


def erl_value_p(value, type_name: str | None = None) -> str:
    """``~p`` of the Erlang term RabbitMQ holds for an AMQP field value (strings are
    binaries, tables are ``[{Key,Type,Value}]``, decimals ``{Scale,Unscaled}``...)."""
    if type_name is None:
        type_name = amqp_type_name(value)
    return erl_p(field_term(value, type_name))


# ------------------------------------------------------------------------------ AMQP field types


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
    if type_name in INT_TYPES or type_name == "decimal":
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
            field_term(a, "decimal") == field_term(b, "decimal")
    if isinstance(a, _dt.datetime):
        return isinstance(b, _dt.datetime) and \
            field_term(a, "timestamp") == field_term(b, "timestamp")
    if isinstance(a, Mapping):
        if not isinstance(b, Mapping) or len(a) != len(b):
            return False
        return all(_as_bytes(ka) == _as_bytes(kb) and values_equal(va, vb, exact)
                   for (ka, va), (kb, vb) in zip(a.items(), b.items()))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(values_equal(x, y, exact) for x, y in zip(a, b))
    return a == b
