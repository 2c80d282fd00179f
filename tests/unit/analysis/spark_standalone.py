"""A Spark standalone cluster on loopback from pyspark's own jars: one master and N workers,
each a `spark-class` JVM (org.apache.spark.deploy.master.Master / ...worker.Worker) with its own
free ports, work directory and log, ended by the PIDs started here.

    cluster = StandaloneCluster(tmp_dir, workers=2, cores=1, memory="1g").start()
    ... spark-submit --master cluster.url ...
    cluster.stop()
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from conftest import _die_with_parent, free_port


def spark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def environment(**extra: str) -> dict[str, str]:
    """The environment of every process of the cluster and of its drivers: Spark from the
    pyspark package, everything on 127.0.0.1, and every JVM (master, workers, executors,
    driver) with the flags for small runs, read by the java launcher itself."""
    from spark_analysis.session import SMALL_RUN_JAVA_OPTIONS
    return dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                SPARK_LOCAL_HOSTNAME="127.0.0.1", JDK_JAVA_OPTIONS=SMALL_RUN_JAVA_OPTIONS,
                **extra)


class _PortTaken(RuntimeError):
    """A JVM of the cluster could not bind the port picked for it."""


class StandaloneCluster:
    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.base = Path(base)  # logs and work directories under it
        self.workers = workers
        self.cores = cores  # per worker
        self.memory = memory  # per worker, for its executors
        self.port = 0  # the master's RPC port
        self.ui_port = 0  # the master's web UI (its /json/ says which workers are alive)
        self.procs: list[subprocess.Popen] = []
        self.work_dirs: list[Path] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, cls: str, *args: str) -> None:
        log = open(self.base / f"{name}.log", "wb")
        # (a port taken by another program fails the JVM: Spark would otherwise bind the next
        # one up, and the test would read another program's page as the master's /json/)
        strict = "-Dspark.port.maxRetries=0"
        # (no REST submission server: it binds the fixed port 6066, which a second cluster on
        # the machine then cannot have, and a master that failed to bind it never answered its
        # workers' registrations: the fixture waited out its timeout)
        env = environment(SPARK_LOG_DIR=str(self.base), SPARK_PID_DIR=str(self.base),
                          SPARK_MASTER_OPTS=strict + " -Dspark.master.rest.enabled=false",
                          SPARK_WORKER_OPTS=strict)
        # (its own session: the JVM and whatever it starts stay apart from the test's group;
        # SIGTERM when the test process dies, kept across spark-class's exec of the JVM, whose
        # shutdown hook ends the executors: no JVM outlives a test run killed or timed out)
        self.procs.append(subprocess.Popen(
            [os.path.join(spark_home(), "bin", "spark-class"), cls, *args], env=env,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent))
        log.close()

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def alive_workers(self) -> int:
        try:
            return sum(w.get("state") == "ALIVE" for w in self.state().get("workers", []))
        except (OSError, ValueError):  # (not up yet, or not answering JSON yet)
            return 0

    def start(self, timeout: float = 240.0, attempts: int = 3) -> "StandaloneCluster":
        """Master and workers on free ports, up once every worker is alive; started again on
        other ports when a JVM found its port taken (free_port's pick is only a guess on a
        machine where other programs open ports too)."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except _PortTaken:
                if attempt == attempts - 1:
                    raise
        raise ValueError("attempts must be at least 1")

    def _start(self, timeout: float) -> "StandaloneCluster":
        self.base.mkdir(parents=True, exist_ok=True)
        for f in self.base.glob("*.log"):
            f.unlink()
        self.work_dirs.clear()
        avoid: set[int] = set()
        self.port, self.ui_port = free_port(avoid=avoid), free_port(avoid=avoid)
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            work = self.base / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self.work_dirs.append(work)
            self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                        "--host", "127.0.0.1", "--port", str(free_port(avoid=avoid)),
                        "--webui-port", str(free_port(avoid=avoid)),
                        "--cores", str(self.cores), "--memory", self.memory,
                        "--work-dir", str(work), self.url)
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            dead = [p.args[1] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                texts = {f.name: f.read_text(errors="replace")
                         for f in sorted(self.base.glob("*.log"))}
                logs = "\n".join(f"--- {name}\n{text[-1500:]}" for name, text in texts.items())
                self.stop()
                if dead and any("java.net.BindException" in t for t in texts.values()):
                    raise _PortTaken(logs)
                raise RuntimeError(f"the standalone cluster did not come up "
                                   f"({'exited: ' + ', '.join(dead) if dead else 'timeout'})"
                                   f"\n{logs}")
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        """SIGTERM to each JVM started here (a worker's shutdown hook ends its executors), then
        SIGKILL to the process group of any that is still there."""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # (the group is the one started for it)
            except ProcessLookupError:
                pass
            if p.poll() is None:
                p.wait(10)
        self.procs.clear()
