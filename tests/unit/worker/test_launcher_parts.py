"""The worker launcher's parts that need no node (actors/worker/launcher.py): its framing carries a
request and the descriptors a worker inherits; `ForkedWorker` answers the node's supervision
(poll, wait, terminate, kill) for a child the node did not start with Popen."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from actors.worker import launcher


def test_a_request_and_its_descriptors_arrive_together():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r, w = os.pipe()
    try:
        argv = ["--kind", "conn", "--config-json", "{\"x\": \"" + "y" * 100_000 + "\"}"]
        launcher._send(a, {"argv": argv, "fd_args": ["--secret-fd"]}, [r])
        got, fds = launcher._recv(b)
        assert got == {"argv": argv, "fd_args": ["--secret-fd"]}
        assert len(fds) == 1 and fds[0] != r
        os.write(w, b"secret")
        assert os.read(fds[0], 6) == b"secret"  # the same pipe, under another number
        os.close(fds[0])
        launcher._send(a, {"pid": 7})
        assert launcher._recv(b) == ({"pid": 7}, [])
        a.close()
        assert launcher._recv(b) == (None, [])  # the node closed its end: the launcher ends
    finally:
        for fd in (r, w):
            os.close(fd)
        b.close()


def test_an_oversized_frame_is_refused():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        a.sendall((launcher.MAX_REQUEST + 1).to_bytes(4, "big"))
        with pytest.raises(ValueError):
            launcher._recv(b)


def _child(*argv: str) -> int:
    return os.posix_spawn(argv[0], list(argv), dict(os.environ))


def test_a_forked_worker_is_polled_signalled_and_waited_for_as_popen_would():
    pid = _child("/bin/sleep", "30")
    w = launcher.ForkedWorker(pid)
    assert w.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        w.wait(0.05)
    w.terminate()
    assert w.wait(10) == -signal.SIGTERM
    assert w.poll() == -signal.SIGTERM  # (asked again: the same answer, not an error)
    w.kill()  # an ended worker: nothing to signal


def test_a_forked_worker_s_exit_status_is_its_own():
    w = launcher.ForkedWorker(_child("/bin/sh", "-c", "exit 3"))
    assert w.wait(10) == 3
