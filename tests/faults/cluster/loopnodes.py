"""Three (or n) Leveret nodes, each on a loopback address of its own (127.0.0.11, .12, .13 ...)
and with a group id of its own (what netfilter.py tells their connections apart by), started in
temp dirs and ended by PID.

What binds where (checked with `ss -ltnp` on main 30f879c): with `--host H` and
`--cluster-address H:P`, a node binds its AMQP port on H, pysyncobj's Raft listener on H:P, and
the node's and every worker's ZeroMQ tcp:// endpoint on H (actors/node/node.py `_endpoint`);
leveretctl's endpoint is an ipc:// socket in the node's run folder; management and Prometheus
are off here (port 0). Nothing listens on 127.0.0.1 or 0.0.0.0. What does not follow H: the
source address of the connections a node opens to the others (Raft and ZeroMQ), which is
127.0.0.1 (they are not bound before connect): netfilter.py copes with that.

Nodes are started from the thread that calls `spawn` (PR_SET_PDEATHSIG follows the thread that
forks: a thread that exits takes its children with it), so the runner starts and restarts them
from the main thread.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
for _p in (TESTS / "integration", TESTS):  # (tests/ first: its conftest.py)
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from conftest import REPO, START_TIMEOUT, Broker, _die_with_parent, _probe, free_port  # noqa: E402


class StartFailed(Exception):
    pass


class LoopNodes:
    """n nodes: node i (0-based) is `leveret@<prefix><i+1>` on 127.0.0.<first_octet + i>."""

    def __init__(self, tmp: Path, n: int = 3, first_octet: int = 11, extra: tuple = (),
                 prefix: str = "node"):
        self.tmp = Path(tmp)
        self.n = n
        self.extra = tuple(extra)
        self.names = [f"leveret@{prefix}{i + 1}" for i in range(n)]
        self.hosts = [f"127.0.0.{first_octet + i}" for i in range(n)]
        base = 40000 + (os.getpid() % 5000) * 4  # gids of our nodes, apart from other runs'
        # (only root may run a process with another gid; without root there are no partitions)
        self.gids = [base + 1 + i if os.geteuid() == 0 else None for i in range(n)]
        taken: set = set()
        self.amqp_ports = [free_port(h, taken) for h in self.hosts]
        self.raft = [f"{h}:{free_port(h, taken)}" for h in self.hosts]
        self.brokers: list = [None] * n
        self.secret_file = self.tmp / "cluster_secret"
        if not self.secret_file.exists():
            self.secret_file.write_text(secrets.token_hex(32) + "\n")
            self.secret_file.chmod(0o400)

    # -- what netfilter.py needs -----------------------------------------------------------------
    def net(self) -> dict:
        """{name: (gid, address)}"""
        return {name: (gid, host) for name, gid, host in zip(self.names, self.gids, self.hosts)}

    def index(self, name: str) -> int:
        return self.names.index(name)

    # -- lifecycle -------------------------------------------------------------------------------
    def spawn(self, *which: int) -> None:
        server = REPO / ".venv" / "bin" / "leveret-server"
        for i in which:
            folder = self.tmp / f"node{i + 1}"
            (folder / "data").mkdir(parents=True, exist_ok=True)
            log_path = folder / "leveret-server.log"
            # (one node alone is a standalone node: no cluster at all)
            cluster = [] if self.n == 1 else [
                "--cluster-nodes", ",".join(self.raft), "--cluster-address", self.raft[i],
                "--cluster-secret-file", str(self.secret_file)]
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [str(server), "--host", self.hosts[i], "--port", str(self.amqp_ports[i]),
                     "--data-dir", str(folder / "data"), "--management-port", "0",
                     "--prometheus-port", "0", "--node-name", self.names[i], *cluster,
                     *self.extra],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=str(folder), preexec_fn=_die_with_parent, group=self.gids[i])
            self.brokers[i] = Broker(self.hosts[i], self.amqp_ports[i], data_dir=folder / "data",
                                     proc=proc, log_path=log_path)

    def wait_up(self, *which: int, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        waiting = set(which)
        while waiting:
            for i in list(waiting):
                b = self.brokers[i]
                if b.proc.poll() is not None:
                    raise StartFailed(f"{self.names[i]} exited with {b.proc.returncode}:\n"
                                      f"{b.log_tail(30)}")
                if _probe(b.host, b.port):
                    waiting.discard(i)
            if waiting and time.monotonic() > deadline:
                raise StartFailed(f"{[self.names[i] for i in sorted(waiting)]} did not answer "
                                  f"within {timeout:.0f} s:\n{self.logs()}")
            time.sleep(0.1)

    def start(self, *which: int) -> None:
        which = which or tuple(range(self.n))
        self.spawn(*which)
        self.wait_up(*which)

    def alive(self, i: int) -> bool:
        b = self.brokers[i]
        return b is not None and b.proc.poll() is None

    def kill9(self, i: int) -> None:
        self.brokers[i].kill9()

    def stop(self) -> None:
        for b in self.brokers:
            if b is not None:
                b.stop()

    def stop_all(self, grace: float = 10.0) -> None:
        """SIGTERM to every node at once, SIGKILL to those still running after `grace` s
        (a node cut off may take long to stop), each by its PID."""
        live = [b for b in self.brokers if b is not None and b.proc.poll() is None]
        for b in live:
            b.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for b in live:
            try:
                b.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                b.proc.send_signal(signal.SIGKILL)
                b.proc.wait(10)
        for b in self.brokers:
            if b is not None:
                b.stop()  # (reaped: removes a killed node's run folder)

    def __getitem__(self, i: int) -> Broker:
        return self.brokers[i]

    # -- views of the cluster, node by node (leveretctl over the node's ipc:// socket) ----------
    def ctl(self, i: int, *args: str, timeout: float = 10) -> str | None:
        """leveretctl's output on node i, None when it fails (node down, no answer)."""
        if not self.alive(i):
            return None
        try:
            res = self.brokers[i].ctl(*args, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return res.stdout if res.returncode == 0 else None

    def queue_row(self, i: int, queue: str) -> dict | None:
        """node i's row for `queue`: name, messages, node (its master), mirrors, synced."""
        out = self.ctl(i, "list_queues", "name", "messages", "node", "mirrors",
                       "synchronised_mirrors")
        for line in (out or "").splitlines()[2:]:
            cells = line.split("\t")
            if cells[0] == queue:
                return dict(zip(("name", "messages", "node", "mirrors", "synced"), cells))
        return None

    def master_seen_by(self, i: int, queue: str) -> str | None:
        row = self.queue_row(i, queue)
        return row["node"] if row else None

    def master(self, queue: str) -> str | None:
        """The master most live nodes name (None if none does)."""
        votes: dict = {}
        for i in range(self.n):
            m = self.master_seen_by(i, queue)
            if m:
                votes[m] = votes.get(m, 0) + 1
        return max(votes, key=votes.get) if votes else None

    def leader(self) -> str | None:
        """The Raft leader most live nodes' cluster_status names (None if none does)."""
        votes: dict = {}
        for i in range(self.n):
            leader = self._leader_seen_by(i)
            if leader:
                votes[leader] = votes.get(leader, 0) + 1
        return max(votes, key=votes.get) if votes else None

    def _leader_seen_by(self, i: int) -> str | None:
        for line in (self.ctl(i, "cluster_status") or "").splitlines()[2:]:
            cells = line.split("\t")
            if len(cells) >= 6 and cells[5] == "true":
                return cells[1]
        return None

    def master_and_leader(self, queue: str) -> tuple:
        """(master(queue), leader()), every node asked at once (leveretctl takes a few tenths
        of a second a call: the nemesis strikes that much sooner)."""
        seen: dict = {}

        def ask(i):  # cluster_status names both: one leveretctl call a node
            master = leader = None
            table = ""
            for line in (self.ctl(i, "cluster_status") or "").splitlines()[1:]:
                cells = line.split("\t")
                if cells[0] in ("member", "vhost", "Mirrored queues"):
                    table = cells[0]
                elif table == "member" and len(cells) >= 6 and cells[5] == "true":
                    leader = cells[1]
                elif table == "vhost" and len(cells) >= 3 and cells[1] == queue:
                    master = cells[2]
            seen[i] = (master, leader)
        threads = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        result = []
        for k in (0, 1):
            votes: dict = {}
            for pair in list(seen.values()):
                if pair[k]:
                    votes[pair[k]] = votes.get(pair[k], 0) + 1
            result.append(max(votes, key=votes.get) if votes else None)
        return tuple(result)

    def status(self, i: int) -> str:
        return self.ctl(i, "cluster_status") or "(no answer)\n"

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"--- {self.names[i]}\n{b.log_tail(lines)}"
                         for i, b in enumerate(self.brokers) if b is not None)
