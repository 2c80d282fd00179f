"""Fixtures shared by the integration modules (the broker fixtures are in tests/conftest.py)."""
from __future__ import annotations

import pytest

import rawamqp


@pytest.fixture
def raw_factory(broker):
    """Raw AMQP clients (rawamqp.RawClient) logged in to the module's broker, closed at the end;
    the broker must have survived whatever they sent."""
    clients = []

    def make(open_channel: bool = True, **handshake) -> rawamqp.RawClient:
        c = rawamqp.RawClient(broker.host, broker.port)
        clients.append(c)
        handshake.setdefault("user", broker.user)
        handshake.setdefault("password", broker.password)
        handshake.setdefault("vhost", broker.vhost)
        c.handshake(**handshake)
        if open_channel:
            c.open_channel(1)
        return c

    yield make
    for c in clients:
        c.close()
    assert broker.alive(), "the broker must survive bad client input"
