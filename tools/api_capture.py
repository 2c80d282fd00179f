"""Capture RabbitMQ 3.10's management API answers for a fixed set of objects, so Leveret's can be
compared with them field by field (tests/integration/test_management_compat.py).

    python -m tools.api_capture            # writes tests/data/rabbitmq-3.10-api/*.json
    python -m tools.api_capture --only queues,nodes    # only these answers' files

Starts Debian's rabbitmq-server on spare loopback ports with the rabbitmq_management plugin
(bench/refbroker.py: its own temp dir, enabled_plugins and config), creates the objects of
`scenario()` (a vhost limit, a user and its permissions, a policy, an operator policy, a topic
exchange, a queue with an argument, a binding, a connection with a confirm-mode channel that
published and a consumer that acked), waits until the statistics show the traffic, and saves
each answer of `ENDPOINTS` as NAME.json. The test runs the same scenario and the same reads
against Leveret.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pika

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "rabbitmq-3.10-api"
CONNECTION_NAME = "cmp-conn"
CONSUMER_TAG = "cmp-consumer"
STATS_INTERVAL_MS = 1000  # collect_statistics_interval of both brokers while capturing


class Http:
    """The management API as guest: (status, decoded JSON or None)."""

    def __init__(self, port: int, host: str = "127.0.0.1"):
        self.base = f"http://{host}:{port}"
        self.ctl = None  # the broker's ctl(*args), for what only it can do (an alarm)

    def __call__(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw else None

    def ok(self, method: str, path: str, body=None):
        status, answer = self(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {answer}")
        return answer


def scenario(http: Http, amqp_host: str, amqp_port: int) -> pika.BlockingConnection:
    """Create the objects through the API and AMQP; returns the connection (open, with its
    channel and consumer) for the caller to close after the capture."""
    http.ok("PUT", "/api/vhost-limits/%2F/max-queues", {"value": 1000})
    http.ok("PUT", "/api/users/cmp-user", {"password": "cmp-pw", "tags": "monitoring"})
    http.ok("PUT", "/api/permissions/%2F/cmp-user",
            {"configure": "^cmp-", "write": ".*", "read": ".*"})
    http.ok("PUT", "/api/policies/%2F/cmp-p", {"pattern": "^cmp-q$", "apply-to": "queues",
                                              "definition": {"max-length": 50}, "priority": 1})
    http.ok("PUT", "/api/operator-policies/%2F/cmp-op", {
        "pattern": "^cmp-", "apply-to": "queues", "definition": {"max-length": 80},
        "priority": 0})
    http.ok("PUT", "/api/exchanges/%2F/cmp-x", {"type": "topic", "durable": True})
    http.ok("PUT", "/api/queues/%2F/cmp-q", {"durable": True,
                                            "arguments": {"x-max-priority": 5}})
    http.ok("POST", "/api/bindings/%2F/e/cmp-x/q/cmp-q", {"routing_key": "a.#"})
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        amqp_host, amqp_port, client_properties={"connection_name": CONNECTION_NAME},
        heartbeat=0))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("cmp-x", "a.b", f"m{i}".encode())
    ch.basic_qos(prefetch_count=10)
    got = []
    ch.basic_consume("cmp-q", lambda c, m, p, b: got.append(m.delivery_tag),
                     consumer_tag=CONSUMER_TAG)
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    ch.basic_ack(got[-1], multiple=True)
    conn.process_data_events(time_limit=0.2)
    return conn


def _connection(http: Http):
    for c in http.ok("GET", "/api/connections"):
        if (c.get("client_properties") or {}).get("connection_name") == CONNECTION_NAME:
            return http.ok("GET", "/api/connections/" + urllib.parse.quote(c["name"], safe=""))
    return None


def _channel(http: Http):
    conn = _connection(http)
    for ch in http.ok("GET", "/api/channels"):
        if conn and ch["connection_details"]["name"] == conn["name"]:
            return http.ok("GET", "/api/channels/" + urllib.parse.quote(ch["name"], safe=""))
    return None


def _answer(http: Http, path: str, method: str = "GET", body=None) -> dict:
    """An answer whose status matters (a health check's 200 or 503): both, as
    {"http_status": N, "body": ...}."""
    status, answer = http(method, path, body)
    return {"http_status": status, "body": answer}


def _node(http: Http):
    return http.ok("GET", "/api/nodes/" + urllib.parse.quote(
        http.ok("GET", "/api/overview")["node"], safe=""))


def _amqp_port(http: Http) -> int:
    return next(x["port"] for x in http.ok("GET", "/api/overview")["listeners"]
                if x["protocol"] == "amqp")


def _topic_permissions(path: str):
    """Read after setting cmp-user's topic permission on cmp-x (once)."""
    def read(http: Http):
        http.ok("PUT", "/api/topic-permissions/%2F/cmp-user",
                {"exchange": "cmp-x", "write": "^a\\.", "read": ".*"})
        return http.ok("GET", path)
    return read


def _user_limits(path: str):
    def read(http: Http):
        http.ok("PUT", "/api/user-limits/cmp-user/max-connections", {"value": 10})
        http.ok("PUT", "/api/user-limits/cmp-user/max-channels", {"value": 20})
        return http.ok("GET", path)
    return read


GET_QUEUE = "cmp-get"
PUBLISHED = [  # what the publish endpoint sends to GET_QUEUE through the default exchange
    {"routing_key": GET_QUEUE, "payload": "hello", "payload_encoding": "string",
     "properties": {"delivery_mode": 2, "priority": 1, "content_type": "text/plain",
                    "headers": {"k": "v", "n": 7}, "message_id": "m-1", "timestamp": 1700000000,
                    "app_id": "cmp"}},
    {"routing_key": GET_QUEUE, "payload": "/wCAgQ==", "payload_encoding": "base64",
     "properties": {}},
]


def _publish(http: Http):
    """POST .../amq.default/publish: the queue is declared first; each message's answer."""
    http.ok("PUT", f"/api/queues/%2F/{GET_QUEUE}", {"durable": True})
    return [_answer(http, "/api/exchanges/%2F/amq.default/publish", "POST", m)
            for m in PUBLISHED]


def _publish_unroutable(http: Http):
    return _answer(http, "/api/exchanges/%2F/amq.default/publish", "POST", {
        "routing_key": "cmp-nowhere", "payload": "x", "payload_encoding": "string",
        "properties": {}})


def _get(http: Http):
    """POST .../get: the messages _publish sent, requeued, then taken for good."""
    first = _answer(http, f"/api/queues/%2F/{GET_QUEUE}/get", "POST", {
        "count": 5, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000})
    second = _answer(http, f"/api/queues/%2F/{GET_QUEUE}/get", "POST", {
        "count": 5, "ackmode": "ack_requeue_false", "encoding": "base64"})
    empty = _answer(http, f"/api/queues/%2F/{GET_QUEUE}/get", "POST", {
        "count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
    return {"requeued": first, "taken": second, "empty": empty}


def _alarm_checks(http: Http):
    """The alarm health checks while a memory alarm is on (set with the broker's ctl,
    `set_vm_memory_high_watermark`), and the node's answer then; the watermark is back to
    0.4 and the alarm cleared before this returns."""
    http.ctl("set_vm_memory_high_watermark", "0.0000001")
    try:
        deadline = time.monotonic() + 30
        while http("GET", "/api/health/checks/alarms")[0] != 503:
            if time.monotonic() > deadline:
                raise RuntimeError("no memory alarm after set_vm_memory_high_watermark")
            time.sleep(0.2)
        return {"alarms": _answer(http, "/api/health/checks/alarms"),
                "local_alarms": _answer(http, "/api/health/checks/local-alarms")}
    finally:
        http.ctl("set_vm_memory_high_watermark", "0.4")
        deadline = time.monotonic() + 30
        while http("GET", "/api/health/checks/alarms")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the memory alarm did not clear")
            time.sleep(0.2)


def _consumer(http: Http):
    for c in http.ok("GET", "/api/consumers"):
        if c["consumer_tag"] == CONSUMER_TAG:
            return c
    return None


# name -> how to read it (a path, or a function of Http for the ones found by a property)
ENDPOINTS = {
    "overview": "/api/overview",
    "queue": "/api/queues/%2F/cmp-q",
    "exchange": "/api/exchanges/%2F/cmp-x",
    "binding": lambda http: http.ok("GET", "/api/bindings/%2F/e/cmp-x/q/cmp-q")[0],
    "connection": _connection,
    "channel": _channel,
    "consumer": _consumer,
    "vhost": "/api/vhosts/%2F",
    "user": "/api/users/cmp-user",
    "permission": "/api/permissions/%2F/cmp-user",
    "policy": "/api/policies/%2F/cmp-p",
    "operator_policy": "/api/operator-policies/%2F/cmp-op",
    "vhost_limits": "/api/vhost-limits/%2F",
    "parameters": "/api/parameters",
    "global_parameters": "/api/global-parameters",
    "whoami": "/api/whoami",
    "cluster_name": "/api/cluster-name",
    "definitions": "/api/definitions",
    "vhost_definitions": "/api/definitions/%2F",
    # the lists: their items are not always the single object's (RabbitMQ leaves some
    # fields out of a list)
    "queues": "/api/queues",
    "exchanges": "/api/exchanges",
    "bindings": "/api/bindings",
    "connections": "/api/connections",
    "channels": "/api/channels",
    "vhosts": "/api/vhosts",
    "users": "/api/users",
    "health_alarms": "/api/health/checks/alarms",
    "nodes": "/api/nodes",
    "node": _node,
    # what follows changes objects the answers above show: read after them
    "health_local_alarms": lambda http: _answer(http, "/api/health/checks/local-alarms"),
    "health_port_listener": lambda http: _answer(
        http, f"/api/health/checks/port-listener/{_amqp_port(http)}"),
    "health_port_listener_missing": lambda http: _answer(
        http, "/api/health/checks/port-listener/1"),
    "health_protocol_listener": lambda http: _answer(
        http, "/api/health/checks/protocol-listener/amqp091"),
    "health_protocol_listener_missing": lambda http: _answer(
        http, "/api/health/checks/protocol-listener/stomp"),
    "health_virtual_hosts": lambda http: _answer(http, "/api/health/checks/virtual-hosts"),
    "health_quorum_critical": lambda http: _answer(
        http, "/api/health/checks/node-is-quorum-critical"),
    "topic_permissions": _topic_permissions("/api/topic-permissions"),
    "topic_permission": _topic_permissions("/api/topic-permissions/%2F/cmp-user"),
    "user_topic_permissions": _topic_permissions("/api/users/cmp-user/topic-permissions"),
    "vhost_topic_permissions": _topic_permissions("/api/vhosts/%2F/topic-permissions"),
    "user_limits": _user_limits("/api/user-limits"),
    "user_limit": _user_limits("/api/user-limits/cmp-user"),
    "vhost_limits_all": "/api/vhost-limits",
    "publish": _publish,
    "publish_unroutable": _publish_unroutable,
    "get": _get,
    "health_alarms_failed": _alarm_checks,
    "aliveness": "/api/aliveness-test/%2F",  # (last: it declares a queue of its own)
}


def ready(http: Http) -> bool:
    """The statistics show the traffic: the queue's and the channel's message_stats, the
    connection's byte counts."""
    q = http("GET", "/api/queues/%2F/cmp-q")[1] or {}
    ch = _channel(http) or {}
    conn = _connection(http) or {}
    return bool(q.get("message_stats", {}).get("publish")) and \
        bool(ch.get("message_stats", {}).get("ack")) and bool(conn.get("recv_oct")) and \
        _consumer(http) is not None


def capture(http: Http, timeout: float = 60.0, ctl=None) -> dict:
    """Every ENDPOINTS answer, once the statistics are in; `ctl(*args)` runs the broker's
    rabbitmqctl / leveretctl (the alarm health checks)."""
    http.ctl = ctl
    deadline = time.monotonic() + timeout
    while not ready(http):
        if time.monotonic() > deadline:
            raise RuntimeError("the statistics did not show the scenario's traffic")
        time.sleep(STATS_INTERVAL_MS / 1000 / 2)
    time.sleep(2 * STATS_INTERVAL_MS / 1000)  # two samples: rates between them
    out = {}
    for name, how in ENDPOINTS.items():
        out[name] = how(http) if callable(how) else http.ok("GET", how)
    return out


def main(argv: list | None = None) -> int:
    import argparse

    from bench.refbroker import RabbitMQNode, RefBrokerError
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated ENDPOINTS names: write only "
                   "these answers (the others' files stay as they are)")
    only = {n for n in p.parse_args(argv).only.split(",") if n}
    unknown = only - set(ENDPOINTS)
    if unknown:
        p.error(f"unknown endpoint(s): {', '.join(sorted(unknown))}")
    try:
        with RabbitMQNode(management_port=0, config=f"collect_statistics_interval = "
                                                    f"{STATS_INTERVAL_MS}\n") as rmq:
            http = Http(rmq.management_port)
            conn = scenario(http, rmq.host, rmq.port)
            try:
                answers = capture(http, ctl=rmq.ctl)
            finally:
                conn.close()
    except RefBrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    version = answers["overview"]["rabbitmq_version"]
    answers = {n: a for n, a in answers.items() if not only or n in only}
    for name, answer in answers.items():
        (OUT / f"{name}.json").write_text(json.dumps(answer, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(answers)} answers of {version} to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
