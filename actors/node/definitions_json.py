"""Definitions in RabbitMQ's JSON format, both ways: pure functions, no broker needed.

Mirrors rabbit_definitions (RabbitMQ 3.10): `rabbitmqctl export_definitions` /
`import_definitions`, the management API's /api/definitions and the `load_definitions` file
read at boot. Nothing here does I/O; the metadata actor (actors/node/metadata.py) builds the
state, applies the changes, and the HTTP API may call the same two functions.

- ``export(state) -> dict``: the JSON document (``json.dumps`` it).
- ``plan_import(doc, state) -> Plan``: the changes that bring ``state`` to include ``doc``
  (RabbitMQ's import adds and updates, never deletes), warnings (unknown keys, amq.* exchanges)
  and errors (objects that fail validation: the import is refused as a whole).

``state`` has the shape of what the node stores (actors/node/metadata.py's _persist), with
every queue, exchange and binding in it, durable or not::

    {"auth": AuthDB.to_state(), "policies": [{vhost, name, pattern, definition, priority,
     apply_to}], "exchanges": [[vhost, name, type, durable, auto_delete, internal, args]],
     "queues": [{vhost, name, durable, auto_delete, exclusive, arguments, ...}],
     "bindings": [[vhost, source, kind, dest, routing_key, args]]}

Changes are the metadata log's (actors/replica.py ``apply_change``), except
``["queue_new", {vhost, name, durable, auto_delete, arguments}]``: the actor places the queue
on a worker and turns it into ``router add_queue`` + ``queue_put``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from dataclasses import dataclass, field

from actors.core import limits as limit_rules
from actors.core import policies as policy_rules
from actors.core import queue_args
from actors.core.errors import ChannelError, ConnectionError_
from actors.core.permissions import MD5, SHA256, SHA512, AuthDB, hash_password
from actors.core.routing import PREDECLARED_EXCHANGES
from actors.shovel import params as shovel_params

RABBIT_VERSION = "3.10.8"  # the RabbitMQ version whose format we write
PRODUCT_NAME = "Leveret"
try:
    PRODUCT_VERSION = importlib.metadata.version("leveret")  # pyproject.toml's version
except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
    PRODUCT_VERSION = "unknown"
EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers")
HASHING_ALGORITHMS = (SHA256, SHA512, MD5)
BUILT_IN = {name for name, _, _ in PREDECLARED_EXCHANGES if name}  # amq.direct, ... per vhost

# every key RabbitMQ 3.10 writes or reads at the top level; others are warned about
TOP_KEYS = {"rabbit_version", "rabbitmq_version", "product_name", "product_version", "users",
            "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters",
            "policies", "queues", "exchanges", "bindings"}
# global parameters that name or identify the exporting RabbitMQ cluster rather than define
# anything: not imported, with a warning (RabbitMQ's export leaves out "internal*" ones itself;
# a Leveret node's name is its node_name setting)
NODE_IDENTITY_PARAMETERS = {"internal_cluster_id", "cluster_name"}
OBJECT_KEYS = {
    "users": {"name", "password_hash", "hashing_algorithm", "tags", "limits", "password",
              "administrator"},
    "vhosts": {"name", "description", "tags", "metadata", "limits", "tracing"},
    "permissions": {"user", "vhost", "configure", "write", "read"},
    "topic_permissions": {"user", "vhost", "exchange", "write", "read"},
    "policies": {"vhost", "name", "pattern", "apply-to", "definition", "priority"},
    "queues": {"name", "vhost", "durable", "auto_delete", "arguments", "type"},
    "exchanges": {"name", "vhost", "type", "durable", "auto_delete", "internal", "arguments"},
    "bindings": {"source", "vhost", "destination", "destination_type", "routing_key",
                 "arguments"},
}


def content_hash(data: bytes) -> str:
    """What `definitions.skip_if_unchanged` compares: SHA-256 of the file's bytes (RabbitMQ
    3.10's default `definitions.hashing.algorithm`), hex."""
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------ export

def export(state: dict) -> dict:
    """The definitions document as RabbitMQ 3.10.8's rabbit_definitions writes it: every
    queue but exclusive ones, every exchange but the default and amq.* ones, the bindings of
    ``state`` (give it what should be exported: the node passes every queue, exchange and
    binding, durable or not, as RabbitMQ lists them). One difference: internal exchanges are
    written with their ``internal`` flag (as the management API's export does) where
    rabbitmqctl's leaves them out."""
    auth = state.get("auth") or {}
    user_limits = {name: dict(value) for scope, name, value in state.get("limits", [])
                   if scope == "user"}
    # an exclusive queue is not exported, nor its bindings (they could not be imported)
    exclusive = {(q["vhost"], q["name"]) for q in state.get("queues", []) if q.get("exclusive")}
    return {
        "rabbit_version": RABBIT_VERSION,
        "rabbitmq_version": RABBIT_VERSION,
        "product_name": PRODUCT_NAME,
        "product_version": PRODUCT_VERSION,
        "users": [{"name": u["name"], "password_hash": u.get("password_hash") or "",
                   "hashing_algorithm": u.get("hashing_algorithm") or MD5,
                   "tags": list(u.get("tags") or []),
                   "limits": user_limits.get(u["name"], {})}
                  for u in auth.get("users", [])],
        "vhosts": [{"name": v["name"], "limits": [],
                    "metadata": {"description": v.get("description") or "",
                                 "tags": list(v.get("tags") or [])}}
                   for v in auth.get("vhosts", [])],
        "permissions": [{k: p[k] for k in ("user", "vhost", "configure", "write", "read")}
                        for p in auth.get("permissions", [])],
        "topic_permissions": [{k: p[k] for k in ("user", "vhost", "exchange", "write", "read")}
                              for p in auth.get("topic_permissions", [])],
        # runtime parameters (rabbit_runtime_parameters): operator policies, vhost limits
        # and shovels
        "parameters": [{"value": {"pattern": p["pattern"], "definition": p["definition"],
                                  "priority": p.get("priority", 0),
                                  "apply-to": p.get("apply_to", "all")},
                        "vhost": p["vhost"], "component": "operator_policy", "name": p["name"]}
                       for p in state.get("op_policies", [])] +
                      [{"value": dict(value), "vhost": name, "component": "vhost-limits",
                        "name": "limits"}
                       for scope, name, value in state.get("limits", []) if scope == "vhost"] +
                      [{"value": value, "vhost": vhost, "component": component, "name": name}
                       for vhost, component, name, value in state.get("parameters", [])],
        "global_parameters": [],
        "policies": [{"vhost": p["vhost"], "name": p["name"], "pattern": p["pattern"],
                      "apply-to": p.get("apply_to", "all"), "definition": p["definition"],
                      "priority": p.get("priority", 0)}
                     for p in state.get("policies", [])],
        "queues": [{"name": q["name"], "vhost": q["vhost"], "type": "classic",
                    "durable": bool(q["durable"]), "auto_delete": bool(q["auto_delete"]),
                    "arguments": dict(q.get("arguments") or {})}
                   for q in state.get("queues", []) if not q.get("exclusive")],
        "exchanges": [{"name": x[1], "vhost": x[0], "type": x[2], "durable": bool(x[3]),
                       "auto_delete": bool(x[4]), "internal": bool(x[5]),
                       "arguments": dict(x[6] or {})}
                      for x in state.get("exchanges", [])
                      if x[1] != "" and not x[1].startswith("amq.")],
        "bindings": [{"source": b[1], "vhost": b[0], "destination": b[3],
                      "destination_type": b[2], "routing_key": b[4],
                      "arguments": dict(b[5] or {})}
                     for b in state.get("bindings", [])
                     if not (b[2] == "queue" and (b[0], b[3]) in exclusive)],
    }


# ------------------------------------------------------------------------------------ import

@dataclass
class Plan:
    changes: list = field(default_factory=list)  # metadata changes, in order
    warnings: list = field(default_factory=list)  # logged, never fatal
    errors: list = field(default_factory=list)  # the import is refused when any


class _Bad(Exception):
    pass


def _need(obj: dict, key: str, kind, what: str):
    if key not in obj:
        raise _Bad(f"{what}: missing '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Bad(f"{what}: '{key}' must be {_kind_name(kind)}, not {value!r}")
    return value


def _opt(obj: dict, key: str, kind, default, what: str):
    if obj.get(key) is None:
        return default
    return _need(obj, key, kind, what)


def _kind_name(kind) -> str:
    names = {str: "a string", bool: "true or false", dict: "an object", int: "an integer",
             list: "a list"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def _tags(value) -> list[str]:
    if isinstance(value, str):  # "administrator,monitoring" (3.8 and older, rabbitmqctl)
        return [t for t in value.replace(",", " ").split()]
    return [str(t) for t in value]


def _describe(section: str, obj) -> str:
    if isinstance(obj, dict):
        name = obj.get("name", obj.get("user", obj.get("source")))
        vhost = obj.get("vhost")
        label = section.rstrip("s")
        if vhost is not None and section not in ("users", "vhosts"):
            return f"{label} '{name}' in vhost '{vhost}'"
        return f"{label} '{name}'"
    return f"{section} entry {obj!r}"


def plan_import(doc, state: dict) -> Plan:
    """The changes that add ``doc``'s definitions to ``state``, as rabbit_definitions'
    import: users (their hashes as given), vhosts, permissions, topic permissions, policies,
    queues, exchanges, bindings; existing users are updated, existing vhosts, queues and
    exchanges kept as they are (a warning when the file has them with other properties), as
    RabbitMQ does. ``state`` holds every queue and exchange, transient and exclusive ones too
    (they exist). Nothing is applied when ``errors`` is non-empty."""
    plan = Plan()
    if not isinstance(doc, dict):
        plan.errors.append("definitions must be a JSON object")
        return plan
    for key in sorted(set(doc) - TOP_KEYS):
        plan.warnings.append(f"unknown key '{key}' ignored")
    sections = {}
    for key in OBJECT_KEYS.keys() | {"parameters", "global_parameters"}:
        value = doc.get(key, [])
        if value is None:
            value = []
        if not isinstance(value, list):
            plan.errors.append(f"'{key}' must be a list")
            value = []
        sections[key] = value
    version = doc.get("rabbit_version") or doc.get("rabbitmq_version") or ""
    probe = AuthDB.from_state(state.get("auth") or {})
    policies = {(p["vhost"], p["name"]) for p in state.get("policies", [])}
    queues = {(q["vhost"], q["name"]): q for q in state.get("queues", [])}
    exchanges = {(x[0], x[1]): x for x in state.get("exchanges", [])}
    bindings = {_binding_key(b) for b in state.get("bindings", [])}

    def each(section, fn):
        for obj in sections[section]:
            if not isinstance(obj, dict):
                plan.errors.append(f"{section}: entry {obj!r} is not an object")
                continue
            for key in sorted(set(obj) - OBJECT_KEYS[section]):
                plan.warnings.append(f"{_describe(section, obj)}: unknown key '{key}' ignored")
            try:
                fn(obj)
            except _Bad as e:
                plan.errors.append(str(e))
            except (KeyError, ValueError) as e:
                plan.errors.append(f"{_describe(section, obj)}: {str(e).strip(chr(39) + chr(34))}")
            except (ChannelError, ConnectionError_) as e:
                plan.errors.append(f"{_describe(section, obj)}: {e.text}")

    def user(o):
        what = _describe("users", o)
        name = _need(o, "name", str, what)
        if "password" in o:  # hash_plain_passwords() turns it into a hash first
            raise _Bad(f"{what}: both_password_and_password_hash_are_provided" if
                       "password_hash" in o else f"{what}: a plaintext 'password' must be "
                       "hashed before planning (hash_plain_passwords)")
        pw_hash = _opt(o, "password_hash", str, "", what)
        algo = _opt(o, "hashing_algorithm", str, _default_hashing(version), what)
        if algo not in HASHING_ALGORITHMS:
            raise _Bad(f"{what}: unknown hashing_algorithm '{algo}' (one of "
                       f"{', '.join(HASHING_ALGORITHMS)})")
        if "tags" in o:
            tags = _tags(_need(o, "tags", (str, list), what))
        elif "administrator" in o:  # before 3.0
            tags = ["administrator"] if str(o["administrator"]).lower() == "true" else []
        else:  # rabbit_auth_backend_internal:put_user/3
            raise _Bad(f"{what}: tags_not_present")
        limits = _opt(o, "limits", dict, {}, what)
        if limits:  # RabbitMQ 3.10's users[].limits (rabbitmqctl set_user_limits)
            try:
                limits = limit_rules.validate("user", limits)
            except ChannelError as e:
                raise _Bad(f"{what}: {e.text}") from None
        if probe.user_exists(name):
            change = [["auth", "change_password_hash", [name, pw_hash, algo]],
                      ["auth", "set_user_tags", [name, tags]]]
        else:
            change = [["auth", "add_user_with_hash", [name, pw_hash, algo, tags]]]
        _apply(probe, change)
        plan.changes.extend(change)
        if limits:
            plan.changes.append(["limits_put", "user", name, limits])

    def vhost(o):
        what = _describe("vhosts", o)
        name = _need(o, "name", str, what)
        meta = _opt(o, "metadata", dict, {}, what)
        description = o.get("description", meta.get("description")) or ""
        tags = _tags(o.get("tags", meta.get("tags")) or [])
        if not isinstance(description, str):
            raise _Bad(f"{what}: 'description' must be a string")
        if _opt(o, "limits", (list, dict), [], what):
            raise _Bad(f"{what}: vhost limits are not supported")
        if o.get("tracing"):
            raise _Bad(f"{what}: tracing is not supported")
        dqt = meta.get("default_queue_type")
        if dqt not in (None, "classic", "undefined"):
            raise _Bad(f"{what}: default_queue_type '{dqt}' is not supported (classic only)")
        if probe.vhost_exists(name):
            return
        change = [["auth", "add_vhost", [name, description, tags]],
                  ["router", "add_vhost", [name]]]
        _apply(probe, change[:1])
        plan.changes.extend(change)

    def permission(o):
        what = f"permission of user '{o.get('user')}' in vhost '{o.get('vhost')}'"
        args = [_need(o, k, str, what) for k in ("user", "vhost", "configure", "write", "read")]
        change = [["auth", "set_permissions", args]]
        _apply(probe, change)
        plan.changes.extend(change)

    def topic_permission(o):
        what = (f"topic permission of user '{o.get('user')}' on exchange '{o.get('exchange')}'"
                f" in vhost '{o.get('vhost')}'")
        args = [_need(o, k, str, what) for k in ("user", "vhost", "exchange", "write", "read")]
        change = [["auth", "set_topic_permissions", args]]
        _apply(probe, change)
        plan.changes.extend(change)

    def policy(o):
        what = _describe("policies", o)
        vhost_, name = _need(o, "vhost", str, what), _need(o, "name", str, what)
        pattern = _need(o, "pattern", str, what)
        definition = _need(o, "definition", dict, what)
        priority = _opt(o, "priority", int, 0, what)
        apply_to = _opt(o, "apply-to", str, "all", what)
        _vhost_known(probe, vhost_, what)
        policy_rules.validate(name, pattern, definition, priority, apply_to)
        policies.add((vhost_, name))
        plan.changes.append(["policy_put", vhost_, name, {
            "vhost": vhost_, "name": name, "pattern": pattern, "definition": definition,
            "priority": priority, "apply_to": apply_to}])

    def exchange(o):
        what = _describe("exchanges", o)
        vhost_, name = _need(o, "vhost", str, what), _need(o, "name", str, what)
        if name == "":
            plan.warnings.append(f"Not importing the default exchange ({what})")
            return
        if name.startswith("amq."):
            plan.warnings.append(f"Skipping import of an exchange whose name begins with "
                                 f"'amq.', name: {name} (vhost '{vhost_}')")
            return
        type_ = _need(o, "type", str, what)
        if type_ not in EXCHANGE_TYPES:
            raise _Bad(f"{what}: unknown exchange type '{type_}'")
        row = [vhost_, name, type_, _opt(o, "durable", bool, True, what),
               _opt(o, "auto_delete", bool, False, what), _opt(o, "internal", bool, False, what),
               _opt(o, "arguments", dict, {}, what)]
        _vhost_known(probe, vhost_, what)
        old = exchanges.get((vhost_, name))
        if old is not None:  # RabbitMQ keeps an existing exchange as it is
            if list(old[2:6]) != row[2:6] or dict(old[6] or {}) != row[6]:
                plan.warnings.append(f"{what}: exists with other properties, kept as it is "
                                     f"({_x_props(old)}; the file has {_x_props(row)})")
            return
        queue_args.check_alternate_exchange_arg(row[6], name, vhost_)
        exchanges[(vhost_, name)] = row
        plan.changes.append(["router", "declare_exchange", row])

    def queue(o):
        what = _describe("queues", o)
        vhost_, name = _need(o, "vhost", str, what), _need(o, "name", str, what)
        qtype = o.get("type")
        if qtype not in (None, "classic"):
            raise _Bad(f"{what}: queue type '{qtype}' is not supported (classic only)")
        q = {"vhost": vhost_, "name": name, "durable": _opt(o, "durable", bool, True, what),
             "auto_delete": _opt(o, "auto_delete", bool, False, what),
             "arguments": _opt(o, "arguments", dict, {}, what)}
        if not name:
            raise _Bad(f"{what}: a queue needs a name")
        if name.startswith("amq."):
            plan.warnings.append(f"Skipping import of a queue whose name begins with 'amq.', "
                                 f"name: {name} (vhost '{vhost_}')")
            return
        _vhost_known(probe, vhost_, what)
        old = queues.get((vhost_, name))
        if old is not None:  # RabbitMQ keeps an existing queue as it is
            if (bool(old["durable"]), bool(old["auto_delete"])) != (q["durable"],
                                                                    q["auto_delete"]) \
                    or dict(old.get("arguments") or {}) != q["arguments"]:
                plan.warnings.append(f"{what}: exists with other properties, kept as it is")
            return
        queue_args.validate(q["arguments"], name, vhost_,
                            {"durable": q["durable"], "auto_delete": q["auto_delete"]})
        queues[(vhost_, name)] = q
        plan.changes.append(["queue_new", q])

    def binding(o):
        what = (f"binding from '{o.get('source')}' to {o.get('destination_type')} "
                f"'{o.get('destination')}' in vhost '{o.get('vhost')}'")
        vhost_ = _need(o, "vhost", str, what)
        source, dest = _need(o, "source", str, what), _need(o, "destination", str, what)
        kind = _need(o, "destination_type", str, what)
        if kind not in ("queue", "exchange"):
            raise _Bad(f"{what}: destination_type must be queue or exchange")
        b = [vhost_, source, kind, dest, _opt(o, "routing_key", str, "", what),
             _opt(o, "arguments", dict, {}, what)]
        if source == "":
            raise _Bad(f"{what}: operation not permitted on the default exchange")
        _vhost_known(probe, vhost_, what)
        if (vhost_, source) not in exchanges and source not in BUILT_IN:
            raise _Bad(f"{what}: no exchange '{source}' in vhost '{vhost_}'")
        ends = queues if kind == "queue" else exchanges
        if (vhost_, dest) not in ends and not (kind == "exchange" and dest in BUILT_IN):
            raise _Bad(f"{what}: no {kind} '{dest}' in vhost '{vhost_}'")
        if _binding_key(b) in bindings:
            return
        bindings.add(_binding_key(b))
        plan.changes.append(["router", "bind", b])

    def parameter(o):
        """operator_policy, vhost-limits and shovel, the components Leveret has; any other
        (federation-upstream...) refuses the import."""
        component = o.get("component")
        what = f"runtime parameter '{o.get('name')}' of component '{component}' in vhost " \
               f"'{o.get('vhost')}'"
        if component not in ("operator_policy", "vhost-limits", *shovel_params.COMPONENTS):
            raise _Bad(f"{what}: component {component} not found (Leveret has operator_policy, "
                       "vhost-limits and shovel; federation is not supported)")
        vhost_, name = _need(o, "vhost", str, what), _need(o, "name", str, what)
        value = _need(o, "value", dict, what)
        _vhost_known(probe, vhost_, what)
        if component in shovel_params.COMPONENTS:
            errors = shovel_params.errors(name, value)
            if errors:
                raise _Bad(f"{what}: Validation failed: " + "; ".join(errors))
            plan.changes.append(["param_put", vhost_, component, name, value])
            return
        try:
            if component == "vhost-limits":
                plan.changes.append(["limits_put", "vhost", vhost_,
                                     limit_rules.validate("vhost", value)])
                return
            pattern = _need(value, "pattern", str, what)
            definition = _need(value, "definition", dict, what)
            priority = _opt(value, "priority", int, 0, what)
            apply_to = _opt(value, "apply-to", str, "all", what)
            policy_rules.validate(name, pattern, definition, priority, apply_to, True)
        except ChannelError as e:
            raise _Bad(f"{what}: {e.text}") from None
        plan.changes.append(["op_policy_put", vhost_, name, {
            "vhost": vhost_, "name": name, "pattern": pattern, "definition": definition,
            "priority": priority, "apply_to": apply_to}])

    # RabbitMQ's order: users, vhosts, permissions, topic permissions, parameters, global
    # parameters, policies, queues, exchanges, bindings
    each("users", user)
    each("vhosts", vhost)
    each("permissions", permission)
    each("topic_permissions", topic_permission)
    for o in sections["parameters"]:
        try:
            parameter(o if isinstance(o, dict) else {})
        except _Bad as e:
            plan.errors.append(str(e))
    for o in sections["global_parameters"]:
        name = o.get("name") if isinstance(o, dict) else None
        if name in NODE_IDENTITY_PARAMETERS or str(name).startswith("internal"):
            plan.warnings.append(f"global parameter '{name}' not imported: it names the "
                                 "cluster that exported it")
        else:
            plan.errors.append(f"global parameter '{name}': global runtime parameters are "
                               "not supported")
    each("policies", policy)
    each("queues", queue)
    each("exchanges", exchange)
    each("bindings", binding)
    return plan


def _default_hashing(version) -> str:
    """rabbit_auth_backend_internal:hashing_algorithm/2 for a user without one: md5 in files
    from RabbitMQ 3.0 to 3.5, else SHA-256."""
    v = str(version)
    if v.startswith(("3.0.", "3.1.", "3.2.", "3.3.", "3.4.", "3.5.")):
        return MD5
    return SHA256


def hash_plain_passwords(doc):
    """A copy of ``doc`` whose users given a plaintext ``password`` (RabbitMQ accepts those
    and hashes them) have a fresh salted SHA-256 ``password_hash`` instead: called where the
    file is read (leveretctl) and again by the first node that receives it, so that no
    plaintext password is forwarded, logged or committed. A user with both keys is left for
    plan_import to refuse."""
    if not isinstance(doc, dict) or not isinstance(doc.get("users"), list):
        return doc
    users = []
    for u in doc["users"]:
        if isinstance(u, dict) and isinstance(u.get("password"), str) and \
                "password_hash" not in u:
            plain = u["password"]
            u = {k: v for k, v in u.items() if k != "password"}
            u["password_hash"] = hash_password(plain, algorithm=SHA256) if plain else ""
            u["hashing_algorithm"] = SHA256
        users.append(u)
    return dict(doc, users=users)


def _apply(probe: AuthDB, changes) -> None:
    for c in changes:
        getattr(probe, c[1])(*c[2])


def _vhost_known(probe: AuthDB, vhost: str, what: str) -> None:
    if not probe.vhost_exists(vhost):
        raise _Bad(f"{what}: no vhost '{vhost}'")


def _x_props(row) -> str:
    return (f"type {row[2]}, durable {row[3]}, auto_delete {row[4]}, internal {row[5]}, "
            f"arguments {dict(row[6] or {})}")


def _binding_key(b) -> tuple:
    return (b[0], b[1], b[2], b[3], b[4], tuple(sorted((b[5] or {}).items(), key=str)))
