"""Which ChannelCore method takes each message a channel receives: one table, read by the Channel
actor (actors/connection/channel_process.py) and by the tests' in-memory wire, so the two cannot drift.

What only the actor can do (its consumer-timeout timer, stopping itself on Terminate) stays in
the actor; `handle` answers False for a message it does not know.
"""

from __future__ import annotations

from typing import Callable

from actors import messages as m
from actors.core.channel import ChannelCore


def handle(core: ChannelCore, msg, clock: Callable[[], int]) -> bool:
    """Give `msg` to the core method that takes it (`clock`: now in ms, read only by those
    that need it); False when the core has none for it."""
    handler = _TABLE.get(type(msg))
    if handler is None:
        return False
    handler(core, msg, clock)
    return True


# message type -> (core, msg, clock) -> None
_TABLE: dict[type, Callable] = {
    m.Commands: lambda core, msg, clock: core.handle_commands(msg.commands),
    m.Deliver: lambda core, msg, clock: core.on_deliver(msg, clock()),
    m.Confirm: lambda core, msg, clock: core.on_confirm(msg),
    m.RpcReply: lambda core, msg, clock: core.on_reply(msg, clock()),
    m.GetReply: lambda core, msg, clock: core.on_reply(msg, clock()),
    m.Credit: lambda core, msg, clock: core.on_credit(msg),
    m.Demand: lambda core, msg, clock: core.on_demand(msg),
    m.Release: lambda core, msg, clock: core.on_release(msg),
    m.ConsumerGone: lambda core, msg, clock: core.on_consumer_gone(msg),
    m.QueuesGone: lambda core, msg, clock: core.queues_gone(msg.names),
    m.WorkerDown: lambda core, msg, clock: core.worker_down(msg.endpoint),
    m.QueueDown: lambda core, msg, clock: core.queue_down(msg.address),
    m.NodePaused: lambda core, msg, clock: core.node_paused(),
    m.DirectReply: lambda core, msg, clock: core.on_direct_reply(msg),
    m.ReplyCheck: lambda core, msg, clock: core.on_reply_check(msg),
}
HANDLES = frozenset(_TABLE)
