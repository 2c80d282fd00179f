"""AMQP errors as RabbitMQ 3.10 raises and words them.

Mirrors ``rabbit_misc:protocol_error/3`` / ``amqp_error/4`` (an error is a reply-code *name*
plus an explanation) and ``rabbit_binary_generator:map_exception/3`` (the reply text sent in
channel.close / connection.close is ``"<CODE_NAME> - <explanation>"``, cut to 255 bytes as
``<first 252 bytes>...``; hard-error codes always close the connection).

Error texts that embed Erlang terms (``{value_negative,-1}``, ``<<"foo">>``) print them with
erl_terms.py, which this module does not need. Pure: no I/O, no pykka/zmq/socket.
"""

from __future__ import annotations

__all__ = [
    "REPLY_CODE_NAMES", "CODE_BY_NAME", "HARD_ERROR_CODES", "code_name", "is_hard_error",
    "amqp_text", "AMQPError", "ChannelError", "ConnectionError_", "amqp_error", "rs",
    "not_found", "precondition_failed", "access_refused", "resource_locked",
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
