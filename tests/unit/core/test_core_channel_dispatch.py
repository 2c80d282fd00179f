"""actors/core/channel_dispatch.py: the one table from a channel's messages to ChannelCore's
methods, read by the Channel actor and the tests' wire alike."""
from __future__ import annotations

import ast
import inspect
import textwrap

from actors import messages as m
from actors.connection import channel_process as channel_actor
from actors.core import channel_dispatch
from core_fakes import consume, deliver_msg, make_channel


def test_a_delivery_reaches_the_core_with_the_clocks_time():
    core, out = make_channel("q1")
    consume(core, out, "q1", "c1")
    times = []
    assert channel_dispatch.handle(core, deliver_msg("q1", [("c1", 1, False)]),
                                   lambda: times.append(1) or 5000)
    assert times == [1] and core.now == 5000


def test_commands_do_not_read_the_clock():
    core, _ = make_channel("q1")

    def clock():
        raise AssertionError("the hot path reads no clock for commands")
    assert channel_dispatch.handle(core, m.Commands([]), clock)


def test_a_message_the_core_does_not_take_is_refused():
    core, _ = make_channel("q1")
    assert not channel_dispatch.handle(core, m.Terminate(), lambda: 0)
    assert not channel_dispatch.handle(core, channel_actor.ConsumerTimeoutCheck(1), lambda: 0)


def test_the_actor_names_only_what_the_table_leaves_to_it():
    """The Channel actor's on_receive checks no message type the table already routes."""
    source = inspect.getsource(channel_actor.Channel.on_receive)
    named = {node.attr if isinstance(node, ast.Attribute) else node.id
             for call in ast.walk(ast.parse(textwrap.dedent(source)))
             if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "isinstance"
             for node in [call.args[1]]}
    assert named == {"ConsumerTimeoutCheck", "Terminate"}
    assert not {t.__name__ for t in channel_dispatch.HANDLES} & named
