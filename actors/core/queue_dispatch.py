"""Which QueueCore method takes each message a queue receives from its channels: one table,
read by the Queue actor (actors/queue/queue_process.py) and by the tests' in-memory wire, so the two
cannot drift.

What only the actor can do (its backing queue's answers, admin operations, policies, timers,
statistics, mirrors) stays in the actor; `handle` answers False for a message it does not know.
The management API's counts of what a queue took (publishes, acks, basic.get) are kept here,
where the message is taken, in the `QueueCounters` the caller passes.
"""

from __future__ import annotations

from typing import Callable

from actors import messages as m
from actors.core.errors import AMQPError
from actors.core.queue import WAIT, QueueCore
from actors.core.queue_stats import QueueCounters


def handle(core: QueueCore, msg, now: int, counters: QueueCounters) -> bool:
    """Give `msg` to the core method that takes it (`now`: monotonic ms); False when the core
    has none for it."""
    handler = _TABLE.get(type(msg))
    if handler is None:
        return False
    handler(core, msg, now, counters)
    return True


def retry_gets(core: QueueCore, now: int, counters: QueueCounters) -> None:
    """A page came back: the basic.gets that waited for it are answered (or wait again)."""
    for msg in core.take_waiting_gets():
        _get(core, msg, now, counters)


def _publish(core: QueueCore, msg: m.Publish, now: int, counters: QueueCounters) -> None:
    counters.publish += len(msg.items)
    core.publish(msg.sender, msg.items, msg.bodies, now)


def _settle(core: QueueCore, msg: m.Settle, now: int, counters: QueueCounters) -> None:
    if msg.op == m.ACK:
        counters.ack += len(msg.seq_ids)
    core.settle(msg.sender, msg.op, msg.seq_ids, now)


def _consume(core: QueueCore, msg: m.Consume, now: int, counters: QueueCounters) -> None:
    """basic.consume, answered: the queue's name, or the error that refused it."""
    try:
        core.consume(msg.sender, msg.consumer_tag, msg.no_ack, msg.exclusive, msg.prefetch,
                     msg.channel_prefetch, now, msg.arguments)
    except AMQPError as e:
        core.out.reply(msg.sender, msg.req_id, False, None, e.reply_code, e.text)
        return
    core.out.reply(msg.sender, msg.req_id, True, core.name)


def _cancel(core: QueueCore, msg: m.Cancel, now: int, counters: QueueCounters) -> None:
    ok = core.cancel(msg.sender, msg.consumer_tag, now)
    if msg.req_id:  # (0: the channel wants no answer)
        core.out.reply(msg.sender, msg.req_id, True, ok)


def _get(core: QueueCore, msg: m.Get, now: int, counters: QueueCounters) -> None:
    """basic.get: get-ok or get-empty, or, when the head is paged out, kept until its page is
    read back (`retry_gets`)."""
    got = core.get(msg.sender, msg.no_ack, now)
    if got is WAIT:
        core.wait_for_page(msg)
        return
    if got is None:
        counters.got_empty()
        core.out.get_reply(msg.sender, msg.req_id, None, 0, None)
        return
    item, body, count = got
    counters.got(item.redelivered, msg.no_ack)
    core.out.get_reply(msg.sender, msg.req_id, item, count, body)


# message type -> (core, msg, now, counters) -> None
_TABLE: dict[type, Callable] = {
    m.Publish: _publish,
    m.Settle: _settle,
    m.Sent: lambda core, msg, now, counters: core.sent(msg.channel, msg.n, now),
    m.Consume: _consume,
    m.Cancel: _cancel,
    m.Get: _get,
    m.ChannelDown: lambda core, msg, now, counters: core.channel_down(msg.sender, now),
    m.ChannelsDown: lambda core, msg, now, counters: core.channels_down(msg.prefix, now),
    m.SetLimit: lambda core, msg, now, counters: core.set_limit(msg.sender,
                                                                msg.channel_prefetch, now),
    m.Grant: lambda core, msg, now, counters: core.grant(msg.channel, msg.n, now),
}
HANDLES = frozenset(_TABLE)
