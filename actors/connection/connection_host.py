"""ConnectionHost: the connection-worker process's own part.

It owns the process's netio loop, takes the client sockets the node's acceptor hands it
(actors/connection/handoff.py), starts a Reader (which starts its Writer) for each (for an
AMQPS socket once netio has done its TLS handshake), tells the acceptor when a socket it was
handed is closed, and passes the node's notices (a queue worker died, the node stops) to the
connections and channels of this process.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time

import pykka

from actors import events
from actors import messages as m
from actors import metadata_ops as ops
from actors.connection import tls
from actors.connection.handoff import Receiver
from actors.connection.netio import Conn
from actors.connection.reader import Reader
from actors.connection.stats import ConnectionSampler
from actors.core import channel_stats
from actors.worker.worker_host import WorkerHost
from actors.naming import queue_actor_name

log = logging.getLogger("leveret.connection")


class ConnectionHost(WorkerHost):
    """The connection-worker process: listener, connections, reactions to node notices."""

    def __init__(self, config, transport, replica, node, index, handoff_fd: int, loop):
        super().__init__(config, transport, replica, node, index)
        self.io = loop  # the process's EventLoop: sockets, ZeroMQ and the "conn" actors
        self.handoff_fd = handoff_fd  # Unix socket the node hands accepted sockets over
        self.readers: dict = {}  # conn id -> Reader actor ref
        self.channels: dict = {}  # channel address -> Channel actor ref
        self.ids = itertools.count(1)  # connection numbers
        self.receiver: Receiver | None = None
        self.lock = threading.Lock()  # readers / channels maps
        self.alarms: tuple = ()  # the node's resource alarms on: publishers are blocked
        self.ssl_context = None  # AMQPS connections' handshakes (tls_port set)
        self.admissions: dict = {}  # req id -> (Reader ref, channel number or 0): limit counts
        self.next_req = itertools.count(1)  # req ids of this host's Rpcs
        # statistics (under self.lock): closed channels' last counts (channel_stats.add_into),
        # and connections / channels opened and closed by this process
        self.retired: dict = {}
        self.churn = {"connections_opened": 0, "connections_closed": 0,
                      "channels_opened": 0, "channels_closed": 0}
        transport.set_fallback(self.missing)

    def start(self) -> None:
        if self.config.tls_port:
            self.ssl_context = tls.server_context(self.config)
        self.receiver = Receiver(self.io, self.handoff_fd, self._accepted)
        self.sampler = ConnectionSampler(self, self.config.collect_statistics_interval)
        self.sampler.start()

    def _accepted(self, sock: socket.socket, peer, secure: bool, over_limit: bool) -> None:
        """The node handed us a client (on the loop thread). handshake_timeout counts from
        now, the TLS handshake included."""
        deadline = time.monotonic() + self.config.handshake_timeout
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(self.io, sock, on_closed=self.receiver.ended)
        if not secure:
            self._start_reader(conn, peer, None, over_limit, deadline)
            return
        if self.ssl_context is None:
            raise RuntimeError("an AMQPS socket came, but tls_port is not set")

        def secured(info) -> None:
            log.debug("%s with %s:%s, client certificate %s", info.version, peer[0], peer[1],
                      info.peer_subject or "none")
            try:
                self._start_reader(conn, peer, info, over_limit, deadline)
            except Exception:  # noqa: BLE001 - one connection's failure is not ours
                log.exception("could not start a connection for %s:%s", *peer[:2])
                conn.close()

        def failed(why: str) -> None:
            if why == "handshake_timeout":
                log.warning("closing TLS connection from %s:%s: {handshake_timeout,"
                            "ssl_handshake} (%s s)", peer[0], peer[1],
                            self.config.handshake_timeout)
            else:
                log.warning("TLS handshake with %s:%s failed: %s", peer[0], peer[1], why)
        conn.start_tls(self.ssl_context, secured, deadline - time.monotonic(), failed)

    def _start_reader(self, conn: Conn, peer, tls_info, over_limit: bool,
                      deadline: float) -> None:
        # the run id: the endpoint and the numbers repeat after a restart, and the event log
        # (and exclusive queues' owners) must never take a new connection for an old one
        conn_id = f"{self.transport.endpoint}/{events.run_id()}.{next(self.ids)}"
        ref = Reader.start(self, conn, peer, conn_id, tls_info, over_limit, deadline)
        with self.lock:
            self.readers[conn_id] = ref

    def connection_opened(self) -> None:
        """connection.open-ok sent: counted as opened then, as rabbit_reader calls
        rabbit_core_metrics:connection_created (closed counts every socket that ends, as
        rabbit_reader's connection_closed: a client that never opened is closed only)."""
        with self.lock:
            self.churn["connections_opened"] += 1

    def connection_closed(self, reader: Reader) -> None:
        with self.lock:
            self.readers.pop(reader.conn_id, None)
            self.churn["connections_closed"] += 1
        self.transport.send(self.node, ops.rpc(self.transport.address("control"), 0,
                                               ops.ConnectionClosed(reader.conn_id)))

    def track(self, reader, op: ops.Op, channel: int, wait: bool) -> None:
        """Tell the node of a connection (`connection.open`) or channel (`channel.open`,
        `channel.closed`) for its vhost/user limit counts; with `wait` the reader hears the
        answer (Admitted)."""
        req = 0
        if wait:
            req = next(self.next_req)
            with self.lock:
                self.admissions[req] = (reader, channel)
        self.transport.send(self.node, ops.rpc(self.transport.address("control") if wait
                                               else "", req, op))

    def rpc_reply(self, reply) -> None:
        with self.lock:
            waiting = self.admissions.pop(reply.req_id, None)
        if waiting is not None:
            try:
                waiting[0].tell(m.Admitted(waiting[1], reply.ok, reply.code, reply.text))
            except pykka.ActorDeadError:
                pass

    def missing(self, name: str, msg) -> None:
        """A message for a channel that is gone (a dead pid to RabbitMQ): a declare of its
        direct reply-to name is told it does not exist; a delivery makes its queue requeue
        what it holds for the channel (below); anything else is dropped."""
        if isinstance(msg, m.ReplyCheck):
            self.transport.send(msg.reply_to, m.RpcReply(msg.req_id, False))
        elif isinstance(msg, m.Deliver) or (isinstance(msg, m.GetReply) and msg.item):
            # The queue believes the channel alive: its ChannelDown never reached the queue (it
            # closed while cut off, as a paused node's channels are) and its node was never
            # marked down, so nothing else will tell the queue. Left alone, the queue would
            # hold these messages unacked for a consumer that does not exist, and go on
            # delivering to it (the short Jepsen run's majority-minority lost 289 confirmed
            # messages so). RabbitMQ's queue learns it from its monitor of the channel pid,
            # which fires on a dead pid and on a lost node connection alike.
            self.transport.send(msg.queue, m.ChannelDown(self.transport.address(name)))

    def register_channel(self, address: str, ref) -> None:
        with self.lock:
            self.channels[address] = ref
            self.churn["channels_opened"] += 1

    def unregister_channel(self, address: str, counters=None) -> None:
        """A channel ended: its last counts join the retired totals in the same step that
        takes it out of `channels`, so a sample counts it exactly once."""
        with self.lock:
            if self.channels.pop(address, None) is not None:
                self.churn["channels_closed"] += 1
                if counters is not None:
                    channel_stats.add_into(self.retired, counters)

    def force_close(self, conn_id: str, reason: str) -> None:
        """The management API closes a connection: 320 CONNECTION_FORCED - reason."""
        with self.lock:
            ref = self.readers.get(conn_id)
        if ref is not None:
            try:
                ref.tell(m.CloseConnection(320, f"CONNECTION_FORCED - {reason}", 0, 0))
            except pykka.ActorDeadError:
                pass

    def stop(self) -> None:
        if getattr(self, "sampler", None) is not None:
            self.sampler.stop()
        with self.lock:
            readers = list(self.readers.values())
        for ref in readers:
            try:
                ref.tell(m.Shutdown())
            except pykka.ActorDeadError:
                pass
        time.sleep(0.2)
        super().stop()

    def metadata_changed(self, changes) -> None:
        gone = {queue_actor_name(c[1], c[2]) for c in changes if c[0] == "queue_del"}
        if gone:
            self._tell_channels(m.QueuesGone(gone))

    def resource_alarm(self, alarms: list) -> None:
        self.alarms = tuple(alarms)
        notice = m.ResourceAlarm(list(alarms))
        with self.lock:
            readers = list(self.readers.values())
        for ref in readers:
            try:
                ref.tell(notice)
            except pykka.ActorDeadError:
                pass

    def _tell_channels(self, msg) -> None:
        with self.lock:
            channels = list(self.channels.values())
        for ref in channels:
            try:
                ref.tell(msg)
            except pykka.ActorDeadError:
                pass

    def pause(self, paused: bool) -> None:
        """The node pauses (pause_minority): every channel cancels its consumers and nacks
        what it had not confirmed, then every connection is closed with RabbitMQ's 320
        CONNECTION_FORCED - broker forced connection closure with reason 'shutdown' (the node
        stopped listening: no new ones come until it resumes)."""
        if not paused:
            return
        with self.lock:
            readers = list(self.readers.values())
        log.warning("node paused: closing %d client connections", len(readers))
        self._tell_channels(m.NodePaused())  # first: their basic.cancel frames go out first
        for ref in readers:
            try:
                ref.tell(m.Shutdown())
            except pykka.ActorDeadError:
                pass

    def queue_down(self, msg) -> None:
        self._tell_channels(msg)  # a queue crashed (QueueDown): its publishers and consumers

    def worker_down(self, kind, endpoint) -> None:
        # every kind: a channel may wait on a queue, or on a connection worker's channel
        # (direct reply-to's check)
        self._tell_channels(m.WorkerDown(kind, endpoint))
