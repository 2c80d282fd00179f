"""A worker OS process: a connection worker (readers, writers, channels) or a queue worker (queue
and backing-queue actors), started and supervised by the node (actors/node/node.py).

Owns the process's Transport, its metadata Replica, and the control actor that applies metadata
changes and hears about dead workers. Dies with the node (PR_SET_PDEATHSIG), stops cleanly on
SIGTERM.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import threading
import time

import pykka

from actors import messages as m
from actors.runtime.process_setup import private_umask, raise_fd_limit, setup_logging
from actors.config import Config
from actors.replica import Replica
from actors.runtime import ActorDown, LightActor
from actors import runtime
from actors import events
from actors import metadata_ops as ops
from actors import secure
from actors.transport import Transport

log = logging.getLogger("leveret.worker")


class WorkerControl(LightActor):
    """Applies metadata changes to the replica and fans out node notices to the process's actors.
    It runs on the worker's event loop with the kind's actors (a metadata change reaches the
    replica without a thread hand-over; what it asks of them, e.g. a mirror's messages on
    promotion, is answered on the same thread)."""

    def __init__(self, transport, replica, node_address, kind, index, on_ready, host):
        self.scheduler_name = kind  # read by LightActor's inbox: the worker's loop scheduler
        super().__init__()
        self.transport = transport  # this process's Transport
        self.replica = replica  # this process's metadata replica
        self.node = node_address  # the node's metadata actor
        self.kind, self.index = kind, index  # which worker slot this is
        self.on_ready = on_ready  # called once with the first snapshot applied
        self.host = host  # the kind-specific part (ConnectionHost or QueueHost)
        self.snapshot_seen = False  # the first MetaSnapshot arrived

    def on_start(self):
        self.host.control = self.actor_ref  # the watcher of the actors the host supervises
        self.address = self.transport.register("control", self.actor_ref)
        self.transport.send(self.node, ops.rpc(self.address, 0, ops.WorkerHello(
            self.kind, self.index, self.transport.endpoint, self.address)))

    def on_receive(self, msg):
        handler = _CONTROL.get(type(msg))
        if handler is None:
            return
        try:
            handler(self, msg)
        except Exception:
            log.exception("control failed on %r", type(msg).__name__)

    def _meta_change(self, msg: m.MetaChange) -> None:
        self.replica.apply(msg.changes)
        self.host.metadata_changed(msg.changes)
        self._applied(msg.version)

    def _meta_snapshot(self, msg: m.MetaSnapshot) -> None:
        implied = self.replica.load(msg.state)
        self._applied(msg.version)
        if not self.snapshot_seen:
            self.snapshot_seen = True
            self.on_ready()
        elif implied:  # a resync: mirrors and channels learn what it changed
            self.host.metadata_changed(implied)

    def _worker_down(self, msg: m.WorkerDown) -> None:
        self.transport.mark_dead(msg.endpoint)
        self.host.worker_down(msg.kind, msg.endpoint)

    def _worker_up(self, msg: m.WorkerUp) -> None:
        self.transport.revive(msg.endpoint)  # its node is back (a partition healed)

    def _force_close(self, msg: m.ForceClose) -> None:
        force_close = getattr(self.host, "force_close", None)  # (a connection worker's)
        if force_close is not None:
            force_close(msg.conn_id, msg.reason)

    def _rpc_reply(self, msg: m.RpcReply) -> None:
        if msg.req_id:
            self.host.rpc_reply(msg)  # an answer the host asked for
        # else hello / ready acknowledgements

    def _applied(self, version: int) -> None:
        self.transport.send(self.node, m.MetaApplied(self.kind, self.index, version))


STOP_POLL_S = 0.05  # how soon the main thread sees a noted SIGTERM/SIGINT

# what the control actor takes: message type -> (control, msg)
_CONTROL = {
    m.MetaChange: WorkerControl._meta_change,
    m.MetaSnapshot: WorkerControl._meta_snapshot,
    m.WorkerDown: WorkerControl._worker_down,
    m.QueueDown: lambda self, msg: self.host.queue_down(msg),
    ActorDown: lambda self, msg: self.host.actor_down(msg),  # a queue or mirror it monitors ended
    m.WorkerUp: WorkerControl._worker_up,
    m.Pause: lambda self, msg: self.host.pause(msg.paused),
    m.ForceClose: WorkerControl._force_close,
    m.StartQueue: lambda self, msg: self.host.start_queue(msg),
    m.ResourceAlarm: lambda self, msg: self.host.resource_alarm(msg.alarms),
    m.RpcReply: WorkerControl._rpc_reply,
}


def die_with_parent() -> None:
    """Linux: get SIGKILL when the node dies, however it dies (kill -9 included)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="leveret-worker")
    p.add_argument("--kind", choices=("conn", "queue"), required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--config-json", required=True)
    p.add_argument("--secret-fd", type=int, help="cluster: a pipe holding the cluster secret")
    p.add_argument("--handoff-fd", type=int, help="conn: the Unix socket the node hands "
                                                   "accepted client sockets over")
    args = p.parse_args(argv)
    private_umask()
    die_with_parent()
    raise_fd_limit()
    cfg = Config.from_json(args.config_json)
    setup_logging(cfg.log_level, f"{args.kind}-{args.index} pid {os.getpid()}")
    events.configure(cfg, process=f"{args.kind}-{args.index}", node=cfg.node)
    curve = None
    if args.secret_fd is not None:
        curve = secure.Curve(secure.read_secret(args.secret_fd))
    transport = Transport(args.endpoint, curve)
    # one thread for the hot path: ZeroMQ, the client sockets and the reader, writer and channel
    # actors (conn), or ZeroMQ and the queue and mirror actors (queue), and worker control;
    # backing queues have a scheduler thread of their own ("store": an fsync blocks)
    loop = runtime.EventLoop(f"{args.kind}-loop")
    runtime.attach(args.kind, loop)
    transport.start(loop)
    replica = Replica()
    # the handlers only note the signal: setting an Event there could deadlock, the handler
    # running in the main thread while that thread holds the Event's lock inside its wait
    signalled: list = []
    signal.signal(signal.SIGTERM, lambda signum, frame: signalled.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: signalled.append(signum))
    if args.kind == "conn":
        from actors.connection.connection_host import ConnectionHost
        host = ConnectionHost(cfg, transport, replica, args.node, args.index, args.handoff_fd,
                              loop)
    else:
        from actors.queue.queue_host import QueueHost
        host = QueueHost(cfg, transport, replica, args.node, args.index)
    ready = threading.Event()
    control = WorkerControl.start(transport, replica, args.node, args.kind, args.index,
                                  ready.set, host)
    while not ready.wait(0.2):  # (set by the control actor's thread, never by a handler)
        if signalled:
            events.close()  # a clean stop: the log's process_stop marker says so
            os._exit(0)  # actor threads would keep the process alive
    host.start()
    transport.send(args.node, ops.rpc(transport.address("control"), 0,
                                      ops.WorkerReady(args.kind, args.index)))
    while not signalled:
        time.sleep(STOP_POLL_S)
    log.info("stopping")
    try:
        host.stop()
    finally:
        control.stop()
        runtime.stop_all(timeout=5)
        pykka.ActorRegistry.stop_all(timeout=5)
        events.close()
        transport.close()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
