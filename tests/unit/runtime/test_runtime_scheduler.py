"""The light-actor runtime (actors/runtime): many pykka actors on one scheduler thread.

Each test uses a scheduler name of its own, so that its actors share one thread and nothing else.
"""

from __future__ import annotations

import threading
import time

import pykka
import pytest

from actors import runtime
from actors.runtime import ActorDown, LightActor


def make(name: str, threads: int = 1):
    """A LightActor subclass on scheduler `name`."""
    runtime.configure({name: threads})

    class Recorder(LightActor):
        scheduler_name = name

        def __init__(self, log=None, tag=None):
            super().__init__()
            self.log = log if log is not None else []
            self.tag = tag
            self.started = False

        def on_start(self):
            self.started = True
            self.log.append((self.tag, "start"))

        def on_receive(self, msg):
            if msg == "boom":
                raise ValueError("boom")
            if msg == "thread":
                return threading.current_thread().name
            if isinstance(msg, tuple) and msg[0] == "ask":
                return msg[1].ask(msg[2], timeout=5)  # an ask from inside an actor
            if isinstance(msg, tuple) and msg[0] == "sleep":
                time.sleep(msg[1])
            self.log.append((self.tag, msg))
            return msg

    return Recorder


def test_messages_from_one_sender_arrive_in_order_after_on_start():
    A = make("order")
    log = []
    ref = A.start(log, "a")
    for i in range(5000):
        ref.tell(i)
    assert ref.ask("end", timeout=5) == "end"
    assert log[0] == ("a", "start")
    assert [x for _, x in log[1:-1]] == list(range(5000))
    ref.stop()


def test_a_mailbox_says_how_many_messages_wait():
    """len(actor_inbox): the backlog the metadata actor reports as
    statistics_db_event_queue."""
    A = make("backlog")
    ref = A.start()
    ref.tell(("sleep", 0.3))
    for i in range(5):
        ref.tell(i)
    assert len(ref.actor_inbox) >= 4  # (the sleep is running; what follows waits)
    assert ref.ask("end", timeout=5) == "end"
    assert len(ref.actor_inbox) == 0
    ref.stop()


def test_a_flooded_actor_does_not_starve_the_others_on_its_scheduler():
    A = make("fair")
    log = []
    busy, other = A.start(log, "busy"), A.start(log, "other")
    busy.ask("warm", timeout=5)
    other.ask("warm", timeout=5)
    del log[:]
    busy.tell(("sleep", 0.05))  # hold the thread while both mailboxes fill
    for i in range(3000):
        busy.tell(i)
    other.tell("hello")
    busy.ask("done", timeout=10)
    pos = log.index(("other", "hello"))
    # the other actor ran after at most one turn of the busy one, not after its 3000 messages
    assert pos <= runtime.scheduler("fair").reductions + 1, pos
    busy.stop()
    other.stop()


def test_many_actors_share_the_scheduler_threads():
    A = make("many")
    before = threading.active_count()
    refs = [A.start(None, i) for i in range(5000)]
    for r in refs:
        r.tell("x")
    names = {r.ask("thread", timeout=10) for r in refs[::250]}
    assert names == {"sched-many-0"}
    assert threading.active_count() - before <= 1
    for r in refs:
        r.stop(block=False)


def test_a_crashing_actor_is_isolated_and_reported_to_its_monitor():
    A = make("crash")
    watcher_log = []
    watcher = A.start(watcher_log, "watcher")
    victim, bystander = A.start(None, "victim"), A.start(None, "bystander")
    runtime.monitor(victim, watcher)
    victim.tell("boom")
    deadline = time.monotonic() + 5
    while not any(isinstance(x, ActorDown) for _, x in watcher_log) and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    downs = [x for _, x in watcher_log if isinstance(x, ActorDown)]
    assert len(downs) == 1 and "boom" in downs[0].reason
    assert not victim.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        victim.ask("late", timeout=1)
    assert bystander.ask("still here", timeout=5) == "still here"
    bystander.stop()
    watcher.stop()


def test_on_failure_runs_when_on_start_raises_and_when_a_told_message_does():
    """An actor that half started has halves to stop (a queue's backing queue): its
    on_failure runs for a failed on_start as for a told message that raised."""
    name = "failing-start"
    runtime.configure({name: 1})
    failures = []

    class Failing(LightActor):
        scheduler_name = name

        def __init__(self, at):
            super().__init__()
            self.at = at

        def on_start(self):
            if self.at == "start":
                raise ValueError("start")

        def on_receive(self, msg):
            raise ValueError("receive")

        def on_failure(self, exc_type, exc_value, tb):
            failures.append(str(exc_value))

    starting, receiving = Failing.start("start"), Failing.start("receive")
    receiving.tell("boom")
    deadline = time.monotonic() + 5
    while len(failures) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(failures) == ["receive", "start"]
    assert not starting.is_alive() and not receiving.is_alive()


def test_a_normal_stop_is_reported_as_normal():
    A = make("stopnorm")
    log = []
    watcher, child = A.start(log, "w"), A.start(None, "c")
    runtime.monitor(child, watcher)
    child.stop()
    watcher.ask("sync", timeout=5)
    assert [x.reason for _, x in log if isinstance(x, ActorDown)] == ["normal"]
    watcher.stop()


def test_an_actor_asking_another_of_its_own_single_thread_scheduler_does_not_deadlock():
    A = make("reentrant")
    a, b = A.start(None, "a"), A.start(None, "b")
    assert a.ask(("ask", b, "pong"), timeout=5) == "pong"
    a.stop()
    b.stop()


def test_an_exception_in_an_ask_goes_back_to_the_caller_and_the_actor_lives():
    A = make("askexc")
    a = A.start(None, "a")
    with pytest.raises(ValueError):
        a.ask("boom", timeout=5)
    assert a.ask("alive", timeout=5) == "alive"
    a.stop()


def test_on_start_runs_before_messages_told_during_construction():
    name = "early"
    runtime.configure({name: 1})
    log = []

    class Early(LightActor):
        scheduler_name = name

        def __init__(self):
            super().__init__()
            self.actor_ref.tell("told in __init__")

        def on_start(self):
            log.append("start")

        def on_receive(self, msg):
            log.append(msg)

    ref = Early.start()
    ref.ask("sync", timeout=5)
    assert log[:2] == ["start", "told in __init__"]
    ref.stop()


def test_stop_all_ends_every_light_actor():
    A = make("stopall")
    refs = [A.start(None, i) for i in range(50)]
    runtime.stop_all(timeout=5)
    assert not any(r.is_alive() for r in refs)


def test_an_embedded_scheduler_runs_actors_on_its_event_loop_between_io_callbacks():
    loop = runtime.EventLoop("test-loop")
    runtime.attach("embedded", loop)
    io_done = threading.Event()

    class Spinner(LightActor):
        scheduler_name = "embedded"

        def __init__(self, log):
            super().__init__()
            self.log = log

        def on_receive(self, msg):
            if msg == "thread":
                return threading.current_thread().name
            self.log.append(msg)
            if not io_done.is_set():
                self.actor_ref.tell(msg + 1)  # busy for as long as the I/O callback waits

    log = []
    busy = Spinner.start(log)
    assert busy.ask("thread", timeout=5) == "test-loop"
    busy.tell(0)
    deadline = time.monotonic() + 5
    while len(log) < 10 and time.monotonic() < deadline:  # spinning: it tells itself the next
        time.sleep(0.001)
    seen_by_callback = []

    def io_callback():  # an I/O callback while the actor is busy: it must get its turn
        seen_by_callback.append(len(log))
        io_done.set()

    loop.call(io_callback)
    assert io_done.wait(5), "the loop's callbacks waited for the busy actor"
    # the actor ran before the callback and stops after it, having handled its messages in
    # order: an ask queues behind the last message it told itself
    busy.ask("thread", timeout=5)
    n = len(log)
    busy.ask("thread", timeout=5)
    assert seen_by_callback[0] >= 10 and len(log) == n and log == list(range(n))
    busy.stop()
    assert runtime.scheduler("embedded").threads == []
