"""The light-actor runtime: a pykka `Actor` is a mailbox, its state and a handler, not a thread.

The BEAM runs millions of Erlang processes on one scheduler thread per core: a run queue of
processes that have messages, each run for a bounded number of reductions, then the next. This
module does the same for pykka actors, through pykka's own extension points:

- `_create_actor_inbox` -> `Mailbox`: a deque; the first message put into an idle mailbox puts its
  actor on its scheduler's run queue (once: `scheduled` guards it);
- `_start_actor_loop` -> the actor goes on the run queue; its first slice runs `on_start`;
- `_create_future` -> `LightFuture`: a pykka ThreadingFuture whose `get()`, when called on a
  scheduler thread, keeps running that scheduler's other actors until the answer is in (so an
  actor that asks another actor of its own scheduler never deadlocks the thread both need).

A scheduler (`Scheduler`) is one or more threads sharing one run queue, or it runs embedded in a
process's event loop (`attach(name, loop)`, actors/runtime/eventloop.py): then the loop's thread
runs the actors between its socket and ZeroMQ polls, up to `DRAIN_SLICES` turns at a time, and
one thread carries a connection worker's whole hot path. Each actor class names
the scheduler it runs on (`LightActor.scheduler_name`: "conn", "queue", "store", ...) so that a
slow blocking call (an fsync in a backing queue) stalls only the actors of its own scheduler.
Each actor runs for at most `REDUCTIONS` messages per turn, then goes to the back of the run
queue if it still has messages: a flooded actor cannot starve the others (the BEAM's fairness).

One actor never runs on two threads at once: it is on the run queue at most once, and only the
thread that took it off runs it. Messages from one sender arrive in the order sent (one deque).

Light actors are not in pykka's `ActorRegistry` (its list is O(n) per unregister, 50,000 queues
would make every delete quadratic); `live_actors()` and `stop_all()` here stand in for it.

Supervision: `monitor(watcher_ref)` on an actor makes it tell the watcher `ActorDown(urn, reason)`
when it stops: reason "normal" after `stop()`, else the exception that ended it (an exception in
`on_start` or `on_receive` stops the actor as pykka does, after its `on_failure`; the other
actors of its scheduler go on). Erlang's `erlang:monitor/2` and the 'DOWN' message are the model.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from typing import Any

from pykka import Actor, ActorDeadError, ThreadingFuture, Timeout
from pykka import messages as pykka_messages

log = logging.getLogger("leveret.runtime")

REDUCTIONS = 64  # messages an actor may handle per turn before the next actor runs
DRAIN_SLICES = 256  # embedded scheduler: actor turns between two polls of the event loop

_local = threading.local()  # .scheduler: the Scheduler whose thread this is
_schedulers: dict[str, "Scheduler"] = {}
_schedulers_lock = threading.Lock()
_sizes: dict[str, int] = {}  # scheduler name -> thread count (configure())
_live: dict[int, "LightActor"] = {}  # id(actor) -> actor, every started light actor not yet ended


class ActorDown:
    """Runtime -> watcher: a monitored actor ended. reason is "normal" after stop(), else the
    exception (its repr) that ended it."""

    __slots__ = ("urn", "reason")

    def __init__(self, urn: str, reason: str):
        self.urn, self.reason = urn, reason

    def __repr__(self) -> str:
        return f"ActorDown({self.urn!r}, {self.reason!r})"


class Scheduler:
    """A run queue of actors with messages and the thread(s) that run them."""

    def __init__(self, name: str, threads: int = 1, reductions: int = REDUCTIONS, loop=None):
        self.name = name
        self.reductions = reductions  # messages per actor per turn
        self._runq: deque = deque()  # actors with messages (each at most once)
        # the lock is taken directly on the hot path (threading.Condition's methods are
        # Python code); the condition is for threads that wait for actors to run
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._waiting = 0  # threads in _take's wait (notify only when there are some)
        self._stopping = False
        self.loop = loop  # EventLoop this scheduler is embedded in, or None (threads of its own)
        self._drain_pending = False  # embedded: a _drain is on the loop's ready queue
        if loop is not None:
            self.threads = []
            loop.call(self._bind)
            return
        self.threads = [threading.Thread(target=self._loop, name=f"sched-{name}-{i}",
                                         daemon=True) for i in range(threads)]
        for t in self.threads:
            t.start()

    def enqueue(self, actor: "LightActor") -> None:
        with self._lock:
            self._runq.append(actor)
            if self._waiting:
                self._cv.notify()
            if self.loop is None or self._drain_pending:
                return
            self._drain_pending = True
        if self.loop.on_loop_thread():
            self.loop.soon(self._drain)
        else:
            self.loop.call(self._drain)

    def _bind(self) -> None:
        _local.scheduler = self

    def _drain(self) -> None:
        """Embedded: run actors until none has messages or DRAIN_SLICES turns are done, then
        let the loop poll its sockets (and come back at once when actors are still waiting)."""
        for _ in range(DRAIN_SLICES):
            with self._lock:
                if not self._runq:
                    self._drain_pending = False
                    return
                actor = self._runq.popleft()
            actor._run_slice(self.reductions)
        self.loop.next_turn(self._drain)

    def wake(self) -> None:
        """A future someone on this scheduler waits for was set."""
        with self._cv:
            self._cv.notify_all()

    def _take(self, timeout: float | None, done=None):
        """The next runnable actor, or None after `timeout` (or once `done()` is true)."""
        with self._lock:
            while not self._runq:
                if self._stopping or (done is not None and done()):
                    return None
                self._waiting += 1
                try:
                    woken = self._cv.wait(timeout)
                finally:
                    self._waiting -= 1
                if not woken and timeout is not None:
                    return None
            return self._runq.popleft()

    def _loop(self) -> None:
        _local.scheduler = self
        while True:
            actor = self._take(None)
            if actor is None:
                return
            actor._run_slice(self.reductions)

    def help_until(self, future: "LightFuture", timeout: float | None) -> None:
        """Run this scheduler's other actors until `future` is set (or `timeout` passes): an
        actor that waits for an answer does not hold the thread the answerer may need."""
        deadline = None if timeout is None else time.monotonic() + timeout
        future._waker = self
        while future._result is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            actor = self._take(left if left is not None else 1.0,
                               lambda: future._result is not None)
            if actor is not None:
                actor._run_slice(self.reductions)

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()


def configure(sizes: dict[str, int]) -> None:
    """Threads per scheduler name, before the first actor of that name starts (default 1)."""
    _sizes.update(sizes)


def attach(name: str, loop) -> Scheduler:
    """Run scheduler `name` embedded in `loop` (an EventLoop), before its first actor starts."""
    with _schedulers_lock:
        if name in _schedulers:
            raise RuntimeError(f"scheduler {name!r} already runs")
        s = _schedulers[name] = Scheduler(name, loop=loop)
    return s


def scheduler(name: str) -> Scheduler:
    s = _schedulers.get(name)
    if s is None:
        with _schedulers_lock:
            s = _schedulers.get(name)
            if s is None:
                s = _schedulers[name] = Scheduler(name, _sizes.get(name, 1))
    return s


def current_scheduler() -> Scheduler | None:
    return getattr(_local, "scheduler", None)


def thread_count() -> int:
    return sum(len(s.threads) for s in list(_schedulers.values()))


def monitor(ref, watcher_ref) -> None:
    """`erlang:monitor(process, Ref)`: watcher_ref is told ActorDown when ref's actor ends."""
    ref.actor_inbox._actor.monitor(watcher_ref)


def live_actors() -> list["LightActor"]:
    return list(_live.values())


def stop_all(timeout: float = 5) -> None:
    """Stop every light actor of the process, waiting up to `timeout` for each (from a thread
    that is not a scheduler's)."""
    futures = []
    actors = live_actors()
    for actor in actors:
        try:
            futures.append(actor.actor_ref.stop(block=False))
        except ActorDeadError:
            pass
    for f in futures:
        try:
            f.get(timeout=timeout)
        except (Timeout, ActorDeadError):
            pass
    # an actor stopping already (its stop future fails at once with ActorDeadError) may still
    # be in its on_stop, e.g. a backing queue writing its last flush: wait for it to end
    deadline = time.monotonic() + timeout
    for actor in actors:
        actor.actor_ended.wait(max(0.0, deadline - time.monotonic()))


def shutdown() -> None:
    with _schedulers_lock:
        for s in _schedulers.values():
            s.stop()
        _schedulers.clear()


class LightFuture(ThreadingFuture):
    """A ThreadingFuture that, waited for on a scheduler thread, runs that scheduler's other
    actors meanwhile; set from anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self._waker: Scheduler | None = None  # the scheduler helping while it waits

    def get(self, *, timeout: float | None = None) -> Any:
        sched = current_scheduler()
        if sched is not None and self._result is None and self._get_hook is None:
            sched.help_until(self, timeout)
            if self._result is None:
                raise Timeout(f"{timeout} seconds")
        return super().get(timeout=timeout)

    def set(self, value: Any | None = None) -> None:
        super().set(value)
        if self._waker is not None:
            self._waker.wake()

    def set_exception(self, exc_info=None) -> None:
        super().set_exception(exc_info if exc_info is not None else sys.exc_info())
        if self._waker is not None:
            self._waker.wake()


class Mailbox:
    """An actor's inbox: put from any thread, get/empty only by the thread running the actor."""

    __slots__ = ("_q", "_lock", "_actor", "scheduled", "dead")

    def __init__(self, actor: "LightActor"):
        self._q: deque = deque()
        self._lock = threading.Lock()
        self._actor = actor
        self.scheduled = True  # on a run queue or running; True until the actor is started
        self.dead = False  # the actor ended: asks are answered ActorDeadError at once

    @property
    def actor(self) -> "LightActor":
        """The actor this is the inbox of (`ref.actor_inbox.actor`: for reading an actor's
        plain attributes from another thread, e.g. a statistics sample)."""
        return self._actor

    def put(self, envelope) -> None:
        with self._lock:
            if self.dead:
                _refuse(self._actor, envelope)
                return
            self._q.append(envelope)
            if self.scheduled:
                return
            self.scheduled = True
        self._actor._scheduler.enqueue(self._actor)

    def __len__(self) -> int:
        """Messages waiting (any thread may ask: one atomic read of the deque)."""
        return len(self._q)

    def get(self):
        return self._q.popleft()

    def empty(self) -> bool:
        return not self._q

    def qsize(self) -> int:
        return len(self._q)

    def _after_slice(self) -> bool:
        """The running thread is done with the actor: True when it must run again."""
        with self._lock:
            if self._q:
                return True
            self.scheduled = False
            return False

    def _close(self) -> tuple[list, list]:
        """The actor ended: (messages it never handled, its monitors)."""
        with self._lock:
            self.dead = True
            rest, self._q = list(self._q), deque()
            return rest, self._actor._monitors


def _refuse(actor, envelope) -> None:
    if envelope.reply_to is None:
        return
    if isinstance(envelope.message, pykka_messages._ActorStop):  # noqa: SLF001
        envelope.reply_to.set(None)
    else:
        envelope.reply_to.set_exception(exc_info=(
            ActorDeadError, ActorDeadError(f"{actor} stopped before handling the message"), None))


class LightActor(Actor):
    """A pykka actor run by a shared scheduler. Subclasses set `scheduler_name`."""

    scheduler_name = "default"

    @classmethod
    def start(cls, *args: Any, **kwargs: Any):
        obj = cls(*args, **kwargs)
        assert obj.actor_ref is not None, "LightActor.__init__() was not called"
        obj._start_actor_loop()
        return obj.actor_ref

    def _create_actor_inbox(self) -> Mailbox:  # pykka calls it on the instance
        self._scheduler = scheduler(self.scheduler_name)
        self._started = False
        self.actor_ended = threading.Event()  # set when the actor is gone (on_stop returned)
        self._monitors: list = []
        return Mailbox(self)

    @staticmethod
    def _create_future() -> LightFuture:
        return LightFuture()

    def _start_actor_loop(self) -> None:
        _live[id(self)] = self
        self._scheduler.enqueue(self)  # the first slice runs on_start

    def monitor(self, watcher_ref) -> None:
        """Tell watcher_ref ActorDown(urn, reason) when this actor ends (from any thread); at
        once ("noproc", as Erlang says) when it has already ended."""
        inbox = self.actor_inbox
        with inbox._lock:
            if not inbox.dead:
                self._monitors.append(watcher_ref)
                return
        watcher_ref.tell(ActorDown(self.actor_urn, "noproc"))

    # --- one turn on a scheduler thread --------------------------------------------------------
    def _run_slice(self, budget: int) -> None:
        inbox: Mailbox = self.actor_inbox
        reason = None
        if not self._started:
            self._started = True
            try:
                self.on_start()
            except Exception as e:  # noqa: BLE001
                reason = f"on_start: {e!r}"
                self._handle_failure(*sys.exc_info())
                self._failed(*sys.exc_info())
        stopped = self.actor_stopped
        while budget and not stopped.is_set():
            try:
                envelope = inbox._q.popleft()
            except IndexError:
                break
            budget -= 1
            try:
                response = self._handle_receive(envelope.message)
                if envelope.reply_to is not None:
                    envelope.reply_to.set(response)
            except Exception as e:  # noqa: BLE001
                if envelope.reply_to is not None:
                    log.info("exception returned from %s to caller", self, exc_info=True)
                    envelope.reply_to.set_exception()
                else:
                    reason = repr(e)
                    self._handle_failure(*sys.exc_info())
                    self._failed(*sys.exc_info())
            except BaseException as e:  # noqa: BLE001 - SystemExit inside an actor: this one ends
                reason = repr(e)
                self._stop()
        if stopped.is_set():
            self._end(reason or "normal")
            return
        if inbox._after_slice():
            self._scheduler.enqueue(self)

    def _failed(self, *exc_info) -> None:
        """on_failure, after on_start or a told message raised (unlike pykka, on_start too: an
        actor that half started has halves to stop)."""
        try:
            self.on_failure(*exc_info)
        except Exception:  # noqa: BLE001
            log.exception("on_failure of %s failed", self)

    def _end(self, reason: str) -> None:
        rest, monitors = self.actor_inbox._close()
        for envelope in rest:
            _refuse(self, envelope)
        _live.pop(id(self), None)
        self.actor_ended.set()
        for watcher in monitors:
            try:
                watcher.tell(ActorDown(self.actor_urn, reason))
            except ActorDeadError:
                pass

    def _handle_failure(self, exception_type, exception_value, traceback) -> None:
        log.error("unhandled exception in %s", self,
                  exc_info=(exception_type, exception_value, traceback))
        self.actor_stopped.set()

    def _stop(self) -> None:
        """Stop at once, without handling the rest of the mailbox (pykka's, minus the registry)."""
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:  # noqa: BLE001
            self._handle_failure(*sys.exc_info())

