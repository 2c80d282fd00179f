"""`leveretctl`: rabbitmqctl's user, vhost, permission, policy, operator policy, limits,
runtime parameter (set_parameter, clear_parameter, list_parameters), shovel (shovel_status,
restart_shovel, delete_shovel), status, alarm and definitions (export_definitions,
import_definitions) commands against a running node; and `trace` (actors/ctl/trace.py), which reads an analysis in the data directory
without one.

Talks to the node's metadata actor over ZeroMQ, at the address the node writes to
`<data-dir>/node.json`: an ipc:// socket in the node's 0700 run folder, also for a cluster node
(whose own endpoint is tcp:// with CURVE), so no cluster secret is needed here. Passwords are
read from standard input when not given (add_user NAME, change_password NAME) and leave this
process only as salted hashes (docs/security.md).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import uuid

import zmq

from actors.ctl import operations, trace
from actors import messages as m
from actors import metadata_ops as ops
from actors.core.permissions import hashed_auth_call
from actors.node import definitions_json
from actors.transport import make_address, split_address, unframe
from spark_analysis import lookup


def call(data_dir: str, op: ops.Op, timeout_ms: int = 10000):
    try:
        with open(os.path.join(data_dir, "node.json")) as f:
            info = json.load(f)
    except OSError:
        raise SystemExit(f"leveretctl: no node running with data dir {data_dir}")
    reply = ask_node(info["run_dir"], info["metadata"], op, timeout_ms)
    if reply is None:
        raise SystemExit("leveretctl: the node did not answer")
    if not reply.ok:
        raise SystemExit(f"Error: {reply.text}")
    return reply.result


def ask_node(run_dir: str, metadata: str, op: ops.Op, timeout_ms: int = 10000):
    """One operation of the node's metadata actor (`metadata` its address) over an ipc://
    socket of its 0700 run folder: its RpcReply, or None when it did not answer in time.
    (leveretctl, and the management listener inside the node process.)"""
    ctx = zmq.Context.instance()
    endpoint = f"ipc://{run_dir}/ctl-{uuid.uuid4().hex[:8]}.sock"
    pull = ctx.socket(zmq.PULL)
    pull.bind(endpoint)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    node_endpoint, node_name = split_address(metadata)
    push.connect(node_endpoint)
    payload, _ = m.encode(ops.rpc(make_address(endpoint, "ctl"), 1, op))
    push.send_multipart([node_name.encode(), payload])
    try:
        if not pull.poll(timeout_ms):
            return None
        # (a stamped batch of one while the node's events are on: actors/transport.py)
        return unframe(pull.recv_multipart())[-1][1]
    finally:
        pull.close(0)
        push.close()
        try:
            os.unlink(endpoint[len("ipc://"):])
        except OSError:
            pass


COMMANDS = {
    # name: (auth method, argument names)
    "add_user": ("add_user", ["username", "password?"]),
    "delete_user": ("delete_user", ["username"]),
    "change_password": ("change_password", ["username", "password?"]),
    "set_user_tags": ("set_user_tags", ["username", "tags*"]),
    "add_vhost": ("add_vhost", ["vhost"]),
    "delete_vhost": ("delete_vhost", ["vhost"]),
    "set_permissions": ("set_permissions", ["username", "conf", "write", "read"]),
    "clear_permissions": ("clear_permissions", ["username"]),
    "set_topic_permissions": ("set_topic_permissions", ["username", "exchange", "write", "read"]),
    "clear_topic_permissions": ("clear_topic_permissions", ["username", "exchange?"]),
}
PASSWORD_COMMANDS = ("add_user", "change_password")  # without PASSWORD: one line of stdin
VHOST_SCOPED = ("set_permissions", "clear_permissions", "set_topic_permissions",
                "clear_topic_permissions")  # -p VHOST goes after the user name


LIMIT_COMMANDS = {
    # name: (its operation, its optional first argument, usage, what it sets)
    "set_vm_memory_high_watermark": (ops.SetVmMemoryHighWatermark, "absolute",
                                     "FRACTION, or absolute BYTES (e.g. 2GB)",
                                     "memory threshold"),
    "set_disk_free_limit": (ops.SetDiskFreeLimit, "mem_relative",
                            "BYTES (e.g. 50MB), or mem_relative FRACTION", "disk free limit"),
}

QUEUE_COLUMNS = ("name", "durable", "auto_delete", "exclusive", "arguments", "messages",
                 "messages_ready", "messages_unacknowledged", "consumers", "worker", "node",
                 "mirrors", "synchronised_mirrors", "head_message_timestamp", "disk_reads",
                 "disk_writes", "message_bytes", "message_bytes_ready",
                 "message_bytes_unacknowledged", "message_bytes_ram", "message_bytes_paged_out",
                 "messages_ram", "messages_ready_ram", "messages_unacknowledged_ram",
                 "messages_paged_out", "messages_persistent", "message_bytes_persistent")


def print_table(rows: list, columns: list, vhost: str, formatter: str = "table") -> int:
    """`rabbitmqctl list_queues -p VHOST col...`: a heading, then tab-separated rows, or with
    --formatter json a JSON array of objects with those keys."""
    unknown = [c for c in columns if c not in QUEUE_COLUMNS]
    if unknown:
        raise SystemExit(f"Error: unknown column(s) {', '.join(unknown)}; known: "
                         f"{', '.join(QUEUE_COLUMNS)}")
    if formatter == "json":
        print(json.dumps([{c: row.get(c) for c in columns} for row in rows
                          if row.get("vhost") == vhost], default=str))
        return 0
    print(f"Listing queues for vhost {vhost} ...")
    print("\t".join(columns))
    for row in rows:
        if row.get("vhost") == vhost:
            # (a head without a timestamp: empty, as rabbitmqctl prints RabbitMQ's '')
            print("\t".join(_cell("" if row.get(c) is None else row[c]) for c in columns))
    return 0


# rabbitmqctl list_connections / list_channels / list_consumers: (default info items, how each
# item is read from the management sample of actors/connection/stats.py)
SAMPLED = {
    "connections": (("user", "peer_host", "peer_port", "state"), {
        "name": "name", "user": "user", "vhost": "vhost", "peer_host": "peer_host",
        "peer_port": "peer_port", "host": "host", "port": "port", "state": "state",
        "channels": "channels", "protocol": "protocol", "ssl": "ssl", "timeout": "timeout",
        "frame_max": "frame_max", "channel_max": "channel_max", "node": "node",
        "client_properties": "client_properties", "connected_at": "connected_at",
        "type": "type"}),
    "channels": (("name", "user", "consumer_count", "messages_unacknowledged"), {
        "name": "name", "pid": "name", "number": "number", "user": "user", "vhost": "vhost",
        "connection": "connection_details.name", "consumer_count": "consumer_count",
        "messages_unacknowledged": "messages_unacknowledged",
        "prefetch_count": "prefetch_count", "global_prefetch_count": "global_prefetch_count",
        "confirm": "confirm", "transactional": "transactional", "state": "state",
        "node": "node"}),
    "consumers": (("queue_name", "channel_pid", "consumer_tag", "ack_required",
                   "prefetch_count", "active", "arguments"), {
        "queue_name": "queue.name", "channel_pid": "channel_details.name",
        "consumer_tag": "consumer_tag", "ack_required": "ack_required",
        "prefetch_count": "prefetch_count", "active": "active", "arguments": "arguments",
        "exclusive": "exclusive", "activity_status": "activity_status"}),
}


def sampled_rows(state: dict, what: str, vhost: str | None) -> list:
    """Connections, channels or consumers of the node's statistics (all vhosts when vhost is
    None), as the management API lists them."""
    conns = [c for c in state.get("connections", ()) if vhost is None or c["vhost"] == vhost]
    if what == "connections":
        return conns
    channels = [ch for c in conns for ch in c["channel_list"]]
    if what == "channels":
        return channels
    return [cons for ch in channels for cons in ch["consumers"]]


def print_sampled(state: dict, what: str, items: list, vhost: str | None,
                  formatter: str) -> int:
    """`rabbitmqctl list_connections|list_channels|list_consumers [item ...]` as a table
    (heading, then tab-separated rows) or, with --formatter json, a JSON array."""
    defaults, paths = SAMPLED[what]
    items = items or list(defaults)
    unknown = [i for i in items if i not in paths]
    if unknown:
        raise SystemExit(f"Error: unknown info item(s) {', '.join(unknown)}; known: "
                         f"{', '.join(paths)}")
    rows = []
    for row in sampled_rows(state, what, vhost):
        out = {}
        for item in items:
            value = row
            for part in paths[item].split("."):
                value = value.get(part) if isinstance(value, dict) else None
            out[item] = value
        rows.append(out)
    if formatter == "json":
        print(json.dumps(rows, default=str))
        return 0
    print(f"Listing {what} ...")
    print("\t".join(items))
    for row in rows:
        print("\t".join(_cell(row[i]) for i in items))
    return 0


def print_cluster(status: dict) -> int:
    """`rabbitmqctl cluster_status`: every member, whether the log lists it up, whether this
    node reaches it, who leads, whether it is paused (pause_minority; "unknown" for a member
    this node cannot reach); then each mirrored queue's master and mirrors."""
    if not status["me"]:
        print("This node is not in a cluster.")
    print(f"Cluster status of node {status['me'] or 'this node'} ..."
          + (" (paused: it cannot reach a majority of the cluster or a leader, or the log "
             "lists it down)" if status.get("paused")
             else ""))
    print("member\tname\tamqp\tup\treachable\tleader\tpaused")
    for r in status["members"]:
        paused = r.get("paused")
        print("\t".join([*(_cell(r[c]) for c in
                           ("member", "name", "amqp", "up", "connected", "leader")),
                         "unknown" if paused is None else _cell(paused)]))
    queues = status.get("queues") or []
    if queues:
        print("\nMirrored queues")
        print("vhost\tname\tmaster\trunning\tmirrors\tsynchronised_mirrors")
        for q in queues:
            print("\t".join(_cell(q[c]) for c in ("vhost", "name", "master", "running",
                                                   "mirrors", "synchronised_mirrors")))
    return 0


def print_status(status: dict) -> int:
    """`rabbitmqctl status`'s alarm, memory and disk sections."""
    print("Status of this node ...")
    print("\nAlarms\n")
    alarms = status.get("alarms") or []
    print("\n".join(f"{a} resource limit alarm" for a in alarms) if alarms else
          "(none)")
    print("\nMemory\n")
    print(f"Total memory used: {status['memory_used']} bytes")
    print(f"Memory high watermark setting: {json.dumps(status['vm_memory_high_watermark'])}")
    print(f"Memory high watermark: {status['memory_limit']} bytes")
    print("\nFree Disk Space\n")
    print(f"Low free disk space watermark: {status['disk_free_limit']} bytes")
    print(f"Free disk space: {status['disk_free']} bytes")
    ev = status.get("events")
    if ev is not None:
        print("\nEvent log\n")
        print(f"Level: {ev['level']}")
        print(f"Events written: {ev['events_written']}")
        print(f"Events dropped (buffer full): {ev['events_dropped']}")
        print(f"Sync before confirms (events_sync): {ev.get('events_sync', 'off')}")
        print(f"Syncs before confirms: {ev.get('events_syncs', 0)}")
    return 0


def definitions_command(data_dir: str, command: str, path: str) -> int:
    """`rabbitmqctl export_definitions FILE|-` and `import_definitions FILE|-`: RabbitMQ's
    JSON definitions (actors/node/definitions_json.py), imported as one definitions change."""
    if command == "export_definitions":
        text = json.dumps(call(data_dir, ops.DefinitionsExport()), indent=2)
        if path == "-":
            print(text)
        else:
            # it holds password hashes: readable by this user only (docs/security.md)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write(text + "\n")
            print(f"Exported definitions for virtual hosts to \"{path}\"", file=sys.stderr)
        return 0
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except OSError as e:
        raise SystemExit(f"Error: cannot read {path}: {e.strerror}")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise SystemExit(f"Error: {path} is not JSON: {e}")
    print(f"Importing definitions in JSON from a file at \"{path}\" ...", file=sys.stderr)
    # plaintext passwords (RabbitMQ accepts them) leave this process only as salted hashes
    doc = definitions_json.hash_plain_passwords(doc)
    result = call(data_dir, ops.DefinitionsImport(doc=doc))
    for w in result["warnings"]:
        print(f"Warning: {w}", file=sys.stderr)
    print(f"Successfully imported definitions ({result['changes']} changes).")
    return 0


def read_password() -> str:
    """rabbitmqctl's add_user / change_password without PASSWORD: the first line of standard
    input, its line end stripped (asked for without echo on a terminal), so that no password
    has to be on a command line, where `ps` shows it to every user."""
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
    else:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    if not password:
        raise SystemExit("Error: no password given (as an argument or a line on standard "
                         "input)")
    return password


def _cell(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def _json_arg(p, text: str, what: str):
    try:
        return json.loads(text)
    except ValueError as e:
        p.error(f"the {what} is not JSON: {e}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="leveretctl", description=__doc__)
    p.add_argument("--data-dir", default="./var", help="the node's data directory")
    p.add_argument("-p", "--vhost", default="/",
                   help="virtual host (set/clear_[topic_]permissions, list_topic_permissions)")
    p.add_argument("--priority", type=int, default=0, help="set_policy: priority")
    p.add_argument("--apply-to", default="all", help="set_policy: queues, exchanges or all")
    p.add_argument("--if-empty", action="store_true", help="delete_queue: only if empty")
    p.add_argument("--if-unused", action="store_true", help="delete_queue: only if unused")
    p.add_argument("--timeout", type=float, default=60.0, help="await_startup: seconds")
    p.add_argument("--formatter", choices=("table", "json"), default="table",
                   help="list_* commands: output format")
    p.add_argument("command", choices=sorted(COMMANDS) + [
        "list_users", "list_vhosts", "list_queues", "list_exchanges", "list_bindings",
        "list_policies", "list_topic_permissions", "list_user_topic_permissions", "set_policy",
        "clear_policy", "set_operator_policy", "clear_operator_policy", "list_operator_policies",
        "set_vhost_limits", "clear_vhost_limits", "list_vhost_limits", "set_user_limits",
        "clear_user_limits", "list_user_limits", "cluster_status", "status",
        "set_vm_memory_high_watermark", "set_disk_free_limit", "list_connections",
        "list_channels", "list_consumers", "export_definitions", "import_definitions",
        "list_permissions", "set_parameter", "clear_parameter", "list_parameters",
        "shovel_status", "delete_shovel", "restart_shovel", "trace", *OPS])
    p.add_argument("--analysis", default="analysis",
                   help="trace: the analysis folder in the data directory")
    p.add_argument("--by", default="message_id", choices=("msg_id", *lookup.KEYS),
                   help="trace: what MESSAGE_ID is")
    p.add_argument("args", nargs="*")
    a = p.parse_intermixed_args(argv)
    if a.command == "trace":
        if len(a.args) != 1:
            p.error("trace takes MESSAGE_ID")
        return trace.trace(a.data_dir, a.args[0], a.analysis, a.by)
    if a.command in OPS:
        return _op(a)
    if a.command in ("set_parameter", "clear_parameter", "list_parameters", "shovel_status",
                     "delete_shovel", "restart_shovel"):
        return parameter_command(p, a)
    if a.command in ("set_policy", "set_operator_policy"):
        if len(a.args) != 3:
            p.error(f"{a.command} takes NAME PATTERN DEFINITION (a JSON object)")
        definition = _json_arg(p, a.args[2], "definition")
        operator = a.command == "set_operator_policy"
        call(a.data_dir, ops.Policy(method="set", vhost=a.vhost, name=a.args[0],
                                    pattern=a.args[1], definition=definition,
                                    priority=a.priority, apply_to=a.apply_to,
                                    operator=operator))
        kind = "operator policy" if operator else "policy"
        print(f"Setting {kind} \"{a.args[0]}\" for pattern \"{a.args[1]}\" ... done")
        return 0
    if a.command in ("clear_policy", "clear_operator_policy"):
        if len(a.args) != 1:
            p.error(f"{a.command} takes NAME")
        operator = a.command == "clear_operator_policy"
        call(a.data_dir, ops.Policy(method="clear", vhost=a.vhost, name=a.args[0],
                                    operator=operator))
        kind = "operator policy" if operator else "policy"
        print(f"Clearing {kind} \"{a.args[0]}\" ... done")
        return 0
    if a.command in ("set_vhost_limits", "set_user_limits", "clear_vhost_limits",
                     "clear_user_limits"):
        # rabbitmqctl set_vhost_limits [-p VHOST] DEFINITION, set_user_limits USER DEFINITION,
        # clear_vhost_limits [-p VHOST], clear_user_limits USER
        scope = "vhost" if "vhost" in a.command else "user"
        setting = a.command.startswith("set_")
        want = (scope == "user") + setting
        if len(a.args) != want:
            p.error(f"{a.command} takes " + " ".join(
                (["USERNAME"] if scope == "user" else []) + (["DEFINITION"] if setting else [])))
        name = a.vhost if scope == "vhost" else a.args[0]
        value = _json_arg(p, a.args[-1], "definition") if setting else None
        call(a.data_dir, ops.Limits("set" if setting else "clear", scope, name, value))
        what = f"vhost \"{name}\"" if scope == "vhost" else f"user \"{name}\""
        print(f"{'Applying' if setting else 'Clearing'} limits for {what} ... done")
        return 0
    if a.command == "list_vhost_limits":
        print(json.dumps(call(a.data_dir, ops.List(what="vhost_limits", vhost=a.vhost)),
                         indent=2))
        return 0
    if a.command in ("export_definitions", "import_definitions"):
        if len(a.args) != 1:
            p.error(f"{a.command} takes FILE (or - for standard {'output' if a.command[0] == 'e' else 'input'})")
        return definitions_command(a.data_dir, a.command, a.args[0])
    if a.command == "cluster_status":
        return print_cluster(call(a.data_dir, ops.ClusterStatus()))
    if a.command == "status":
        return print_status(call(a.data_dir, ops.Status()))
    if a.command in LIMIT_COMMANDS:
        # rabbitmqctl set_vm_memory_high_watermark FRACTION | absolute BYTES,
        # set_disk_free_limit BYTES | mem_relative FRACTION
        op, flag, usage, what = LIMIT_COMMANDS[a.command]
        flagged = len(a.args) == 2 and a.args[0] == flag
        if len(a.args) != 1 + flagged:
            p.error(f"{a.command} takes {usage}")
        limit = call(a.data_dir, op(a.args[-1], flagged))
        print(f"Setting {what} on this node to {a.args[-1]} ({limit} bytes) ...")
        return 0
    if a.command in ("list_connections", "list_channels", "list_consumers"):
        what = a.command[5:]
        # connections and channels: every vhost, as rabbitmqctl; consumers: -p VHOST
        return print_sampled(call(a.data_dir, ops.MgmtState()), what, a.args,
                             a.vhost if what == "consumers" else None, a.formatter)
    if a.command[5:] in operations.DEFINITION_LISTS and a.command.startswith("list_"):
        return operations.list_definitions(call, a.data_dir, a.command[5:], a.vhost, a.args,
                                        a.formatter)
    if a.command == "list_queues" and a.args:
        return print_table(call(a.data_dir, ops.List(what="queues")), a.args, a.vhost,
                           a.formatter)
    if a.command in ("list_topic_permissions", "list_user_topic_permissions"):
        if a.command == "list_user_topic_permissions":
            if len(a.args) != 1:
                p.error("list_user_topic_permissions takes USERNAME")
            query = ops.List("topic_permissions", user=a.args[0])
        else:
            query = ops.List("topic_permissions", vhost=a.vhost)
        print(json.dumps(call(a.data_dir, query), indent=2))
        return 0
    if a.command.startswith("list_"):
        result = call(a.data_dir, ops.List(what=a.command[5:]))
        print(json.dumps(result, indent=2, default=str))
        return 0
    method, names = COMMANDS[a.command]
    if names and names[-1].endswith("*"):
        args = [a.args[0], list(a.args[1:])] if a.args else []
    else:
        required = [n for n in names if not n.endswith("?")]
        if not len(required) <= len(a.args) <= len(names):
            p.error(f"{a.command} takes {' '.join(names)}")
        args = list(a.args)
    if a.command in PASSWORD_COMMANDS and len(args) == 1:
        args.append(read_password())
    if a.command in VHOST_SCOPED:
        args = [args[0], a.vhost] + args[1:]
    # a password leaves this process only as a salted hash (rabbit_password_hashing_sha256)
    method, args = hashed_auth_call(method, args)
    call(a.data_dir, ops.Auth(method=method, args=args))
    print(f"{a.command} done")
    return 0


def parameter_command(p, a) -> int:
    """rabbitmqctl set_parameter [-p VHOST] COMPONENT NAME VALUE, clear_parameter [-p VHOST]
    COMPONENT NAME, list_parameters [-p VHOST], and the shovel plugin's shovel_status,
    delete_shovel [-p VHOST] NAME and restart_shovel [-p VHOST] NAME."""
    if a.command == "set_parameter":
        if len(a.args) != 3:
            p.error("set_parameter takes COMPONENT NAME VALUE (a JSON object)")
        component, name = a.args[0], a.args[1]
        value = _json_arg(p, a.args[2], "value")
        print(f"Setting runtime parameter \"{name}\" for component \"{component}\" to "
              f"\"{a.args[2]}\" in vhost \"{a.vhost}\" ...")
        call(a.data_dir, ops.Parameter(method="set", vhost=a.vhost,
                                       component=component, name=name, value=value))
        return 0
    if a.command == "clear_parameter":
        if len(a.args) != 2:
            p.error("clear_parameter takes COMPONENT NAME")
        component, name = a.args
        print(f"Clearing runtime parameter \"{name}\" for component \"{component}\" on "
              f"vhost \"{a.vhost}\" ...")
        call(a.data_dir, ops.Parameter(method="clear", vhost=a.vhost,
                                       component=component, name=name))
        return 0
    if a.command == "list_parameters":
        rows = [{"component": r["component"], "name": r["name"],
                 "value": json.dumps(r["value"], separators=(",", ":"))}
                for r in call(a.data_dir, ops.List(what="parameters", vhost=a.vhost))]
        print(f"Listing runtime parameters for vhost \"{a.vhost}\" ...")
        return _print_rows(rows, ["component", "name", "value"], a.formatter)
    if a.command in ("delete_shovel", "restart_shovel"):
        # the shovel plugin's commands: a shovel some node reports, by its name in -p VHOST
        if len(a.args) != 1:
            p.error(f"{a.command} takes NAME")
        name = a.args[0]
        if a.command == "delete_shovel":
            print(f"Deleting shovel {name} in vhost {a.vhost}")
        else:
            print(f"Restarting dynamic Shovel {name} in virtual host {a.vhost}")
        if not any(r["vhost"] == a.vhost and r["name"] == name
                   for r in call(a.data_dir, ops.ShovelStatus())):
            raise SystemExit("Error: Shovel with the given name was not found on the target "
                             f"node and / or virtual host '{a.vhost}'")
        if a.command == "delete_shovel":
            call(a.data_dir, ops.Parameter(method="clear", vhost=a.vhost,
                                           component="shovel", name=name))
        else:
            call(a.data_dir, ops.ShovelRestart(vhost=a.vhost, name=name))
        return 0
    print("Shovel status on node ...")
    if a.formatter == "json":  # every field, as rabbitmqctl shovel_status --formatter json
        print(json.dumps(call(a.data_dir, ops.ShovelStatus())))
        return 0
    return _print_rows(call(a.data_dir, ops.ShovelStatus()),
                       ["name", "vhost", "type", "state", "src_uri", "dest_uri", "node",
                        "timestamp", "reason"], a.formatter)


def _print_rows(rows: list, columns: list, formatter: str) -> int:
    if formatter == "json":
        print(json.dumps([{c: r.get(c) for c in columns} for r in rows], default=str))
        return 0
    print("\t".join(columns))
    for r in rows:
        print("\t".join(_cell("" if r.get(c) is None else r[c]) for c in columns))
    return 0


OPS = ("await_startup", "check_running", "check_local_alarms", "check_port_connectivity",
       "environment", "close_connection", "delete_queue", "purge_queue", "sync_queue",
       "cancel_sync_queue", "census")


def _op(a) -> int:
    """The operational commands (actors/ctl/operations.py)."""
    if a.command == "await_startup":
        return operations.await_startup(call, a.data_dir, a.timeout)
    if a.command == "close_connection":
        return operations.close_connection(call, a.data_dir, a.args)
    if a.command == "delete_queue":
        return operations.delete_queue(call, a.data_dir, a.vhost, a.args, a.if_empty,
                                    a.if_unused)
    if a.command == "purge_queue":
        return operations.purge_queue(call, a.data_dir, a.vhost, a.args)
    if a.command == "census":
        return operations.census(call, a.data_dir, a.vhost, a.args)
    if a.command in ("sync_queue", "cancel_sync_queue"):
        return operations.sync_queue(call, a.data_dir, a.vhost, a.args,
                                  cancel=a.command == "cancel_sync_queue")
    return getattr(operations, a.command)(call, a.data_dir)


if __name__ == "__main__":
    sys.exit(main())
