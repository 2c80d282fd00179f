"""Health checks and the aliveness test.

Mirrors ``rabbit_mgmt_wm_health_check_alarms`` / ``_local_alarms``, ``_port_listener``,
``_protocol_listener``, ``_virtual_hosts`` and ``_node_is_quorum_critical`` (200 ``{"status":
"ok"}`` or 503 ``{"status": "failed", "reason": ...}``), and ``rabbit_mgmt_wm_aliveness_test``
(declare, publish to, get from and delete a queue in the vhost, as an AMQP client of this
node logged in as the HTTP user).
"""

from __future__ import annotations

from aiohttp import web

from actors.management import amqp, api, snapshot, util
from actors.management.routes import Route


def _listeners(mgmt, node: str) -> list:
    """Every listener of this node: AMQP(S), the management and Prometheus ports, the Raft
    link's."""
    config = mgmt.config
    out = [{"node": node, "protocol": "amqp", "ip_address": config.host,
            "port": config.port}]
    if config.tls_port:
        out.append({"node": node, "protocol": "amqp/ssl", "ip_address": config.host,
                    "port": config.tls_port})
    if mgmt.port:
        out.append({"node": node, "protocol": "http", "ip_address": mgmt.host,
                    "port": mgmt.port})
    if mgmt.prometheus_port:
        out.append({"node": node, "protocol": "http/prometheus",
                    "ip_address": mgmt.prometheus_host, "port": mgmt.prometheus_port})
    if config.cluster_address:  # the Raft link's (RabbitMQ's Erlang distribution's)
        host, _, port = config.cluster_address.rpartition(":")
        out.append({"node": node, "protocol": "clustering", "ip_address": host,
                    "port": int(port)})
    return out


def _failed(reason: str, **more):
    return web.json_response({"status": "failed", "reason": reason, **more}, status=503)


async def check_alarms(mgmt, request):
    """/alarms: every member's alarms (each from its own last sample, this node's as it
    is now); /local-alarms: this node's (rabbit_mgmt_wm_health_check_[local_]alarms)."""
    _, _, state, _ = await mgmt.state(request, api.is_monitor)
    alarms = [(state["node"], a) for a in state["alarms"]]
    if not request.path.endswith("/local-alarms"):
        for mbr in snapshot.nodes(state):
            if mbr["name"] != state["node"]:
                alarms += [(mbr["name"], a) for a, key in (("memory", "mem_alarm"),
                                                          ("disk", "disk_free_alarm"))
                           if mbr.get(key)]
    if alarms:
        where = "on the node" if request.path.endswith("/local-alarms") else \
            "in the cluster"
        return web.json_response({"status": "failed",
                                  "reason": f"There are alarms in effect {where}",
                                  "alarms": [api.alarm_json(node, a)
                                             for node, a in alarms]}, status=503)
    return web.json_response({"status": "ok"})


async def check_port(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_monitor)
    try:
        port = int(request.match_info["port"])
    except ValueError:
        raise api.bad_request("Invalid port") from None
    ports = [x["port"] for x in _listeners(mgmt, state["node"])]
    if port not in ports:
        return _failed("No active listener", missing=port, ports=ports)
    return web.json_response({"status": "ok", "port": port})


async def check_protocol(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_monitor)
    protocol = api.normalize_protocol(request.match_info["protocol"])
    protocols = [x["protocol"] for x in _listeners(mgmt, state["node"])]
    if protocol not in protocols:
        return _failed("No active listener", missing=protocol, protocols=protocols)
    return web.json_response({"status": "ok", "protocol": protocol})


async def check_vhosts(mgmt, request):
    await mgmt.state(request, api.is_monitor)
    return web.json_response({"status": "ok"})  # a vhost has no process of its own to fail


async def check_quorum(mgmt, request):
    """Would stopping this node cost a quorum queue its majority (RabbitMQ's question,
    rabbit_quorum_queue:list_with_minimum_quorum_for_cli), or the cluster its Raft
    majority (the definitions could no longer change: Leveret's metadata is a Raft log
    too)?"""
    _, _, state, _ = await mgmt.state(request, api.is_monitor)
    members = state["members"]
    if len(members) <= 1:
        return web.json_response({"status": "ok", "reason": "single node cluster"})
    up = {x["name"] for x in members if x["up"]}
    critical = api.quorum_critical(state["queues"], state["node"], up,
                                   {x["member"]: x["name"] for x in members
                                    if "member" in x})
    if critical:
        return _failed("There are quorum queues that would lose their quorum if "
                       "the target node is shut down", queues=critical)
    if len(up) - 1 < len(members) // 2 + 1:
        return _failed("stopping this node would leave the cluster's metadata "
                       "without a majority", up=len(up), members=len(members))
    return web.json_response({"status": "ok"})


async def aliveness(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    await mgmt.amqp(amqp.aliveness, mgmt.target(request, vhost))
    return web.json_response({"status": "ok"})


ROUTES = (
    Route("GET", "/api/health/checks/alarms", check_alarms),
    Route("GET", "/api/health/checks/local-alarms", check_alarms),
    Route("GET", "/api/health/checks/port-listener/{port}", check_port),
    Route("GET", "/api/health/checks/protocol-listener/{protocol}", check_protocol),
    Route("GET", "/api/health/checks/virtual-hosts", check_vhosts),
    Route("GET", "/api/health/checks/node-is-quorum-critical", check_quorum),
    Route("GET", "/api/aliveness-test/{vhost}", aliveness),
)
