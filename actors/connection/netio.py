"""Socket I/O of every connection of a connection worker, on the worker's event loop.

rabbit_reader reads its socket through the BEAM's port, which polls every socket of the node
with epoll; here the process's event loop (actors/runtime/eventloop.py, asyncio on epoll) does
that: it accepts, reads whatever sockets are readable and tells each connection's Reader actor
the bytes; it never decodes. In a connection worker the same thread also runs the actors (the
"conn" scheduler is embedded in the loop) and reads ZeroMQ, as a BEAM scheduler polls I/O
between processes: the hot path never waits for another thread to hand over the GIL.

- `Listener`: accepts on the worker's listening socket. Running out of file descriptors (EMFILE,
  ENFILE), buffers or memory never ends it: it logs, stops accepting for a back-off (pending
  clients wait in the kernel's backlog) and tries again.
- `Conn`: one accepted socket, non-blocking. Reading pauses while the Reader is behind (at most
  `READ_AHEAD` chunks told and not yet handled: bounded buffering between the socket and the
  actors) or while a channel is out of credit (`block(True)`, credit_flow's blocked state): the
  kernel buffer then fills and TCP pushes back on the client. Writes go straight from the
  Writer's thread when the socket takes them; what it does not take waits here, sent when the
  socket is writable, and the Writer hears `Drained` when it is all out.
- Closing happens on the loop thread: the socket leaves the selector before its descriptor is
  closed (a descriptor number reused by the next accept must not meet a stale registration).
  `on_closed` hears of it once (the worker tells the node's acceptor, which counts connections).
- TLS (AMQPS): `start_tls` runs the server side of the handshake on the loop, non-blocking, with
  an `ssl.SSLObject` over two memory BIOs, so the socket is read and written exactly as a plain
  one (same back-off, same write queue); once the handshake is done the Reader is started
  (`on_secured`) and from then on `Data` carries the decrypted bytes and `write` encrypts: the
  Reader and Writer do not know whether their socket speaks TLS. A handshake that fails or is
  not done within the handshake timeout closes the socket.
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import threading

from actors import messages as m
from actors.connection.tls import info as tls_info
from actors.runtime.eventloop import EventLoop, drain, send_some

log = logging.getLogger("leveret.netio")

READ_SIZE = 131072  # bytes per recv
READ_AHEAD = 2  # chunks told to the Reader and not yet handled before reading pauses
CLOSE_DRAIN_S = 1.0  # how long a closing socket may take to send what is left
ACCEPT_BACKOFF_S = (0.05, 2.0)  # first and longest pause after accept ran out of resources
RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Listener:
    """Accepts connections and hands each to `on_accept(sock, peer)` (on the loop thread)."""

    def __init__(self, io: EventLoop, sock: socket.socket, on_accept):
        self.io = io
        self.sock = sock
        self.on_accept = on_accept
        self.backoff = ACCEPT_BACKOFF_S[0]  # next pause after a resource error
        self.closed = False
        sock.setblocking(False)
        io.call(self._arm)

    def _arm(self) -> None:
        if not self.closed:
            self.io.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(64):  # a burst, then let the other sockets be read
            try:
                sock, peer = self.sock.accept()
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno in RESOURCE_ERRNOS:
                    log.warning("accept: %s; not accepting for %.2f s (connections wait in "
                                "the backlog)", e.strerror, self.backoff)
                    self.io.loop.remove_reader(self.sock.fileno())
                    self.io.loop.call_later(self.backoff, self._arm)
                    self.backoff = min(self.backoff * 2, ACCEPT_BACKOFF_S[1])
                    return
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # the client gave up before we took it
                if self.closed:
                    return
                log.exception("accept failed")
                continue
            self.backoff = ACCEPT_BACKOFF_S[0]
            try:
                self.on_accept(sock, peer)
            except Exception:  # noqa: BLE001 - one connection's failure is not the listener's
                log.exception("could not start a connection for %s:%s", *peer[:2])
                sock.close()

    def close(self) -> None:
        def _close():
            self.closed = True
            try:
                self.io.loop.remove_reader(self.sock.fileno())
            except (ValueError, OSError):
                pass
            self.sock.close()
        self.io.call(_close)


class Conn:
    """One client socket: read for its Reader, written by its Writer."""

    def __init__(self, io: EventLoop, sock: socket.socket, on_closed=None):
        self.io = io
        self.sock = sock
        self.fd = sock.fileno()
        self.on_closed = on_closed  # called once, on the loop thread, when the socket is closed
        self.reader = None  # Reader actor ref (told Data / SocketClosed)
        self.writer = None  # Writer actor ref (told Drained)
        self.lock = threading.Lock()  # guards the fields below
        self.told = 0  # chunks told to the Reader and not yet handled
        self.blocked = False  # a channel is out of credit: do not read
        self.reading = False  # registered for readability (loop thread only)
        self.out: list = []  # bytes the socket did not take yet
        self.writing = False  # registered for writability (loop thread only)
        self.closing = False  # close() was called
        self.lingering = False  # after close-ok: read and discarded until the client closes
        self.linger_timer = None  # ends the lingering if the client never closes
        self.closed = False
        self.tls: ssl.SSLObject | None = None  # AMQPS: the TLS state (None: plain TCP)
        self.tls_in: ssl.MemoryBIO | None = None  # bytes read from the socket, for self.tls
        self.tls_out: ssl.MemoryBIO | None = None  # bytes self.tls wants sent
        self.on_secured = None  # callback(TlsInfo) while the TLS handshake runs, then None
        self.on_failed = None  # callback(why) if the TLS handshake fails or times out
        self.tls_up = False  # the TLS handshake is done
        self.tls_timer = None  # closes the socket if the handshake is not done in time
        self.early: list = []  # plaintext read after the handshake, before the Reader came
        # socket statistics (inet:getstat's): bytes and reads (loop thread), bytes and sends
        # (under self.lock); TLS records counted as the socket carries them
        self.recv_oct = 0
        self.recv_cnt = 0
        self.send_oct = 0
        self.send_cnt = 0
        sock.setblocking(False)

    def start(self, reader, writer) -> None:
        with self.lock:
            self.reader, self.writer = reader, writer
            early, self.early = self.early, []
            gone = self.closing
        for data in early:
            reader.tell(m.Data(data))
        if gone:  # the client went away between the TLS handshake and now
            _tell(reader, m.SocketClosed("closed by client"))
        self.io.call(self._update)

    # --- TLS (loop thread) ---------------------------------------------------------------------
    def start_tls(self, context: ssl.SSLContext, on_secured, timeout: float,
                  on_failed=None) -> None:
        """Run the server side of a TLS handshake; `on_secured(info)` once it is done (loop
        thread), then start() as for plain TCP. A failed handshake, or one not done within
        `timeout` seconds, closes the socket (`on_failed(why)` hears why first)."""
        self.tls_in, self.tls_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.tls_in, self.tls_out, server_side=True)
        self.on_secured = on_secured
        self.on_failed = on_failed

        def begin():
            self.tls_timer = self.io.loop.call_later(max(0.0, timeout), self._tls_expired)
            self._update()
        self.io.call(begin)

    def _tls_expired(self) -> None:
        self.tls_timer = None
        if self.on_secured is not None and not self.closed:
            self._tls_failed("handshake_timeout")

    def _tls_failed(self, why: str) -> None:
        self.on_secured = None
        if self.on_failed is not None:
            self.on_failed(why)
        with self.lock:
            self.closing = True
        self._close_soon()  # after the alert, if any, is out

    def _decrypt(self, raw: bytes) -> None:
        """Bytes from the socket through TLS; the plaintext, if any, goes to the Reader."""
        chunks = []
        secured = failed = None
        eof = False
        with self.lock:
            self.tls_in.write(raw)
            try:
                if self.on_secured is not None:
                    self.tls.do_handshake()
                    secured = self.on_secured
                while True:
                    chunk = self.tls.read(READ_SIZE)
                    if not chunk:
                        eof = True
                        break
                    chunks.append(chunk)
            except ssl.SSLWantReadError:
                pass  # more bytes from the peer are needed
            except ssl.SSLZeroReturnError:
                eof = True  # close_notify
            except ssl.SSLError as e:
                failed = e.reason or str(e)
            bye = self.tls_out.read()  # handshake messages, session tickets, alerts
            try:
                queued = bool(bye) and not self._send_locked(bye)
            except OSError as e:
                queued, failed = False, failed or f"send failed: {e}"
        if queued:
            self._want_write()
        if failed is not None and secured is None and self.on_secured is not None:
            self._tls_failed(failed)
            return
        if secured is not None:
            self.on_secured = None
            self.tls_up = True
            if self.tls_timer is not None:
                self.tls_timer.cancel()
                self.tls_timer = None
            secured(tls_info(self.tls))
        if chunks:
            self._deliver(b"".join(chunks))
        if failed is not None:
            self._lost(f"TLS error: {failed}")
        elif eof:
            self._lost("closed by client")

    # --- reading (loop thread) -----------------------------------------------------------------
    def _update(self) -> None:
        """Register or unregister for reading as the state asks (loop thread)."""
        if self.closed:
            return
        with self.lock:
            want = not self.blocked and self.told < READ_AHEAD and not self.closing
        if want and not self.reading:
            self.io.add_reader(self.fd, self._readable)
            self.reading = True
        elif not want and self.reading:
            self.io.loop.remove_reader(self.fd)
            self.reading = False

    def _readable(self) -> None:
        try:
            data = self.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(str(e))
            return
        if not data:
            self._lost("closed by client")
            return
        self.recv_oct += len(data)
        self.recv_cnt += 1
        if self.tls is not None:
            self._decrypt(data)
            return
        self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        with self.lock:
            self.told += 1
            pause = self.told >= READ_AHEAD
            reader = self.reader
            if reader is None:  # TLS: the Reader is starting; start() tells it these
                self.early.append(data)
        if reader is not None:
            reader.tell(m.Data(data))
        if pause:
            self._update()

    def _lost(self, why: str) -> None:
        if self.on_secured is not None:  # in the TLS handshake: no Reader to tell yet
            self._tls_failed(why)
            return
        if self.reading:
            self.io.loop.remove_reader(self.fd)
            self.reading = False
        with self.lock:
            self.closing = True
            reader = self.reader
        # no Reader yet (TLS, just secured): start() will tell it SocketClosed
        _tell(reader, m.SocketClosed(why))

    # --- called by the Reader (its scheduler thread) -------------------------------------------
    def handled(self) -> None:
        """The Reader has handled one Data chunk."""
        with self.lock:
            self.told -= 1
            resume = self.told == READ_AHEAD - 1 and not self.blocked
        if resume:
            self.io.call(self._update)

    def block(self, on: bool) -> None:
        with self.lock:
            if self.blocked == on:
                return
            self.blocked = on
        self.io.call(self._update)

    # --- writing (the Writer's thread, then the loop's) ----------------------------------------
    def write(self, data: bytes) -> bool:
        """Send data; True when the socket took all of it, False when the rest waits for the
        socket to drain (the Writer is told Drained then). Raises OSError when the socket is
        broken."""
        with self.lock:
            if self.closed:
                raise OSError(errno.EPIPE, "connection closed")
            if self.tls is not None:
                data = self._encrypt(data)  # under the lock: records go out in order
            if self.out:
                self.out.append(data)
                return False
            if self._send_locked(data):
                return True
        self.io.call(self._want_write)
        return False

    def _send_locked(self, data) -> bool:
        """(self.lock held) Send what the socket takes; the rest waits in self.out. True when
        it took all of it."""
        n = send_some(self.sock, self.out, data)
        if n:
            self.send_oct += n
            self.send_cnt += 1
        return not self.out

    def _encrypt(self, data: bytes) -> bytes:
        """(self.lock held) Plaintext -> TLS records (SSLObject.write takes a record at a
        time in partial-write mode)."""
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += self.tls.write(view[done:])
        return self.tls_out.read()

    def _want_write(self) -> None:
        if not self.writing and not self.closed:
            self.io.loop.add_writer(self.fd, self._writable)
            self.writing = True

    def _writable(self) -> None:
        with self.lock:
            try:
                sent, sends = drain(self.sock, self.out)
            except OSError as e:
                self.out = []
                failed = str(e)
            else:
                self.send_oct += sent
                self.send_cnt += sends
                if self.out:
                    return
                failed = None
        self.io.loop.remove_writer(self.fd)
        self.writing = False
        if failed is not None:
            self._lost(f"send failed: {failed}")
        elif self.closing and not self.lingering:
            self._close_now()
        elif not self.closing:
            _tell(self.writer, m.Drained())

    # --- closing --------------------------------------------------------------------------------
    def close(self, linger: float = 0.0) -> None:
        """Shut the socket once what was written is out (at most CLOSE_DRAIN_S). With `linger`
        (seconds; after connection.close-ok) the socket first stays open, what comes in read
        and dropped, until the client closes it or `linger` has passed: rabbit_reader's
        `closed` state. A client whose other threads still write when close-ok comes then meets
        no reset (which could also destroy the close-ok it has not read yet)."""
        with self.lock:
            self.closing = True
        self.io.call(self._close_soon, linger)

    def _close_soon(self, linger: float = 0.0) -> None:
        if self.closed:
            return
        if self.reading:
            self.io.loop.remove_reader(self.fd)
            self.reading = False
        if linger > 0 and not self.lingering:
            self.lingering = True
            self.io.add_reader(self.fd, self._discard)
            self.linger_timer = self.io.loop.call_later(linger, self._end_linger)
            return
        if self.tls_up:
            self._close_notify()
        if self.writing:
            self.io.loop.call_later(CLOSE_DRAIN_S, self._close_now)
        else:
            self._close_now()

    def _discard(self) -> None:
        """Lingering: drop what the client still sends; its end of the socket closing (or
        failing) ends the lingering."""
        try:
            data = self.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data or self.tls_up and self._said_goodbye(data):
            self._end_linger()

    def _said_goodbye(self, raw: bytes) -> bool:
        """Lingering with TLS: whether the client's close_notify (or a broken record) came in
        `raw`, what else it holds decrypted and dropped. Its close_notify ends the lingering
        as its FIN would: a client (asyncio's SSL transport, aio-pika) sends it and waits for
        ours, up to 30 s, before it closes the socket."""
        with self.lock:
            self.tls_in.write(raw)
            try:
                while self.tls.read(READ_SIZE):
                    pass
                return True  # an empty read: the TLS stream ended
            except ssl.SSLWantReadError:
                return False  # a record not complete yet
            except ssl.SSLError:
                return True  # close_notify (SSLZeroReturnError) or a broken stream

    def _end_linger(self) -> None:
        if self.closed or not self.lingering:
            return
        self.lingering = False
        self.io.loop.remove_reader(self.fd)
        if self.linger_timer is not None:
            self.linger_timer.cancel()
            self.linger_timer = None
        self._close_soon()

    def _close_notify(self) -> None:
        """TLS: say goodbye (close_notify) before the socket closes, as Erlang's ssl does."""
        with self.lock:
            try:
                self.tls.unwrap()
            except (ssl.SSLError, ValueError):
                pass  # SSLWantReadError: sent, the peer's reply is not waited for
            bye = self.tls_out.read()
            try:
                queued = bool(bye) and not self._send_locked(bye)
            except OSError:
                queued = False  # the peer is gone: nothing to say goodbye to
        if queued:
            self._want_write()

    def _close_now(self) -> None:
        if self.closed:
            return
        if self.writing:
            self.io.loop.remove_writer(self.fd)
            self.writing = False
        if self.tls_timer is not None:
            self.tls_timer.cancel()
            self.tls_timer = None
        if self.lingering:
            self.lingering = False
            self.io.loop.remove_reader(self.fd)
            if self.linger_timer is not None:
                self.linger_timer.cancel()
                self.linger_timer = None
        with self.lock:
            self.closed = True
            self.out = []
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.on_closed is not None:
            on_closed, self.on_closed = self.on_closed, None
            try:
                on_closed()
            except Exception:  # noqa: BLE001 - the socket is closed whatever the callback does
                log.exception("on_closed failed")


def _tell(ref, msg) -> None:
    if ref is None:
        return
    try:
        ref.tell(msg)
    except Exception:  # noqa: BLE001 - ActorDeadError: the connection is already torn down
        pass
