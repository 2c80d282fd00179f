"""bench/refbroker.py's install guard (no apt, no broker started)."""
import pytest

from bench import refbroker


def test_not_root_without_rabbitmq_gets_a_clear_message(monkeypatch):
    monkeypatch.setattr(refbroker, "rabbitmq_installed", lambda: False)
    monkeypatch.setattr(refbroker.os, "geteuid", lambda: 1000)
    with pytest.raises(refbroker.RefBrokerError) as e:
        refbroker.ensure_rabbitmq_installed(log=lambda m: None)
    assert "apt-get install -y rabbitmq-server" in str(e.value)
    assert "not root" in str(e.value)


def test_installed_means_nothing_to_do(monkeypatch):
    monkeypatch.setattr(refbroker, "rabbitmq_installed", lambda: True)
    monkeypatch.setattr(refbroker.subprocess, "run", lambda *a, **k: pytest.fail("ran apt"))
    refbroker.ensure_rabbitmq_installed(log=lambda m: None)
