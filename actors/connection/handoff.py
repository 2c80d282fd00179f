"""The node's acceptor hands each accepted client socket to a connection worker (ranch's role).

One listening socket, in the node process, accepted on the node's netio loop (netio.Listener:
it backs off on EMFILE and never dies). Each accepted socket goes to the next live connection
worker in turn (round robin: a publisher and the consumer that connects after it land on
different workers, hence different GILs) through a Unix SOCK_SEQPACKET pair made for each worker
incarnation: the descriptor travels as SCM_RIGHTS, the node closes its copy.

`Dealer` is the node's side, `Receiver` the worker's.
"""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time

log = logging.getLogger("leveret.handoff")

MAX_FDS = 64  # descriptors received per recvmsg


def pair() -> tuple[socket.socket, socket.socket]:
    """(node end, worker end): the worker end is inherited by the worker process."""
    node_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    node_end.setblocking(False)
    worker_end.set_inheritable(True)
    return node_end, worker_end


class Dealer:
    """Node side: the connection workers' handoff sockets, dealt to in turn."""

    def __init__(self):
        self._lock = threading.Lock()
        self._workers: dict[int, socket.socket] = {}  # conn worker index -> node end
        self._next = 0  # round-robin position

    def set(self, index: int, node_end: socket.socket | None) -> None:
        """The worker of slot `index` (re)started with this handoff socket, or died (None)."""
        with self._lock:
            old = self._workers.pop(index, None)
            if node_end is not None:
                self._workers[index] = node_end
        if old is not None:
            old.close()

    def deal(self, sock: socket.socket, peer) -> None:
        """Give the accepted socket to the next worker that takes it; close our copy."""
        try:
            with self._lock:
                order = sorted(self._workers)
                n = len(order)
                start = self._next
                self._next += 1
                targets = [(i, self._workers[i]) for i in
                           (order[(start + k) % n] for k in range(n))] if n else []
            for index, end in targets:
                try:
                    socket.send_fds(end, [b"c"], [sock.fileno()])
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
        self.on_accept = on_accept  # (socket, peer), called on the loop thread
        self._dropped = 0  # connections lost to the descriptor limit since the last log line
        self._logged = 0.0  # when that was logged
        io.call(io.loop.add_reader, self.sock.fileno(), self._readable)

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
                self._dropped += 1
                now = time.monotonic()
                if now - self._logged >= 1.0:
                    log.warning("Too many open files: %d connections refused (RLIMIT_NOFILE "
                                "%d reached)", self._dropped,
                                resource.getrlimit(resource.RLIMIT_NOFILE)[0])
                    self._logged, self._dropped = now, 0
            for fd in fds:
                s = socket.socket(fileno=fd)
                try:
                    peer = s.getpeername()
                except OSError:  # the client has gone already
                    s.close()
                    continue
                try:
                    self.on_accept(s, peer)
                except Exception:  # noqa: BLE001 - one connection's failure is not ours
                    log.exception("could not start a connection for %s:%s", *peer[:2])
                    s.close()

    def _close(self) -> None:
        try:
            self.io.loop.remove_reader(self.sock.fileno())
        except (ValueError, OSError):
            pass
        self.sock.close()
