"""The node: root supervisor process of one Leveret broker.

Mirrors RabbitMQ's top supervision tree (rabbit_sup, rabbit_amqqueue_sup_sup, the ranch
listener): it owns
- the metadata actor (actors/node/metadata.py), the sole writer of definitions;
- the connection-worker and queue-worker OS processes, which it starts, watches and restarts the
  way an OTP one_for_one supervisor does (at most `max_restarts` in `restart_period` seconds per
  worker slot, then it gives up and stops the node), logging every exit with its cause;
- the AMQP listening socket, and the AMQPS one when `tls_port` is set: it accepts on its own
  netio loop and hands each client socket to a connection worker in turn
  (actors/connection/handoff.py), as ranch's acceptors do, counting the connections the workers
  hold for `max_connections`; the TLS handshake is the worker's;
- the node file `<data_dir>/node.json` telling leveretctl where to reach the metadata actor,
  and which process runs each worker slot now (rewritten whenever a worker starts or exits).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import subprocess

import pykka
import sdnotify
import sys
import shutil
import stat
import tempfile
import threading
import time

from actors import events, hlc
from actors import metadata_ops as ops
from actors.config import Config
from actors.connection import handoff, tls
from actors.connection.netio import Listener
from actors import runtime
from actors.messages import (AlarmsChanged, ClusterReady, ClusterTick, DurableQueues, NodeTick,
                             ReadyWorkers, WorkerExited)
from actors.runtime.eventloop import EventLoop
from actors.ctl.commands import ask_node
from actors.node import definitions_json, node_stats
from actors.worker import launcher
from actors.node.metadata import Metadata
from actors.node.resources import ResourceMonitor
from actors.core.restarts import RestartIntensity
from actors.store.lanes import lane_queue_ids
from actors.store import quorum_log
from actors.store.storage import Storage
from actors import secure
from actors.transport import EXIT_RECEIVE_FAILED, Transport, make_address

log = logging.getLogger("leveret.node")


class Slot:
    """One supervised worker process: its kind and index stay, its process and endpoint change."""

    def __init__(self, kind: str, index: int, restarts: RestartIntensity):
        self.kind = kind  # "conn" or "queue"
        self.index = index  # slot number
        self.gen = 0  # incarnation number, part of the endpoint so stale messages go nowhere
        self.proc: subprocess.Popen | None = None  # the running process
        self.endpoint = ""  # ZeroMQ endpoint given to the running incarnation (tcp://host:* in a
        # cluster: the port is the worker's own pick, told in its hello)
        self.handoff = None  # conn: the node's end of the socket pair accepted sockets go over
        self.restarts = restarts  # its recent exits: restart it or give up


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


def private_data_dir(data_dir: str) -> None:
    """The data dir 0700 and what is in it readable by this user only (files 0600, the
    cluster secret 0400): definitions with password hashes, message bodies and the Raft log
    are nobody else's business. Files an older version left 0644 are fixed here too; the
    process's umask (077, actors/runtime/process_setup.py) keeps new ones private."""
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    me = os.getuid()
    for root, dirs, files in os.walk(data_dir):
        for name in [None, *files]:
            path = root if name is None else os.path.join(root, name)
            try:
                st = os.lstat(path)
                if st.st_uid == me and not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                    os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
            except OSError:
                pass  # gone meanwhile, or not ours to change


def short_run_dir(data_dir: str) -> tuple[str, bool]:
    """ipc:// paths must fit in sun_path (108 bytes): data_dir/run when short enough, else a
    folder of the temp dir named after the data dir (the same one again after a restart, so
    kill -9 does not leave a new one each time) -> (path, whether it is that temp folder,
    which the node removes when it stops)."""
    data_dir = os.path.abspath(data_dir)
    run = os.path.join(data_dir, "run")
    if len(run) < 70:
        os.makedirs(run, mode=0o700, exist_ok=True)
        os.chmod(run, 0o700)  # ipc:// sockets: this user only
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
        self.stopping = threading.Event()  # set on SIGTERM/SIGINT (by _stop_asked), or a failure
        self.signalled = None  # SIGTERM/SIGINT's number, set by the handler alone
        self.slots: list[Slot] = []  # every supervised worker
        self.exit_code = 0  # 1 when the node gave up on a worker
        self.secret = b""  # the cluster secret (a cluster member only; actors/secure.py)
        self._systemd = None  # sdnotify.SystemdNotifier, made on first use
        self.next_tick = 0.0  # when the metadata actor next looks at the cluster
        self.next_sample = 0.0  # when the node next measures itself (/api/nodes: NodeTick)
        self.dealer = handoff.Dealer(config.connection_limit)  # hands sockets to conn workers
        self.lsock: socket.socket | None = None  # the AMQP listening socket
        self.listener: Listener | None = None  # accepts on it (after the workers are ready)
        self.tls_sock: socket.socket | None = None  # the AMQPS listening socket (tls_port)
        self.tls_listener: Listener | None = None  # accepts on it
        self.management = None  # the HTTP API (management_port): a Management
        # set by the metadata actor while the node is paused (cluster, pause_minority): the
        # node does not listen on its AMQP ports meanwhile, as RabbitMQ stops its listeners
        self.paused = threading.Event()
        self.listening = False  # the AMQP (and AMQPS) listeners are open
        self.launcher = launcher.Launcher()  # forks the workers from code imported once

    def run(self) -> int:
        cfg = self.config
        private_data_dir(cfg.data_dir)
        if cfg.tls_port:
            try:  # the workers build the same context: a bad file stops the node here
                tls.server_context(cfg)
            except tls.TlsConfigError as e:
                raise SystemExit(f"leveret-server: TLS: {e}")
        self.lsock = self._bind(cfg.port)
        if cfg.tls_port:
            try:
                self.tls_sock = self._bind(cfg.tls_port)
            except SystemExit:
                self.lsock.close()
                raise
        self.run_dir, self.run_dir_is_temp = short_run_dir(cfg.data_dir)
        events.configure(cfg, process="node", node=cfg.node)
        hlc.share_offset()  # the workers' event stamps on this node's clock
        self.launcher.start()  # (after the environment its workers inherit is set)
        curve, local = None, ""
        if cfg.clustered:
            self.secret = secure.load_secret(cfg)  # SystemExit when it cannot be used
            curve = secure.Curve(self.secret)
            local = f"ipc://{self.run_dir}/node.sock"  # leveretctl's way in (no secret needed)
        self.transport = Transport(self._endpoint("node"), curve, local)
        # one thread for the metadata actor, its ZeroMQ and the acceptor
        self.loop = EventLoop("node-loop")
        runtime.attach("node", self.loop)
        self.dealer.start(self.loop)
        self.transport.start(self.loop)
        self.resources = ResourceMonitor(cfg, cfg.data_dir)  # memory and disk alarms
        self.metadata = Metadata.start(self.transport, cfg, self.resources, self.secret,
                                       self.paused)
        if cfg.clustered and not self._join_cluster():
            self.metadata.stop()
            if self.run_dir_is_temp:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            return self.exit_code
        self._drop_stale_indexes()
        if cfg.management_port or cfg.prometheus_port:
            # (imported here: aiohttp and the API cost a node without them ~0.25 s of CPU)
            from actors.management.server import Management
            self.management = Management(cfg, self.run_dir, self._ctl_address())
            try:
                self.management.start()
            except SystemExit as e:
                log.error("%s", e)
                self.metadata.stop()
                if self.run_dir_is_temp:
                    shutil.rmtree(self.run_dir, ignore_errors=True)
                return 1
        self._write_node_file()
        if cfg.load_definitions and not self._load_definitions():
            self.metadata.stop()
            if self.run_dir_is_temp:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            return 1
        self.slots = [Slot(kind, i, RestartIntensity(cfg.max_restarts, cfg.restart_period))
                      for kind, n in (("queue", cfg.queue_workers), ("conn", cfg.conn_workers))
                      for i in range(n)]
        for slot in self.slots:
            self._spawn(slot)
        self._write_node_file()
        self._wait_ready()
        if not self._stop_asked():
            self._listen()
            self.systemd.notify("READY=1")  # Type=notify: the listeners are up
        watchdog = _watchdog_interval()
        next_ping = time.monotonic()
        try:
            while not self._stop_asked():
                try:
                    self._reap()
                    self._check_resources()
                    self._sample_node()
                    self._check_paused()
                except pykka.ActorDeadError:
                    pass  # (the metadata actor ended meanwhile: just below)
                if not self.metadata.is_alive():
                    self._metadata_crashed()
                    break
                if watchdog and time.monotonic() >= next_ping:
                    self.systemd.notify("WATCHDOG=1")  # the supervision loop is alive
                    next_ping = time.monotonic() + watchdog
                self.stopping.wait(0.1)
        finally:
            self.systemd.notify("STOPPING=1")
            self._shutdown()
        return self.exit_code

    def _metadata_crashed(self) -> None:
        """The metadata actor crashed (its exception is logged where it ended): the node
        stops with status 1 so that systemd (Restart=on-failure) starts it again from the
        definitions on disk (or the Raft log), as an Erlang node whose rabbit application
        exits; in place it would serve definitions a handler left half-applied."""
        log.error("the metadata actor crashed: stopping the node (its supervisor, systemd, "
                  "restarts it from its durable definitions)")
        self.exit_code = 1
        self.stopping.set()

    def _listen(self) -> None:
        cfg = self.config
        self.lsock.listen(4096)
        self.listener = Listener(self.loop, self.lsock, self.dealer.deal)
        log.info("accepting AMQP connections on %s:%d", cfg.host, cfg.port)
        if self.tls_sock is not None:
            self.tls_sock.listen(4096)
            self.tls_listener = Listener(self.loop, self.tls_sock,
                                         lambda s, peer: self.dealer.deal(s, peer, True))
            log.info("accepting AMQPS (TLS) connections on %s:%d", cfg.host, cfg.tls_port)
        self.listening = True

    def _check_paused(self) -> None:
        """Cluster, pause_minority: close the listeners while the node is paused (a client
        gets "connection refused", as from a paused RabbitMQ node), open them again once it
        resumes (bound again: a port taken meanwhile is retried, logged)."""
        if self.paused.is_set() and self.listening:
            for listener in (self.listener, self.tls_listener):
                if listener is not None:
                    listener.close()
            self.listener = self.tls_listener = None
            self.lsock = self.tls_sock = None
            self.listening = False
            log.warning("paused: not accepting AMQP connections until this node is a member "
                        "up again")
        elif not self.paused.is_set() and not self.listening and self.lsock is None:
            try:
                self.lsock = self._bind(self.config.port)
                if self.config.tls_port:
                    self.tls_sock = self._bind(self.config.tls_port)
            except SystemExit as e:
                if self.lsock is not None:
                    self.lsock.close()
                    self.lsock = None
                if time.monotonic() >= getattr(self, "_bind_logged", 0):
                    log.error("resuming: %s; retrying", e)
                    self._bind_logged = time.monotonic() + 10
                return
            self._listen()

    def _check_resources(self) -> None:
        """Memory (this process and every worker) and disk, when due; the metadata actor
        tells the connection workers when an alarm is set or cleared."""
        pids = self._pids()
        alarms = self.resources.check(time.monotonic(), pids)
        if alarms is not None:
            self.metadata.tell(AlarmsChanged(alarms))

    def _pids(self) -> list[int]:
        """This node's processes: itself, the worker launcher and the workers."""
        return [os.getpid(), *self.launcher.pids()] + [s.proc.pid for s in self.slots
                                                       if s.proc is not None]

    def _sample_node(self) -> None:
        """Every collect_statistics_interval: measure the node process and its workers (file
        descriptors, threads, context switches, storage bytes: node_stats.measure, /proc
        reads kept off the metadata actor's thread) for the node's sample (/api/nodes)."""
        now = time.monotonic()
        if now < self.next_sample:
            return
        self.next_sample = now + self.config.collect_statistics_interval / 1000.0
        pids = self._pids()
        self.metadata.tell(NodeTick(node_stats.measure(pids)))

    def _join_cluster(self) -> bool:
        """Wait until the definitions log is loaded and caught up (needs a majority)."""
        deadline = time.monotonic() + self.config.boot_timeout
        log.info("joining the cluster %s as %s", ", ".join(self.config.cluster_nodes),
                 self.config.cluster_address)
        while not self._stop_asked():
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
        """ipc:// inside a lone node; tcp:// (reachable from the other nodes) in a cluster, on a
        port the process's own bind picks (`tcp://host:*`, resolved by Transport): a port
        picked here by binding and closing a socket could be taken by another process before
        the worker binds it, which then died at boot with "Address already in use"."""
        if not self.config.clustered:
            return f"ipc://{self.run_dir}/{name}.sock"
        host = self.config.cluster_address.rpartition(":")[0]
        return f"tcp://{host}:*"

    def _drop_stale_indexes(self) -> None:
        """Queue indexes of queues that are not defined any more (durable exclusive queues of
        the last run, queues deleted while a worker was down) go before any queue starts, so a
        new queue of the same name starts empty."""
        keep = {qid for v, n, args in self.metadata.ask(DurableQueues())
                for qid in lane_queue_ids(v, n, args)}
        dropped = Storage.of(self.config).drop_stale(keep)
        quorum_log.drop_stale(self.config, keep)  # (a quorum queue's log marker goes with it)
        if dropped:
            log.info("dropped the indexes of %d queues that are no longer defined", len(dropped))

    def request_stop(self, signum=None, frame=None) -> None:
        """The signal handler: it only notes the signal. Setting the Event here could deadlock,
        the handler running in the main thread while that thread holds the Event's lock inside
        `stopping.wait`; the main thread's loops turn the note into `stopping` (_stop_asked)."""
        if signum is not None:
            self.signalled = signum
        else:
            self.stopping.set()

    def _stop_asked(self) -> bool:
        if self.signalled is not None and not self.stopping.is_set():
            log.info("received %s, stopping", signal.Signals(self.signalled).name)
            self.stopping.set()
        return self.stopping.is_set()

    # --- workers --------------------------------------------------------------------------------
    def _spawn(self, slot: Slot) -> None:
        slot.gen += 1
        slot.endpoint = self._endpoint(f"{slot.kind}-{slot.index}-{slot.gen}")
        args = ["--kind", slot.kind, "--index", str(slot.index), "--endpoint", slot.endpoint,
                "--node", self.metadata_address(), "--config-json", self.config.to_json()]
        fd_args, close = {}, []
        if self.config.clustered:  # the secret goes through a pipe, never on the command line
            fd = secure.pass_secret(self.secret)
            fd_args["--secret-fd"] = fd
            close.append(lambda fd=fd: os.close(fd))
        node_end = None
        if slot.kind == "conn":
            node_end, worker_end = handoff.pair()
            fd_args["--handoff-fd"] = worker_end.fileno()
            close.append(worker_end.close)
        for option, fd in fd_args.items():
            args += [option, str(fd)]
        try:
            slot.proc = self.launcher.spawn(args, fd_args)
            how = "forked by the launcher"
            if slot.proc is None:
                slot.proc = subprocess.Popen([sys.executable, "-m", "actors.worker.process", *args],
                                             stdin=subprocess.DEVNULL,
                                             pass_fds=list(fd_args.values()))
                how = "its own program"
        finally:
            for closer in close:
                closer()
        if node_end is not None:
            self.dealer.set(slot.index, node_end)
        log.info("started %s worker %d (pid %d, %s)", slot.kind, slot.index, slot.proc.pid, how)

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
        while time.monotonic() < deadline and not self._stop_asked():
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
            if events.enabled():  # the dead worker's own log ends where it died, unmarked
                events.emit("process_crashed", None, actor="node",
                            crashed_process=f"{slot.kind}-{slot.index}",
                            crashed_pid=slot.proc.pid, exit_status=describe_exit(code))
            self.metadata.tell(WorkerExited(slot.kind, slot.index, slot.endpoint))
            slot.proc = None
            self._write_node_file()
            if slot.kind == "conn":
                self.dealer.set(slot.index, None)  # no new connections to the dead worker
            if self.stopping.is_set():
                continue
            if not slot.restarts.exited(time.monotonic()):
                log.error("%s worker %d restarted %d times in %ss: giving up, stopping the node",
                          slot.kind, slot.index, self.config.max_restarts,
                          self.config.restart_period)
                self.exit_code = 1
                self.stopping.set()
                return
            self._spawn(slot)
            self._write_node_file()

    def _shutdown(self) -> None:
        if self.management is not None:
            self.management.stop()
        if self.listener is not None:
            self.listener.close()
        elif self.lsock is not None:
            self.lsock.close()
        if self.tls_listener is not None:
            self.tls_listener.close()
        elif self.tls_sock is not None:
            self.tls_sock.close()
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
        self.launcher.stop()
        try:
            self.metadata.stop()
        except pykka.ActorDeadError:
            pass  # (it crashed: the reason the node stops)
        try:
            os.unlink(os.path.join(self.config.data_dir, "node.json"))
        except OSError:
            pass
        if self.run_dir_is_temp:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        log.info("node stopped")

    # --- helpers --------------------------------------------------------------------------------
    def _bind(self, port: int) -> socket.socket:
        """The AMQP (or AMQPS) port, bound at once (a port in use stops the node before
        anything starts); it listens once the connection workers are ready."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.config.host, port))
        except OSError as e:
            s.close()
            raise SystemExit(f"leveret-server: cannot listen on {self.config.host}:"
                             f"{port}: {e.strerror}")
        return s

    def _load_definitions(self) -> bool:
        """RabbitMQ's `load_definitions`: import the file at boot, before the workers start,
        through the metadata actor like `leveretctl import_definitions` (so in a cluster it is
        one replicated change); skipped when `definitions_skip_if_unchanged` and its content
        hash is the last one imported. False (the node stops) when it cannot be imported."""
        path = self.config.load_definitions
        try:
            with open(path, "rb") as f:
                raw = f.read()
            doc = json.loads(raw)
        except OSError as e:
            log.error("load_definitions: cannot read %s: %s", path, e.strerror)
            return False
        except ValueError as e:
            log.error("load_definitions: %s is not JSON: %s", path, e)
            return False
        reply = ask_node(self.run_dir, self._ctl_address(), ops.DefinitionsImport(
            doc, definitions_json.content_hash(raw),
            bool(self.config.definitions_skip_if_unchanged)),
            timeout_ms=int(self.config.boot_timeout * 1000))
        if reply is None or not reply.ok:
            log.error("load_definitions: could not import %s: %s", path,
                      "no answer" if reply is None else reply.text)
            return False
        if reply.result.get("skipped"):
            log.info("load_definitions: %s unchanged since its last import, skipped", path)
        else:
            log.info("load_definitions: imported %s (%d changes)", path,
                     reply.result["changes"])
        return True

    def _ctl_address(self) -> str:
        """leveretctl's (and the management listener's) address of the metadata actor: ipc://
        always (a cluster node's own endpoint is tcp://, which needs the cluster secret)."""
        return make_address(self.transport.local_endpoint or self.transport.endpoint,
                            "metadata")

    def _write_node_file(self) -> None:
        """node.json, replaced atomically: where leveretctl reaches the node, and each worker
        slot's running process ({kind: {index: pid or null}}), so tools find a worker through
        the node's own record rather than by reading the process table."""
        workers: dict = {"queue": {}, "conn": {}}
        for slot in self.slots:
            workers[slot.kind][str(slot.index)] = slot.proc.pid if slot.proc else None
        info = {"pid": os.getpid(), "host": self.config.host, "port": self.config.port,
                "metadata": self._ctl_address(), "run_dir": self.run_dir, "workers": workers}
        path = os.path.join(self.config.data_dir, "node.json")
        with open(path + ".tmp", "w") as f:
            json.dump(info, f)
        os.replace(path + ".tmp", path)
