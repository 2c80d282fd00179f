"""The AMQPS listener's TLS settings as an `ssl.SSLContext` (RabbitMQ's `ssl_options`).

The node builds the context once at start to check the settings (a missing or unreadable file
stops it with a clear line); every connection worker builds its own from the same settings and
runs each handshake on its event loop (netio.Conn.start_tls). `ssl_options` map as:

| RabbitMQ | Leveret | here |
| --- | --- | --- |
| certfile, keyfile | ssl_certfile, ssl_keyfile | load_cert_chain |
| cacertfile | ssl_cacertfile | load_verify_locations |
| verify = verify_none | ssl_verify | CERT_NONE: no client certificate asked for |
| verify = verify_peer, fail_if_no_peer_cert = false | | CERT_OPTIONAL: one sent is verified |
| verify = verify_peer, fail_if_no_peer_cert = true | | CERT_REQUIRED |
| versions | ssl_versions (tlsv1.2, tlsv1.3 only) | minimum_version / maximum_version |
"""

from __future__ import annotations

import ssl

from actors.core.connection import TlsInfo

_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(Exception):
    """The TLS settings cannot be used: the text says which and why."""


def server_context(config) -> ssl.SSLContext:
    """The context every AMQPS connection's handshake runs with; TlsConfigError when a setting
    is wrong or a file cannot be read."""
    errors = config.check()
    if errors:
        raise TlsConfigError("; ".join(errors))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[v] for v in config.ssl_versions)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    ctx.options |= ssl.OP_NO_COMPRESSION  # CRIME; Erlang's ssl has no compression either
    ctx.options |= ssl.OP_NO_RENEGOTIATION  # TLS 1.2: a client cannot make us redo handshakes
    try:
        ctx.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"cannot load ssl_certfile {config.ssl_certfile!r} with "
                             f"ssl_keyfile {config.ssl_keyfile!r}: {_why(e)}") from None
    if config.ssl_cacertfile:
        try:
            ctx.load_verify_locations(cafile=config.ssl_cacertfile)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(f"cannot load ssl_cacertfile {config.ssl_cacertfile!r}: "
                                 f"{_why(e)}") from None
    if config.ssl_verify == "verify_peer":
        ctx.verify_mode = (ssl.CERT_REQUIRED if config.ssl_fail_if_no_peer_cert
                           else ssl.CERT_OPTIONAL)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def info(sslobj: ssl.SSLObject) -> TlsInfo:
    """What the connection's core needs to know of a finished handshake. The peer's subject is
    there only when the peer sent a certificate that was verified (getpeercert() is empty
    otherwise, and always under verify_none)."""
    cert = sslobj.getpeercert() or {}
    cipher = sslobj.cipher()
    return TlsInfo(version=sslobj.version() or "", cipher=cipher[0] if cipher else "",
                   peer_subject=cert.get("subject"))


def _why(e: Exception) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    return e.strerror or str(e)
