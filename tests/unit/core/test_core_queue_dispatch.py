"""actors/core/queue_dispatch.py: the one table from a channel's messages to QueueCore's
methods, with the counts the management API reads, used by the Queue actor and the tests' wire
alike."""
from __future__ import annotations

import ast
import inspect
import textwrap

from actors import messages as m
from actors.core import queue_dispatch
from actors.core.queue import QueueCore
from actors.core.queue_stats import QueueCounters
from actors.messages import PublishItem, StoredMessage
from actors.queue import queue_process as queue_actor
from core_fakes import QueueOut
from queue_index import IndexEntry

CH1, PUB = "w1#ch/1/1/1", "w1#ch/9/1/3"


def mk(args=None, page_bytes=0, page_size=3):
    out = QueueOut()
    q = QueueCore("/", "q", args or {}, out, 0, durable=True, page_bytes=page_bytes,
                  page_size=page_size)
    return q, out, QueueCounters()


def publish(*bodies, persistent=False):
    items = [PublishItem(0, "x", "rk", b"\x00\x00", persistent, 0, -1) for _ in bodies]
    return m.Publish(PUB, items, list(bodies))


def consume(tag="A", req_id=7, exclusive=False, arguments=None):
    return m.Consume(CH1, req_id, tag, False, exclusive, 0, 0, "w1/1", arguments or {})


def test_publishes_and_acks_are_counted_where_the_core_takes_them():
    q, out, counters = mk()
    assert queue_dispatch.handle(q, publish(b"a", b"b", b"c"), 0, counters)
    assert counters.publish == 3 and q.stats()["messages"] == 3
    queue_dispatch.handle(q, consume(), 0, counters)
    q.run(0)
    seq_ids = [d.seq_id for _, items, _ in out.of("deliver") for d in items]
    queue_dispatch.handle(q, m.Settle(CH1, m.REQUEUE, seq_ids[:1]), 0, counters)
    assert counters.ack == 0  # a requeue is no ack
    queue_dispatch.handle(q, m.Settle(CH1, m.ACK, seq_ids[1:]), 0, counters)
    assert counters.ack == 2 and q.stats()["messages_unacknowledged"] == 1


def test_a_consume_is_answered_with_the_queue_name_or_the_error_that_refused_it():
    q, out, counters = mk()
    queue_dispatch.handle(q, consume("A", req_id=1, exclusive=True), 0, counters)
    queue_dispatch.handle(q, consume("B", req_id=2), 0, counters)
    assert out.of("reply") == [
        (CH1, 1, True, "q"),
        (CH1, 2, False, None, 403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")]
    assert list(q.consumers) == [(CH1, "A")]


def test_a_consumes_arguments_reach_the_core():
    q, out, counters = mk()
    queue_dispatch.handle(q, consume(arguments={"x-priority": "high"}), 0, counters)
    (reply,) = out.of("reply")
    assert reply[2] is False and reply[4] == 406 and not q.consumers


def test_a_cancel_is_answered_only_when_asked():
    q, out, counters = mk()
    queue_dispatch.handle(q, consume("A", req_id=1), 0, counters)
    queue_dispatch.handle(q, consume("B", req_id=2), 0, counters)
    out.clear()
    queue_dispatch.handle(q, m.Cancel(CH1, 5, "A"), 0, counters)
    queue_dispatch.handle(q, m.Cancel(CH1, 0, "B"), 0, counters)
    queue_dispatch.handle(q, m.Cancel(CH1, 6, "nobody"), 0, counters)
    assert out.of("reply") == [(CH1, 5, True, True), (CH1, 6, True, False)]
    assert not q.consumers


def test_basic_get_answers_and_counts__A9():
    q, out, counters = mk()
    queue_dispatch.handle(q, m.Get(CH1, 1, False, "w1/1"), 0, counters)
    assert out.of("get_reply") == [(CH1, 1, None, 0, None)] and counters.get_empty == 1
    queue_dispatch.handle(q, publish(b"a", b"b"), 0, counters)
    queue_dispatch.handle(q, m.Get(CH1, 2, False, "w1/1"), 0, counters)
    queue_dispatch.handle(q, m.Get(CH1, 3, True, "w1/1"), 0, counters)
    (_, req_id, item, count, body), last = out.of("get_reply")[1:]
    assert (req_id, item.consumer_tag, count, body) == (2, "", 1, b"a")
    assert last[1:] == (3, last[2], 0, b"b")
    assert (counters.get, counters.get_no_ack, counters.redeliver) == (1, 1, 0)
    queue_dispatch.handle(q, m.ChannelDown(CH1), 0, counters)  # "a" back, redelivered
    queue_dispatch.handle(q, m.Get(CH1, 4, True, "w1/1"), 0, counters)
    assert out.of("get_reply")[-1][2].redelivered and counters.redeliver == 1


def test_a_get_whose_head_is_paged_out_waits_for_the_page__A9():
    q, out, counters = mk(page_bytes=10)
    queue_dispatch.handle(q, publish(b"aaaaaaaaaaa", b"b", b"c", persistent=True), 0, counters)
    queue_dispatch.handle(q, m.Get(CH1, 1, True, "w1/1"), 0, counters)
    queue_dispatch.handle(q, m.Get(CH1, 2, True, "w1/1"), 0, counters)
    assert [r[1] for r in out.of("get_reply")] == [1]  # the second waits: its head is paged
    assert counters.get_no_ack == 1 and counters.get_empty == 0
    queue_dispatch.retry_gets(q, 0, counters)  # no page yet: it waits again
    assert len(out.of("get_reply")) == 1
    after = q.paging.lanes[0].page_after
    paged = [x for (msgs,) in out.of("persist") for x in msgs if x.seq_id > after]
    q.paged_in([StoredMessage(IndexEntry(x.seq_id, x.msg_id, x.exchange, x.routing_key,
                                         x.props_raw, x.body, len(x.body), 0, 0, False),
                              x.body, True) for x in paged], 0, 0, 0, 0)
    queue_dispatch.retry_gets(q, 0, counters)
    assert out.of("get_reply")[-1][1:] == (2, out.of("get_reply")[-1][2], 1, b"b")
    assert counters.get_no_ack == 2


def test_channel_messages_reach_their_core_methods():
    q, out, counters = mk()
    queue_dispatch.handle(q, m.SetLimit(CH1, 2), 0, counters)
    assert q.channels[CH1].limit == 2 and CH1 in q.limited
    queue_dispatch.handle(q, m.Grant(CH1, 3), 0, counters)
    assert out.of("release") == [(CH1, 3)]  # (nothing ready: the tokens go back at once)
    queue_dispatch.handle(q, consume(), 0, counters)
    queue_dispatch.handle(q, m.ChannelsDown("w1#"), 0, counters)
    assert not q.consumers


def test_a_message_the_core_does_not_take_is_refused():
    q, _, counters = mk()
    assert not queue_dispatch.handle(q, m.QueueOp("", 1, "info", {}), 0, counters)
    assert not queue_dispatch.handle(q, queue_actor.Tick(), 0, counters)
    assert not queue_dispatch.handle(q, m.Stored(10), 0, counters)


def test_the_actor_names_only_what_the_table_leaves_to_it():
    """The Queue actor's own table and its on_receive check no message type the shared table
    already routes."""
    assert not set(queue_actor._OWN) & queue_dispatch.HANDLES
    source = inspect.getsource(queue_actor.Queue.on_receive)
    named = {node.attr if isinstance(node, ast.Attribute) else node.id
             for call in ast.walk(ast.parse(textwrap.dedent(source)))
             if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "isinstance"
             for node in [call.args[1]]}
    assert not {t.__name__ for t in queue_dispatch.HANDLES} & named
