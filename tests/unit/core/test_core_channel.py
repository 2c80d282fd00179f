"""actors/core/channel.py (ChannelCore) without IO: whole commands in (built with protocol/),
frames out (decoded with protocol.frames.FrameDecoder) and actors/messages.py messages to
queues and the node, recorded by the fakes in core_fakes.py. The last tests join the channel to
real QueueCores (core_fakes.Wire) for the channel-wide prefetch token protocol."""

import random

import pytest

from actors import messages as m
from core_fakes import (CH, NODE, Wire, cmd, consume, deliver_msg, make_channel, make_replica,
                        publish, qaddr)
from protocol import methods as am
from protocol.frames import Command

Q1, Q2 = qaddr("q1"), qaddr("q2")


def ch(*queues, **kw):
    core, out = make_channel(*(queues or ("q1", "q2")), **kw)
    return core, out


def send(core, *methods_or_cmds):
    core.handle_commands([x if isinstance(x, Command) else cmd(x) for x in methods_or_cmds])


def channel_close(out):
    closes = [x for x in out.methods() if isinstance(x, am.ChannelClose)]
    assert len(closes) == 1, out.methods()
    c = closes[0]
    return c.reply_code, c.reply_text, c.class_id, c.method_id


def settles(out):
    return [(addr, msg.op, msg.seq_ids) for addr, msg in out.sends()
            if isinstance(msg, m.Settle)]


def delivered_tags(out):
    return [(x.delivery_tag, x.consumer_tag, x.redelivered) for x in out.methods()
            if isinstance(x, am.BasicDeliver)]


def acks(out):
    return [(type(x).__name__, x.delivery_tag, x.multiple) for x in out.methods()
            if isinstance(x, (am.BasicAck, am.BasicNack))]


def with_deliveries(n_q1=3, n_q2=0, no_ack=False):
    """A channel with consumer A on q1 and B on q2 and deliveries; tags 1.. follow q1 then q2.
    msg ids: q1 -> 101.., q2 -> 201.."""
    core, out = ch()
    consume(core, out, "q1", "A", no_ack=no_ack)
    consume(core, out, "q2", "B", no_ack=no_ack)
    if n_q1:
        core.on_deliver(deliver_msg("q1", [("A", 101 + i, False) for i in range(n_q1)]))
    if n_q2:
        core.on_deliver(deliver_msg("q2", [("B", 201 + i, False) for i in range(n_q2)]))
    out.clear()
    return core, out


# --- deliveries and tags --------------------------------------------------------------------
def test_delivery_tags_start_at_1_and_are_shared_with_get_ok__A1():
    core, out = ch()
    consume(core, out, "q1", "A")
    assert out.methods() == [am.BasicConsumeOk(consumer_tag="A")]
    out.clear()
    core.on_deliver(m.Deliver(Q1, "q1", [m.Delivery("A", 11, False, "ex", "rk1", b"\x00\x00"),
                                         m.Delivery("A", 12, True, "ex", "rk2", b"\x00\x00")],
                              [b"one", b"two"]))
    assert out.events[0][2] == [(Q1, 2)]  # writer credit for the queue's delivery window
    send(core, am.BasicGet(queue="q1"))
    get = out.sent(m.Get)[-1]
    assert (get.sender, get.no_ack, get.owner) == (CH, False, "w1/1")
    core.on_reply(m.GetReply(get.req_id, Q1,
                             m.Delivery("", 13, False, "ex", "rk3", b"\x00\x00"), 5, [b"three"]))
    core.on_deliver(deliver_msg("q1", [("A", 14, False)]))
    frames = [c for c in out.frames() if isinstance(c, Command)]
    assert [(type(c.method).__name__, c.body) for c in frames] == [
        ("BasicDeliver", b"one"), ("BasicDeliver", b"two"), ("BasicGetOk", b"three"),
        ("BasicDeliver", b"b14")]
    assert frames[0].method == am.BasicDeliver(consumer_tag="A", delivery_tag=1,
                                               redelivered=False, exchange="ex",
                                               routing_key="rk1")
    assert frames[1].method.redelivered is True
    assert frames[2].method == am.BasicGetOk(delivery_tag=3, redelivered=False, exchange="ex",
                                             routing_key="rk3", message_count=5)
    assert frames[3].method.delivery_tag == 4
    assert list(core.unacked) == [1, 2, 3, 4]
    assert core.unacked[3] == (Q1, 13, "", "", 0, None, 0)


def test_delivery_tags_are_64_bit__A1():
    core, out = with_deliveries(0)
    core.next_tag = 2 ** 63 + 5
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]))
    assert delivered_tags(out) == [(2 ** 63 + 5, "A", False)]
    send(core, am.BasicAck(delivery_tag=2 ** 63 + 5))
    assert settles(out) == [(Q1, m.ACK, [101])]


def test_get_empty__A9():
    core, out = ch()
    send(core, am.BasicGet(queue="q1", no_ack=True))
    get = out.sent(m.Get)[-1]
    assert get.no_ack is True
    core.on_reply(m.GetReply(get.req_id, Q1, None, 0, []))
    assert out.methods() == [am.BasicGetEmpty()]
    assert core.next_tag == 1


def test_get_no_ack_is_not_unacked__A6():
    core, out = ch()
    send(core, am.BasicGet(queue="q1", no_ack=True))
    get = out.sent(m.Get)[-1]
    core.on_reply(m.GetReply(get.req_id, Q1, m.Delivery("", 13, False, "", "q1", b"\x00\x00"), 0,
                             [b"x"]))
    assert core.unacked == {}
    send(core, am.BasicAck(delivery_tag=1))
    assert channel_close(out)[:2] == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


def test_delivery_for_cancelled_consumer_is_requeued():
    core, out = with_deliveries(0)
    core.on_deliver(deliver_msg("q1", [("gone", 101, False), ("A", 102, False)]))
    assert delivered_tags(out) == [(1, "A", False)]
    assert settles(out) == [(Q1, m.REQUEUE, [101])]


# --- acks -----------------------------------------------------------------------------------
def test_ack_single__A2():
    core, out = with_deliveries(3)
    send(core, am.BasicAck(delivery_tag=2))
    assert settles(out) == [(Q1, m.ACK, [102])]
    assert list(core.unacked) == [1, 3]


def test_ack_multiple__A2():
    core, out = with_deliveries(2, 2)  # tags 1,2 from q1; 3,4 from q2
    send(core, am.BasicAck(delivery_tag=3, multiple=True))
    assert settles(out) == [(Q1, m.ACK, [101, 102]), (Q2, m.ACK, [201])]
    assert list(core.unacked) == [4]


def test_ack_multiple_tag_zero_settles_all__A2():
    core, out = with_deliveries(2, 2)
    send(core, am.BasicAck(delivery_tag=0, multiple=True))
    assert settles(out) == [(Q1, m.ACK, [101, 102]), (Q2, m.ACK, [201, 202])]
    assert core.unacked == {}
    send(core, am.BasicAck(delivery_tag=0, multiple=True))  # nothing outstanding: fine
    assert core.state == "open" and settles(out)[2:] == []


def test_acks_of_one_turn_are_batched_per_queue_and_op():
    core, out = with_deliveries(4)
    send(core, am.BasicAck(delivery_tag=1), am.BasicAck(delivery_tag=3),
         am.BasicNack(delivery_tag=2), am.BasicReject(delivery_tag=4, requeue=False))
    assert settles(out) == [(Q1, m.ACK, [101, 103]), (Q1, m.REQUEUE, [102]),
                            (Q1, m.DISCARD, [104])]


def test_nack_multiple_requeue__A3():
    core, out = with_deliveries(3)
    send(core, am.BasicNack(delivery_tag=2, multiple=True, requeue=True))
    assert settles(out) == [(Q1, m.REQUEUE, [101, 102])]
    assert list(core.unacked) == [3]


def test_nack_no_requeue_discards__A3():
    core, out = with_deliveries(3)
    send(core, am.BasicNack(delivery_tag=3, multiple=False, requeue=False))
    assert settles(out) == [(Q1, m.DISCARD, [103])]


def test_reject_requeue_and_discard__A3():
    core, out = with_deliveries(3)
    send(core, am.BasicReject(delivery_tag=3, requeue=True))
    send(core, am.BasicReject(delivery_tag=1, requeue=False))
    assert settles(out) == [(Q1, m.REQUEUE, [103]), (Q1, m.DISCARD, [101])]
    assert list(core.unacked) == [2]


@pytest.mark.parametrize("method", [
    am.BasicAck(delivery_tag=5), am.BasicAck(delivery_tag=5, multiple=True),
    am.BasicNack(delivery_tag=5), am.BasicReject(delivery_tag=5), am.BasicAck(delivery_tag=0)])
def test_unknown_delivery_tag_closes_channel_406__A5(method):
    core, out = with_deliveries(2)
    send(core, method)
    assert channel_close(out) == (406, "PRECONDITION_FAILED - unknown delivery tag "
                                  f"{method.delivery_tag}", 60, method.METHOD_ID)
    assert settles(out) == []  # nothing settled by the failing ack
    assert core.state == "closing"
    # the unacked deliveries go back: the queues are told the channel is down (A7)
    assert out.sent(m.ChannelDown) == [m.ChannelDown(CH), m.ChannelDown(CH)]
    assert {a for a, msg in out.sends() if isinstance(msg, m.ChannelDown)} == {Q1, Q2}
    assert core.unacked == {}


def test_ack_twice_is_unknown_tag__A5():
    core, out = with_deliveries(2)
    send(core, am.BasicAck(delivery_tag=1))
    send(core, am.BasicAck(delivery_tag=1))
    assert channel_close(out)[:2] == (406, "PRECONDITION_FAILED - unknown delivery tag 1")
    assert settles(out) == [(Q1, m.ACK, [101])]


def test_multiple_ack_covering_acked_tag_still_fails_when_tag_itself_is_gone__A5():
    core, out = with_deliveries(3)
    send(core, am.BasicAck(delivery_tag=2))
    send(core, am.BasicAck(delivery_tag=2, multiple=True))
    assert channel_close(out)[0] == 406


def test_tag_of_another_channel_is_unknown_and_other_channel_lives_on__A5():
    a, out_a = with_deliveries(2)
    b, out_b = ch()
    send(b, am.BasicAck(delivery_tag=2))
    assert channel_close(out_b)[:2] == (406, "PRECONDITION_FAILED - unknown delivery tag 2")
    assert out_b.events[-1][0] != "close_connection"
    send(a, am.BasicAck(delivery_tag=2))
    assert a.state == "open" and settles(out_a) == [(Q1, m.ACK, [102])]


def test_ack_of_no_ack_delivery_is_unknown__A6():
    core, out = with_deliveries(2, no_ack=True)
    assert core.unacked == {}
    send(core, am.BasicAck(delivery_tag=1))
    assert channel_close(out)[:2] == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


def test_commands_after_channel_error_are_ignored_until_close_ok():
    core, out = with_deliveries(2)
    send(core, am.BasicAck(delivery_tag=9))
    out.clear()
    send(core, am.BasicAck(delivery_tag=1), am.BasicQos(prefetch_count=1), publish("q1"))
    assert out.events == []
    send(core, am.ChannelClose())  # both sides closing: answered
    assert out.methods() == [am.ChannelCloseOk()]
    send(core, am.ChannelCloseOk())
    assert out.kinds()[-1] == "closed" and core.state == "closed"
    out.clear()
    send(core, am.BasicAck(delivery_tag=1))
    core.on_deliver(deliver_msg("q1", [("A", 103, False)]))
    assert out.events == []


# --- close, recover, terminate --------------------------------------------------------------
def test_channel_close_requeues_and_answers__A7():
    core, out = with_deliveries(2)
    send(core, am.BasicGet(queue="q2"))  # waits for its reply
    out.clear()
    send(core, am.ChannelClose(reply_code=200, reply_text="bye"))
    assert out.kinds() == ["send", "send", "write", "closed"]
    assert {a for a, msg in out.sends()} == {Q1, Q2}
    assert out.methods() == [am.ChannelCloseOk()]
    assert core.state == "closed" and core.consumers == {} and core.unacked == {}


def test_terminate_releases_silently__A7():
    core, out = with_deliveries(2)
    core.terminate()
    assert out.kinds() == ["send", "send"]
    assert core.state == "closed"
    core.terminate()
    assert out.kinds() == ["send", "send"]


def test_recover_requeues_all_unacked__A8():
    core, out = with_deliveries(2, 1)
    send(core, am.BasicRecover(requeue=True))
    assert settles(out) == [(Q1, m.REQUEUE, [101, 102]), (Q2, m.REQUEUE, [201])]
    assert out.methods() == [am.BasicRecoverOk()]
    assert core.unacked == {}
    send(core, am.BasicRecoverAsync(requeue=True))
    assert out.methods() == [am.BasicRecoverOk()]  # async: no reply


def test_recover_without_requeue_is_not_implemented():
    core, out = with_deliveries(1)
    send(core, am.BasicRecover(requeue=False))
    assert out.events[-1] == ("close_connection", 540, "NOT_IMPLEMENTED - requeue=false", 60,
                              110)


def test_cancel_of_a_queue_deleted_by_this_channel_comes_after_delete_ok():
    """RabbitMQ 3.10: the channel is in its call to the queue when the queue cancels its
    consumers; the basic.cancel goes out after queue.delete-ok (kombu's suite:
    test_ack_from_another_thread, py-amqp raised ConsumerCancelled from the delete)."""
    core, out = with_deliveries(0)
    out.clear()
    send(core, am.QueueDelete(queue="q1"))
    [rpc] = out.sent(m.Rpc)
    core.on_consumer_gone(m.ConsumerGone(Q1, "A"))
    assert out.methods() == [] and "A" not in core.consumers
    core.on_reply(m.RpcReply(rpc.req_id, True, 0))
    assert out.methods() == [am.QueueDeleteOk(message_count=0),
                             am.BasicCancel(consumer_tag="A", nowait=True)]


def test_consumer_gone_sends_cancel_when_client_supports_it():
    core, out = with_deliveries(0)
    core.on_consumer_gone(m.ConsumerGone(Q1, "A"))
    assert out.methods() == [am.BasicCancel(consumer_tag="A", nowait=True)]
    assert "A" not in core.consumers
    core.on_consumer_gone(m.ConsumerGone(Q1, "A"))  # twice: nothing more
    assert len(out.methods()) == 1
    quiet, qout = ch(capabilities={})
    consume(quiet, qout, "q1", "A")
    qout.clear()
    quiet.on_consumer_gone(m.ConsumerGone(Q1, "A"))
    assert qout.events == []


# --- consumers ------------------------------------------------------------------------------
def test_consume_message_carries_both_prefetches__P2():
    core, out = ch()
    send(core, am.BasicQos(prefetch_count=7), am.BasicQos(prefetch_count=3, global_=True))
    c = consume(core, out, "q1", "A", no_ack=True)
    assert (c.sender, c.consumer_tag, c.no_ack, c.exclusive, c.prefetch, c.channel_prefetch,
            c.owner) == (CH, "A", True, False, 7, 3, "w1/1")
    assert out.methods() == [am.BasicQosOk(), am.BasicQosOk(),
                             am.BasicConsumeOk(consumer_tag="A")]


def test_consume_generates_tag_and_refuses_reuse():
    core, out = ch()
    send(core, am.BasicConsume(queue="q1"))
    c = out.sent(m.Consume)[-1]
    assert c.consumer_tag.startswith("amq.ctag-") and len(c.consumer_tag) == 9 + 22
    core.on_reply(m.RpcReply(c.req_id, True, "q1"))
    assert out.methods() == [am.BasicConsumeOk(consumer_tag=c.consumer_tag)]
    send(core, am.BasicConsume(queue="q2", consumer_tag=c.consumer_tag))
    assert out.events[-1] == ("close_connection", 530, "NOT_ALLOWED - attempt to reuse "
                              f"consumer tag '{c.consumer_tag}'", 60, 20)


def test_consume_refused_by_queue_closes_channel():
    core, out = ch()
    consume(core, out, "q1", "A", ok=False)
    assert channel_close(out)[:2] == (403, "ACCESS_REFUSED - no")
    assert "A" not in core.consumers


def test_consume_missing_queue_404():
    core, out = ch()
    send(core, am.BasicConsume(queue="nope", consumer_tag="A"))
    assert channel_close(out) == (404, "NOT_FOUND - no queue 'nope' in vhost '/'", 60, 20)
    assert out.sent(m.Consume) == []


def test_cancel_asks_queue_then_answers():
    core, out = with_deliveries(0)
    send(core, am.BasicCancel(consumer_tag="A"))
    c = out.sent(m.Cancel)[-1]
    assert (c.sender, c.consumer_tag) == (CH, "A")
    assert out.methods() == []
    core.on_reply(m.RpcReply(c.req_id, True, True))
    assert out.methods() == [am.BasicCancelOk(consumer_tag="A")]
    send(core, am.BasicCancel(consumer_tag="unknown"))
    assert out.methods()[-1] == am.BasicCancelOk(consumer_tag="unknown")


# --- requests wait; flush before requests ---------------------------------------------------
def test_publishes_and_acks_flushed_before_a_request():
    core, out = with_deliveries(1)
    send(core, publish("q1", b"p1"), am.BasicAck(delivery_tag=1),
         am.QueueDeclare(queue="q9"), publish("q1", b"p2"))
    assert [(a, type(msg).__name__) for a, msg in out.sends()] == [
        (Q1, "Publish"), (Q1, "Settle"), (NODE, "Rpc")]
    rpc = out.sent(m.Rpc)[-1]
    assert (rpc.reply_to, rpc.op, rpc.args["name"]) == (CH, "queue.declare", "q9")
    core.on_reply(m.RpcReply(rpc.req_id, True, ["q9", 4, 1]))
    assert out.methods() == [am.QueueDeclareOk(queue="q9", message_count=4, consumer_count=1)]
    assert [type(msg).__name__ for a, msg in out.sends()] == ["Publish", "Settle", "Rpc",
                                                             "Publish"]
    assert out.sent(m.Publish)[-1].bodies == [b"p2"]


def test_declare_of_an_existing_queue_asks_the_queue_after_the_publishes_sent_to_it():
    """The node names the queue's address; the channel asks the queue for its count itself,
    so the count includes what this channel published before (per-pair ordering)."""
    core, out = ch()
    send(core, publish("q1", b"p1"), am.QueueDeclare(queue="q1", passive=True),
         am.BasicQos(prefetch_count=2))
    rpc = out.sent(m.Rpc)[-1]
    core.on_reply(m.RpcReply(rpc.req_id, True, {"queue_at": Q1}))
    assert [(a, type(msg).__name__) for a, msg in out.sends()] == [
        (Q1, "Publish"), (NODE, "Rpc"), (Q1, "QueueOp")]
    op = out.sent(m.QueueOp)[-1]
    assert (op.reply_to, op.op) == (CH, "info")
    assert out.methods() == []  # still waiting, qos behind it
    core.on_reply(m.RpcReply(op.req_id, True, ["q1", 1, 0]))
    assert out.methods() == [am.QueueDeclareOk(queue="q1", message_count=1, consumer_count=0),
                             am.BasicQosOk()]


def test_commands_wait_for_the_reply_in_order():
    core, out = ch()
    send(core, am.BasicConsume(queue="q1", consumer_tag="A"), am.BasicQos(prefetch_count=2),
         am.BasicConsume(queue="q2", consumer_tag="B"), am.BasicQos(prefetch_count=4))
    assert out.methods() == [] and len(out.sent(m.Consume)) == 1
    core.on_reply(m.RpcReply(out.sent(m.Consume)[0].req_id, True, "q1"))
    assert out.methods() == [am.BasicConsumeOk(consumer_tag="A"), am.BasicQosOk()]
    assert [c.prefetch for c in out.sent(m.Consume)] == [0, 2]
    core.on_reply(m.RpcReply(out.sent(m.Consume)[1].req_id, True, "q2"))
    assert out.methods()[2:] == [am.BasicConsumeOk(consumer_tag="B"), am.BasicQosOk()]
    assert core.prefetch == 4


def test_channel_close_while_waiting_for_a_reply():
    core, out = ch()
    send(core, am.QueueDeclare(queue="q9"), am.BasicQos(prefetch_count=2))
    rpc = out.sent(m.Rpc)[-1]
    send(core, publish("q1"), am.ChannelClose())
    assert out.methods() == [am.ChannelCloseOk()]  # no qos-ok, close served at once
    assert out.sent(m.Publish) == []  # held behind the request, dropped with it
    assert out.kinds()[-1] == "closed"
    out.clear()
    core.on_reply(m.RpcReply(rpc.req_id, True, ["q9", 0, 0]))
    assert out.events == []
    assert core.sync_wait == 0 and not core.backlog


def test_reply_error_closes_channel_and_drops_backlog():
    core, out = ch()
    send(core, am.QueueDeclare(queue="q9", passive=True), am.BasicQos(prefetch_count=2))
    rpc = out.sent(m.Rpc)[-1]
    core.on_reply(m.RpcReply(rpc.req_id, False, None, 404, "NOT_FOUND - no queue 'q9' in "
                             "vhost '/'"))
    assert channel_close(out)[:2] == (404, "NOT_FOUND - no queue 'q9' in vhost '/'")
    assert am.BasicQosOk() not in out.methods()
    assert core.state == "closing"


def test_reply_hard_error_closes_connection():
    core, out = ch()
    send(core, am.ExchangeDeclare(exchange="x", exchange_type="nope"))
    rpc = out.sent(m.Rpc)[-1]
    assert rpc.args["type"] == "nope"
    core.on_reply(m.RpcReply(rpc.req_id, False, None, 503, "COMMAND_INVALID - unknown exchange "
                             "type 'nope'"))
    assert [e[:3] for e in out.events if e[0] == "close_connection"] == [
        ("close_connection", 503, "COMMAND_INVALID - unknown exchange type 'nope'")]


def test_reply_error_names_the_failing_method():
    core, out = ch()
    send(core, am.QueueDeclare(queue="q9", passive=True))
    rpc = out.sent(m.Rpc)[-1]
    core.on_reply(m.RpcReply(rpc.req_id, False, None, 404, "NOT_FOUND - no queue 'q9' in "
                             "vhost '/'"))
    assert channel_close(out) == (404, "NOT_FOUND - no queue 'q9' in vhost '/'", 50, 10)


# --- publishing and confirms ----------------------------------------------------------------
def test_publish_item_layout():
    core, out = ch()
    send(core, publish("q1", b"body", delivery_mode=2, priority=3, expiration="1500"))
    [p] = out.sent(m.Publish)
    [it] = p.items
    assert p.sender == CH and p.bodies == [b"body"]
    assert (it.seq_no, it.exchange, it.routing_key) == (0, "", "q1")
    assert (it.persistent, it.priority, it.expiry_ms) == (True, 3, 1500)
    assert len(it.msg_id) == 16  # a persistent message carries its msg_store id


def test_persistent_messages_get_distinct_msg_ids_transient_none():
    core, out = ch()
    send(core, publish("q1", b"a", delivery_mode=2), publish("q1", b"b", delivery_mode=2),
         publish("q1", b"c"))
    items = [it for p in out.sent(m.Publish) for it in p.items]
    assert len(items) == 3 and items[0].msg_id != items[1].msg_id and items[2].msg_id is None


def test_publish_bad_expiration_406():
    core, out = ch()
    send(core, publish("q1", expiration="-5"))
    assert channel_close(out)[:2] == (406, "PRECONDITION_FAILED - invalid expiration '-5': "
                                      "{value_negative,-5}")


@pytest.mark.parametrize("expiration, reason", [
    # found by tools.fuzz (the channel crashed sending it to a queue); texts seen on 3.10.8,
    # the long one wrapped by Erlang's ~p
    ("99999999999999999999", "{value_too_large,\n" + " " * 44 + "99999999999999999999}"),
    ("315360000001", "{value_too_large,315360000001}"),
    ("-9999999999999999999", "{value_negative,\n" + " " * 44 + "-9999999999999999999}"),
    ("-999999999999999999", "{value_negative,-999999999999999999}"),
    ("abc", "no_integer"),
    ("", "no_integer"),
    ("12x", '{leftover_string,"x"}'),
    ("1.5", '{leftover_string,".5"}'),
    ("-0x", '{leftover_string,"x"}'),
])
def test_publish_expiration_out_of_range_or_not_an_integer_406(expiration, reason):
    """rabbit_basic:parse_expiration and rabbit_misc:check_expiry (at most ten years)."""
    core, out = ch()
    send(core, publish("q1", expiration=expiration))
    assert channel_close(out)[:2] == (406, f"PRECONDITION_FAILED - invalid expiration "
                                      f"'{expiration}': {reason}")


@pytest.mark.parametrize("expiration, ms", [("4294967295", 4294967295), ("+7", 7), ("0", 0)])
def test_publish_expiration_limits(expiration, ms):
    core, out = ch()
    send(core, publish("q1", expiration=expiration))
    [p] = out.sent(m.Publish)
    assert p.items[0].expiry_ms == ms


def test_publish_to_missing_exchange_404():
    core, out = ch()
    send(core, publish("q1", exchange="nope"))
    assert channel_close(out) == (404, "NOT_FOUND - no exchange 'nope' in vhost '/'", 60, 40)


def test_publish_with_other_user_id_406():
    core, out = ch()
    send(core, publish("q1", user_id="bob"))
    assert channel_close(out)[:2] == (406, "PRECONDITION_FAILED - user_id property set to "
                                      "'bob' but authenticated user was 'guest'")


def test_confirm_numbering_starts_at_select__C1():
    core, out = ch()
    send(core, publish("q1"), am.ConfirmSelect(), publish("q1"), publish("q2"),
         am.ConfirmSelect(nowait=True), publish("q1"))
    assert out.methods() == [am.ConfirmSelectOk()]  # the nowait select is not answered
    assert [it.seq_no for p in out.sent(m.Publish) for it in p.items] == [0, 1, 3, 2]
    assert core.confirms.unconfirmed == {1: {Q1}, 2: {Q2}, 3: {Q1}}


def test_confirm_each_once_with_multiple__C1_C2():
    core, out = ch()
    send(core, am.ConfirmSelect(), *[publish("q1") for _ in range(4)])
    out.clear()
    core.on_confirm(m.Confirm(Q1, [1, 2, 3], True))
    assert acks(out) == [("BasicAck", 3, True)]
    core.on_confirm(m.Confirm(Q1, [3, 4], True))  # 3 again: ignored
    assert acks(out) == [("BasicAck", 3, True), ("BasicAck", 4, False)]
    assert core.confirms.unconfirmed == {}


def test_confirms_above_an_unconfirmed_one_are_single__C2():
    core, out = ch()
    send(core, am.ConfirmSelect(), publish("q1"), publish("q2"), publish("q1"),
         publish("q1"))
    out.clear()
    core.on_confirm(m.Confirm(Q1, [1, 3, 4], True))
    assert acks(out) == [("BasicAck", 1, False), ("BasicAck", 3, False), ("BasicAck", 4, False)]
    core.on_confirm(m.Confirm(Q2, [2], True))
    assert acks(out)[3:] == [("BasicAck", 2, False)]


def test_confirm_waits_for_every_queue__C5():
    core, out = ch(replica=_fanout_replica())
    send(core, am.ConfirmSelect(), publish("", exchange="fan"))
    out.clear()
    core.on_confirm(m.Confirm(Q1, [1], True))
    assert acks(out) == []
    core.on_confirm(m.Confirm(Q2, [1], True))
    assert acks(out) == [("BasicAck", 1, False)]


def test_nack_from_one_queue_is_final__C1_C6():
    core, out = ch(replica=_fanout_replica())
    send(core, am.ConfirmSelect(), publish("", exchange="fan"), publish("", exchange="fan"))
    out.clear()
    core.on_confirm(m.Confirm(Q1, [1, 2], False))
    core.on_confirm(m.Confirm(Q2, [1, 2], True))
    assert acks(out) == [("BasicNack", 2, True)]


def test_unroutable_confirmed_at_once_return_first__C4():
    core, out = ch()
    send(core, am.ConfirmSelect(), publish("nowhere", b"lost", mandatory=True),
         publish("nowhere"))
    frames = [c for c in out.frames() if isinstance(c, Command)]
    assert [type(c.method).__name__ for c in frames] == [
        "ConfirmSelectOk", "BasicReturn", "BasicAck"]
    assert frames[1].method == am.BasicReturn(reply_code=312, reply_text="NO_ROUTE",
                                              exchange="", routing_key="nowhere")
    assert frames[1].body == b"lost"
    assert frames[2].method == am.BasicAck(delivery_tag=2, multiple=True)
    assert out.sent(m.Publish) == []


def test_publish_to_dead_queue_is_nacked__C6():
    core, out = ch(replica=_fanout_replica())
    out.dead.add(Q2)
    send(core, am.ConfirmSelect(), publish("", exchange="fan"))
    assert acks(out) == [("BasicNack", 1, False)]
    [p] = out.sent(m.Publish)  # q1 still gets its copy, with no confirm wanted
    assert p.items[0].seq_no == 0 and out.sends()[0][0] == Q1
    assert core.confirms.unconfirmed == {}


def test_mixed_acks_and_nacks_are_single():
    core, out = ch()
    send(core, am.ConfirmSelect(), publish("q1"), publish("q1"), publish("q2"))
    out.clear()
    core.on_confirm(m.Confirm(Q2, [3], False))
    assert acks(out) == [("BasicNack", 3, False)]
    core.on_confirm(m.Confirm(Q1, [1, 2], True))
    assert acks(out)[1:] == [("BasicAck", 2, True)]


def test_queue_worker_down_nacks_unconfirmed_and_cancels():
    core, out = ch()
    consume(core, out, "q1", "A")
    send(core, am.ConfirmSelect(), publish("q1"), publish("q2"))
    out.clear()
    core.worker_down("w2")
    assert acks(out) == [("BasicNack", 2, True)]
    assert am.BasicCancel(consumer_tag="A", nowait=True) in out.methods()


def test_queue_down_nacks_its_unconfirmed_cancels_its_consumers__C6():
    """A queue's process crashed (QueueDown): only what that queue had not confirmed is
    nacked, only its consumers cancelled (rabbit_channel handle_publishing_queue_down with an
    abnormal exit, handle_consuming_queue_down_or_eol)."""
    core, out = ch()
    consume(core, out, "q1", "A")
    consume(core, out, "q2", "B")
    send(core, am.ConfirmSelect(), publish("q1"), publish("q2"))
    out.clear()
    core.queue_down(Q1)
    assert acks(out) == [("BasicNack", 1, False)]
    assert am.BasicCancel(consumer_tag="A", nowait=True) in out.methods()
    assert am.BasicCancel(consumer_tag="B", nowait=True) not in out.methods()
    core.on_confirm(m.Confirm(Q2, [2], True))
    assert acks(out)[-1] == ("BasicAck", 2, False)


def test_queue_down_unacked_stay_ackable_but_settle_to_no_queue__A5():
    """Deliveries of the crashed queue stay unacked for the client (acking them is no 406),
    but their settlements go nowhere: the restarted queue at the same address redelivers what
    it recovered; the other queue's acks go out as before."""
    core, out = with_deliveries(n_q1=2, n_q2=1)
    core.queue_down(Q1)
    out.clear()
    send(core, am.BasicAck(delivery_tag=1), am.BasicAck(delivery_tag=3))
    assert settles(out) == [(Q2, m.ACK, [201])]
    assert not [x for x in out.methods() if isinstance(x, am.ChannelClose)]
    assert list(core.unacked) == [2]


HOME_DOWN = ("NOT_FOUND - home node 'this node' of durable queue 'q1' in vhost '/' is down or "
             "inaccessible")


def test_a_question_pending_at_a_worker_that_dies_is_answered_404():
    """A declare asks the queue for its count; the queue's worker (or node) dies before it
    answers: the channel closes with RabbitMQ's 404 for a queue whose home is down instead of
    waiting for good, and the commands behind it are dropped with the channel."""
    core, out = ch()
    send(core, am.QueueDeclare(queue="q1", passive=True), am.BasicQos(prefetch_count=2))
    core.on_reply(m.RpcReply(out.sent(m.Rpc)[-1].req_id, True, {"queue_at": Q1}))
    op = out.sent(m.QueueOp)[-1]
    core.worker_down("w3")  # another worker: nothing
    assert out.methods() == []
    core.worker_down("w2")
    assert channel_close(out) == (404, HOME_DOWN, 50, 10)
    assert am.BasicQosOk() not in out.methods()
    assert core.asked == {} and op.req_id not in core.waiting
    core.on_reply(m.RpcReply(op.req_id, True, ["q1", 5, 0]))  # late: ignored
    assert len([x for x in out.methods() if isinstance(x, am.QueueDeclareOk)]) == 0


def test_a_question_to_a_dead_worker_is_not_sent():
    core, out = ch()
    out.dead.add(Q1)
    send(core, am.BasicGet(queue="q1"))
    assert out.sent(m.Get) == []
    assert channel_close(out) == (404, HOME_DOWN, 60, 70)


def test_a_cancel_pending_at_a_worker_that_dies_completes():
    core, out = ch()
    consume(core, out, "q1", "A")
    out.clear()
    send(core, am.BasicCancel(consumer_tag="A"), am.BasicQos(prefetch_count=2))
    assert out.methods() == []
    core.worker_down("w2")
    assert out.methods() == [am.BasicCancelOk(consumer_tag="A"), am.BasicQosOk()]


def test_confirms_of_the_turn_go_out_before_channel_close__C1_E5():
    core, out = ch()
    send(core, am.ConfirmSelect(), publish("nowhere"), am.BasicAck(delivery_tag=42))
    names = [type(x).__name__ for x in out.methods()]
    assert names == ["ConfirmSelectOk", "BasicAck", "ChannelClose"]


def test_tx_and_confirm_exclude_each_other__C3():
    core, out = ch()
    send(core, am.TxSelect(), am.ConfirmSelect())
    assert channel_close(out) == (406, "PRECONDITION_FAILED - cannot switch from tx to "
                                  "confirm mode", 85, 10)
    core, out = ch()
    send(core, am.ConfirmSelect(nowait=True), am.TxSelect())
    assert channel_close(out) == (406, "PRECONDITION_FAILED - cannot switch from confirm to "
                                  "tx mode", 90, 10)


# --- credit_flow ----------------------------------------------------------------------------
def test_publisher_blocks_without_credit_and_resumes():
    core, out = ch(credit_initial=3)
    send(core, publish("q1"), publish("q1"))
    assert "block" not in out.kinds()
    send(core, publish("q1"), publish("q2"))
    assert out.kinds().count("block") == 1 and core.blocked
    send(core, publish("q1"))
    assert out.kinds().count("block") == 1
    core.on_credit(m.Credit(Q1, 1, 1))
    assert "unblock" not in out.kinds()  # q1 still at 0
    core.on_credit(m.Credit(Q1, 200, 200))
    assert out.kinds().count("unblock") == 1 and not core.blocked
    assert {q: c[0] for q, c in core.credit.left.items()} == {Q1: 200, Q2: 2}


def test_publisher_blocks_when_byte_credit_runs_out_first():
    core, out = ch(credit_initial=400)
    core.credit.initial_bytes = 10
    send(core, publish("q1", body=b"12345"))
    assert "block" not in out.kinds()
    send(core, publish("q1", body=b"12345"))
    assert out.kinds().count("block") == 1 and core.blocked
    core.on_credit(m.Credit(Q1, 2, 0))
    assert "unblock" not in out.kinds()  # 400 messages left, but 10 - 5 - 5 = 0 bytes
    core.on_credit(m.Credit(Q1, 0, 1))
    assert out.kinds().count("unblock") == 1 and not core.blocked


def test_a_deleted_queue_forgives_the_credit_it_withheld():
    core, out = ch(credit_initial=2)
    send(core, publish("q1"), publish("q1"), publish("q2"))
    assert core.blocked
    core.queues_gone({Q1.partition("#")[2]})  # the transport name of q1 (after "#")
    assert out.kinds().count("unblock") == 1 and not core.blocked
    assert list(core.credit.left) == [Q2] and core.credit.left[Q2][0] == 1


# --- transactions ---------------------------------------------------------------------------
def test_tx_commit_applies_publishes_and_acks__T1():
    core, out = with_deliveries(2)
    send(core, am.TxSelect(), publish("q1", b"t1"), am.BasicAck(delivery_tag=1),
         publish("q2", b"t2"))
    assert out.methods() == [am.TxSelectOk()]
    assert out.sends() == []
    send(core, am.TxCommit())
    assert [(a, type(msg).__name__) for a, msg in out.sends()] == [
        (Q1, "Publish"), (Q2, "Publish"), (Q1, "Settle")]
    assert out.methods() == [am.TxSelectOk(), am.TxCommitOk()]
    assert core.tx is True
    send(core, publish("q1", b"t3"))  # still transactional
    assert len(out.sent(m.Publish)) == 2


def test_tx_rollback_discards_publishes_and_restores_acks__T1():
    core, out = with_deliveries(3)
    send(core, am.TxSelect(), publish("q1"), am.BasicAck(delivery_tag=2, multiple=True),
         am.BasicReject(delivery_tag=3, requeue=False))
    assert core.unacked == {}
    send(core, am.TxRollback())
    assert out.methods()[-1] == am.TxRollbackOk()
    assert list(core.unacked) == [1, 2, 3]
    send(core, am.TxCommit())
    assert out.sends() == []
    send(core, am.BasicAck(delivery_tag=3), am.TxCommit())  # acking again is fine
    assert settles(out) == [(Q1, m.ACK, [103])]


def test_tx_commit_rollback_without_select_406__T1():
    for method in (am.TxCommit(), am.TxRollback()):
        core, out = ch()
        send(core, method)
        assert channel_close(out) == (406, "PRECONDITION_FAILED - channel is not "
                                      "transactional", 90, method.METHOD_ID)


def test_tx_ack_unknown_tag_still_406__T1_A5():
    core, out = with_deliveries(1)
    send(core, am.TxSelect(), am.BasicAck(delivery_tag=1), am.BasicAck(delivery_tag=1))
    assert channel_close(out)[:2] == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


# --- channel-class and protocol errors ------------------------------------------------------
def test_connection_method_on_channel_is_command_invalid__E2():
    core, out = ch()
    send(core, am.ConnectionOpen(virtual_host="/"))
    assert out.events == [("close_connection", 503,
                           "COMMAND_INVALID - connection.open on channel 1", 10, 40)]


def test_second_channel_open_is_channel_error__E2():
    core, out = ch()
    send(core, am.ChannelOpen())
    assert out.events == [("close_connection", 504,
                           "CHANNEL_ERROR - second 'channel.open' seen", 20, 10)]


def test_flow_active_false_not_implemented():
    core, out = ch()
    send(core, am.ChannelFlow(active=True))
    assert out.methods() == [am.ChannelFlowOk(active=True)]
    send(core, am.ChannelFlow(active=False))
    assert out.events[-1] == ("close_connection", 540, "NOT_IMPLEMENTED - active=false", 20,
                              20)


def test_qos_prefetch_size_not_implemented():
    core, out = ch()
    send(core, am.BasicQos(prefetch_size=10))
    assert out.events[-1] == ("close_connection", 540, "NOT_IMPLEMENTED - prefetch_size!=0 "
                              "(10)", 60, 10)


def test_unsolicited_close_ok_is_command_invalid__E2():
    core, out = ch()
    send(core, am.ChannelCloseOk())
    assert [e[:2] for e in out.events] == [("close_connection", 503)]


# --- channel-wide prefetch: token accounting ------------------------------------------------
def _grants(out):
    return [(a, msg.n) for a, msg in out.sends() if isinstance(msg, m.Grant)]


def _global(n, *queues):
    core, out = ch(*(queues or ("q1", "q2")))
    send(core, am.BasicQos(prefetch_count=n, global_=True))
    consume(core, out, "q1", "A")
    consume(core, out, "q2", "B")
    out.clear()
    return core, out


def _check_budget(core):
    assert len(core.limiter.limited) + sum(core.limiter.granted.values()) <= core.limiter.limit


def test_demand_is_granted_what_the_limit_leaves__P2():
    core, out = _global(3)
    core.on_demand(m.Demand(Q1))
    assert _grants(out) == [(Q1, 3)]
    core.on_demand(m.Demand(Q2))
    assert _grants(out) == [(Q1, 3)]  # nothing left: q2 waits
    assert list(core.limiter.demands) == [Q2]
    _check_budget(core)
    core.on_deliver(deliver_msg("q1", [("A", 101, False), ("A", 102, False)]))
    assert core.limiter.granted == {Q1: 1} and core.limiter.limited == {1, 2}
    assert _grants(out) == [(Q1, 3)]
    core.on_release(m.Release(Q1, 1))
    assert _grants(out) == [(Q1, 3), (Q2, 1)]
    _check_budget(core)
    core.on_demand(m.Demand(Q1))
    assert _grants(out) == [(Q1, 3), (Q2, 1)]
    send(core, am.BasicAck(delivery_tag=1))  # an ack frees a token
    assert _grants(out) == [(Q1, 3), (Q2, 1), (Q1, 1)]
    _check_budget(core)


def test_free_tokens_are_shared_among_waiting_queues__P2():
    core, out = _global(5)
    core.on_demand(m.Demand(Q1))
    core.on_deliver(deliver_msg("q1", [("A", 101 + i, False) for i in range(5)]))
    core.on_demand(m.Demand(Q1))
    core.on_demand(m.Demand(Q2))
    assert _grants(out) == [(Q1, 5)]
    send(core, am.BasicAck(delivery_tag=5, multiple=True))
    assert _grants(out) == [(Q1, 5), (Q1, 2), (Q2, 3)]
    assert core.limiter.granted == {Q1: 2, Q2: 3} and not core.limiter.demands
    _check_budget(core)


def test_multiple_ack_frees_many_tokens__P1():
    core, out = _global(3)
    core.on_demand(m.Demand(Q1))
    core.on_deliver(deliver_msg("q1", [("A", 101 + i, False) for i in range(3)]))
    core.on_demand(m.Demand(Q1))
    assert _grants(out) == [(Q1, 3)]
    send(core, am.BasicAck(delivery_tag=2, multiple=True))
    assert _grants(out) == [(Q1, 3), (Q1, 2)]
    _check_budget(core)


def test_nack_and_reject_free_tokens():
    core, out = _global(2)
    core.on_demand(m.Demand(Q1))
    core.on_deliver(deliver_msg("q1", [("A", 101, False), ("A", 102, False)]))
    core.on_demand(m.Demand(Q1))
    send(core, am.BasicNack(delivery_tag=1, requeue=True))
    send(core, am.BasicReject(delivery_tag=2, requeue=False))
    assert _grants(out) == [(Q1, 2), (Q1, 1)]
    assert core.limiter.granted == {Q1: 1} and core.limiter.limited == set()
    core.on_demand(m.Demand(Q1))
    assert _grants(out) == [(Q1, 2), (Q1, 1), (Q1, 1)]
    _check_budget(core)
    core.on_demand(m.Demand(Q1))
    assert len(_grants(out)) == 3  # all out: nothing more


def test_no_ack_and_get_deliveries_use_no_tokens():
    core, out = ch()
    send(core, am.BasicQos(prefetch_count=1, global_=True))
    consume(core, out, "q1", "N", no_ack=True)
    core.on_demand(m.Demand(Q1))
    assert core.limiter.granted == {Q1: 1}
    core.on_deliver(deliver_msg("q1", [("N", 101, False), ("N", 102, False)]))
    assert core.limiter.granted == {Q1: 1} and core.limiter.limited == set()
    send(core, am.BasicGet(queue="q2"))
    get = out.sent(m.Get)[-1]
    core.on_reply(m.GetReply(get.req_id, Q2, m.Delivery("", 7, False, "", "q2", b"\x00\x00"), 0,
                             [b"g"]))
    assert core.limiter.limited == set() and 3 in core.unacked


def test_recover_frees_all_tokens__A8():
    core, out = _global(2)
    core.on_demand(m.Demand(Q1))
    core.on_deliver(deliver_msg("q1", [("A", 101, False), ("A", 102, False)]))
    core.on_demand(m.Demand(Q2))
    assert _grants(out) == [(Q1, 2)]
    send(core, am.BasicRecover(requeue=True))
    assert _grants(out) == [(Q1, 2), (Q2, 2)]
    assert core.limiter.limited == set()


def test_qos_global_false_unsets_global_prefetch__P2():
    core, out = _global(2)
    core.on_demand(m.Demand(Q1))
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]))
    out.clear()
    send(core, am.BasicQos(prefetch_count=5, global_=False))
    assert core.limiter.limit == 0 and core.prefetch == 5
    assert sorted((a, msg) for a, msg in out.sends()) == [(Q1, m.SetLimit(CH, 0)),
                                                          (Q2, m.SetLimit(CH, 0))]
    assert core.limiter.limited == set() and core.limiter.granted == {} and not core.limiter.demands
    core.on_demand(m.Demand(Q1))  # no limit: demands are ignored
    assert _grants(out) == [] and not core.limiter.demands
    assert out.methods() == [am.BasicQosOk()]


def test_qos_global_change_tells_queues_of_consumers():
    core, out = _global(2)
    send(core, am.BasicQos(prefetch_count=2, global_=True))  # unchanged: nothing sent
    assert out.sends() == []
    send(core, am.BasicQos(prefetch_count=4, global_=True))
    assert sorted(a for a, msg in out.sends() if msg == m.SetLimit(CH, 4)) == [Q1, Q2]
    assert core.prefetch == 0


def test_channel_error_drops_token_state():
    core, out = _global(2)
    core.on_demand(m.Demand(Q1))
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]))
    send(core, am.BasicAck(delivery_tag=99))
    assert core.limiter.granted == {} and core.limiter.limited == set() and not core.limiter.demands
    out.clear()
    core.on_demand(m.Demand(Q2))
    assert out.sends() == []


# --- channel + real queues ------------------------------------------------------------------
def _client_deliveries(w, seen):
    return w.deliveries()[seen:]


@pytest.mark.parametrize("seed", range(6))
def test_global_prefetch_holds_and_nothing_lost_or_duplicated__P1_P2_P3(seed):
    rnd = random.Random(seed)
    limit = rnd.randint(1, 4)
    per_consumer = rnd.choice([0, 0, 1, 2])
    w = Wire({"q1": {}, "q2": {}}, auto_sent=True)
    first = []
    if per_consumer:
        first.append(cmd(am.BasicQos(prefetch_count=per_consumer)))
    w.client(*first, cmd(am.BasicQos(prefetch_count=limit, global_=True)),
             cmd(am.BasicConsume(queue="q1", consumer_tag="A")),
             cmd(am.BasicConsume(queue="q2", consumer_tag="B")),
             cmd(am.BasicConsume(queue="q1", consumer_tag="C")))
    expected = {b"q1-%d" % i for i in range(15)} | {b"q2-%d" % i for i in range(15)}
    for i in range(15):
        w.client(publish("q1", b"q1-%d" % i), publish("q2", b"q2-%d" % i))
    outstanding: dict = {}  # delivery tag -> body
    done: set = set()
    first_seen: set = set()
    seen = 0
    for _ in range(2000):
        for tag, ctag, body, red in _client_deliveries(w, seen):
            seen += 1
            assert tag not in outstanding
            outstanding[tag] = body
            assert body not in done, "acked message delivered again"
            if not red:
                assert body not in first_seen, "delivered twice as new"
                first_seen.add(body)
        assert len(outstanding) <= limit, (limit, outstanding)
        if per_consumer:
            by_ctag: dict = {}
            for tag in outstanding:
                ctag = w.channel.unacked[tag].consumer_tag
                by_ctag[ctag] = by_ctag.get(ctag, 0) + 1
            assert max(by_ctag.values(), default=0) <= per_consumer
        if done == expected:
            break
        assert outstanding, f"stalled with {len(expected - done)} messages left"
        tags = sorted(outstanding)
        action = rnd.random()
        if action < 0.55:
            tag = rnd.choice(tags)
            w.client(cmd(am.BasicAck(delivery_tag=tag)))
            done.add(outstanding.pop(tag))
        elif action < 0.8:
            tag = rnd.choice(tags)
            w.client(cmd(am.BasicAck(delivery_tag=tag, multiple=True)))
            for t in tags:
                if t <= tag:
                    done.add(outstanding.pop(t))
        else:
            tag = rnd.choice(tags)
            w.client(cmd(am.BasicNack(delivery_tag=tag, requeue=True)))
            outstanding.pop(tag)
    assert done == expected
    assert w.q("q1").stats()["messages"] == 0 and w.q("q2").stats()["messages"] == 0
    assert w.channel.limiter.granted.get(qaddr("q1"), 0) == w.q("q1").channels[CH].tokens
    assert w.channel.limiter.granted.get(qaddr("q2"), 0) == w.q("q2").channels[CH].tokens


def test_consumer_after_cancel_gets_messages_under_global_prefetch__P2():
    w = Wire({"q1": {}})
    w.client(cmd(am.BasicQos(prefetch_count=1, global_=True)),
             cmd(am.BasicConsume(queue="q1", consumer_tag="A")))
    w.client(*[publish("q1", b"%d" % i) for i in range(3)])
    assert [d[:2] for d in w.deliveries()] == [(1, "A")]
    w.client(cmd(am.BasicCancel(consumer_tag="A")))
    w.client(cmd(am.BasicConsume(queue="q1", consumer_tag="B")))
    w.client(cmd(am.BasicAck(delivery_tag=1)))
    assert [d[:3] for d in w.deliveries()] == [(1, "A", b"0"), (2, "B", b"1")]


def test_consumer_after_cancel_and_qos_change_gets_messages__P2():
    w = Wire({"q1": {}})
    w.client(cmd(am.BasicQos(prefetch_count=1, global_=True)),
             cmd(am.BasicConsume(queue="q1", consumer_tag="A")))
    w.client(*[publish("q1", b"%d" % i) for i in range(3)])
    assert [d[:2] for d in w.deliveries()] == [(1, "A")]
    w.client(cmd(am.BasicCancel(consumer_tag="A")))
    w.client(cmd(am.BasicQos(prefetch_count=0, global_=True)))
    w.client(cmd(am.BasicQos(prefetch_count=5, global_=True)))
    w.client(cmd(am.BasicConsume(queue="q1", consumer_tag="B")))
    assert [d[:3] for d in w.deliveries()] == [(1, "A", b"0"), (2, "B", b"1"), (3, "B", b"2")]


def _fanout_replica():
    r = make_replica("q1", "q2")
    r.router.declare_exchange("/", "fan", "fanout")
    r.router.bind("/", "fan", "queue", "q1", "")
    r.router.bind("/", "fan", "queue", "q2", "")
    return r


# --- x-confirm-on=ack-lite: the consuming channel confirms ------------------------------------
def test_ack_lite_consumer_channel_sends_the_publishers_confirm():
    core, out = ch()
    consume(core, out, "q1", "A")
    pub_ch = "w9#ch/p/1/1"
    core.on_deliver(m.Deliver(Q1, "q1", [
        m.Delivery("A", 11, False, "", "q1", b"\x00\x00", pub_ch, 5),
        m.Delivery("A", 12, False, "", "q1", b"\x00\x00", pub_ch, 6)],
                              [b"a", b"b"]))
    out.clear()
    send(core, am.BasicAck(delivery_tag=1), am.BasicReject(delivery_tag=2, requeue=False))
    assert out.sent(m.Confirm) == [m.Confirm(Q1, [5], True)]   # the reject is not reported
    assert sorted((x.op, x.seq_ids) for x in out.sent(m.Settle)) == [(0, [11]), (2, [12])]


# --- max_message_size (issue 11) ------------------------------------------------------------
def test_refused_publish_closes_the_channel_with_406_in_order__R3():
    """What the reader puts in a batch for a content header above max_message_size: the
    commands before it run, then channel.close 406 with rabbit_channel:check_msg_size's text,
    naming basic.publish; the channel then drops what follows until close-ok."""
    from actors.core.channel import RefusedPublish
    from actors.core.errors import ChannelError
    core, out = ch()
    err = ChannelError(406, "message size 5000 is larger than configured max size 1000", 60, 40)
    send(core, publish("q1", b"before"), Command(1, RefusedPublish(err)),
         publish("q1", b"after"))
    assert channel_close(out) == (406, "PRECONDITION_FAILED - message size 5000 is larger "
                                       "than configured max size 1000", 60, 40)
    published = [b for msg in out.sent(m.Publish) for b in msg.bodies]
    assert published == [b"before"]
    assert core.state == "closing"


# --- topic permissions and what the node is told for its checks (issue 11) ------------------
def _topic_channel(write="^ok\\.", read="^r\\."):
    replica = make_replica("q1")
    replica.router.bind("/", "amq.topic", "queue", "q1", "#", {})
    replica.auth.set_topic_permissions("guest", "/", "amq.topic", write, read)
    return make_channel(replica=replica)


def test_publish_to_topic_exchange_checks_the_routing_key__E3():
    core, out = _topic_channel()
    send(core, publish("ok.1", b"a", exchange="amq.topic"))
    assert [b for msg in out.sent(m.Publish) for b in msg.bodies] == [b"a"]
    send(core, publish("no.1", b"b", exchange="amq.topic"))
    assert channel_close(out) == (403, "ACCESS_REFUSED - access to topic 'no.1' in exchange "
                                       "'amq.topic' in vhost '/' refused for user 'guest'",
                                  60, 40)
    assert [b for msg in out.sent(m.Publish) for b in msg.bodies] == [b"a"]


def test_topic_permissions_apply_to_topic_exchanges_only():
    core, out = _topic_channel()
    core.replica.auth.set_topic_permissions("guest", "/", "amq.direct", "^$", "^$")
    send(core, publish("q1", b"d", exchange="amq.direct"))
    assert not [x for x in out.methods() if isinstance(x, am.ChannelClose)]


@pytest.mark.parametrize("method", [
    am.QueueBind(queue="q1", exchange="amq.topic", routing_key="w.#"),
    am.QueueUnbind(queue="q1", exchange="amq.topic", routing_key="w.#"),
    am.ExchangeBind(destination="x2", source="amq.topic", routing_key="w.#"),
    am.ExchangeUnbind(destination="x2", source="amq.topic", routing_key="w.#"),
])
def test_bind_and_unbind_check_read_on_the_topic__E3(method):
    """rabbit_channel:binding_action: read on the source topic exchange's routing key."""
    core, out = _topic_channel()
    send(core, method)
    code, text, *_ = channel_close(out)
    assert (code, text) == (403, "ACCESS_REFUSED - access to topic 'w.#' in exchange "
                                 "'amq.topic' in vhost '/' refused for user 'guest'")
    assert not out.sent(m.Rpc)


def test_bind_allowed_topic_goes_to_the_node():
    core, out = _topic_channel()
    send(core, am.QueueBind(queue="q1", exchange="amq.topic", routing_key="r.#"))
    assert [r.op for r in out.sent(m.Rpc)] == ["bind"]


def test_declares_tell_the_node_who_asks():
    """The node checks configure on a server-named queue and read/write for a DLX or an AE:
    it needs the user."""
    core, out = ch()
    send(core, am.QueueDeclare(queue=""))
    send(core, am.ExchangeDeclare(exchange="x", exchange_type="direct"))
    assert [(r.op, r.args["user"]) for r in out.sent(m.Rpc)] == [("queue.declare", "guest")]
    core.on_reply(m.RpcReply(out.sent(m.Rpc)[0].req_id, True, ["amq.gen-1", 0, 0]))
    assert [(r.op, r.args["user"]) for r in out.sent(m.Rpc)] == [
        ("queue.declare", "guest"), ("exchange.declare", "guest")]


# --- consumer timeout (S5) ------------------------------------------------------------------
def _timeout_channel(timeout=1000, args=None, policy=None, action="close-channel",
                     caps=None):
    from actors.core.channel import ChannelCore
    from core_fakes import OWNER, ChannelOut
    from actors.core.channel import ConnInfo
    replica = make_replica("q1", "q2")
    if args:
        replica.queues[("/", "q1")]["arguments"] = args
    if policy:
        replica.policies[("/", "p")] = {"pattern": "^q1$", "definition": policy,
                                        "priority": 0, "apply_to": "queues"}
    out = ChannelOut()
    conn = ConnInfo(OWNER, "guest", "/", 131072,
                    {"consumer_cancel_notify": True} if caps is None else caps, NODE)
    return ChannelCore(1, CH, conn, replica, out.port(), consumer_timeout=timeout,
                       consumer_timeout_action=action), out


def test_consumer_timeout_closes_channel_406_and_requeues__S5():
    core, out = _timeout_channel(1000)
    consume(core, out, "q1", "A")
    core.on_deliver(deliver_msg("q1", [("A", 101, False), ("A", 102, False)]), now=5000)
    assert core.check_at == 6000  # one interval: min(timeout, 60 s)
    send(core, am.BasicAck(delivery_tag=1))
    core.consumer_timeout_check(6000)  # tag 2 is unacked for exactly 1000 ms: not yet
    assert not [x for x in out.methods() if isinstance(x, am.ChannelClose)]
    assert core.check_at == 7000
    out.clear()
    core.consumer_timeout_check(7000)
    assert channel_close(out) == (
        406, "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout "
             "value used: 1000 ms. This timeout value can be configured, see consumers doc "
             "guide to learn more", 0, 0)
    assert (Q1, m.ChannelDown(CH)) in out.sends()  # the queue requeues what we held
    assert not core.unacked and core.check_at == 0


def test_consumer_timeout_no_check_when_all_acked_or_disabled__S5():
    core, out = _timeout_channel(1000)
    consume(core, out, "q1", "A")
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]), now=0)
    send(core, am.BasicAck(delivery_tag=1))
    core.consumer_timeout_check(10 ** 6)
    assert core.check_at == 0 and core.state == "open"
    core, out = _timeout_channel(0)  # consumer_timeout = 0: none
    consume(core, out, "q1", "A")
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]), now=0)
    assert core.check_at == 0


def test_consumer_timeout_no_ack_consumer_never_times_out__S5():
    core, out = _timeout_channel(1000)
    consume(core, out, "q1", "A", no_ack=True)
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]), now=0)
    assert core.check_at == 0


def test_consumer_timeout_from_queue_argument_and_policy_min__S5():
    core, out = _timeout_channel(1800000, args={"x-consumer-timeout": 3000},
                                 policy={"consumer-timeout": 2000})
    consume(core, out, "q1", "A")
    consume(core, out, "q2", "B")
    assert core.queue_timeouts == {Q1: 2000, Q2: 1800000}
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]), now=0)
    assert core.check_at == 2000
    core.consumer_timeout_check(2001)
    assert "Timeout value used: 2000 ms" in channel_close(out)[1]


def test_consumer_timeout_applies_to_basic_get__S5():
    core, out = _timeout_channel(500)
    send(core, am.BasicGet(queue="q1"))
    get = out.sent(m.Get)[-1]
    core.on_reply(m.GetReply(get.req_id, Q1, m.Delivery("", 13, False, "", "q1", b"\x00\x00"), 0,
                             [b"x"]), now=100)
    assert core.check_at == 600
    core.consumer_timeout_check(601)
    assert channel_close(out)[0] == 406


def test_consumer_timeout_tx_rollback_waits_for_restored_deliveries_again__S5():
    core, out = _timeout_channel(1000)
    consume(core, out, "q1", "A")
    send(core, am.TxSelect())
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]), now=0)
    send(core, am.BasicAck(delivery_tag=1))  # held by the transaction
    core.consumer_timeout_check(500)
    assert core.check_at == 0  # nothing unacked left to wait for
    send(core, am.TxRollback())
    assert core.check_at
    core.consumer_timeout_check(1001)
    assert channel_close(out)[0] == 406


# --- consumer timeout, RabbitMQ 4.3's answer (consumer_timeout_action = cancel-consumer) ----
def test_cancel_consumer_timeout_cancels_and_returns_deliveries_channel_stays_open__S5():
    core, out = _timeout_channel(1000, action="cancel-consumer")
    consume(core, out, "q1", "A")
    consume(core, out, "q2", "B")
    core.on_deliver(deliver_msg("q1", [("A", 101, False), ("A", 102, False)]), now=0)
    core.on_deliver(deliver_msg("q2", [("B", 201, False)]), now=900)
    out.clear()
    core.consumer_timeout_check(1001)
    assert core.state == "open"
    assert not [x for x in out.methods() if isinstance(x, am.ChannelClose)]
    cancels = [x for x in out.methods() if isinstance(x, am.BasicCancel)]
    assert [c.consumer_tag for c in cancels] == ["A"]
    assert [x.consumer_tag for x in out.sent(m.Cancel)] == ["A"]
    # A's two deliveries go back to q1, after the queue dropped the consumer
    sends = out.sends()
    i_cancel = next(i for i, (a, x) in enumerate(sends) if isinstance(x, m.Cancel))
    i_settle = next(i for i, (a, x) in enumerate(sends) if isinstance(x, m.Settle))
    assert i_cancel < i_settle
    assert sends[i_settle] == (Q1, m.Settle(CH, m.REQUEUE, [101, 102]))
    assert list(core.unacked) == [3] and "A" not in core.consumers and "B" in core.consumers
    assert core.check_at == 2001  # B's delivery still waits
    # a late ack of a returned delivery does nothing, and closes nothing
    out.clear()
    send(core, am.BasicAck(delivery_tag=1))
    send(core, am.BasicAck(delivery_tag=3))
    assert core.state == "open" and not core.unacked
    assert out.sent(m.Settle) == [m.Settle(CH, m.ACK, [201])]
    # an ack of it twice is an unknown tag again
    send(core, am.BasicAck(delivery_tag=1))
    assert channel_close(out)[:2] == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


def test_cancel_consumer_timeout_multiple_ack_over_returned_tags__S5():
    core, out = _timeout_channel(1000, action="cancel-consumer")
    consume(core, out, "q2", "B")
    consume(core, out, "q1", "A")
    core.on_deliver(deliver_msg("q2", [("B", 201, False)]), now=500)
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]), now=0)
    core.consumer_timeout_check(1001)           # tag 2 (A) returned, tag 1 (B) waits
    out.clear()
    send(core, am.BasicAck(delivery_tag=2, multiple=True))
    assert out.sent(m.Settle) == [m.Settle(CH, m.ACK, [201])]
    assert core.state == "open" and not core.unacked and not core.timed_out_tags


@pytest.mark.parametrize("caps", [{}, {"consumer_cancel_notify": False}])
def test_cancel_consumer_timeout_without_the_capability_closes_the_channel__S5(caps):
    core, out = _timeout_channel(1000, action="cancel-consumer", caps=caps)
    consume(core, out, "q1", "A")
    core.on_deliver(deliver_msg("q1", [("A", 101, False)]), now=0)
    core.consumer_timeout_check(1001)
    assert channel_close(out)[0] == 406


def test_cancel_consumer_timeout_basic_get_still_closes_the_channel__S5():
    core, out = _timeout_channel(500, action="cancel-consumer")
    send(core, am.BasicGet(queue="q1"))
    get = out.sent(m.Get)[-1]
    core.on_reply(m.GetReply(get.req_id, Q1, m.Delivery("", 13, False, "", "q1", b"\x00\x00"), 0,
                             [b"x"]), now=100)
    core.consumer_timeout_check(601)
    assert channel_close(out)[0] == 406
