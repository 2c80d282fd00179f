"""Leveret's management API compared, field by field, with RabbitMQ 3.10.8's answers for the
same objects (tests/data/rabbitmq-3.10-api/*.json, captured by `python -m tools.api_capture`
from Debian's rabbitmq-server with the rabbitmq_management plugin): the same scenario
(tools/api_capture.py) runs against a Leveret node, and every field name and JSON type of each
answer must match, but for the deliberate differences listed below, each with its reason.
Also: Leveret's definitions export imports into a real RabbitMQ 3.10 (skipped, saying so, when
rabbitmq-server is not installed)."""

from __future__ import annotations

import base64
import json
import re
import tempfile
import urllib.request
from pathlib import Path

import pika
import pytest

from amqp_helpers import consume_single_active, wait_until
from tools import api_capture as cap
from bench.refbroker import RabbitMQNode, rabbitmq_installed
from conftest import Broker, free_port

ERLANG = "an Erlang VM measure (process memory, reductions, garbage collector): no Python " \
         "equivalent"
DETAILED = "not measured yet (docs/management.md, 'Not there yet'): absent rather than invented"
STORAGE = "classic queue v1 storage internals (backing_queue_status): Leveret's storage " \
          "is not RabbitMQ's"
QUORUM_LINKS = "a channel sends a quorum queue's publishes to its leader over the queue link " \
               "(docs/cluster.md), not as Raft commands of its own: nothing is pending per channel"
SAME_DOC = "/api/definitions is the document of `leveretctl export_definitions` " \
           "(docs/definitions.md: rabbitmqctl's shape), which RabbitMQ 3.10 imports (tested below)"

DELIVERY_COUNT = "Leveret's queues add x-delivery-count to a redelivered message's headers " \
                 "(S6, as RabbitMQ 4's quorum queues do; 3.10's classic queues do not): the " \
                 "requeued message that had no properties has that header"

NOT_MEASURED = "a file handle cache or garbage collector figure Leveret has no counterpart " \
               "of: left out rather than a constant (docs/management.md, '/api/nodes')"
UNMEASURED_NODE_FIELDS = ("gc_bytes_reclaimed", "io_read_avg_time", "io_write_avg_time",
                          "io_seek_avg_time", "io_seek_count", "io_reopen_count")

# (answer, dotted path, "missing" | "extra" | "type ..."): reason
DIFFERENCES = {
    ("overview", "contexts[].cowboy_opts", "missing"): "Cowboy's (RabbitMQ's HTTP server) options",
    ("overview", "contexts[].ip", "missing"): DETAILED,
    ("overview", "contexts[].ssl_opts", "missing"): "Cowboy's TLS options",
    ("overview", "disable_stats", "missing"): "statistics cannot be disabled in Leveret",
    ("overview", "enable_queue_totals", "missing"): "statistics cannot be disabled in Leveret",
    ("overview", "listeners[].socket_opts", "missing"): "Erlang's gen_tcp socket options",
    ("overview", "release_series_support_status", "missing"): "RabbitMQ's release support status",
    ("overview", "sample_retention_policies", "missing"): "Leveret keeps the last two samples, "
    "no retention policies (rates only, no history)",
    **{("queue", f, "missing"): ERLANG for f in ("garbage_collection", "memory", "reductions",
                                                 "reductions_details")},
    ("queue", "backing_queue_status", "missing"): STORAGE,
    ("queue", "recoverable_slaves", "missing"): "mirrors are listed in slave_nodes; no "
    "separate recoverable list",
    **{(a, f, "missing"): ERLANG for a in ("connection", "channel") for f in (
        "garbage_collection", "reductions", "reductions_details")},
    ("channel", "pending_raft_commands", "missing"): QUORUM_LINKS,
    # the lists: their items as the single objects', less the detail-only fields (RabbitMQ
    # 3.10 leaves them out of a list, and so does Leveret)
    **{("queues", f"[].{f}", "missing"): ERLANG for f in (
        "garbage_collection", "memory", "reductions", "reductions_details")},
    ("queues", "[].backing_queue_status", "missing"): STORAGE,
    ("queues", "[].recoverable_slaves", "missing"): "mirrors are listed in slave_nodes; no "
    "separate recoverable list",
    **{(a, f"[].{f}", "missing"): ERLANG for a in ("connections", "channels") for f in (
        "garbage_collection", "reductions", "reductions_details")},
    ("channels", "[].pending_raft_commands", "missing"): QUORUM_LINKS,
    **{("definitions", f, "extra"): SAME_DOC
       for f in ("queues[].type", "vhosts[].limits", "vhosts[].metadata")},
    ("vhost_definitions", "queues[].type", "extra"): SAME_DOC,
    ("node", "contexts[].cowboy_opts", "missing"): "Cowboy's (RabbitMQ's HTTP server) options",
    ("nodes", "[].contexts[].cowboy_opts", "missing"): "Cowboy's (RabbitMQ's HTTP server) "
    "options",
    ("get", "taken.body[].properties", "type list vs object"): DELIVERY_COUNT,
    **{(a, f"{p}{f}{d}", "missing"): NOT_MEASURED for a, p in (("node", ""), ("nodes", "[]."))
       for f in UNMEASURED_NODE_FIELDS for d in ("", "_details")},
}
# objects whose keys are data (node names, client properties, arguments...), not field names
DATA_MAPS = {"cluster_state", "client_properties", "arguments", "definition", "value",
             "effective_policy_definition", "capabilities", "limits", "metadata", "headers"}


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}[type(v)]


def _key(item):
    """How elements of a list are paired (component and name, else name, else position)."""
    if isinstance(item, dict):
        return (item.get("component"), item.get("name"), item.get("user"))
    return None


def compare(ref, ours, path: str, out: list) -> None:
    """(path, difference) for every field name or JSON type that differs."""
    kr, ko = _kind(ref), _kind(ours)
    if kr != ko:
        out.append((path, f"type {kr} vs {ko}"))
        return
    if kr == "object":
        if path.rpartition(".")[2] in DATA_MAPS:
            return
        for k in ref:
            sub = f"{path}.{k}" if path else k
            if k not in ours:
                out.append((sub, "missing"))
            else:
                compare(ref[k], ours[k], sub, out)
        out.extend(((f"{path}.{k}" if path else k), "extra") for k in ours if k not in ref)
    elif kr == "list" and ref and ours:
        mine = {_key(o): o for o in ours}
        for i, r in enumerate(ref):
            if _key(r) in (None, (None, None, None)):  # nothing names it: by position
                o = ours[min(i, len(ours) - 1)]
            else:
                o = mine.get(_key(r), ours[0])
            compare(r, o, path + "[]", out)


@pytest.fixture(scope="module")
def leveret(tmp_path_factory):
    """A Leveret node with its management API: (broker, cap.Http)."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="leveret-", dir=tmp_path_factory.getbasetemp()))
    (folder / "leveret.toml").write_text(
        f"collect_statistics_interval = {cap.STATS_INTERVAL_MS}\n")
    broker = Broker.start_leveret(folder, "--management-port", str(port), "--config",
                                  str(folder / "leveret.toml"))
    try:
        yield broker, cap.Http(port)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def leveret_answers(leveret):
    broker, http = leveret
    conn = cap.scenario(http, "127.0.0.1", broker.port)
    try:
        yield cap.capture(http, ctl=broker.ctl)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def rabbitmq():
    """One RabbitMQ 3.10 node for the module's import tests (each imports objects of names of
    its own): its boot costs more than either test."""
    with RabbitMQNode(management_port=0) as rmq:
        yield rmq


@pytest.mark.parametrize("name", sorted(cap.ENDPOINTS))
def test_field_names_and_types_match_rabbitmq_3_10(leveret_answers, name):
    ref = json.loads((cap.OUT / f"{name}.json").read_text())
    found: list = []
    compare(ref, leveret_answers[name], "", found)
    unexplained = [(p, d) for p, d in found
                   if (name, p.replace(".[]", "[]"), d) not in DIFFERENCES]
    assert not unexplained, f"{name}: differences from RabbitMQ 3.10.8 not listed in " \
                            f"DIFFERENCES: {unexplained}"


def test_every_listed_difference_still_exists(leveret_answers):
    """A difference fixed since is taken off the list (the list stays true)."""
    seen = set()
    for name in cap.ENDPOINTS:
        found: list = []
        compare(json.loads((cap.OUT / f"{name}.json").read_text()), leveret_answers[name],
                "", found)
        seen.update((name, p, d) for p, d in found)
    stale = [k for k in DIFFERENCES if k not in seen]
    assert not stale, "\n".join(map(str, stale))


# values that must be RabbitMQ's for the same scenario (3 confirmed publishes into a topic
# exchange bound to one queue, consumed and acked; one channel): the statistics the actors
# emit, compared number by number, not only by name and type
SAME_VALUES = [
    *[("exchange", f"message_stats.{k}") for k in ("publish_in", "publish_out")],
    *[(a, f"message_stats.{k}") for a in ("overview", "vhost", "channel")
      for k in ("publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
                "deliver_no_ack", "get", "get_no_ack", "get_empty", "redeliver", "ack",
                "deliver_get")],
    *[("queue", f"message_stats.{k}") for k in ("publish", "deliver", "get_empty", "ack",
                                                  "deliver_get")],
    # (RabbitMQ's connection_closed is 1: the management plugin's own direct connection;
    # Leveret's API declares through the node, with no connection)
    *[("overview", f"churn_rates.{k}") for k in (
        "connection_created", "channel_created", "channel_closed", "queue_declared",
        "queue_created", "queue_deleted")],
    ("queue", "consumers"), ("channel", "consumer_count"),
    # a plain consume (not exclusive, no arguments) on a plain queue: as RabbitMQ shows it
    # (what a client asked for otherwise: test_fixed_fields_follow_what_the_client_did)
    *[("consumer", k) for k in ("exclusive", "arguments", "active", "activity_status",
                                "ack_required", "prefetch_count")],
    *[("queue", k) for k in ("exclusive_consumer_tag", "single_active_consumer_tag")],
    # who declared the exchange (the scenario's guest) and the connection's user
    ("exchange", "user_who_performed_action"), ("connection", "user_who_performed_action"),
    ("channel", "user_who_performed_action"),
    # a plain TCP connection's TLS fields
    *[("connection", k) for k in ("ssl", "ssl_protocol", "ssl_cipher", "ssl_hash",
                                  "ssl_key_exchange", "peer_cert_subject", "peer_cert_issuer",
                                  "peer_cert_validity")],
    # (transient messages into a queue that never paged: nothing written or read back; no
    # timestamp property on the queue's messages: null)
    *[("overview", f"message_stats.{k}") for k in ("disk_reads", "disk_writes")],
    ("queue", "head_message_timestamp"),
    *[("queue", k) for k in ("message_bytes", "message_bytes_ready", "message_bytes_ram",
                             "messages_ram", "messages_paged_out", "messages_persistent",
                             "message_bytes_persistent")],
    # the health checks: their status codes and what they say (the ports, node names and
    # listener lists are each broker's own)
    *[(a, "http_status") for a in (
        "health_local_alarms", "health_port_listener", "health_port_listener_missing",
        "health_protocol_listener", "health_protocol_listener_missing",
        "health_virtual_hosts", "health_quorum_critical")],
    *[(a, "body") for a in ("health_local_alarms", "health_protocol_listener",
                            "health_virtual_hosts", "health_quorum_critical")],
    *[("health_port_listener_missing", f"body.{k}") for k in ("status", "reason", "missing")],
    *[("health_protocol_listener_missing", f"body.{k}") for k in ("status", "reason",
                                                                  "missing")],
    *[("health_alarms_failed", f"{a}.{k}") for a in ("alarms", "local_alarms")
      for k in ("http_status", "body.status", "body.reason", "body.alarms.0.resource")],
    # topic permissions and user limits, as set by the capture
    *[(a, "") for a in ("topic_permissions", "topic_permission", "user_topic_permissions",
                        "vhost_topic_permissions", "user_limits", "user_limit")],
    # publish and get: what was routed, and each message as it came back
    ("publish", ""), ("publish_unroutable", ""),
    *[("get", f"{a}.{k}") for a in ("requeued", "taken", "empty") for k in (
        "http_status", "body")],
]


def _at(answer, path):
    for part in filter(None, path.split(".")):
        answer = answer[int(part)] if isinstance(answer, list) else answer[part]
    return answer


def _without_delivery_count(messages: list) -> list:
    """A get's messages less the x-delivery-count header Leveret adds to redeliveries
    (DELIVERY_COUNT), properties that had nothing else as RabbitMQ shows none: []."""
    out = []
    for msg in messages:
        props = dict(msg["properties"] or {})
        headers = {k: v for k, v in (props.pop("headers", None) or {}).items()
                   if k != "x-delivery-count"}
        if headers:
            props["headers"] = headers
        out.append(dict(msg, properties=props or []))
    return out


@pytest.mark.parametrize("name,path", SAME_VALUES, ids=[f"{a}:{p}" for a, p in SAME_VALUES])
def test_statistics_values_match_rabbitmq_3_10(leveret_answers, name, path):
    ref = json.loads((cap.OUT / f"{name}.json").read_text())
    ours = _at(leveret_answers[name], path)
    if (name, path) == ("get", "taken.body"):
        ours = _without_delivery_count(ours)
    assert ours == _at(ref, path)


def test_consumer_use_and_idle_since_as_rabbitmq_3_10(leveret_answers):
    """consumer_capacity and consumer_utilisation are one measure in 3.10, near 1 for a queue
    whose consumer always had room; idle_since is RabbitMQ's timestamp format, on the quiet
    queue and channel."""
    q = leveret_answers["queue"]
    assert q["consumer_capacity"] == q["consumer_utilisation"]
    assert 0.5 < q["consumer_utilisation"] <= 1.0
    pattern = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$"
    for name in ("queue", "channel"):
        assert re.match(pattern, _at(json.loads((cap.OUT / f"{name}.json").read_text()),
                                     "idle_since"))
        assert re.match(pattern, leveret_answers[name]["idle_since"]), name


def _reference(name: str, path: str):
    return _at(json.loads((cap.OUT / f"{name}.json").read_text()), path)


def _until(what: str, fn):
    """fn() once true, polled every half statistics interval for 30 s."""
    return wait_until(fn, timeout=30.0, interval=cap.STATS_INTERVAL_MS / 1000 / 2,
                      message=what)


def _consumers(http, queue: str) -> dict:
    return {c["consumer_tag"]: c for c in http.ok("GET", "/api/consumers/%2F")
            if c["queue"]["name"] == queue}


def test_fixed_fields_follow_what_the_client_did__S1_S2(leveret):
    """The fields the scenario leaves at RabbitMQ's defaults (false, {}, "up", null) take what
    the client did, with the JSON types RabbitMQ gives them: an exclusive consume with
    x-priority 5, and a single active consumer queue with two consumers (S1)."""
    broker, http = leveret
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare("cmp-excl")
        ch.basic_consume("cmp-excl", lambda *a: None, consumer_tag="cmp-excl-c",
                         exclusive=True, arguments={"x-priority": 5})
        consume_single_active(conn, "cmp-sac", ["cmp-sac-1", "cmp-sac-2"])
        excl = _until("the exclusive consumer", lambda: _consumers(http, "cmp-excl"))
        assert {k: excl["cmp-excl-c"][k] for k in ("exclusive", "arguments", "active",
                                                   "activity_status")} == {
            "exclusive": True, "arguments": {"x-priority": 5}, "active": True,
            "activity_status": "up"}
        sac = _until("one single active consumer, one waiting", lambda: (
            lambda rows: rows if {t: (r["active"], r["activity_status"]) for t, r in
                                  rows.items()} == {"cmp-sac-1": (True, "single_active"),
                                                    "cmp-sac-2": (False, "waiting")}
            else None)(_consumers(http, "cmp-sac")))
        for row in (*excl.values(), *sac.values()):  # RabbitMQ's types for these fields
            for k in ("exclusive", "arguments", "active", "activity_status"):
                assert _kind(row[k]) == _kind(_reference("consumer", k)), k
        q = _until("the exclusive consumer's tag", lambda: (
            lambda q: q if q.get("exclusive_consumer_tag") else None)(
            http.ok("GET", "/api/queues/%2F/cmp-excl")))
        assert (q["exclusive_consumer_tag"], q["single_active_consumer_tag"]) == \
            ("cmp-excl-c", None)
        q = http.ok("GET", "/api/queues/%2F/cmp-sac")
        assert (q["single_active_consumer_tag"], q["exclusive_consumer_tag"]) == \
            ("cmp-sac-1", None)
    finally:
        conn.close()


def test_node_storage_counts_are_measured__C5(leveret):
    """io_sync_count, io_sync_avg_time and msg_store_write_count (RabbitMQ's reference shows
    0 on an idle node, so equal types prove nothing) grow with confirmed persistent
    publishes of bodies kept in msg_store."""
    broker, http = leveret
    before = _until("the node's sample", lambda: http.ok("GET", "/api/nodes")[0])
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("cmp-durable", durable=True)

        def grown():
            ch.basic_publish("", "cmp-durable", b"d" * 8192,
                             pika.BasicProperties(delivery_mode=2))
            n = http.ok("GET", "/api/nodes")[0]
            return n["io_sync_count"] > before["io_sync_count"] and \
                n["msg_store_write_count"] > before["msg_store_write_count"] and \
                n["io_sync_avg_time"] > 0 and n
        after = _until("the node's syncs and msg_store writes", grown)
        for k in ("io_sync_count", "io_sync_avg_time", "msg_store_write_count",
                  "msg_store_read_count"):
            assert _kind(after[k]) == _kind(_reference("node", k)), k
    finally:
        conn.close()


@pytest.mark.skipif(not rabbitmq_installed(), reason="rabbitmq-server is not installed "
                    "(apt-get install rabbitmq-server): Leveret's export is not imported into "
                    "a real RabbitMQ here")
@pytest.mark.timeout(300)
def test_leveret_definitions_import_into_rabbitmq_3_10(leveret_answers, rabbitmq):
    """Leveret's export (users with their hashes, permissions, policies, an operator policy
    and a vhost limit as parameters, a queue, an exchange, a binding) POSTed to RabbitMQ's
    /api/definitions: every object is there after, and the user logs in with its password."""
    doc = leveret_answers["definitions"]
    http = cap.Http(rabbitmq.management_port)
    status, body = http("POST", "/api/definitions", doc)
    assert status in (201, 204), body
    q = http.ok("GET", "/api/queues/%2F/cmp-q")
    assert q["durable"] is True and q["arguments"] == {"x-max-priority": 5}
    assert http.ok("GET", "/api/exchanges/%2F/cmp-x")["type"] == "topic"
    assert [b["routing_key"] for b in http.ok("GET", "/api/bindings/%2F/e/cmp-x/q/cmp-q")] \
        == ["a.#"]
    assert http.ok("GET", "/api/policies/%2F/cmp-p")["definition"] == {"max-length": 50}
    assert http.ok("GET", "/api/operator-policies/%2F/cmp-op")["definition"] == {
        "max-length": 80}
    assert http.ok("GET", "/api/vhost-limits/%2F")[0]["value"] == {"max-queues": 1000}
    assert http.ok("GET", "/api/permissions/%2F/cmp-user")["configure"] == "^cmp-"
    # the user logs in with the password it had in Leveret (its hash travelled)
    req = urllib.request.Request(http.base + "/api/whoami")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"cmp-user:cmp-pw").decode())
    with urllib.request.urlopen(req, timeout=30) as r:
        assert json.loads(r.read()) == {"name": "cmp-user", "tags": ["monitoring"]}


@pytest.mark.skipif(not rabbitmq_installed(), reason="rabbitmq-server is not installed "
                    "(apt-get install rabbitmq-server): Leveret's export is not imported into "
                    "a real RabbitMQ here")
@pytest.mark.timeout(300)
def test_user_limits_of_leveret_s_export_import_into_rabbitmq_3_10(tmp_path, rabbitmq):
    """A user limit set in Leveret travels in its export's users[].limits, and RabbitMQ 3.10
    imports it as its own user limit."""
    port = free_port()
    broker = Broker.start_leveret(tmp_path, "--management-port", str(port))
    try:
        http = cap.Http(port)
        http.ok("PUT", "/api/users/lim-user", {"password": "pw", "tags": ""})
        http.ok("PUT", "/api/user-limits/lim-user/max-connections", {"value": 3})
        http.ok("PUT", "/api/user-limits/lim-user/max-channels", {"value": 9})
        doc = http.ok("GET", "/api/definitions")
    finally:
        broker.stop()
    assert next(u for u in doc["users"] if u["name"] == "lim-user")["limits"] == {
        "max-connections": 3, "max-channels": 9}
    rhttp = cap.Http(rabbitmq.management_port)
    status, body = rhttp("POST", "/api/definitions", doc)
    assert status in (201, 204), body
    assert rhttp.ok("GET", "/api/user-limits/lim-user") == [
        {"user": "lim-user", "value": {"max-connections": 3, "max-channels": 9}}]
