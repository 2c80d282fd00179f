"""What the management API does as an AMQP client of its own node (publish, get, purge, the
aliveness test), as rabbitmq_management does through a direct connection: logged in as the
HTTP user, so AMQP's permission checks apply unchanged. Blocking; the listener runs these in
its thread pool.

Built on amqpclient/lean_connection.py's LeanConnection (the project's lean client over protocol/): one
short connection per request.
"""

from __future__ import annotations

import base64

from amqpclient import codec as codecs
from amqpclient.lean_connection import AMQPClosed, LeanConnection
from amqpclient.url import AMQPTarget
from protocol.properties import BasicProperties

ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
            "reject_requeue_false")
_CODEC = None


def _connect(host, port, user, password, vhost) -> LeanConnection:
    global _CODEC
    if _CODEC is None:
        _CODEC = codecs.load("protocol")
    conn = LeanConnection(AMQPTarget(host, port, user, password, vhost), _CODEC, timeout=15,
                          name="leveret-management").connect()
    conn.channel_open(1)
    return conn


def _wait_any(conn: LeanConnection, classes: tuple):
    """The next command on channel 1 of one of `classes` (a Command: method, properties,
    body); what else arrives stays in the backlog."""
    while True:
        for i, cmd in enumerate(conn.backlog):
            if cmd.channel == 1 and type(cmd.method) in classes:
                del conn.backlog[i]
                return cmd
        data = conn.sock.recv(262144)
        if not data:
            raise AMQPClosed("connection closed by the broker (EOF)")
        for cmd in conn._decode(data):
            conn._check_close(cmd)
            conn.backlog.append(cmd)


def publish(target: tuple, exchange: str, routing_key: str, properties: BasicProperties,
            body: bytes) -> bool:
    """POST /api/exchanges/{vhost}/{name}/publish: mandatory, confirmed; True when routed
    (no basic.return came before the confirm)."""
    conn = _connect(*target)
    M = conn.M
    try:
        conn.confirm_select(1)
        conn.sock.sendall(conn.codec.encode_method(1, M.BasicPublish(
            exchange=exchange, routing_key=routing_key, mandatory=True)) +
            _content(conn, properties.encode(), body))
        cmd = _wait_any(conn, (M.BasicReturn, M.BasicAck, M.BasicNack))
        if type(cmd.method) is M.BasicReturn:
            _wait_any(conn, (M.BasicAck, M.BasicNack))
            return False
        if type(cmd.method) is M.BasicNack:
            raise AMQPClosed("the broker could not take the message (basic.nack)", 500)
        return True
    finally:
        conn.close()


def _content(conn, props_raw: bytes, body: bytes) -> bytes:
    from protocol.frames import encode_content
    return encode_content(1, 60, props_raw, body, conn.frame_max)


def get(target: tuple, queue: str, count: int, ackmode: str) -> list:
    """POST /api/queues/{vhost}/{name}/get: up to `count` messages as (get-ok, properties,
    body), as rabbit_mgmt_wm_queue_get takes them: ack_requeue_false with basic.get no-ack
    (the queue counts them get_no_ack), the others acknowledging, then given back (the
    *_requeue_true modes) or dropped (reject_requeue_false) at once."""
    conn = _connect(*target)
    M = conn.M
    out = []
    no_ack = ackmode == "ack_requeue_false"
    try:
        last = 0
        for _ in range(count):
            conn.send_method(1, M.BasicGet(queue=queue, no_ack=no_ack))
            cmd = _wait_any(conn, (M.BasicGetOk, M.BasicGetEmpty))
            if type(cmd.method) is M.BasicGetEmpty:
                break
            last = cmd.method.delivery_tag
            out.append((cmd.method, cmd.properties, cmd.body or b""))
        if last and not no_ack:
            conn.send_method(1, M.BasicNack(delivery_tag=last, multiple=True,
                                            requeue=ackmode.endswith("requeue_true")))
        if last:
            conn.rpc(1, M.QueueDeclare(queue=queue, passive=True), M.QueueDeclareOk)
        return out
    finally:
        conn.close()


def purge(target: tuple, queue: str) -> int:
    conn = _connect(*target)
    try:
        return conn.queue_purge(1, queue)
    finally:
        conn.close()


def aliveness(target: tuple) -> None:
    """GET /api/aliveness-test/{vhost}: declare aliveness-test, publish to it, get it back."""
    conn = _connect(*target)
    M = conn.M
    try:
        conn.queue_declare(1, "aliveness-test")
        conn.sock.sendall(conn.codec.encode_method(1, M.BasicPublish(
            exchange="", routing_key="aliveness-test")) +
            _content(conn, BasicProperties().encode(), b"test_message"))
        conn.send_method(1, M.BasicGet(queue="aliveness-test", no_ack=True))
        cmd = _wait_any(conn, (M.BasicGetOk, M.BasicGetEmpty))
        if type(cmd.method) is M.BasicGetEmpty or cmd.body != b"test_message":
            raise AMQPClosed("aliveness test: the message did not come back", 500)
    finally:
        conn.close()


def message_json(get_ok, properties, body: bytes, encoding: str, truncate) -> dict:
    """One message of /get as rabbit_mgmt_wm_queue_get shows it."""
    payload = body if truncate is None else body[:int(truncate)]
    text = None
    if encoding == "auto":
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    props = {k: v for k, v in _properties(properties).items() if v is not None}
    return {"payload_bytes": len(body), "redelivered": get_ok.redelivered,
            "exchange": get_ok.exchange, "routing_key": get_ok.routing_key,
            # (none set: [], as rabbit_mgmt_format:basic_properties/1 answers an empty
            # property list)
            "message_count": get_ok.message_count, "properties": props or [],
            "payload": text if text is not None else base64.b64encode(payload).decode(),
            "payload_encoding": "string" if text is not None else "base64"}


_FIELDS = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
           "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
           "user_id", "app_id", "cluster_id")


def _properties(p) -> dict:
    if p is None:
        return {}
    out = {}
    for f in _FIELDS:
        v = getattr(p, "message_type" if f == "type" else f, None)
        if isinstance(v, (bytes, bytearray)):
            v = bytes(v).decode("utf-8", "replace")
        out[f] = v
    if out.get("headers"):
        out["headers"] = {k: (v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
                          for k, v in out["headers"].items()}
    return out


def properties_from_json(props: dict) -> BasicProperties:
    """The `properties` object of a publish request (RabbitMQ's names)."""
    unknown = [k for k in props if k not in _FIELDS]
    if unknown:
        raise ValueError(f"unknown message properties: {', '.join(unknown)}")
    kwargs = {("message_type" if k == "type" else k): v for k, v in props.items()}
    for k in ("delivery_mode", "priority", "timestamp"):
        if k in kwargs and kwargs[k] is not None:
            kwargs[k] = int(kwargs[k])
    return BasicProperties(**kwargs)
