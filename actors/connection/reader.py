"""Reader actor: the receiving side and owner of one client connection (rabbit_reader.erl).

netio reads its socket and tells it the bytes (`Data`); the Reader decodes frames with protocol/
(sans-IO, through actors/core/connection.py), runs the connection handshake (start/start-ok with
PLAIN or AMQPLAIN, tune/tune-ok, open), reassembles content per channel, hands whole commands to
channel actors in one batch per channel per read, watches heartbeats, stops reading when a
channel runs out of credit (credit_flow's `blocked()`), and closes the connection on errors with
RabbitMQ's codes. A connection not past connection.open-ok `handshake_timeout` seconds after
its socket was accepted is dropped (its timer: `HandshakeTimeout`). On an AMQPS connection it
starts once netio has finished the TLS handshake, and reads and writes plain AMQP as on TCP.
"""

from __future__ import annotations

import logging
import time

import pykka

from actors import events
from actors import messages as m
from actors import metadata_ops as ops
from actors.connection.channel_process import Channel
from actors.connection.writer import Writer
from actors.core import connection as core_connection
from actors.core.connection import ConnectionCore, ConnectionPort, HandshakeTimeout
from actors.runtime import LightActor

log = logging.getLogger("leveret.connection")


class Reader(LightActor):
    scheduler_name = "conn"

    def __init__(self, host, conn, peer, conn_id: str, tls=None, over_limit: bool = False,
                 deadline: float | None = None):
        super().__init__()
        self.host = host  # the worker process's part (ConnectionHost)
        self.conn = conn  # netio.Conn: the socket
        self.peer = peer  # (host, port) of the client
        self.conn_id = conn_id  # unique connection id (exclusive-queue owner)
        self.connected_at = int(time.time() * 1000)  # wall clock (management API)
        self.writer = Writer.start(conn, host.transport)  # the sending side
        # the handshake and frame dispatch, sans-IO; it acts through this actor's callables
        self.core = ConnectionCore(host.config, host.replica, peer, conn_id,
                                   ConnectionPort.of(self, host.node), tls, over_limit)
        self.core.set_alarms(host.alarms)  # the node's resource alarms now
        self.deadline = (deadline if deadline is not None else
                         time.monotonic() + host.config.handshake_timeout)  # for open-ok
        self.channels: dict = {}  # channel number -> Channel actor ref
        # channels whose number the client freed (its channel.close, or close-ok) and that have
        # not finished yet: stopped with the others at teardown, as rabbit_reader's channel
        # map keeps a channel until it is cleaned up (actor urn -> ref)
        self.finishing: dict = {}
        self.blocked: set = set()  # channel numbers out of credit
        self.throttled = False  # blocked by a resource alarm (ConnectionCore decides)
        self.last_recv = time.monotonic()  # for missed heartbeats
        self.closing = False  # the connection is being torn down
        self.terminated = False  # terminate() ran

    def on_start(self):
        self.host.timers.at(int(self.deadline * 1000), self.actor_ref, HandshakeTimeout())
        self.conn.start(self.actor_ref, self.writer)

    def on_receive(self, msg):
        try:
            handler = _SHELL.get(type(msg))
            if handler is not None:
                handler(self, msg)
            elif type(msg) in core_connection.HANDLES:
                self.core.handle(msg)
        except Exception:
            log.exception("reader of %s failed", self.conn_id)
            self.terminate("internal error")

    # --- what the Reader itself decides (the rest: ConnectionCore.handle) ------------------
    def _data(self, msg: m.Data) -> None:
        try:
            self.last_recv = time.monotonic()
            if not self.closing:
                self.core.receive(msg.data)
        finally:
            self.conn.handled()

    def _block(self, msg: m.Block) -> None:
        if msg.on:
            self.blocked.add(msg.channel)
        else:
            self.blocked.discard(msg.channel)
        self._update_block()

    def _channel_finished(self, msg: m.ChannelFinished) -> None:
        if self.channels.get(msg.number) is msg.ref:
            del self.channels[msg.number]
        self.finishing.pop(msg.ref.actor_urn, None)
        if self.blocked:
            self.blocked.discard(msg.number)
            self._update_block()
        msg.ref.stop(block=False)

    def _heartbeat_tick(self, msg: m.HeartbeatTick) -> None:
        hb = self.core.heartbeat
        # heartbeats are not checked while the broker itself does not read the socket
        if hb and not self.reading_held and time.monotonic() - self.last_recv > 2 * hb:
            log.warning("missed heartbeats from client %s:%s, timeout: %ss",
                        self.peer[0], self.peer[1], hb)
            self.terminate("missed heartbeats")
            return
        self.writer.tell(msg)

    @property
    def reading_held(self) -> bool:
        """The broker does not read this socket: a channel is out of credit, or an alarm."""
        return bool(self.blocked) or self.throttled

    def _update_block(self) -> None:
        held = self.reading_held
        if not held:
            self.last_recv = time.monotonic()  # the client's heartbeats were not read meanwhile
        self.conn.block(held)

    # --- called by ConnectionCore ------------------------------------------------------------
    def throttle(self, on: bool) -> None:
        self.throttled = on
        self._update_block()

    def write(self, data: bytes) -> None:
        self.writer.tell(m.Write(data))

    def opened(self, heartbeat: int) -> None:
        self.host.connection_opened()
        self.writer.tell(m.SetHeartbeat(heartbeat))
        if heartbeat:
            self.host.timers.every(max(500, heartbeat * 500), self.actor_ref, m.HeartbeatTick())

    def track_connection(self, vhost: str, user: str, wait: bool) -> None:
        """Counted by the node for vhost/user limits (wait: connection.open-ok waits)."""
        self.host.track(self.actor_ref, ops.ConnectionOpen(self.conn_id, vhost, user), 0, wait)

    def track_channel(self, number: int, wait: bool) -> None:
        """Counted by the node for the user's max-channels (wait: channel.open-ok waits)."""
        self.host.track(self.actor_ref, ops.ChannelOpen(self.conn_id, number), number, wait)

    def open_channel(self, number: int, info) -> None:
        self.channels[number] = Channel.start(self.host, number, info, self.actor_ref,
                                              self.writer)

    def channel_commands(self, number: int, commands: list) -> None:
        ref = self.channels.get(number)
        if ref is not None:
            ref.tell(m.Commands(commands))

    def forget_channel(self, number: int) -> None:
        """channel.close(-ok) passed on: the channel actor finishes on its own (or, if the
        connection ends first, at teardown: a close-ok on an open channel is a 503 that closes
        the connection, and a channel that finishes after its reader is gone has no one to
        stop it)."""
        ref = self.channels.pop(number, None)
        if ref is not None:
            self.finishing[ref.actor_urn] = ref
            self.host.track(self.actor_ref, ops.ChannelClosed(self.conn_id, number), number,
                            False)

    def channel_open(self, number: int) -> bool:
        return number in self.channels

    def channel_count(self) -> int:
        """Channels open on this connection (rabbit_reader's channel_count)."""
        return len(self.channels)

    def close_after(self, seconds: float) -> None:
        self.closing = True
        self.host.timers.at(int((time.monotonic() + seconds) * 1000), self.actor_ref,
                            m.CloseTimeout())

    def terminate(self, why: str, linger: float = 0.0) -> None:
        """Tear down: channels release their queues, the node drops exclusive queues. `linger`
        (after a close-ok): the socket stays open until the client closes it, or that many
        seconds (netio.Conn.close); nothing is read or written on it any more."""
        if self.terminated:
            return
        self.terminated = True
        self.closing = True
        log.debug("connection %s closed: %s", self.conn_id, why)
        if events.enabled():
            events.emit("connection_closed", None, actor="reader", connection=self.conn_id,
                        reason=why, channels=len(self.channels))
        for ref in (*self.channels.values(), *self.finishing.values()):
            try:
                ref.tell(m.Terminate())
            except pykka.ActorDeadError:
                pass
        self.channels.clear()
        self.finishing.clear()
        self.writer.tell(m.CloseSocket(linger))
        self.host.connection_closed(self)
        self.stop()


# message type -> the Reader's own handler; ConnectionCore.HANDLES go to the core
_SHELL = {
    m.Data: Reader._data,
    m.Block: Reader._block,
    m.ChannelFinished: Reader._channel_finished,
    m.HeartbeatTick: Reader._heartbeat_tick,
    m.SocketClosed: lambda reader, msg: reader.terminate(msg.why),
    m.CloseTimeout: lambda reader, msg: reader.terminate("close timed out"),
}
