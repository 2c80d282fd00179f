"""leveretctl's operational commands, as rabbitmqctl / rabbitmq-diagnostics name them:
await_startup, check_running, check_local_alarms, check_port_connectivity, environment,
close_connection, delete_queue, purge_queue, sync_queue, cancel_sync_queue, census; and the
definitions' list_* commands (list_users, list_vhosts, list_permissions, list_exchanges,
list_bindings) with rabbitmqctl's info items and --formatter table|json. Each returns the
process exit code (0: ok; 69, RabbitMQ's EX_UNAVAILABLE, when a check fails)."""

from __future__ import annotations

import json
import os
import socket
import time

from actors import metadata_ops as ops
from actors.core import policies

EX_UNAVAILABLE = 69  # rabbitmq-diagnostics' exit code for a failed check
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def _node_info(data_dir: str) -> dict | None:
    try:
        with open(os.path.join(data_dir, "node.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def await_startup(call, data_dir: str, timeout: float) -> int:
    """Wait until the node answers (its definitions loaded, listening)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _node_info(data_dir) is not None:
            try:
                call(data_dir, ops.Status(), timeout_ms=2000)
                print("Node is running")
                return 0
            except SystemExit:
                pass
        time.sleep(0.2)
    print(f"Error: the node did not start within {timeout:g} s")
    return EX_UNAVAILABLE


def check_running(call, data_dir: str) -> int:
    call(data_dir, ops.Status())
    print("Node is fully booted and running")
    return 0


def check_local_alarms(call, data_dir: str) -> int:
    alarms = call(data_dir, ops.Status()).get("alarms") or []
    if alarms:
        for a in alarms:
            print(f"Node has a {a} resource alarm in effect")
        return EX_UNAVAILABLE
    print("Node reported no local alarms")
    return 0


def check_port_connectivity(call, data_dir: str) -> int:
    """Connect to every listener the node has and expect AMQP's answer (connection.start)
    on the AMQP port, a TCP accept on the others."""
    info = _node_info(data_dir)
    if info is None:
        raise SystemExit(f"leveretctl: no node running with data dir {data_dir}")
    ports = [("amqp", info["port"])]
    env = call(data_dir, ops.Environment())
    for key, proto in (("tls_port", "amqp/ssl"), ("management_port", "http"),
                       ("prometheus_port", "http/prometheus")):
        if env.get(key):
            ports.append((proto, env[key]))
    host = info["host"] if info["host"] not in ("0.0.0.0", "::", "") else "127.0.0.1"
    failed = []
    for proto, port in ports:
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                if proto == "amqp":
                    s.sendall(PROTOCOL_HEADER)
                    if s.recv(1) != b"\x01":  # a method frame: connection.start
                        failed.append((proto, port, "no connection.start"))
        except OSError as e:
            failed.append((proto, port, str(e)))
    for proto, port, why in failed:
        print(f"Error: {proto} listener on {host}:{port}: {why}")
    if failed:
        return EX_UNAVAILABLE
    print("Successfully connected to ports " + ", ".join(str(p) for _, p in ports))
    return 0


def environment(call, data_dir: str) -> int:
    print(json.dumps(call(data_dir, ops.Environment()), indent=2, default=str))
    return 0


def close_connection(call, data_dir: str, args: list) -> int:
    """rabbitmqctl close_connection NAME EXPLANATION (NAME as list_connections names it)."""
    if len(args) != 2:
        raise SystemExit("Error: close_connection takes CONNECTION_NAME EXPLANATION")
    call(data_dir, ops.MgmtCloseConnection(name=args[0], reason=args[1]))
    print(f"Closing connection {args[0]}, reason: {args[1]}...")
    return 0


def delete_queue(call, data_dir: str, vhost: str, names: list, if_empty: bool,
                 if_unused: bool) -> int:
    """rabbitmqctl delete_queue NAME [--if-empty] [--if-unused]."""
    if len(names) != 1:
        raise SystemExit("Error: delete_queue takes QUEUE_NAME [--if-empty] [--if-unused]")
    n = call(data_dir, ops.QueueDelete(vhost=vhost, name=names[0],
                                        if_unused=if_unused, if_empty=if_empty,
                                        owner=""))
    print(f"Deleting queue '{names[0]}' on vhost '{vhost}' ...")
    print(f"Queue was successfully deleted with {n or 0} ready messages")
    return 0


def purge_queue(call, data_dir: str, vhost: str, names: list) -> int:
    """rabbitmqctl purge_queue [-p VHOST] QUEUE."""
    if len(names) != 1:
        raise SystemExit("Error: purge_queue takes QUEUE")
    print(f"Purging queue '{names[0]}' in vhost '{vhost}' ...")
    call(data_dir, ops.QueuePurge(vhost=vhost, name=names[0]))
    return 0


def sync_queue(call, data_dir: str, vhost: str, names: list, cancel: bool = False) -> int:
    """rabbitmqctl sync_queue [-p VHOST] QUEUE: a manual-sync queue's mirrors still behind
    are synchronised eagerly; cancel_sync_queue (`cancel`): the sync under way stops."""
    if len(names) != 1:
        raise SystemExit(f"Error: {'cancel_' if cancel else ''}sync_queue takes QUEUE")
    doing = "Stopping synchronising" if cancel else "Synchronising"
    print(f"{doing} queue '{names[0]}' in vhost '{vhost}' ...")
    call(data_dir, ops.QueueSync(vhost=vhost, name=names[0], cancel=cancel))
    return 0


def census(call, data_dir: str, vhost: str, names: list) -> int:
    """leveretctl census [-p VHOST] [QUEUE]: the queue (every running queue of the vhost)
    writes a `queue_census` event to the node's event log: which messages it holds now, for
    the lifecycle job (docs/events.md). Leveret's own: rabbitmqctl has none."""
    if len(names) > 1:
        raise SystemExit("Error: census takes [QUEUE]")
    if names:
        n = call(data_dir, ops.QueueCensus(vhost=vhost, name=names[0]))
        print(f"Census of queue '{names[0]}' in vhost '{vhost}': {n} messages")
        return 0
    asked = call(data_dir, ops.QueueCensus(vhost=vhost))
    print(f"Census of {len(asked)} queues in vhost '{vhost}' ...")
    for _, name in asked:
        print(name)
    return 0


# rabbitmqctl list_users / list_vhosts / list_permissions / list_exchanges / list_bindings:
# (default info items, every info item) read from the node's definitions (op mgmt_state)
DEFINITION_LISTS = {
    "users": (("user", "tags"), ("user", "tags")),
    "vhosts": (("name",), ("name", "description", "tags", "tracing")),
    "permissions": (("user", "configure", "write", "read"),
                    ("user", "configure", "write", "read")),
    "exchanges": (("name", "type"), ("name", "type", "durable", "auto_delete", "internal",
                                     "arguments", "policy")),
    "bindings": (("source_name", "source_kind", "destination_name", "destination_kind",
                  "routing_key", "arguments"),
                 ("source_name", "source_kind", "destination_name", "destination_kind",
                  "routing_key", "arguments")),
}


def definition_rows(state: dict, what: str, vhost: str) -> list:
    """Every row of `what` (all info items) as rabbitmqctl lists them; per vhost but users
    and vhosts."""
    auth = state["auth"]
    if what == "users":
        return [{"user": u["name"], "tags": list(u["tags"])} for u in auth["users"]]
    if what == "vhosts":
        return [{"name": v["name"], "description": v.get("description", ""),
                 "tags": list(v.get("tags") or []), "tracing": False}
                for v in auth["vhosts"]]
    if what == "permissions":
        return [{k: p[k] for k in ("user", "configure", "write", "read")}
                for p in auth["permissions"] if p["vhost"] == vhost]
    if what == "exchanges":
        rows = []
        for x in state["exchanges"]:
            if x["vhost"] != vhost:
                continue
            p = policies.winner(state["policies"], vhost, x["name"], "exchanges")
            rows.append({"name": x["name"], "type": x["type"], "durable": x["durable"],
                         "auto_delete": x["auto_delete"], "internal": x["internal"],
                         "arguments": x["arguments"], "policy": p["name"] if p else ""})
        return rows
    # bindings: the default exchange's to every queue first, as rabbitmqctl lists them
    implicit = [[q["vhost"], "", "queue", q["name"], q["name"], {}] for q in state["queues"]]
    return [{"source_name": b[1], "source_kind": "exchange", "destination_name": b[3],
             "destination_kind": b[2], "routing_key": b[4], "arguments": b[5]}
            for b in implicit + [list(b) for b in state["bindings"]] if b[0] == vhost]


def list_definitions(call, data_dir: str, what: str, vhost: str, items: list,
                     formatter: str) -> int:
    """`rabbitmqctl list_<what> [-p VHOST] [item ...] [--formatter json|table]`."""
    defaults, known = DEFINITION_LISTS[what]
    items = items or list(defaults)
    unknown = [i for i in items if i not in known]
    if unknown:
        raise SystemExit(f"Error: unknown info item(s) {', '.join(unknown)}; known: "
                         f"{', '.join(known)}")
    rows = [{i: r[i] for i in items}
            for r in definition_rows(call(data_dir, ops.MgmtState()), what, vhost)]
    if formatter == "json":
        print(json.dumps(rows))
        return 0
    print({"users": "Listing users ...", "vhosts": "Listing vhosts ...",
           "permissions": f'Listing permissions for vhost "{vhost}" ...',
           "exchanges": f"Listing exchanges for vhost {vhost} ...",
           "bindings": f"Listing bindings for vhost {vhost}..."}[what])
    print("\t".join(items))
    for r in rows:
        print("\t".join(_cell(r[i]) for i in items))
    return 0


def _cell(value) -> str:
    """A table cell as rabbitmqctl prints it: lists in brackets, booleans lowercase."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, dict):  # (rabbitmqctl prints an empty argument table as [])
        return json.dumps(value) if value else "[]"
    return str(value)
