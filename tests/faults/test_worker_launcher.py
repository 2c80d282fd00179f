"""The worker launcher (actors/worker/launcher.py): a node forks its workers from a process that
imported their code once; the workers are the node's children all the same (it restarts them
as before), and a launcher killed -9 costs nothing but speed: the node starts the next worker
as a program of its own (ARCHITECTURE "Processes of one node", behaviour C6 for the restart)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.faults.test_worker_kill import start_node

pytestmark = pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                reason="kills Leveret's own processes")


def ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def round_trip(broker, queue: str, body: bytes) -> None:
    with broker.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue)
        ch.basic_publish("", queue, body)
        got = None
        deadline = time.monotonic() + 10
        while got is None and time.monotonic() < deadline:
            got = ch.basic_get(queue, auto_ack=True)[2]
        assert got == body


def wait_restarted(broker, index: int, old: int) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pid = broker.queue_worker_pids().get(index)
        if pid not in (None, old):
            return pid
        time.sleep(0.1)
    raise AssertionError(f"queue worker {index} not restarted:\n{broker.log_tail()}")


def test_workers_are_forked_by_the_launcher_and_supervised_by_the_node_which_falls_back_to_programs(
        tmp_path):
    broker = start_node(tmp_path, "--queue-workers", "2", "--conn-workers", "2")
    node = broker.pid
    try:
        round_trip(broker, "before", b"1")
        workers = [*broker.worker_pids("queue").values(), *broker.worker_pids("conn").values()]
        assert len(workers) == 4
        assert all(ppid(w) == node for w in workers)  # the node's children: it waits for them
        # each shows in ps as the program it stands for (the configuration left out)
        assert sorted("--kind queue" in cmdline(w) for w in workers) == [False, False, True, True]
        launchers = [c for c in children(node) if "actors.worker.launcher" in cmdline(c)]
        assert len(launchers) == 1, [cmdline(c) for c in children(node)]
        assert broker.log_path.read_text().count("forked by the launcher") == 4

        # a worker killed -9 is forked again
        old = broker.queue_worker_pids()[0]
        os.kill(old, signal.SIGKILL)
        new = wait_restarted(broker, 0, old)
        assert ppid(new) == node and broker.log_path.read_text().count(
            "forked by the launcher") == 5
        round_trip(broker, "forked again", b"2")

        # the launcher killed -9: the next worker is a program of its own, and serves
        os.kill(launchers[0], signal.SIGKILL)
        os.kill(new, signal.SIGKILL)
        newer = wait_restarted(broker, 0, new)
        assert ppid(newer) == node
        assert "actors.worker.process" in cmdline(newer)
        assert broker.log_path.read_text().count("its own program") == 1, broker.log_tail()
        round_trip(broker, "a program", b"3")
        everyone = [node, *children(node)]
    finally:
        broker.stop()
    deadline = time.monotonic() + 10
    while not all(gone(p) for p in everyone) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(gone(p) for p in everyone), [p for p in everyone if not gone(p)]
