"""The overview, the cluster's name and its nodes.

Mirrors ``rabbit_mgmt_wm_overview`` (totals over what the user may see, the listeners, the
message rates), ``rabbit_mgmt_wm_cluster_name`` and ``rabbit_mgmt_wm_nodes`` /
``rabbit_mgmt_wm_node`` (every member with the figures of its own last sample).
"""

from __future__ import annotations

from aiohttp import web

from actors.management import api, snapshot, util
from actors.management.routes import Route


async def overview(mgmt, request):
    user, tags, state, visible = await mgmt.state(request)
    config = mgmt.config
    rows = [r for k, r in snapshot.queue_rows(state).items() if k[0] in visible]
    listeners = [{"node": state["node"], "protocol": "amqp", "ip_address": config.host,
                  "port": config.port}]
    if config.tls_port:
        listeners.append({"node": state["node"], "protocol": "amqp/ssl",
                          "ip_address": config.host, "port": config.tls_port})
    listeners.append({"node": state["node"], "protocol": "http",
                      "ip_address": mgmt.host, "port": mgmt.port})
    counts = snapshot.counts(state)
    return web.json_response(api.overview_json(
        dict(state, exchanges=[x for x in state["exchanges"] if x["vhost"] in visible],
             connections=[c for c in state.get("connections", ())
                          if api.is_monitor(tags) or c["user"] == user]),
        rows, listeners, mgmt.port, snapshot.cluster_name(state),
        api.vhost_message_stats([s for (v, _), s in snapshot.stats(state).items()
                                 if v in visible], counts, visible,
                                [d for (v, _), d in snapshot.disk(state).items()
                                 if v in visible]),
        [d for (v, _), d in snapshot.depth(state).items() if v in visible], counts))


async def cluster_name(mgmt, request):
    _, _, state, _ = await mgmt.state(request)
    return web.json_response({"name": snapshot.cluster_name(state)})


async def nodes(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_monitor)
    return util.reply(request, snapshot.nodes(state))


async def node(mgmt, request):
    """GET /api/nodes/{name}: one member, as /api/nodes lists it (404 for another name)."""
    _, _, state, _ = await mgmt.state(request, api.is_monitor)
    for row in snapshot.nodes(state):
        if row["name"] == request.match_info["node"]:
            return web.json_response(row)
    raise api.not_found()


ROUTES = (
    Route("GET", "/api/overview", overview),
    Route("GET", "/api/cluster-name", cluster_name),
    Route("GET", "/api/nodes", nodes),
    Route("GET", "/api/nodes/{node}", node),
)
