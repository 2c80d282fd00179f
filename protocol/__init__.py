"""Leveret's AMQP 0-9-1 codec: sans-IO, no sockets, no actors.

Mirrors pamqp (method classes, frame marshalling) and RabbitMQ's rabbit_binary_parser,
rabbit_binary_generator, rabbit_command_assembler and the framing half of rabbit_reader.
Owns the wire format only; ``docs/protocol-api.md`` is the contract.  Everything public in
the submodules is re-exported here.
"""

from . import constants, codec_errors, fields, frames, methods, properties
from .constants import *  # noqa: F401,F403
from .constants import HARD_ERRORS, PROTOCOL_HEADER  # noqa: F401
from .codec_errors import AMQPError, BadProtocolHeader, FrameError, SyntaxError_
from .fields import (
    decode_array,
    decode_longstr,
    decode_shortstr,
    decode_table,
    decode_value,
    encode_array,
    encode_longstr,
    encode_shortstr,
    encode_table,
    encode_value,
)
from .frames import (
    NEED_DATA,
    BodyFrame,
    Command,
    CommandAssembler,
    FrameDecoder,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    ProtocolHeader,
    encode_ack,
    encode_command,
    encode_content,
    encode_deliver,
    encode_frame,
    encode_get_ok,
    encode_heartbeat,
    encode_method,
    encode_nack,
    encode_protocol_header,
    encode_publish,
)
from .methods import *  # noqa: F401,F403
from .methods import BY_NAME, CONTENT_METHODS, METHODS, Method
from .properties import EMPTY_PROPERTIES, PROPERTY_FLAGS, BasicProperties

__all__ = (
    [n for n in dir(constants) if n.isupper()]
    + [
        "constants", "codec_errors", "fields", "frames", "methods", "properties",
        "AMQPError", "BadProtocolHeader", "FrameError", "SyntaxError_",
        "decode_array", "decode_longstr", "decode_shortstr", "decode_table", "decode_value",
        "encode_array", "encode_longstr", "encode_shortstr", "encode_table", "encode_value",
        "NEED_DATA", "BodyFrame", "Command", "CommandAssembler", "FrameDecoder", "HeaderFrame",
        "HeartbeatFrame", "MethodFrame", "ProtocolHeader",
        "encode_ack", "encode_command", "encode_content", "encode_deliver", "encode_frame",
        "encode_get_ok", "encode_heartbeat", "encode_method", "encode_nack",
        "encode_protocol_header", "encode_publish",
        "BY_NAME", "CONTENT_METHODS", "METHODS", "Method",
        "EMPTY_PROPERTIES", "PROPERTY_FLAGS", "BasicProperties",
    ]
    + list(methods.__all__[3:])
)
