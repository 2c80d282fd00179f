"""A shovel's runtime parameter: validation with RabbitMQ 3.10's texts
(rabbit_shovel_parameters.erl through rabbit_parameter_validation.erl) and its parsed form.

`errors(name, value)` lists every error in the order rabbit_runtime_parameters:flatten_errors
gives them (the amqp091 source and destination checks, then the key checks, last key first,
after "Unrecognised terms"); `validate` raises them as rabbitmqctl and the HTTP API print them.
`parse(vhost, name, value)` gives the `ShovelSpec` the runner works from, with RabbitMQ's
defaults (ack-mode on-confirm, prefetch 1000, reconnect-delay 5 s, src-delete-after never).

What Leveret does not implement is refused, never accepted and ignored: the amqp10 protocol,
`src-queue-args`, `dest-queue-args`, `src-consumer-args`, and hostless (direct) URIs.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.core.erl_terms import Atom
from actors.core.errors import ChannelError
from actors.core.policies import error_text
from actors.shovel import uri as uri_mod

DEFAULT_RECONNECT_DELAY = 5  # seconds (rabbit_shovel.hrl's ?DEFAULT_RECONNECT_DELAY)
DEFAULT_PREFETCH = 1000  # messages (parse_amqp091_source's default)
ACK_MODES = ("no-ack", "on-publish", "on-confirm")
PROTOCOLS = ("amqp10", "amqp091")
NOT_IMPLEMENTED = ("src-queue-args", "dest-queue-args", "src-consumer-args")
PROPERTY_KEYS = (  # validate_properties/2: the basic properties a shovel may set, and kind
    ("content_type", "s"), ("content_encoding", "s"), ("delivery_mode", "n"),
    ("priority", "n"), ("correlation_id", "s"), ("reply_to", "s"), ("expiration", "s"),
    ("message_id", "s"), ("timestamp", "n"), ("type", "s"), ("user_id", "s"),
    ("app_id", "s"), ("cluster_id", "s"))


# --- rabbit_parameter_validation's checks: None, or (format, terms) ---------------------------
def _number(name, v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return None
    return ("~s should be a number, actually was ~p", (name, v))


def _binary(name, v):
    return None if isinstance(v, str) else ("~s should be binary, actually was ~p", (name, v))


def _boolean(name, v):
    return None if isinstance(v, bool) else ("~s should be boolean, actually was ~p", (name, v))


def _queue_name(name, v):
    if not isinstance(v, str):
        return ("~s should be binary, actually was ~p", (name, v))
    size = len(v.encode("utf-8"))
    return None if size <= 255 else ("~s should be less than 255 bytes, actually was ~p",
                                      (name, size))


def _enum(options):
    def check(name, v):
        if not isinstance(v, str):
            return ("~s should be binary, actually was ~p", (name, v))
        if v in options:
            return None
        return ("~s should be one of ~p, actually was ~p", (name, list(options), v))
    return check


def _delete_after(name, v):
    if v in ("never", "queue-length") or (isinstance(v, int) and not isinstance(v, bool)
                                          and v >= 0):
        return None
    return ("~s should be a number greater than or equal to 0, \"never\" or \"queue-length\", "
            "actually was ~p", (name, v))


def _uri(name, v):
    if isinstance(v, list):
        for item in v:
            err = _uri(name, item)
            if err:
                return err
        return None
    if not isinstance(v, str):
        return ("~s should be list, actually was ~p", (name, v))
    try:
        uri_mod.parse(v)
    except uri_mod.UriError as e:
        # amqp_uri's {Reason, Uri}: Erlang strings (char lists), not binaries
        return ("\"~s\" not a valid URI: ~p", (v, _Raw((e.reason, v))))
    return None


def _properties(name, v):
    if not isinstance(v, dict):
        return [("~s not a list ~p", (name, v))]
    return _proplist(name, [(k, _number if kind == "n" else _binary, False)
                            for k, kind in PROPERTY_KEYS], v)


def _not_implemented(name, v):
    return ("~s is not supported by Leveret's shovels", (name,))


def _protocol(name, v):
    err = _enum(PROTOCOLS)(name, v)
    if err or v == "amqp091":
        return err
    return ("~s ~s is not supported by Leveret's shovels (amqp091 only)", (name, v))


def _proplist(name, constraints, value: dict) -> list:
    """rabbit_parameter_validation:proplist/3: results in reverse constraint order, after
    the keys no constraint names ("Unrecognised terms")."""
    results, rest = [], dict(value)
    for key, check, mandatory in constraints:
        if key in rest:
            out = check(key, rest.pop(key))
            results.insert(0, out)
        elif mandatory:
            results.insert(0, ("Key \"~s\" not found in ~s", (key, name)))
    flat = []
    for r in results:
        if isinstance(r, list):
            flat.extend(x for x in r if x)
        elif r:
            flat.append(r)
    if rest:
        flat.insert(0, ("Unrecognised terms ~p in ~s", (list(rest.items()), name)))
    return flat


SHOVEL_KEYS = [
    ("reconnect-delay", _number, False),
    ("ack-mode", _enum(ACK_MODES), False),
    ("src-protocol", _protocol, False),
    ("dest-protocol", _protocol, False),
]
SRC_KEYS = [
    ("src-uri", _uri, True),
    ("src-exchange", _binary, False),
    ("src-exchange-key", _binary, False),
    ("src-queue", _binary, False),
    ("src-queue-args", _not_implemented, False),
    ("src-consumer-args", _not_implemented, False),
    ("prefetch-count", _number, False),
    ("src-prefetch-count", _number, False),
    ("delete-after", _delete_after, False),  # the pre-3.7 name
    ("src-delete-after", _delete_after, False),
]
DEST_KEYS = [
    ("dest-uri", _uri, True),
    ("dest-exchange", _binary, False),
    ("dest-exchange-key", _binary, False),
    ("dest-queue", _queue_name, False),
    ("dest-queue-args", _not_implemented, False),
    ("add-forward-headers", _boolean, False),
    ("add-timestamp-header", _boolean, False),
    ("dest-add-forward-headers", _boolean, False),
    ("dest-add-timestamp-header", _boolean, False),
    ("publish-properties", _properties, False),
    ("dest-publish-properties", _properties, False),
]


def _pair_errors(value: dict) -> list:
    """validate_amqp091_src/1 and validate_amqp091_dest/1."""
    out = []
    src = ("src-exchange" in value) + ("src-queue" in value)
    if src == 0:
        out.append(("Must specify 'src-exchange' or 'src-queue'", ()))
    elif src == 2:
        out.append(("Cannot specify 'src-exchange' and 'src-queue'", ()))
    after = value.get("src-delete-after", value.get("delete-after"))
    if isinstance(after, int) and not isinstance(after, bool) and \
            value.get("ack-mode") == "no-ack":
        out.append(("Cannot specify 'no-ack' and numerical 'delete-after'", ()))
    if "dest-exchange" in value and "dest-queue" in value:
        out.append(("Cannot specify 'dest-exchange' and 'dest-queue'", ()))
    return out


class _Raw:
    """A term already in Erlang's shape: printed as it is (Python str: a char list)."""

    __slots__ = ("term",)

    def __init__(self, term):
        self.term = term


def _term(v):
    """A decoded JSON value (or a reason built here) as the Erlang term RabbitMQ holds:
    strings are binaries, atoms stay atoms, objects are proplists."""
    if isinstance(v, _Raw):
        return v.term
    if isinstance(v, Atom):
        return v
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    if isinstance(v, tuple):
        return tuple(_term(x) for x in v)
    if isinstance(v, list):
        return [_term(x) for x in v]
    if isinstance(v, dict):
        return [(_term(k), _term(x)) for k, x in v.items()]
    return v


def _render(fmt: str, terms: tuple) -> str:
    """io_lib:format: ~s prints a name as it is, ~p as the Erlang term (JSON strings are
    binaries)."""
    out = fmt
    for t in terms:
        i_s, i_p = out.find("~s"), out.find("~p")
        if i_s != -1 and (i_p == -1 or i_s < i_p):
            out = out.replace("~s", t if isinstance(t, str) else error_text("~p", t), 1)
        else:
            out = out.replace("~p", error_text("~p", _term(t)), 1)
    return out


def errors(name: str, value) -> list[str]:
    """Every validation error of shovel `name`'s value, RabbitMQ's texts, in its order."""
    if not isinstance(value, dict):
        return [_render("~s not a list ~p", (name, value))]
    found = _pair_errors(value) + _proplist(name, SHOVEL_KEYS + SRC_KEYS + DEST_KEYS, value)
    return [_render(fmt, terms) for fmt, terms in found]


def validate(name: str, value) -> None:
    """406 "Validation failed" with every error, as rabbit_runtime_parameters:format_error/1."""
    errs = errors(name, value)
    if errs:
        raise ChannelError(406, "Validation failed\n\n" + "\n".join(errs) + "\n")


# --- the parsed definition -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ShovelSpec:
    """A valid shovel parameter, with RabbitMQ's defaults filled in."""
    vhost: str  # the vhost the parameter belongs to
    name: str  # the parameter's name
    src_uris: tuple  # Endpoints to try, in turn
    dest_uris: tuple  # Endpoints to try, in turn
    src_queue: str | None  # consume from this queue (declared durable if missing)...
    src_exchange: str | None  # ...or from an exclusive queue bound to this exchange
    src_exchange_key: str  # the binding key for src-exchange
    prefetch: int  # basic.qos prefetch-count on the source (not with no-ack)
    delete_after: object  # "never", "queue-length" or a count
    ack_mode: str  # "on-confirm", "on-publish" or "no-ack"
    reconnect_delay: float  # seconds between attempts; 0: do not restart
    dest_exchange: str | None  # publish to this exchange (None: the message's own)
    dest_exchange_key: str | None  # with this routing key (None: the message's own)
    dest_queue: str | None  # publish to this queue through the default exchange
    forward_headers: bool  # add the x-shovelled header
    timestamp_header: bool  # add the x-shovelled-timestamp header
    publish_properties: tuple  # (property, value) pairs set on every publish

    @property
    def key(self) -> tuple:
        return (self.vhost, self.name)


def _uris(v) -> tuple:
    return tuple(uri_mod.parse(u) for u in ([v] if isinstance(v, str) else v))


def parse(vhost: str, name: str, value: dict) -> ShovelSpec:
    """The spec of a value `validate` accepted."""
    delete_after = value.get("src-delete-after", value.get("delete-after", "never"))
    props = value.get("dest-publish-properties", value.get("publish-properties", {}))
    return ShovelSpec(
        vhost=vhost, name=name,
        src_uris=_uris(value["src-uri"]), dest_uris=_uris(value["dest-uri"]),
        src_queue=value.get("src-queue"), src_exchange=value.get("src-exchange"),
        src_exchange_key=value.get("src-exchange-key", ""),
        prefetch=int(value.get("src-prefetch-count",
                               value.get("prefetch-count", DEFAULT_PREFETCH))),
        delete_after=delete_after,
        ack_mode=value.get("ack-mode", "on-confirm"),
        reconnect_delay=value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY),
        dest_exchange=value.get("dest-exchange"),
        dest_exchange_key=value.get("dest-exchange-key"),
        dest_queue=value.get("dest-queue"),
        forward_headers=value.get("dest-add-forward-headers",
                                  value.get("add-forward-headers", False)),
        timestamp_header=value.get("dest-add-timestamp-header",
                                   value.get("add-timestamp-header", False)),
        publish_properties=tuple(sorted(props.items())))


# --- the runtime parameter component ---------------------------------------------------------
COMPONENTS = ("shovel",)  # components kept in the runtime parameters table


def unknown_component(component: str) -> str:
    """rabbit_runtime_parameters:lookup_component/1's error through format_error/1."""
    return f"Validation failed\n\ncomponent {component} not found\n"
