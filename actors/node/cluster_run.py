"""`python -m actors.node.cluster_run` (make run-cluster): a local N-node cluster in the foreground.

What it owns: the leveret-server processes it starts, one per node, and nothing else.  Node i
(0-based) listens for AMQP on --port+i, for Raft on --cluster-port+i, keeps its data in
<data-dir>/node<i+1> and is named leveret@node<i+1>; the nodes share the cluster secret
<data-dir>/cluster_secret (made on the first run); its stdout and stderr go to
<data-dir>/node<i+1>.log.  The nodes run in sessions of their own, so a Ctrl-C in the terminal
reaches this launcher only, which then stops them: SIGTERM to each node's PID, SIGKILL to the
PID of any still running after --stop-timeout seconds, exit status 0.  When a node exits on its
own the launcher says so, stops the others the same way and exits with status 1.  Each node is
also asked (PR_SET_PDEATHSIG) to get SIGTERM if the launcher dies without stopping it.

This is RabbitMQ's `make start-cluster` for a development machine; docs/cluster.md.
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
STOP_TIMEOUT = 20.0          # seconds between SIGTERM and SIGKILL
POLL = 0.2                   # seconds between checks of the nodes


def node_commands(server: list[str], nodes: int, host: str, port: int, cluster_port: int,
                  data_dir: str, extra: list[str] = (),
                  management_port: int = 15672,
                  prometheus_port: int = 15692) -> list[list[str]]:
    """The leveret-server command line of every node (pure)."""
    raft = [f"{host}:{cluster_port + i}" for i in range(nodes)]
    return [[*server, "--host", host, "--port", str(port + i),
             "--management-port", str(management_port + i if management_port else 0),
             "--prometheus-port", str(prometheus_port + i if prometheus_port else 0),
             "--data-dir", os.path.join(data_dir, f"node{i + 1}"),
             "--node-name", f"leveret@node{i + 1}",
             "--cluster-nodes", ",".join(raft), "--cluster-address", raft[i],
             "--cluster-secret-file", secret_file(data_dir), *extra]
            for i in range(nodes)]


def secret_file(data_dir: str) -> str:
    """The one cluster secret the nodes share (docs/security.md): DATA_DIR/cluster_secret."""
    return os.path.join(data_dir, "cluster_secret")


def make_secret(path: str) -> None:
    """Random bytes, 0400, when the file is not there yet."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")


def server_command() -> list[str]:
    """leveret-server beside this Python (the venv's), else this Python running actors.node.serve."""
    exe = shutil.which("leveret-server", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "actors.node.serve"]


def amqp_answers(host: str, port: int) -> bool:
    """True when host:port answers the AMQP protocol header with a frame (connection.start)."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(PROTOCOL_HEADER)
            s.settimeout(2.0)
            return s.recv(1) == b"\x01"
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the launcher dies."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: nothing to do
        pass


class Cluster:
    """The node processes of one run."""

    def __init__(self, commands: list[list[str]], data_dir: str, stop_timeout: float):
        self.commands = commands            # one leveret-server argv per node
        self.data_dir = data_dir            # parent of the nodes' data dirs and logs
        self.stop_timeout = stop_timeout    # seconds between SIGTERM and SIGKILL
        self.procs: list[subprocess.Popen] = []   # node i's process, in node order

    def log_path(self, i: int) -> str:
        return os.path.join(self.data_dir, f"node{i + 1}.log")

    def start(self) -> None:
        for i, cmd in enumerate(self.commands):
            os.makedirs(os.path.join(self.data_dir, f"node{i + 1}"), exist_ok=True)
            with open(self.log_path(i), "ab") as log:
                self.procs.append(subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, preexec_fn=_die_with_parent))

    def exited(self) -> list[int]:
        """Indexes of the nodes whose process has ended."""
        return [i for i, p in enumerate(self.procs) if p.poll() is not None]

    def stop(self) -> None:
        """SIGTERM to every running node's PID, then SIGKILL to the PIDs left after the
        timeout."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for i, p in enumerate(self.procs):
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"node{i + 1} (pid {p.pid}) did not stop within {self.stop_timeout:g}s: "
                    "SIGKILL")
                p.kill()
                p.wait()

    def log_tail(self, i: int, n: int = 20) -> str:
        try:
            with open(self.log_path(i), "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def say(msg: str) -> None:
    print(f"cluster_run: {msg}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m actors.node.cluster_run",
        description="Run an N-node Leveret cluster in the foreground; Ctrl-C or SIGTERM stops "
                    "every node. Arguments after -- go to every leveret-server.")
    p.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5672,
                   help="AMQP port of node1; node i+1 uses PORT+i (default 5672)")
    p.add_argument("--cluster-port", type=int, default=25672,
                   help="Raft port of node1; node i+1 uses CLUSTER_PORT+i (default 25672)")
    p.add_argument("--management-port", type=int, default=15672,
                   help="management HTTP port of node1; node i+1 uses PORT+i (default 15672; "
                        "0 = none)")
    p.add_argument("--prometheus-port", type=int, default=15692,
                   help="Prometheus port of node1; node i+1 uses PORT+i (default 15692; "
                        "0 = none)")
    p.add_argument("--data-dir", default="./var",
                   help="nodes' data dirs go to DATA_DIR/node1, node2, ... (default ./var)")
    p.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT,
                   help=f"seconds from SIGTERM to SIGKILL (default {STOP_TIMEOUT:g})")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    args = build_parser().parse_args(argv)
    if args.nodes < 1:
        raise SystemExit("cluster_run: --nodes must be at least 1")
    data_dir = os.path.abspath(args.data_dir)
    cluster = Cluster(node_commands(server_command(), args.nodes, args.host, args.port,
                                    args.cluster_port, data_dir, extra, args.management_port,
                                    args.prometheus_port),
                      data_dir, args.stop_timeout)
    stop = []                                   # the signal that asked us to stop, if any
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    make_secret(secret_file(data_dir))
    cluster.start()
    for i, p in enumerate(cluster.procs):
        say(f"node{i + 1} pid {p.pid}: amqp://guest:guest@{args.host}:{args.port + i}/ "
            f"(raft {args.host}:{args.cluster_port + i}, data {data_dir}/node{i + 1}, log "
            f"{cluster.log_path(i)})")
    ctl = os.path.join(os.path.dirname(sys.executable), "leveretctl")
    say(f"cluster status: {ctl} --data-dir {data_dir}/node1 cluster_status")
    say("Ctrl-C stops every node")
    waiting = set(range(args.nodes))            # nodes not yet answering on their AMQP port
    code = 0
    while not stop:
        gone = cluster.exited()
        if gone:
            for i in gone:
                say(f"node{i + 1} (pid {cluster.procs[i].pid}) exited on its own with status "
                    f"{cluster.procs[i].returncode}; the end of {cluster.log_path(i)}:\n"
                    f"{cluster.log_tail(i)}")
            say("stopping the other nodes")
            code = 1
            break
        for i in sorted(waiting):
            if amqp_answers(args.host, args.port + i):
                waiting.discard(i)
                say(f"node{i + 1} accepts AMQP connections on {args.host}:{args.port + i}"
                    + ("" if waiting else "; all nodes are up"))
        time.sleep(POLL)
    if stop:
        say(f"{signal.Signals(stop[0]).name}: stopping {args.nodes} nodes")
    cluster.stop()
    say("every node stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())
