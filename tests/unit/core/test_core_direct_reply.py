"""Direct reply-to (S3) and sender-selected distribution, CC/BCC (S4), in the channel core:
actors/core/channel.py with actors/core/direct_reply.py and actors/core/sender_selected.py, and
the property editing of protocol/properties.py. Two channel cores on one replica stand for two
connections (on two connection workers of one node); the DirectReply / ReplyCheck messages the
fakes record are handed from one to the other as the transport would."""

import pytest

from actors import messages as m
from actors.core import direct_reply
from actors.core.channel import ChannelCore, ConnInfo
from actors.core.connection import CAPABILITIES
from core_fakes import NODE, ChannelOut, cmd, make_replica, publish, qaddr
from protocol import fields
from protocol import methods as am
from protocol.frames import Command
from protocol.properties import (BasicProperties, header_types, with_reply_to,
                                 without_header)

RUN = "ipc:///var/lib/leveret/run"
A = f"{RUN}/conn-0-1.sock#ch/1/1/1"  # the requesting client's channel (worker 0)
B = f"{RUN}/conn-1-1.sock#ch/2/1/2"  # the RPC server's channel (worker 1)
PSEUDO = "amq.rabbitmq.reply-to"


def channel(address, replica, user="guest"):
    out = ChannelOut()
    conn = ConnInfo("w/1", user, "/", 131072, {"consumer_cancel_notify": True}, NODE)
    return ChannelCore(1, address, conn, replica, out.port()), out


def pair(*queues):
    r = make_replica(*(queues or ("rpc", "q1", "q2", "q3")))
    a, aout = channel(A, r)
    b, bout = channel(B, r)
    return r, (a, aout), (b, bout)


def send(core, *methods_or_cmds):
    core.handle_commands([x if isinstance(x, Command) else cmd(x) for x in methods_or_cmds])


def closed_with(out):
    closes = [x for x in out.methods() if isinstance(x, am.ChannelClose)]
    assert len(closes) == 1, out.methods()
    c = closes[0]
    return c.reply_code, c.reply_text, c.class_id, c.method_id


def published(out, queue):
    """[(routing key, BasicProperties, body)] of the Publish batches sent to `queue`."""
    got = []
    for msg in out.sent(m.Publish, to=qaddr(queue)):
        got += [(it.routing_key, BasicProperties.decode(it.props_raw), body)
                for it, body in zip(msg.items, msg.bodies)]
    return got


def reply_consumer(core, out, tag="rc"):
    send(core, am.BasicConsume(queue=PSEUDO, consumer_tag=tag, no_ack=True))
    assert out.methods()[-1] == am.BasicConsumeOk(consumer_tag=tag)
    return core.reply_consumer.name


def request(a, aout):
    """The client publishes a request with reply_to amq.rabbitmq.reply-to; -> the name the
    server sees."""
    send(a, publish("rpc", b"question", reply_to=PSEUDO, correlation_id="c1"))
    a.flush()
    [(_, props, _)] = published(aout, "rpc")
    return props.reply_to


# --- S3: direct reply-to ----------------------------------------------------------------------
def test_capability_announced__S3():
    assert CAPABILITIES["direct_reply_to"] is True


def test_round_trip_between_two_channels__S3():
    _, (a, aout), (b, bout) = pair()
    name = reply_consumer(a, aout)
    assert name.startswith(PSEUDO + ".") and len(name.encode()) <= 255
    assert direct_reply.decode_name(name) == (A, a.reply_consumer.key)
    reply_to = request(a, aout)
    assert reply_to == name  # the request reaches the server with the generated name
    send(b, publish(name, b"answer", correlation_id="c1"))
    [(addr, msg)] = [(ad, x) for ad, x in bout.sends() if isinstance(x, m.DirectReply)]
    assert addr == A and msg.key == a.reply_consumer.key
    assert not bout.sent(m.Publish)  # no queue in between
    aout.clear()
    tag_before = a.next_tag
    a.on_direct_reply(msg)
    frames = [c for c in aout.frames() if isinstance(c, Command)]
    assert [(c.method, c.body) for c in frames] == [(am.BasicDeliver(
        consumer_tag="rc", delivery_tag=tag_before, redelivered=False, exchange="",
        routing_key=name), b"answer")]
    assert frames[0].properties.correlation_id == "c1"
    assert a.next_tag == tag_before and not a.unacked  # no-ack: the tag is not used up


def test_consume_with_ack_refused__S3():
    _, (a, aout), _ = pair()
    send(a, am.BasicConsume(queue=PSEUDO, consumer_tag="rc", no_ack=False))
    assert closed_with(aout) == (406, "PRECONDITION_FAILED - reply consumer cannot acknowledge",
                                 60, 20)
    assert a.reply_consumer is None


def test_second_reply_consumer_refused__S3():
    _, (a, aout), _ = pair()
    reply_consumer(a, aout)
    send(a, am.BasicConsume(queue=PSEUDO, consumer_tag="other", no_ack=True))
    assert closed_with(aout)[:2] == (406, "PRECONDITION_FAILED - reply consumer already set")


def test_reply_consumer_needs_no_read_permission_and_gets_a_tag__S3():
    r = make_replica("rpc")
    r.auth.add_user("nobody", "pw")
    r.auth.set_permissions("nobody", "/", "", "", "")
    a, aout = channel(A, r, user="nobody")
    send(a, am.BasicConsume(queue=PSEUDO, no_ack=True))
    [ok] = aout.methods()
    assert ok.consumer_tag.startswith("amq.ctag-")


def test_publish_with_pseudo_reply_to_without_consumer_refused__S3():
    _, (a, aout), _ = pair()
    send(a, publish("rpc", reply_to=PSEUDO))
    assert closed_with(aout) == (406, "PRECONDITION_FAILED - fast reply consumer does not exist",
                                 60, 40)
    assert not aout.sent(m.Publish)


def test_reply_to_rewritten_each_time_only_that_property_changes__S3():
    _, (a, aout), _ = pair()
    name = reply_consumer(a, aout)
    send(a, publish("rpc", b"1", reply_to=PSEUDO, headers={"n": 70000, "x": b"\xff"}),
         publish("rpc", b"2", reply_to=PSEUDO, headers={"n": 70000, "x": b"\xff"}))
    a.flush()
    got = published(aout, "rpc")
    assert [p.reply_to for _, p, _ in got] == [name, name]
    assert got[0][1].headers == {"n": 70000, "x": b"\xff"}
    # after a cancel the same properties are refused: the rewrite is never cached
    send(a, am.BasicCancel(consumer_tag="rc"))
    assert aout.methods()[-1] == am.BasicCancelOk(consumer_tag="rc")
    send(a, publish("rpc", b"3", reply_to=PSEUDO, headers={"n": 70000, "x": b"\xff"}))
    assert closed_with(aout)[1] == "PRECONDITION_FAILED - fast reply consumer does not exist"


def test_reply_to_a_cancelled_or_replaced_consumer_is_dropped__S3():
    _, (a, aout), (b, bout) = pair()
    old = reply_consumer(a, aout)
    send(a, am.BasicCancel(consumer_tag="rc"))
    send(b, publish(old, b"late"))
    [msg] = bout.sent(m.DirectReply)
    aout.clear()
    a.on_direct_reply(msg)  # no consumer
    assert aout.frames() == []
    new = reply_consumer(a, aout, "rc2")
    assert new != old
    aout.clear()
    a.on_direct_reply(msg)  # the old key does not reach the new consumer
    assert aout.frames() == []


def test_reply_to_a_closed_channel_is_dropped_and_mandatory_returned__S3():
    """RabbitMQ 3.10 (direct-reply-to.html, caveats): a reply name is not a queue, so a
    mandatory publish that only goes to it is returned as unroutable, delivered or not; the
    publisher's confirm comes at once (nothing to wait for)."""
    _, (a, aout), (b, bout) = pair()
    name = reply_consumer(a, aout)
    send(a, am.ChannelClose())
    assert a.reply_consumer is None
    send(b, am.ConfirmSelect(), publish(name, b"r", mandatory=True))
    [msg] = bout.sent(m.DirectReply)
    aout.clear()
    a.on_direct_reply(msg)
    assert aout.frames() == []
    meths = bout.methods()
    assert meths[1] == am.BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="",
                                      routing_key=name)
    assert meths[2] == am.BasicAck(delivery_tag=1, multiple=False)


def test_mandatory_reply_is_returned_even_when_delivered__S3():
    _, (a, aout), (b, bout) = pair()
    name = reply_consumer(a, aout)
    send(b, publish(name, b"r", mandatory=True))
    [msg] = bout.sent(m.DirectReply)
    assert [type(x) for x in bout.methods()] == [am.BasicReturn]
    aout.clear()
    a.on_direct_reply(msg)
    assert [type(x) for x in aout.methods()] == [am.BasicDeliver]


@pytest.mark.parametrize("address", [
    "tcp://198.51.100.7:5555#ch/1/1/1",  # not a worker of this node or cluster
    "ipc:///tmp/elsewhere/conn-0-1.sock#ch/1/1/1",  # another run folder
    f"{RUN}/queue-0-1.sock#ch/1/1/1",  # a queue worker
    f"{RUN}/conn-0-1.sock#q\x1f/\x1fq1",  # not a channel
])
def test_forged_reply_names_send_nothing__S3(address):
    _, _, (b, bout) = pair()
    forged = direct_reply.reply_name(address, "k" * 16)
    send(b, publish(forged, b"r"), publish(PSEUDO + ".garbage", b"r"),
         publish(PSEUDO + ".%%%.k", b"r"))
    assert bout.sends() == []
    assert b.state == "open"


def test_cluster_member_workers_are_reply_endpoints__S3():
    members = {"n2": {"workers": {"conn-0": "tcp://10.0.0.2:4000",
                                  "queue-0": "tcp://10.0.0.2:4001"}}}
    own = "tcp://10.0.0.1:4000"
    assert direct_reply.endpoint_ok("tcp://10.0.0.2:4000", own, members)
    assert not direct_reply.endpoint_ok("tcp://10.0.0.2:4001", own, members)
    assert not direct_reply.endpoint_ok("tcp://10.0.0.3:4000", own, members)
    assert direct_reply.endpoint_ok(own, own, {})


def test_declare_pseudo_queue_and_own_name__S3():
    _, (a, aout), _ = pair()
    send(a, am.QueueDeclare(queue=PSEUDO, passive=True))
    assert aout.methods() == [am.QueueDeclareOk(queue=PSEUDO, message_count=0,
                                                consumer_count=1)]
    assert not aout.sent(m.Rpc)  # not the node's business
    name = reply_consumer(a, aout)
    aout.clear()
    send(a, am.QueueDeclare(queue=name, passive=False, durable=True))  # always passive
    assert aout.methods() == [am.QueueDeclareOk(queue=name, message_count=0, consumer_count=1)]
    assert a.last_queue == name


def test_declare_of_another_channels_name_asks_it__S3():
    _, (a, aout), (b, bout) = pair()
    name = reply_consumer(a, aout)
    send(b, am.QueueDeclare(queue=name, passive=True))
    [(addr, check)] = [(ad, x) for ad, x in bout.sends() if isinstance(x, m.ReplyCheck)]
    assert addr == A and check.reply_to == B
    a.on_reply_check(check)
    [answer] = aout.sent(m.RpcReply, to=B)
    assert answer.ok
    b.on_reply(answer)
    assert bout.methods() == [am.QueueDeclareOk(queue=name, message_count=0, consumer_count=1)]
    # once the consumer is gone: 404 (the connection worker answers the same for a closed one)
    send(a, am.BasicCancel(consumer_tag="rc"))
    send(b, am.QueueDeclare(queue=name, passive=True))
    check = bout.sent(m.ReplyCheck)[-1]
    a.on_reply_check(check)
    b.on_reply(aout.sent(m.RpcReply, to=B)[-1])
    assert closed_with(bout) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'", 50, 10)


@pytest.mark.parametrize("name", [PSEUDO + "x", PSEUDO + ".nonsense",
                                  direct_reply.reply_name("tcp://203.0.113.1:1#ch/1", "k")])
def test_declare_of_a_name_that_reaches_nobody_404__S3(name):
    _, _, (b, bout) = pair()
    send(b, am.QueueDeclare(queue=name, passive=True))
    assert bout.sends() == []
    assert closed_with(bout)[:2] == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


def test_direct_reply_message_round_trips_the_wire_encoding():
    msg = m.DirectReply("key", "", "rk", b"\x00\x00", None, [b"body"])
    assert m.decode(*m.encode(msg)) == msg
    check = m.ReplyCheck(B, 7, "key")
    assert m.decode(*m.encode(check)) == check


# --- S4: CC / BCC -----------------------------------------------------------------------------
def test_cc_routes_to_extra_queues_and_stays__S4():
    _, (a, aout), _ = pair()
    send(a, publish("q1", b"x", headers={"CC": ["q2", "missing"], "other": 1}))
    a.flush()
    for q in ("q1", "q2"):
        [(rk, props, body)] = published(aout, q)
        assert (rk, body) == ("q1", b"x")
        assert props.headers == {"CC": ["q2", "missing"], "other": 1}
    assert published(aout, "q3") == []


def test_bcc_routes_and_is_removed__S4():
    _, (a, aout), _ = pair()
    send(a, publish("q1", b"x", headers={"BCC": ["q3"], "CC": ["q2"], "n": 4000000000}))
    a.flush()
    for q in ("q1", "q2", "q3"):
        [(rk, props, _)] = published(aout, q)
        assert rk == "q1"
        assert props.headers == {"CC": ["q2"], "n": 4000000000}
    raw = aout.sent(m.Publish, to=qaddr("q3"))[0].items[0].props_raw
    assert header_types(raw) == {"CC": "A", "n": "i"}  # wire types kept


def test_cc_and_bcc_duplicates_reach_each_queue_once__S4():
    _, (a, aout), _ = pair()
    send(a, publish("q1", b"x", headers={"CC": ["q1", "q2", "q2"], "BCC": ["q2", "q1"]}))
    a.flush()
    assert [len(published(aout, q)) for q in ("q1", "q2", "q3")] == [1, 1, 0]


def test_cc_through_a_direct_exchange_and_its_alternate__S4():
    r, (a, aout), _ = pair()
    r.router.declare_exchange("/", "ae", "fanout")
    r.router.declare_exchange("/", "dx", "direct", arguments={"alternate-exchange": "ae"})
    r.router.bind("/", "dx", "queue", "q1", "k1", {})
    r.router.bind("/", "ae", "queue", "q3", "", {})
    send(a, publish("nothing", b"x", exchange="dx", headers={"CC": ["k1"]}))
    a.flush()
    # the exchange routed by one of the keys: the alternate exchange is not used
    assert [len(published(aout, q)) for q in ("q1", "q3")] == [1, 0]
    send(a, publish("nothing", b"y", exchange="dx", headers={"CC": ["nope"]}))
    a.flush()
    assert [len(published(aout, q)) for q in ("q1", "q3")] == [1, 1]


def test_mandatory_returned_only_if_no_key_routes__S4():
    _, (a, aout), _ = pair()
    send(a, publish("nowhere", b"x", mandatory=True, headers={"CC": ["q2"]}))
    assert not [x for x in aout.methods() if isinstance(x, am.BasicReturn)]
    send(a, publish("nowhere", b"x", mandatory=True, headers={"CC": ["nope"], "BCC": ["no"]}))
    frames = [c for c in aout.frames() if isinstance(c, Command)]
    assert frames[-1].method == am.BasicReturn(reply_code=312, reply_text="NO_ROUTE",
                                               exchange="", routing_key="nowhere")
    assert frames[-1].properties.headers == {"CC": ["nope"]}  # returned without BCC


def test_confirm_with_cc_waits_for_every_queue__S4():
    _, (a, aout), _ = pair()
    send(a, am.ConfirmSelect(), publish("q1", b"x", headers={"BCC": ["q2"]}))
    a.flush()
    aout.clear()
    a.on_confirm(m.Confirm(qaddr("q1"), [1], True))
    assert aout.methods() == []
    a.on_confirm(m.Confirm(qaddr("q2"), [1], True))
    assert aout.methods() == [am.BasicAck(delivery_tag=1, multiple=False)]


@pytest.mark.parametrize("headers,text", [
    ({"CC": "q2"}, '{unacceptable_type_in_header,"CC",longstr}'),
    ({"CC": ["q2"], "BCC": 5}, '{unacceptable_type_in_header,"BCC",byte}'),
    ({"BCC": {"a": 1}}, '{unacceptable_type_in_header,"BCC",table}'),
    ({"CC": None}, '{unacceptable_type_in_header,"CC",void}'),
])
def test_cc_that_is_not_an_array_refused__S4(headers, text):
    _, (a, aout), _ = pair()
    send(a, publish("q1", headers=headers))
    assert closed_with(aout) == (406, "PRECONDITION_FAILED - invalid message: " + text, 60, 40)
    assert not aout.sent(m.Publish)


def test_cc_members_that_are_not_strings_are_ignored__S4():
    _, (a, aout), _ = pair()
    send(a, publish("q1", headers={"CC": [5, "q2", {"q3": 1}]}))
    a.flush()
    assert [len(published(aout, q)) for q in ("q1", "q2", "q3")] == [1, 1, 0]


def test_cc_reaches_a_reply_name__S3_S4():
    _, (a, aout), (b, bout) = pair()
    name = reply_consumer(a, aout)
    send(b, publish("q1", b"x", headers={"BCC": [name, name]}))
    [msg] = bout.sent(m.DirectReply)
    assert msg.routing_key == "q1"
    assert BasicProperties.decode(msg.props_raw).headers == {}


# --- editing encoded properties ---------------------------------------------------------------
def test_with_reply_to_replaces_or_inserts_only_that_property():
    props = BasicProperties(content_type="t", headers={"u": 4000000000}, correlation_id="c",
                            reply_to="old", expiration="5", app_id="x")
    raw = props.encode()
    new = BasicProperties.decode(with_reply_to(raw, "new"))
    props.reply_to = "new"
    assert new == props
    assert header_types(with_reply_to(raw, "new")) == {"u": "i"}
    assert BasicProperties.decode(with_reply_to(b"\x00\x00", "r")) == BasicProperties(
        reply_to="r")
    assert BasicProperties.decode(with_reply_to(BasicProperties(
        priority=1, message_id="m").encode(), "r")) == BasicProperties(
        priority=1, reply_to="r", message_id="m")


def test_without_header_removes_the_first_entry_only():
    table = fields.encode_table({"BCC": ["a"], "k": "v"})
    # a second BCC entry (a dict cannot hold two): RabbitMQ's lists:delete takes the first
    dup = table[4:] + b"\x03BCC" + fields.encode_value(["b"])
    raw = b"\x20\x00" + len(dup).to_bytes(4, "big") + dup
    out = without_header(raw, "BCC")
    assert BasicProperties.decode(out).headers == {"k": "v", "BCC": ["b"]}
    assert without_header(b"\x00\x00", "BCC") == b"\x00\x00"
