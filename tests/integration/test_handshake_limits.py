"""Pre-login limits: `handshake_timeout` (a socket not past connection.open-ok in time is
closed, as RabbitMQ's rabbit_reader does after 10 s; the TLS handshake counts too) and the
node-wide `max_connections` (RabbitMQ's connection_max: past it connection.open is answered with
530 "connection refused: node connection limit (N) is reached"; R3)."""
from __future__ import annotations

import os
import socket
import ssl
import tempfile
import time
from pathlib import Path

import pika
import pytest
from pamqp import commands
from pika.exceptions import ProbableAccessDeniedError

import rawamqp
from amqp_helpers import safe_close, wait_until
from conftest import Broker, free_port
from tlscerts import CertFactory

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="starts Leveret nodes with limits of their own")

TIMEOUT = 1.0  # handshake_timeout of the node under test, seconds
BOUND = TIMEOUT + 9.0  # what the close may take at most on a loaded 2-core machine


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    f = CertFactory(tmp_path_factory.mktemp("certs"))
    return f, f.leaf("server", "localhost", server=True)


@pytest.fixture(scope="module")
def node(tmp_path_factory, certs):
    """handshake_timeout 1 s, with an AMQPS port; two connection workers."""
    f, server = certs
    tls_port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="leveret-hs-", dir=tmp_path_factory.getbasetemp()))
    broker = Broker.start_leveret(tmp, "--handshake-timeout", str(TIMEOUT), "--conn-workers",
                                  "2", "--tls-port", str(tls_port), "--ssl-certfile",
                                  server.cert, "--ssl-keyfile", server.key)
    broker.tls_port = tls_port
    broker.ca = f.ca.cert
    try:
        yield broker
    finally:
        broker.stop()


def closed_after(sock: socket.socket) -> float:
    """Read until the server closes the socket; seconds that took. Fails past BOUND."""
    start = time.monotonic()
    sock.settimeout(BOUND)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail(f"the socket was still open after {BOUND} s")
    return time.monotonic() - start


# --- handshake_timeout ----------------------------------------------------------------------
def test_idle_socket_is_closed_after_handshake_timeout(node):
    with socket.create_connection((node.host, node.port)) as s:
        took = closed_after(s)
    assert took >= TIMEOUT * 0.5  # the timeout closed it, not something at once
    wait_until(lambda: "{handshake_timeout,handshake}" in node.log_tail(200),
               message="RabbitMQ's handshake_timeout log line")


def test_header_only_socket_is_closed_without_connection_close(node):
    with rawamqp.RawClient(node.host, node.port, timeout=BOUND) as c:
        c.send(rawamqp.PROTOCOL_HEADER)
        c.expect(commands.Connection.Start, channel=0)
        frames = c.read_until_closed(timeout=BOUND)
    assert frames == []  # dropped, as RabbitMQ does: no connection.close
    wait_until(lambda: "{handshake_timeout,frame_header}" in node.log_tail(200),
               message="RabbitMQ's handshake_timeout log line")


def test_socket_stopping_mid_handshake_is_closed(node):
    with rawamqp.RawClient(node.host, node.port, timeout=BOUND) as c:
        c.handshake(open_vhost=False)  # start-ok and tune-ok sent, no connection.open
        assert c.read_until_closed(timeout=BOUND) == []


def test_idle_tls_socket_is_closed_after_handshake_timeout(node):
    """No TLS ClientHello at all: the TLS handshake is inside the same time limit."""
    with socket.create_connection((node.host, node.tls_port)) as s:
        closed_after(s)
    wait_until(lambda: "{handshake_timeout,ssl_handshake}" in node.log_tail(200),
               message="the TLS handshake timeout logged")


def test_tls_done_but_amqp_idle_is_closed(node):
    ctx = ssl.create_default_context(cafile=node.ca)
    with socket.create_connection((node.host, node.tls_port)) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            closed_after(s)


def test_completed_handshake_is_not_closed(node):
    done = node.connection()
    try:
        ch = done.channel()
        # a socket idle since after `done` connected: once it is closed, `done`'s own
        # handshake_timeout has passed too
        with socket.create_connection((node.host, node.port)) as idle:
            closed_after(idle)
        assert done.is_open
        ch.queue_declare("", exclusive=True)  # still served
        assert done.is_open
    finally:
        safe_close(done)


# --- max_connections ------------------------------------------------------------------------
LIMIT = 3


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """max_connections 3 over two connection workers."""
    tmp = Path(tempfile.mkdtemp(prefix="leveret-max-", dir=tmp_path_factory.getbasetemp()))
    broker = Broker.start_leveret(tmp, "--max-connections", str(LIMIT), "--conn-workers", "2")
    try:
        yield broker
    finally:
        broker.stop()


def try_connect(broker):
    try:
        return broker.connection()
    except ProbableAccessDeniedError:
        return None


def can_connect(broker) -> bool:
    c = try_connect(broker)
    if c is None:
        return False
    safe_close(c)
    return True


def test_max_connections_refuses_the_next_with_a_clear_close__R3(limited):
    # the start-up probe's socket may still be counted for a moment
    first = wait_until(lambda: try_connect(limited), message="a first connection")
    conns = [first] + [limited.connection() for _ in range(LIMIT - 1)]
    try:
        with pytest.raises(ProbableAccessDeniedError) as e:
            limited.connection()
        assert ("(530) 'NOT_ALLOWED - connection refused: node connection limit (3) is "
                "reached'") in str(e.value)
        for c in conns:  # the ones within the limit are untouched
            c.channel().queue_declare("", exclusive=True)
        wait_until(lambda: "node connection limit (3) is reached" in limited.log_tail(200),
                   message="the refusal logged")
        conns.pop().close()
        conns.append(wait_until(lambda: try_connect(limited),
                                message="a new connection once one closed"))
        with pytest.raises(ProbableAccessDeniedError):
            limited.connection()
    finally:
        for c in conns:
            safe_close(c)


def test_max_connections_counts_sockets_before_login__R3(limited):
    """Sockets not logged in yet hold a place too (RabbitMQ counts every accepted socket):
    the refusal comes at connection.open, with RabbitMQ's text, on a raw client."""
    wait_until(lambda: can_connect(limited), message="the node under its limit")
    idle = [socket.create_connection((limited.host, limited.port)) for _ in range(LIMIT)]
    try:
        with rawamqp.RawClient(limited.host, limited.port) as c:
            c.handshake(open_vhost=False)
            c.send_method(0, commands.Connection.Open(virtual_host="/"))
            close = c.expect_connection_close()
        assert (close.reply_code, close.reply_text) == (
            530, "NOT_ALLOWED - connection refused: node connection limit (3) is reached")
    finally:
        for s in idle:
            s.close()
    wait_until(lambda: can_connect(limited), message="room again once the sockets closed")
