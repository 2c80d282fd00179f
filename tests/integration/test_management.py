"""The management HTTP API (actors/management/) against a real node: RabbitMQ's endpoints,
codes and JSON fields as rabbitmqadmin and scripts use them; what a write through the API does
is checked over AMQP with pika, and RabbitMQ's own rabbitmqadmin drives it when installed."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from amqp_helpers import consume_single_active
from conftest import Broker, free_port

RABBITMQADMIN = shutil.which("rabbitmqadmin")


class Api:
    def __init__(self, port: int, host: str = "127.0.0.1"):
        self.base = f"http://{host}:{port}"

    def __call__(self, method: str, path: str, body=None, user="guest", password="guest"):
        """(status, decoded JSON or None)"""
        data = None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": "application/json"}
        return self.send(method, path, data, headers, user, password)[:2]

    def send(self, method: str, path: str, data: bytes | None = None, headers=None,
             user="guest", password="guest") -> tuple[int, object, dict]:
        """(status, decoded JSON or None, response headers) of a request with this body and
        these headers as they are (a forged request's)."""
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers or {})
        if user is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                raw, status, got = r.read(), r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            raw, status, got = e.read(), e.code, dict(e.headers)
        return status, json.loads(raw) if raw else None, got


STATS_MS = 300  # collect_statistics_interval of the test node (RabbitMQ's is 5000)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    port, metrics_port = free_port(), free_port()
    while metrics_port == port:
        metrics_port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="leveret-", dir=tmp_path_factory.getbasetemp()))
    (folder / "leveret.toml").write_text(f"collect_statistics_interval = {STATS_MS}\n")
    broker = Broker.start_leveret(folder, "--management-port", str(port), "--config",
                                  str(folder / "leveret.toml"), "--prometheus-port",
                                  str(metrics_port))
    broker.http_port, broker.metrics_port = port, metrics_port
    try:
        yield broker
    finally:
        broker.stop()


def wait_for(what, fn, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(STATS_MS / 1000)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def http(node):
    return Api(node.http_port)


def test_basic_auth_and_tags(node, http):
    assert http("GET", "/api/whoami", user=None)[0] == 401
    status, body = http("GET", "/api/whoami", password="wrong")
    assert (status, body) == (401, {"error": "not_authorised", "reason": "Login failed"})
    node.ctl("add_user", "plain", "pw")  # no tags: may use AMQP, not the API
    assert http("GET", "/api/overview", user="plain", password="pw") == (
        401, {"error": "not_authorised", "reason": "Not management user"})
    assert http("GET", "/api/whoami") == (200, {"name": "guest", "tags": ["administrator"]})


def test_overview_names_the_node_listeners_and_totals(node, http):
    status, body = http("GET", "/api/overview")
    assert status == 200
    assert body["rabbitmq_version"] == "3.10.8" and body["node"] == body["cluster_name"]
    ports = {(x["protocol"], x["port"]) for x in body["listeners"]}
    assert ("amqp", node.port) in ports and ("http", node.http_port) in ports
    assert set(body["queue_totals"]) == {"messages", "messages_ready",
                                         "messages_unacknowledged"}


def test_queue_put_get_delete_as_amqp_sees_it(node, http):
    assert http("PUT", "/api/queues/%2F/mq1", {"durable": True,
                                                "arguments": {"x-max-length": 10}})[0] == 201
    assert http("PUT", "/api/queues/%2F/mq1", {"durable": True,
                                                "arguments": {"x-max-length": 10}})[0] == 204
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(3):
            ch.basic_publish("", "mq1", b"m%d" % i)
        ok = ch.queue_declare("mq1", durable=True, passive=True)
        assert ok.method.message_count == 3
    # (a queue's figures are those of its last sample, as RabbitMQ's: up to an interval old)
    q = wait_for("the queue's sample with 3 messages",
                 lambda: (r := http("GET", "/api/queues/%2F/mq1"))[0] == 200 and
                 r[1].get("messages") == 3 and r[1])
    assert (q["name"], q["vhost"], q["durable"], q["messages"], q["messages_ready"],
            q["arguments"], q["state"], q["type"]) == ("mq1", "/", True, 3, 3,
                                                       {"x-max-length": 10}, "running",
                                                       "classic")
    # a different definition: RabbitMQ's 406 text, as a 400
    status, body = http("PUT", "/api/queues/%2F/mq1", {"durable": False})
    assert status == 400 and "inequivalent arg 'durable'" in body["reason"]
    assert http("DELETE", "/api/queues/%2F/mq1")[0] == 204
    assert http("GET", "/api/queues/%2F/mq1")[0] == 404
    with node.connection() as c, pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        c.channel().queue_declare("mq1", passive=True)
    assert e.value.reply_code == 404


def test_exchange_and_binding_through_the_api_route_amqp_publishes(node, http):
    assert http("PUT", "/api/exchanges/%2F/mx", {"type": "topic", "durable": False})[0] == 201
    assert http("PUT", "/api/queues/%2F/mxq", {"durable": False})[0] == 201
    status, _ = http("POST", "/api/bindings/%2F/e/mx/q/mxq", {"routing_key": "a.#"})
    assert status == 201
    status, found = http("GET", "/api/bindings/%2F/e/mx/q/mxq")
    assert [(b["source"], b["destination"], b["routing_key"], b["properties_key"])
            for b in found] == [("mx", "mxq", "a.#", "a.%23")]
    assert {b["source"] for b in http("GET", "/api/queues/%2F/mxq/bindings")[1]} == {"", "mx"}
    with node.connection() as c:
        ch = c.channel()
        ch.basic_publish("mx", "a.b", b"routed")
        ch.basic_publish("mx", "b.a", b"dropped")
        method, _, body = ch.basic_get("mxq", auto_ack=True)
        assert body == b"routed" and ch.basic_get("mxq")[0] is None
    assert http("DELETE", "/api/bindings/%2F/e/mx/q/mxq/a.%23")[0] == 204
    assert http("GET", "/api/bindings/%2F/e/mx/q/mxq")[1] == []
    x = http("GET", "/api/exchanges/%2F/mx")[1]
    assert (x["type"], x["durable"], x["auto_delete"], x["internal"]) == ("topic", False,
                                                                         False, False)
    assert http("GET", "/api/exchanges/%2F/amq.default")[1]["name"] == ""
    assert http("DELETE", "/api/exchanges/%2F/mx")[0] == 204
    assert http("GET", "/api/exchanges/%2F/mx")[0] == 404


def test_a_binding_by_its_properties_key_as_rabbitmq_s_clients_send_it(node, http):
    """GET and DELETE of a binding by its properties_key as RabbitMQ's UI and rabbitmqadmin
    send it: the key percent-quoted once more ("a.%23" as "a.%2523"), which the server
    unquotes once (rabbit_mgmt_wm_binding); the key sent as it is still works."""
    assert http("PUT", "/api/queues/%2F/pkq", {"durable": False})[0] == 201
    for rk in ("a.#", "b c"):
        assert http("POST", "/api/bindings/%2F/e/amq.topic/q/pkq", {"routing_key": rk})[0] == 201
    keys = {b["routing_key"]: b["properties_key"]
            for b in http("GET", "/api/bindings/%2F/e/amq.topic/q/pkq")[1]}
    assert keys == {"a.#": "a.%23", "b c": "b%20c"}
    quoted = urllib.parse.quote(keys["a.#"], safe="")
    assert http("GET", f"/api/bindings/%2F/e/amq.topic/q/pkq/{quoted}")[1]["routing_key"] == \
        "a.#"
    assert http("DELETE", f"/api/bindings/%2F/e/amq.topic/q/pkq/{quoted}")[0] == 204
    assert http("DELETE", "/api/bindings/%2F/e/amq.topic/q/pkq/b%20c")[0] == 204  # as it is
    assert http("GET", "/api/bindings/%2F/e/amq.topic/q/pkq")[1] == []
    if RABBITMQADMIN is not None:
        base = [RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(node.http_port), "-u", "guest",
                "-p", "guest"]
        for args in (["declare", "binding", "source=amq.topic", "destination=pkq",
                      "routing_key=x.#"],
                     ["delete", "binding", "source=amq.topic", "destination_type=queue",
                      "destination=pkq", "properties_key=x.%23"]):
            res = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
            assert res.returncode == 0, res.stdout + res.stderr
        assert http("GET", "/api/bindings/%2F/e/amq.topic/q/pkq")[1] == []
    assert http("DELETE", "/api/queues/%2F/pkq")[0] == 204


def test_a_management_user_sees_only_its_vhosts_and_cannot_administer(node, http):
    assert http("PUT", "/api/vhosts/mv")[0] == 201
    assert http("PUT", "/api/users/mu", {"password": "pw", "tags": "management"})[0] == 201
    assert http("PUT", "/api/permissions/mv/mu", {"configure": ".*", "write": ".*",
                                                  "read": ".*"})[0] == 201
    as_mu = dict(user="mu", password="pw")
    assert [v["name"] for v in http("GET", "/api/vhosts", **as_mu)[1]] == ["mv"]
    assert http("PUT", "/api/queues/mv/muq", {}, **as_mu)[0] == 201
    assert {q["vhost"] for q in http("GET", "/api/queues", **as_mu)[1]} == {"mv"}
    assert http("GET", "/api/queues/%2F", **as_mu)[0] == 401
    assert http("GET", "/api/users", **as_mu) == (
        401, {"error": "not_authorised", "reason": "Not administrator user"})
    with node.connection(user="mu", password="pw", virtual_host="mv") as c:
        assert c.channel().queue_declare("muq", passive=True).method.message_count == 0
    assert http("DELETE", "/api/vhosts/mv")[0] == 204
    assert http("DELETE", "/api/users/mu")[0] == 204


def test_policies_and_list_parameters(node, http):
    for name in ("pa", "pb", "pc"):
        assert http("PUT", f"/api/queues/%2F/{name}", {"durable": False})[0] == 201
    assert http("PUT", "/api/policies/%2F/mirror-p", {
        "pattern": "^p[ab]$", "definition": {"ha-mode": "all"}, "priority": 1,
        "apply-to": "queues"})[0] == 201
    status, page = http("GET", "/api/queues/%2F?page=1&page_size=2&name=p&sort=name"
                               "&sort_reverse=true&columns=name,policy")
    assert status == 200
    assert page["items"] == [{"name": "pc", "policy": None}, {"name": "pb",
                                                               "policy": "mirror-p"}]
    assert (page["filtered_count"], page["page_count"]) == (3, 2)
    p = http("GET", "/api/policies/%2F/mirror-p")[1]
    assert (p["pattern"], p["apply-to"], p["priority"]) == ("^p[ab]$", "queues", 1)
    assert http("PUT", "/api/policies/%2F/bad", {"pattern": "x", "definition": {
        "no-such-key": 1}})[0] == 400
    for definition, text in (
            ({"ha-mode": "exactly", "ha-params": "banana"},
             'ha-mode="exactly" takes an integer, <<"banana">> given'),
            ({"ha-mode": "nodes", "ha-params": []}, 'ha-mode="nodes" list must be non-empty'),
            ({"ha-mode": "all", "ha-sync-mode": "eager"},
             'ha-sync-mode must be "manual" or "automatic", got <<"eager">>')):
        assert http("PUT", "/api/policies/%2F/bad-ha", {"pattern": "^p", "definition":
                                                       definition}) == (
            400, {"error": "bad_request", "reason": f"Validation failed\n\n{text}\n"})
    assert http("GET", "/api/policies/%2F/bad-ha")[0] == 404
    # a queue's mirrors synchronised on demand (ha-sync-mode manual): none behind here
    for action in ("sync", "cancel_sync"):
        assert http("POST", "/api/queues/%2F/pa/actions", {"action": action})[0] == 204
    assert http("POST", "/api/queues/%2F/pa/actions", {"action": "eject"}) == (
        400, {"error": "bad_request", "reason": 'unknown action "eject"'})
    assert http("POST", "/api/queues/%2F/no-such-q/actions", {"action": "sync"})[0] == 404
    assert http("DELETE", "/api/policies/%2F/mirror-p")[0] == 204
    assert http("GET", "/api/health/checks/alarms") == (200, {"status": "ok"})


def test_message_stats_come_from_the_queues_samples(node, http):
    """Counts and rates in message_stats are what the queue emitted (every
    collect_statistics_interval), not asked of it per request."""
    assert http("PUT", "/api/queues/%2F/statq", {"durable": False})[0] == 201
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("", "statq", b"x")
        for _ in range(5):
            method, _, _ = ch.basic_get("statq")
            ch.basic_ack(method.delivery_tag)
        ch.basic_get("statq", auto_ack=True)

    def settled():
        stats = http("GET", "/api/queues/%2F/statq")[1]["message_stats"]
        return stats if stats.get("ack") == 5 and stats.get("get_no_ack") == 1 else None
    stats = wait_for("the queue's sample with 5 acks and 1 get", settled)
    assert (stats["publish"], stats["get"], stats["deliver_get"]) == (20, 5, 6)
    assert set(stats["publish_details"]) == {"rate"}
    overview = wait_for("the channel's publishes in the overview", lambda: (lambda o: o if o.get(
        "publish", 0) >= 20 else None)(http("GET", "/api/overview")[1]["message_stats"]))
    assert "ack_details" in overview
    # quiet for two intervals: rates fall to 0
    wait_for("the publish rate to fall to 0", lambda: http(
        "GET", "/api/queues/%2F/statq")[1]["message_stats"]["publish_details"] == {"rate": 0.0})


def test_a_quiet_queue_samples_again_when_a_message_comes(node, http):
    """A queue with nothing new over an interval stops its statistics timer (as RabbitMQ's
    hibernating queues stop emitting); the next message starts it again."""
    assert http("PUT", "/api/queues/%2F/quietq", {"durable": False})[0] == 201
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "quietq", b"x")
        wait_for("the first sample", lambda: http("GET", "/api/queues/%2F/quietq")[1].get(
            "messages") == 1)
        time.sleep(4 * STATS_MS / 1000)  # quiet: its timer is disarmed by now
        for _ in range(3):
            ch.basic_publish("", "quietq", b"x")
        stats = wait_for("a sample after the quiet spell", lambda: (lambda q: q if q.get(
            "messages") == 4 else None)(http("GET", "/api/queues/%2F/quietq")[1]))
    assert stats["message_stats"]["publish"] == 4


def test_lists_answer_from_the_samples_while_no_queue_could_answer(node, http):
    """Issue 14 item 1: the queue figures of every list come from what the queues emit every
    collect_statistics_interval, never from asking each queue per request. With every queue
    worker stopped (SIGSTOP: no queue can answer anything), the queue lists, a single queue,
    the overview, a vhost and a Prometheus scrape still answer with each queue's depth from
    its last sample and the queues running (a list that asked each queue would wait out
    list_queues' time-out and list them without counts)."""
    want = {f"frozen-{i}": i % 3 + 1 for i in range(40)}
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for name, n in want.items():
            ch.queue_declare(name)
            for _ in range(n):
                ch.basic_publish("", name, b"x")
    wait_for("every queue's sample", lambda: {
        q["name"]: q.get("messages") for q in http("GET", "/api/queues/%2F")[1]
        if q["name"] in want} == want)
    pids = node.queue_worker_pids()
    assert pids
    for pid in pids.values():
        os.kill(pid, signal.SIGSTOP)
    try:
        listed = {q["name"]: q for q in http("GET", "/api/queues")[1]}
        assert {n: listed[n]["messages"] for n in want} == want
        assert {listed[n]["state"] for n in want} == {"running"}
        paged = http("GET", "/api/queues/%2F?page=1&page_size=100&name=frozen-")[1]
        assert paged["filtered_count"] == len(want)
        assert http("GET", "/api/queues/%2F/frozen-2")[1]["messages"] == 3
        total = sum(want.values())
        assert http("GET", "/api/overview")[1]["queue_totals"]["messages"] >= total
        assert http("GET", "/api/vhosts/%2F")[1]["messages"] >= total
        per = scrape(node, "/metrics/per-object")
        assert per[("rabbitmq_queue_messages", (("queue", "frozen-2"), ("vhost", "/")))] == 3
    finally:
        for pid in pids.values():
            os.kill(pid, signal.SIGCONT)
    for name in want:
        assert http("DELETE", f"/api/queues/%2F/{name}")[0] == 204


def test_head_message_timestamp_and_disk_reads_and_writes(tmp_path):
    """Issue 14: a queue's head_message_timestamp (the timestamp property of its head
    message, null when it has none) and the messages its storage wrote and read back
    (disk_writes / disk_reads, rabbit_variable_queue's counts): in the queue's JSON (the
    timestamp), the overview's message_stats (both counts with their rates, as RabbitMQ
    3.10's; a queue's JSON has neither, as 3.10's), Prometheus' per-object
    rabbitmq_queue_disk_{reads,writes}_total and rabbitmq_queue_head_message_timestamp, and
    `leveretctl list_queues`. A queue that pages (queue_page_bytes) writes what passes the
    mark to its index and reads it back as consumers take it."""
    port, metrics_port = free_port(), free_port()
    (tmp_path / "leveret.toml").write_text(f"collect_statistics_interval = {STATS_MS}\n"
                                           "queue_page_bytes = 8192\nqueue_page_size = 4\n")
    broker = Broker.start_leveret(tmp_path, "--management-port", str(port), "--config",
                                  str(tmp_path / "leveret.toml"), "--prometheus-port",
                                  str(metrics_port))
    broker.http_port, broker.metrics_port = port, metrics_port
    http = Api(port)
    labels = (("queue", "diskq"), ("vhost", "/"))
    try:
        with broker.connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("diskq")
            q = wait_for("diskq's first sample", lambda: (
                r := http("GET", "/api/queues/%2F/diskq")[1]) and "messages" in r and r)
            assert q["head_message_timestamp"] is None  # empty: null, as RabbitMQ 3.10's
            for i in range(60):  # 60 KB of bodies: past the 8 KB mark they go to the index
                ch.basic_publish("", "diskq", b"x" * 1024, pika.BasicProperties(
                    timestamp=1700000000 + i))
            q = wait_for("the sample after 60 publishes", lambda: (
                r := http("GET", "/api/queues/%2F/diskq")[1]).get("messages") == 60 and r)
            assert q["head_message_timestamp"] == 1700000000  # the head's, an int (seconds)
            assert "disk_writes" not in q and "disk_reads" not in q
            # where the messages are: the first 8 KB in memory, the rest in the index only
            written = q["messages_paged_out"]
            assert 0 < written < 60
            assert (q["message_bytes"], q["message_bytes_ready"],
                    q["message_bytes_unacknowledged"]) == (60 * 1024, 60 * 1024, 0)
            assert (q["messages_ram"], q["messages_ready_ram"], q["message_bytes_ram"],
                    q["message_bytes_paged_out"]) == (60 - written, 60 - written,
                                                      (60 - written) * 1024, written * 1024)
            # each paged message written once (at the backing queue's next sync)
            ms = wait_for("the overview's disk_writes", lambda: (
                o := http("GET", "/api/overview")[1]["message_stats"]).get(
                    "disk_writes") == written and o)
            assert isinstance(ms["disk_writes_details"]["rate"], float)
            assert isinstance(ms["disk_reads"], int)
            per = scrape(broker, "/metrics/per-object")
            assert per[("rabbitmq_queue_disk_writes_total", labels)] == written
            assert per[("rabbitmq_queue_messages_paged_out", labels)] == written
            assert per[("rabbitmq_queue_messages_bytes", labels)] == 60 * 1024
            assert per[("rabbitmq_queue_head_message_timestamp", labels)] == 1700000000
            detailed = scrape(broker, "/metrics/detailed?family=queue_metrics")
            assert detailed[("rabbitmq_queue_disk_reads_total", labels)] == 0
            table = broker.ctl("list_queues", "name", "head_message_timestamp", "disk_reads",
                               "disk_writes").stdout.splitlines()
            assert f"diskq\t1700000000\t0\t{written}" in table
            assert json.loads(broker.ctl("list_queues", "name", "messages_paged_out",
                                         "--formatter", "json").stdout) == [
                {"name": "diskq", "messages_paged_out": written}]
            # a consumer takes everything: what was paged out is read back, once each
            got = []
            ch.basic_consume("diskq", lambda c_, m, p, b: got.append(b), auto_ack=True)
            while len(got) < 60:
                c.process_data_events(time_limit=0.1)
        per = wait_for("every written message read back", lambda: (
            p := scrape(broker, "/metrics/per-object")).get(
                ("rabbitmq_queue_disk_reads_total", labels)) == written and p)
        assert per[("rabbitmq_queue_disk_writes_total", labels)] == written
        assert ("rabbitmq_queue_head_message_timestamp", labels) not in per  # empty: none
        q = wait_for("the emptied queue's sample", lambda: (
            r := http("GET", "/api/queues/%2F/diskq")[1]).get("messages") == 0 and r)
        assert q["head_message_timestamp"] is None
        assert http("GET", "/api/overview")[1]["message_stats"]["disk_reads"] == written
        table = broker.ctl("list_queues", "name", "head_message_timestamp").stdout
        assert "diskq\t\n" in table + "\n"  # no head: empty, as rabbitmqctl's ''
    finally:
        broker.stop()


def test_persistent_messages_in_the_api_prometheus_and_leveretctl(tmp_path):
    """Issue 14: a durable queue's persistent messages (rabbit_variable_queue's
    persistent_count: delivery mode 2 in a durable queue; transient ones and a transient
    queue's are not) in memory and paged out: the queue's messages_persistent and
    message_bytes_persistent, rabbitmq_prometheus' rabbitmq_queue_messages_persistent and
    rabbitmq_queue_messages_persistent_bytes (per object, aggregated, queue_metrics family)
    and `leveretctl list_queues`; after a restart the recovered ones, then none once
    consumed (the previous run's transient ones dropped as they are read back)."""
    port, metrics_port = free_port(), free_port()
    (tmp_path / "leveret.toml").write_text(f"collect_statistics_interval = {STATS_MS}\n"
                                           "queue_page_bytes = 8192\nqueue_page_size = 4\n")
    args = ("--management-port", str(port), "--config", str(tmp_path / "leveret.toml"),
            "--prometheus-port", str(metrics_port))
    broker = Broker.start_leveret(tmp_path, *args)
    broker.metrics_port = metrics_port
    http = Api(port)
    labels = (("queue", "persq"), ("vhost", "/"))
    try:
        with broker.connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("persq", durable=True)
            ch.queue_declare("transq", durable=False)
            for i in range(30):  # 30 KB: past the 8 KB mark most are paged out
                ch.basic_publish("", "persq", b"p" * 1024,
                                 pika.BasicProperties(delivery_mode=2))
                ch.basic_publish("", "persq", b"t" * 100)
                ch.basic_publish("", "transq", b"x", pika.BasicProperties(delivery_mode=2))
        q = wait_for("persq's sample", lambda: (
            r := http("GET", "/api/queues/%2F/persq")[1]).get("messages") == 60 and r)
        assert q["messages_paged_out"] > 0
        assert (q["messages_persistent"], q["message_bytes_persistent"]) == (30, 30 * 1024)
        t = wait_for("transq's sample", lambda: (
            r := http("GET", "/api/queues/%2F/transq")[1]).get("messages") == 30 and r)
        assert (t["messages_persistent"], t["message_bytes_persistent"]) == (0, 0)
        per = scrape(broker, "/metrics/per-object")
        assert per[("rabbitmq_queue_messages_persistent", labels)] == 30
        assert per[("rabbitmq_queue_messages_persistent_bytes", labels)] == 30 * 1024
        assert scrape(broker, "/metrics")[("rabbitmq_queue_messages_persistent", ())] == 30
        detailed = scrape(broker, "/metrics/detailed?family=queue_metrics")
        assert detailed[("rabbitmq_queue_messages_persistent", labels)] == 30
        assert {"name": "persq", "messages_persistent": 30,
                "message_bytes_persistent": 30 * 1024} in json.loads(broker.ctl(
                    "list_queues", "name", "messages_persistent", "message_bytes_persistent",
                    "--formatter", "json").stdout)
        broker.stop()
        broker = Broker.start_leveret(tmp_path, *args, port=broker.port)  # the same node
        broker.metrics_port = metrics_port
        q = wait_for("persq recovered", lambda: (
            r := http("GET", "/api/queues/%2F/persq")[1]).get("messages_persistent") and r)
        # what the index holds is persistent, but for the transient messages it paged out in
        # the previous run: counted (in `messages` too) until they are read back and dropped
        assert 30 <= q["messages_persistent"] == q["messages"] < 60
        assert q["message_bytes_persistent"] >= 30 * 1024
        with broker.connection() as c:
            ch = c.channel()
            got = []
            ch.basic_consume("persq", lambda c_, m, p, b: got.append(b), auto_ack=True)
            while len(got) < 30:
                c.process_data_events(time_limit=0.1)
        wait_for("no persistent message left", lambda: (
            r := http("GET", "/api/queues/%2F/persq")[1]).get("messages") == 0 and
            (r["messages_persistent"], r["message_bytes_persistent"]) == (0, 0))
    finally:
        broker.stop()


def test_connections_channels_and_consumers_and_closing_one(node, http):
    assert http("PUT", "/api/queues/%2F/connq", {"durable": False})[0] == 201
    c = node.connection(client_properties={"connection_name": "mgmt-test"})
    try:
        ch = c.channel()
        ch.basic_qos(prefetch_count=7)
        ch.confirm_delivery()
        ch.basic_consume("connq", lambda *a: None, consumer_tag="ctag-1")

        def mine():
            return [x for x in http("GET", "/api/connections")[1]
                    if x["client_properties"].get("connection_name") == "mgmt-test"]
        conn = wait_for("the connection in /api/connections", mine)[0]
        assert (conn["user"], conn["vhost"], conn["protocol"], conn["state"], conn["node"]) \
            == ("guest", "/", "AMQP 0-9-1", "running", http("GET", "/api/overview")[1]["node"])
        assert conn["name"].endswith(f"-> 127.0.0.1:{node.port}") and conn["channels"] == 1
        def channels():  # (a sample may predate the consume: the next one has it)
            return [(x["number"], x["prefetch_count"], x["confirm"], x["consumer_count"])
                    for x in http("GET", "/api/connections/" +
                                  urllib.parse.quote(conn["name"], safe="") + "/channels")[1]]
        wait_for("the channel's sample with its consumer", lambda: channels() == [(1, 7, True, 1)])
        consumers = wait_for("the consumer in /api/consumers", lambda: [
            x for x in http("GET", "/api/consumers/%2F")[1] if x["consumer_tag"] == "ctag-1"])
        assert consumers[0]["queue"] == {"name": "connq", "vhost": "/"}
        assert consumers[0]["channel_details"]["connection_name"] == conn["name"]
        status, _ = http("DELETE", "/api/connections/" + urllib.parse.quote(conn["name"],
                                                                           safe=""))
        assert status == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
            c.process_data_events(time_limit=10)
            c.process_data_events(time_limit=10)
        assert (e.value.reply_code, e.value.reply_text) == (
            320, "CONNECTION_FORCED - Closed via management plugin")
        wait_for("the connection gone from /api/connections", lambda: not mine())
    finally:
        if c.is_open:
            c.close()


@pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin is not installed "
                    "(apt-get install rabbitmq-server)")
def test_rabbitmqadmin_lists_declares_and_deletes(node):
    def admin(*args: str) -> str:
        res = subprocess.run([RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(node.http_port),
                              "-u", "guest", "-p", "guest", "-f", "raw_json", *args],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout

    admin("declare", "queue", "name=adminq", "durable=false")
    admin("declare", "exchange", "name=adminx", "type=fanout")
    admin("declare", "binding", "source=adminx", "destination=adminq")
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("adminx", "", b"via admin's binding")
    admin("publish", "routing_key=adminq", "payload=by rabbitmqadmin")
    got = json.loads(admin("get", "queue=adminq", "count=2"))
    assert [m["payload"] for m in got] == ["via admin's binding", "by rabbitmqadmin"]
    # get requeues (the list shows the queue's last sample: wait for the one after the get)
    wait_for("adminq's sample with 2 messages", lambda: {
        q["name"]: q for q in json.loads(admin("list", "queues"))}["adminq"].get("messages") == 2)
    assert any(b["source"] == "adminx" for b in json.loads(admin("list", "bindings")))
    admin("delete", "queue", "name=adminq")
    admin("delete", "exchange", "name=adminx")
    assert "adminq" not in {q["name"] for q in json.loads(admin("list", "queues"))}


def scrape(node, path: str) -> dict:
    """{(metric sample name, labels as a sorted tuple): value} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}{path}", timeout=20) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_prometheus_channel_messages_unacked_per_channel__A2(node, http):
    """rabbitmq_channel_messages_unacked: the deliveries a channel holds unacked, labelled by
    its channel per object; they go once acked."""
    with node.connection(client_properties={"connection_name": "unacked-prom"}) as c:
        ch = c.channel()
        ch.queue_declare("unacked-prom-q")
        for i in range(3):
            ch.basic_publish("", "unacked-prom-q", b"u%d" % i)
        tags = []
        ch.basic_consume("unacked-prom-q", lambda c_, m, p, b: tags.append(m.delivery_tag))
        wait_for("3 deliveries", lambda: c.process_data_events(0.1) or len(tags) == 3)
        conn = wait_for("the connection", lambda: [
            x["name"] for x in http("GET", "/api/connections")[1]
            if x["client_properties"].get("connection_name") == "unacked-prom"])[0]
        key = ("rabbitmq_channel_messages_unacked",
               (("channel", f"{conn} (1)"), ("vhost", "/")))
        wait_for("3 unacked on the channel", lambda: scrape(
            node, "/metrics/per-object").get(key) == 3)
        assert scrape(node, "/metrics")[("rabbitmq_channel_messages_unacked", ())] >= 3
        ch.basic_ack(tags[-1], multiple=True)
        wait_for("none unacked once acked", lambda: c.process_data_events(0.1) or scrape(
            node, "/metrics/per-object").get(key) == 0)


def _dead_lettered(node) -> dict:
    """(reason, strategy) -> the classic queues' rabbitmq_global_messages_dead_lettered_*."""
    return {(name[len("rabbitmq_global_messages_dead_lettered_"):-len("_total")],
             dict(labels)["dead_letter_strategy"]): v
            for (name, labels), v in scrape(node, "/metrics").items()
            if name.startswith("rabbitmq_global_messages_dead_lettered_") and
            dict(labels)["queue_type"] == "rabbit_classic_queue"}


def test_prometheus_dead_lettered_counts_by_reason_and_strategy__A3_S6(node, http):
    """Each way a message dies, counted where the queue decides it: expired and maxlen
    to a dead-letter exchange (at_most_once), rejected and past its delivery limit without
    one (disabled)."""
    before = _dead_lettered(node)
    assert set(before) == {(r, s) for r in ("expired", "rejected", "maxlen", "delivery_limit")
                           for s in ("disabled", "at_most_once")}
    with node.connection() as c:
        ch = c.channel()
        ch.exchange_declare("dl-prom-x", "fanout")
        ch.queue_declare("dl-prom-target")
        ch.queue_bind("dl-prom-target", "dl-prom-x")
        ch.queue_declare("dl-prom-ttl", arguments={"x-message-ttl": 1,
                                                   "x-dead-letter-exchange": "dl-prom-x"})
        ch.queue_declare("dl-prom-max", arguments={"x-max-length": 1,
                                                   "x-dead-letter-exchange": "dl-prom-x"})
        ch.queue_declare("dl-prom-rej")
        ch.queue_declare("dl-prom-limit", arguments={"x-delivery-limit": 0})
        for q, n in (("dl-prom-ttl", 2), ("dl-prom-max", 3), ("dl-prom-rej", 1),
                     ("dl-prom-limit", 1)):
            for i in range(n):
                ch.basic_publish("", q, b"d%d" % i)
        got = wait_for("the message to reject", lambda: ch.basic_get("dl-prom-rej")[0])
        ch.basic_reject(got.delivery_tag, requeue=False)
        got = wait_for("the message past its limit", lambda: ch.basic_get("dl-prom-limit")[0])
        ch.basic_nack(got.delivery_tag, requeue=True)
        expected = {("expired", "at_most_once"): 2, ("maxlen", "at_most_once"): 2,
                    ("rejected", "disabled"): 1, ("delivery_limit", "disabled"): 1}

        def grown():
            now = _dead_lettered(node)
            return {k: now[k] - before[k] for k in now if now[k] != before[k]}
        wait_for("the dead-lettered counts", lambda: grown() == expected)


def test_prometheus_metrics_with_rabbitmq_prometheus_names(node, http):
    assert http("PUT", "/api/queues/%2F/promq", {"durable": False})[0] == 201
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for _ in range(4):
            ch.basic_publish("", "promq", b"x")
        method, _, _ = ch.basic_get("promq")  # one unacked while we scrape
        labels = (("queue", "promq"), ("vhost", "/"))
        per = wait_for("the queue's sample after the publishes and the get", lambda: (
            p := scrape(node, "/metrics/per-object")).get(
                ("rabbitmq_queue_messages_published_total", labels)) == 4 and p.get(
                    ("rabbitmq_queue_messages_unacked", labels)) == 1 and p)
        assert per[("rabbitmq_queue_messages_ready", labels)] == 3
        assert per[("rabbitmq_queue_messages_unacked", labels)] == 1
        assert per[("rabbitmq_queue_messages_published_total", labels)] == 4
        assert per[("rabbitmq_queue_messages_fetched_total", labels)] == 1
        ch.basic_ack(method.delivery_tag)
    agg = scrape(node, "/metrics")
    assert agg[("rabbitmq_queue_messages_ready", ())] >= 3
    assert agg[("rabbitmq_queues", ())] >= 1
    assert agg[("rabbitmq_alarms_memory_used_watermark", ())] == 0
    assert agg[("rabbitmq_resident_memory_limit_bytes", ())] > 0
    assert any(k[0] == "rabbitmq_identity_info" for k in agg)
    detailed = scrape(node, "/metrics/detailed?family=queue_coarse_metrics&vhost=%2F")
    assert {k[0] for k in detailed} == {"rabbitmq_queue_messages_ready",
                                        "rabbitmq_queue_messages_unacked",
                                        "rabbitmq_queue_messages"}
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(node, "/metrics/detailed?family=nope")
    assert e.value.code == 400


def _consumers_of(http, queue: str) -> dict:
    """consumer tag -> its row in /api/consumers, for one queue."""
    return {x["consumer_tag"]: x for x in http("GET", "/api/consumers/%2F")[1]
            if x["queue"]["name"] == queue}


def test_consumer_shows_its_exclusive_flag_and_arguments__S2(node, http):
    """What the client asked for in basic.consume (exclusive, x-priority), not constants; the
    queue names its exclusive consumer."""
    with node.connection() as c:
        ch = c.channel()
        ch.queue_declare("excl-args-q")
        ch.basic_consume("excl-args-q", lambda *a: None, consumer_tag="excl-1", exclusive=True,
                         arguments={"x-priority": 5})
        ch2 = c.channel()
        ch2.queue_declare("plain-args-q")
        ch2.basic_consume("plain-args-q", lambda *a: None, consumer_tag="plain-1")
        rows = wait_for("both consumers", lambda: dict(
            _consumers_of(http, "excl-args-q"), **_consumers_of(http, "plain-args-q"))
            if len(_consumers_of(http, "excl-args-q")) + len(_consumers_of(
                http, "plain-args-q")) == 2 else None)
        excl, plain = rows["excl-1"], rows["plain-1"]
        assert (excl["exclusive"], excl["arguments"], excl["active"],
                excl["activity_status"]) == (True, {"x-priority": 5}, True, "up")
        assert (plain["exclusive"], plain["arguments"]) == (False, {})
        assert "channel_address" not in excl
        q = wait_for("the queue's exclusive consumer", lambda: (
            lambda q: q if q.get("exclusive_consumer_tag") else None)(
            http("GET", "/api/queues/%2F/excl-args-q")[1]))
        assert (q["exclusive_consumer_tag"], q["single_active_consumer_tag"]) == ("excl-1", None)
        assert http("GET", "/api/queues/%2F/plain-args-q")[1]["exclusive_consumer_tag"] is None


def test_single_active_consumer_is_named_and_the_others_wait__S1(node, http):
    """x-single-active-consumer with two consumers: the first is single_active and the
    queue's single_active_consumer_tag, the second waiting; it takes over when the first
    cancels."""
    with node.connection() as c:
        ch, _ = consume_single_active(c, "sac-mgmt-q", ["sac-first", "sac-second"])

        def states():
            rows = _consumers_of(http, "sac-mgmt-q")
            return {t: (r["active"], r["activity_status"]) for t, r in rows.items()}
        wait_for("one active, one waiting", lambda: states() == {
            "sac-first": (True, "single_active"), "sac-second": (False, "waiting")})
        q = http("GET", "/api/queues/%2F/sac-mgmt-q")[1]
        assert (q["single_active_consumer_tag"], q["exclusive_consumer_tag"]) == \
            ("sac-first", None)
        ch.basic_cancel("sac-first")
        wait_for("the second takes over", lambda: states() == {
            "sac-second": (True, "single_active")})
        wait_for("the queue names the new one", lambda: http(
            "GET", "/api/queues/%2F/sac-mgmt-q")[1]["single_active_consumer_tag"] == "sac-second")


def test_exchange_names_the_user_who_declared_it(node, http):
    """user_who_performed_action: the user of the AMQP connection or of the API request that
    declared the exchange; rmq-internal for the predeclared ones, as RabbitMQ."""
    node.ctl("add_user", "declarer", "pw")
    try:  # (the module's node: its other tests list the users and permissions)
        node.ctl("set_permissions", "declarer", ".*", ".*", ".*")
        with node.connection(user="declarer", password="pw") as c:
            c.channel().exchange_declare("declared-by-amqp", "topic")
    finally:
        node.ctl("delete_user", "declarer")
    assert http("PUT", "/api/exchanges/%2F/declared-by-api", {"type": "direct"})[0] == 201
    assert http("GET", "/api/exchanges/%2F/declared-by-amqp")[1][
        "user_who_performed_action"] == "declarer"
    assert http("GET", "/api/exchanges/%2F/declared-by-api")[1][
        "user_who_performed_action"] == "guest"
    assert http("GET", "/api/exchanges/%2F/amq.direct")[1][
        "user_who_performed_action"] == "rmq-internal"


def test_leveretctl_lists_connections_channels_and_consumers(node, http):
    assert http("PUT", "/api/queues/%2F/ctlq", {"durable": False})[0] == 201
    with node.connection(client_properties={"connection_name": "ctl-test"}) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=3)
        ch.basic_consume("ctlq", lambda *a: None, consumer_tag="ctl-tag")

        def listed():  # (this connection: the sample may still show earlier tests' ones)
            rows = json.loads(node.ctl("list_connections", "name", "user", "channels",
                                       "client_properties", "--formatter", "json").stdout)
            return [r for r in rows if r["channels"] == 1 and
                    r["client_properties"].get("connection_name") == "ctl-test"]
        rows = wait_for("list_connections to show the channel", listed)
        assert rows[0]["user"] == "guest"
        table = node.ctl("list_connections").stdout.splitlines()
        assert table[:2] == ["Listing connections ...", "user\tpeer_host\tpeer_port\tstate"]
        assert any(line.startswith("guest\t127.0.0.1\t") and line.endswith("\trunning")
                   for line in table[2:]), table
        consumers = json.loads(node.ctl("list_consumers", "--formatter", "json").stdout)
        mine = [x for x in consumers if x["consumer_tag"] == "ctl-tag"]
        assert mine and (mine[0]["queue_name"], mine[0]["ack_required"],
                         mine[0]["prefetch_count"]) == ("ctlq", True, 3)
        channels = json.loads(node.ctl("list_channels", "number", "prefetch_count",
                                       "consumer_count", "--formatter", "json").stdout)
        assert {"number": 1, "prefetch_count": 3, "consumer_count": 1} in channels
    res = node.ctl("list_channels", "nope", check=False)
    assert res.returncode != 0 and "unknown info item(s) nope" in res.stderr


def test_publish_get_purge_and_aliveness_through_the_api(node, http):
    assert http("PUT", "/api/queues/%2F/pubq", {"durable": False})[0] == 201
    status, body = http("POST", "/api/exchanges/%2F/amq.default/publish", {
        "properties": {"content_type": "text/plain", "headers": {"h": "v"},
                       "delivery_mode": 2},
        "routing_key": "pubq", "payload": "hello", "payload_encoding": "string"})
    assert (status, body) == (200, {"routed": True})
    assert http("POST", "/api/exchanges/%2F/amq.default/publish", {
        "properties": {}, "routing_key": "nowhere", "payload": "aGk=",
        "payload_encoding": "base64"}) == (200, {"routed": False})
    assert http("POST", "/api/exchanges/%2F/amq.default/publish", {
        "properties": {}, "routing_key": "pubq", "payload": "/w==",  # one byte 0xff
        "payload_encoding": "base64"})[1] == {"routed": True}
    status, msgs = http("POST", "/api/queues/%2F/pubq/get", {"count": 5,
                                                             "ackmode": "ack_requeue_true",
                                                             "encoding": "auto"})
    assert status == 200 and len(msgs) == 2
    first = msgs[0]
    assert (first["payload"], first["payload_encoding"], first["routing_key"],
            first["redelivered"], first["payload_bytes"]) == ("hello", "string", "pubq",
                                                              False, 5)
    assert first["properties"] == {"content_type": "text/plain", "headers": {"h": "v"},
                                   "delivery_mode": 2}
    assert (msgs[1]["payload"], msgs[1]["payload_encoding"]) == ("/w==", "base64")
    # requeued: there again, redelivered
    again = http("POST", "/api/queues/%2F/pubq/get", {"count": 1,
                                                      "ackmode": "ack_requeue_false",
                                                      "encoding": "auto"})[1]
    assert again[0]["payload"] == "hello" and again[0]["redelivered"] is True
    wait_for("pubq's sample with 1 message",
             lambda: http("GET", "/api/queues/%2F/pubq")[1].get("messages") == 1)
    assert http("DELETE", "/api/queues/%2F/pubq/contents")[0] == 204
    wait_for("pubq's sample once purged",
             lambda: http("GET", "/api/queues/%2F/pubq")[1].get("messages") == 0)
    assert http("POST", "/api/queues/%2F/missing/get", {"count": 1, "ackmode":
                                                        "ack_requeue_true"})[0] == 404
    assert http("POST", "/api/exchanges/%2F/no-such-x/publish", {
        "properties": {}, "routing_key": "", "payload": "", "payload_encoding":
        "string"})[0] == 404
    assert http("GET", "/api/aliveness-test/%2F") == (200, {"status": "ok"})


def test_health_checks_and_topic_permissions(node, http):
    assert http("GET", f"/api/health/checks/port-listener/{node.port}") == (
        200, {"status": "ok", "port": node.port})
    status, body = http("GET", "/api/health/checks/port-listener/1")
    assert status == 503 and body["reason"] == "No active listener" and node.port in \
        body["ports"]
    assert http("GET", "/api/health/checks/port-listener/x") == (
        400, {"error": "bad_request", "reason": "Invalid port"})
    assert http("GET", "/api/health/checks/protocol-listener/amqp")[0] == 200
    # RabbitMQ's other names of the protocol (normalize_protocol/1)
    assert http("GET", "/api/health/checks/protocol-listener/AMQP0-9-1") == (
        200, {"status": "ok", "protocol": "amqp"})
    assert http("GET", "/api/health/checks/protocol-listener/amqp%2Fssl")[0] == 503
    assert http("GET", "/api/health/checks/virtual-hosts") == (200, {"status": "ok"})
    assert http("GET", "/api/health/checks/node-is-quorum-critical") == (
        200, {"status": "ok", "reason": "single node cluster"})
    node.ctl("add_user", "topic-user", "pw")
    assert http("PUT", "/api/topic-permissions/%2F/topic-user", {
        "exchange": "amq.topic", "write": "^a", "read": ".*"})[0] == 201
    assert http("PUT", "/api/topic-permissions/%2F/topic-user", {
        "exchange": "amq.topic", "write": "^a", "read": ".*"})[0] == 204
    assert http("PUT", "/api/topic-permissions/%2F/topic-user", {
        "exchange": "other", "write": "", "read": "^b"})[0] == 201
    mine = [{"user": "topic-user", "vhost": "/", "exchange": x, "write": w, "read": r}
            for x, w, r in (("amq.topic", "^a", ".*"), ("other", "", "^b"))]
    key = (lambda p: p["exchange"])
    assert sorted(http("GET", "/api/topic-permissions/%2F/topic-user")[1], key=key) == mine
    assert sorted(http("GET", "/api/users/topic-user/topic-permissions")[1], key=key) == mine
    assert sorted([p for p in http("GET", "/api/vhosts/%2F/topic-permissions")[1]
                   if p["user"] == "topic-user"], key=key) == mine
    assert http("GET", "/api/users/nobody/topic-permissions")[0] == 404
    assert http("GET", "/api/vhosts/nowhere/topic-permissions")[0] == 404
    assert http("PUT", "/api/topic-permissions/nowhere/topic-user", {
        "exchange": "x", "write": "", "read": ""}) == (
        400, {"error": "bad_request", "reason": "vhost_or_user_not_found"})
    assert http("DELETE", "/api/topic-permissions/%2F/topic-user/other")[0] == 204
    assert http("GET", "/api/topic-permissions/%2F/topic-user")[1] == mine[:1]
    assert http("DELETE", "/api/topic-permissions/%2F/topic-user")[0] == 204
    assert http("GET", "/api/topic-permissions/%2F/topic-user")[0] == 404
    assert http("DELETE", "/api/topic-permissions/%2F/topic-user")[0] == 404


def test_with_amqps_configured_both_listeners_speak_https_only(tmp_path):
    import ssl

    from tlscerts import CertFactory
    factory = CertFactory(tmp_path / "certs")
    server = factory.leaf("server", "127.0.0.1", server=True)
    http_port, metrics_port, tls_port = free_port(), free_port(), free_port()
    broker = Broker.start_leveret(
        tmp_path, "--tls-port", str(tls_port), "--ssl-certfile", server.cert, "--ssl-keyfile",
        server.key, "--management-port", str(http_port), "--prometheus-port",
        str(metrics_port))
    try:
        ctx = ssl.create_default_context(cafile=factory.ca.cert)
        token = base64.b64encode(b"guest:guest").decode()
        req = urllib.request.Request(f"https://127.0.0.1:{http_port}/api/whoami",
                                     headers={"Authorization": f"Basic {token}"})
        with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
            assert json.loads(r.read())["name"] == "guest"
        with urllib.request.urlopen(f"https://127.0.0.1:{metrics_port}/metrics", context=ctx,
                                    timeout=20) as r:
            assert b"rabbitmq_queues" in r.read()
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/whoami", timeout=20)
    finally:
        broker.stop()


def _refused(host: str, port: int) -> bool:
    """Nothing listens on host:port (a TCP connect is refused)."""
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_management_and_prometheus_hosts_and_port_0(tmp_path):
    """Issue 14 item 6: `management_host` / `prometheus_host` bind each listener apart from
    the AMQP listener's host (loopback addresses here, AMQP on 127.0.0.1): each answers on its
    own address only, a connect to 127.0.0.1 on its port is refused. And `--prometheus-port
    0` serves no metrics at all: the protocol-listener health check then says there is none.
    Also GET /api/nodes/{name}."""
    port, metrics_port = free_port(), free_port()
    (tmp_path / "hosts.toml").write_text('management_host = "127.0.0.2"\n'
                                         'prometheus_host = "127.0.0.3"\n')
    broker = Broker.start_leveret(tmp_path, "--management-port", str(port), "--config",
                                  str(tmp_path / "hosts.toml"), "--prometheus-port",
                                  str(metrics_port))
    try:
        api = Api(port, "127.0.0.2")
        assert api("GET", "/api/whoami") == (200, {"name": "guest", "tags": ["administrator"]})
        assert _refused("127.0.0.1", port)  # not on the AMQP listener's 127.0.0.1
        with urllib.request.urlopen(f"http://127.0.0.3:{metrics_port}/metrics",
                                    timeout=20) as r:
            assert b"rabbitmq_identity_info" in r.read()
        assert _refused("127.0.0.1", metrics_port) and _refused("127.0.0.2", metrics_port)
        ports = {(x["protocol"], x["ip_address"]) for x in
                 api("GET", "/api/overview")[1]["listeners"]}
        assert ("http", "127.0.0.2") in ports and ("amqp", "127.0.0.1") in ports
        assert api("GET", "/api/health/checks/protocol-listener/http%2Fprometheus")[0] == 200
        node = api("GET", "/api/nodes")[1][0]
        status, one = api("GET", "/api/nodes/" + urllib.parse.quote(node["name"], safe=""))
        assert status == 200 and (one["name"], one["running"]) == (node["name"], True)
        assert {c["description"]: (c["ip"], c["port"]) for c in one["contexts"]} == {
            "RabbitMQ Management": ("127.0.0.2", str(port)),
            "RabbitMQ Prometheus": ("127.0.0.3", str(metrics_port))}
        assert api("GET", "/api/nodes/rabbit%40nowhere")[0] == 404
    finally:
        broker.stop()
    port = free_port()
    broker = Broker.start_leveret(tmp_path / "no-metrics", "--management-port", str(port),
                                  "--prometheus-port", "0")
    try:
        api = Api(port)
        status, body = api("GET", "/api/health/checks/protocol-listener/http%2Fprometheus")
        assert status == 503 and body["status"] == "failed"
        assert api("GET", "/api/health/checks/protocol-listener/http")[0] == 200
    finally:
        broker.stop()


def _soft_nofile(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        return int(next(line for line in f if line.startswith("Max open files")).split()[3])


def node_row(http, cond=lambda n: True):
    """This node's /api/nodes row once it has a sample that meets `cond`; False before."""
    status, rows = http("GET", "/api/nodes")
    return status == 200 and "os_pid" in rows[0] and cond(rows[0]) and rows[0]


def test_nodes_show_the_node_s_own_figures(node, http):
    """/api/nodes (issue 14): RabbitMQ 3.10's fields (test_management_compat compares names
    and types) with this node's figures, from the sample it takes every interval
    (docs/management.md, "Nodes"): its pid, files, limits, memory and disk, descriptors,
    threads, churn, and its memory alarm while one is on."""
    from importlib import metadata

    from actors.node.resources import total_memory

    first = wait_for("the node's sample", lambda: node_row(http))
    assert (first["os_pid"], first["running"], first["type"]) == (str(node.pid), True, "disc")
    assert first["db_dir"] == str(node.data_dir)
    assert first["config_files"] == [str(node.data_dir.parent / "leveret.toml")]
    assert first["log_files"] == ["<stderr>"] and first["partitions"] == []
    assert first["mem_limit"] == int(total_memory() * 0.4) and 0 < first["mem_used"]
    assert first["disk_free_limit"] == 50_000_000 and first["disk_free"] > 0
    assert not first["mem_alarm"] and not first["disk_free_alarm"]
    assert first["fd_total"] == first["sockets_total"] == _soft_nofile(node.pid)
    workers = {**node.worker_pids("queue"), **node.worker_pids("conn")}
    assert 10 < first["fd_used"] < first["fd_total"]
    assert first["proc_used"] > len(workers) and first["proc_total"] > first["proc_used"]
    assert 3 <= first["sockets_used"]  # AMQP, management and Prometheus listeners at least
    assert first["processors"] == os.cpu_count() and first["run_queue"] >= 0
    assert [x["name"] for x in first["exchange_types"]] == ["direct", "fanout", "headers",
                                                            "topic"]
    assert {x["name"]: x["enabled"] for x in first["auth_mechanisms"]} == {
        "AMQPLAIN": True, "PLAIN": True, "EXTERNAL": False}
    assert {"name": "leveret", "description": "Leveret, an AMQP 0-9-1 broker",
            "version": metadata.version("leveret")} in first["applications"]
    assert [c["port"] for c in first["contexts"]] == [str(node.http_port),
                                                      str(node.metrics_port)]
    # a connection opened and closed: the node's churn; a later sample, its rates
    conn = node.connection()
    conn.close()
    later = wait_for("a sample with the connection's churn", lambda: node_row(
        http, lambda n: n["connection_closed"] > first["connection_closed"] and
        n["connection_created"] > first["connection_created"]))
    assert later["uptime"] > first["uptime"]
    assert later["context_switches"] >= first["context_switches"]
    assert set(later["mem_used_details"]) == {"rate"}
    assert later["connection_created_details"]["rate"] >= 0
    status, one = http("GET", "/api/nodes/" + urllib.parse.quote(first["name"], safe=""))
    assert status == 200 and one["os_pid"] == first["os_pid"]
    # the memory alarm (R2's): this node's own, in its row and the local-alarms check
    node.ctl("set_vm_memory_high_watermark", "0.0000001")
    try:
        wait_for("mem_alarm in the node's sample",
                 lambda: node_row(http, lambda n: n["mem_alarm"]))
        status, body = http("GET", "/api/health/checks/local-alarms")
        assert status == 503 and body["alarms"] == [{"node": first["name"],
                                                     "resource": "memory"}]
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")
    wait_for("the alarm cleared in the sample",
             lambda: node_row(http, lambda n: not n["mem_alarm"]))


def test_nodes_count_storage_syncs_and_msg_store_io__C5_C7(tmp_path):
    """/api/nodes' io_sync_count, io_sync_avg_time, msg_store_write_count and
    msg_store_read_count are what the node's storage did: confirmed persistent publishes into
    a durable queue are synced (C5), their bodies past embed_msgs_below written to msg_store,
    and read back from it when the queue pages them in."""
    port = free_port()
    (tmp_path / "leveret.toml").write_text(f"collect_statistics_interval = {STATS_MS}\n"
                                           "queue_page_bytes = 16384\nqueue_page_size = 4\n")
    broker = Broker.start_leveret(tmp_path, "--management-port", str(port), "--config",
                                  str(tmp_path / "leveret.toml"))
    http = Api(port)

    try:
        first = wait_for("the node's sample", lambda: node_row(http))
        with broker.connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("sync-q", durable=True)
            body = b"s" * 8192  # past embed_msgs_below (4096): its body goes to msg_store
            for _ in range(10):
                ch.basic_publish("", "sync-q", body, pika.BasicProperties(delivery_mode=2))

            def syncing(n):  # (the average is over an interval's syncs: keep some coming)
                ch.basic_publish("", "sync-q", body, pika.BasicProperties(delivery_mode=2))
                return n["io_sync_count"] >= first["io_sync_count"] + 10 and \
                    n["io_sync_avg_time"] > 0 and \
                    n["msg_store_write_count"] >= first["msg_store_write_count"] + 10
            busy = wait_for("the syncs and writes in a sample", lambda: node_row(http, syncing))
            assert isinstance(busy["io_sync_avg_time"], float)
            assert set(busy["io_sync_count_details"]) == {"rate"}
            published = ch.queue_declare("sync-q", durable=True, passive=True).method \
                .message_count
            for _ in range(published):  # past queue_page_bytes they were paged out
                method, _, got = ch.basic_get("sync-q", auto_ack=True)
                assert got == body
            wait_for("the bodies read back from msg_store", lambda: node_row(
                http, lambda n: n["msg_store_read_count"] > busy["msg_store_read_count"]))
        for key in ("io_seek_count", "io_reopen_count", "io_read_avg_time",
                    "io_write_avg_time", "io_seek_avg_time", "gc_bytes_reclaimed"):
            assert key not in busy, key  # (not measured: left out, not a constant)
    finally:
        broker.stop()


def test_permissions_by_vhost_and_user_and_an_exchange_s_bindings(node, http):
    assert [(p["user"], p["vhost"]) for p in http("GET", "/api/vhosts/%2F/permissions")[1]] \
        == [("guest", "/")]
    assert [p["vhost"] for p in http("GET", "/api/users/guest/permissions")[1]] == ["/"]
    assert http("GET", "/api/users/nobody/permissions")[0] == 404
    assert http("PUT", "/api/exchanges/%2F/bx", {"type": "fanout", "durable": False})[0] == 201
    assert http("PUT", "/api/exchanges/%2F/by", {"type": "fanout", "durable": False})[0] == 201
    assert http("POST", "/api/bindings/%2F/e/bx/e/by", {"routing_key": ""})[0] == 201
    assert [b["destination"] for b in http("GET", "/api/exchanges/%2F/bx/bindings/source")[1]] \
        == ["by"]
    assert [b["source"] for b in
            http("GET", "/api/exchanges/%2F/by/bindings/destination")[1]] == ["bx"]
    assert http("GET", "/api/extensions") == (200, [])


def test_operator_policies_and_limits_through_the_api(node, http):
    assert http("PUT", "/api/operator-policies/%2F/cap", {
        "pattern": "^capped", "definition": {"max-length": 2}, "apply-to": "queues"})[0] == 201
    assert [p["name"] for p in http("GET", "/api/operator-policies")[1]] == ["cap"]
    assert http("PUT", "/api/operator-policies/%2F/bad", {
        "pattern": ".*", "definition": {"ha-mode": "all"}})[0] == 400  # not an operator key
    assert http("PUT", "/api/queues/%2F/capped-q", {"durable": False})[0] == 201
    q = http("GET", "/api/queues/%2F/capped-q")[1]
    assert (q["operator_policy"], q["effective_policy_definition"]) == ("cap",
                                                                        {"max-length": 2})
    assert http("DELETE", "/api/operator-policies/%2F/cap")[0] == 204
    assert http("GET", "/api/operator-policies")[1] == []
    assert http("PUT", "/api/vhost-limits/%2F/max-queues", {"value": 500})[0] == 204
    assert http("PUT", "/api/vhost-limits/%2F/max-connections", {"value": 50})[0] == 204
    assert http("GET", "/api/vhost-limits/%2F")[1] == [
        {"vhost": "/", "value": {"max-queues": 500, "max-connections": 50}}]
    assert "max-queues" in node.ctl("list_vhost_limits").stdout
    assert http("DELETE", "/api/vhost-limits/%2F/max-queues")[0] == 204
    assert http("DELETE", "/api/vhost-limits/%2F/max-connections")[0] == 204
    assert http("GET", "/api/vhost-limits")[1] == []
    assert http("PUT", "/api/user-limits/guest/max-channels", {"value": 64})[0] == 204
    assert http("GET", "/api/user-limits/guest")[1] == [{"user": "guest",
                                                          "value": {"max-channels": 64}}]
    assert http("DELETE", "/api/user-limits/guest/max-channels")[0] == 204
    # as RabbitMQ 3.10: none set is [], an unknown vhost or user 404, clearing a limit that
    # is not set does nothing (204)
    assert http("GET", "/api/user-limits/guest")[1] == []
    assert http("DELETE", "/api/user-limits/guest/max-channels")[0] == 204
    assert http("GET", "/api/user-limits/nobody")[0] == 404
    assert http("GET", "/api/vhost-limits/nowhere")[0] == 404
    assert http("PUT", "/api/vhost-limits/nowhere/max-queues", {"value": 1})[0] == 404
    assert http("PUT", "/api/user-limits/nobody/max-channels", {"value": 1})[0] == 404


def test_leveretctl_operational_commands(node, http):
    assert node.ctl("await_startup", "--timeout", "30").stdout.strip() == "Node is running"
    assert node.ctl("check_running").returncode == 0
    assert "no local alarms" in node.ctl("check_local_alarms").stdout
    out = node.ctl("check_port_connectivity").stdout
    assert str(node.port) in out and str(node.http_port) in out
    env = json.loads(node.ctl("environment").stdout)
    assert env["port"] == node.port and "cluster_secret" not in env
    node.ctl("set_vm_memory_high_watermark", "absolute", "1")
    try:
        res = node.ctl("check_local_alarms", check=False)
        assert res.returncode == 69 and "memory resource alarm" in res.stdout
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")
    assert http("PUT", "/api/queues/%2F/ctl-del", {"durable": False})[0] == 201
    with node.connection() as c:
        c.channel().basic_publish("", "ctl-del", b"x")
        res = node.ctl("delete_queue", "ctl-del", "--if-empty", check=False)
        assert res.returncode != 0 and "not empty" in res.stderr
        assert "with 1 ready messages" in node.ctl("delete_queue", "ctl-del").stdout
    with node.connection(client_properties={"connection_name": "ctl-close"}) as c:
        conn = wait_for("the connection in the sample", lambda: [
            x for x in http("GET", "/api/connections")[1]
            if x["client_properties"].get("connection_name") == "ctl-close"])[0]
        node.ctl("close_connection", conn["name"], "go away")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
            for _ in range(20):
                c.process_data_events(time_limit=1)
        assert (e.value.reply_code, e.value.reply_text) == (320,
                                                            "CONNECTION_FORCED - go away")


def test_definitions_download_and_upload_through_the_api(node, http):
    """GET/POST /api/definitions[/{vhost}] (rabbit_mgmt_wm_definitions): the export of
    `leveretctl export_definitions`, `?download=` as an attachment, administrator only."""
    assert http("PUT", "/api/queues/%2F/defs-q", {"durable": True})[0] == 201
    status, doc = http("GET", "/api/definitions")
    assert status == 200 and doc["rabbit_version"] == "3.10.8"
    assert {"name": "defs-q", "vhost": "/", "type": "classic", "durable": True,
            "auto_delete": False, "arguments": {}} in doc["queues"]
    req = urllib.request.Request(http.base + "/api/definitions?download=defs.json")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=20) as r:
        assert r.headers["Content-Disposition"] == "attachment; filename=defs.json"
        assert json.loads(r.read())["rabbit_version"] == "3.10.8"
    node.ctl("add_user", "mon", "pw")
    node.ctl("set_user_tags", "mon", "monitoring")
    assert http("GET", "/api/definitions", user="mon", password="pw") == (
        401, {"error": "not_authorised", "reason": "Not administrator user"})
    # per vhost: no vhost fields, only the vhost's objects
    one = http("GET", "/api/definitions/%2F")[1]
    assert "users" not in one and {"name": "defs-q", "type": "classic", "durable": True,
                                   "auto_delete": False, "arguments": {}} in one["queues"]
    assert http("GET", "/api/definitions/nope")[0] == 400
    # upload: into another vhost with the per-vhost form, and a whole document
    assert http("PUT", "/api/vhosts/defs-v", {})[0] == 201
    one["queues"] = [dict(q, name="defs-q2") for q in one["queues"] if q["name"] == "defs-q"]
    one["bindings"], one["exchanges"] = [], [{"name": "defs-x", "type": "topic",
                                              "durable": True, "auto_delete": False,
                                              "internal": False, "arguments": {}}]
    assert http("POST", "/api/definitions/defs-v", one)[0] == 204
    assert http("GET", "/api/queues/defs-v/defs-q2")[0] == 200
    assert http("GET", "/api/exchanges/defs-v/defs-x")[1]["type"] == "topic"
    assert http("POST", "/api/definitions", {"vhosts": [{"name": "defs-w"}], "queues": [
        {"name": "defs-q3", "vhost": "defs-w", "durable": True, "auto_delete": False,
         "arguments": {}}]})[0] == 204
    assert http("GET", "/api/queues/defs-w/defs-q3")[0] == 200
    # refused as a whole, with the reason
    status, body = http("POST", "/api/definitions", {"queues": [
        {"name": "defs-q4", "vhost": "no-such-vhost", "durable": True, "auto_delete": False,
         "arguments": {}}]})
    assert status == 400 and "no-such-vhost" in body["reason"], body
    for vhost in ("defs-v", "defs-w"):
        assert http("DELETE", f"/api/vhosts/{vhost}")[0] == 204
    assert http("DELETE", "/api/queues/%2F/defs-q")[0] == 204


def test_runtime_parameters_as_rabbitmq_lists_them(node, http):
    """/api/parameters: operator policies ("operator_policy") and vhost limits
    ("vhost-limits"); policies only under /api/parameters/policy; components Leveret does
    not have are refused with rabbit_runtime_parameters' text."""
    assert http("PUT", "/api/policies/%2F/param-p", {"pattern": "^param", "definition": {
        "max-length": 9}})[0] == 201
    assert http("PUT", "/api/parameters/operator_policy/%2F/param-op", {"value": {
        "pattern": "^param", "definition": {"max-length": 5}, "apply-to": "queues"}})[0] == 201
    assert http("PUT", "/api/parameters/vhost-limits/%2F/limits", {
        "value": {"max-queues": 900}})[0] == 201
    try:
        rows = http("GET", "/api/parameters")[1]
        assert {"vhost": "/", "component": "vhost-limits", "name": "limits",
                "value": {"max-queues": 900}} in rows
        assert {"vhost": "/", "component": "operator_policy", "name": "param-op",
                "value": {"pattern": "^param", "definition": {"max-length": 5},
                          "priority": 0, "apply-to": "queues"}} in rows
        assert all(r["component"] != "policy" for r in rows)
        assert [r["name"] for r in http("GET", "/api/parameters/policy")[1]] == ["param-p"]
        assert [r["name"] for r in http("GET", "/api/parameters/policy/%2F")[1]] == \
            ["param-p"]
        assert http("GET", "/api/parameters/operator_policy/%2F/param-op")[1]["value"][
            "definition"] == {"max-length": 5}
        assert http("GET", "/api/operator-policies/%2F/param-op")[0] == 200
        assert http("GET", "/api/vhost-limits/%2F")[1] == [{"vhost": "/",
                                                            "value": {"max-queues": 900}}]
        assert http("PUT", "/api/parameters/policy/%2F/x", {"value": {
            "pattern": ".*", "definition": {}}}) == (
            400, {"error": "bad_request",
                  "reason": "policies may not be set using this method"})
        assert http("PUT", "/api/parameters/federation-upstream/%2F/up", {"value": {
            "uri": "amqp://elsewhere"}}) == (
            400, {"error": "bad_request",
                  "reason": "Validation failed\n\ncomponent federation-upstream not found\n"})
        assert http("GET", "/api/parameters/federation-upstream")[1] == []
        # shovels are a component (tests/integration/test_shovels.py): this value is not one
        assert http("PUT", "/api/parameters/shovel/%2F/up", {"value": {
            "uri": "amqp://elsewhere"}}) == (
            400, {"error": "bad_request", "reason": (
                "Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\n"
                "Unrecognised terms [{<<\"uri\">>,<<\"amqp://elsewhere\">>}] in up\n"
                "Key \"dest-uri\" not found in up\nKey \"src-uri\" not found in up\n")})
        assert http("GET", "/api/parameters/shovel")[1] == []
        globals_ = http("GET", "/api/global-parameters")[1]
        name = http("GET", "/api/cluster-name")[1]["name"]
        assert {"name": "cluster_name", "value": name} in globals_
        assert http("GET", "/api/global-parameters/cluster_name")[1]["value"] == name
        assert http("PUT", "/api/global-parameters/cluster_name", {"value": "x"})[0] == 400
    finally:
        assert http("DELETE", "/api/parameters/operator_policy/%2F/param-op")[0] == 204
        assert http("DELETE", "/api/parameters/vhost-limits/%2F/limits")[0] == 204
        assert http("DELETE", "/api/policies/%2F/param-p")[0] == 204
    assert http("GET", "/api/parameters")[1] == []


@pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin is not installed "
                    "(apt-get install rabbitmq-server)")
def test_rabbitmqadmin_export_and_import_round_trip(node, http, tmp_path):
    def admin(*args: str) -> str:
        res = subprocess.run([RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(node.http_port),
                              "-u", "guest", "-p", "guest", *args],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout

    assert http("PUT", "/api/queues/%2F/rt-q", {"durable": True})[0] == 201
    assert http("PUT", "/api/exchanges/%2F/rt-x", {"type": "fanout"})[0] == 201
    assert http("POST", "/api/bindings/%2F/e/rt-x/q/rt-q", {"routing_key": "k"})[0] == 201
    path = tmp_path / "defs.json"
    assert "Exported definitions" in admin("export", str(path))
    exported = json.loads(path.read_text())
    assert any(q["name"] == "rt-q" for q in exported["queues"])
    assert http("DELETE", "/api/exchanges/%2F/rt-x")[0] == 204
    assert http("DELETE", "/api/queues/%2F/rt-q")[0] == 204
    assert "Uploaded definitions" in admin("import", str(path))
    assert http("GET", "/api/queues/%2F/rt-q")[1]["durable"] is True
    assert [b["routing_key"] for b in http("GET", "/api/bindings/%2F/e/rt-x/q/rt-q")[1]] == \
        ["k"]
    vpath = tmp_path / "vhost.json"
    admin("-V", "/", "export", str(vpath))
    assert "users" not in json.loads(vpath.read_text())
    admin("-V", "/", "import", str(vpath))
    assert http("DELETE", "/api/exchanges/%2F/rt-x")[0] == 204
    assert http("DELETE", "/api/queues/%2F/rt-q")[0] == 204


# Every rabbitmq_* series RabbitMQ's "RabbitMQ-Overview" Grafana dashboard queries
# (rabbitmq-server deps/rabbitmq_prometheus/docker/grafana/dashboards/RabbitMQ-Overview.json,
# the panels' "expr"s), after the aggregation of /metrics
OVERVIEW_DASHBOARD_SERIES = (
    "rabbitmq_build_info", "rabbitmq_identity_info", "rabbitmq_queue_messages_ready",
    "rabbitmq_queue_messages_unacked", "rabbitmq_queue_messages_published_total",
    "rabbitmq_queues", "rabbitmq_connections", "rabbitmq_channels",
    "rabbitmq_channel_consumers", "rabbitmq_channel_messages_published_total",
    "rabbitmq_channel_messages_confirmed_total", "rabbitmq_channel_messages_unconfirmed",
    "rabbitmq_channel_messages_unroutable_dropped_total",
    "rabbitmq_channel_messages_unroutable_returned_total",
    "rabbitmq_channel_messages_delivered_total", "rabbitmq_channel_messages_delivered_ack_total",
    "rabbitmq_channel_messages_redelivered_total", "rabbitmq_channel_messages_acked_total",
    "rabbitmq_channel_get_total", "rabbitmq_channel_get_ack_total",
    "rabbitmq_channel_get_empty_total", "rabbitmq_resident_memory_limit_bytes",
    "rabbitmq_process_resident_memory_bytes", "rabbitmq_disk_space_available_bytes",
    "rabbitmq_process_max_fds", "rabbitmq_process_open_fds",
    "rabbitmq_process_max_tcp_sockets", "rabbitmq_process_open_tcp_sockets",
    "rabbitmq_queues_declared_total", "rabbitmq_queues_created_total",
    "rabbitmq_queues_deleted_total", "rabbitmq_channels_opened_total",
    "rabbitmq_channels_closed_total", "rabbitmq_connections_opened_total",
    "rabbitmq_connections_closed_total",
)
GLOBAL_SERIES = tuple(f"rabbitmq_global_messages_{n}_total" for n in (
    "received", "received_confirm", "routed", "unroutable_dropped", "unroutable_returned",
    "confirmed", "delivered", "delivered_consume_manual_ack", "delivered_consume_auto_ack",
    "delivered_get_manual_ack", "delivered_get_auto_ack", "get_empty", "redelivered",
    "acknowledged"))


def test_prometheus_has_every_overview_dashboard_series_from_emitted_statistics(node, http):
    """Traffic of every kind, then each series the dashboard queries is in a scrape, and the
    channel counters, global counters and Leveret's own count what was done (they come from
    the channels' statistics the connection workers emit, not from asking per scrape)."""
    before = scrape(node, "/metrics")
    assert http("PUT", "/api/queues/%2F/dashq", {"durable": False})[0] == 201
    c = node.connection()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        for _ in range(5):
            ch.basic_publish("", "dashq", b"x")
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)  # returned
        ch.basic_publish("amq.direct", "nowhere", b"x")  # dropped
        m1, _, _ = ch.basic_get("dashq")  # get with ack
        ch.basic_nack(m1.delivery_tag, requeue=True)
        ch.basic_get("dashq", auto_ack=True)  # redelivered, no-ack get
        got = []
        ch.basic_consume("dashq", lambda c_, m, p, b: got.append(m), consumer_tag="dash-c")
        while len(got) < 4:
            c.process_data_events(time_limit=1)
        ch.basic_ack(got[-1].delivery_tag, multiple=True)
        ch.basic_cancel("dash-c")
        ch.basic_get("dashq")  # empty
        ch.basic_consume("dashq", lambda *a: None, auto_ack=True, consumer_tag="dash-auto")
        ch.basic_publish("", "dashq", b"y")  # delivered no-ack
        want = lambda s, k: s.get((k, ()), 0) - before.get((k, ()), 0)  # noqa: E731
        def counted():
            s = scrape(node, "/metrics")
            done = want(s, "rabbitmq_channel_messages_delivered_total") >= 1 and \
                want(s, "rabbitmq_channel_messages_acked_total") >= 4
            return s if done else None
        agg = wait_for("the channel counters in a scrape", counted)
        names = {k[0].removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
                 for k in agg}
        missing = [n for n in OVERVIEW_DASHBOARD_SERIES + GLOBAL_SERIES +
                   ("rabbitmq_global_publishers", "rabbitmq_global_consumers",
                    "rabbitmq_connection_incoming_bytes_total",
                    "rabbitmq_connection_outgoing_bytes_total",
                    "leveret_confirm_latency_seconds", "leveret_confirms_total",
                    "leveret_events_written_total", "leveret_events_dropped_total")
                   if n not in names]
        assert not missing, missing
        assert want(agg, "rabbitmq_channel_messages_published_total") == 8
        assert want(agg, "rabbitmq_channel_messages_confirmed_total") == 8
        assert want(agg, "rabbitmq_channel_messages_unroutable_returned_total") == 1
        assert want(agg, "rabbitmq_channel_messages_unroutable_dropped_total") == 1
        assert want(agg, "rabbitmq_channel_get_ack_total") == 1
        assert want(agg, "rabbitmq_channel_get_total") == 1
        assert want(agg, "rabbitmq_channel_get_empty_total") == 1
        assert want(agg, "rabbitmq_channel_messages_delivered_ack_total") == 4
        assert want(agg, "rabbitmq_channel_messages_redelivered_total") >= 1
        assert agg[("rabbitmq_connections", ())] >= 1 and agg[("rabbitmq_channels", ())] >= 1
        assert agg[("rabbitmq_process_open_fds", ())] > 0
        g = (("protocol", "amqp091"),)
        assert agg[("rabbitmq_global_messages_received_total", g)] - before.get(
            ("rabbitmq_global_messages_received_total", g), 0) == 8
        assert agg[("rabbitmq_global_messages_routed_total", g)] - before.get(
            ("rabbitmq_global_messages_routed_total", g), 0) == 6
        assert agg[("leveret_confirm_latency_seconds_count", ())] - before.get(
            ("leveret_confirm_latency_seconds_count", ()), 0) == 8
        assert agg[("leveret_confirms_total", (("mode", "enqueue"),))] >= 6
        assert agg[("rabbitmq_connection_incoming_bytes_total", ())] > 0
        assert want(agg, "rabbitmq_queues_created_total") >= 1
    finally:
        c.close()
    def closed_counted():
        s = scrape(node, "/metrics")
        key = ("rabbitmq_connections_closed_total", ())
        return s if s.get(key, 0) > before.get(key, 0) else None
    closed = wait_for("the connection's close counted", closed_counted)
    assert closed[("rabbitmq_channel_messages_published_total", ())] - before.get(
        ("rabbitmq_channel_messages_published_total", ()), 0) == 8  # kept after the close
    assert http("DELETE", "/api/queues/%2F/dashq")[0] == 204


def test_connection_byte_counts_and_channel_rates_in_the_api(node, http):
    """recv_oct, send_oct, recv_cnt, send_cnt and recv_oct_details/send_oct_details.rate of a
    connection; a channel's message_stats with rates (rabbit_mgmt_format's fields)."""
    assert http("PUT", "/api/queues/%2F/bytesq", {"durable": False})[0] == 201
    with node.connection(client_properties={"connection_name": "bytes-test"}) as c:
        ch = c.channel()
        for _ in range(3):
            ch.basic_publish("", "bytesq", b"z" * 1000)

        def mine():
            rows = [x for x in http("GET", "/api/connections")[1]
                    if x["client_properties"].get("connection_name") == "bytes-test"]
            return rows if rows and rows[0]["recv_oct"] > 3000 else None
        conn = wait_for("the connection's bytes", mine)[0]
        assert conn["recv_cnt"] >= 1 and conn["send_oct"] > 0 and conn["send_cnt"] >= 1
        assert isinstance(conn["recv_oct_details"]["rate"], float)
        assert isinstance(conn["send_oct_details"]["rate"], float)
        chan = wait_for("the channel's publish count", lambda: [
            x for x in http("GET", "/api/channels")[1]
            if x["connection_details"]["name"] == conn["name"] and
            x.get("message_stats", {}).get("publish") == 3])[0]
        assert "rate" in chan["message_stats"]["publish_details"]
    assert http("DELETE", "/api/queues/%2F/bytesq")[0] == 204


# --- issue 14's leftovers: exchanges, churn, channel keys, consumer use, idle_since -----------
def test_exchange_message_stats_publish_in_and_out(node, http):
    """publish_in: messages published into the exchange; publish_out: the copies it routed,
    one per queue (rabbit_channel's exchange_stats / queue_exchange_stats); an unroutable
    publish is in, not out. The overview and vhost count the unroutable ones (channel keys)."""
    # in a vhost of its own: its message_stats count this test's traffic only
    assert http("PUT", "/api/vhosts/msv")[0] == 201
    assert http("PUT", "/api/permissions/msv/guest", {"configure": ".*", "write": ".*",
                                                      "read": ".*"})[0] == 201
    for q in ("fanq1", "fanq2"):
        assert http("PUT", f"/api/queues/msv/{q}", {"durable": False})[0] == 201
    assert http("PUT", "/api/exchanges/msv/ms-fan", {"type": "fanout"})[0] == 201
    assert http("PUT", "/api/exchanges/msv/ms-none", {"type": "direct"})[0] == 201
    for q in ("fanq1", "fanq2"):
        assert http("POST", f"/api/bindings/msv/e/ms-fan/q/{q}", {"routing_key": ""})[0] == 201
    with node.connection(virtual_host="msv") as c:
        ch = c.channel()
        ch.confirm_delivery()
        for _ in range(4):
            ch.basic_publish("ms-fan", "", b"x")
        ch.basic_publish("ms-none", "nowhere", b"x")
        ch.basic_publish("ms-none", "nowhere", b"x")
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("ms-none", "nowhere", b"x", mandatory=True)

    def stats(name):
        return http("GET", f"/api/exchanges/msv/{name}")[1].get("message_stats", {})
    fan = wait_for("ms-fan's counts", lambda: stats("ms-fan").get("publish_in") == 4 and
                   stats("ms-fan"))
    assert fan["publish_out"] == 8 and set(fan["publish_in_details"]) == {"rate"}
    none = wait_for("ms-none's counts", lambda: stats("ms-none").get("publish_in") == 3 and
                    stats("ms-none"))
    assert none["publish_out"] == 0
    listed = {x["name"]: x for x in http("GET", "/api/exchanges/msv")[1]}
    assert listed["ms-fan"]["message_stats"]["publish_out"] == 8
    assert "message_stats" not in listed["amq.headers"]  # nothing published into it
    vhost = http("GET", "/api/vhosts/msv")[1]["message_stats"]
    assert (vhost["drop_unroutable"], vhost["return_unroutable"], vhost["confirm"]) == \
        (2, 1, 7)  # (a returned publish is confirmed too)
    assert vhost["publish"] == 7  # the channel's publishes, once each (RabbitMQ's)
    overview = http("GET", "/api/overview")[1]["message_stats"]
    assert overview["drop_unroutable"] >= 2 and overview["return_unroutable"] >= 1
    assert http("DELETE", "/api/vhosts/msv")[0] == 204


def test_churn_rates_count_connections_channels_and_queues(node, http):
    """The overview's churn_rates: connection_created (at connection.open, as rabbit_reader),
    connection_closed, channel_created / closed, queue_declared / created / deleted."""
    def churn():
        return http("GET", "/api/overview")[1]["churn_rates"]

    def settled():  # earlier tests' connections are in the workers' samples
        first = {k: v for k, v in churn().items() if not k.endswith("_details")}
        time.sleep(3 * STATS_MS / 1000)
        return first if first == {k: v for k, v in churn().items()
                                  if not k.endswith("_details")} else None
    before = wait_for("the churn counts to settle", settled)
    with node.connection() as c:
        for _ in range(3):
            c.channel().close()
        ch = c.channel()
        ch.queue_declare("churnq")
        ch.queue_declare("churnq")  # declared again: declared, not created
        ch.queue_delete("churnq")
    want = {"connection_created": 1, "connection_closed": 1, "channel_created": 4,
            "channel_closed": 4, "queue_declared": 2, "queue_created": 1, "queue_deleted": 1}

    def counted():
        now = churn()
        return now if all(now[k] - before[k] == n for k, n in want.items()) else None
    now = wait_for("the churn counts", counted)
    assert all(isinstance(now[f"{k}_details"]["rate"], float) for k in want)
    # a rate from two samples of each worker: the churn just made shows as a positive rate
    # for a while, then falls to 0
    wait_for("the queue churn rates to fall to 0", lambda: churn()[
        "queue_declared_details"]["rate"] == 0.0 and churn()[
        "channel_created_details"]["rate"] == 0.0)


def test_queue_get_empty_consumer_utilisation_and_idle_since(node, http):
    """get_empty counted by the queue; consumer_capacity = consumer_utilisation (3.10) falls
    while the only consumer is blocked by its prefetch and climbs back once it acks; a queue
    and a channel quiet for an interval show idle_since, a busy one does not."""
    assert http("PUT", "/api/queues/%2F/useq", {"durable": False})[0] == 201
    q = http("GET", "/api/queues/%2F/useq")[1]
    assert q["consumer_utilisation"] is None and q["consumer_capacity"] == 0
    with node.connection(client_properties={"connection_name": "use-test"}) as c:
        ch = c.channel()
        assert ch.basic_get("useq")[0] is None
        wait_for("get_empty", lambda: http("GET", "/api/queues/%2F/useq")[1].get(
            "message_stats", {}).get("get_empty") == 1)
        ch.basic_qos(prefetch_count=1)
        got = []
        ch.basic_consume("useq", lambda c_, m, p, b: got.append(m.delivery_tag))
        for _ in range(3):
            ch.basic_publish("", "useq", b"x")
        while not got:
            c.process_data_events(time_limit=0.1)
        # blocked: 2 ready messages, the consumer's one unacked
        low = wait_for("utilisation to fall", lambda: (lambda x: x if x.get(
            "consumer_utilisation") is not None and x["consumer_utilisation"] < 0.5 else None)(
            http("GET", "/api/queues/%2F/useq")[1]))
        assert low["consumer_capacity"] == low["consumer_utilisation"]
        assert low["messages_ready"] == 2 and low["messages_unacknowledged"] == 1
        while len(got) < 3:
            ch.basic_ack(got[-1])
            c.process_data_events(time_limit=0.1)
        ch.basic_ack(got[-1])
        wait_for("utilisation to climb back", lambda: (http("GET", "/api/queues/%2F/useq")[1]
                                                       .get("consumer_utilisation") or 0) > 0.9)

        def my_channel():
            return [x for x in http("GET", "/api/channels")[1]
                    if x["connection_details"]["name"].startswith("127.0.0.1") and
                    x.get("message_stats", {}).get("get_empty") == 1]
        idle = wait_for("the quiet channel's idle_since",
                        lambda: [x for x in my_channel() if "idle_since" in x])
        assert idle[0]["idle_since"].endswith("+00:00")
        qi = wait_for("the quiet queue's idle_since",
                      lambda: http("GET", "/api/queues/%2F/useq")[1].get("idle_since"))
        assert qi[:4].isdigit() and qi[10] == "T"
        # busy again: no idle_since until it is quiet. It publishes at each look, so that it
        # stays busy (one publish is busy for one interval only: a loaded test's polls
        # could miss that sample)
        wait_for("the channel busy again", lambda: (ch.basic_publish("", "useq", b"busy"), [
            x for x in my_channel() if "idle_since" not in x])[1])
    assert http("DELETE", "/api/queues/%2F/useq")[0] == 204


def test_user_limits_in_definitions_export_import_and_enforced(node, http):
    """A definitions document's users[].limits (RabbitMQ 3.10's shape) POSTed to the API:
    /api/user-limits and /api/users show them, the export writes them back, and the second
    connection of a user limited to one is refused with RabbitMQ's 530."""
    doc = {"users": [{"name": "lim-user", "password": "lim-pw", "tags": ["management"],
                      "limits": {"max-connections": 1, "max-channels": 3}}],
           "permissions": [{"user": "lim-user", "vhost": "/", "configure": ".*",
                            "write": ".*", "read": ".*"}]}
    status, body = http("POST", "/api/definitions", doc)
    assert status in (201, 204), body
    assert http("GET", "/api/user-limits/lim-user")[1] == [
        {"user": "lim-user", "value": {"max-connections": 1, "max-channels": 3}}]
    assert http("GET", "/api/users/lim-user")[1]["limits"] == {"max-connections": 1,
                                                                "max-channels": 3}
    exported = {u["name"]: u for u in http("GET", "/api/definitions")[1]["users"]}
    assert exported["lim-user"]["limits"] == {"max-connections": 1, "max-channels": 3}
    assert exported["guest"]["limits"] == {}
    first = node.connection(user="lim-user", password="lim-pw")
    try:
        # (pika reports a close during the handshake as a probable access refusal)
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as e:
            node.connection(user="lim-user", password="lim-pw")
        assert "(530) \"NOT_ALLOWED - Connection refused for user 'lim-user': user " \
               "connection limit (1) is reached\"" in str(e.value)
    finally:
        first.close()
    bad = {"users": [{"name": "lim-bad", "password": "x", "tags": [],
                      "limits": {"max-queues": 1}}]}
    status, body = http("POST", "/api/definitions", bad)
    assert status == 400 and "lim-bad" in body["reason"]
    assert http("DELETE", "/api/users/lim-user")[0] == 204


def test_events_written_counts_the_queue_workers_events(tmp_path):
    """leveret_events_written_total is every event the node's processes wrote: the node's,
    its connection workers' and its queue workers' (WorkerStats), the number of events in
    the event files once they are written."""
    from actors import events
    metrics_port = free_port()
    folder = tmp_path / "ev"
    folder.mkdir()
    (folder / "leveret.toml").write_text(f"collect_statistics_interval = {STATS_MS}\n"
                                         "events = \"full\"\n")
    broker = Broker.start_leveret(folder, "--management-port", "0", "--prometheus-port",
                                  str(metrics_port), "--config", str(folder / "leveret.toml"))
    broker.metrics_port = metrics_port
    try:
        with broker.connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("evq")
            for _ in range(5):
                ch.basic_publish("", "evq", b"x")
            for _ in range(5):
                m, _, _ = ch.basic_get("evq")
                ch.basic_ack(m.delivery_tag)

        def in_files():
            by_process = {}
            for path in sorted((broker.data_dir / "events").glob("*.events")):
                header, evs = events.read_file(str(path))
                by_process[header["process"]] = by_process.get(header["process"], 0) + \
                    sum(1 for e in evs if e[0] not in events.LOG_KINDS)
            return by_process

        def matching():
            files = in_files()
            metric = scrape(broker, "/metrics").get(("leveret_events_written_total", ()))
            return (files, metric) if metric == sum(files.values()) and \
                any(p.startswith("queue") and n for p, n in files.items()) else None
        files, metric = wait_for("the metric to count every process's events", matching)
        assert metric > files.get("node", 0) + sum(n for p, n in files.items()
                                                   if p.startswith("conn"))
        assert scrape(broker, "/metrics")[("leveret_events_dropped_total", ())] == 0
        status = broker.ctl("status").stdout
        assert "Events dropped (buffer full): 0" in status and "Level: full" in status
    finally:
        broker.stop()


def test_an_exchange_declared_again_starts_its_counts_from_zero(node, http):
    """RabbitMQ drops an exchange's statistics when it is deleted: a new exchange of the same
    name has no message_stats until something is published into it, then counts from 0."""
    assert http("PUT", "/api/exchanges/%2F/again-x", {"type": "fanout"})[0] == 201

    def stats():
        return http("GET", "/api/exchanges/%2F/again-x")[1].get("message_stats", {})
    with node.connection() as c:
        ch = c.channel()
        for _ in range(3):
            ch.basic_publish("again-x", "", b"x")
        wait_for("3 publishes counted", lambda: stats().get("publish_in") == 3)
        assert http("DELETE", "/api/exchanges/%2F/again-x")[0] == 204
        assert http("PUT", "/api/exchanges/%2F/again-x", {"type": "fanout"})[0] == 201
        assert "message_stats" not in http("GET", "/api/exchanges/%2F/again-x")[1]
        ch.basic_publish("again-x", "", b"x")
        wait_for("1 publish counted", lambda: stats().get("publish_in") == 1)
    assert http("DELETE", "/api/exchanges/%2F/again-x")[0] == 204


def test_a_permission_whose_regex_does_not_compile_is_a_400(node, http):
    """rabbit_auth_backend_internal refuses it with {invalid_regexp, ...}, which the management
    answers 400 bad_request; nothing is stored."""
    for path, body in (("/api/permissions/%2F/guest",
                        {"configure": "(", "write": ".*", "read": ".*"}),
                       ("/api/topic-permissions/%2F/guest",
                        {"exchange": "amq.topic", "write": ".*", "read": "[a-"})):
        status, answer = http("PUT", path, body)
        assert status == 400 and answer["error"] == "bad_request", (status, answer)
        assert "invalid regexp" in answer["reason"], answer
    perms = [p for p in http("GET", "/api/permissions")[1] if p["user"] == "guest"]
    assert [(p["configure"], p["write"], p["read"]) for p in perms] == [(".*", ".*", ".*")]
    assert not [p for p in http("GET", "/api/topic-permissions")[1] if p["user"] == "guest"]
