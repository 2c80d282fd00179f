"""AMQPS: the TLS listener (`--tls-port` and RabbitMQ's ssl_options as `--ssl-*`), with real
clients (pika's SSLOptions, aio-pika's amqps URL, `openssl s_client`) and certificates made
for the test (tests/integration/tlscerts.py): password logins over TLS, EXTERNAL logins from
the client certificate's CN (E3), verify_peer with fail_if_no_peer_cert, old TLS versions
refused, and the plain port working beside it."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import select
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import warnings
from pathlib import Path

import aio_pika
from cryptography import x509
import pika
import pytest
from pamqp import commands
from pika.exceptions import AMQPConnectionError, ProbableAuthenticationError

import rawamqp
from amqp_helpers import safe_close, unique, wait_until
from conftest import Broker, free_port
from tlscerts import CertFactory

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="starts Leveret nodes with TLS settings of their own")


class TlsNode:
    """A Leveret node with an AMQPS port, and the certificates its clients use."""

    def __init__(self, broker: Broker, tls_port: int, certs: "Certs"):
        self.broker = broker
        self.tls_port = tls_port
        self.certs = certs

    def client_context(self, cert=None, ca=None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=ca or self.certs.factory.ca.cert)
        if cert is not None:
            ctx.load_cert_chain(cert.cert, cert.key)
        return ctx

    def params(self, cert=None, external=False, **kw) -> pika.ConnectionParameters:
        creds = (pika.credentials.ExternalCredentials() if external else
                 pika.PlainCredentials(kw.pop("user", "guest"), kw.pop("password", "guest")))
        kw.setdefault("connection_attempts", 1)
        kw.setdefault("socket_timeout", 5)
        kw.setdefault("stack_timeout", 10)
        kw.setdefault("heartbeat", 0)
        return pika.ConnectionParameters(
            host="127.0.0.1", port=self.tls_port, credentials=creds,
            ssl_options=pika.SSLOptions(self.client_context(cert), "localhost"), **kw)

    def connect(self, cert=None, external=False, **kw) -> pika.BlockingConnection:
        return pika.BlockingConnection(self.params(cert, external, **kw))

    def raw(self, cert=None) -> rawamqp.RawClient:
        """A raw AMQP client over TLS (frames seen one by one)."""
        c = rawamqp.RawClient("127.0.0.1", self.tls_port)
        c.sock = self.client_context(cert).wrap_socket(c.sock, server_hostname="localhost")
        return c


class Certs:
    def __init__(self, folder: Path):
        self.factory = CertFactory(folder)
        self.server = self.factory.leaf("server", "localhost", server=True)
        self.alice = self.factory.leaf("alice", "alice")  # a user of the broker
        self.mallory = self.factory.leaf("mallory", "mallory")  # no such user
        self.nobody = self.factory.leaf("nobody", "nobody")  # a user without permissions
        rogue_ca = CertFactory(folder / "rogue", name="rogue-ca")
        self.rogue = rogue_ca.leaf("rogue-alice", "alice")  # CN alice, from a CA not trusted


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


STATS_MS = 300  # collect_statistics_interval of the nodes (the management API's samples)


def _start(tmp_path_factory, certs: Certs, *ssl_args: str) -> tuple[Broker, int]:
    tls_port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="leveret-tls-", dir=tmp_path_factory.getbasetemp()))
    (tmp / "leveret.toml").write_text(f"collect_statistics_interval = {STATS_MS}\n")
    broker = Broker.start_leveret(
        tmp, "--config", str(tmp / "leveret.toml"),
        "--tls-port", str(tls_port), "--ssl-certfile", certs.server.cert,
        "--ssl-keyfile", certs.server.key, "--ssl-cacertfile", certs.factory.ca.cert,
        *ssl_args)
    return broker, tls_port


@pytest.fixture(scope="module")
def node(tmp_path_factory, certs):
    """verify_peer, fail_if_no_peer_cert false: clients with and without certificates."""
    http_port = free_port()
    broker, tls_port = _start(tmp_path_factory, certs, "--ssl-verify", "verify_peer",
                              "--management-port", str(http_port))
    broker.http_port = http_port
    broker.ctl("add_user", "alice", "not-used-by-external")
    broker.ctl("set_permissions", "alice", ".*", ".*", ".*")
    broker.ctl("add_user", "nobody", "not-used-by-external")
    try:
        yield TlsNode(broker, tls_port, certs)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def strict_node(tmp_path_factory, certs):
    """verify_peer with fail_if_no_peer_cert: no certificate, no connection."""
    broker, tls_port = _start(tmp_path_factory, certs, "--ssl-verify", "verify_peer",
                              "--ssl-fail-if-no-peer-cert")
    try:
        yield TlsNode(broker, tls_port, certs)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def lax_node(tmp_path_factory, certs):
    """verify_none: no client certificate is asked for, so no EXTERNAL."""
    broker, tls_port = _start(tmp_path_factory, certs, "--ssl-verify", "verify_none")
    broker.ctl("add_user", "alice", "not-used-by-external")
    try:
        yield TlsNode(broker, tls_port, certs)
    finally:
        broker.stop()


def round_trip(conn: pika.BlockingConnection, body: bytes) -> bytes:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, body)
    got = wait_until(lambda: ch.basic_get(q, auto_ack=True)[2], message="the message back")
    return got


# --- password logins over TLS ---------------------------------------------------------------
def test_pika_plain_login_over_tls_and_large_messages(node):
    c = node.connect()
    try:
        body = os.urandom(300_000)  # many TLS records, several reads on each side
        assert round_trip(c, body) == body
        assert round_trip(c, b"small") == b"small"
    finally:
        safe_close(c)


def test_plain_port_works_beside_the_tls_port(node):
    c = node.broker.connection()
    try:
        assert round_trip(c, b"plain") == b"plain"
    finally:
        safe_close(c)


def test_tls_port_refuses_plain_amqp(node):
    """AMQP without TLS on the AMQPS port is not a TLS handshake: the socket is closed."""
    with rawamqp.RawClient("127.0.0.1", node.tls_port) as c:
        c.send(rawamqp.PROTOCOL_HEADER)
        with pytest.raises(rawamqp.Closed):
            while True:
                c.read_raw(1)
    wait_until(lambda: "TLS handshake with 127.0.0.1" in node.broker.log_tail(200),
               message="the failed handshake logged")


def test_aio_pika_amqps_url(node):
    certs = node.certs

    async def main():
        query = urllib.parse.urlencode({"cafile": certs.factory.ca.cert})
        conn = await aio_pika.connect(f"amqps://guest:guest@localhost:{node.tls_port}/?{query}",
                                      timeout=10)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue(unique("aio-tls"), exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"over tls"),
                                              routing_key=q.name)
            msg = await q.get(timeout=5)
            await msg.ack()
            return msg.body
    assert asyncio.run(main()) == b"over tls"


def test_aio_pika_ssl_context_and_external_login__E3(node):
    async def main():
        ctx = node.client_context(node.certs.alice)
        conn = await aio_pika.connect(f"amqps://localhost:{node.tls_port}/?auth=external",
                                      ssl_context=ctx, timeout=10)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue(unique("aio-ext"), exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"alice"), routing_key=q.name)
            msg = await q.get(timeout=5)
            await msg.ack()
            return msg.body
    assert asyncio.run(main()) == b"alice"


# --- EXTERNAL -------------------------------------------------------------------------------
def test_pika_external_login_with_a_client_certificate__E3(node):
    c = node.connect(node.certs.alice, external=True)
    try:
        assert round_trip(c, b"from alice") == b"from alice"
    finally:
        safe_close(c)


def test_external_is_offered_with_a_verified_certificate_only(node):
    with node.raw(node.certs.alice) as c:
        c.send(rawamqp.PROTOCOL_HEADER)
        start = c.expect(commands.Connection.Start, channel=0)
        assert start.mechanisms.split() == ["AMQPLAIN", "PLAIN", "EXTERNAL"]
    with node.raw() as c:
        c.send(rawamqp.PROTOCOL_HEADER)
        start = c.expect(commands.Connection.Start, channel=0)
        assert "EXTERNAL" not in start.mechanisms.split()


def test_external_unknown_user_is_refused__E3(node):
    with pytest.raises(ProbableAuthenticationError) as e:
        node.connect(node.certs.mallory, external=True)
    assert ("ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. "
            "For details see the broker logfile.") in str(e.value)
    wait_until(lambda: "EXTERNAL login refused: user 'mallory' - invalid credentials"
               in node.broker.log_tail(200), message="the refusal logged")


def test_external_user_needs_vhost_access__E3(node):
    with node.raw(node.certs.nobody) as c:
        c.handshake(mechanism="EXTERNAL", response="", open_vhost=False)
        c.send_method(0, commands.Connection.Open(virtual_host="/"))
        close = c.expect_connection_close()
    assert (close.reply_code, close.reply_text) == (
        530, "NOT_ALLOWED - access to vhost '/' refused for user 'nobody'")


def test_external_without_a_certificate_is_not_possible(node):
    """pika finds no EXTERNAL among the offered mechanisms and gives up."""
    with pytest.raises(AMQPConnectionError):
        node.connect(external=True)


def test_certificate_from_an_untrusted_ca_fails_the_handshake(node):
    with pytest.raises(AMQPConnectionError):
        node.connect(node.certs.rogue, external=True)
    wait_until(lambda: "TLS handshake with 127.0.0.1" in node.broker.log_tail(200),
               message="the failed handshake logged")


def test_verify_none_never_offers_external(lax_node):
    with lax_node.raw(lax_node.certs.alice) as c:
        c.send(rawamqp.PROTOCOL_HEADER)
        start = c.expect(commands.Connection.Start, channel=0)
        assert start.mechanisms.split() == ["AMQPLAIN", "PLAIN"]
    c = lax_node.connect()
    try:
        assert round_trip(c, b"lax") == b"lax"
    finally:
        safe_close(c)


# --- fail_if_no_peer_cert -------------------------------------------------------------------
def test_fail_if_no_peer_cert_refuses_a_client_without_one(strict_node):
    with pytest.raises(AMQPConnectionError):
        strict_node.connect()
    with socket.create_connection(("127.0.0.1", strict_node.tls_port), timeout=5) as s:
        ctx = strict_node.client_context()
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                # TLS 1.3: the server's refusal arrives after the client's handshake is done
                t.sendall(rawamqp.PROTOCOL_HEADER)
                while t.recv(1024):
                    pass
                raise ConnectionError("closed")


def test_fail_if_no_peer_cert_admits_a_client_with_one(strict_node):
    c = strict_node.connect(strict_node.certs.alice)  # a certificate, and a password login
    try:
        assert round_trip(c, b"strict") == b"strict"
    finally:
        safe_close(c)


# --- TLS versions ---------------------------------------------------------------------------
def test_tls_1_1_client_is_refused(node):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this OpenSSL offer TLS 1.1 at all
    with socket.create_connection(("127.0.0.1", node.tls_port), timeout=5) as s:
        with pytest.raises(ssl.SSLError) as e:
            ctx.wrap_socket(s)
    assert "PROTOCOL_VERSION" in str(e.value).upper()


def test_tls_1_2_client_is_served(node):
    ctx = node.client_context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", node.tls_port), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            assert t.version() == "TLSv1.2"
            t.sendall(rawamqp.PROTOCOL_HEADER)
            assert t.recv(1)[:1] == b"\x01"  # a method frame: connection.start


def test_client_close_notify_after_close_ok_is_answered_at_once(node):
    """A client closing the connection: after close-ok the node lingers until the client closes
    its socket, and a TLS client says close_notify first and waits for the node's (asyncio's SSL
    transport, hence aio-pika, up to 30 s). The node answers it and closes: `unwrap` (a
    bidirectional TLS shutdown) returns well within the socket's 10 s timeout, not when the
    30 s linger ends."""
    c = rawamqp.RawClient("127.0.0.1", node.tls_port, timeout=10)
    c.sock = node.client_context().wrap_socket(c.sock, server_hostname="localhost")
    try:
        c.handshake()
        c.send_method(0, rawamqp.commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        c.expect(rawamqp.commands.Connection.CloseOk, channel=0)
        plain = c.sock.unwrap()  # raises socket.timeout if the node never says close_notify
        assert plain.recv(1) == b""  # and then the node closed its end
    finally:
        c.close()


# --- openssl s_client -----------------------------------------------------------------------
def _s_client(port: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
         "-quiet", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _read_frame(proc: subprocess.Popen, buf: bytearray, timeout: float = 10) -> tuple:
    """(type, channel, payload) of the next AMQP frame s_client writes to its stdout."""
    deadline = time.monotonic() + timeout
    while True:
        if len(buf) >= 7:
            size = int.from_bytes(buf[3:7], "big")
            if len(buf) >= 8 + size:
                frame = (buf[0], int.from_bytes(buf[1:3], "big"), bytes(buf[7:7 + size]))
                assert buf[7 + size] == 0xCE
                del buf[:8 + size]
                return frame
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no AMQP frame from s_client; have {bytes(buf)!r}")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                raise AssertionError(f"s_client ended: {proc.stderr.read().decode()}")
            buf += data


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")


def test_openssl_s_client_handshake_and_amqp_bytes_flow(node):
    certs = node.certs
    proc = _s_client(node.tls_port, "-CAfile", certs.factory.ca.cert, "-verify_return_error",
                     "-cert", certs.alice.cert, "-key", certs.alice.key)
    try:
        proc.stdin.write(rawamqp.PROTOCOL_HEADER)
        proc.stdin.flush()
        buf = bytearray()
        ftype, channel, payload = _read_frame(proc, buf)
        assert (ftype, channel, payload[:4]) == (1, 0, b"\x00\x0a\x00\x0a")  # connection.start
        assert b"EXTERNAL" in payload and b"PLAIN" in payload
        proc.stdin.write(rawamqp.method_frame(0, commands.Connection.StartOk(
            client_properties={"product": "s_client"}, mechanism="PLAIN",
            response=rawamqp.plain_response("guest", "guest"))))
        proc.stdin.flush()
        ftype, channel, payload = _read_frame(proc, buf)
        assert (ftype, channel, payload[:4]) == (1, 0, b"\x00\x0a\x00\x1e")  # connection.tune
    finally:
        err = _stop(proc)
    assert "verify return:1" in err and "CN = localhost" in err


def test_openssl_s_client_tls_1_1_is_refused(node):
    proc = _s_client(node.tls_port, "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0")
    try:
        _, err = proc.communicate(timeout=15)  # stdin closed: s_client ends after the handshake
    finally:
        _stop(proc)
    err = err.decode(errors="replace")
    assert proc.returncode != 0
    assert "alert protocol version" in err, err


# --- settings that cannot work --------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--ssl-certfile", "{missing}", "--ssl-keyfile", "{key}"],
     "leveret-server: TLS: cannot load ssl_certfile"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{other_key}"],
     "leveret-server: TLS: cannot load ssl_certfile"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}", "--ssl-versions",
      "tlsv1.1,tlsv1.2"], "tlsv1.1 refused: only TLS 1.2 and newer are supported"),
    (["--ssl-certfile", "{cert}", "--ssl-keyfile", "{key}", "--ssl-verify", "verify_peer"],
     "ssl_verify = verify_peer needs ssl_cacertfile"),
])
def test_unusable_tls_settings_stop_the_node_at_start(tmp_path, certs, args, says):
    names = {"missing": str(tmp_path / "missing.pem"), "cert": certs.server.cert,
             "key": certs.server.key, "other_key": certs.alice.key}
    server = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "leveret-server"
    res = subprocess.run(
        [str(server), "--host", "127.0.0.1", "--port", str(free_port()), "--data-dir",
         str(tmp_path / "data"), "--tls-port", str(free_port()),
         *[a.format(**names) for a in args]],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode != 0
    assert says in res.stderr, res.stderr


# --- what the management API shows of a TLS connection --------------------------------------
def _api_connection(node, name: str):
    """This connection's JSON (GET /api/connections/{name}, over HTTPS: the management
    listener speaks TLS when AMQPS is configured), once sampled; None before."""
    ctx = node.client_context()
    token = base64.b64encode(b"guest:guest").decode()
    base = f"https://localhost:{node.broker.http_port}/api/connections"
    req = urllib.request.Request(base, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
        names = [c["name"] for c in json.loads(r.read())
                 if c["client_properties"].get("connection_name") == name]
    if not names:
        return None
    req = urllib.request.Request(f"{base}/{urllib.parse.quote(names[0], safe='')}",
                                 headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
        return json.loads(r.read())


def _rabbit_validity(pem: str) -> str:
    cert = x509.load_pem_x509_certificate(Path(pem).read_bytes())
    return f"{cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} - " \
           f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"


def test_management_shows_the_client_certificate_and_the_suite__E3(node):
    """peer_cert_subject / _issuer / _validity are the certificate the client presented, in
    rabbit_ssl's formats; ssl_* are the negotiated session's, in Erlang's names; a client
    without a certificate shows "" for the certificate's."""
    with_cert = node.connect(node.certs.alice, client_properties={
        "connection_name": "tls-with-cert"})
    without = node.connect(client_properties={"connection_name": "tls-without-cert"})
    try:
        mine = wait_until(lambda: _api_connection(node, "tls-with-cert"), timeout=20)
        assert (mine["peer_cert_subject"], mine["peer_cert_issuer"],
                mine["peer_cert_validity"]) == ("CN=alice", "CN=leveret-test-ca",
                                                _rabbit_validity(node.certs.alice.cert))
        assert mine["ssl"] is True and mine["ssl_protocol"] in ("tlsv1.3", "tlsv1.2")
        assert mine["ssl_cipher"] in ("aes_256_gcm", "aes_128_gcm", "chacha20_poly1305")
        assert mine["ssl_hash"] == "aead"
        assert mine["ssl_key_exchange"] == ("any" if mine["ssl_protocol"] == "tlsv1.3"
                                            else "ecdhe_ecdsa")
        other = wait_until(lambda: _api_connection(node, "tls-without-cert"), timeout=20)
        assert (other["peer_cert_subject"], other["peer_cert_issuer"],
                other["peer_cert_validity"]) == ("", "", "")
        assert other["ssl_cipher"] == mine["ssl_cipher"]
    finally:
        safe_close(with_cert)
        safe_close(without)
