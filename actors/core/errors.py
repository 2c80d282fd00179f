"""AMQP errors as RabbitMQ 3.10 raises and words them.

Mirrors ``rabbit_misc:protocol_error/3`` / ``amqp_error/4`` (an error is a reply-code *name*
plus an explanation) and ``rabbit_binary_generator:map_exception/3`` (the reply text sent in
channel.close / connection.close is ``"<CODE_NAME> - <explanation>"``, cut to 255 bytes as
``<first 252 bytes>...``; hard-error codes always close the connection).

Also holds small helpers that reproduce how Erlang's ``io_lib:format`` prints terms (``~p``,
``~w``, ``~s``), because many RabbitMQ error texts embed such output (e.g.
``{value_negative,-1}`` or ``<<"foo">>``). Pure: no I/O, no pykka/zmq/socket.
"""

from __future__ import annotations

import datetime as _dt
import re as _re

__all__ = [
    "REPLY_CODE_NAMES", "CODE_BY_NAME", "HARD_ERROR_CODES", "code_name", "is_hard_error",
    "amqp_text", "AMQPError", "ChannelError", "ConnectionError_", "amqp_error", "rs",
    "not_found", "precondition_failed", "access_refused", "resource_locked",
    "Atom", "erl_p", "erl_w", "erl_float", "erl_value_p",
]

# rabbit_framing_amqp_0_9_1:lookup_amqp_exception/1 (plus the non-error constants that share
# the table: reply-success and frame constants are not error codes, only 200 is kept).
REPLY_CODE_NAMES: dict[int, str] = {
    200: "REPLY_SUCCESS",
    311: "CONTENT_TOO_LARGE",
    312: "NO_ROUTE",
    313: "NO_CONSUMERS",
    320: "CONNECTION_FORCED",
    402: "INVALID_PATH",
    403: "ACCESS_REFUSED",
    404: "NOT_FOUND",
    405: "RESOURCE_LOCKED",
    406: "PRECONDITION_FAILED",
    501: "FRAME_ERROR",
    502: "SYNTAX_ERROR",
    503: "COMMAND_INVALID",
    504: "CHANNEL_ERROR",
    505: "UNEXPECTED_FRAME",
    506: "RESOURCE_ERROR",
    530: "NOT_ALLOWED",
    540: "NOT_IMPLEMENTED",
    541: "INTERNAL_ERROR",
}
CODE_BY_NAME: dict[str, int] = {v: k for k, v in REPLY_CODE_NAMES.items()}

# Codes whose lookup_amqp_exception entry has ShouldClose = true: they close the connection
# even when raised while handling a method on a channel.
HARD_ERROR_CODES = frozenset({320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541})

_MAX_TEXT = 255


def code_name(code: int) -> str:
    """``404 -> "NOT_FOUND"``. Unknown codes map to ``"INTERNAL_ERROR"`` (RabbitMQ logs
    "Unknown AMQP error code" and falls back to internal_error)."""
    return REPLY_CODE_NAMES.get(code, "INTERNAL_ERROR")


def is_hard_error(code: int) -> bool:
    return code in HARD_ERROR_CODES


def _truncate(text: str) -> str:
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) <= _MAX_TEXT:
        return text
    # rabbit_binary_generator:amqp_exception_explanation/2 cuts bytes, not characters; a
    # multi-byte character split by the cut is dropped here so the text stays valid UTF-8.
    return raw[:_MAX_TEXT - 3].decode("utf-8", "ignore") + "..."


def amqp_text(code: int, msg: str) -> str:
    """The reply text RabbitMQ sends: ``amqp_text(406, "unknown delivery tag 3")`` ->
    ``"PRECONDITION_FAILED - unknown delivery tag 3"`` (cut to 255 bytes like RabbitMQ)."""
    return _truncate(f"{code_name(code)} - {msg}")


class AMQPError(Exception):
    """Base of ChannelError / ConnectionError_.

    ``text`` is the full reply text. When the given text does not already start with
    ``"<CODE_NAME> - "`` the prefix is added, so ``ChannelError(404, "no queue 'q' in vhost
    '/'")`` and ``ChannelError(404, "NOT_FOUND - no queue 'q' in vhost '/'")`` are the same.
    """

    __slots__ = ("reply_code", "text", "class_id", "method_id")

    def __init__(self, reply_code: int, text: str, class_id: int = 0, method_id: int = 0):
        prefix = code_name(reply_code) + " - "
        if not text.startswith(prefix):
            text = prefix + text
        self.reply_code = int(reply_code)
        self.text = _truncate(text)
        self.class_id = int(class_id)
        self.method_id = int(method_id)
        super().__init__(self.text)

    @property
    def explanation(self) -> str:
        """The text without its ``"CODE_NAME - "`` prefix."""
        return self.text.split(" - ", 1)[1] if " - " in self.text else self.text

    def with_method(self, class_id: int, method_id: int) -> "AMQPError":
        """A copy naming the method that failed (RabbitMQ fills class-id/method-id in with the
        method being handled)."""
        return type(self)(self.reply_code, self.text, class_id, method_id)

    def __reduce__(self):
        return (type(self), (self.reply_code, self.text, self.class_id, self.method_id))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.reply_code}, {self.text!r}, "
                f"{self.class_id}, {self.method_id})")

    def __eq__(self, other):
        return (type(self) is type(other) and self.reply_code == other.reply_code
                and self.text == other.text and self.class_id == other.class_id
                and self.method_id == other.method_id)

    __hash__ = Exception.__hash__


class ChannelError(AMQPError):
    """A soft error: closes the channel (channel.close)."""


class ConnectionError_(AMQPError):
    """A hard error: closes the connection (connection.close on channel 0)."""


def amqp_error(code: int, msg: str, class_id: int = 0, method_id: int = 0) -> AMQPError:
    """``rabbit_misc:protocol_error`` + ``map_exception``: a ChannelError for soft codes, a
    ConnectionError_ for hard ones. Raise the result."""
    cls = ConnectionError_ if code in HARD_ERROR_CODES else ChannelError
    return cls(code, msg, class_id, method_id)


def rs(kind: str, name: str, vhost: str) -> str:
    """``rabbit_misc:rs/1``: ``"queue 'q' in vhost '/'"`` (kind ``topic`` omits the kind)."""
    if kind == "topic":
        return f"'{name}' in vhost '{vhost}'"
    return f"{kind} '{name}' in vhost '{vhost}'"


def not_found(kind: str, name: str, vhost: str) -> ChannelError:
    """``rabbit_misc:not_found/1``: 404 ``"NOT_FOUND - no queue 'q' in vhost '/'"``."""
    return ChannelError(404, f"no {rs(kind, name, vhost)}")


def precondition_failed(msg: str) -> ChannelError:
    return ChannelError(406, msg)


def access_refused(msg: str) -> ChannelError:
    return ChannelError(403, msg)


def resource_locked(kind: str, name: str, vhost: str) -> ChannelError:
    """rabbit_amqqueue:check_exclusive_access/3's 405."""
    return ChannelError(
        405,
        f"cannot obtain exclusive access to locked {rs(kind, name, vhost)}. It could be "
        "originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration.")


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


def _field_term(value, type_name):
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
        from actors.core.queue_args import amqp_type_name
        out = []
        for k, v in value.items():
            tn = amqp_type_name(v)
            out.append((k.encode() if isinstance(k, str) else bytes(k), Atom(tn),
                        _field_term(v, tn)))
        return out
    if type_name == "array":
        from actors.core.queue_args import amqp_type_name
        return [(Atom(amqp_type_name(v)), _field_term(v, amqp_type_name(v))) for v in value]
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
        from actors.core.queue_args import amqp_type_name
        type_name = amqp_type_name(value)
    return erl_p(_field_term(value, type_name))

