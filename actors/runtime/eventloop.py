"""One asyncio event loop on a thread of its own: sockets, ZeroMQ and actors of a process.

A scheduler may run embedded in it (`Scheduler(name, loop=...)`, see scheduler.py) and the
Transport may read its ZeroMQ socket on it (`Transport.start(loop)`): then one thread does a
worker's socket I/O, message passing and actor work, as a BEAM scheduler does, and no message
waits for the GIL to pass from one thread to another on its way.
"""

from __future__ import annotations

import asyncio
import threading


class EventLoop:
    """One asyncio event loop on a thread of its own."""

    def __init__(self, name: str = "eventloop"):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def call(self, fn, *args) -> None:
        """Run fn(*args) on the loop thread (from any thread)."""
        if threading.current_thread() is self.thread:
            fn(*args)
        else:
            try:
                self.loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # the loop is closed: the process is ending
                pass

    def stop(self) -> None:
        self.call(self.loop.stop)

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread
