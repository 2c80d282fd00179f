"""amqp:// and amqps:// URIs as amqp_uri.erl reads them, TLS options in the query, and the
credentials left out of what is shown."""

from __future__ import annotations

import pytest

from actors.shovel import uri


def test_defaults_and_percent_escapes():
    ep = uri.parse("amqp://host")
    assert (ep.host, ep.port, ep.vhost, ep.user, ep.password, ep.tls) == \
        ("host", 5672, "/", "guest", "guest", False)
    ep = uri.parse("amqp://us%40r:p%3Ass@host:1234/v%2Fh")
    assert (ep.user, ep.password, ep.port, ep.vhost) == ("us@r", "p:ss", 1234, "v/h")
    assert uri.parse("amqp://host/").vhost == ""


def test_amqps_takes_rabbitmq_tls_query_keys():
    ep = uri.parse("amqps://h?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/k.pem"
                   "&verify=verify_peer&server_name_indication=broker.example&heartbeat=10")
    assert (ep.port, ep.tls, ep.cacertfile, ep.certfile, ep.keyfile, ep.verify,
            ep.server_name_indication, ep.heartbeat) == (
        5671, True, "/ca.pem", "/c.pem", "/k.pem", "verify_peer", "broker.example", 10)


@pytest.mark.parametrize("text, reason", [
    ("http://h", "unexpected_uri_scheme"),
    ("amqp://h:0", "port_out_of_range"),
    ("amqp://h/a/b", "invalid_vhost"),
    ("amqp://h?heartbeat=soon", "invalid_amqp_params_parameter"),
    ("amqps://h?verify=maybe", "invalid_ssl_parameter"),
    ("amqp://h?cacertfile=/ca.pem", "parameter_unconfigurable_in_query"),  # TLS key, no TLS
    ("amqp://", "direct_connection_not_supported"),
])
def test_refusals_carry_amqp_uri_reasons(text, reason):
    with pytest.raises(uri.UriError) as e:
        uri.parse(text)
    r = e.value.reason
    assert (r[0] if isinstance(r, tuple) else r) == reason


def test_redact_drops_credentials_only():
    assert uri.redact("amqps://user:secret@h:5671/v?verify=verify_none") == \
        "amqps://h:5671/v?verify=verify_none"
    assert uri.parse("amqp://u:p@h").redacted == "amqp://h"
