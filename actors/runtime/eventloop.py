"""One asyncio event loop on a thread of its own: sockets, ZeroMQ and actors of a process.

A scheduler may run embedded in it (`Scheduler(name, loop=...)`, see scheduler.py) and the
Transport may read its ZeroMQ socket on it (`Transport.start(loop)`): then one thread does a
worker's socket I/O, message passing and actor work, as a BEAM scheduler does, and no message
waits for the GIL to pass from one thread to another on its way.

A turn: a socket's reader callback (`add_reader`) and the work it gave rise to (`soon`: the
actors it woke, the ZeroMQ batches they filled) run one after the other before the loop polls
again. Scheduled with call_soon instead, each would cost a loop iteration of its own and a
zero-timeout epoll_wait; at ordinary load (a few messages per wake-up) those iterations were a
large part of a worker's CPU per message.
"""

from __future__ import annotations

import asyncio
import logging
import threading

log = logging.getLogger(__name__)


class EventLoop:
    """One asyncio event loop on a thread of its own."""

    def __init__(self, name: str = "eventloop"):
        self.loop = asyncio.new_event_loop()
        self._after: list | None = None  # inside a turn: work deferred to its end, in order
        ready = threading.Event()
        self.ident = None  # the loop thread's id (threading.get_ident: a C call, asked per send)
        self.thread = threading.Thread(target=self._run, args=(ready,), name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        self.ident = threading.get_ident()
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def call(self, fn, *args) -> None:
        """Run fn(*args) on the loop thread (from any thread)."""
        if threading.get_ident() == self.ident:
            fn(*args)
        else:
            try:
                self.loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # the loop is closed: the process is ending
                pass

    def add_reader(self, fd, fn, *args) -> None:
        """(loop thread) fn(*args) when fd is readable, as a turn (see the module's text)."""
        self.loop.add_reader(fd, self._turn, fn, args)

    def soon(self, fn) -> None:
        """(loop thread) fn() at the end of the running turn, after what was deferred before it;
        outside a turn (a timer, a call from another thread) as a turn of its own."""
        after = self._after
        if after is not None:
            after.append(fn)
        else:
            self.loop.call_soon(self._turn, fn, ())

    def next_turn(self, fn) -> None:
        """(loop thread) fn() as a turn of its own after the loop has polled its sockets: for
        work that yields to I/O (a drained batch that left more to do)."""
        self.loop.call_soon(self._turn, fn, ())

    def _turn(self, fn, args) -> None:
        self._after = after = []
        try:
            fn(*args)
        finally:
            # deferred work may defer more; each piece runs even when an earlier one failed,
            # or a scheduler would wait forever for a drain that was lost
            i = 0
            while i < len(after):
                try:
                    after[i]()
                except Exception as e:  # noqa: BLE001 - logged as the loop logs a callback's
                    self.loop.call_exception_handler({
                        "message": f"deferred {after[i]!r} failed", "exception": e})
                i += 1
            self._after = None

    def stop(self) -> None:
        self.call(self.loop.stop)

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self.ident


def send_some(sock, out: list, data) -> int:
    """Send what a non-blocking socket takes of `data` now, behind what already waits in `out`
    (its unsent chunks, in order); the rest goes to `out`. -> bytes sent. Raises OSError when
    the socket is broken."""
    if out:
        out.append(data)
        return 0
    try:
        n = sock.send(data)
    except (BlockingIOError, InterruptedError):
        n = 0
    if n < len(data):
        out.append(memoryview(data)[n:])
    return n


def drain(sock, out: list) -> tuple[int, int]:
    """(the socket is writable) Send what waits in `out` until it is empty or the socket takes
    no more -> (bytes sent, sends); `out` is empty when all went. Raises OSError when the
    socket is broken."""
    sent = sends = 0
    try:
        while out:
            chunk = out[0]
            n = sock.send(chunk)
            sent += n
            sends += 1
            if n < len(chunk):
                out[0] = memoryview(chunk)[n:]
                break
            out.pop(0)
    except (BlockingIOError, InterruptedError):
        pass
    return sent, sends
