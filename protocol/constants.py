"""AMQP 0-9-1 constants: frame types, sizes and reply codes.

Mirrors the constants of pamqp's ``pamqp.constants`` and of RabbitMQ's ``rabbit_framing.hrl``
(``?FRAME_METHOD``, ``?FRAME_END``, ...).  Owns nothing but numbers; every other module of
``protocol/`` imports them from here.
"""

# Frame types (spec 4.2.3)
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"

#: Frame header: type (octet), channel (short), payload size (long).
FRAME_HEADER_SIZE = 7
#: Header + frame-end octet: a frame is ``payload + FRAME_OVERHEAD`` bytes long.
FRAME_OVERHEAD = 8

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
PROTOCOL_VERSION = (0, 9, 1)

FRAME_MAX_DEFAULT = 131072
FRAME_MIN_SIZE = 4096
#: RabbitMQ's ?MAX_MSG_SIZE (rabbit.hrl): the largest body_size a content header may announce.
MAX_MSG_SIZE = 536870912

# Reply codes (spec 1.2, plus RabbitMQ's usage)
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

#: Codes that close the whole connection (connection.close) rather than one channel.
HARD_ERRORS = frozenset(
    {
        CONNECTION_FORCED,
        INVALID_PATH,
        FRAME_ERROR,
        SYNTAX_ERROR,
        COMMAND_INVALID,
        CHANNEL_ERROR,
        UNEXPECTED_FRAME,
        RESOURCE_ERROR,
        NOT_ALLOWED,
        NOT_IMPLEMENTED,
        INTERNAL_ERROR,
    }
)
#: Codes that close only the channel (channel.close).
SOFT_ERRORS = frozenset(
    {
        CONTENT_TOO_LARGE,
        NO_ROUTE,
        NO_CONSUMERS,
        ACCESS_REFUSED,
        NOT_FOUND,
        RESOURCE_LOCKED,
        PRECONDITION_FAILED,
    }
)

#: RabbitMQ's names for the reply codes (``rabbit_framing_amqp_0_9_1:amqp_exception/1``).
REPLY_NAMES = {
    REPLY_SUCCESS: "REPLY_SUCCESS",
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}
