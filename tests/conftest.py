"""Broker fixtures shared by the integration and fault tests.

Default mode: every test module gets its own Leveret server (`broker`, module scope), started from
REPO/.venv/bin/leveret-server on a free loopback port with a temporary data directory; tests that
need a clean node ask for `fresh_broker` (function scope).

External mode: when LEVERET_TEST_URL is set (e.g. amqp://guest:guest@127.0.0.1:5673/) the tests use
that broker and start nothing; `ctl` then runs the command prefix in LEVERET_TEST_RABBITMQCTL
(default "rabbitmqctl").  This is how the suite is validated against RabbitMQ 3.10.
"""
from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import pika
import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
# rawamqp (the raw-socket test client) lives in tests/integration and is used by tests/faults too.
if str(TESTS / "integration") not in sys.path:
    sys.path.insert(0, str(TESTS / "integration"))

from amqp_helpers import delete_created_queues, safe_close, unique  # noqa: E402

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


# Test ports come from below the kernel's ephemeral range (ip_local_port_range starts at 32768):
# a port the kernel hands out (bind to 0, a client's own end, a cluster worker's `tcp://host:*`)
# could otherwise take a picked port in the moment before the node binds it. Each xdist worker
# picks from a band of its own, so two workers' nodes never pick the same port either.
PORT_BANDS = (20000, 32000)


def _port_band() -> range:
    lo, hi = PORT_BANDS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    width = (hi - lo) // count
    return range(lo + index * width, lo + (index + 1) * width)


# this process's band, shuffled, handed out from the end: a port comes back only after the
# whole band has (two picks for one node, e.g. its management and Prometheus ports, drawn at
# random from 6,000 met about once in 2,000 tests and the node refused to start)
_handout: list = []


def free_port(host: str = "127.0.0.1", avoid: set | None = None) -> int:
    """A port nothing listens on at `host` now, from this worker's band, not handed out by this
    process since the band last came round; added to `avoid` (ports picked for nodes not
    started yet) when given."""
    band = _port_band()
    for _ in range(1000):
        if not _handout:
            _handout.extend(random.sample(band, len(band)))
        port = _handout.pop()
        if avoid is not None and port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        if avoid is not None:
            avoid.add(port)
        return port
    raise RuntimeError(f"no free port on {host} in {band}")


def _probe(host: str, port: int) -> bool:
    """True when the server answers a protocol header with a method frame (connection.start)."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(PROTOCOL_HEADER)
            s.settimeout(2.0)
            data = s.recv(1)
            return data[:1] == b"\x01"
    except OSError:
        return False


def _limit_files(n: int) -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the test process dies (no orphaned servers when a
    run is killed)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: nothing to do
        pass


class Broker:
    """What a test may know about the broker under test."""

    def __init__(self, host: str, port: int, user: str = "guest", password: str = "guest",
                 vhost: str = "/", data_dir: Path | None = None, proc: subprocess.Popen | None = None,
                 ctl_prefix: list[str] | None = None, log_path: Path | None = None):
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.vhost = vhost
        self.data_dir = data_dir
        self.proc = proc
        self.log_path = log_path
        self._ctl_prefix = ctl_prefix
        self.external = proc is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def url(self) -> str:
        vhost = urllib.parse.quote(self.vhost, safe="")
        return f"amqp://{self.user}:{self.password}@{self.host}:{self.port}/{vhost}"

    def url_for(self, user: str | None = None, password: str | None = None,
                vhost: str | None = None) -> str:
        vhost = urllib.parse.quote(self.vhost if vhost is None else vhost, safe="")
        return (f"amqp://{user or self.user}:{password or self.password}@{self.host}:{self.port}"
                f"/{vhost}")

    def params(self, **kw) -> pika.ConnectionParameters:
        user = kw.pop("user", self.user)
        password = kw.pop("password", self.password)
        kw.setdefault("virtual_host", self.vhost)
        kw.setdefault("heartbeat", 0)
        kw.setdefault("blocked_connection_timeout", None)
        kw.setdefault("connection_attempts", 1)
        kw.setdefault("socket_timeout", 5)
        kw.setdefault("stack_timeout", 10)
        return pika.ConnectionParameters(host=self.host, port=self.port,
                                         credentials=pika.PlainCredentials(user, password), **kw)

    def connection(self, **kw) -> pika.BlockingConnection:
        """A pika BlockingConnection (heartbeat=0 unless given: tests pump I/O irregularly)."""
        return pika.BlockingConnection(self.params(**kw))

    def ctl(self, *args: str, check: bool = True, timeout: float = 60,
            input: str | None = None) -> subprocess.CompletedProcess:
        """`input`: the command's standard input (else none)."""
        if self.external:
            cmd = list(self._ctl_prefix) + list(args)
        else:
            cmd = [str(REPO / ".venv" / "bin" / "leveretctl"), "--data-dir", str(self.data_dir),
                   *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             input=input, stdin=None if input is not None else subprocess.DEVNULL)
        if check and res.returncode != 0:
            raise AssertionError(f"{cmd} failed ({res.returncode}): {res.stdout}\n{res.stderr}")
        return res

    def alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            return False
        return _probe(self.host, self.port)

    def log_tail(self, n: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    # -- lifecycle of a local Leveret -------------------------------------------------------------
    @classmethod
    def start_leveret(cls, tmp_dir: Path, *extra: str, port: int | None = None,
                      nofile: int | None = None, env: dict | None = None) -> "Broker":
        """A node with its data in tmp_dir/data; starting again on the same tmp_dir (and port)
        restarts the node on its data (recovery tests). `extra`: more leveret-server options;
        `nofile`: RLIMIT_NOFILE (soft and hard) of the node and its workers; `env`: variables
        added to the node's environment (its workers inherit it)."""
        server = REPO / ".venv" / "bin" / "leveret-server"
        if not server.exists():
            pytest.fail(f"{server} does not exist (run `make venv`), or set LEVERET_TEST_URL")
        port = port or free_port()
        data_dir = tmp_dir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = tmp_dir / "leveret-server.log"
        log = open(log_path, "ab")
        proc = subprocess.Popen(
            [str(server), "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir),
             "--management-port", "0", "--prometheus-port", "0",
             *extra],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(tmp_dir),
            env=None if env is None else {**os.environ, **env},
            preexec_fn=_die_with_parent if nofile is None else
            lambda: (_die_with_parent(), _limit_files(nofile)))
        log.close()
        broker = cls("127.0.0.1", port, data_dir=data_dir, proc=proc, log_path=log_path)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"leveret-server exited with {proc.returncode} during startup:\n"
                            f"{broker.log_tail()}")
            if _probe("127.0.0.1", port):
                return broker
            time.sleep(0.1)
        broker.stop()
        pytest.fail(f"leveret-server did not answer on port {port} within {START_TIMEOUT}s:\n"
                    f"{broker.log_tail()}")

    def queue_worker_pids(self) -> dict[int, int]:
        """{queue worker index: pid}, from the node's own record of its workers."""
        return self.worker_pids("queue")

    def worker_pids(self, kind: str) -> dict[int, int]:
        """{index: pid} of the node's running workers of this kind ("queue" or "conn"), as the
        node records them in node.json whenever a worker starts or exits; a slot whose worker
        is being restarted is left out."""
        try:
            info = json.loads((self.data_dir / "node.json").read_text())
        except (OSError, ValueError):  # not written yet, or the node has stopped
            return {}
        if info.get("pid") != self.pid:
            return {}  # an earlier incarnation's file: this node has not written its own yet
        return {int(i): pid for i, pid in info["workers"][kind].items() if pid is not None}

    def kill9(self) -> None:
        """kill -9 of the node process (its workers die with it: PR_SET_PDEATHSIG)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, tmp_dir: Path, how: str = "kill9", *extra: str) -> "Broker":
        """Stop this node (kill -9, or SIGTERM with how="stop") and start a new one on the same
        data dir and port; returns the new Broker."""
        if how == "kill9":
            self.kill9()
        else:
            self.stop()
        assert self.proc.poll() is not None
        return Broker.start_leveret(tmp_dir, *extra, port=self.port)

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        self._remove_run_dir()

    def _remove_run_dir(self) -> None:
        """A node whose data dir path is long keeps its sockets in a folder of the temp dir and
        removes it when it stops; one killed -9 (and not restarted) leaves it, named in its
        node.json: remove it for the node."""
        if self.proc is None or self.data_dir is None:
            return
        try:
            run = json.loads((self.data_dir / "node.json").read_text()).get("run_dir", "")
        except (OSError, ValueError):
            return
        if os.path.basename(run).startswith("leveret-run-") and \
                os.path.dirname(run) == tempfile.gettempdir():
            shutil.rmtree(run, ignore_errors=True)


def _external_broker() -> Broker | None:
    url = os.environ.get("LEVERET_TEST_URL")
    if not url:
        return None
    u = urllib.parse.urlparse(url)
    vhost = urllib.parse.unquote(u.path[1:]) if u.path and u.path != "/" else "/"
    prefix = shlex.split(os.environ.get("LEVERET_TEST_RABBITMQCTL", "rabbitmqctl"))
    return Broker(u.hostname or "127.0.0.1", u.port or 5672,
                  urllib.parse.unquote(u.username or "guest"),
                  urllib.parse.unquote(u.password or "guest"), vhost, ctl_prefix=prefix)


def _broker_fixture(tmp_path_factory):
    ext = _external_broker()
    if ext is not None:
        try:
            yield ext
        finally:
            delete_created_queues(ext)
        return
    broker = Broker.start_leveret(Path(tempfile.mkdtemp(prefix="leveret-", dir=tmp_path_factory.getbasetemp())))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark():
    """One SparkSession (local[2]) for every test that runs the lifecycle job: its JVM takes
    longer to start than a run of the job on a test's events; its JVM flags are those for
    small runs (the tests' logs are)."""
    from spark_analysis import session
    s = session.build("local[2]", driver_memory="1g", shuffle_partitions=4,
                      driver_java_options=session.SMALL_RUN_JAVA_OPTIONS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker per test module (Leveret started for the module, or the external one)."""
    yield from _broker_fixture(tmp_path_factory)


@pytest.fixture
def fresh_broker(tmp_path_factory):
    """A broker of the test's own (a new Leveret node; in external mode the external broker)."""
    yield from _broker_fixture(tmp_path_factory)


@pytest.fixture
def conn(broker):
    """A pika BlockingConnection to the module's broker, closed after the test."""
    c = broker.connection()
    try:
        yield c
    finally:
        safe_close(c)


@pytest.fixture
def ch(conn):
    return conn.channel()


@pytest.fixture
def qname():
    return unique("q")


@pytest.fixture
def xname():
    return unique("x")


# --- pytest-xdist (`make test` runs two workers, --dist loadfile) -----------------------------
TOGETHER = ("tests/integration/cluster/", "tests/faults/cluster/")


def _unit_rank(scope: str) -> int:
    """Longest first, so that no long file starts last while the other worker idles: the
    cluster files (about a third of the suite's test-seconds, in one worker), then the files
    that start nodes or Spark, then the unit tests of seconds that fill the end in. (pytest-
    randomly shuffles the files, and xdist hands them out in that order otherwise.)"""
    if scope == "cluster":
        return 0
    if scope.startswith(("tests/integration/", "tests/faults/", "tests/unit/analysis/")):
        return 1
    return 2


def pytest_xdist_make_scheduler(config, log):
    """Each file runs in one worker (its module-scoped node shared), and the cluster files all
    run in the same worker, one after another: two of them side by side (six nodes, partitions
    timed against Raft's lease and pause times on two cores) made each other miss those times."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ClusterFilesTogether(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(TOGETHER):
                return "cluster"
            return super()._split_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # (the queue is whole before the first unit leaves)
                self.ordered = True
                units = sorted(self.workqueue.items(), key=lambda unit: _unit_rank(unit[0]))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return ClusterFilesTogether(config, log)


SPARK_TIMEOUT_S = 300  # the JVM's start alone took over 120 s on a machine at load 28


def pytest_collection_modifyitems(config, items):
    """A test that uses the SparkSession (directly or through a fixture) may be the one that
    starts its JVM: it gets SPARK_TIMEOUT_S instead of the suite's 120 s, unless it set its
    own."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and \
                item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))


TIMEOUT_REPEAT_S = 60  # after a test's timeout, its alarm rings again this often


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's "signal" method raises once, in whatever the test is doing; a test that
    was stuck in a client's blocking call then often hangs again in the `with` block's close of
    that client (a pika close waits for close-ok without a time limit), and its worker with it,
    until CI's own limit. The alarm rings again every TIMEOUT_REPEAT_S until the plugin cancels
    it after the teardown, so such a test fails alone, as the method means it to."""
    yield
    import threading
    if settings.method == "signal" and settings.timeout and \
            threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, settings.timeout, TIMEOUT_REPEAT_S)
