"""A cluster of Leveret nodes started by a test: each node a leveret-server on free ports with
its data in its own temp folder, stopped by PID (tests/conftest.py's Broker)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, START_TIMEOUT, Broker, _die_with_parent, _probe, free_port


# three nodes start at once (fifteen processes importing on two cores) and then elect a leader:
# on a machine busy with other work that took longer than one node's START_TIMEOUT
CLUSTER_START_TIMEOUT = 3 * START_TIMEOUT


class Nodes:
    def __init__(self, tmp_path: Path, n: int = 3, *extra: str, start: bool = True,
                 hosts: list[str] | None = None, env: dict | None = None):
        """`hosts`: each node's cluster host (its Raft and ZeroMQ endpoints), 127.0.0.1 for
        all by default; `env`: variables added to the nodes' environment."""
        self.tmp = tmp_path
        self.extra = extra
        self.hosts = hosts or ["127.0.0.1"] * n
        self.env = env
        taken: set[int] = set()
        ports = [free_port(avoid=taken) for _ in range(2 * n)]
        self.raft = [f"{h}:{p}" for h, p in zip(self.hosts, ports[:n])]  # raft address per node
        self.ports = ports[n:]  # AMQP port per node
        self.brokers: list[Broker | None] = [None] * n
        # the secret every member shares (docs/security.md): one file, 0400, for all of them
        self.secret_file = tmp_path / "cluster_secret"
        if not self.secret_file.exists():
            self.secret_file.write_text(secrets.token_hex(32) + "\n")
            self.secret_file.chmod(0o400)
        self.secret_files: dict[int, Path] = {}  # node index -> another file (tests of refusal)
        if start:
            self.start(*range(n))  # together: a lone node waits for a majority

    def args(self, i: int) -> list[str]:
        return ["--node-name", f"leveret@node{i + 1}", "--cluster-nodes", ",".join(self.raft),
                "--cluster-address", self.raft[i], "--cluster-secret-file",
                str(self.secret_files.get(i, self.secret_file)), *self.extra]

    def start(self, *which: int) -> None:
        """Start nodes and wait until each answers AMQP."""
        self.spawn(*which)
        self.wait_up(*which)

    def spawn(self, *which: int) -> None:
        """Start nodes (from this thread: PR_SET_PDEATHSIG follows the thread that forks)."""
        server = REPO / ".venv" / "bin" / "leveret-server"
        for i in which:
            folder = self.tmp / f"node{i + 1}"
            (folder / "data").mkdir(parents=True, exist_ok=True)
            log_path = folder / "leveret-server.log"
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [str(server), "--host", "127.0.0.1", "--port", str(self.ports[i]),
                     "--data-dir", str(folder / "data"), "--management-port", "0", "--prometheus-port", "0",
                     *self.args(i)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=str(folder), preexec_fn=_die_with_parent,
                    env=None if self.env is None else {**os.environ, **self.env})
            self.brokers[i] = Broker("127.0.0.1", self.ports[i], data_dir=folder / "data",
                                     proc=proc, log_path=log_path)

    def wait_up(self, *which: int) -> None:
        deadline = time.monotonic() + CLUSTER_START_TIMEOUT
        waiting = set(which)
        while waiting and time.monotonic() < deadline:
            for i in list(waiting):
                b = self.brokers[i]
                if b.proc.poll() is not None:
                    self.stop()
                    pytest.fail(f"node{i + 1} exited with {b.proc.returncode}:\n{self.logs()}")
                if _probe("127.0.0.1", b.port):
                    waiting.discard(i)
            time.sleep(0.1)
        if waiting:
            self.stop()
            pytest.fail(f"nodes {sorted(waiting)} did not start:\n{self.logs()}")

    def __getitem__(self, i: int) -> Broker:
        return self.brokers[i]

    def kill9(self, i: int) -> None:
        self.brokers[i].kill9()

    def stop(self) -> None:
        for b in self.brokers:
            if b is not None:
                b.stop()

    def status(self, i: int) -> dict:
        """leveretctl cluster_status of node i, as {member name: (up, leader)}."""
        return {name: (r["up"] == "true", r["leader"] == "true")
                for name, r in self.status_rows(i).items()}

    def status_rows(self, i: int) -> dict:
        """leveretctl cluster_status of node i: {member id or name: {column: cell}} for the
        members' table (by name when the member has one)."""
        out = self[i].ctl("cluster_status").stdout.splitlines()[1:]
        header = out[0].split("\t")
        rows = {}
        for line in out[1:]:
            if not line.strip():
                break  # the mirrored queues' table follows
            row = dict(zip(header, line.split("\t")))
            rows[row["name"] or row["member"]] = row
        return rows

    def queue_status(self, i: int) -> dict:
        """The mirrored queues' table of node i's cluster_status: {name: {column: cell}}."""
        out = self[i].ctl("cluster_status").stdout.splitlines()
        if "Mirrored queues" not in out:
            return {}
        at = out.index("Mirrored queues")
        header = out[at + 1].split("\t")
        return {r["name"]: r for r in (dict(zip(header, line.split("\t")))
                                       for line in out[at + 2:] if line.strip())}

    def leader(self, i: int, other_than: int | None = None, timeout: float = 20.0) -> int:
        """The node that node i's cluster_status names leader, once it names one (other than
        `other_than`): after the leader dies there is none until the survivors elect one."""
        def named():
            status = self.status(i)
            return [j for j in range(len(self.brokers))
                    if status[f"leveret@node{j + 1}"][1] and j != other_than]
        return self.wait(named, timeout, what=f"a leader in node{i + 1}'s cluster_status"
                         + ("" if other_than is None else f" other than node{other_than + 1}"))[0]

    def wait(self, cond, timeout: float = 20.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def drain(self, i: int, queue: str) -> set[int]:
        """Consume `queue` through node i until it stays empty 3 s, acking each; the bodies
        (integers) taken."""
        got = set()
        with self[i].connection() as c:
            ch = c.channel()
            for method, _, body in ch.consume(queue, inactivity_timeout=3):
                if method is None:
                    break
                got.add(int(body))
                ch.basic_ack(method.delivery_tag)
        return got

    def whole(self) -> bool:
        """Every node answers AMQP and its cluster_status lists every member up, reachable and
        not paused, under one leader."""
        if not all(b is not None and b.alive() for b in self.brokers):
            return False
        for i in range(len(self.brokers)):
            try:
                rows = self.status_rows(i)
            except (AssertionError, subprocess.TimeoutExpired):  # the node not ready to answer
                return False
            if len(rows) != len(self.brokers) or [r["leader"] for r in rows.values()]\
                    .count("true") != 1 or not all(r["up"] == "true" and r["reachable"] == "true"
                                                  and r["paused"] == "false"
                                                  for r in rows.values()):
                return False
        return True

    def mend(self, timeout: float = CLUSTER_START_TIMEOUT) -> None:
        """After a test that killed, stopped or cut off nodes: continue every stopped process,
        start the dead nodes again on their data and wait until the cluster is whole."""
        for b in self.brokers:
            if b is not None and b.proc.poll() is None:
                for pid in (b.pid, *b.worker_pids("queue").values(),
                            *b.worker_pids("conn").values()):
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
        dead = [i for i, b in enumerate(self.brokers) if b is None or b.proc.poll() is not None]
        if dead:
            self.start(*dead)
        deadline = time.monotonic() + timeout
        while not self.whole():  # (each look costs three leveretctl runs: not too often)
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster is not whole {timeout} s after the test:\n"
                                     f"{self.logs()}")
            time.sleep(0.5)

    def logs(self) -> str:
        return "\n".join(f"--- node{i + 1}\n{b.log_tail(40)}" for i, b in enumerate(self.brokers)
                         if b is not None)
