"""Connection-worker actors: per TCP connection a Reader, a Writer and one Channel per channel.

Reader mirrors rabbit_reader.erl: it reads the socket (through a plain receiving thread, since
a pykka actor cannot block on a socket), decodes frames with protocol/ (sans-IO), runs the
connection handshake (start/start-ok with PLAIN or AMQPLAIN, tune/tune-ok, open), reassembles
content per channel (protocol.CommandAssembler, rabbit_command_assembler's role), hands whole
commands to channel actors in one batch per channel per read, watches heartbeats, stops reading
when a channel runs out of credit (credit_flow's `blocked()`), and closes the connection on
errors with RabbitMQ's codes.

Writer mirrors rabbit_writer.erl: it owns the socket's sending side, coalesces frames and
flushes when its mailbox is empty or the buffer is large (one syscall for many frames), sends
heartbeats, and returns delivery credit to queues once their deliveries are on the wire.

ConnectionHost is the per-process part: the listening socket (SO_REUSEPORT, one per connection
worker), and the process's reaction to dead queue workers.
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
from actors.channel import Channel, ChannelFinished
from actors.core.connection import ConnectionCore
from actors.host import WorkerHost

log = logging.getLogger("leveret.connection")

FLUSH_THRESHOLD = 65536  # writer: flush at once past this many buffered bytes


class Data:
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data  # bytes read from the socket


class SocketClosed:
    __slots__ = ("why",)

    def __init__(self, why):
        self.why = why


class HeartbeatTick:
    pass


class Block:
    __slots__ = ("channel", "on")

    def __init__(self, channel, on):
        self.channel, self.on = channel, on


class Writer(pykka.ThreadingActor):
    """Sends frames; `(bytes, sent)` where sent is [(queue, n)] delivery credit to return."""

    def __init__(self, sock, transport, channel_addr_of):
        super().__init__()
        self.sock = sock  # the connection's socket
        self.transport = transport  # for Sent credit to queues
        self.buf: list = []  # frames waiting for the next flush
        self.size = 0  # bytes in buf
        self.credits: dict = {}  # (queue, channel address) -> deliveries buffered
        self.last_send = time.monotonic()  # for heartbeats
        self.heartbeat = 0  # seconds, 0 = off
        self.dead = False  # the socket failed
        self.reader = None  # Reader actor ref, told on socket failure

    def on_receive(self, msg):
        if isinstance(msg, tuple):
            if msg[0] == "reader":
                self.reader = msg[1]
                return
            data, sent = msg
            if data:
                self.buf.append(data)
                self.size += len(data)
            if sent:
                for key, n in sent:
                    self.credits[key] = self.credits.get(key, 0) + n
        elif isinstance(msg, HeartbeatTick):
            if self.heartbeat and time.monotonic() - self.last_send >= self.heartbeat / 2:
                self.buf.append(b"\x08\x00\x00\x00\x00\x00\x00\xce")
                self.size += 8
        elif msg == "close":
            self.flush()
            self._shutdown()
            return
        elif isinstance(msg, int):
            self.heartbeat = msg
        # rabbit_writer: flush when the mailbox is empty or the buffer is big
        if (self.buf or self.credits) and (self.size >= FLUSH_THRESHOLD or
                                           self.actor_inbox.empty()):
            self.flush()

    def flush(self) -> None:
        if self.buf and not self.dead:
            data = b"".join(self.buf) if len(self.buf) > 1 else self.buf[0]
            try:
                self.sock.sendall(data)
                self.last_send = time.monotonic()
            except OSError as e:
                self.dead = True
                if self.reader is not None:
                    self.reader.tell(SocketClosed(f"send failed: {e}"))
        self.buf = []
        self.size = 0
        if self.credits:
            credits, self.credits = self.credits, {}
            for (queue, channel), n in credits.items():
                self.transport.send(queue, m.Sent(channel, n))

    def _shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.stop()


class Reader(pykka.ThreadingActor):
    def __init__(self, host: "ConnectionHost", sock, peer, conn_id: str):
        super().__init__()
        self.host = host  # the worker process's part
        self.sock = sock  # the TCP socket
        self.peer = peer  # (host, port) of the client
        self.conn_id = conn_id  # unique connection id (exclusive-queue owner)
        self.writer = Writer.start(sock, host.transport, None)  # the sending side
        self.core = ConnectionCore(host.config, host.replica, peer, conn_id, self)  # handshake
        self.channels: dict[int, pykka.ActorRef] = {}  # channel number -> Channel actor
        self.blocked: set = set()  # channel numbers out of credit
        self.unblocked = threading.Event()  # cleared while any channel is blocked
        self.unblocked.set()
        self.last_recv = time.monotonic()  # for missed heartbeats
        self.closing = False  # the connection is being torn down
        self.reader_thread: threading.Thread | None = None

    def on_start(self):
        self.writer.tell(("reader", self.actor_ref))
        self.reader_thread = threading.Thread(target=self._recv_loop, daemon=True,
                                              name=f"recv-{self.conn_id}")
        self.reader_thread.start()

    def _recv_loop(self):
        sock = self.sock
        me = self.actor_ref
        try:
            while True:
                self.unblocked.wait()
                data = sock.recv(131072)
                if not data:
                    me.tell(SocketClosed("closed by client"))
                    return
                me.tell(Data(data))
        except (OSError, pykka.ActorDeadError) as e:
            try:
                me.tell(SocketClosed(str(e)))
            except pykka.ActorDeadError:
                pass

    def on_receive(self, msg):
        try:
            if isinstance(msg, Data):
                self.last_recv = time.monotonic()
                if not self.closing:
                    self.core.receive(msg.data)
            elif isinstance(msg, Block):
                if msg.on:
                    self.blocked.add(msg.channel)
                    self.unblocked.clear()
                else:
                    self.blocked.discard(msg.channel)
                    if not self.blocked:
                        self.unblocked.set()
            elif isinstance(msg, ChannelFinished):
                ref = self.channels.get(msg.number)
                if ref is not None and ref.actor_urn == msg.urn:
                    del self.channels[msg.number]
                finished = pykka.ActorRegistry.get_by_urn(msg.urn)
                if finished is not None:
                    finished.stop(block=False)
            elif isinstance(msg, HeartbeatTick):
                hb = self.core.heartbeat
                if hb and time.monotonic() - self.last_recv > 2 * hb:
                    log.warning("missed heartbeats from client %s:%s, timeout: %ss",
                                self.peer[0], self.peer[1], hb)
                    self.terminate("missed heartbeats")
                    return
                self.writer.tell(msg)
            elif isinstance(msg, SocketClosed):
                self.terminate(msg.why)
            elif msg == "force-close":
                self.terminate("close timed out")
            elif isinstance(msg, tuple) and msg[0] == "close":
                self.core.close(*msg[1:])
            elif msg == "shutdown":
                self.core.close(320, "CONNECTION_FORCED - broker forced connection closure "
                                     "with reason 'shutdown'")
        except Exception:
            log.exception("reader of %s failed", self.conn_id)
            self.terminate("internal error")

    # --- called by ConnectionCore ------------------------------------------------------------
    def write(self, data: bytes) -> None:
        self.writer.tell((data, None))

    def opened(self, heartbeat: int) -> None:
        self.writer.tell(heartbeat)
        if heartbeat:
            self.host.timers.every(max(500, heartbeat * 500), self.actor_ref, HeartbeatTick())

    def open_channel(self, number: int, info) -> None:
        ch = Channel.start(self.host, number, info, self.actor_ref, self.writer)
        self.channels[number] = ch

    def channel_commands(self, number: int, commands: list) -> None:
        ref = self.channels.get(number)
        if ref is not None:
            ref.tell(commands)

    def forget_channel(self, number: int) -> None:
        """channel.close(-ok) passed on: the channel actor finishes on its own."""
        self.channels.pop(number, None)

    def channel_open(self, number: int) -> bool:
        return number in self.channels

    def close_after(self, seconds: float) -> None:
        self.closing = True
        self.host.timers.at(int((time.monotonic() + seconds) * 1000), self.actor_ref,
                            "force-close")

    def terminate(self, why: str) -> None:
        """Tear down: channels release their queues, the node drops exclusive queues."""
        if getattr(self, "_terminated", False):
            return
        self._terminated = True
        self.closing = True
        log.debug("connection %s closed: %s", self.conn_id, why)
        if events.enabled():
            events.emit("connection_closed", None, actor="reader", connection=self.conn_id,
                        reason=why, channels=len(self.channels))
        for ref in self.channels.values():
            ref.tell("terminate")
        self.channels.clear()
        self.writer.tell("close")
        self.host.connection_closed(self)
        self.stop()


class ConnectionHost(WorkerHost):
    """The connection-worker process: listener, connections, reactions to node notices."""

    def __init__(self, config, transport, replica, node, index):
        super().__init__(config, transport, replica, node, index)
        self.readers: dict[str, Reader] = {}  # conn id -> Reader actor ref
        self.channels: dict[str, pykka.ActorRef] = {}  # channel address -> Channel actor
        self.ids = itertools.count(1)  # connection numbers
        self.lsock: socket.socket | None = None  # listening socket
        self.lock = threading.Lock()  # readers / channels maps

    def start(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((self.config.host, self.config.port))
        s.listen(1024)
        self.lsock = s
        threading.Thread(target=self._accept_loop, name="acceptor", daemon=True).start()
        log.info("accepting AMQP connections on %s:%d", self.config.host, self.config.port)

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, peer = self.lsock.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn_id = f"{self.transport.endpoint}/{next(self.ids)}"
            ref = Reader.start(self, sock, peer, conn_id)
            with self.lock:
                self.readers[conn_id] = ref

    def connection_closed(self, reader: Reader) -> None:
        with self.lock:
            self.readers.pop(reader.conn_id, None)
        self.transport.send(self.node, m.Rpc(self.transport.address("control"), 0,
                                             "connection.closed", {"owner": reader.conn_id}))

    def register_channel(self, address: str, ref) -> None:
        with self.lock:
            self.channels[address] = ref

    def unregister_channel(self, address: str) -> None:
        with self.lock:
            self.channels.pop(address, None)

    def stop(self) -> None:
        if self.lsock is not None:
            self.lsock.close()
        with self.lock:
            readers = list(self.readers.values())
        for ref in readers:
            try:
                ref.tell("shutdown")
            except pykka.ActorDeadError:
                pass
        time.sleep(0.2)
        super().stop()

    def worker_down(self, kind, endpoint) -> None:
        if kind != "queue":
            return
        with self.lock:
            channels = list(self.channels.values())
        for ref in channels:
            try:
                ref.tell(m.WorkerDown(kind, endpoint))
            except pykka.ActorDeadError:
                pass
