"""The node: root supervisor process of one Leveret broker.

Mirrors RabbitMQ's top supervision tree (rabbit_sup, rabbit_amqqueue_sup_sup, the ranch
listener): it owns
- the metadata actor (actors/node/metadata.py), the sole writer of definitions;
- the connection-worker and queue-worker OS processes, which it starts, watches and restarts the
  way an OTP one_for_one supervisor does (at most `max_restarts` in `restart_period` seconds per
  worker slot, then it gives up and stops the node), logging every exit with its cause;
- the AMQP listening socket: it accepts on its own netio loop and hands each client socket to a
  connection worker in turn (actors/connection/handoff.py), as ranch's acceptors do;
- the node file `<data_dir>/node.json` telling leveretctl where to reach the metadata actor.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess

import sdnotify
import sys
import shutil
import stat
import tempfile
import threading
import time

from actors import events
from actors.config import Config
from actors.connection import handoff
from actors.connection.netio import Listener
from actors import runtime
from actors.messages import ClusterReady, ClusterTick, DurableQueues, ReadyWorkers, WorkerExited
from actors.runtime.eventloop import EventLoop
from actors.node.metadata import Metadata
from actors.queue.storage import Storage, queue_id
from actors.transport import EXIT_RECEIVE_FAILED, Transport

log = logging.getLogger("leveret.node")


class Slot:
    """One supervised worker process: its kind and index stay, its process and endpoint change."""

    def __init__(self, kind: str, index: int):
        self.kind = kind  # "conn" or "queue"
        self.index = index  # slot number
        self.gen = 0  # incarnation number, part of the endpoint so stale messages go nowhere
        self.proc: subprocess.Popen | None = None  # the running process
        self.endpoint = ""  # ZeroMQ endpoint of the running incarnation
        self.handoff = None  # conn: the node's end of the socket pair accepted sockets go over
        self.restarts: collections.deque = collections.deque()  # times of recent restarts


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == EXIT_RECEIVE_FAILED:
        return f"exit status {code} (its ZeroMQ receive loop failed)"
    return f"exit status {code}"


def _watchdog_interval() -> float:
    """Half of systemd's WatchdogSec (WATCHDOG_USEC), 0 when no watchdog is asked for."""
    try:
        usec = int(os.environ.get("WATCHDOG_USEC", "0"))
    except ValueError:
        return 0.0
    pid = os.environ.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return 0.0
    return usec / 2e6


def short_run_dir(data_dir: str) -> tuple[str, bool]:
    """ipc:// paths must fit in sun_path (108 bytes): data_dir/run when short enough, else a
    folder of the temp dir named after the data dir (the same one again after a restart, so
    kill -9 does not leave a new one each time) -> (path, whether it is that temp folder,
    which the node removes when it stops)."""
    data_dir = os.path.abspath(data_dir)
    run = os.path.join(data_dir, "run")
    if len(run) < 70:
        os.makedirs(run, exist_ok=True)
        return run, False
    digest = hashlib.sha256(data_dir.encode()).hexdigest()[:16]
    run = os.path.join(tempfile.gettempdir(), f"leveret-run-{digest}")
    try:
        os.mkdir(run, 0o700)
    except FileExistsError:
        st = os.lstat(run)  # ours from an earlier run, not someone else's folder or link
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return tempfile.mkdtemp(prefix="leveret-run-"), True
    return run, True


class Node:
    def __init__(self, config: Config):
        self.config = config  # embedded defaults + config file + command line
        self.stopping = threading.Event()  # set on SIGTERM/SIGINT
        self.slots: list[Slot] = []  # every supervised worker
        self.exit_code = 0  # 1 when the node gave up on a worker
        self._systemd = None  # sdnotify.SystemdNotifier, made on first use
        self.next_tick = 0.0  # when the metadata actor next looks at the cluster
        self.dealer = handoff.Dealer()  # hands accepted sockets to connection workers
        self.lsock: socket.socket | None = None  # the AMQP listening socket
        self.listener: Listener | None = None  # accepts on it (after the workers are ready)

    def run(self) -> int:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        self.lsock = self._bind()
        self.run_dir, self.run_dir_is_temp = short_run_dir(cfg.data_dir)
        events.configure(cfg, process="node", node=cfg.node)
        self.transport = Transport(self._endpoint("node"))
        # one thread for the metadata actor, its ZeroMQ and the acceptor
        self.loop = EventLoop("node-loop")
        runtime.attach("node", self.loop)
        self.transport.start(self.loop)
        self.metadata = Metadata.start(self.transport, cfg)
        if cfg.clustered and not self._join_cluster():
            self.metadata.stop()
            if self.run_dir_is_temp:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            return self.exit_code
        self._drop_stale_indexes()
        self._write_node_file()
        self.slots = ([Slot("queue", i) for i in range(cfg.queue_workers)] +
                      [Slot("conn", i) for i in range(cfg.conn_workers)])
        for slot in self.slots:
            self._spawn(slot)
        self._wait_ready()
        if not self.stopping.is_set():
            self.lsock.listen(4096)
            self.listener = Listener(self.loop, self.lsock, self.dealer.deal)
            log.info("accepting AMQP connections on %s:%d", cfg.host, cfg.port)
            self.systemd.notify("READY=1")  # Type=notify: the listeners are up
        watchdog = _watchdog_interval()
        next_ping = time.monotonic()
        try:
            while not self.stopping.is_set():
                self._reap()
                if watchdog and time.monotonic() >= next_ping:
                    self.systemd.notify("WATCHDOG=1")  # the supervision loop is alive
                    next_ping = time.monotonic() + watchdog
                self.stopping.wait(0.1)
        finally:
            self.systemd.notify("STOPPING=1")
            self._shutdown()
        return self.exit_code

    def _join_cluster(self) -> bool:
        """Wait until the definitions log is loaded and caught up (needs a majority)."""
        deadline = time.monotonic() + self.config.boot_timeout
        log.info("joining the cluster %s as %s", ", ".join(self.config.cluster_nodes),
                 self.config.cluster_address)
        while not self.stopping.is_set():
            if self.metadata.ask(ClusterReady()):
                return True
            if time.monotonic() > deadline:
                log.error("could not join the cluster (%s) within %d s (boot_timeout)",
                          ", ".join(self.config.cluster_nodes), self.config.boot_timeout)
                self.exit_code = 1
                return False
            self.metadata.tell(ClusterTick())
            time.sleep(0.1)
        return False

    def _endpoint(self, name: str) -> str:
        """ipc:// inside a lone node; tcp:// (reachable from the other nodes) in a cluster."""
        if not self.config.clustered:
            return f"ipc://{self.run_dir}/{name}.sock"
        host = self.config.cluster_address.rpartition(":")[0]
        with socket.socket() as s:
            s.bind((host, 0))
            return f"tcp://{host}:{s.getsockname()[1]}"

    def _drop_stale_indexes(self) -> None:
        """Queue indexes of queues that are not defined any more (durable exclusive queues of
        the last run, queues deleted while a worker was down) go before any queue starts, so a
        new queue of the same name starts empty."""
        keep = {queue_id(v, n) for v, n in self.metadata.ask(DurableQueues())}
        dropped = Storage.of(self.config).drop_stale(keep)
        if dropped:
            log.info("dropped the indexes of %d queues that are no longer defined", len(dropped))

    def request_stop(self, signum=None, frame=None) -> None:
        if signum is not None:
            log.info("received %s, stopping", signal.Signals(signum).name)
        self.stopping.set()

    # --- workers --------------------------------------------------------------------------------
    def _spawn(self, slot: Slot) -> None:
        slot.gen += 1
        slot.endpoint = self._endpoint(f"{slot.kind}-{slot.index}-{slot.gen}")
        cmd = [sys.executable, "-m", "actors.worker", "--kind", slot.kind,
               "--index", str(slot.index), "--endpoint", slot.endpoint,
               "--node", self.metadata_address(), "--config-json", self.config.to_json()]
        if slot.kind != "conn":
            slot.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        else:
            node_end, worker_end = handoff.pair()
            cmd += ["--handoff-fd", str(worker_end.fileno())]
            try:
                slot.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                             pass_fds=[worker_end.fileno()])
            finally:
                worker_end.close()
            self.dealer.set(slot.index, node_end)
        log.info("started %s worker %d (pid %d)", slot.kind, slot.index, slot.proc.pid)

    @property
    def systemd(self):
        """sd_notify(3) through the sdnotify package; does nothing outside systemd."""
        if self._systemd is None:
            self._systemd = sdnotify.SystemdNotifier()
        return self._systemd

    def metadata_address(self) -> str:
        return self.transport.address("metadata")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.boot_timeout
        want = {("conn", s.index) for s in self.slots if s.kind == "conn"}
        while time.monotonic() < deadline and not self.stopping.is_set():
            ready = set(self.metadata.ask(ReadyWorkers()))
            if want <= ready:
                log.info("Leveret node ready: amqp://%s:%d (data in %s)", self.config.host,
                         self.config.port, os.path.abspath(self.config.data_dir))
                return
            self._reap()
            time.sleep(0.05)
        if not self.stopping.is_set():
            log.error("workers did not become ready within %d s (boot_timeout)",
                      self.config.boot_timeout)
            self.exit_code = 1
            self.stopping.set()

    def _reap(self) -> None:
        now = time.monotonic()
        if self.config.clustered and now >= self.next_tick:
            self.metadata.tell(ClusterTick())  # leadership, members up and down
            self.next_tick = now + 0.25
        for slot in self.slots:
            if slot.proc is None:
                continue
            code = slot.proc.poll()
            if code is None:
                continue
            log.error("%s worker %d (pid %d) exited: %s", slot.kind, slot.index, slot.proc.pid,
                      describe_exit(code))
            self.metadata.tell(WorkerExited(slot.kind, slot.index, slot.endpoint))
            slot.proc = None
            if slot.kind == "conn":
                self.dealer.set(slot.index, None)  # no new connections to the dead worker
            if self.stopping.is_set():
                continue
            now = time.monotonic()
            slot.restarts.append(now)
            while slot.restarts and now - slot.restarts[0] > self.config.restart_period:
                slot.restarts.popleft()
            if len(slot.restarts) > self.config.max_restarts:
                log.error("%s worker %d restarted %d times in %ss: giving up, stopping the node",
                          slot.kind, slot.index, self.config.max_restarts,
                          self.config.restart_period)
                self.exit_code = 1
                self.stopping.set()
                return
            self._spawn(slot)

    def _shutdown(self) -> None:
        if self.listener is not None:
            self.listener.close()
        elif self.lsock is not None:
            self.lsock.close()
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.terminate()
        deadline = time.monotonic() + 10
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s worker %d did not stop: killing pid %d", slot.kind, slot.index,
                            slot.proc.pid)
                slot.proc.kill()
                slot.proc.wait()
        self.metadata.stop()
        try:
            os.unlink(os.path.join(self.config.data_dir, "node.json"))
        except OSError:
            pass
        if self.run_dir_is_temp:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        log.info("node stopped")

    # --- helpers --------------------------------------------------------------------------------
    def _bind(self) -> socket.socket:
        """The AMQP port, bound at once (a port in use stops the node before anything starts);
        it listens once the connection workers are ready."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.config.host, self.config.port))
        except OSError as e:
            s.close()
            raise SystemExit(f"leveret-server: cannot listen on {self.config.host}:"
                             f"{self.config.port}: {e.strerror}")
        return s

    def _write_node_file(self) -> None:
        info = {"pid": os.getpid(), "host": self.config.host, "port": self.config.port,
                "metadata": self.metadata_address(), "run_dir": self.run_dir}
        path = os.path.join(self.config.data_dir, "node.json")
        with open(path + ".tmp", "w") as f:
            json.dump(info, f)
        os.replace(path + ".tmp", path)
