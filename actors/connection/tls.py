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
from typing import NamedTuple


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
    suite = suite_parts(sslobj.context, cipher[0] if cipher else "")
    return TlsInfo(version=sslobj.version() or "", cipher=cipher[0] if cipher else "",
                   peer_subject=cert.get("subject"), key_exchange=suite.key_exchange,
                   cipher_name=suite.cipher, hash=suite.mac,
                   **cert_fields(sslobj.getpeercert(binary_form=True)))


class SuiteParts(NamedTuple):
    """A cipher suite as Erlang's ssl:connection_information names its parts (what
    rabbit_net:ssl_info gives RabbitMQ's ssl_key_exchange, ssl_cipher and ssl_hash)."""
    key_exchange: str  # "ecdhe_ecdsa", "ecdhe_rsa"; "any" for a TLS 1.3 suite
    cipher: str  # "aes_256_gcm", "chacha20_poly1305"
    mac: str  # "aead", else the digest ("sha384")


def suite_parts(ctx: ssl.SSLContext, name: str) -> SuiteParts:
    """The negotiated suite's parts, from OpenSSL's description of it in `ctx`."""
    for c in ctx.get_ciphers():
        if c["name"] == name:
            kea, auth = c["kea"].removeprefix("kx-"), c["auth"].removeprefix("auth-")
            return SuiteParts("any" if kea == "any" else f"{kea}_{auth}",
                              (c["symmetric"] or "").replace("-", "_"),
                              "aead" if c["aead"] else (c["digest"] or ""))
    return SuiteParts("", "", "")


def cert_fields(der: bytes | None) -> dict:
    """The client certificate's subject, issuer and validity as rabbit_ssl's
    peer_cert_subject / peer_cert_issuer / peer_cert_validity print them (RFC 4514, last RDN
    first; "notBefore - notAfter" as "YYYY-MM-DDTHH:MM:SSZ"); "" each without one."""
    if not der:
        return {}
    # (imported here: a connection worker without TLS clients never needs it, and importing
    # cryptography costs each one about 85 ms of CPU at its start)
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    # rabbit_cert_info's attribute names where RFC 4514 has none (cryptography prints the OID)
    names = {NameOID.SURNAME: "SN", NameOID.GIVEN_NAME: "GIVENNAME",
             NameOID.INITIALS: "INITIALS", NameOID.GENERATION_QUALIFIER: "GENERATIONQUALIFIER",
             NameOID.TITLE: "TITLE", NameOID.SERIAL_NUMBER: "SERIALNUMBER",
             NameOID.PSEUDONYM: "PSEUDONYM", NameOID.EMAIL_ADDRESS: "EMAILADDRESS"}
    cert = x509.load_der_x509_certificate(der)
    return {"cert_subject": cert.subject.rfc4514_string(names),
            "cert_issuer": cert.issuer.rfc4514_string(names),
            "cert_validity": f"{cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} - "
                             f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"}


def _why(e: Exception) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    return e.strerror or str(e)
