"""actors/core/channel_dispatch.py: the one table from a channel's messages to ChannelCore's
methods, read by `ChannelCore.handle` (the Channel actor's and the tests' wire's one entry)."""
from __future__ import annotations

import ast
import inspect
import textwrap

from actors import messages as m
from actors.connection import channel_process as channel_actor
from actors.core import channel_dispatch
from core_fakes import ChannelOut, consume, deliver_msg, make_channel


class _Clock(ChannelOut):
    """A channel shell whose clock counts its reads."""

    def __init__(self, now):
        super().__init__()
        self.now, self.reads = now, 0

    def now_ms(self):
        if self.now is None:
            raise AssertionError("the hot path reads no clock for commands")
        self.reads += 1
        return self.now


def test_a_delivery_reaches_the_core_with_the_clocks_time():
    core, out = make_channel("q1", out=_Clock(5000))
    consume(core, out, "q1", "c1")
    out.reads = 0
    core.handle(deliver_msg("q1", [("c1", 1, False)]))
    assert out.reads == 1 and core.now == 5000


def test_commands_do_not_read_the_clock():
    core, _ = make_channel("q1", out=_Clock(None))
    core.handle(m.Commands([]))


def test_a_message_the_core_does_not_take_is_ignored():
    core, out = make_channel("q1")
    core.handle(m.Terminate())
    core.handle(channel_actor.ConsumerTimeoutCheck(1))
    assert not out.events and core.state == "open"


def test_the_actor_names_only_what_the_table_leaves_to_it():
    """The Channel actor's on_receive picks out no message type the table already routes:
    everything but its own two goes to the core's handle."""
    source = inspect.getsource(channel_actor.Channel.on_receive)
    named = {node.attr if isinstance(node, ast.Attribute) else node.id
             for cmp in ast.walk(ast.parse(textwrap.dedent(source)))
             if isinstance(cmp, ast.Compare) and isinstance(cmp.ops[0], ast.Is)
             for node in cmp.comparators}
    assert named == {"ConsumerTimeoutCheck", "Terminate"}
    assert not {t.__name__ for t in channel_dispatch.HANDLES} & named
