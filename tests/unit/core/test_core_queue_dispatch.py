"""actors/core/queue_dispatch.py: the one table from a channel's messages to QueueCore's
methods, read by `QueueCore.handle` (the Queue actor's and the tests' wire's one entry), with
the counts the management API reads and the time its port's clock says."""
from __future__ import annotations

import ast
import inspect
import textwrap

from actors import messages as m
from actors.core import queue_dispatch
from actors.core.queue import QueueCore
from actors.core.queue_settings import parse as queue_settings
from actors.core.queue_stats import QueueCounters
from actors.messages import PublishItem, StoredMessage
from actors.queue import queue_process as queue_actor
from core_fakes import QueueOut
from queue_index import IndexEntry

CH1, PUB = "w1#ch/1/1/1", "w1#ch/9/1/3"


def mk(args=None, page_bytes=0, page_size=3):
    out = QueueOut()
    q = QueueCore("/", "q", queue_settings(args), out.port(), 0, durable=True,
                  page_bytes=page_bytes, page_size=page_size)
    return q, out, q.counters


def publish(*bodies, persistent=False):
    items = [PublishItem(0, "x", "rk", b"\x00\x00", persistent, 0, -1) for _ in bodies]
    return m.Publish(PUB, items, list(bodies))


def consume(tag="A", req_id=7, exclusive=False, arguments=None):
    return m.Consume(CH1, req_id, tag, False, exclusive, 0, 0, "w1/1", arguments or {})


def test_publishes_and_acks_are_counted_where_the_core_takes_them():
    q, out, counters = mk()
    q.handle(publish(b"a", b"b", b"c"))
    assert counters.publish == 3 and q.stats()["messages"] == 3
    q.handle(consume())
    q.run(0)
    seq_ids = [d.seq_id for _, items, _ in out.of("deliver") for d in items]
    q.handle(m.Settle(CH1, m.REQUEUE, seq_ids[:1]))
    assert counters.ack == 0  # a requeue is no ack
    q.handle(m.Settle(CH1, m.ACK, seq_ids[1:]))
    assert counters.ack == 2 and q.stats()["messages_unacknowledged"] == 1


def test_a_consume_is_answered_with_the_queue_name_or_the_error_that_refused_it():
    q, out, counters = mk()
    q.handle(consume("A", req_id=1, exclusive=True))
    q.handle(consume("B", req_id=2))
    assert out.of("reply") == [
        (CH1, 1, True, "q"),
        (CH1, 2, False, None, 403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")]
    assert list(q.consumers) == [(CH1, "A")]


def test_a_consumes_arguments_reach_the_core():
    q, out, counters = mk()
    q.handle(consume(arguments={"x-priority": "high"}))
    (reply,) = out.of("reply")
    assert reply[2] is False and reply[4] == 406 and not q.consumers


def test_a_cancel_is_answered_only_when_asked():
    q, out, counters = mk()
    q.handle(consume("A", req_id=1))
    q.handle(consume("B", req_id=2))
    out.clear()
    q.handle(m.Cancel(CH1, 5, "A"))
    q.handle(m.Cancel(CH1, 0, "B"))
    q.handle(m.Cancel(CH1, 6, "nobody"))
    assert out.of("reply") == [(CH1, 5, True, True), (CH1, 6, True, False)]
    assert not q.consumers


def test_basic_get_answers_and_counts__A9():
    q, out, counters = mk()
    q.handle(m.Get(CH1, 1, False, "w1/1"))
    assert out.of("get_reply") == [(CH1, 1, None, 0, None)] and counters.get_empty == 1
    q.handle(publish(b"a", b"b"))
    q.handle(m.Get(CH1, 2, False, "w1/1"))
    q.handle(m.Get(CH1, 3, True, "w1/1"))
    (_, req_id, item, count, body), last = out.of("get_reply")[1:]
    assert (req_id, item.consumer_tag, count, body) == (2, "", 1, b"a")
    assert last[1:] == (3, last[2], 0, b"b")
    assert (counters.get, counters.get_no_ack, counters.redeliver) == (1, 1, 0)
    q.handle(m.ChannelDown(CH1))  # "a" back, redelivered
    q.handle(m.Get(CH1, 4, True, "w1/1"))
    assert out.of("get_reply")[-1][2].redelivered and counters.redeliver == 1


def test_a_get_whose_head_is_paged_out_waits_for_the_page__A9():
    q, out, counters = mk(page_bytes=10)
    q.handle(publish(b"aaaaaaaaaaa", b"b", b"c", persistent=True))
    q.handle(m.Get(CH1, 1, True, "w1/1"))
    q.handle(m.Get(CH1, 2, True, "w1/1"))
    assert [r[1] for r in out.of("get_reply")] == [1]  # the second waits: its head is paged
    assert counters.get_no_ack == 1 and counters.get_empty == 0
    q.retry_gets(0)  # no page yet: it waits again
    assert len(out.of("get_reply")) == 1
    after = q.paging.lanes[0].page_after
    paged = [x for (msgs,) in out.of("persist") for x in msgs if x.seq_id > after]
    q.paged_in([StoredMessage(IndexEntry(x.seq_id, x.msg_id, x.exchange, x.routing_key,
                                         x.props_raw, x.body, len(x.body), 0, 0, False),
                              x.body, True) for x in paged], 0, 0, 0, 0)
    q.retry_gets(0)
    assert out.of("get_reply")[-1][1:] == (2, out.of("get_reply")[-1][2], 1, b"b")
    assert counters.get_no_ack == 2


def test_channel_messages_reach_their_core_methods():
    q, out, counters = mk()
    q.handle(m.SetLimit(CH1, 2))
    assert q.channels[CH1].limit == 2 and CH1 in q.limited
    q.handle(m.Grant(CH1, 3))
    assert out.of("release") == [(CH1, 3)]  # (nothing ready: the tokens go back at once)
    q.handle(consume())
    q.handle(m.ChannelsDown("w1#"))
    assert not q.consumers


def test_a_message_the_core_does_not_take_is_ignored():
    q, out, _ = mk()
    q.handle(m.QueueOp("", 1, "info", {}))
    q.handle(queue_actor.Tick())
    q.handle(m.Stored(10))
    assert not out.calls and q.store_pending == 0


def test_handle_reads_the_ports_clock_once_per_message():
    q, out, _ = mk({"x-expires": 100})
    out.now = 50
    q.handle(consume())
    assert q.last_used == 50
    out.now = 70
    q.handle(m.Cancel(CH1, 0, "A"))
    assert q.last_used == 70


def test_counters_are_the_ones_the_core_was_given():
    counters = QueueCounters()
    q = QueueCore("/", "q", queue_settings({}), QueueOut().port(), 0, counters=counters)
    q.handle(publish(b"a"))
    assert counters.publish == 1 and q.counters is counters


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
