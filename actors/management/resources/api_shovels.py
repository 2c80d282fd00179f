"""Dynamic shovels' statuses: list, delete, restart.

Mirrors ``rabbit_shovel_mgmt`` (the rabbitmq_shovel_management plugin): GET /api/shovels,
/api/shovels/{vhost}, /api/shovels/vhost/{vhost}/{name} (the monitor's), DELETE
/api/shovels/vhost/{vhost}/{name} (clears its parameter) and DELETE
/api/shovels/vhost/{vhost}/{name}/restart. The rows come from every node (the metadata
actor's `shovel.status`: its own and the other nodes' last ShovelStates).
"""

from __future__ import annotations

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, util
from actors.management.routes import Route


async def _rows(mgmt, request):
    _, tags, state, visible = await mgmt.state(request, api.is_monitor)
    vhost = util.path_vhost(request, state, visible)
    rows = [r for r in await mgmt.ask(ops.ShovelStatus()) if r["vhost"] in visible and
            (vhost is None or r["vhost"] == vhost)]
    name = request.match_info.get("name")
    if name is not None:
        rows = [r for r in rows if r["name"] == name]
    return tags, vhost, name, rows


async def shovels(mgmt, request):
    _, _, _, rows = await _rows(mgmt, request)
    return util.reply(request, rows)


async def delete_shovel(mgmt, request):
    """The shovel's parameter is cleared (rabbit_shovel_util:delete_shovel/3), or with
    /restart it is stopped and started again on its node."""
    _, vhost, name, rows = await _rows(mgmt, request)
    if not rows:
        raise api.not_found()
    if request.path.endswith("/restart"):
        await mgmt.ask(ops.ShovelRestart(vhost=vhost, name=name))
    else:
        await mgmt.ask(ops.Parameter(method="clear", vhost=vhost, component="shovel",
                                     name=name))
    return web.Response(status=204)


ROUTES = (
    Route("GET", "/api/shovels", shovels),
    Route("GET", "/api/shovels/{vhost}", shovels),
    Route("GET", "/api/shovels/vhost/{vhost}/{name}", shovels),
    Route("DELETE", "/api/shovels/vhost/{vhost}/{name}", delete_shovel),
    Route("DELETE", "/api/shovels/vhost/{vhost}/{name}/restart", delete_shovel),
)
