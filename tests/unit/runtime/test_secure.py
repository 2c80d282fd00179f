"""actors/secure.py: the cluster secret file (created 0400, refused when others may read it),
the keys derived from it, the ZAP handler that admits members only (issue 11)."""

from __future__ import annotations

import logging
import os
import stat
import time

import pytest
import zmq

from actors import secure
from actors.config import Config


def test_the_secret_file_is_created_0400_whatever_the_umask_and_then_reused(tmp_path):
    cfg = Config(data_dir=str(tmp_path))
    old = os.umask(0)
    try:
        first = secure.load_secret(cfg)
    finally:
        os.umask(old)
    path = tmp_path / "cluster_secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert len(first) == 64 and secure.load_secret(cfg) == first


def test_a_secret_file_others_may_read_is_refused(tmp_path):
    path = tmp_path / "s"
    path.write_text("x" * 40)
    path.chmod(0o644)
    with pytest.raises(SystemExit, match="chmod 400"):
        secure.load_secret(Config(data_dir=str(tmp_path), cluster_secret_file=str(path)))


def test_a_short_secret_is_refused_and_the_setting_wins_over_the_file(tmp_path):
    with pytest.raises(SystemExit, match="shorter than 16"):
        secure.load_secret(Config(data_dir=str(tmp_path), cluster_secret="short"))
    cfg = Config(data_dir=str(tmp_path), cluster_secret="a-long-enough-shared-secret")
    assert secure.load_secret(cfg) == b"a-long-enough-shared-secret"
    assert not (tmp_path / "cluster_secret").exists()


def test_the_secret_is_not_on_a_workers_command_line():
    cfg = Config(cluster_secret="a-long-enough-shared-secret")
    assert "a-long-enough-shared-secret" not in cfg.to_json()


def test_the_secret_goes_to_a_worker_through_a_pipe():
    fd = secure.pass_secret(b"0123456789abcdef")
    assert secure.read_secret(fd) == b"0123456789abcdef"


def test_keys_depend_on_the_secret_only():
    a, b = secure.Curve(b"s" * 32), secure.Curve(b"s" * 32)
    assert (a.server_public, a.client_public) == (b.server_public, b.client_public)
    assert a.server_public != secure.Curve(b"t" * 32).server_public
    assert secure.raft_password(b"s" * 32) != secure.raft_password(b"t" * 32)


def test_members_talk_and_a_client_key_that_is_not_the_clusters_is_refused(caplog):
    """A peer that somehow knew the server key but not the client key: the ZAP handler says
    no and logs its address."""
    ctx = zmq.Context()
    curve = secure.Curve(b"m" * 32)
    try:
        pull = ctx.socket(zmq.PULL)
        curve.server(pull)
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        member = ctx.socket(zmq.PUSH)
        curve.client(member)
        member.connect(f"tcp://127.0.0.1:{port}")
        member.send(b"from a member")
        assert pull.poll(5000) and pull.recv() == b"from a member"
        stranger = ctx.socket(zmq.PUSH)
        public, secret = zmq.curve_keypair()
        stranger.curve_serverkey = curve.server_public
        stranger.curve_publickey, stranger.curve_secretkey = public, secret
        with caplog.at_level(logging.WARNING, logger="leveret.secure"):
            stranger.connect(f"tcp://127.0.0.1:{port}")
            stranger.send(b"forged")
            deadline = time.monotonic() + 10
            while "refused a ZeroMQ connection from 127.0.0.1" not in caplog.text:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.05)
            assert not pull.poll(200)
        for s in (pull, member, stranger):
            s.close(0)
    finally:
        ctx.term()


def test_the_socket_watcher_waits_when_it_watches_nothing(monkeypatch):
    """zmq_poll of no socket returns at once: the watcher thread used to spin on it at 100% CPU
    (a unit test of the storage ran 25x slower in the same process)."""
    import threading
    import time

    import zmq

    from actors import secure
    polls = []
    real = zmq.Poller.poll
    monkeypatch.setattr(zmq.Poller, "poll", lambda self, t=None: polls.append(t) or real(self, t))
    ctx = zmq.Context()
    try:
        secure.Watcher(ctx)
        time.sleep(0.5)
        assert len(polls) <= 1, f"{len(polls)} polls of nothing in 0.5 s"
        assert threading.active_count() >= 2
    finally:
        ctx.destroy(linger=0)
