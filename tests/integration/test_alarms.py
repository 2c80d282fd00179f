"""Memory and disk alarms (issue 12, RabbitMQ's alarms guide): above the memory high watermark
or below the disk free limit every publishing connection is blocked: connection.blocked is sent
to clients that announce the capability and their sockets are not read; connections that only
consume go on; heartbeats are not enforced on a blocked connection; once the alarm clears,
connection.unblocked and what was published arrives. Behaviour: R2.

The watermark is changed at run time with leveretctl, as rabbitmqctl set_vm_memory_high_watermark
does in RabbitMQ's own tests of this."""

from __future__ import annotations

import asyncio
import threading

import aio_pika
import pika

from amqp_helpers import wait_until
from conftest import Broker


def _blocked_events(conn: pika.BlockingConnection) -> list:
    events: list = []
    conn.add_on_connection_blocked_callback(
        lambda _c, frame: events.append(("blocked", frame.method.reason)))
    conn.add_on_connection_unblocked_callback(lambda _c, _f: events.append(("unblocked",)))
    return events


def _pump_until(conn, predicate, timeout=15.0):
    wait_until(lambda: (conn.process_data_events(0.05), predicate())[1], timeout=timeout)


def _ctl_pumping(broker, conn, *args):
    """leveretctl while `conn` keeps reading and sending heartbeats: a 1 s heartbeat
    connection left unserviced for a ctl's start-up (seconds on a loaded machine) is closed
    for missed heartbeats before the test gets to block it."""
    done = threading.Event()
    out = []
    worker = threading.Thread(target=lambda: (out.append(broker.ctl(*args)), done.set()))
    worker.start()
    while not done.is_set():
        conn.process_data_events(0.05)
    worker.join()
    return out[0]


def test_memory_alarm_blocks_publishers_and_lets_consumers_go_on__R2(tmp_path):
    broker = Broker.start_leveret(tmp_path)
    try:
        setup = broker.connection()
        sch = setup.channel()
        sch.queue_declare("work")
        sch.queue_declare("backlog")
        for i in range(5):
            sch.basic_publish("", "backlog", b"old%d" % i)
        pub = broker.connection()
        events = _blocked_events(pub)
        pch = pub.channel()
        pch.confirm_delivery()
        pch.basic_publish("", "work", b"before")  # confirmed: no alarm yet

        broker.ctl("set_vm_memory_high_watermark", "0.0000001")
        assert "memory resource limit alarm" in broker.ctl("status").stdout
        # a connection that has not published is not blocked (rabbit_reader's "blocking")
        consumer = broker.connection()
        cch = consumer.channel()
        got = [cch.basic_get("backlog", auto_ack=True)[2] for _ in range(5)]
        assert got == [b"old%d" % i for i in range(5)]  # consumers go on

        # the publish that meets the alarm is taken, then the socket is no longer read
        plain = pub.channel()  # no confirms: basic_publish only writes to the socket
        plain.basic_publish("", "work", b"during")
        _pump_until(pub, lambda: events == [("blocked", "low on memory")])
        plain.basic_publish("", "work", b"held")
        pub.process_data_events(0.5)
        assert sch.queue_declare("work", passive=True).method.message_count == 2

        broker.ctl("set_vm_memory_high_watermark", "0.4")
        _pump_until(pub, lambda: events == [("blocked", "low on memory"), ("unblocked",)])
        assert "(none)" in broker.ctl("status").stdout
        pch.basic_publish("", "work", b"after")  # confirmed again
        bodies = [cch.basic_get("work", auto_ack=True)[2] for _ in range(4)]
        assert bodies == [b"before", b"during", b"held", b"after"]
        for c in (pub, consumer, setup):
            c.close()
    finally:
        broker.stop()


def _block_with_a_publish(broker, pub, events, resource_reason):
    ch = pub.channel()  # no confirms: basic_publish only writes to the socket
    ch.basic_publish("", "work", b"trigger")
    _pump_until(pub, lambda: events == [("blocked", resource_reason)])
    return ch


def test_heartbeats_are_not_enforced_while_a_connection_is_blocked__R2_E4(tmp_path):
    broker = Broker.start_leveret(tmp_path)
    try:
        setup = broker.connection()
        setup.channel().queue_declare("work")
        pub = broker.connection(heartbeat=1)
        events = _blocked_events(pub)
        _ctl_pumping(broker, pub, "set_vm_memory_high_watermark", "absolute", "1")
        ch = _block_with_a_publish(broker, pub, events, "low on memory")
        # four heartbeat intervals with the socket unread: E4 would close it after two
        pub.process_data_events(4.0)
        assert pub.is_open
        _ctl_pumping(broker, pub, "set_vm_memory_high_watermark", "0.4")
        _pump_until(pub, lambda: events[-1:] == [("unblocked",)])
        ch.basic_publish("", "work", b"after")
        pub.process_data_events(2.5)  # two intervals, now read: heartbeats do arrive
        assert pub.is_open
        wait_until(lambda: setup.channel().queue_declare(
            "work", passive=True).method.message_count == 2, timeout=10)
        pub.close()
        setup.close()
    finally:
        broker.stop()


def test_disk_alarm_blocks_publishers_until_space_returns__R2(tmp_path):
    broker = Broker.start_leveret(tmp_path)
    try:
        setup = broker.connection()
        setup.channel().queue_declare("work")
        pub = broker.connection()
        events = _blocked_events(pub)
        broker.ctl("set_disk_free_limit", "1000000GB")  # more than any test machine has free
        assert "disk resource limit alarm" in broker.ctl("status").stdout
        _block_with_a_publish(broker, pub, events, "low on disk")
        broker.ctl("set_vm_memory_high_watermark", "absolute", "1")
        broker.ctl("set_disk_free_limit", "50MB")
        pub.process_data_events(0.5)  # memory still on: still blocked
        assert events == [("blocked", "low on disk")]
        broker.ctl("set_vm_memory_high_watermark", "0.4")
        _pump_until(pub, lambda: events[-1:] == [("unblocked",)])
        pub.close()
        setup.close()
    finally:
        broker.stop()


def test_aio_pika_publisher_waits_while_blocked_and_goes_on_after__R2(tmp_path, caplog):
    broker = Broker.start_leveret(tmp_path)

    async def run():
        conn = await aio_pika.connect(broker.url)
        ch = await conn.channel(publisher_confirms=True)
        q = await ch.declare_queue("aio-work")
        await ch.default_exchange.publish(aio_pika.Message(b"one"), "aio-work")
        broker.ctl("set_vm_memory_high_watermark", "absolute", "1")
        await ch.default_exchange.publish(aio_pika.Message(b"two"), "aio-work")  # meets it
        third = asyncio.ensure_future(
            ch.default_exchange.publish(aio_pika.Message(b"three"), "aio-work"))
        done, _ = await asyncio.wait([third], timeout=1.5)
        assert not done  # aiormq holds its writes after connection.blocked
        assert any("was blocked by" in r.getMessage() for r in caplog.records)
        broker.ctl("set_vm_memory_high_watermark", "0.4")
        await asyncio.wait_for(third, 15)
        got = []
        async with q.iterator(no_ack=True) as it:
            async for msg in it:
                got.append(msg.body)
                if len(got) == 3:
                    break
        assert got == [b"one", b"two", b"three"]
        await conn.close()

    try:
        with caplog.at_level("WARNING", logger="aiormq.connection"):
            asyncio.run(run())
    finally:
        broker.stop()
