"""Abrupt TCP loss (A7, E5): unacked deliveries of a vanished client are requeued and redelivered
with redelivered=true to another consumer; acked ones never come back; a half-sent message is
never enqueued."""
from __future__ import annotations

import socket
import struct
import time

import pytest
from pamqp import commands

import rawamqp
from amqp_helpers import Consumer, count_in, declare, get, get_all, publish, safe_close, unique, \
    wait_count, wait_until

pytestmark = pytest.mark.timeout(60)


def _pika_socket(conn) -> socket.socket:
    return conn._impl._transport._sock


def _rst(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer sees a TCP reset, nothing is flushed."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_pika_socket_shutdown_requeues_unacked__A7(broker):
    observer = broker.connection()
    victim = broker.connection()
    try:
        och = observer.channel()
        q = declare(och, unique("q"))
        publish(och, q, [b"m1", b"m2", b"m3", b"m4"])
        vch = victim.channel()
        vch.basic_qos(prefetch_count=10)
        cons = Consumer(victim, vch, q)
        cons.wait_for(4)
        vch.basic_ack(cons.deliveries[1].delivery_tag)    # m2 acked
        victim.process_data_events(time_limit=0.1)          # flush the ack
        _pika_socket(victim).shutdown(socket.SHUT_RDWR)     # the TCP connection is gone
        other = Consumer(observer, observer.channel(), q)
        other.wait_for(3, timeout=10)
        other.settle(0.3)
        assert sorted(d.body for d in other.deliveries) == [b"m1", b"m3", b"m4"]
        assert all(d.redelivered for d in other.deliveries)
    finally:
        safe_close(victim)
        safe_close(observer)


def test_raw_client_reset_requeues_unacked__A7(broker):
    observer = broker.connection()
    try:
        och = observer.channel()
        q = declare(och, unique("q"))
        publish(och, q, [b"a", b"b", b"c"])
        c = rawamqp.RawClient(broker.host, broker.port)
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.open_channel(2)
        c.rpc(1, commands.Basic.Consume(queue=q), commands.Basic.ConsumeOk)
        got = [c.read_command() for _ in range(3)]
        assert [g.body for g in got] == [b"a", b"b", b"c"]
        c.send_method(1, commands.Basic.Ack(delivery_tag=got[0].method.delivery_tag))
        c.rpc(2, commands.Basic.Qos(prefetch_count=0), commands.Basic.QosOk)  # ack has arrived
        _rst(c.sock)
        wait_count(observer, q, 2, timeout=10)
        got = get_all(och, q)
        assert [(d.body, d.redelivered) for d in got] == [(b"b", True), (b"c", True)]
    finally:
        safe_close(observer)


def test_reset_mid_frame_requeues_and_drops_partial_publish__A7(broker):
    observer = broker.connection()
    try:
        och = observer.channel()
        q = declare(och, unique("q"))
        publish(och, q, [b"held"])
        wait_count(observer, q, 1, timeout=10)  # (the get below comes on another connection)
        c = rawamqp.RawClient(broker.host, broker.port)
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.send_method(1, commands.Basic.Get(queue=q))
        held = c.read_command()
        assert held.body == b"held"
        body = b"x" * 1000
        stream = (rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=q))
                  + rawamqp.content_frames(1, body))
        c.send(stream[:-300])       # method, header and part of the body frame
        time.sleep(0.1)
        _rst(c.sock)
        wait_count(observer, q, 1, timeout=10)
        got = get_all(och, q)
        assert [(d.body, d.redelivered) for d in got] == [(b"held", True)]
        time.sleep(0.2)
        assert get(och, q) is None     # the half-sent message never appears
    finally:
        safe_close(observer)


def test_reset_with_no_ack_deliveries_requeues_nothing__A6(broker):
    observer = broker.connection()
    try:
        och = observer.channel()
        q = declare(och, unique("q"))
        publish(och, q, [b"1", b"2"])
        c = rawamqp.RawClient(broker.host, broker.port)
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.rpc(1, commands.Basic.Consume(queue=q, no_ack=True), commands.Basic.ConsumeOk)
        assert [c.read_command().body for _ in range(2)] == [b"1", b"2"]
        _rst(c.sock)
        time.sleep(0.5)
        assert count_in(observer, q) == 0
        publish(och, q, [b"3"])
        assert [d.body for d in get_all(och, q)] == [b"3"]
    finally:
        safe_close(observer)


def test_reset_of_confirm_publisher_loses_no_confirmed_message__E5(broker):
    """A publisher streaming in confirm mode vanishes: every message it got a basic.ack for is in
    the queue."""
    observer = broker.connection()
    try:
        q = declare(observer.channel(), unique("q"))
        c = rawamqp.RawClient(broker.host, broker.port)
        c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
        c.open_channel(1)
        c.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
        n = 200
        c.send(b"".join(rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=q))
                        + rawamqp.content_frames(1, str(i).encode()) for i in range(1, n + 1)))
        acked = set()
        deadline = time.monotonic() + 5
        while len(acked) < n // 2 and time.monotonic() < deadline:
            ch, f = c.read_frame()
            if isinstance(f, commands.Basic.Ack):
                acked.update(range(1, f.delivery_tag + 1) if f.multiple else [f.delivery_tag])
        _rst(c.sock)
        assert acked
        time.sleep(0.3)
        bodies = {int(d.body) for d in get_all(observer.channel(), q)}
        assert acked <= bodies
        assert bodies <= set(range(1, n + 1))
    finally:
        safe_close(observer)


def test_reset_with_confirms_in_flight_is_quiet__E5(broker):
    """A confirm-mode publisher of persistent messages resets its connection while the queue's
    confirms are still on their way (they wait for the group fsync): the confirms have nobody to
    go to and are dropped without an error in the node's log (it used to fill with
    ActorDeadError from channels writing to the gone connection's writer)."""
    if broker.log_path is None:
        pytest.skip("needs the node's log")
    observer = broker.connection()
    try:
        q = unique("q")
        observer.channel().queue_declare(q, durable=True)
        before = broker.log_path.read_text(errors="replace").count("Traceback")
        for _ in range(3):
            c = rawamqp.RawClient(broker.host, broker.port)
            c.handshake(user=broker.user, password=broker.password, vhost=broker.vhost)
            c.open_channel(1)
            c.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
            props = commands.Basic.Properties(delivery_mode=2)
            c.send(b"".join(
                rawamqp.method_frame(1, commands.Basic.Publish(exchange="", routing_key=q))
                + rawamqp.content_frames(1, b"x" * 100, props) for _ in range(2000)))
            _rst(c.sock)
        wait_until(lambda: count_in(observer, q) > 0, 5, message=f"messages in {q}")
        time.sleep(1.0)  # the group fsync and its confirms
        log = broker.log_path.read_text(errors="replace")
        assert log.count("Traceback") == before, log[-3000:]
    finally:
        safe_close(observer)
