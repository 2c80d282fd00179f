"""The test-only crash injection of actors/faults.py (`crash`): which actor, which message, how
many times; nothing without LEVERET_FAULT_INJECTION."""
import json

import pytest

from actors import faults


class Publish:  # (stands for a message class: `on` names the class)
    pass


class Tick:
    pass


@pytest.fixture
def planted(tmp_path, monkeypatch):
    path = tmp_path / "faults.json"
    monkeypatch.setattr(faults, "_PATH", str(path))
    monkeypatch.setattr(faults, "_bugs", faults._Bugs())

    def plant(*crashes):
        path.write_text(json.dumps({"crash": list(crashes)}))
    return plant


def _crashes(actor, vhost, name, msg) -> bool:
    try:
        faults.crash(actor, vhost, name, msg, "127.0.0.1")
    except faults.InjectedCrash:
        return True
    return False


def test_crashes_the_named_queue_on_the_named_message_times_times(planted):
    planted({"actor": "queue", "vhost": "/", "name": "q1", "times": 2, "on": "Publish"})
    assert not _crashes("queue", "/", "q1", Tick())
    assert not _crashes("queue", "/", "q2", Publish())
    assert not _crashes("mirror", "/", "q1", Publish())
    assert [_crashes("queue", "/", "q1", Publish()) for _ in range(3)] == [True, True, False]


def test_without_on_any_message_and_metadata_names_no_queue(planted):
    planted({"actor": "metadata", "times": 1})
    assert _crashes("metadata", "", "", Tick())
    assert not _crashes("metadata", "", "", Tick())


def test_nothing_without_the_variable(monkeypatch):
    monkeypatch.setattr(faults, "_PATH", "")
    assert not _crashes("queue", "/", "q1", Publish())


def test_an_unknown_actor_refuses_to_run(planted):
    planted({"actor": "channel", "times": 1})
    with pytest.raises(SystemExit):
        faults.crash("queue", "/", "q1", Publish(), "127.0.0.1")
