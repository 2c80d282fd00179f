"""Small helpers shared by the integration and fault tests (pika-level)."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pika
import pytest


def unique(prefix: str = "t") -> str:
    """A name no other test uses (queues, exchanges, vhosts, users)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.02, message: str = ""):
    """Poll predicate() until it returns a truthy value; returns that value or fails the test."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = predicate()
        except Exception as e:  # noqa: BLE001 - the predicate may race with the broker
            last = e
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message or predicate}: last={last!r}")
        time.sleep(interval)


def consume_single_active(conn, queue: str, tags) -> list:
    """Declare `queue` with x-single-active-consumer and consume from it with each of `tags`
    in turn, each on a channel of its own (the first is the active one, S1): the channels."""
    channels = []
    for tag in tags:
        ch = conn.channel()
        if not channels:
            ch.queue_declare(queue, arguments={"x-single-active-consumer": True})
        ch.basic_consume(queue, lambda *a: None, consumer_tag=tag)
        channels.append(ch)
    return channels


@dataclass
class Delivery:
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: pika.BasicProperties
    body: bytes


# queues declared through declare(), deleted when the module's broker fixture is torn down (this
# matters in external mode, where the broker outlives the test run)
CREATED_QUEUES: set[tuple[str, str]] = set()


def declare(ch, queue: str = "", **kw) -> str:
    """queue.declare; returns the queue name (server-named when queue='')."""
    name = ch.queue_declare(queue, **kw).method.queue
    if not kw.get("exclusive") and not kw.get("passive"):
        CREATED_QUEUES.add((ch.connection._impl.params.virtual_host, name))
    return name


def delete_created_queues(broker) -> None:
    """Best effort: delete the queues declare() created on this broker's default vhost."""
    mine = {q for vh, q in CREATED_QUEUES if vh == broker.vhost}
    CREATED_QUEUES.clear()
    if not mine:
        return
    try:
        conn = broker.connection()
    except Exception:  # noqa: BLE001
        return
    try:
        ch = conn.channel()
        for q in mine:
            try:
                ch.queue_delete(q)
            except Exception:  # noqa: BLE001 - e.g. closed by a 405; use a new channel
                ch = conn.channel()
    finally:
        safe_close(conn)


def count(ch, queue: str) -> int:
    """Ready messages in queue as declare-ok reports them (a passive declare)."""
    return ch.queue_declare(queue, passive=True).method.message_count


def consumer_count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.consumer_count


def count_in(conn, queue: str) -> int:
    """Passive declare on a throwaway channel of conn (so a 404 does not kill the test's channel)."""
    c = conn.channel()
    try:
        return count(c, queue)
    finally:
        if c.is_open:
            c.close()


def wait_count(conn, queue: str, expected: int, timeout: float = 5.0) -> None:
    """Wait until the queue holds `expected` ready messages."""
    wait_until(lambda: count_in(conn, queue) == expected, timeout,
               message=f"queue {queue} to hold {expected} ready messages")


def publish(ch, queue: str, bodies, exchange: str = "", **props) -> None:
    properties = pika.BasicProperties(**props) if props else None
    for b in bodies:
        ch.basic_publish(exchange, queue, b if isinstance(b, bytes) else str(b).encode(),
                         properties=properties)


def get(ch, queue: str, auto_ack: bool = False):
    """basic.get: a Delivery or None (get-empty)."""
    method, props, body = ch.basic_get(queue, auto_ack=auto_ack)
    if method is None:
        return None
    return Delivery("", method.delivery_tag, method.redelivered, method.exchange,
                    method.routing_key, props, body)


def get_all(ch, queue: str, auto_ack: bool = True, limit: int = 10000) -> list[Delivery]:
    out = []
    for _ in range(limit):
        d = get(ch, queue, auto_ack=auto_ack)
        if d is None:
            break
        out.append(d)
    return out


class Consumer:
    """A pika BlockingChannel consumer collecting deliveries in a list."""

    def __init__(self, conn, ch, queue: str, auto_ack: bool = False, **kw):
        self.conn = conn
        self.ch = ch
        self.queue = queue
        self.deliveries: list[Delivery] = []
        self.cancelled = False
        self.tag = ch.basic_consume(queue, self._on_message, auto_ack=auto_ack, **kw)

    def _on_message(self, ch, method, props, body):
        self.deliveries.append(Delivery(method.consumer_tag, method.delivery_tag,
                                        method.redelivered, method.exchange, method.routing_key,
                                        props, body))

    def pump(self, seconds: float = 0.05) -> None:
        self.conn.process_data_events(time_limit=seconds)

    def wait_for(self, n: int, timeout: float = 5.0) -> list[Delivery]:
        """Pump I/O until at least n deliveries arrived."""
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < n:
            if time.monotonic() >= deadline:
                pytest.fail(f"expected {n} deliveries on {self.queue}, got {len(self.deliveries)}")
            self.conn.process_data_events(time_limit=0.05)
        return self.deliveries

    def settle(self, quiet: float = 0.3) -> list[Delivery]:
        """Pump I/O for `quiet` seconds (to observe that nothing more arrives)."""
        deadline = time.monotonic() + quiet
        while time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.05)
        return self.deliveries

    def bodies(self) -> list[bytes]:
        return [d.body for d in self.deliveries]


def pump(conn, seconds: float = 0.2) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)


def safe_close(conn, timeout: float = 5.0) -> None:
    """Close a pika BlockingConnection without hanging: if the broker does not answer
    connection.close within `timeout`, the socket is shut down under pika so the close ends."""
    import socket
    import threading

    def _cut():
        try:
            conn._impl._transport._sock.shutdown(socket.SHUT_RDWR)
        except Exception:  # noqa: BLE001 - already gone
            pass

    timer = threading.Timer(timeout, _cut)
    timer.daemon = True
    timer.start()
    try:
        if conn.is_open:
            conn.close()
    except BaseException:  # noqa: BLE001 - includes a pytest-timeout failure during close
        pass
    finally:
        timer.cancel()
