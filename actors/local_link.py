"""Unix stream links between the event loops of one node's processes: a hop without ZeroMQ's
I/O threads.

A ZeroMQ ipc:// send from a worker's event loop wakes the sender's ZeroMQ I/O thread, which
writes the socket, and the receiver's I/O thread, which wakes the receiver's loop through a
mailbox: three thread wake-ups and a dozen syscalls per hop. At ordinary load (a message or
two per wake-up) those wake-ups were a third of a worker's CPU per message. A process that
runs an event loop also listens on `<its ipc path>.hop`, a SOCK_STREAM Unix socket in the
node's private run folder; another loop of the node writes its multiparts straight into it
from its own thread, and the receiving loop reads them in its epoll turn: one wake-up per hop.

The bytes of one multipart: `<I` frame count, `<I` per frame its length, then the frames.
What goes over a link is what would have gone over ZeroMQ, and the receiver hands it to the
same `Transport._receive`: the checks on receipt, the batches and the hybrid-clock stamps are
the same. ZeroMQ stays for everything else: threads that are not a loop's, processes without a
loop (the node), other nodes (tcp:// with CURVE), leveretctl.

Order: one sending loop uses one link per receiving process, so its messages arrive in the
order sent, as on its ZeroMQ socket. A sender decides once per receiving process which way it
sends (`Links.link`): over a link when it connects, else over ZeroMQ until that process is
marked dead and revived; a link that breaks (the receiver died) is given up for ZeroMQ, whose
socket queues for a receiver that comes back at the same address.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct

from actors.runtime.eventloop import drain, send_some

log = logging.getLogger(__name__)

SUFFIX = ".hop"  # a loop's link socket: its ipc:// path plus this
READ_SIZE = 1 << 18  # bytes read per recv
MAX_FRAMES = 1 << 16  # a multipart announcing more is not one of ours
MAX_BYTES = 1 << 31  # nor one announcing more bytes (bodies are at most 512 MiB)
_COUNT = struct.Struct("<I")


class Malformed(Exception):
    """Bytes on a link that are not a multipart of ours."""


def link_path(endpoint: str) -> str | None:
    """The link socket of the process at a ZeroMQ endpoint; None when it has none (tcp://,
    or a path too long for sun_path)."""
    if not endpoint.startswith("ipc://"):
        return None
    path = endpoint[6:] + SUFFIX
    if len(os.fsencode(path)) >= 108:
        return None
    return path


def encode(parts: list) -> bytes:
    """One multipart's bytes on a link."""
    n = len(parts)
    return b"".join([struct.pack(f"<I{n}I", n, *map(len, parts)), *parts])


class FrameReader:
    """Bytes read from a link -> whole multiparts, as lists of frames."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list:
        """The multiparts completed by `data`; raises Malformed on bytes that are not ours."""
        buf = self.buf + data if self.buf else data
        out = []
        at, size = 0, len(buf)
        unpack_from = struct.unpack_from
        while size - at >= 4:
            (n,) = _COUNT.unpack_from(buf, at)
            if not 0 < n <= MAX_FRAMES:
                raise Malformed(f"a multipart announcing {n} frames")
            head = 4 + 4 * n
            if size - at < head:
                break
            lens = unpack_from(f"<{n}I", buf, at + 4)
            total = sum(lens)
            if total > MAX_BYTES:
                raise Malformed(f"a multipart announcing {total} bytes")
            if size - at < head + total:
                break
            p = at + head
            parts = []
            for ln in lens:
                parts.append(buf[p:p + ln])
                p += ln
            out.append(parts)
            at = p
        self.buf = buf[at:] if at < size else b""
        return out


class Listener:
    """The receiving side: a loop's link socket, its accepted links, their reads."""

    def __init__(self, loop, path: str, on_parts, on_malformed):
        self.loop = loop  # actors.runtime.EventLoop
        self.path = path
        self.on_parts = on_parts  # called with each multipart's frames (loop thread)
        self.on_malformed = on_malformed  # called with (why, first bytes)
        self.links: dict[int, tuple[socket.socket, FrameReader]] = {}
        try:
            os.unlink(path)  # a socket file left by this process's predecessor
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(128)
        self.sock.setblocking(False)
        loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors: the sender falls back to ZeroMQ
                log.warning("link accept failed on %s: %s", self.path, e)
                return
            conn.setblocking(False)
            fd = conn.fileno()
            self.links[fd] = (conn, FrameReader())
            self.loop.add_reader(fd, self._readable, fd)

    def _readable(self, fd: int) -> None:
        conn, reader = self.links[fd]
        try:
            data = conn.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(fd)
            return
        try:
            found = reader.feed(data)
        except Malformed as e:
            self.on_malformed(str(e), data[:96])
            self._drop(fd)
            return
        for parts in found:
            self.on_parts(parts)

    def _drop(self, fd: int) -> None:
        conn, _ = self.links.pop(fd)
        self.loop.loop.remove_reader(fd)
        conn.close()

    def close(self) -> None:
        """(loop thread) Stop listening; what the links still bring is not read."""
        self.loop.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for fd in list(self.links):
            self._drop(fd)
        try:
            os.unlink(self.path)
        except OSError:
            pass


class Link:
    """The sending side: one loop's connected link to one process. What the socket does not
    take at once waits, in order, until it drains."""

    __slots__ = ("loop", "sock", "fd", "out", "writing", "broken")

    def __init__(self, loop, sock: socket.socket):
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.out: list = []  # bytes the socket did not take yet (loop thread only)
        self.writing = False  # registered for writability
        self.broken = False  # the receiver is gone

    def send(self, data: bytes) -> bool:
        """Write one multipart's bytes (or queue them behind what waits). False when the link
        is broken: the receiver died; nothing of `data` was written."""
        if self.broken:
            return False
        waiting = bool(self.out)
        try:
            send_some(self.sock, self.out, data)
        except OSError:
            self._break()
            return False
        if self.out and not waiting:
            self.writing = True
            self.loop.loop.add_writer(self.fd, self._writable)
        return True

    def _writable(self) -> None:
        try:
            drain(self.sock, self.out)
        except OSError:
            self._break()
            return
        if not self.out:
            self.loop.loop.remove_writer(self.fd)
            self.writing = False

    def _break(self) -> None:
        """The receiver is gone: what waited is lost with it, as what a dead process's
        ZeroMQ queue held is."""
        self.broken = True
        self.out = []
        self.close()

    def flush(self, timeout: float) -> None:
        """(at the process's end) Write what waits, blocking up to `timeout` seconds."""
        if not self.out or self.broken:
            return
        try:
            self.sock.settimeout(timeout)
            for chunk in self.out:
                self.sock.sendall(chunk)
        except OSError:
            pass
        self.out = []

    def close(self) -> None:
        if self.writing:
            self.loop.loop.remove_writer(self.fd)
            self.writing = False
        try:
            self.sock.close()
        except OSError:
            pass


def connect(loop, path: str) -> Link | None:
    """A link to the process listening at `path`; None when nothing listens there (yet)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)  # a full backlog answers EAGAIN (ZeroMQ then) instead of waiting
    try:
        sock.connect(path)
    except OSError as e:
        sock.close()
        if e.errno not in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN):
            log.info("no link to %s: %s", path, e)
        return None
    return Link(loop, sock)


class Links:
    """A loop's outbound links, by receiving endpoint: a Link, or None for "over ZeroMQ"."""

    def __init__(self, loop):
        self.loop = loop
        self.by_endpoint: dict[str, Link | None] = {}

    def link(self, endpoint: str) -> Link | None:
        """(loop thread) The link to send to `endpoint` by, or None: send over ZeroMQ."""
        try:
            found = self.by_endpoint[endpoint]
        except KeyError:
            path = link_path(endpoint)
            found = connect(self.loop, path) if path is not None else None
            self.by_endpoint[endpoint] = found
        if found is not None and found.broken:
            self.by_endpoint[endpoint] = found = None
        return found

    def forget(self, endpoint: str) -> None:
        """(loop thread) The process at `endpoint` was marked dead or came back: decide anew at
        the next send."""
        found = self.by_endpoint.pop(endpoint, None)
        if found is not None:
            found.close()

    def flush(self, timeout: float) -> None:
        for found in self.by_endpoint.values():
            if found is not None:
                found.flush(timeout)
