"""Run a private RabbitMQ node as a reference broker (a context manager others can reuse).

    with RabbitMQNode() as rmq:
        print(rmq.url)          # amqp://guest:guest@127.0.0.1:<port>/%2F

The node is a foreground child process (the ``rabbitmq-server`` shell script, which runs
``beam.smp`` as its child and forwards SIGTERM to it) with everything private to one temporary directory: its own node name
(``leveret-bench-<pid>@localhost``), spare loopback ports for AMQP, Erlang distribution and
EPMD, its own Mnesia and log directories, an empty enabled-plugins file, an empty config file
and a ``HOME`` of its own for the Erlang cookie.  It therefore never touches nor depends on a
system RabbitMQ service (if apt started one on 5672, it is left alone).  We also start our own
``epmd`` as a foreground child on a spare port (``ERL_EPMD_PORT``) so that the Erlang VM does
not fork a daemonized one we could not track.

Stopping: ``rabbitmqctl -n NODE stop`` first, then SIGTERM to the PID, then SIGKILL by PID; the
script's descendants (beam.smp, erl_child_setup, inet_gethost), noted by PID and start time
before stopping, are stopped too if they outlive it; the private ``epmd`` is stopped by PID
afterwards.  Nothing is killed by name.

``ensure_rabbitmq_installed()`` installs Debian's ``rabbitmq-server`` package with apt when
the server is missing (``apt-get update`` first; requires root).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

from bench import scratch

# Debian's /usr/sbin/rabbitmq-* are wrappers that `su rabbitmq` (dropping our environment)
# when run as root; the scripts under /usr/lib/rabbitmq/bin take the environment as given.
_SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin", "/usr/lib/rabbitmq/sbin", "/usr/sbin", "/usr/local/sbin")


class RefBrokerError(RuntimeError):
    pass


def find_script(name: str) -> str | None:
    for d in _SCRIPT_DIRS:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which(name)


def rabbitmq_installed() -> bool:
    return find_script("rabbitmq-server") is not None


def ensure_rabbitmq_installed(log=print) -> None:
    """Install Debian's rabbitmq-server with apt-get if it is not installed."""
    if rabbitmq_installed():
        return
    if os.geteuid() != 0:
        raise RefBrokerError(
            "rabbitmq-server is not installed and this process is not root, so it cannot be "
            "installed automatically. Install it with:\n"
            "    sudo apt-get update && sudo apt-get install -y rabbitmq-server\n"
            "or run the comparison against an existing broker with "
            "`python -m bench --compare-url amqp://...`.")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log("rabbitmq-server is not installed: running apt-get update && "
        "apt-get install -y rabbitmq-server ...")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "rabbitmq-server"]):
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            raise RefBrokerError(f"`{' '.join(cmd)}` failed with exit status {r.returncode}")
    if not rabbitmq_installed():
        raise RefBrokerError("apt-get installed rabbitmq-server but its scripts were not found")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def amqp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when something at host:port answers the AMQP 0-9-1 protocol header with a frame
    (a connection.start method frame starts with type 1 and ends with 0xCE)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            buf = b""
            while len(buf) < 7:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                buf += chunk
            if buf[0] != 1:
                return False
            size = int.from_bytes(buf[3:7], "big")
            while len(buf) < 7 + size + 1:
                chunk = s.recv(65536)
                if not chunk:
                    return False
                buf += chunk
            return buf[7 + size] == 0xCE
    except OSError:
        return False


def stop_pid(proc: subprocess.Popen, term_timeout: float = 10.0) -> None:
    """SIGTERM the child by PID, wait, then SIGKILL by PID."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(term_timeout)
    except subprocess.TimeoutExpired:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time in clock ticks) of a live, non-zombie process, from /proc (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    if fields[0] in (b"Z", b"X"):          # zombie or dead: nothing left to stop
        return None
    return int(fields[1]), int(fields[19])


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live descendant of pid (scanning /proc)."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for e in entries:
        if not e.isdigit():
            continue
        st = _proc_stat(int(e))
        if st is not None:
            children.setdefault(st[0], []).append((int(e), st[1]))
    out: list[tuple[int, int]] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def stop_leftovers(procs: list[tuple[int, int]], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, the given (pid, start time) processes that still exist; the start
    time guards against signalling a recycled PID."""
    def alive(p):
        st = _proc_stat(p[0])
        return st is not None and st[1] == p[1]

    left = [p for p in procs if alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in left:
            try:
                os.kill(p[0], sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            left = [p for p in left if alive(p)]
            if left:
                time.sleep(0.05)
        if not left:
            return


class RabbitMQNode:
    """A private RabbitMQ node on spare loopback ports; a context manager."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 start_timeout: float = 90.0, keep_dir: bool = False, log=None,
                 install: bool = False, management_port: int | None = None,
                 config: str = ""):
        """management_port: also enable the rabbitmq_management plugin, listening there
        (0: a spare port); config: more rabbitmq.conf lines."""
        self.host = host
        self.port = port
        self.management_port = management_port
        self.config = config
        self.start_timeout = start_timeout
        self.keep_dir = keep_dir
        self.install = install
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.nodename = f"leveret-bench-{os.getpid()}@localhost"
        self.dir: str | None = None
        self.proc: subprocess.Popen | None = None
        self.epmd: subprocess.Popen | None = None
        self.env: dict[str, str] = {}
        self._stdout = None

    # -- public ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (self.proc, self.epmd) if p is not None and p.poll() is None]

    def version(self) -> str | None:
        """The server's version as announced in connection.start's server-properties."""
        return server_version(self.host, self.port)

    def __enter__(self) -> "RabbitMQNode":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.install:
            ensure_rabbitmq_installed(self.log)
        server = find_script("rabbitmq-server")
        if server is None:
            raise RefBrokerError("rabbitmq-server is not installed "
                                 "(apt-get install -y rabbitmq-server)")
        epmd_bin = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        self.dir = scratch.make("leveret-bench-rmq-")
        d = self.dir
        for sub in ("mnesia", "log", "home"):
            os.makedirs(os.path.join(d, sub))
        plugins = os.path.join(d, "enabled_plugins")
        if self.management_port == 0:
            self.management_port = free_port(self.host)
        with open(plugins, "w") as f:
            f.write("[rabbitmq_management].\n" if self.management_port else "[].\n")
        conf = os.path.join(d, "rabbitmq.conf")
        with open(conf, "w") as f:
            f.write("# private node: defaults unless given\n")
            if self.management_port:
                f.write(f"management.tcp.port = {self.management_port}\n"
                        f"management.tcp.ip = {self.host}\n")
            f.write(self.config)
        env_conf = os.path.join(d, "rabbitmq-env.conf")
        open(env_conf, "w").close()
        if self.port is None:
            self.port = free_port(self.host)
        dist_port = free_port("127.0.0.1")
        epmd_port = free_port("127.0.0.1")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            HOME=os.path.join(d, "home"),
            ERL_EPMD_PORT=str(epmd_port),
            RABBITMQ_NODENAME=self.nodename,
            RABBITMQ_NODE_IP_ADDRESS=self.host,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(dist_port),
            RABBITMQ_MNESIA_BASE=os.path.join(d, "mnesia"),
            RABBITMQ_LOG_BASE=os.path.join(d, "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=plugins,
            RABBITMQ_CONFIG_FILE=conf,
            RABBITMQ_ADVANCED_CONFIG_FILE=os.path.join(d, "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=env_conf,
            RABBITMQ_PID_FILE=os.path.join(d, "rabbitmq.pid"),
            RABBITMQ_LOGS="-",                    # log to stdout (captured to a file)
        )
        self.env = env
        self._stdout = open(os.path.join(d, "stdout.log"), "wb")
        # Our own epmd, in the foreground, so nothing is left daemonized behind us.
        self.epmd = subprocess.Popen(
            [epmd_bin, "-port", str(epmd_port), "-address", "127.0.0.1"],
            env=env, stdout=self._stdout, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=d)
        self._wait_port("127.0.0.1", epmd_port, 10.0)
        self.log(f"starting RabbitMQ {self.nodename} on {self.host}:{self.port} (dir {d})")
        self.proc = subprocess.Popen(
            [server], env=env, stdout=self._stdout, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=d)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RefBrokerError(f"rabbitmq-server exited with status "
                                     f"{self.proc.returncode}:\n{tail}")
            if amqp_answers(self.host, self.port, 1.0) and (
                    not self.management_port or _http_answers(self.host, self.management_port)):
                return
            time.sleep(0.25)
        tail = self.log_tail()
        self.stop()
        raise RefBrokerError(f"RabbitMQ did not answer on {self.host}:{self.port} within "
                             f"{self.start_timeout}s:\n{tail}")

    def log_tail(self, n: int = 40) -> str:
        if not self.dir:
            return ""
        try:
            with open(os.path.join(self.dir, "stdout.log"), "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def ctl(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        ctl = find_script("rabbitmqctl")
        return subprocess.run([ctl, "-n", self.nodename, *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout,
                              cwd=self.dir)

    def stop(self) -> None:
        kids = []
        if self.proc is not None and self.proc.poll() is None:
            kids = descendants(self.proc.pid)
            try:
                self.ctl("stop", timeout=30.0)
            except (subprocess.TimeoutExpired, OSError):
                pass
            try:
                self.proc.wait(15.0)
            except subprocess.TimeoutExpired:
                stop_pid(self.proc, 10.0)
        stop_leftovers(kids, 10.0)
        if self.epmd is not None:
            stop_pid(self.epmd, 5.0)
        if self._stdout is not None:
            self._stdout.close()
            self._stdout = None
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    @staticmethod
    def _wait_port(host: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RefBrokerError(f"epmd did not listen on {host}:{port}")


def _http_answers(host: str, port: int) -> bool:
    """The management listener answers (any HTTP status)."""
    import urllib.error
    import urllib.request
    try:
        urllib.request.urlopen(f"http://{host}:{port}/api/overview", timeout=2).close()
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def server_version(host: str, port: int, timeout: float = 3.0) -> str | None:
    """Read 'product version' from connection.start's server-properties (best effort: scans
    the raw table for the 'version' key rather than decoding it)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            buf = b""
            while len(buf) < 7 or len(buf) < 8 + int.from_bytes(buf[3:7], "big"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
    except OSError:
        return None
    key = b"\x07versionS"
    i = buf.find(key)
    product = None
    j = buf.find(b"\x07productS")
    if j >= 0:
        n = int.from_bytes(buf[j + 9:j + 13], "big")
        product = buf[j + 13:j + 13 + n].decode(errors="replace")
    if i < 0:
        return product
    n = int.from_bytes(buf[i + 9:i + 13], "big")
    version = buf[i + 13:i + 13 + n].decode(errors="replace")
    return f"{product} {version}" if product else version


def parse_host_port(url: str) -> tuple[str, int]:
    u = urllib.parse.urlsplit(url)
    return u.hostname or "127.0.0.1", u.port or 5672


def ctl_prefix(node: "RabbitMQNode") -> str:
    """A shell command prefix that runs rabbitmqctl against the node (its HOME holds the Erlang
    cookie, ERL_EPMD_PORT finds its private epmd): what LEVERET_TEST_RABBITMQCTL takes."""
    import shlex
    return " ".join(["env", f"HOME={shlex.quote(node.env['HOME'])}",
                     f"ERL_EPMD_PORT={node.env['ERL_EPMD_PORT']}",
                     shlex.quote(find_script("rabbitmqctl") or "rabbitmqctl"),
                     "-n", node.nodename])


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.refbroker`: start a private node, print its URL and version, stop it.
    `python -m bench.refbroker --serve [--port N]`: keep it running until SIGTERM/SIGINT, after
    printing the two variables that point the test suite at it (LEVERET_TEST_URL and
    LEVERET_TEST_RABBITMQCTL; docs/behaviour-tests.md)."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m bench.refbroker")
    ap.add_argument("--serve", action="store_true", help="keep the node running until signalled")
    ap.add_argument("--port", type=int, default=None, help="AMQP port (default: a spare one)")
    args = ap.parse_args(argv)
    with RabbitMQNode(port=args.port) as node:
        if not args.serve:
            print(node.url, node.version(), node.pids)
            return 0
        print(f"# {node.version()} (pids {node.pids})", flush=True)
        print(f"export LEVERET_TEST_URL={node.url[:-len('%2F')]}", flush=True)
        print(f"export LEVERET_TEST_RABBITMQCTL='{ctl_prefix(node)}'", flush=True)
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        try:
            while not stop and node.proc.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
