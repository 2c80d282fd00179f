"""Method classes of AMQP 0-9-1 and RabbitMQ's extensions, generated from a table.

Mirrors pamqp's ``pamqp.commands`` (one class per method, ``__slots__``, field names) and the
``decode_method_fields`` / ``encode_method_fields`` functions of RabbitMQ's generated
``rabbit_framing_amqp_0_9_1``.  Owns the argument codec of every method: ``encode()`` gives
the argument bytes (no class/method ids), ``decode(buf, offset=0, end=None)`` reads them and
raises ``SyntaxError_`` (502) with the class and method id on anything that does not parse,
including trailing bytes (RabbitMQ's binary patterns match the whole frame).

The table below is the whole specification; for each method the generator writes (with
``exec``, as ``dataclasses`` and ``namedtuple`` do) an ``__init__``, an ``encode`` that packs
runs of fixed-size fields with one precompiled ``struct.Struct``, and a ``decode`` that reads
them back with ``unpack_from`` -- no per-field interpretation loop at run time.  Consecutive
``bit`` fields share an octet, least significant bit first (spec 4.2.5.2).  Short strings
decode to ``str`` (invalid UTF-8 is 501 "Malformed UTF-8 in shortstr", as in RabbitMQ); long strings decode to
``str`` when valid UTF-8 and ``bytes`` otherwise (like pamqp); both encode from ``str`` or
``bytes``.  Field names are pamqp 4's.
"""

from __future__ import annotations

import struct

from . import fields as _fields
from .codec_errors import SyntaxError_

__all__ = ["Method", "METHODS", "BY_NAME", "CONTENT_METHODS"]

# The specification.  One class per unindented line ("id name"), one method per indented line:
#   id name [sync] [content] field:type[=default] ...
# Types: bit octet short long longlong shortstr longstr table.  Defaults: 0 / False / "" / {}
# unless given ("=1" on a bit means True).  sync methods expect the "-ok" reply(s).
_SPEC = """
10 connection
  10 start sync version_major:octet=0 version_minor:octet=9 server_properties:table mechanisms:longstr=PLAIN locales:longstr=en_US
  11 start-ok client_properties:table mechanism:shortstr=PLAIN response:longstr locale:shortstr=en_US
  20 secure sync challenge:longstr
  21 secure-ok response:longstr
  30 tune sync channel_max:short frame_max:long heartbeat:short
  31 tune-ok channel_max:short frame_max:long heartbeat:short
  40 open sync virtual_host:shortstr=/ capabilities:shortstr insist:bit
  41 open-ok known_hosts:shortstr
  50 close sync reply_code:short=200 reply_text:shortstr class_id:short method_id:short
  51 close-ok
  60 blocked reason:shortstr
  61 unblocked
  70 update-secret sync new_secret:longstr reason:shortstr
  71 update-secret-ok
20 channel
  10 open sync out_of_band:shortstr
  11 open-ok channel_id:longstr
  20 flow sync active:bit=1
  21 flow-ok active:bit=1
  40 close sync reply_code:short=200 reply_text:shortstr class_id:short method_id:short
  41 close-ok
30 access
  10 request sync realm:shortstr=/data exclusive:bit passive:bit=1 active:bit=1 write:bit=1 read:bit=1
  11 request-ok ticket:short=1
40 exchange
  10 declare sync ticket:short exchange:shortstr exchange_type:shortstr=direct passive:bit durable:bit auto_delete:bit internal:bit nowait:bit arguments:table
  11 declare-ok
  20 delete sync ticket:short exchange:shortstr if_unused:bit nowait:bit
  21 delete-ok
  30 bind sync ticket:short destination:shortstr source:shortstr routing_key:shortstr nowait:bit arguments:table
  31 bind-ok
  40 unbind sync ticket:short destination:shortstr source:shortstr routing_key:shortstr nowait:bit arguments:table
  51 unbind-ok
50 queue
  10 declare sync ticket:short queue:shortstr passive:bit durable:bit exclusive:bit auto_delete:bit nowait:bit arguments:table
  11 declare-ok queue:shortstr message_count:long consumer_count:long
  20 bind sync ticket:short queue:shortstr exchange:shortstr routing_key:shortstr nowait:bit arguments:table
  21 bind-ok
  30 purge sync ticket:short queue:shortstr nowait:bit
  31 purge-ok message_count:long
  40 delete sync ticket:short queue:shortstr if_unused:bit if_empty:bit nowait:bit
  41 delete-ok message_count:long
  50 unbind sync ticket:short queue:shortstr exchange:shortstr routing_key:shortstr arguments:table
  51 unbind-ok
60 basic
  10 qos sync prefetch_size:long prefetch_count:short global_:bit
  11 qos-ok
  20 consume sync ticket:short queue:shortstr consumer_tag:shortstr no_local:bit no_ack:bit exclusive:bit nowait:bit arguments:table
  21 consume-ok consumer_tag:shortstr
  30 cancel sync consumer_tag:shortstr nowait:bit
  31 cancel-ok consumer_tag:shortstr
  40 publish content ticket:short exchange:shortstr routing_key:shortstr mandatory:bit immediate:bit
  50 return content reply_code:short reply_text:shortstr exchange:shortstr routing_key:shortstr
  60 deliver content consumer_tag:shortstr delivery_tag:longlong redelivered:bit exchange:shortstr routing_key:shortstr
  70 get sync ticket:short queue:shortstr no_ack:bit
  71 get-ok content delivery_tag:longlong redelivered:bit exchange:shortstr routing_key:shortstr message_count:long
  72 get-empty cluster_id:shortstr
  80 ack delivery_tag:longlong multiple:bit
  90 reject delivery_tag:longlong requeue:bit=1
  100 recover-async requeue:bit
  110 recover sync requeue:bit
  111 recover-ok
  120 nack delivery_tag:longlong multiple:bit requeue:bit=1
85 confirm
  10 select sync nowait:bit
  11 select-ok
90 tx
  10 select sync
  11 select-ok
  20 commit sync
  21 commit-ok
  30 rollback sync
  31 rollback-ok
"""

_FIXED_FORMATS = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}
_TYPES = set(_FIXED_FORMATS) | {"bit", "shortstr", "longstr", "table"}

_new = object.__new__
_DECODE_ERRORS = _fields.DECODE_ERRORS


class Method:
    """Base class of the generated method classes."""

    __slots__ = ()
    CLASS_ID: int = 0
    METHOD_ID: int = 0
    INDEX: int = 0
    NAME: str = ""
    SYNCHRONOUS: bool = False
    HAS_CONTENT: bool = False
    #: Field names in wire order.
    FIELDS: tuple = ()
    #: Field types in wire order ("bit", "octet", "short", "long", "longlong", "shortstr",
    #: "longstr", "table").
    FIELD_TYPES: tuple = ()
    #: Classes of the valid replies of a synchronous method (e.g. BasicGet -> GetOk, GetEmpty).
    REPLIES: tuple = ()

    def encode(self) -> bytes:  # pragma: no cover - replaced by the generator
        raise NotImplementedError

    @classmethod
    def decode(cls, buf, offset: int = 0, end: int | None = None):  # pragma: no cover
        raise NotImplementedError

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    __hash__ = None  # mutable, like pamqp's

    def __repr__(self) -> str:
        args = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS)
        return f"{type(self).__name__}({args})"

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.FIELDS}

    def __iter__(self):
        """(name, value) pairs, as pamqp's frames do."""
        for f in self.FIELDS:
            yield f, getattr(self, f)

    def __reduce__(self):
        return (type(self), tuple(getattr(self, f) for f in self.FIELDS))


def _syntax_error(cls, field: str, exc: BaseException) -> SyntaxError_:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, UnicodeDecodeError):
        # rabbit_binary_parser:assert_utf8/1 on a short string (a queue name, a consumer
        # tag, ...): a frame error with RabbitMQ 3.10's text
        return SyntaxError_(501, "Malformed UTF-8 in shortstr", cls.CLASS_ID, cls.METHOD_ID)
    if isinstance(exc, (IndexError, struct.error)):
        detail = "arguments truncated"
    elif isinstance(exc, RecursionError):
        detail = "values nested too deeply"
    return SyntaxError_(
        502,
        f"cannot decode {cls.NAME} arguments: field {field!r}: {detail}",
        cls.CLASS_ID,
        cls.METHOD_ID,
    )


def _length_error(cls, offset: int, end: int) -> SyntaxError_:
    if offset > end:
        text = f"cannot decode {cls.NAME} arguments: truncated ({offset - end} bytes missing)"
    else:
        text = f"cannot decode {cls.NAME} arguments: {end - offset} unexpected trailing bytes"
    return SyntaxError_(502, text, cls.CLASS_ID, cls.METHOD_ID)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "-").split("-"))


def _parse_spec(text: str):
    """Yield (class_id, class_name, method_id, method_name, sync, content, fields)."""
    class_id = class_name = None
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        words = line.split()
        if not line.startswith(" "):
            class_id, class_name = int(words[0]), words[1]
            continue
        method_id, method_name = int(words[0]), words[1]
        flags = {w for w in words[2:] if ":" not in w}
        assert flags <= {"sync", "content"}, line
        spec_fields = []
        for w in words[2:]:
            if ":" not in w:
                continue
            name, _, rest = w.partition(":")
            ftype, _, default = rest.partition("=")
            assert ftype in _TYPES, w
            spec_fields.append((name, ftype, default))
        yield class_id, class_name, method_id, method_name, "sync" in flags, "content" in flags, (
            spec_fields
        )


def _default(ftype: str, text: str):
    if ftype == "bit":
        return bool(int(text)) if text else False
    if ftype in _FIXED_FORMATS:
        return int(text) if text else 0
    if ftype == "table":
        return None  # replaced by a fresh {} per instance
    return text


def _groups(spec_fields):
    """Split the field list into fixed-size runs ("fixed", [(fmt, names...)]) and variable
    fields ("shortstr"/"longstr"/"table", name). A bit run becomes one "B" octet."""
    out = []
    run: list = []  # [(fmt, name or [bit names])]
    bits: list = []
    for name, ftype, _default in spec_fields:
        if ftype == "bit":
            if not bits:
                bits = []
                run.append(("B", bits))
            elif len(bits) == 8:
                bits = []
                run.append(("B", bits))
            bits.append(name)
            continue
        bits = []
        if ftype in _FIXED_FORMATS:
            run.append((_FIXED_FORMATS[ftype], name))
            continue
        if run:
            out.append(("fixed", run))
            run = []
        out.append((ftype, name))
    if run:
        out.append(("fixed", run))
    return out


def _generate(cls_name: str, spec_fields, namespace: dict) -> str:
    """Source of __init__, encode and decode for one method class."""
    lines = []
    # __init__
    params = []
    body = []
    for name, ftype, default in spec_fields:
        value = _default(ftype, default)
        params.append(f"{name}={value!r}")
        if ftype == "table":
            body.append(f"    self.{name} = {{}} if {name} is None else {name}")
        else:
            body.append(f"    self.{name} = {name}")
    lines.append(f"def __init__(self, {', '.join(params)}):" if params else "def __init__(self):")
    lines.extend(body or ["    pass"])

    groups = _groups(spec_fields)
    # encode
    lines.append("def encode(self):")
    if not groups:
        lines.append("    return b''")
    else:
        parts = []
        for i, (kind, item) in enumerate(groups):
            if kind == "fixed":
                st = f"_S_{cls_name}_{i}"
                namespace[st] = struct.Struct(">" + "".join(fmt for fmt, _ in item))
                args = []
                for fmt, names in item:
                    if isinstance(names, list):
                        args.append(
                            "(" + " | ".join(
                                f"({1 << k} if self.{n} else 0)" for k, n in enumerate(names)
                            ) + ")"
                        )
                    else:
                        args.append(f"self.{names}")
                parts.append(f"{st}.pack({', '.join(args)})")
            elif kind == "shortstr":
                parts.append(f"_enc_shortstr(self.{item})")
            elif kind == "longstr":
                parts.append(f"_enc_longstr(self.{item})")
            else:
                parts.append(f"_enc_table(self.{item})")
        lines.append("    try:")
        if len(parts) == 1:
            lines.append(f"        return {parts[0]}")
        else:
            lines.append(f"        return b''.join(({', '.join(parts)},))")
        lines.append("    except struct.error as exc:")
        lines.append(
            "        raise ValueError(f'cannot encode {self.NAME}: {exc}') from None"
        )

    # decode
    lines.append("@classmethod")
    lines.append("def decode(cls, buf, offset=0, end=None):")
    lines.append("    if buf.__class__ is not bytes and not isinstance(buf, (bytes, bytearray)):")
    lines.append("        buf = bytes(buf)")
    lines.append("    if end is None:")
    lines.append("        end = len(buf)")
    lines.append("    self = _new(cls)")
    if groups:
        lines.append("    field = ''")
        lines.append("    try:")
        for i, (kind, item) in enumerate(groups):
            if kind == "fixed":
                st = f"_S_{cls_name}_{i}"
                targets = []
                after = []
                for j, (fmt, names) in enumerate(item):
                    if isinstance(names, list):
                        targets.append(f"_bits{j}")
                        for k, n in enumerate(names):
                            after.append(f"        self.{n} = (_bits{j} & {1 << k}) != 0")
                    else:
                        targets.append(f"self.{names}")
                first = item[0][1]
                first = first[0] if isinstance(first, list) else first
                lines.append(f"        field = {first!r}")
                lines.append(f"        {', '.join(targets)}, = {st}.unpack_from(buf, offset)")
                lines.append(f"        offset += {namespace[st].size}")
                lines.extend(after)
            elif kind == "shortstr":
                lines.append(f"        field = {item!r}")
                lines.append("        n = offset + 1 + buf[offset]")
                # bounded by the frame: a string running past it is a truncation (checked
                # below), not bad UTF-8 read from the bytes after it
                lines.append(f"        self.{item} = buf[offset + 1:n if n <= end else end]"
                             ".decode()")
                lines.append("        offset = n")
            elif kind == "longstr":
                lines.append(f"        field = {item!r}")
                lines.append(f"        self.{item}, offset = _longstr(buf, offset, end)")
            else:
                lines.append(f"        field = {item!r}")
                lines.append(f"        self.{item}, offset = _table(buf, offset, end)")
        lines.append("    except _DECODE_ERRORS as exc:")
        lines.append("        raise _syntax_error(cls, field, exc) from None")
    lines.append("    if offset != end:")
    lines.append("        raise _length_error(cls, offset, end)")
    lines.append("    return self")
    return "\n".join(lines) + "\n"


METHODS: dict[int, type] = {}
BY_NAME: dict[str, type] = {}
_SOURCES: dict[str, str] = {}  # generated source per class, for debugging


def _build() -> None:
    namespace = {
        "struct": struct,
        "_new": _new,
        "_enc_shortstr": _fields.encode_shortstr,
        "_enc_longstr": _fields.encode_longstr,
        "_enc_table": _fields.encode_table,
        "_longstr": _fields._longstr,
        "_table": _fields._table,
        "_DECODE_ERRORS": _DECODE_ERRORS,
        "_syntax_error": _syntax_error,
        "_length_error": _length_error,
    }
    for class_id, class_name, method_id, method_name, sync, content, spec_fields in _parse_spec(
        _SPEC
    ):
        name = f"{class_name}.{method_name}"
        cls_name = _camel(name)
        source = _generate(cls_name, spec_fields, namespace)
        local: dict = {}
        exec(compile(source, f"<protocol.methods {cls_name}>", "exec"), namespace, local)
        attrs = {
            "__slots__": tuple(f for f, _, _ in spec_fields),
            "__module__": __name__,
            "__qualname__": cls_name,
            "__doc__": f"{name} ({class_id}, {method_id})"
            + (": " + ", ".join(f"{f} {t}" for f, t, _ in spec_fields) if spec_fields else ""),
            "CLASS_ID": class_id,
            "METHOD_ID": method_id,
            "INDEX": class_id << 16 | method_id,
            "NAME": name,
            "SYNCHRONOUS": sync,
            "HAS_CONTENT": content,
            "FIELDS": tuple(f for f, _, _ in spec_fields),
            "FIELD_TYPES": tuple(t for _, t, _ in spec_fields),
            "__init__": local["__init__"],
            "encode": local["encode"],
            "decode": local["decode"],
        }
        cls = type(cls_name, (Method,), attrs)
        for fn in (cls.__init__, cls.encode, cls.decode.__func__):
            fn.__qualname__ = f"{cls_name}.{fn.__name__}"
        METHODS[cls.INDEX] = cls
        BY_NAME[name] = cls
        _SOURCES[cls_name] = source
        globals()[cls_name] = cls
        __all__.append(cls_name)
    # Replies of synchronous methods: "x" -> "x-ok" (basic.get also -> basic.get-empty).
    for name, cls in BY_NAME.items():
        if cls.SYNCHRONOUS:
            replies = [BY_NAME[r] for r in (name + "-ok", name + "-empty") if r in BY_NAME]
            cls.REPLIES = tuple(replies)


_build()

CONTENT_METHODS = frozenset(idx for idx, cls in METHODS.items() if cls.HAS_CONTENT)

# Explicit names for linters and readers (all generated above).
ConnectionStart = BY_NAME["connection.start"]
ConnectionStartOk = BY_NAME["connection.start-ok"]
ConnectionSecure = BY_NAME["connection.secure"]
ConnectionSecureOk = BY_NAME["connection.secure-ok"]
ConnectionTune = BY_NAME["connection.tune"]
ConnectionTuneOk = BY_NAME["connection.tune-ok"]
ConnectionOpen = BY_NAME["connection.open"]
ConnectionOpenOk = BY_NAME["connection.open-ok"]
ConnectionClose = BY_NAME["connection.close"]
ConnectionCloseOk = BY_NAME["connection.close-ok"]
ConnectionBlocked = BY_NAME["connection.blocked"]
ConnectionUnblocked = BY_NAME["connection.unblocked"]
ConnectionUpdateSecret = BY_NAME["connection.update-secret"]
ConnectionUpdateSecretOk = BY_NAME["connection.update-secret-ok"]
ChannelOpen = BY_NAME["channel.open"]
ChannelOpenOk = BY_NAME["channel.open-ok"]
ChannelFlow = BY_NAME["channel.flow"]
ChannelFlowOk = BY_NAME["channel.flow-ok"]
ChannelClose = BY_NAME["channel.close"]
ChannelCloseOk = BY_NAME["channel.close-ok"]
AccessRequest = BY_NAME["access.request"]
AccessRequestOk = BY_NAME["access.request-ok"]
ExchangeDeclare = BY_NAME["exchange.declare"]
ExchangeDeclareOk = BY_NAME["exchange.declare-ok"]
ExchangeDelete = BY_NAME["exchange.delete"]
ExchangeDeleteOk = BY_NAME["exchange.delete-ok"]
ExchangeBind = BY_NAME["exchange.bind"]
ExchangeBindOk = BY_NAME["exchange.bind-ok"]
ExchangeUnbind = BY_NAME["exchange.unbind"]
ExchangeUnbindOk = BY_NAME["exchange.unbind-ok"]
QueueDeclare = BY_NAME["queue.declare"]
QueueDeclareOk = BY_NAME["queue.declare-ok"]
QueueBind = BY_NAME["queue.bind"]
QueueBindOk = BY_NAME["queue.bind-ok"]
QueuePurge = BY_NAME["queue.purge"]
QueuePurgeOk = BY_NAME["queue.purge-ok"]
QueueDelete = BY_NAME["queue.delete"]
QueueDeleteOk = BY_NAME["queue.delete-ok"]
QueueUnbind = BY_NAME["queue.unbind"]
QueueUnbindOk = BY_NAME["queue.unbind-ok"]
BasicQos = BY_NAME["basic.qos"]
BasicQosOk = BY_NAME["basic.qos-ok"]
BasicConsume = BY_NAME["basic.consume"]
BasicConsumeOk = BY_NAME["basic.consume-ok"]
BasicCancel = BY_NAME["basic.cancel"]
BasicCancelOk = BY_NAME["basic.cancel-ok"]
BasicPublish = BY_NAME["basic.publish"]
BasicReturn = BY_NAME["basic.return"]
BasicDeliver = BY_NAME["basic.deliver"]
BasicGet = BY_NAME["basic.get"]
BasicGetOk = BY_NAME["basic.get-ok"]
BasicGetEmpty = BY_NAME["basic.get-empty"]
BasicAck = BY_NAME["basic.ack"]
BasicReject = BY_NAME["basic.reject"]
BasicRecoverAsync = BY_NAME["basic.recover-async"]
BasicRecover = BY_NAME["basic.recover"]
BasicRecoverOk = BY_NAME["basic.recover-ok"]
BasicNack = BY_NAME["basic.nack"]
ConfirmSelect = BY_NAME["confirm.select"]
ConfirmSelectOk = BY_NAME["confirm.select-ok"]
TxSelect = BY_NAME["tx.select"]
TxSelectOk = BY_NAME["tx.select-ok"]
TxCommit = BY_NAME["tx.commit"]
TxCommitOk = BY_NAME["tx.commit-ok"]
TxRollback = BY_NAME["tx.rollback"]
TxRollbackOk = BY_NAME["tx.rollback-ok"]
