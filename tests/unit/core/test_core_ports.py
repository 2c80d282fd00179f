"""One shape for the channel, queue and connection cores: each acts only through a frozen port
of named callables its actor builds with `XPort.of` (never the actor itself), takes its
messages through `handle(msg)`, and is never written into by its actor; a queue's arguments
are parsed once (actors/core/queue_settings.py)."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import time

import pytest

from actors import messages as m
from actors.connection import channel_process as channel_actor
from actors.connection import reader as reader_actor
from actors.core.channel import ChannelCore, ChannelPort, ConnInfo
from actors.core.connection import ConnectionPort
from actors.core.queue import QueuePort
from actors.core.queue_settings import parse as queue_settings
from actors.messages import PublishItem
from actors.queue import queue_process as queue_actor
from actors.queue.mirror import Masters
from core_fakes import ChannelOut, QueueOut, make_queue, make_replica

PUB = "w1#ch/9/1/3"


@pytest.mark.parametrize("port", [ConnectionPort, ChannelPort, QueuePort])
def test_a_port_is_a_frozen_slotted_record_of_callables(port):
    assert dataclasses.is_dataclass(port) and port.__dataclass_params__.frozen
    assert "__slots__" in vars(port)
    assert all("Callable" in str(f.type) for f in dataclasses.fields(port)
               if f.name not in ("node", "events"))  # (an address; the event log)


def test_the_actors_have_every_callable_their_cores_ports_take():
    """QueuePort.of(queue, masters) and ChannelPort.of(channel, send) find each field by name
    on the actor class (or on Masters), so a port built for a real actor is complete."""
    for f in _actors_fields(QueuePort):
        if f.name.startswith("mirror_"):
            assert callable(getattr(Masters, f.name[len("mirror_"):])), f.name
        else:
            assert callable(getattr(queue_actor.Queue, f.name)), f.name
    for f in _actors_fields(ChannelPort):
        if f.name != "send":
            assert callable(getattr(channel_actor.Channel, f.name)), f.name
    for f in dataclasses.fields(ConnectionPort):
        if f.name != "node":
            assert callable(getattr(reader_actor.Reader, f.name)), f.name


def _actors_fields(port) -> list:
    """The fields a port takes from its actor (the others, with defaults, are the process's:
    the event log, ids, the clock)."""
    return [f for f in dataclasses.fields(port) if f.default is dataclasses.MISSING]


def test_the_event_log_ids_and_clock_reach_the_core_through_its_port():
    log, ids = object(), (lambda n: b"\x01" * n)
    core = ChannelCore(1, "ch", ConnInfo("o", "guest", "/", 131072, {}, "node"),
                       make_replica(),
                       ChannelOut().port(events=log, random_bytes=ids, clock=time.monotonic))
    assert core.events is log and core.random_bytes is ids and core.clock is time.monotonic
    queue, _ = make_queue(durable=True, events=log, random_bytes=ids)
    assert queue.events is log and queue.random_bytes is ids


@pytest.mark.parametrize("shell", [QueueOut(), ChannelOut()])
def test_a_port_holds_callables_not_the_actor_and_cannot_be_changed(shell):
    port = shell.port()
    values = [getattr(port, f.name) for f in _actors_fields(port)]
    assert all(callable(v) for v in values) and not any(v is shell for v in values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(port, dataclasses.fields(port)[0].name, None)


def _writes_to_core(cls) -> list:
    """Assignments in the class's source whose target is an attribute of `core` or
    `self.core` (an actor writing its core's fields)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute):
                owner = t.value
                if isinstance(owner, ast.Name) and owner.id == "core" or \
                        isinstance(owner, ast.Attribute) and owner.attr == "core":
                    found.append(ast.unparse(t))
    return found


@pytest.mark.parametrize("cls", [queue_actor.Queue, channel_actor.Channel, reader_actor.Reader])
def test_an_actor_never_writes_its_cores_fields(cls):
    assert _writes_to_core(cls) == []


def test_the_check_finds_a_write_to_a_core_field():
    class Shell:
        def on_receive(self, msg):
            self.core.hold = True
            core = self.core
            core.last_used += 1
    assert _writes_to_core(Shell) == ["self.core.hold", "core.last_used"]


# --- a mirrored master's held confirms: the core decides, the port only sends ---------------
def _publish(q, *seqs, now=0):
    q.publish(PUB, [PublishItem(s, "x", "rk", b"\x00\x00", False, 0, -1) for s in seqs],
              [b"m%d" % s for s in seqs], now)


def test_a_confirm_waits_for_the_mirrors_batch_then_goes__C5():
    q, out = make_queue()
    out.mirrors.wait = (3, 2)  # its batch is 3, the mirrors have up to 2
    _publish(q, 1, 2)
    assert out.of("confirm") == [] and q.counters.confirmed_enqueue == 0
    out.mirrors.wait = (4, 2)
    _publish(q, 3)  # a later confirm never overtakes a held one
    assert out.of("confirm") == []
    q.mirrors_acked(3)
    assert out.of("confirm") == [(PUB, [1, 2], True)]
    q.mirrors_acked(4)
    assert out.of("confirm") == [(PUB, [1, 2], True), (PUB, [3], True)]
    assert q.counters.confirmed_enqueue == 3


def test_no_mirror_to_wait_for_confirms_at_once__C5():
    q, out = make_queue()
    _publish(q, 1)
    assert out.of("confirm") == [(PUB, [1], True)] and q.counters.confirmed_enqueue == 1


def test_every_message_that_enters_goes_to_the_mirrors_with_the_handled_time():
    q, out = make_queue()
    out.now = 77
    q.handle(m.Publish(PUB, [PublishItem(0, "x", "rk", b"\x00\x00", False, 0, -1)] * 2,
                       [b"a", b"b"]))
    assert out.mirrors.enqueued_ids == [1, 2]


def test_only_stored_messages_are_forgotten_by_the_backing_queue():
    q, out = make_queue(durable=True)
    q.publish(PUB, [PublishItem(0, "x", "rk", b"\x00\x00", True, 0, -1),
                    PublishItem(0, "x", "rk", b"\x00\x00", False, 0, -1)], [b"p", b"t"], 0)
    q.consume("w1#ch/1/1/1", "c", True, False, 0, 0, 0)
    q.run(0)
    assert [[x.body for x in msgs] for (msgs,) in out.left()] == [[b"p", b"t"]]
    assert [[x.body for x in msgs] for (msgs,) in out.of("forget")] == [[b"p"]]


# --- arguments parsed once ------------------------------------------------------------------
def test_settings_take_the_argument_before_the_policy_and_the_smaller_limit():
    s = queue_settings({"x-max-length": 5, "x-confirm-on": b"ack", "x-max-priority": 300,
                        "x-delivery-limit": 4},
                       {"max-length": 3, "message-ttl": 10, "confirm-on": "ack-lite",
                        "delivery-limit": 6, "overflow": "reject-publish"})
    assert (s.max_length, s.ttl, s.confirm_on, s.delivery_limit, s.overflow) == \
        (3, 10, "ack", 4, "reject-publish")
    assert s.max_priority == 255 and s.queue_type == "classic" and not s.single_active


def test_settings_of_a_quorum_queue_have_its_default_delivery_limit__S6():
    assert queue_settings({"x-queue-type": "quorum"}).delivery_limit == 20
    assert queue_settings({"x-queue-type": "quorum"}, {"delivery-limit": -1}).delivery_limit \
        is None
    assert queue_settings({}).delivery_limit is None
    assert queue_settings({}, {"confirm-on": "ack"}).confirm_on == "ack"


def test_a_new_policy_applies_every_setting_at_once():
    q, out = make_queue({"x-confirm-on": "enqueue"})
    q.apply_settings(queue_settings({}, {"confirm-on": "ack", "delivery-limit": 2,
                                         "max-length": 1}), 0)
    assert (q.confirms.mode, q.delivery_limit, q.max_length) == ("ack", 2, 1)


def test_the_queue_actor_parses_its_arguments_in_one_place():
    """Only queue_settings.parse reads the x-arguments a QueueCore takes: neither the actor
    nor the core reads them from a dict again."""
    for module in (queue_actor, __import__("actors.core.queue", fromlist=["x"])):
        source = inspect.getsource(module)
        for key in ("x-confirm-on", "x-delivery-limit", "x-message-ttl", "x-max-length"):
            assert f'"{key}"' not in source, (module.__name__, key)
