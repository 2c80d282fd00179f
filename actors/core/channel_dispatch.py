"""Which ChannelCore method takes each message a channel receives: one table, read by
`ChannelCore.handle`, the Channel actor's one entry into its core
(actors/connection/channel_process.py) and the tests' in-memory wire's alike, so the two cannot drift.

What only the actor can do (its consumer-timeout timer, stopping itself on Terminate) stays in
the actor, which gives the core only what this table knows. The time a handler needs is the
core's port's `now_ms`, read only by those that need it.
"""

from __future__ import annotations

from typing import Callable

from actors import messages as m

# message type -> (core, msg) -> None
TABLE: dict[type, Callable] = {
    m.Commands: lambda core, msg: core.handle_commands(msg.commands),
    m.Deliver: lambda core, msg: core.on_deliver(msg, core.out.now_ms()),
    m.Confirm: lambda core, msg: core.on_confirm(msg),
    m.RpcReply: lambda core, msg: core.on_reply(msg, core.out.now_ms()),
    m.GetReply: lambda core, msg: core.on_reply(msg, core.out.now_ms()),
    m.Credit: lambda core, msg: core.on_credit(msg),
    m.Demand: lambda core, msg: core.on_demand(msg),
    m.Release: lambda core, msg: core.on_release(msg),
    m.ConsumerGone: lambda core, msg: core.on_consumer_gone(msg),
    m.QueuesGone: lambda core, msg: core.queues_gone(msg.names),
    m.WorkerDown: lambda core, msg: core.worker_down(msg.endpoint),
    m.QueueDown: lambda core, msg: core.queue_down(msg.address),
    m.NodePaused: lambda core, msg: core.node_paused(),
    m.DirectReply: lambda core, msg: core.on_direct_reply(msg),
    m.ReplyCheck: lambda core, msg: core.on_reply_check(msg),
}
HANDLES = frozenset(TABLE)
