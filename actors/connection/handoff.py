"""The node's acceptor hands each accepted client socket to a connection worker (ranch's role).

One listening socket, in the node process, accepted on the node's netio loop (netio.Listener:
it backs off on EMFILE and never dies). Each accepted socket goes to the next live connection
worker in turn (round robin: a publisher and the consumer that connects after it land on
different workers, hence different GILs) through a Unix SOCK_SEQPACKET pair made for each worker
incarnation: the descriptor travels as SCM_RIGHTS, the node closes its copy.

Each hand-over is one message with one descriptor: `PLAIN` or `TLS` (what the socket speaks:
the AMQP port or the AMQPS port), followed by `OVER_LIMIT` when the node already had
`max_connections` open (RabbitMQ's connection_max): that connection is refused at
connection.open. The worker answers on the same pair with the number of handed sockets it has
closed since it last said (`CLOSED`, on the node's loop), so the node's count is node-wide and
exact: a socket counts from its hand-over until its worker closed it, and a dead worker's all
go with it.

`Dealer` is the node's side, `Receiver` the worker's.
"""

from __future__ import annotations

import logging
import resource
import socket
import struct
import threading
import time

log = logging.getLogger("leveret.handoff")

MAX_FDS = 64  # descriptors received per recvmsg
PLAIN, TLS = b"c", b"t"  # node -> worker: the socket came to the AMQP / the AMQPS port
OVER_LIMIT = b"!"  # appended: the node is at max_connections, refuse it at connection.open
CLOSED = struct.Struct("!I")  # worker -> node: this many handed sockets were closed


def pair() -> tuple[socket.socket, socket.socket]:
    """(node end, worker end): the worker end is inherited by the worker process."""
    node_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    node_end.setblocking(False)
    worker_end.set_inheritable(True)
    return node_end, worker_end


class Dealer:
    """Node side: the connection workers' handoff sockets, dealt to in turn, and how many
    connections each holds (for max_connections)."""

    def __init__(self, limit: int | None = None):
        self._lock = threading.Lock()
        self._workers: dict[int, socket.socket] = {}  # conn worker index -> node end
        self._open: dict[int, int] = {}  # conn worker index -> sockets handed, not yet closed
        self._next = 0  # round-robin position
        self.limit = limit  # max_connections; None: no limit
        self.io = None  # the node's EventLoop: deals, and reads the workers' CLOSED notices

    def start(self, io) -> None:
        """The loop the node accepts on; set() and deal() are used after this."""
        self.io = io

    def open_connections(self) -> int:
        with self._lock:
            return sum(self._open.values())

    def set(self, index: int, node_end: socket.socket | None) -> None:
        """The worker of slot `index` (re)started with this handoff socket, or died (None):
        the connections it held are gone with it."""
        with self._lock:
            old = self._workers.pop(index, None)
            self._open.pop(index, None)
            if node_end is not None:
                self._workers[index] = node_end
                self._open[index] = 0
        self.io.call(self._watch, index, old, node_end)

    def _watch(self, index: int, old, new) -> None:
        """(loop thread) Stop reading the old end and close it; read the new one."""
        if old is not None:
            try:
                self.io.loop.remove_reader(old.fileno())
            except (ValueError, OSError):
                pass
            old.close()
        if new is not None and new.fileno() >= 0:
            self.io.add_reader(new.fileno(), self._notices, index, new)

    def _notices(self, index: int, end: socket.socket) -> None:
        """(loop thread) CLOSED notices from the worker of slot `index`."""
        closed = 0
        while True:
            try:
                data = end.recv(64)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if len(data) != CLOSED.size:  # EOF: the worker died (_reap calls set())
                self.io.loop.remove_reader(end.fileno())
                break
            closed += CLOSED.unpack(data)[0]
        if closed:
            with self._lock:
                if self._workers.get(index) is end:
                    self._open[index] = max(0, self._open[index] - closed)

    def deal(self, sock: socket.socket, peer, tls: bool = False) -> None:
        """Give the accepted socket to the next worker that takes it; close our copy."""
        try:
            with self._lock:
                order = sorted(self._workers)
                n = len(order)
                start = self._next
                self._next += 1
                targets = [(i, self._workers[i]) for i in
                           (order[(start + k) % n] for k in range(n))] if n else []
                # RabbitMQ counts the new one too: refused when open + 1 > connection_max
                over = self.limit is not None and sum(self._open.values()) >= self.limit
            msg = (TLS if tls else PLAIN) + (OVER_LIMIT if over else b"")
            for index, end in targets:
                try:
                    socket.send_fds(end, [msg], [sock.fileno()])
                    with self._lock:
                        if self._workers.get(index) is end:
                            self._open[index] += 1
                    return
                except (BlockingIOError, InterruptedError):
                    log.warning("connection worker %d is not taking connections: trying "
                                "the next", index)
                except OSError as e:
                    log.warning("handing a connection to worker %d failed: %s", index, e)
            log.error("no connection worker took the connection from %s:%s: closed", *peer[:2])
        finally:
            sock.close()


class Receiver:
    """Worker side: reads handed-over sockets on the worker's netio loop."""

    def __init__(self, io, fd: int, on_accept):
        self.io = io  # the EventLoop of the worker
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(False)
        self.on_accept = on_accept  # (socket, peer, tls, over_limit), called on the loop thread
        self._dropped = 0  # connections lost to the descriptor limit since the last log line
        self._logged = 0.0  # when that was logged
        self._closed = 0  # handed sockets closed and not yet told to the node
        self._writing = False  # waiting for the handoff socket to take a CLOSED notice
        io.call(io.add_reader, self.sock.fileno(), self._readable)

    def ended(self, n: int = 1) -> None:
        """(loop thread) n handed sockets are closed: tell the node (its connection count)."""
        self._closed += n
        self._tell_closed()

    def _tell_closed(self) -> None:
        if self._closed and self.sock.fileno() >= 0:
            try:
                self.sock.send(CLOSED.pack(self._closed))
                self._closed = 0
            except (BlockingIOError, InterruptedError):
                if not self._writing:  # the node is behind: say it when it reads again
                    self.io.loop.add_writer(self.sock.fileno(), self._tell_closed)
                    self._writing = True
                return
            except OSError:
                self._closed = 0  # the node is gone (this process dies with it)
        if self._writing and self.sock.fileno() >= 0:
            self.io.loop.remove_writer(self.sock.fileno())
            self._writing = False

    def _readable(self) -> None:
        while True:
            try:
                msg, fds, flags, _ = socket.recv_fds(self.sock, 16, MAX_FDS)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.error("handoff socket failed: %s", e)
                self._close()
                return
            if not msg and not fds:  # the node is gone (this process dies with it)
                self._close()
                return
            if flags & socket.MSG_CTRUNC:
                # the kernel dropped (and closed) the descriptor: we are at RLIMIT_NOFILE
                if not fds:  # one descriptor per message: it was that one
                    self.ended()
                self._dropped += 1
                now = time.monotonic()
                if now - self._logged >= 1.0:
                    log.warning("Too many open files: %d connections refused (RLIMIT_NOFILE "
                                "%d reached)", self._dropped,
                                resource.getrlimit(resource.RLIMIT_NOFILE)[0])
                    self._logged, self._dropped = now, 0
            tls, over = msg[:1] == TLS, msg[1:2] == OVER_LIMIT
            for fd in fds:
                s = socket.socket(fileno=fd)
                try:
                    peer = s.getpeername()
                except OSError:  # the client has gone already
                    s.close()
                    self.ended()
                    continue
                try:
                    self.on_accept(s, peer, tls, over)
                except Exception:  # noqa: BLE001 - one connection's failure is not ours
                    log.exception("could not start a connection for %s:%s", *peer[:2])
                    s.close()
                    self.ended()

    def _close(self) -> None:
        try:
            self.io.loop.remove_reader(self.sock.fileno())
        except (ValueError, OSError):
            pass
        self.sock.close()
