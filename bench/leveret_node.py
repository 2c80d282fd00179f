"""Start a Leveret node for the benchmark (a context manager).

    with LeveretNode() as node:
        node.url   # amqp://guest:guest@127.0.0.1:<port>/%2F

Runs REPO/.venv/bin/leveret-server --host 127.0.0.1 --port <free> --data-dir <temp dir>, ready
when the port answers the AMQP protocol header with a frame; stopped with SIGTERM to its PID,
then SIGKILL to its PID after a timeout.  Its output goes to <temp dir>/server.log (shown when
it fails to start).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from bench import scratch
from bench.refbroker import (amqp_answers, descendants, free_port, server_version,
                             stop_leftovers, stop_pid)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(REPO, ".venv", "bin", "leveret-server")


class NodeError(RuntimeError):
    pass


class LeveretNode:
    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 server: str = SERVER, start_timeout: float = 60.0,
                 stop_timeout: float = 15.0, keep_dir: bool = False, log=None,
                 extra_args: list[str] | None = None):
        self.host = host
        self.port = port
        self.server = server
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.keep_dir = keep_dir
        self.extra_args = extra_args or []
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.dir: str | None = None
        self.proc: subprocess.Popen | None = None
        self._out = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def version(self) -> str | None:
        return server_version(self.host, self.port)

    def __enter__(self) -> "LeveretNode":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if not (os.path.isfile(self.server) and os.access(self.server, os.X_OK)):
            raise NodeError(f"{self.server} does not exist (run `make venv`)")
        self.dir = scratch.make("leveret-bench-node-")
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        if self.port is None:
            self.port = free_port(self.host)
        self._out = open(os.path.join(self.dir, "server.log"), "wb")
        cmd = [self.server, "--host", self.host, "--port", str(self.port), "--data-dir", data,
               "--management-port", "0", "--prometheus-port", "0", *self.extra_args]
        self.log(f"starting Leveret: {' '.join(cmd)}")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.dir)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                tail = self.log_tail()
                self.stop()
                raise NodeError(f"leveret-server exited with status {rc}:\n{tail}")
            if amqp_answers(self.host, self.port, 1.0):
                return
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise NodeError(f"leveret-server did not answer on {self.host}:{self.port} within "
                        f"{self.start_timeout}s:\n{tail}")

    def log_tail(self, n: int = 30) -> str:
        if not self.dir:
            return ""
        try:
            with open(os.path.join(self.dir, "server.log"), "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            # the server may run worker processes: note them (by PID and start time) before
            # stopping it, and stop any that outlive it
            kids = descendants(self.proc.pid) if self.proc.poll() is None else []
            stop_pid(self.proc, self.stop_timeout)
            stop_leftovers(kids, 5.0)
        if self._out is not None:
            self._out.close()
            self._out = None
        if self.dir and not self.keep_dir:
            for _ in range(20):         # a straggling worker may still create files in it
                shutil.rmtree(self.dir, ignore_errors=True)
                if not os.path.exists(self.dir):
                    break
                time.sleep(0.1)
            self.dir = None
