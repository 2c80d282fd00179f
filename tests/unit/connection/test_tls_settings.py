"""The AMQPS settings (actors/config.py `check`, actors/node/serve.py flags, actors/connection/tls.py
`server_context`): what cannot work is refused at start with a sentence that says why."""

from __future__ import annotations

import ssl
import sys
from pathlib import Path

import pytest

from actors.node.serve import parse_args
from actors.config import Config
from actors.connection import tls

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from tlscerts import CertFactory  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    f = CertFactory(tmp_path_factory.mktemp("certs"))
    return f, f.leaf("server", "localhost", server=True)


def tls_config(certs, **kw) -> Config:
    f, server = certs
    kw.setdefault("ssl_certfile", server.cert)
    kw.setdefault("ssl_keyfile", server.key)
    return Config(tls_port=5671, **kw)


def test_defaults_are_rabbitmqs():
    c = Config()
    assert c.tls_port == 0  # off unless configured
    assert c.handshake_timeout == 10.0
    assert c.max_connections == "infinity" and c.connection_limit is None
    assert c.ssl_verify == "verify_none" and c.ssl_fail_if_no_peer_cert is False
    assert c.check() == []


def test_settings_survive_the_trip_to_the_workers():
    c = Config(tls_port=5671, ssl_versions=("tlsv1.3",), max_connections=7)
    back = Config.from_json(c.to_json())
    assert back == c and back.ssl_versions == ("tlsv1.3",) and back.connection_limit == 7


@pytest.mark.parametrize("kw, says", [
    ({"ssl_versions": ("tlsv1.1", "tlsv1.2")}, "tlsv1.1 refused: only TLS 1.2 and newer"),
    ({"ssl_versions": ("tlsv1",)}, "tlsv1 refused"),
    ({"ssl_versions": ("sslv3",)}, "sslv3 refused"),
    ({"ssl_versions": ("tls9",)}, "unknown version 'tls9'"),
    ({"ssl_versions": ()}, "ssl_versions is empty"),
    ({"ssl_verify": "verify_maybe"}, "ssl_verify must be verify_peer or verify_none"),
    ({"ssl_fail_if_no_peer_cert": True}, "needs ssl_verify = verify_peer"),
    ({"tls_port": 5671}, "tls_port needs ssl_certfile and ssl_keyfile"),
    ({"tls_port": 5671, "ssl_certfile": "c", "ssl_keyfile": "k", "ssl_verify": "verify_peer"},
     "verify_peer needs ssl_cacertfile"),
    ({"tls_port": 5672}, "tls_port and port are both 5672"),
    ({"max_connections": -1}, "max_connections must be a non-negative integer"),
    ({"max_connections": "lots"}, "max_connections must be"),
    ({"handshake_timeout": 0}, "handshake_timeout must be a positive number"),
])
def test_bad_settings_are_named(kw, says):
    assert any(says in e for e in Config(**kw).check()), Config(**kw).check()


def test_cli_refuses_old_tls_versions(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--tls-port", "5671", "--ssl-certfile", "c", "--ssl-keyfile", "k",
                    "--ssl-versions", "tlsv1.1,tlsv1.2"])
    assert e.value.code == 2
    assert "tlsv1.1 refused: only TLS 1.2 and newer are supported" in capsys.readouterr().err


def test_cli_flags_set_the_tls_settings():
    cfg = parse_args(["--tls-port", "5671", "--ssl-certfile", "c.pem", "--ssl-keyfile",
                      "k.pem", "--ssl-cacertfile", "ca.pem", "--ssl-verify", "verify_peer",
                      "--ssl-fail-if-no-peer-cert", "--ssl-versions", "tlsv1.3",
                      "--handshake-timeout", "2.5", "--max-connections", "100"])
    assert (cfg.tls_port, cfg.ssl_certfile, cfg.ssl_keyfile, cfg.ssl_cacertfile) == (
        5671, "c.pem", "k.pem", "ca.pem")
    assert cfg.ssl_verify == "verify_peer" and cfg.ssl_fail_if_no_peer_cert is True
    assert cfg.ssl_versions == ("tlsv1.3",)
    assert cfg.handshake_timeout == 2.5 and cfg.max_connections == 100


def test_toml_keys_set_the_tls_settings(tmp_path):
    f = tmp_path / "leveret.toml"
    f.write_text('[tls]\ntls_port = 5671\nssl_certfile = "c"\nssl_keyfile = "k"\n'
                 'ssl_versions = ["tlsv1.2"]\n[limits]\nmax_connections = 10\n'
                 'handshake_timeout = 3\n')
    cfg = parse_args(["--config", str(f)])
    assert cfg.tls_port == 5671 and cfg.ssl_versions == ("tlsv1.2",)
    assert cfg.max_connections == 10 and cfg.handshake_timeout == 3


def test_cli_max_connections_takes_infinity():
    assert parse_args(["--max-connections", "infinity"]).connection_limit is None


@pytest.mark.parametrize("verify, fail, mode", [
    ("verify_none", False, ssl.CERT_NONE),
    ("verify_peer", False, ssl.CERT_OPTIONAL),
    ("verify_peer", True, ssl.CERT_REQUIRED),
])
def test_context_verify_modes(certs, verify, fail, mode):
    f, _ = certs
    ctx = tls.server_context(tls_config(certs, ssl_cacertfile=f.ca.cert, ssl_verify=verify,
                                        ssl_fail_if_no_peer_cert=fail))
    assert ctx.verify_mode == mode


def test_context_versions(certs):
    ctx = tls.server_context(tls_config(certs))
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2,
                                                          ssl.TLSVersion.TLSv1_3)
    ctx = tls.server_context(tls_config(certs, ssl_versions=("tlsv1.3",)))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


def test_context_missing_files_are_named(certs, tmp_path):
    with pytest.raises(tls.TlsConfigError, match="cannot load ssl_certfile"):
        tls.server_context(tls_config(certs, ssl_certfile=str(tmp_path / "nope.pem")))
    with pytest.raises(tls.TlsConfigError, match="cannot load ssl_cacertfile"):
        tls.server_context(tls_config(certs, ssl_cacertfile=str(tmp_path / "nope.pem")))


def test_context_key_that_does_not_match_the_certificate(certs):
    f, server = certs
    other = f.leaf("other", "other", server=True)
    with pytest.raises(tls.TlsConfigError, match="cannot load ssl_certfile"):
        tls.server_context(tls_config(certs, ssl_keyfile=other.key))


# --- what the management API shows of a session (tls.info) ---------------------------------
def _self_signed(subject: list) -> bytes:
    """A DER certificate whose subject and issuer are `subject` ([(oid, value)], first RDN
    first), valid 2026-11-29 00:00 to 2026-12-01 12:30:05 UTC."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(oid, value) for oid, value in subject])
    utc = datetime.timezone.utc
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(7)
            .not_valid_before(datetime.datetime(2026, 11, 29, tzinfo=utc))
            .not_valid_after(datetime.datetime(2026, 12, 1, 12, 30, 5, tzinfo=utc))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER)


def test_peer_certificate_fields_as_rabbit_ssl_prints_them__E3():
    """RFC 4514, last RDN first, RabbitMQ's names for the attributes RFC 4514 has none for;
    validity "notBefore - notAfter"; nothing without a certificate."""
    from cryptography.x509.oid import NameOID

    der = _self_signed([(NameOID.COUNTRY_NAME, "GB"), (NameOID.ORGANIZATION_NAME, "Acme, Ltd"),
                        (NameOID.EMAIL_ADDRESS, "a@example.com"),
                        (NameOID.COMMON_NAME, "alice")])
    fields = tls.cert_fields(der)
    assert fields["cert_subject"] == \
        "CN=alice,EMAILADDRESS=a@example.com,O=Acme\\, Ltd,C=GB"
    assert fields["cert_issuer"] == fields["cert_subject"]  # (self-signed)
    assert fields["cert_validity"] == "2026-11-29T00:00:00Z - 2026-12-01T12:30:05Z"
    assert tls.cert_fields(None) == {} and tls.cert_fields(b"") == {}


def test_suite_parts_as_erlang_names_them():
    ctx = ssl.create_default_context()
    assert tls.suite_parts(ctx, "TLS_AES_256_GCM_SHA384") == ("any", "aes_256_gcm", "aead")
    assert tls.suite_parts(ctx, "ECDHE-RSA-AES128-GCM-SHA256") == ("ecdhe_rsa", "aes_128_gcm",
                                                                   "aead")
    assert tls.suite_parts(ctx, "no-such-suite") == ("", "", "")
