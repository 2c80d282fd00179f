"""Which QueueCore method takes each message a queue receives from its channels: one table,
read by `QueueCore.handle`, the Queue actor's one entry into its core (actors/queue/queue_process.py)
and the tests' in-memory wire's alike, so the two cannot drift.

What only the actor can do (its backing queue's answers, admin operations, policies, timers,
statistics, mirrors) stays in the actor, which gives the core only what this table knows.
The management API's counts of what a queue took (publishes, acks, basic.get) are kept here,
where the message is taken, in the core's `QueueCounters`.
"""

from __future__ import annotations

from typing import Callable

from actors import messages as m
from actors.core.errors import AMQPError
from actors.core.paging import WAIT

# (`core` is a QueueCore: actors/core/queue.py imports this table, never the other way round)


def retry_gets(core: QueueCore, now: int) -> None:
    """A page came back: the basic.gets that waited for it are answered (or wait again)."""
    for msg in core.take_waiting_gets():
        _get(core, msg, now)


def _publish(core: QueueCore, msg: m.Publish, now: int) -> None:
    core.counters.publish += len(msg.items)
    core.publish(msg.sender, msg.items, msg.bodies, now)


def _settle(core: QueueCore, msg: m.Settle, now: int) -> None:
    if msg.op == m.ACK:
        core.counters.ack += len(msg.seq_ids)
    core.settle(msg.sender, msg.op, msg.seq_ids, now)


def _consume(core: QueueCore, msg: m.Consume, now: int) -> None:
    """basic.consume, answered: the queue's name, or the error that refused it."""
    try:
        core.consume(msg.sender, msg.consumer_tag, msg.no_ack, msg.exclusive, msg.prefetch,
                     msg.channel_prefetch, now, msg.arguments)
    except AMQPError as e:
        core.out.reply(msg.sender, msg.req_id, False, None, e.reply_code, e.text)
        return
    core.out.reply(msg.sender, msg.req_id, True, core.name)


def _cancel(core: QueueCore, msg: m.Cancel, now: int) -> None:
    ok = core.cancel(msg.sender, msg.consumer_tag, now)
    if msg.req_id:  # (0: the channel wants no answer)
        core.out.reply(msg.sender, msg.req_id, True, ok)


def _get(core: QueueCore, msg: m.Get, now: int) -> None:
    """basic.get: get-ok or get-empty, or, when the head is paged out, kept until its page is
    read back (`retry_gets`)."""
    got = core.get(msg.sender, msg.no_ack, now)
    if got is WAIT:
        core.wait_for_page(msg)
        return
    if got is None:
        core.counters.got_empty()
        core.out.get_reply(msg.sender, msg.req_id, None, 0, None)
        return
    item, body, count = got
    core.counters.got(item.redelivered, msg.no_ack)
    core.out.get_reply(msg.sender, msg.req_id, item, count, body)


# message type -> (core, msg, now) -> None
TABLE: dict[type, Callable] = {
    m.Publish: _publish,
    m.Settle: _settle,
    m.Sent: lambda core, msg, now: core.sent(msg.channel, msg.n, now),
    m.Consume: _consume,
    m.Cancel: _cancel,
    m.Get: _get,
    m.ChannelDown: lambda core, msg, now: core.channel_down(msg.sender, now),
    m.ChannelsDown: lambda core, msg, now: core.channels_down(msg.prefix, now),
    m.SetLimit: lambda core, msg, now: core.set_limit(msg.sender, msg.channel_prefetch, now),
    m.Grant: lambda core, msg, now: core.grant(msg.channel, msg.n, now),
}
HANDLES = frozenset(TABLE)
