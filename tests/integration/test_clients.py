"""Round trips with other client libraries: aio-pika (asyncio) and kombu (py-amqp transport)."""
from __future__ import annotations

import asyncio

import aio_pika
import kombu
import pytest

from amqp_helpers import count_in, unique, wait_count


def _run(coro, timeout: float = 20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# -- aio-pika ------------------------------------------------------------------------------------
def test_aio_pika_publish_consume_ack_confirm(broker, conn):
    qname = unique("q")

    async def main():
        connection = await aio_pika.connect(host=broker.host, port=broker.port, login=broker.user,
                                            password=broker.password,
                                            virtualhost=broker.vhost, timeout=5)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue(qname, durable=False)
            for i in range(5):
                confirmation = await channel.default_exchange.publish(
                    aio_pika.Message(f"m{i}".encode(), message_id=str(i),
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=qname)
                assert confirmation is not None   # basic.ack received (a nack raises)
            await channel.set_qos(prefetch_count=2)
            got = []
            async with queue.iterator() as it:
                async for message in it:
                    got.append((message.body, message.redelivered, message.message_id))
                    if len(got) == 1:
                        await message.reject(requeue=True)   # comes back redelivered
                        continue
                    await message.ack()
                    if len(got) == 6:
                        break
            return got

    got = _run(main())
    assert sorted(b for b, _, _ in got) == sorted([b"m0", b"m0", b"m1", b"m2", b"m3", b"m4"])
    assert [r for b, r, _ in got if b == b"m0"] == [False, True]
    wait_count(conn, qname, 0)
    conn.channel().queue_delete(qname)


def test_aio_pika_get_and_nack(broker, conn):
    qname = unique("q")

    async def main():
        connection = await aio_pika.connect(host=broker.host, port=broker.port, login=broker.user,
                                            password=broker.password,
                                            virtualhost=broker.vhost, timeout=5)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(qname, auto_delete=False)
            await channel.default_exchange.publish(aio_pika.Message(b"one"), routing_key=qname)
            await channel.default_exchange.publish(aio_pika.Message(b"two"), routing_key=qname)
            m1 = await queue.get(timeout=5)
            assert m1.body == b"one"
            await m1.nack(requeue=False)          # dropped
            m2 = await queue.get(timeout=5)
            assert m2.body == b"two"
            await m2.ack()
            assert await queue.get(fail=False) is None

    _run(main())
    assert count_in(conn, qname) == 0
    conn.channel().queue_delete(qname)


def test_aio_pika_returned_unroutable_mandatory__C4(broker):
    async def main():
        connection = await aio_pika.connect(host=broker.host, port=broker.port, login=broker.user,
                                            password=broker.password,
                                            virtualhost=broker.vhost, timeout=5)
        async with connection:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as ei:
                await channel.default_exchange.publish(aio_pika.Message(b"x"),
                                                       routing_key=unique("nobody"),
                                                       mandatory=True)
            return ei.value

    err = _run(main())
    assert err.message is not None


# -- kombu ---------------------------------------------------------------------------------------
def _kombu(broker, **kw):
    return kombu.Connection(hostname=broker.host, port=broker.port, userid=broker.user,
                            password=broker.password, virtual_host=broker.vhost,
                            transport="pyamqp", connect_timeout=5,
                            transport_options={"confirm_publish": True}, **kw)


def test_kombu_producer_confirm_consumer_manual_ack(broker, conn):
    xname, qname = unique("x"), unique("q")
    exchange = kombu.Exchange(xname, "direct", durable=False, auto_delete=True)
    queue = kombu.Queue(qname, exchange=exchange, routing_key="rk", durable=False)
    received = []
    with _kombu(broker) as kc:
        producer = kc.Producer()
        for i in range(3):
            # confirm_publish: publish waits for basic.ack (raises on nack)
            producer.publish({"n": i}, exchange=exchange, routing_key="rk", declare=[queue],
                             serializer="json", delivery_mode=2, retry=False)

        def on_message(body, message):
            received.append((body, message.delivery_info["redelivered"]))
            if body["n"] == 1 and not message.delivery_info["redelivered"]:
                message.requeue()
            else:
                message.ack()

        with kc.Consumer(queue, callbacks=[on_message], accept=["json"], prefetch_count=10):
            for _ in range(20):
                if len(received) >= 4:
                    break
                try:
                    kc.drain_events(timeout=1)
                except TimeoutError:
                    pass
    assert sorted(b["n"] for b, _ in received) == [0, 1, 1, 2]
    assert [r for b, r in received if b["n"] == 1] == [False, True]
    wait_count(conn, qname, 0)
    conn.channel().queue_delete(qname)


def test_kombu_simple_queue(broker, conn):
    qname = unique("q")
    with _kombu(broker) as kc:
        sq = kc.SimpleQueue(qname, queue_opts={"durable": False, "auto_delete": False})
        try:
            sq.put({"hello": "world"}, serializer="json")
            sq.put(b"raw-bytes", serializer=None, content_type="application/octet-stream",
                   content_encoding="binary")
            m1 = sq.get(block=True, timeout=5)
            assert m1.payload == {"hello": "world"}
            m1.ack()
            m2 = sq.get(block=True, timeout=5)
            assert m2.body == b"raw-bytes"
            m2.reject(requeue=True)
            m3 = sq.get(block=True, timeout=5)
            assert m3.body == b"raw-bytes" and m3.delivery_info["redelivered"]
            m3.ack()
            with pytest.raises(sq.Empty):
                sq.get(block=True, timeout=0.3)
        finally:
            sq.close()
    assert count_in(conn, qname) == 0
    conn.channel().queue_delete(qname)
