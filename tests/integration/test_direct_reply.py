"""Direct reply-to (S3) and sender-selected distribution, CC/BCC (S4), with real clients (pika,
aio-pika) over TCP. Two connections of one node land on different connection workers (the
acceptor deals them round robin), so a reply crosses processes."""
from __future__ import annotations

import asyncio
import base64

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from amqp_helpers import Consumer, declare, get, get_all, safe_close, unique, wait_count

PSEUDO = "amq.rabbitmq.reply-to"


@pytest.fixture
def two(broker):
    """(client connection, server connection)."""
    a, b = broker.connection(), broker.connection()
    try:
        yield a, b
    finally:
        safe_close(a)
        safe_close(b)


def _server_request(conn_b, queue):
    """The RPC server's side: the next request on `queue` (a Delivery)."""
    ch = conn_b.channel()
    d = None
    for _ in range(200):
        d = get(ch, queue, auto_ack=True)
        if d is not None:
            return ch, d
        conn_b.process_data_events(time_limit=0.02)
    pytest.fail("the request never reached the server queue")


# -- S3 ------------------------------------------------------------------------------------------
def test_rpc_round_trip_across_two_connections__S3(broker, two):
    a, b = two
    assert b._impl.server_capabilities.get("direct_reply_to") is True
    ca = a.channel()
    rpc = declare(ca, unique("rpc"))
    replies = Consumer(a, ca, PSEUDO, auto_ack=True)
    ca.basic_publish("", rpc, b"question",
                     pika.BasicProperties(reply_to=PSEUDO, correlation_id="c1"))
    cb, req = _server_request(b, rpc)
    name = req.properties.reply_to
    assert name.startswith(PSEUDO + ".") and req.properties.correlation_id == "c1"
    # the server may check that the client is still there (declare-ok, 1 consumer)
    ok = cb.queue_declare(name, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 1)
    cb.confirm_delivery()
    cb.basic_publish("", name, b"answer", pika.BasicProperties(correlation_id="c1"))
    [d] = replies.wait_for(1)
    assert (d.body, d.properties.correlation_id, d.routing_key, d.exchange,
            d.consumer_tag) == (b"answer", "c1", name, "", replies.tag)
    ca.queue_delete(rpc)


def test_consume_with_ack_refused__S3(conn):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_consume(PSEUDO, lambda *a: None, auto_ack=False)
        conn.process_data_events(time_limit=1)
    assert (e.value.reply_code, e.value.reply_text) == (
        406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")


def test_publish_with_reply_to_without_consumer_refused__S3(conn):
    ch = conn.channel()
    ch.basic_publish("", "anything", b"x", pika.BasicProperties(reply_to=PSEUDO))
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(unique("q"), exclusive=True)  # the next sync call sees the close
    assert (e.value.reply_code, e.value.reply_text) == (
        406, "PRECONDITION_FAILED - fast reply consumer does not exist")


def test_declare_pseudo_queue_passive__S3(conn):
    ok = conn.channel().queue_declare(PSEUDO, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (PSEUDO, 0, 1)


def test_reply_to_a_gone_consumer_is_dropped_or_returned__S3(broker, two):
    """RabbitMQ 3.10 (direct-reply-to.html, caveats): with the mandatory flag a reply name counts
    as no queue, so the reply is returned (312 NO_ROUTE); the confirm is an ack."""
    a, b = two
    ca = a.channel()
    rpc = declare(ca, unique("rpc"))
    Consumer(a, ca, PSEUDO, auto_ack=True)
    ca.basic_publish("", rpc, b"q", pika.BasicProperties(reply_to=PSEUDO))
    cb, req = _server_request(b, rpc)
    name = req.properties.reply_to
    ca.close()
    with pytest.raises(ChannelClosedByBroker) as e:
        cb.queue_declare(name, passive=True)
    assert (e.value.reply_code, e.value.reply_text) == (
        404, f"NOT_FOUND - no queue '{name}' in vhost '{broker.vhost}'")
    cb = b.channel()
    cb.confirm_delivery()
    cb.basic_publish("", name, b"dropped")  # acked, goes nowhere
    with pytest.raises(UnroutableError):
        cb.basic_publish("", name, b"returned", mandatory=True)
    a.channel().queue_delete(rpc)


def test_forged_reply_name_does_not_reach_the_consumer__S3(broker, two):
    a, b = two
    ca = a.channel()
    rpc = declare(ca, unique("rpc"))
    replies = Consumer(a, ca, PSEUDO, auto_ack=True)
    ca.basic_publish("", rpc, b"q", pika.BasicProperties(reply_to=PSEUDO))
    cb, req = _server_request(b, rpc)
    name = req.properties.reply_to
    forged = name.rpartition(".")[0] + ".AAAAAAAAAAAAAAAA"  # the channel's address, a wrong key
    other = PSEUDO + "." + base64.urlsafe_b64encode(
        b"tcp://192.0.2.1:9#ch/1/1/1").decode().rstrip("=") + ".AAAAAAAAAAAAAAAA"
    with pytest.raises(ChannelClosedByBroker) as e:
        b.channel().queue_declare(forged, passive=True)
    assert e.value.reply_code == 404
    cb.basic_publish("", forged, b"forged")
    cb.basic_publish("", other, b"elsewhere")
    cb.basic_publish("", name, b"real")
    [d] = replies.wait_for(1)
    assert d.body == b"real"  # sent after the forged ones: these went nowhere
    assert replies.settle(0.2)[-1].body == b"real" and len(replies.deliveries) == 1
    ca.queue_delete(rpc)


def test_aio_pika_client_over_direct_reply_to__S3(broker):
    rpc = unique("rpc")

    async def connect():
        return await aio_pika.connect(host=broker.host, port=broker.port, login=broker.user,
                                      password=broker.password, virtualhost=broker.vhost,
                                      timeout=5)

    async def main():
        server, client = await connect(), await connect()
        async with server, client:
            sch = await server.channel()
            requests = await sch.declare_queue(rpc, auto_delete=True)

            async def serve(message: aio_pika.abc.AbstractIncomingMessage):
                async with message.process():
                    await sch.default_exchange.publish(
                        aio_pika.Message(message.body.upper(),
                                         correlation_id=message.correlation_id),
                        routing_key=message.reply_to)

            await requests.consume(serve)
            cch = await client.channel()
            replies = await cch.declare_queue(PSEUDO, passive=True)
            futures: dict[str, asyncio.Future] = {}

            async def on_reply(message: aio_pika.abc.AbstractIncomingMessage):
                futures.pop(message.correlation_id).set_result(message.body)

            await replies.consume(on_reply, no_ack=True)
            results = []
            for i in range(5):
                fut = futures[str(i)] = asyncio.get_running_loop().create_future()
                await cch.default_exchange.publish(
                    aio_pika.Message(f"call {i}".encode(), correlation_id=str(i),
                                     reply_to=PSEUDO), routing_key=rpc)
                results.append(await fut)
            return results

    got = asyncio.run(asyncio.wait_for(main(), 20))
    assert got == [f"CALL {i}".encode() for i in range(5)]


# -- S4 ------------------------------------------------------------------------------------------
def test_cc_and_bcc_route_bcc_is_removed__S4(conn):
    ch = conn.channel()
    q1, q2, q3 = (declare(ch, unique("cc")) for _ in range(3))
    ch.confirm_delivery()
    ch.basic_publish("", q1, b"x", pika.BasicProperties(
        headers={"CC": [q2, q2, q1], "BCC": [q3, q2], "keep": "me"}), mandatory=True)
    for q in (q1, q2, q3):
        [d] = get_all(ch, q)  # each queue once
        assert d.routing_key == q1
        assert d.properties.headers == {"CC": [q2, q2, q1], "keep": "me"}
        ch.queue_delete(q)


def test_cc_to_a_topic_exchange_and_mandatory__S4(conn):
    ch = conn.channel()
    x = unique("x")
    ch.exchange_declare(x, "topic", auto_delete=True)
    qa, qb = declare(ch, unique("cc")), declare(ch, unique("cc"))
    ch.queue_bind(qa, x, "a.*")
    ch.queue_bind(qb, x, "b.#")
    ch.confirm_delivery()
    ch.basic_publish(x, "none", b"1", pika.BasicProperties(headers={"BCC": ["b.1.2"]}),
                     mandatory=True)  # routed by the BCC key: not returned
    with pytest.raises(UnroutableError):
        ch.basic_publish(x, "none", b"2", pika.BasicProperties(headers={"CC": ["c"]}),
                         mandatory=True)
    ch.basic_publish(x, "a.1", b"3", pika.BasicProperties(headers={"CC": ["b.x"]}))
    assert [d.body for d in get_all(ch, qa)] == [b"3"]
    assert [d.body for d in get_all(ch, qb)] == [b"1", b"3"]
    ch.queue_delete(qa)
    ch.queue_delete(qb)


def test_cc_not_an_array_refused__S4(conn):
    ch = conn.channel()
    ch.basic_publish("", "q", b"x", pika.BasicProperties(headers={"CC": "q2"}))
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(unique("q"), exclusive=True)
    assert (e.value.reply_code, e.value.reply_text) == (
        406, 'PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}')


def test_dead_lettering_keeps_cc__S4(conn):
    """rabbit_dead_letter:make_msg: without x-dead-letter-routing-key the copy is routed by the
    message's routing keys (its own and its CC keys), CC stays, x-death lists them all."""
    ch = conn.channel()
    dlx = unique("dlx")
    ch.exchange_declare(dlx, "direct", auto_delete=True)
    src = declare(ch, unique("src"), arguments={"x-dead-letter-exchange": dlx})
    by_rk, by_cc = declare(ch, unique("dl")), declare(ch, unique("dl"))
    ch.queue_bind(by_rk, dlx, src)
    ch.queue_bind(by_cc, dlx, "cc-key")
    ch.basic_publish("", src, b"x", pika.BasicProperties(
        headers={"CC": ["cc-key"], "BCC": ["bcc-key"]}))
    d = get(ch, src)
    ch.basic_reject(d.delivery_tag, requeue=False)
    for q in (by_rk, by_cc):  # two copies, to queues that may live on different workers
        wait_count(conn, q, 1)
    for q in (by_rk, by_cc):
        [m] = get_all(ch, q)
        h = m.properties.headers
        assert h["CC"] == ["cc-key"] and "BCC" not in h
        assert h["x-death"][0]["routing-keys"] == [src, "cc-key"]
        ch.queue_delete(q)
    ch.queue_delete(src)
