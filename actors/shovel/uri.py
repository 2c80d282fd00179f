"""amqp:// and amqps:// URIs as a shovel's src-uri / dest-uri take them (amqp_client's
amqp_uri.erl): user, password, host, port, vhost, and the query keys RabbitMQ reads,
`heartbeat`, `connection_timeout`, `channel_max`, `frame_max`, and on amqps `cacertfile`,
`certfile`, `keyfile`, `verify` (verify_peer | verify_none), `server_name_indication`
(a host name or `disable`).

Leveret's shovels connect over the network only: a URI without a host (`amqp://`, which
RabbitMQ reads as a direct Erlang connection to its own node) is refused, and so is a query
key this module does not act on (amqp_uri ignores unknown ones; Leveret never accepts and
ignores a setting). Pure: no sockets.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from actors.core.erl_terms import Atom

# the query keys amqp_uri reads into amqp_params_network (integers)
INT_KEYS = ("heartbeat", "connection_timeout", "channel_max", "frame_max")
TLS_KEYS = ("cacertfile", "certfile", "keyfile", "verify", "server_name_indication")


class UriError(ValueError):
    """Why a URI was refused, as the Erlang term amqp_uri:parse/1 gives (`reason`)."""

    def __init__(self, reason):
        super().__init__(repr(reason))
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One parsed URI: where to connect and how."""
    uri: str  # the URI as given (it carries the password: never shown)
    host: str  # host name or address
    port: int  # 5672 (amqp) or 5671 (amqps) unless given
    vhost: str  # "/" when the URI has no path
    user: str  # "guest" unless given
    password: str  # "guest" unless given
    tls: bool  # amqps://
    heartbeat: int | None = None  # seconds; None: the broker's proposal
    connection_timeout: int | None = None  # milliseconds (amqp_uri's unit)
    channel_max: int | None = None  # None: negotiated
    frame_max: int | None = None  # None: negotiated
    cacertfile: str | None = None  # CA bundle to verify the server with
    certfile: str | None = None  # client certificate
    keyfile: str | None = None  # client key
    verify: str = "verify_none"  # Erlang ssl's default for a client
    server_name_indication: str | None = None  # None: the host; "disable": none sent

    @property
    def redacted(self) -> str:
        return redact(self.uri)


def _unescape(text: str) -> str:
    return urllib.parse.unquote(text)


def parse(uri: str) -> Endpoint:
    """The Endpoint of `uri`, or UriError(reason) with amqp_uri's reason term."""
    if not isinstance(uri, str):
        raise UriError(Atom("expected_string_uri"))
    try:
        u = urllib.parse.urlsplit(uri)
        port = u.port
    except ValueError as e:
        raise UriError((Atom("unable_to_parse_uri"), str(e))) from None
    scheme = u.scheme.lower()
    if scheme not in ("amqp", "amqps"):
        raise UriError((Atom("unexpected_uri_scheme"), scheme))
    if port is not None and not 0 < port <= 65535:
        raise UriError((Atom("port_out_of_range"), port))
    if not u.hostname:
        if port is not None:
            raise UriError(Atom("port_requires_host"))
        raise UriError((Atom("direct_connection_not_supported"),
                        "Leveret's shovels connect over the network: give the URI a host"))
    vhost = "/"
    if u.path:
        rest = u.path[1:]
        if "/" in rest:
            raise UriError((Atom("invalid_vhost"), rest))
        vhost = _unescape(rest)
    query = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
    fields: dict = {}
    for key, value in query:
        if key in INT_KEYS:
            try:
                fields[key] = int(value)
            except ValueError:
                raise UriError((Atom("invalid_amqp_params_parameter"), Atom(key), value,
                                (Atom("not_an_integer"), value))) from None
        elif key in TLS_KEYS and scheme == "amqps":
            if key == "verify" and value not in ("verify_peer", "verify_none"):
                raise UriError((Atom("invalid_ssl_parameter"), Atom(key), value,
                                (Atom("unknown_verify_mode"), value)))
            fields[key] = value
        else:
            raise UriError((Atom("parameter_unconfigurable_in_query"), Atom(key), value))
    return Endpoint(
        uri=uri, host=u.hostname, port=port or (5671 if scheme == "amqps" else 5672),
        vhost=vhost,
        user=_unescape(u.username) if u.username is not None else "guest",
        password=_unescape(u.password) if u.password is not None else "guest",
        tls=scheme == "amqps", **fields)


def redact(uri: str) -> str:
    """The URI without its credentials (amqp_uri:remove_credentials/1), as /api/shovels and
    the shovel status show it."""
    try:
        u = urllib.parse.urlsplit(uri)
    except ValueError:
        return "(unparsable URI)"
    netloc = u.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
