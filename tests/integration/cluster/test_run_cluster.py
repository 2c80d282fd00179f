"""`python -m actors.node.cluster_run` (make run-cluster): three nodes come up and accept AMQP
connections, and SIGTERM to the launcher stops every node (and the nodes' worker processes)
with exit status 0.  docs/cluster.md, "Running a cluster"."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, Broker, _die_with_parent, free_port

pytestmark = [
    pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                       reason="starts Leveret nodes of its own"),
    pytest.mark.timeout(300),
]

NODES = 3
UP_TIMEOUT = 120.0        # every node accepts a pika connection (the cluster may need to form)
STOP_TIMEOUT = 60.0       # launcher: 20 s SIGTERM->SIGKILL per node, plus margin


def free_port_run(n: int) -> int:
    """A port p such that p .. p+n-1 are all free on loopback (the launcher uses base+i)."""
    for _ in range(50):
        base = free_port()
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def test_sigterm_stops_every_node(tmp_path: Path):
    amqp, raft = free_port_run(NODES), free_port_run(NODES)
    while set(range(raft, raft + NODES)) & set(range(amqp, amqp + NODES)):
        raft = free_port_run(NODES)
    data = tmp_path / "var"
    out_path = tmp_path / "cluster_run.out"
    with open(out_path, "wb") as out:
        launcher = subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "python"), "-m", "actors.node.cluster_run",
             "--nodes", str(NODES), "--port", str(amqp), "--cluster-port", str(raft),
             "--data-dir", str(data), "--management-port", "0", "--prometheus-port", "0"],
            cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent)

    def report() -> str:
        logs = [out_path.read_text(errors="replace")]
        for i in range(NODES):
            log = data / f"node{i + 1}.log"
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-15:]
                logs.append(f"--- node{i + 1}.log\n" + "\n".join(tail))
        return "\n".join(logs)

    node_pids: list[int] = []
    try:
        # every node accepts a pika connection
        deadline = time.monotonic() + UP_TIMEOUT
        for i in range(NODES):
            node = Broker("127.0.0.1", amqp + i)
            while True:
                if launcher.poll() is not None:
                    pytest.fail(f"cluster_run exited with {launcher.returncode}:\n{report()}")
                try:
                    conn = node.connection(socket_timeout=2, stack_timeout=5)
                    conn.close()
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    if time.monotonic() > deadline:
                        pytest.fail(f"node{i + 1} did not accept a connection within "
                                    f"{UP_TIMEOUT:g}s:\n{report()}")
                    time.sleep(0.5)
        for i in range(NODES):
            info = json.loads((data / f"node{i + 1}" / "node.json").read_text())
            node_pids.append(info["pid"])
        assert all(alive(p) for p in node_pids), report()
        workers = [c for p in node_pids for c in children(p)]

        launcher.send_signal(signal.SIGTERM)
        try:
            code = launcher.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"cluster_run did not exit within {STOP_TIMEOUT:g}s of SIGTERM:\n"
                        f"{report()}")
        assert code == 0, report()
        left = wait_gone(node_pids + workers, 10.0)
        assert not left, f"still running after the launcher exited: {left}\n{report()}"
        assert "every node stopped" in out_path.read_text()
    finally:
        if launcher.poll() is None:          # the test failed: stop what it started, by PID
            launcher.kill()
            launcher.wait(10)
        for pid in node_pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_node_commands():
    from actors.node.cluster_run import node_commands
    cmds = node_commands(["leveret-server"], 3, "127.0.0.1", 5672, 25672, "/d",
                         ["--events", "full"])
    raft = "127.0.0.1:25672,127.0.0.1:25673,127.0.0.1:25674"
    assert cmds[1] == ["leveret-server", "--host", "127.0.0.1", "--port", "5673",
                       "--management-port", "15673", "--prometheus-port", "15693", "--data-dir", "/d/node2", "--node-name", "leveret@node2",
                       "--cluster-nodes", raft, "--cluster-address", "127.0.0.1:25673",
                       "--cluster-secret-file", "/d/cluster_secret", "--events", "full"]
    assert [c[c.index("--port") + 1] for c in cmds] == ["5672", "5673", "5674"]
