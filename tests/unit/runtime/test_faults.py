"""actors/faults.py: the test-only partition hook reads its file, cuts both ways, heals, and
refuses a node whose cluster address is not on loopback."""

from __future__ import annotations

import json
import os

import pytest

from actors import faults


def write(path, pairs) -> None:
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"cut": pairs}, f)
    os.replace(tmp, path)
    faults_time = os.stat(path).st_mtime_ns + 1  # a rewrite within the same tick still counts
    os.utime(path, ns=(faults_time, faults_time))


def fresh(f: faults.Faults) -> faults.Faults:
    f._checked = -faults.CHECK_S  # look at the file now, not CHECK_S later
    return f


def test_not_enabled_without_the_variable(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.from_env("127.0.0.2") is None


def test_refuses_a_cluster_address_off_loopback(monkeypatch, tmp_path):
    monkeypatch.setenv(faults.ENV, str(tmp_path / "faults.json"))
    with pytest.raises(SystemExit, match="not a loopback address"):
        faults.from_env("192.0.2.10")


def test_cuts_both_ways_and_heals(monkeypatch, tmp_path):
    path = tmp_path / "faults.json"
    monkeypatch.setenv(faults.ENV, str(path))
    a, b, c = (faults.from_env(h) for h in ("127.0.0.2", "127.0.0.3", "127.0.0.4"))
    assert not fresh(a).cut("127.0.0.3")  # no file: nothing cut
    write(path, [["127.0.0.2", "127.0.0.3"]])
    assert fresh(a).cut("127.0.0.3") and fresh(b).cut("127.0.0.2")
    assert not fresh(a).cut("127.0.0.4") and not fresh(c).cut("127.0.0.2")
    assert fresh(a).cut_endpoint("tcp://127.0.0.3:5555")
    assert not fresh(a).cut_endpoint("ipc:///tmp/x.sock")
    write(path, [])
    assert not fresh(a).cut("127.0.0.3") and not fresh(b).cut("127.0.0.2")


# -- planted bugs --------------------------------------------------------------------------------
def plant(monkeypatch, path, bugs) -> None:
    with open(path, "w") as f:
        json.dump({"bugs": bugs}, f)
    monkeypatch.setattr(faults, "_PATH", str(path))  # (the variable is read at import)
    monkeypatch.setattr(faults, "_bugs", faults._Bugs())


def test_no_bug_without_the_variable(monkeypatch):
    monkeypatch.setattr(faults, "_PATH", "")
    assert not any(faults.bug(b, "q", "127.0.0.1") for b in faults.BUGS)


def test_a_bug_applies_to_the_queues_it_names_only(monkeypatch, tmp_path):
    monkeypatch.setenv(faults.ENV, str(tmp_path / "faults.json"))
    plant(monkeypatch, tmp_path / "faults.json", {"deliver_twice": ["q1", "q2"]})
    assert faults.bug("deliver_twice", "q1", "127.0.0.1")
    assert faults.bug("deliver_twice", "q2", "localhost")
    assert not faults.bug("deliver_twice", "q3", "127.0.0.1")
    assert not faults.bug("confirm_before_sync", "q1", "127.0.0.1")


def test_a_bug_refuses_a_node_off_loopback(monkeypatch, tmp_path):
    monkeypatch.setenv(faults.ENV, str(tmp_path / "faults.json"))
    plant(monkeypatch, tmp_path / "faults.json", {"deliver_twice": ["q1"]})
    with pytest.raises(SystemExit, match="not a loopback address"):
        faults.bug("deliver_twice", "q1", "192.0.2.10")


def test_an_unknown_bug_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(faults.ENV, str(tmp_path / "faults.json"))
    plant(monkeypatch, tmp_path / "faults.json", {"no_such_bug": ["q1"]})
    with pytest.raises(SystemExit, match="unknown bug 'no_such_bug'"):
        faults.bug("deliver_twice", "q1", "127.0.0.1")
