"""Virtual hosts: list, show (with their totals), create, delete.

Mirrors ``rabbit_mgmt_wm_vhosts`` / ``rabbit_mgmt_wm_vhost`` (a user sees the vhosts it has
permissions in, monitoring users and administrators all; PUT and DELETE are the
administrator's). A vhost's totals add up its queues' last samples and its connections'
(api.vhost_sums). Its limits are limits.py's.
"""

from __future__ import annotations

from aiohttp import web

from actors.management import api, snapshot, util
from actors.management.routes import Route


def _vhost_sums(state):
    """vhost -> its totals (api.vhost_sums)."""
    rows = list(snapshot.queue_rows(state).values())
    stats, depth = snapshot.stats(state), snapshot.depth(state)
    conns = state.get("connections", ())
    counts = snapshot.counts(state)
    return lambda vhost: api.vhost_sums(
        vhost, [r for r in rows if r["vhost"] == vhost],
        [s for (v, _), s in stats.items() if v == vhost],
        [d for (v, _), d in depth.items() if v == vhost], conns, counts)


async def vhosts(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    sums = _vhost_sums(state)
    return util.reply(request, [api.vhost_json(v, state["members"], sums(v["name"]))
                                for v in state["auth"]["vhosts"] if v["name"] in visible])


async def vhost(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    name = util.path_vhost(request, state, visible)
    sums = _vhost_sums(state)
    return web.json_response(api.vhost_json(
        next(v for v in state["auth"]["vhosts"] if v["name"] == name), state["members"],
        sums(name)))


async def put_vhost(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    name = request.match_info["vhost"]
    await util.body(request)
    if any(v["name"] == name for v in state["auth"]["vhosts"]):
        return web.Response(status=204)
    await mgmt.auth("add_vhost", [name])
    return web.Response(status=201)


async def delete_vhost(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    name = request.match_info["vhost"]
    if not any(v["name"] == name for v in state["auth"]["vhosts"]):
        raise api.not_found()
    await mgmt.auth("delete_vhost", [name])
    return web.Response(status=204)


ROUTES = (
    Route("GET", "/api/vhosts", vhosts),
    Route("GET", "/api/vhosts/{vhost}", vhost),
    Route("PUT", "/api/vhosts/{vhost}", put_vhost),
    Route("DELETE", "/api/vhosts/{vhost}", delete_vhost),
)
