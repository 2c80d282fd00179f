"""RabbitMQ's JSON definitions, both ways, without a broker (actors/node/definitions_json.py).

The fixture tests/data/rabbitmq-3.10-definitions.json is written by hand in the shape
`rabbitmqctl export_definitions` gives in RabbitMQ 3.10: user "orders-app" has the SHA-256
hash RabbitMQ's documentation gives for the password "test12" with salt 0x908DC60A
(https://www.rabbitmq.com/passwords.html), guest the hash of "guest" with salt 0x8CD297A3.
"""
from __future__ import annotations

import json
from pathlib import Path

from actors.core.permissions import AuthDB, SHA256, SHA512, MD5, hash_password
from actors.node import definitions_json as dj
from actors.replica import apply_change

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "rabbitmq-3.10-definitions.json"


class State:
    """What the metadata actor keeps, enough for apply_change."""

    def __init__(self):
        from actors.core.routing import Router
        self.auth = AuthDB.default()
        self.router = Router()
        self.router.add_vhost("/")
        self.queues = {}
        self.policies = {}

    def apply(self, plan):
        for c in plan.changes:
            if c[0] == "queue_new":
                q = dict(c[1], exclusive="")
                apply_change(self, ["router", "add_queue", [q["vhost"], q["name"]]])
                apply_change(self, ["queue_put", q])
            else:
                apply_change(self, c)

    def durable(self):
        exchanges = [[v, n, x.type, x.durable, x.auto_delete, x.internal, dict(x.arguments)]
                     for v in self.auth.list_vhosts()
                     for n, x in self.router.exchanges(v).items()
                     if x.durable and n and not n.startswith("amq.")]
        bindings = [[v, b.source, b.dest_kind, b.dest, b.routing_key, dict(b.arguments)]
                    for v in self.auth.list_vhosts() for b in self.router.list_bindings(v)]
        return {"auth": self.auth.to_state(), "exchanges": exchanges, "bindings": bindings,
                "queues": list(self.queues.values()),
                "policies": list(self.policies.values())}


def fixture():
    return json.loads(FIXTURE.read_text())


def imported():
    s = State()
    plan = dj.plan_import(fixture(), s.durable())
    assert plan.errors == []
    s.apply(plan)
    return s, plan


def test_rabbitmq_310_export_imports_cleanly():
    s, plan = imported()
    # cluster_name names the exporting cluster: warned about, not imported
    assert plan.warnings == ["global parameter 'cluster_name' not imported: it names the "
                             "cluster that exported it"]
    assert s.auth.user_tags("orders-app") == ["monitoring", "policymaker"]
    assert s.auth.vhosts["shop"] == {"description": "the shop's messaging",
                                     "tags": ["production"]}
    assert s.auth.get_permissions("orders-app", "shop") == ("^orders\\.", ".*", ".*")
    assert s.auth.list_topic_permissions("shop") == [
        {"user": "orders-app", "vhost": "shop", "exchange": "events", "write": "^order\\.",
         "read": ".*"}]
    assert s.policies[("shop", "orders-confirm")]["apply_to"] == "queues"
    assert set(s.queues) == {("shop", "orders.new"), ("shop", "orders.audit")}
    assert s.queues[("shop", "orders.new")]["arguments"] == {"x-queue-type": "classic",
                                                             "x-max-length": 1000}
    assert s.router.exchange("shop", "events").type == "topic"
    assert len(s.router.list_bindings("shop")) == 3


def test_rabbitmq_sha256_hash_logs_in_with_its_password():
    s, _ = imported()
    assert s.auth.check_password("orders-app", "test12")
    assert not s.auth.check_password("orders-app", "test13")
    assert s.auth.check_password("guest", "guest")  # an existing user: hash replaced


def test_sha512_and_md5_hashes_are_accepted():
    doc = {"users": [
        {"name": "a", "password_hash": hash_password("pa", algorithm=SHA512),
         "hashing_algorithm": SHA512, "tags": ""},
        {"name": "d", "password_hash": hash_password("pd", algorithm=SHA256), "tags": []},
        {"name": "b", "password_hash": hash_password("pb", algorithm=MD5),
         "hashing_algorithm": MD5, "tags": "administrator,monitoring"},
        {"name": "c", "password_hash": hash_password("pc", algorithm=MD5), "tags": []}],
        "rabbit_version": "3.10.8"}
    # no hashing_algorithm: sha256, except in files of RabbitMQ 3.0 to 3.5 (md5), as
    # rabbit_auth_backend_internal:hashing_algorithm/2
    doc["users"][-1]["hashing_algorithm"] = MD5
    s = State()
    plan = dj.plan_import(doc, s.durable())
    assert plan.errors == []
    s.apply(plan)
    assert s.auth.check_password("a", "pa") and s.auth.check_password("b", "pb")
    assert s.auth.check_password("c", "pc") and s.auth.check_password("d", "pd")
    assert s.auth.user_tags("b") == ["administrator", "monitoring"]  # 3.8's string form
    old = {"rabbit_version": "3.5.7",
           "users": [{"name": "e", "password_hash": hash_password("pe", algorithm=MD5),
                      "tags": "administrator"}]}
    plan = dj.plan_import(old, s.durable())
    assert plan.errors == [] and plan.changes[0][2][2] == MD5


def test_plaintext_passwords_are_hashed_before_planning():
    """RabbitMQ takes a user's plaintext `password`; Leveret hashes it where the file is read
    (and again at the first node that receives it), so only a hash is planned and stored."""
    doc = {"users": [{"name": "pat", "password": "s3cret", "tags": ["monitoring"]}]}
    hashed = dj.hash_plain_passwords(doc)
    assert "password" not in hashed["users"][0] and "password" in doc["users"][0]
    assert hashed["users"][0]["hashing_algorithm"] == SHA256
    s = State()
    plan = dj.plan_import(hashed, s.durable())
    assert plan.errors == [] and "s3cret" not in json.dumps(plan.changes)
    s.apply(plan)
    assert s.auth.check_password("pat", "s3cret")


def test_export_is_rabbitmq_shaped_and_round_trips():
    s, _ = imported()
    doc = dj.export(s.durable())
    assert doc["rabbit_version"] == "3.10.8" and doc["rabbitmq_version"] == "3.10.8"
    assert set(doc) == dj.TOP_KEYS
    app = next(u for u in doc["users"] if u["name"] == "orders-app")
    assert app == {"name": "orders-app",
                   "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
                   "hashing_algorithm": SHA256, "tags": ["monitoring", "policymaker"],
                   "limits": {}}
    assert {"vhost": "shop", "name": "orders-confirm", "pattern": "^orders\\.",
            "apply-to": "queues", "definition": {"confirm-on": "enqueue"},
            "priority": 1} in doc["policies"]
    assert all(not x["name"].startswith("amq.") for x in doc["exchanges"])
    # into an empty state again: the same definitions
    fresh = State()
    plan = dj.plan_import(json.loads(json.dumps(doc)), fresh.durable())
    assert plan.errors == [] and plan.warnings == []
    fresh.apply(plan)
    again = dj.export(fresh.durable())
    for key in ("users", "vhosts", "permissions", "topic_permissions", "policies", "queues",
                "exchanges"):
        assert sorted(map(json.dumps, again[key])) == sorted(map(json.dumps, doc[key])), key
    assert sorted(map(json.dumps, again["bindings"])) == sorted(map(json.dumps, doc["bindings"]))


def test_export_leaves_out_exclusive_and_builtin():
    state = {"auth": AuthDB.default().to_state(), "policies": [], "bindings": [],
             "queues": [{"vhost": "/", "name": "t", "durable": False, "auto_delete": False,
                         "exclusive": "", "arguments": {}},
                        {"vhost": "/", "name": "x", "durable": True, "auto_delete": False,
                         "exclusive": "conn-1", "arguments": {}},
                        {"vhost": "/", "name": "d", "durable": True, "auto_delete": True,
                         "exclusive": "", "arguments": {"x-max-length": 2}}],
             "exchanges": [["/", "amq.direct", "direct", True, False, False, {}],
                           ["/", "tx", "fanout", False, False, False, {}],
                           ["/", "dx", "fanout", True, False, True, {}]]}
    state["bindings"] = [["/", "dx", "queue", "x", "", {}], ["/", "dx", "queue", "t", "", {}]]
    doc = dj.export(state)
    # as rabbit_definitions:list_queues/0: every queue but exclusive ones, with its type
    assert doc["queues"] == [
        {"name": "t", "vhost": "/", "type": "classic", "durable": False, "auto_delete": False,
         "arguments": {}},
        {"name": "d", "vhost": "/", "type": "classic", "durable": True, "auto_delete": True,
         "arguments": {"x-max-length": 2}}]
    assert [x["name"] for x in doc["exchanges"]] == ["tx", "dx"]
    assert [b["destination"] for b in doc["bindings"]] == ["t"]  # not the exclusive queue's
    assert doc["vhosts"] == [{"name": "/", "limits": [],
                              "metadata": {"description": "", "tags": []}}]


def test_import_is_idempotent():
    s, _ = imported()
    plan = dj.plan_import(fixture(), s.durable())
    assert plan.errors == []
    kinds = {(c[0], c[1]) for c in plan.changes}
    # users are rewritten (hash and tags), permissions and policies set again; nothing else
    assert kinds <= {("auth", "change_password_hash"), ("auth", "set_user_tags"),
                     ("auth", "set_permissions"), ("auth", "set_topic_permissions"),
                     ("policy_put", "shop")}


def test_unknown_keys_are_warnings():
    doc = {"users": [], "queues": [], "frobnicate": 1,
           "vhosts": [{"name": "v", "colour": "red"}]}
    plan = dj.plan_import(doc, State().durable())
    assert plan.errors == []
    assert "unknown key 'frobnicate' ignored" in plan.warnings
    assert "vhost 'v': unknown key 'colour' ignored" in plan.warnings


def test_amq_exchanges_are_skipped_with_a_warning():
    doc = {"exchanges": [{"name": "amq.direct", "vhost": "/", "type": "direct",
                          "durable": True, "auto_delete": False, "internal": False,
                          "arguments": {}}]}
    plan = dj.plan_import(doc, State().durable())
    assert plan.errors == [] and plan.changes == []
    assert plan.warnings == ["Skipping import of an exchange whose name begins with 'amq.', "
                             "name: amq.direct (vhost '/')"]


def test_invalid_objects_are_errors_naming_them():
    doc = {
        "users": [{"name": "u", "password_hash": "x", "hashing_algorithm": "rabbit_bcrypt"},
                  {"name": "p", "password": "plain", "password_hash": "", "tags": []},
                  {"name": "t", "password_hash": ""}],
        "permissions": [{"user": "ghost", "vhost": "/", "configure": ".*", "write": ".*",
                         "read": ".*"},
                        {"user": "guest", "vhost": "/", "configure": "(", "write": ".*",
                         "read": ".*"}],
        "queues": [{"name": "q", "vhost": "nowhere", "durable": True, "auto_delete": False,
                    "arguments": {}},
                   {"name": "q2", "vhost": "/", "durable": True, "auto_delete": False,
                    "arguments": {"x-max-length": "ten"}},
                   {"name": "q3", "vhost": "/", "durable": True, "auto_delete": False,
                    "arguments": {}, "type": "quorum"}],
        "exchanges": [{"name": "e", "vhost": "/", "type": "x-consistent-hash",
                       "durable": True, "auto_delete": False, "internal": False,
                       "arguments": {}}],
        "bindings": [{"source": "missing", "vhost": "/", "destination": "q",
                      "destination_type": "queue", "routing_key": "", "arguments": {}}],
        "policies": [{"vhost": "/", "name": "p", "pattern": ".*", "apply-to": "queues",
                      "definition": {"no-such-key": 1}, "priority": 0}],
        "parameters": [{"vhost": "/", "component": "federation-upstream", "name": "up",
                        "value": {"uri": "amqp://"}}],
    }
    errors = dj.plan_import(doc, State().durable()).errors
    text = "\n".join(errors)
    assert "user 'u': unknown hashing_algorithm 'rabbit_bcrypt'" in text
    assert "user 'p': both_password_and_password_hash_are_provided" in text
    assert "user 't': tags_not_present" in text  # rabbit_auth_backend_internal:put_user/3
    assert 'User "ghost" does not exist' in text
    assert "invalid regexp" in text
    assert "queue 'q' in vhost 'nowhere': no vhost 'nowhere'" in text
    assert "queue 'q2' in vhost '/'" in text and "x-max-length" in text
    assert "queue type 'quorum' is not supported" in text
    assert "unknown exchange type 'x-consistent-hash'" in text
    assert "no exchange 'missing' in vhost '/'" in text
    assert "are not recognised policy settings" in text and "no-such-key" in text
    assert "federation-upstream" in text and "not supported" in text


def test_an_existing_queue_is_kept_as_it_is():
    """rabbit_definitions:add_queue_int/3: an existing queue is left alone."""
    s, _ = imported()
    doc = fixture()
    doc["queues"][0]["arguments"] = {"x-max-length": 5}
    plan = dj.plan_import(doc, s.durable())
    assert plan.errors == [] and not any(c[0] == "queue_new" for c in plan.changes)
    assert "queue 'orders.new' in vhost 'shop': exists with other properties, kept as it " \
           "is" in plan.warnings


def test_amq_queues_are_skipped_with_a_warning():
    doc = {"queues": [{"name": "amq.q", "vhost": "/", "durable": True, "auto_delete": False,
                       "arguments": {}}]}
    plan = dj.plan_import(doc, State().durable())
    assert plan.errors == [] and plan.changes == []
    assert plan.warnings == ["Skipping import of a queue whose name begins with 'amq.', "
                             "name: amq.q (vhost '/')"]


def test_not_an_object():
    assert dj.plan_import([], State().durable()).errors == ["definitions must be a JSON object"]
    assert dj.plan_import({"users": {}}, State().durable()).errors == ["'users' must be a list"]


def test_content_hash_is_sha256_hex():
    assert dj.content_hash(b"") == \
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_bindings_to_built_in_exchanges_only_when_they_exist():
    s, _ = imported()
    ok = {"bindings": [{"source": "amq.topic", "vhost": "shop", "destination": "orders.new",
                        "destination_type": "queue", "routing_key": "#", "arguments": {}}]}
    plan = dj.plan_import(ok, s.durable())
    assert plan.errors == [] and plan.changes == [["router", "bind", [
        "shop", "amq.topic", "queue", "orders.new", "#", {}]]]
    bad = {"bindings": [dict(ok["bindings"][0], source="amq.nonesuch")]}
    assert dj.plan_import(bad, s.durable()).errors == [
        "binding from 'amq.nonesuch' to queue 'orders.new' in vhost 'shop': no exchange "
        "'amq.nonesuch' in vhost 'shop'"]


def test_operator_policies_and_vhost_limits_travel_as_runtime_parameters():
    """RabbitMQ 3.10 exports them under "parameters" (components operator_policy and
    vhost-limits); Leveret writes and reads them the same way."""
    state = {"auth": {"vhosts": [{"name": "/"}], "users": [], "permissions": []},
             "op_policies": [{"vhost": "/", "name": "cap", "pattern": "^q", "priority": 0,
                              "definition": {"max-length": 10}, "apply_to": "queues"}],
             "limits": [["vhost", "/", {"max-queues": 7}], ["user", "bob", {"max-channels": 1}]]}
    doc = dj.export(state)
    assert doc["parameters"] == [
        {"value": {"pattern": "^q", "definition": {"max-length": 10}, "priority": 0,
                   "apply-to": "queues"}, "vhost": "/", "component": "operator_policy",
         "name": "cap"},
        {"value": {"max-queues": 7}, "vhost": "/", "component": "vhost-limits",
         "name": "limits"}]
    plan = dj.plan_import({"parameters": doc["parameters"]},
                          {"auth": {"vhosts": [{"name": "/"}]}})
    assert plan.errors == []
    assert ["limits_put", "vhost", "/", {"max-queues": 7}] in plan.changes
    assert ["op_policy_put", "/", "cap", {"vhost": "/", "name": "cap", "pattern": "^q",
                                          "definition": {"max-length": 10}, "priority": 0,
                                          "apply_to": "queues"}] in plan.changes
    bad = dj.plan_import({"parameters": [{"vhost": "/", "component": "operator_policy",
                                          "name": "x", "value": {"pattern": ".*",
                                                                 "definition": {"ha-mode": "all"}}}]},
                         {"auth": {"vhosts": [{"name": "/"}]}})
    assert bad.errors and "operator_policy" in bad.errors[0]


def test_user_limits_travel_in_the_users_as_rabbitmq_3_10_writes_them():
    """users[].limits (rabbit_auth_backend_internal's user limits: max-connections,
    max-channels) are exported and imported; a key RabbitMQ refuses for a user refuses the
    import, naming the user."""
    state = {"auth": {"vhosts": [{"name": "/"}], "permissions": [],
                      "users": [{"name": "bob", "password_hash": "h", "tags": []},
                                {"name": "amy", "password_hash": "h", "tags": []}]},
             "limits": [["user", "bob", {"max-connections": 2, "max-channels": 5}],
                        ["vhost", "/", {"max-queues": 7}]]}
    doc = dj.export(state)
    assert {u["name"]: u["limits"] for u in doc["users"]} == {
        "bob": {"max-connections": 2, "max-channels": 5}, "amy": {}}
    plan = dj.plan_import({"users": doc["users"]}, State().durable())
    assert plan.errors == []
    assert ["limits_put", "user", "bob", {"max-connections": 2, "max-channels": 5}] in \
        plan.changes
    assert not [c for c in plan.changes if c[:3] == ["limits_put", "user", "amy"]]
    bad = dj.plan_import({"users": [{"name": "cy", "password_hash": "", "tags": [],
                                     "limits": {"max-queues": 1}}]}, State().durable())
    assert bad.errors and "user 'cy'" in bad.errors[0] and "max-queues" in bad.errors[0]


def test_shovel_parameters_export_and_import_with_their_validation():
    """A shovel is a runtime parameter of component "shovel" (docs/shovels.md): exported as
    set, imported after RabbitMQ's validation, refused with its texts."""
    value = {"src-uri": "amqp://h1", "src-queue": "a", "dest-uri": "amqp://h2",
             "dest-queue": "b"}
    state = State().durable()
    state["parameters"] = [["/", "shovel", "s1", value]]
    doc = dj.export(state)
    assert {"value": value, "vhost": "/", "component": "shovel", "name": "s1"} in \
        doc["parameters"]
    plan = dj.plan_import({"parameters": doc["parameters"]}, State().durable())
    assert plan.errors == [] and ["param_put", "/", "shovel", "s1", value] in plan.changes
    bad = {"parameters": [{"vhost": "/", "component": "shovel", "name": "s2",
                           "value": {"src-queue": "a", "dest-uri": "amqp://h2"}}]}
    errors = dj.plan_import(bad, State().durable()).errors
    assert errors == ["runtime parameter 's2' of component 'shovel' in vhost '/': Validation "
                      "failed: Key \"src-uri\" not found in s2"]
