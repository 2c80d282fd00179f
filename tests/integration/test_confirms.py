"""Publisher confirms: C1-C4, C6 (raw frames where the wire order or the tags matter)."""
from __future__ import annotations

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError

import rawamqp
from amqp_helpers import count, declare, get_all, publish, unique


@pytest.fixture
def raw(broker):
    c = rawamqp.RawClient(broker.host, broker.port)
    c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
    c.open_channel(1)
    yield c
    c.close()


def _collect_confirms(raw: rawamqp.RawClient, n: int, channel: int = 1, timeout: float = 5.0):
    """Read until publishes 1..n are all settled. Returns (acked, nacked, frames) where acked and
    nacked are lists of tags in settlement order (multiple expanded over the still-pending tags)."""
    pending = set(range(1, n + 1))
    acked, nacked, frames = [], [], []
    while pending:
        res = raw.read_command(timeout)
        if isinstance(res, rawamqp.Content):
            frames.append(res.method)
            continue
        ch, m = res
        frames.append(m)
        if isinstance(m, (commands.Basic.Ack, commands.Basic.Nack)):
            assert ch == channel
            if m.multiple:
                tags = sorted(t for t in pending if t <= m.delivery_tag)
            else:
                assert m.delivery_tag in pending, f"tag {m.delivery_tag} confirmed twice or unknown"
                tags = [m.delivery_tag]
            assert m.delivery_tag <= n, f"confirm for tag {m.delivery_tag} beyond {n} publishes"
            (acked if isinstance(m, commands.Basic.Ack) else nacked).extend(tags)
            pending.difference_update(tags)
        elif isinstance(m, (commands.Channel.Close, commands.Connection.Close)):
            pytest.fail(f"unexpected close {m!r}")
    return acked, nacked, frames


def _no_more_frames(raw, seconds=0.3):
    with pytest.raises(rawamqp.Timeout):
        f = raw.read_frame(timeout=seconds)
        pytest.fail(f"unexpected frame {f!r}")


# -- C1 ------------------------------------------------------------------------------------------
def test_confirm_select_numbers_publishes_from_one__C1(raw):
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q, exclusive=True), commands.Queue.DeclareOk)
    # publishes before confirm.select are not counted
    for i in range(3):
        raw.publish(1, "", q, b"before")
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    for i in range(10):
        raw.publish(1, "", q, f"m{i}".encode())
    acked, nacked, _ = _collect_confirms(raw, 10)
    assert sorted(acked) == list(range(1, 11)) and nacked == []
    _no_more_frames(raw)
    # a second confirm.select is harmless and does not restart the count
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    raw.publish(1, "", q, b"eleven")
    m = raw.expect(commands.Basic.Ack, channel=1)
    assert m.delivery_tag == 11


def test_confirm_select_nowait__C1(raw):
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q, exclusive=True), commands.Queue.DeclareOk)
    raw.send_method(1, commands.Confirm.Select(nowait=True))
    for i in range(5):
        raw.publish(1, "", q, b"x")
    acked, nacked, frames = _collect_confirms(raw, 5)
    assert not any(isinstance(f, commands.Confirm.SelectOk) for f in frames)
    assert sorted(acked) == [1, 2, 3, 4, 5] and nacked == []
    _no_more_frames(raw)


def test_confirm_counts_per_channel__C1(raw):
    q = unique("q")
    raw.open_channel(2)
    raw.rpc(1, commands.Queue.Declare(queue=q, exclusive=True), commands.Queue.DeclareOk)
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    raw.rpc(2, commands.Confirm.Select(), commands.Confirm.SelectOk)
    raw.publish(1, "", q, b"a")
    raw.publish(1, "", q, b"b")
    raw.publish(2, "", q, b"c")
    seen = {1: set(), 2: set()}
    while len(seen[1]) < 2 or len(seen[2]) < 1:
        ch, m = raw.read_frame()
        assert isinstance(m, commands.Basic.Ack), m
        if m.multiple:
            seen[ch].update(range(1, m.delivery_tag + 1))
        else:
            seen[ch].add(m.delivery_tag)
    assert seen == {1: {1, 2}, 2: {1}}


def test_confirms_with_pika_blocking_channel__C1(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), durable=True)
    ch.confirm_delivery()
    for i in range(20):
        # pika raises NackError/UnroutableError when the broker does not ack
        ch.basic_publish("", q, f"m{i}".encode(),
                         properties=pika.BasicProperties(delivery_mode=2))
    assert count(ch, q) == 20
    ch.queue_delete(q)


# -- C2 ------------------------------------------------------------------------------------------
def test_confirms_may_be_multiple__C2(raw):
    """Stream many publishes: every tag settled exactly once (a multiple ack covers all pending tags
    up to its tag), no nacks, and no confirm for a tag that was not published."""
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q, exclusive=True), commands.Queue.DeclareOk)
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    n = 500
    body = b"x" * 100
    frames = b"".join(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=q))
                      + rawamqp.content_frames(1, body) for _ in range(n))
    raw.send(frames)
    acked, nacked, got = _collect_confirms(raw, n)
    assert sorted(acked) == list(range(1, n + 1)) and nacked == []
    _no_more_frames(raw)
    ok = raw.rpc(1, commands.Queue.Declare(queue=q, passive=True), commands.Queue.DeclareOk)
    assert ok.message_count == n


# -- C3 ------------------------------------------------------------------------------------------
def test_confirm_channel_cannot_become_transactional__C3(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.tx_select()
    assert ei.value.reply_code == 406
    assert conn.is_open


def test_transactional_channel_cannot_enter_confirm_mode__C3(conn):
    ch = conn.channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as ei:
        ch.confirm_delivery()
    assert ei.value.reply_code == 406
    assert conn.is_open


# -- C4 ------------------------------------------------------------------------------------------
def test_unroutable_confirmed_immediately__C4(raw):
    x = unique("x")
    raw.rpc(1, commands.Exchange.Declare(exchange=x, exchange_type="direct", auto_delete=True),
            commands.Exchange.DeclareOk)
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    raw.publish(1, x, "nowhere", b"lost")                    # not mandatory: just acked
    raw.publish(1, "", unique("no-such-queue"), b"lost")     # default exchange, no queue
    acked, nacked, frames = _collect_confirms(raw, 2)
    assert sorted(acked) == [1, 2] and nacked == []
    assert not any(isinstance(f, commands.Basic.Return) for f in frames)


def test_mandatory_unroutable_returned_before_ack__C4(raw):
    x = unique("x")
    raw.rpc(1, commands.Exchange.Declare(exchange=x, exchange_type="topic", auto_delete=True),
            commands.Exchange.DeclareOk)
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    props = commands.Basic.Properties(message_id="mid-1", content_type="text/plain")
    raw.publish(1, x, "a.b", b"returned", properties=props, mandatory=True)
    first = raw.read_command()
    assert isinstance(first, rawamqp.Content), f"expected basic.return first, got {first!r}"
    ret = first.method
    assert isinstance(ret, commands.Basic.Return)
    assert ret.reply_code == 312 and ret.reply_text == "NO_ROUTE"
    assert ret.exchange == x and ret.routing_key == "a.b"
    assert first.body == b"returned" and first.properties.message_id == "mid-1"
    ch, ack = raw.read_frame()
    assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 1 and ch == 1


def test_mandatory_unroutable_with_pika_raises_unroutable__C4(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(UnroutableError) as ei:
        ch.basic_publish("amq.direct", unique("nobody"), b"x", mandatory=True)
    [msg] = ei.value.messages
    assert msg.method.reply_code == 312 and msg.body == b"x"


def test_mandatory_routable_not_returned__C4(raw):
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q, auto_delete=True), commands.Queue.DeclareOk)
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    raw.publish(1, "", q, b"ok", mandatory=True)
    ch, ack = raw.read_frame()
    assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 1
    _no_more_frames(raw)


# -- C6 ------------------------------------------------------------------------------------------
def test_reject_publish_overflow_nacks__C6(raw):
    q = unique("q")
    raw.rpc(1, commands.Queue.Declare(queue=q, exclusive=True, arguments={
        "x-max-length": 2, "x-overflow": "reject-publish"}), commands.Queue.DeclareOk)
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    for i in range(1, 5):
        raw.publish(1, "", q, f"m{i}".encode())
    acked, nacked, _ = _collect_confirms(raw, 4)
    assert sorted(acked) == [1, 2] and sorted(nacked) == [3, 4]
    ok = raw.rpc(1, commands.Queue.Declare(queue=q, passive=True), commands.Queue.DeclareOk)
    assert ok.message_count == 2
    # room again after a get: the next publish is acked
    raw.send_method(1, commands.Basic.Get(queue=q, no_ack=True))
    got = raw.read_command()
    assert got.body == b"m1"
    raw.publish(1, "", q, b"m5")
    ch, m = raw.read_frame()
    assert isinstance(m, commands.Basic.Ack) and m.delivery_tag == 5


def test_reject_publish_overflow_with_pika_raises_nack__C6(conn):
    ch = conn.channel()
    q = declare(ch, unique("q"), arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"first")
    with pytest.raises(NackError):
        ch.basic_publish("", q, b"second")
    assert [d.body for d in get_all(ch, q)] == [b"first"]


def test_reject_publish_nack_only_for_full_queue__C6(raw):
    """A message routed to a full reject-publish queue and to a queue with room is nacked
    (not every queue took responsibility), but the queue with room keeps its copy."""
    full, roomy, x = unique("q"), unique("q"), unique("x")
    raw.rpc(1, commands.Exchange.Declare(exchange=x, exchange_type="fanout", auto_delete=True),
            commands.Exchange.DeclareOk)
    raw.rpc(1, commands.Queue.Declare(queue=full, exclusive=True, arguments={
        "x-max-length": 0, "x-overflow": "reject-publish"}), commands.Queue.DeclareOk)
    raw.rpc(1, commands.Queue.Declare(queue=roomy, exclusive=True), commands.Queue.DeclareOk)
    raw.rpc(1, commands.Queue.Bind(queue=full, exchange=x), commands.Queue.BindOk)
    raw.rpc(1, commands.Queue.Bind(queue=roomy, exchange=x), commands.Queue.BindOk)
    raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    raw.publish(1, x, "", b"both")
    acked, nacked, _ = _collect_confirms(raw, 1)
    assert nacked == [1] and acked == []
    ok = raw.rpc(1, commands.Queue.Declare(queue=roomy, passive=True), commands.Queue.DeclareOk)
    assert ok.message_count == 1
