"""RabbitMQ's management API objects, built from the node's definitions (pure: no IO).

The JSON shapes, field names and types are those of RabbitMQ 3.10's rabbit_mgmt_format and
its http-api-reference; the tools that read them (rabbitmqadmin, monitoring scripts) rely on
them. Also the list query parameters every list endpoint takes: pagination (`page`,
`page_size`, `name`, `use_regex`), `sort`, `sort_reverse` and `columns`.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import re
from urllib.parse import quote

from actors.core import channel_stats, policies, quorum
from actors.core.queue_stats import DISK, STORAGE

MANAGEMENT_TAGS = ("administrator", "monitoring", "policymaker", "management")
MAX_PAGE_SIZE = 500  # rabbit_mgmt_util's ?page_size maximum
VERSION = "3.10.8"  # the RabbitMQ version whose API this is (rabbitmqadmin reads it)


class ApiError(Exception):
    """An HTTP error with RabbitMQ's JSON body {"error", "reason"}."""

    def __init__(self, status: int, error: str, reason: str):
        super().__init__(reason)
        self.status, self.error, self.reason = status, error, reason

    def body(self) -> dict:
        return {"error": self.error, "reason": self.reason}


def bad_request(reason: str) -> ApiError:
    return ApiError(400, "bad_request", reason)


def not_found(reason: str = "Object Not Found") -> ApiError:
    return ApiError(404, "Object Not Found", reason)


# --- who may see and do what (rabbit_mgmt_util) ------------------------------------------------
def is_management(tags) -> bool:
    return any(t in MANAGEMENT_TAGS for t in tags)


def is_admin(tags) -> bool:
    return "administrator" in tags


def is_monitor(tags) -> bool:
    return "administrator" in tags or "monitoring" in tags


def is_policymaker(tags) -> bool:
    return "administrator" in tags or "policymaker" in tags


def visible_vhosts(state: dict, user: str, tags) -> set:
    """A monitoring user or administrator sees every vhost; any other management user those
    it has permissions in (rabbit_mgmt_util:list_visible_vhosts)."""
    vhosts = {v["name"] for v in state["auth"]["vhosts"]}
    if is_monitor(tags):
        return vhosts
    return {p["vhost"] for p in state["auth"]["permissions"] if p["user"] == user} & vhosts


# --- objects -----------------------------------------------------------------------------------
def vhost_sums(vhost: str, rows: list, message_stats: list, depth_rates: list,
               connections: list, counts: dict | None = None) -> dict:
    """A vhost's totals as rabbit_mgmt_db adds them up: its queues' depth (with rates), their
    message_stats summed with its channels' confirm / return_unroutable / drop_unroutable
    (`counts`: cluster_counts'), its connections' recv_oct / send_oct (with rates)."""
    out: dict = {}
    for k in ("messages", "messages_ready", "messages_unacknowledged"):
        out[k] = sum(r.get(k, 0) for r in rows)
        out[f"{k}_details"] = {"rate": round(sum(
            d.get(f"{k}_details", {}).get("rate", 0.0) for d in depth_rates), 1)}
    out["message_stats"] = vhost_message_stats(message_stats, counts or {}, [vhost])
    for k in ("recv_oct", "send_oct"):
        out[k] = sum(c.get(k, 0) for c in connections if c["vhost"] == vhost)
        out[f"{k}_details"] = {"rate": round(sum(
            c.get(f"{k}_details", {}).get("rate", 0.0) for c in connections
            if c["vhost"] == vhost), 1)}
    return out


def vhost_json(v: dict, members=(), sums: dict | None = None) -> dict:
    return {**(sums or {}), "name": v["name"], "description": v.get("description", ""),
            "cluster_state": {m["name"]: "running" if m["up"] else "stopped" for m in members},
            "default_queue_type": "undefined",  # (none set: Leveret's queues are classic)
            "tags": list(v.get("tags") or []),
            "metadata": {"description": v.get("description", ""),
                         "tags": list(v.get("tags") or [])},
            "tracing": False}


def user_json(u: dict, state: dict | None = None) -> dict:
    """A user, with its user limits (`state["limits"]`: max-connections, max-channels)."""
    limits = next((dict(value) for scope, name, value in (state or {}).get("limits", ())
                   if scope == "user" and name == u["name"]), {})
    return {"name": u["name"], "password_hash": u["password_hash"],
            "hashing_algorithm": u["hashing_algorithm"], "tags": list(u["tags"]),
            "limits": limits}


def exchange_json(x: dict, policy_list, counts: dict | None = None,
                  details: bool = True) -> dict:
    """An exchange; `counts`: cluster_counts' (path -> (count, rate)), for its message_stats
    (publish_in, publish_out), shown once anything was published into it, as RabbitMQ;
    `details` False: as a list shows it (RabbitMQ 3.10's lists leave the detail-only
    `incoming` and `outgoing` out)."""
    p = policies.winner(policy_list, x["vhost"], x["name"], "exchanges")
    out = {"name": x["name"], "vhost": x["vhost"], "type": x["type"],
           "durable": x["durable"], "auto_delete": x["auto_delete"],
           "internal": x["internal"], "arguments": x["arguments"],
           "user_who_performed_action": x.get("user", ""),  # who declared it
           # per-queue / per-exchange fine stats: RabbitMQ lists them in rates_mode "detailed"
           # only; ours is "basic"
           "incoming": [], "outgoing": []}
    if p:  # (RabbitMQ leaves the key out when no policy applies)
        out["policy"] = p["name"]
    if not details:
        del out["incoming"], out["outgoing"]
    prefix = ("vhosts", x["vhost"], "exchanges", x["name"])
    if counts and prefix + ("publish_in",) in counts:
        out["message_stats"] = channel_stats.stats_with_rates(counts, prefix,
                                                              ("publish_in", "publish_out"))
    return out


def queue_json(q: dict, row: dict | None, policy_list, op_policy_list=(),
               message_stats: dict | None = None, consumers: list | None = None,
               depth_rates: dict | None = None, use: dict | None = None,
               details: bool = True) -> dict:
    """A queue; `row` is its node, mirrors, state and, once the queue sampled, its depth,
    consumers and head_message_timestamp (the metadata actor's `_sampled_queue_rows`);
    `message_stats` what its samples say (actors/core/queue_stats.py); `consumers` its
    consumers as /api/consumers lists them (the connection workers' samples); `use` its
    consumer_capacity / consumer_utilisation and idle_since (ms) from its last sample;
    `details` False: as a list shows it (RabbitMQ 3.10's lists leave the detail-only
    `consumer_details`, `incoming` and `deliveries` out)."""
    row = row or {}
    p = policies.winner(policy_list, q["vhost"], q["name"], "queues")
    op = policies.winner(op_policy_list, q["vhost"], q["name"], "queues")
    out = {"name": q["name"], "vhost": q["vhost"], "durable": q["durable"],
           "auto_delete": q["auto_delete"], "exclusive": bool(q["exclusive"]),
           "arguments": q["arguments"], "type": quorum.queue_type(q["arguments"]),
           "node": row.get("node", ""), "policy": p["name"] if p else None,
           "state": row.get("state") or ("running" if "messages" in row else "down"),
           "operator_policy": op["name"] if op else None,
           # the consumer holding the queue, from its last sample (null when none, as
           # rabbit_mgmt_format renders rabbit_amqqueue_process' '')
           "exclusive_consumer_tag": row.get("exclusive_consumer_tag"),
           "effective_policy_definition":
               policies.merge(p["definition"] if p else None, op["definition"] if op else None),
           "message_stats": message_stats or {},
           "single_active_consumer_tag": row.get("single_active_consumer_tag"),
           "consumer_details": list(consumers or ()),
           "incoming": [], "deliveries": []}  # rates_mode "detailed" only (ours: "basic")
    if not details:
        del out["consumer_details"], out["incoming"], out["deliveries"]
    for k in ("messages", "messages_ready", "messages_unacknowledged", "consumers"):
        if k in row:
            out[k] = row[k]
            if depth_rates and f"{k}_details" in depth_rates:
                out[f"{k}_details"] = depth_rates[f"{k}_details"]
    if "messages" in row:  # (its sample's: RabbitMQ's null when the head has none)
        out["head_message_timestamp"] = row.get("head_message_timestamp")
        out.update((k, row.get(k, 0)) for k in STORAGE)
    use = use or {}
    if "consumers" in row:
        # RabbitMQ 3.10: both, the same measure (utilisation null without consumers)
        out["consumer_capacity"] = use.get("consumer_capacity", 0) if row["consumers"] else 0
        out["consumer_utilisation"] = use.get("consumer_utilisation") if row["consumers"] \
            else None
    if use.get("idle_since") is not None:  # (absent while the queue is busy, as RabbitMQ's)
        out["idle_since"] = iso_time(use["idle_since"])
    if out["type"] == quorum.QUORUM:
        # rabbit_quorum_queue's info keys: the leader and the members (leader first); the
        # members listed are those that hold a replica now (a member that is down is not)
        out["leader"] = out["node"]
        out["members"] = out["online"] = [out["node"], *(row.get("mirrors") or [])]
    elif out["type"] == "stream":
        # rabbit_stream_queue's info keys (the leader first; a member that is down is not
        # listed), and Leveret's own figures of the log: offsets, segments, consumers'
        # positions (the leader's)
        out["leader"] = out["node"]
        out["members"] = out["online"] = [out["node"], *(row.get("mirrors") or [])]
        if row.get("stream") is not None:
            out["stream"] = row["stream"]
            out["committed_offset"] = row["stream"]["committed_offset"]
    elif row.get("mirrors"):
        out["slave_nodes"] = row["mirrors"]
        out["synchronised_slave_nodes"] = row.get("synchronised_mirrors", [])
    return out


def iso_time(ms: int) -> str:
    """rabbit_mgmt_format's timestamps (3.10: `idle_since`): "2026-11-24T18:58:04.028+00:00"."""
    t = datetime.datetime.fromtimestamp(ms / 1000.0, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}+00:00"


def properties_key(routing_key: str, arguments: dict) -> str:
    """rabbit_mgmt_format:pack_binding_props/2: the routing key, URL-quoted ("~" when empty),
    then "~" and a hash of the arguments when there are any."""
    key = quote(routing_key, safe="") if routing_key else "~"
    if not arguments:
        return key
    digest = hashlib.md5(repr(sorted(arguments.items())).encode()).digest()
    return f"{quote(routing_key, safe='')}~{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def binding_json(b) -> dict:
    vhost, source, kind, dest, rk, args = b
    return {"source": source, "vhost": vhost, "destination": dest,
            "destination_type": kind, "routing_key": rk, "arguments": args,
            "properties_key": properties_key(rk, args)}


def default_bindings(queues) -> list:
    """The default exchange's implicit binding to every queue, as RabbitMQ lists it."""
    return [[q["vhost"], "", "queue", q["name"], q["name"], {}] for q in queues]


# a connection's TLS fields: "" on a plain TCP connection in its own JSON, null in a list (as
# RabbitMQ 3.10 answers them)
TLS_FIELDS = ("ssl_protocol", "ssl_cipher", "ssl_hash", "ssl_key_exchange",
              "peer_cert_subject", "peer_cert_issuer", "peer_cert_validity")


def connection_json(c: dict, details: bool = True) -> dict:
    """A connection as the worker sampled it (actors/connection/stats.py), minus what only
    Leveret uses (its id, its channels' details); `details` False: as a list shows it."""
    out = {k: v for k, v in c.items() if k not in ("id", "channel_list")}
    if not details:
        for k in TLS_FIELDS:
            if out.get(k) == "":
                out[k] = None
    return out


def channel_json(ch: dict, details: bool = False) -> dict:
    """A channel; `details` (GET /api/channels/{name}): with its consumer_details and the
    detail-only `publishes` and `deliveries` (RabbitMQ 3.10's lists leave them out)."""
    out = {k: v for k, v in ch.items() if k != "consumers" and
           (details or k not in ("publishes", "deliveries"))}
    if out.get("idle_since") is not None:  # ms from the worker's sample
        out["idle_since"] = iso_time(out["idle_since"])
    if details:
        out["consumer_details"] = ch["consumers"]
    return out


def permission_json(p: dict) -> dict:
    return {"user": p["user"], "vhost": p["vhost"], "configure": p["configure"],
            "write": p["write"], "read": p["read"]}


def policy_json(p: dict) -> dict:
    return {"vhost": p["vhost"], "name": p["name"], "pattern": p["pattern"],
            "apply-to": p.get("apply_to", p.get("apply-to", "all")),
            "definition": p["definition"], "priority": p.get("priority", 0)}


# --- list query parameters (rabbit_mgmt_util) ---------------------------------------------------
def _get(item, path: list):
    for part in path:
        if not isinstance(item, dict) or part not in item:
            return None
        item = item[part]
    return item


def _sort_key(value):
    # RabbitMQ sorts mixed values by Erlang term order: numbers < atoms < strings; here
    # None first, then numbers, then strings
    if value is None:
        return (0, 0, "")
    if isinstance(value, bool):
        return (2, 0, str(value).lower())
    if isinstance(value, (int, float)):
        return (1, value, "")
    return (2, 0, str(value))


def _columns(item: dict, columns: list) -> dict:
    out: dict = {}
    for col in columns:
        path = col.split(".")
        value = _get(item, path)
        if value is None and not _has(item, path):
            continue
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _has(item, path) -> bool:
    for part in path:
        if not isinstance(item, dict) or part not in item:
            return False
        item = item[part]
    return True


def list_query(items: list, query) -> list | dict:
    """Filter, sort, paginate and cut `items` as `?name=&use_regex=&sort=&sort_reverse=
    &page=&page_size=&columns=` ask; a page answers RabbitMQ's envelope."""
    total = len(items)
    name = query.get("name")
    if name:
        if query.get("use_regex") == "true":
            try:
                rx = re.compile(name)
            except re.error as e:
                raise bad_request(f"invalid regex: {e}") from None
            items = [i for i in items if rx.search(str(i.get("name", "")))]
        else:
            items = [i for i in items if name in str(i.get("name", ""))]
    sort = query.get("sort")
    reverse = query.get("sort_reverse") == "true"
    if sort:
        path = sort.split(".")
        items = sorted(items, key=lambda i: _sort_key(_get(i, path)), reverse=reverse)
    elif reverse:
        items = list(reversed(items))
    columns = [c for c in (query.get("columns") or "").split(",") if c]
    if columns:
        items = [_columns(i, columns) for i in items]
    if "page" not in query:
        return items
    try:
        page = int(query.get("page"))
        size = int(query.get("page_size", 100))
    except (TypeError, ValueError):
        raise bad_request("page and page_size must be integers") from None
    if page < 1 or size < 1:
        raise bad_request("page and page_size must be positive")
    if size > MAX_PAGE_SIZE:
        raise bad_request(f"page_size cannot be more than {MAX_PAGE_SIZE}")
    filtered = len(items)
    page_count = max(1, -(-filtered // size))
    if page > page_count:
        raise bad_request(f"page out of range: {page} of {page_count}")
    chunk = items[(page - 1) * size:page * size]
    return {"filtered_count": filtered, "item_count": len(chunk), "page": page,
            "page_count": page_count, "page_size": size, "total_count": total,
            "items": chunk}


def sum_message_stats(stats) -> dict:
    """The sum of several queues' `message_stats` (counters added, rates added)."""
    total: dict = {}
    for one in stats:
        for k, v in one.items():
            if isinstance(v, dict):
                d = total.setdefault(k, {"rate": 0.0})
                d["rate"] = round(d["rate"] + v["rate"], 1)
            else:
                total[k] = total.get(k, 0) + v
    return total


def channel_message_stats(counts: dict, vhosts) -> dict:
    """The channel-level keys of the overview's and a vhost's message_stats (publish,
    confirm, return_unroutable, drop_unroutable), summed over `vhosts`, from
    cluster_counts'."""
    return sum_message_stats(channel_stats.stats_with_rates(
        counts, ("vhosts", v), channel_stats.VHOST_COUNTERS) for v in vhosts)


def vhost_message_stats(queue_stats: list, counts: dict, vhosts,
                        disk: list | None = None) -> dict:
    """The overview's or a vhost's message_stats as rabbit_mgmt_db's vhost fine stats: the
    channels' publish, confirm and unroutable counts (a message published once, whatever
    number of queues it went to; an unroutable one too), the queues' deliveries, gets, acks
    and redeliveries. The overview's (`disk` given: each queue's queue_stats.disk_stats)
    also has the queues' disk_reads and disk_writes, rabbit_mgmt_db's vhost_msg_rates (a
    vhost's JSON has not, as RabbitMQ 3.10's)."""
    from_queues = [{k: v for k, v in s.items() if k not in ("publish", "publish_details")}
                   for s in queue_stats]
    out = sum_message_stats(from_queues + [channel_message_stats(counts, vhosts)])
    if disk is not None:
        zero = {k: v for key in DISK for k, v in ((key, 0), (f"{key}_details", {"rate": 0.0}))}
        out.update(sum_message_stats([zero, *disk]))
    return out


# rabbit_mgmt_db's churn_rates: (key, cluster_counts' path)
CHURN = (("connection_created", ("connections_opened",)),
         ("connection_closed", ("connections_closed",)),
         ("channel_created", ("channels_opened",)), ("channel_closed", ("channels_closed",)),
         ("queue_declared", ("queues_declared",)), ("queue_created", ("queues_created",)),
         ("queue_deleted", ("queues_deleted",)))


def churn_rates(counts: dict) -> dict:
    """The overview's churn_rates: connections and channels opened and closed (every
    connection worker's counts), queues declared, created and deleted (the metadata actor's),
    each with its rate."""
    out = {}
    for key, path in CHURN:
        n, rate = counts.get(path, (0, 0.0))
        out[key] = n
        out[f"{key}_details"] = {"rate": rate}
    return out


def overview_json(state: dict, queues: list, listeners: list, management_port: int,
                  cluster_name: str, message_stats: dict | None = None,
                  depth_rates=(), counts: dict | None = None) -> dict:
    """GET /api/overview; depth_rates: the visible queues' depth_rates; counts:
    cluster_counts' (churn_rates)."""
    ready = sum(q.get("messages_ready", 0) for q in queues)
    unacked = sum(q.get("messages_unacknowledged", 0) for q in queues)
    totals = {"messages": ready + unacked, "messages_ready": ready,
              "messages_unacknowledged": unacked}
    if depth_rates:
        for k in list(totals):
            totals[f"{k}_details"] = {"rate": round(sum(
                d.get(f"{k}_details", {}).get("rate", 0.0) for d in depth_rates), 1)}
    return {
        "management_version": VERSION, "rates_mode": "basic",
        "rabbitmq_version": VERSION, "product_name": "Leveret", "product_version": VERSION,
        "erlang_version": "none (Python)", "erlang_full_version": "none (Python)",
        "cluster_name": cluster_name, "node": state["node"],
        "exchange_types": [{"name": t, "description": "", "enabled": True}
                           for t in ("direct", "fanout", "headers", "topic")],
        "object_totals": {"exchanges": len(state["exchanges"]), "queues": len(queues),
                          "consumers": sum(q.get("consumers", 0) for q in queues),
                          "connections": len(state.get("connections", ())),
                          "channels": sum(len(c["channel_list"])
                                          for c in state.get("connections", ()))},
        "queue_totals": totals,
        "churn_rates": churn_rates(counts or {}),
        "message_stats": message_stats or {},
        "statistics_db_event_queue": state["statistics_db_event_queue"],
        "listeners": listeners,
        "contexts": [{"node": state["node"], "description": "RabbitMQ Management",
                      "path": "/", "port": str(management_port)}],
    }


def node_json(member: dict, sample: dict | None) -> dict:
    """One member as /api/nodes lists it (rabbit_mgmt_wm_nodes): its name, type, whether it
    runs and, while it runs, the figures of its last sample (NodeStats, with their rates:
    actors/node/node_stats.py) as that node measured them. A member that is down, or not
    heard from yet, has only the first three, as RabbitMQ lists a node that is not running."""
    out = {"name": member["name"], "type": "disc", "running": bool(member["up"])}
    if member["up"] and sample is not None:
        out.update(sample)
    return out


# --- health checks (rabbit_mgmt_wm_health_check_*) ---------------------------------------------
# rabbit_alarm:format_as_map/1's resource names
ALARM_RESOURCES = {"memory": "memory", "disk": "disk space"}
# rabbit_mgmt_wm_health_check_protocol_listener:normalize_protocol/1 (the AMQP names; MQTT and
# STOMP are no protocols of Leveret's: they keep their names, and no listener has them)
PROTOCOL_ALIASES = {**{a: "amqp" for a in ("amqp091", "amqp0.9.1", "amqp0-9-1", "amqp0_9_1",
                                           "amqp10", "amqp1.0", "amqp1-0", "amqp1_0")},
                    "amqps": "amqp/ssl", "http": "http", "https": "https",
                    "prometheus": "http/prometheus", "prometheus/ssl": "https/prometheus"}


def alarm_json(node: str, alarm: str) -> dict:
    """One alarm of the alarms health checks (rabbit_alarm:format_as_map/1)."""
    return {"node": node, "resource": ALARM_RESOURCES.get(alarm, alarm)}


def normalize_protocol(protocol: str) -> str:
    protocol = protocol.lower()
    return PROTOCOL_ALIASES.get(protocol, protocol)


def quorum_critical(queues, node: str, up: set, names: dict) -> list:
    """The quorum queues that stopping `node` would leave without a majority of their members
    (rabbit_quorum_queue:list_with_minimum_quorum_for_cli/0: a member of the queue runs here
    and no more than a bare majority of its members runs), as that function lists them.
    `up`: names of the members up; `names`: member id -> name."""
    out = []
    for q in queues:
        if not quorum.is_quorum(q.get("arguments")):
            continue
        members = [names.get(x, x) for x in [q.get("home") or "", *(q.get("mirrors") or [])]]
        running = [x for x in members if x in up]
        size = quorum.group_size(q.get("arguments"), len(names))
        if node in running and len(running) <= quorum.majority(size):
            out.append({"readable_name": f"queue '{q['name']}' in vhost '{q['vhost']}'",
                        "name": q["name"], "virtual_host": q["vhost"], "type": "quorum"})
    return out


# --- definitions (rabbit_mgmt_wm_definitions) ---------------------------------------------------
VHOST_SECTIONS = ("parameters", "policies", "queues", "exchanges", "bindings")


def vhost_definitions(doc: dict, vhost: str) -> dict:
    """GET /api/definitions/{vhost}: the cluster export cut to one vhost, as RabbitMQ 3.10's
    rabbit_mgmt_wm_definitions does it: rabbit_version, then parameters, policies, queues,
    exchanges and bindings of that vhost, with their `vhost` field removed but for the
    parameters and policies (3.10 keeps it there)."""
    out = {"rabbit_version": doc.get("rabbit_version")}
    for section in VHOST_SECTIONS:
        out[section] = [{k: v for k, v in item.items()
                         if k != "vhost" or section in ("parameters", "policies")}
                        for item in doc.get(section, []) if item.get("vhost") == vhost]
    return out


def into_vhost(doc: dict, vhost: str) -> dict:
    """POST /api/definitions/{vhost}: what rabbit_definitions:apply_defs/3 imports of a body,
    each object put in `vhost` (users, vhosts and permissions of the body are not imported)."""
    out = {}
    for section in VHOST_SECTIONS:
        items = doc.get(section) or []
        if not isinstance(items, list):
            raise bad_request(f"{section} must be a list")
        out[section] = [dict(item, vhost=vhost) if isinstance(item, dict) else item
                        for item in items]
    return out


# --- runtime parameters (rabbit_mgmt_wm_parameters, rabbit_runtime_parameters) -----------------
# the components Leveret has; any other is refused as rabbit_runtime_parameters refuses a
# component no plugin registered (federation-upstream...)
COMPONENTS = ("policy", "operator_policy", "vhost-limits", "shovel")


def unknown_component(component: str) -> ApiError:
    """rabbit_runtime_parameters:lookup_component/1's error through format_error/1."""
    return bad_request(f"Validation failed\n\ncomponent {component} not found\n")


def parameters(state: dict) -> list:
    """Every runtime parameter as rabbit_mgmt_format:parameter/1 lists it: policies
    (component "policy"), operator policies ("operator_policy"), vhost limits
    ("vhost-limits", name "limits") and shovels ("shovel", the value as it was set)."""
    out = []
    for component, table in (("policy", "policies"), ("operator_policy", "operator_policies")):
        for p in state.get(table, ()):
            out.append({"vhost": p["vhost"], "component": component, "name": p["name"],
                        "value": {"pattern": p["pattern"], "definition": p["definition"],
                                  "priority": p.get("priority", 0),
                                  "apply-to": p.get("apply_to", p.get("apply-to", "all"))}})
    for scope, name, value in state.get("limits", ()):
        if scope == "vhost":
            out.append({"vhost": name, "component": "vhost-limits", "name": "limits",
                        "value": dict(value)})
    for vhost, component, name, value in state.get("parameters", ()):
        out.append({"vhost": vhost, "component": component, "name": name, "value": value})
    return out


def global_parameters(cluster_name: str) -> list:
    """GET /api/global-parameters: cluster_name (RabbitMQ also keeps internal_cluster_id, a
    random id Leveret has no use for)."""
    return [{"name": "cluster_name", "value": cluster_name}]
