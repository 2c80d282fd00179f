"""Protocol errors raised by the codec.

Mirrors RabbitMQ's ``#amqp_error{name, explanation, method}`` as built by
``rabbit_misc:amqp_error/4`` and thrown from ``rabbit_reader`` / ``rabbit_binary_parser`` /
``rabbit_command_assembler``: a reply code, a human readable text, and the class/method ids of
the offending method when known.  The reader turns one into connection.close (or
channel.close for a soft code) with exactly these fields.

Owns the exception hierarchy::

    AMQPError
     +-- FrameError            (501 frame errors, 505 unexpected frame, 540 unknown method)
     |    +-- SyntaxError_     (502: method or property arguments that do not parse)
     +-- BadProtocolHeader     (the first 8 bytes of a connection are not an AMQP header)

``SyntaxError_`` subclasses ``FrameError`` so that ``except FrameError`` catches every error
the frame decoder raises.  Decoding arbitrary bytes raises nothing but ``AMQPError``.
"""

from __future__ import annotations

from .constants import FRAME_ERROR, HARD_ERRORS, REPLY_NAMES, SYNTAX_ERROR


class AMQPError(Exception):
    """A protocol error with an AMQP reply code (see ``protocol.constants``).

    ``frames``: when raised by ``FrameDecoder.frames()``, the complete frames decoded before
    the bad one (empty otherwise).
    """

    frames: list = []  # replaced per instance by FrameDecoder; never mutated in place

    def __init__(self, reply_code: int, text: str, class_id: int = 0, method_id: int = 0):
        super().__init__(reply_code, text, class_id, method_id)
        self.reply_code = reply_code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def hard(self) -> bool:
        """True when the error closes the connection, False when it closes a channel."""
        return self.reply_code in HARD_ERRORS

    @property
    def reply_name(self) -> str:
        return REPLY_NAMES.get(self.reply_code, str(self.reply_code))

    @property
    def reply_text(self) -> str:
        """``NAME - text``, the form RabbitMQ puts in connection.close's reply_text."""
        return f"{self.reply_name} - {self.text}"

    def __str__(self) -> str:
        where = f" (class {self.class_id}, method {self.method_id})" if self.class_id else ""
        return f"{self.reply_code} {self.reply_name}: {self.text}{where}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.reply_code!r}, {self.text!r}, "
            f"{self.class_id!r}, {self.method_id!r})"
        )

    def __reduce__(self):
        return (type(self), (self.reply_code, self.text, self.class_id, self.method_id))


class FrameError(AMQPError):
    """An error found while framing or assembling: 501, 505, 540 (and 502 via SyntaxError_)."""


class SyntaxError_(FrameError):  # noqa: N801 - trailing underscore avoids the builtin name
    """502 SYNTAX_ERROR: method (or property) arguments that do not parse."""

    def __init__(
        self, reply_code: int = SYNTAX_ERROR, text: str = "", class_id: int = 0, method_id: int = 0
    ):
        super().__init__(reply_code, text, class_id, method_id)


class BadProtocolHeader(AMQPError):
    """The 8 bytes opening a connection are not ``AMQP`` + a version.

    ``data`` holds the bytes received; the reader answers with ``PROTOCOL_HEADER`` and closes
    the socket, as ``rabbit_reader:refuse_connection/2`` does.
    """

    def __init__(
        self, reply_code: int = FRAME_ERROR, text: str = "", class_id: int = 0, method_id: int = 0,
        data: bytes = b"",
    ):
        super().__init__(reply_code, text, class_id, method_id)
        self.data = data
