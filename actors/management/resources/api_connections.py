"""Connections, channels and consumers, from the connection workers' samples.

Mirrors ``rabbit_mgmt_wm_connections`` / ``_connection`` (DELETE closes it, with the
X-Reason header as the close reason), ``rabbit_mgmt_wm_connections_vhost``,
``rabbit_mgmt_wm_connection_channels``, ``rabbit_mgmt_wm_channels`` / ``_channel`` /
``_channels_vhost`` and ``rabbit_mgmt_wm_consumers``. A monitoring user or administrator sees
every connection, any other user its own (rabbit_mgmt_util:filter_conn_ch_list).
"""

from __future__ import annotations

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, util
from actors.management.routes import Route


def _connections(request, user, tags, state, visible) -> list:
    """Those the user may see: all for monitoring, else its own (rabbit_mgmt_util)."""
    vhost = util.path_vhost(request, state, visible)
    return [c for c in state.get("connections", ())
            if (api.is_monitor(tags) or c["user"] == user) and
            (vhost is None or c["vhost"] == vhost)]


def _find_connection(request, user, tags, state, visible) -> dict:
    name = request.match_info["conn"]
    for c in _connections(request, user, tags, state, visible):
        if c["name"] == name:
            return c
    raise api.not_found()


async def connections(mgmt, request):
    user, tags, state, visible = await mgmt.state(request)
    return util.reply(request, [api.connection_json(c, details=False) for c in
                                _connections(request, user, tags, state, visible)])


async def connection(mgmt, request):
    user, tags, state, visible = await mgmt.state(request)
    return web.json_response(api.connection_json(
        _find_connection(request, user, tags, state, visible)))


async def delete_connection(mgmt, request):
    user, tags, state, visible = await mgmt.state(request)
    c = _find_connection(request, user, tags, state, visible)
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    await mgmt.ask(ops.MgmtCloseConnection(name=c["name"], reason=reason))
    return web.Response(status=204)


async def channels(mgmt, request):
    user, tags, state, visible = await mgmt.state(request)
    conns = _connections(request, user, tags, state, visible)
    if "conn" in request.match_info:
        conns = [_find_connection(request, user, tags, state, visible)]
    return util.reply(request, [api.channel_json(ch) for c in conns
                                for ch in c["channel_list"]])


async def channel(mgmt, request):
    user, tags, state, visible = await mgmt.state(request)
    name = request.match_info["channel"]
    for c in _connections(request, user, tags, state, visible):
        for ch in c["channel_list"]:
            if ch["name"] == name:
                return web.json_response(api.channel_json(ch, details=True))
    raise api.not_found()


async def consumers(mgmt, request):
    user, tags, state, visible = await mgmt.state(request)
    return util.reply(request, [cons for c in _connections(request, user, tags, state, visible)
                                for ch in c["channel_list"] for cons in ch["consumers"]])


ROUTES = (
    Route("GET", "/api/connections", connections),
    Route("GET", "/api/vhosts/{vhost}/connections", connections),
    Route("GET", "/api/connections/{conn}", connection),
    Route("DELETE", "/api/connections/{conn}", delete_connection),
    Route("GET", "/api/connections/{conn}/channels", channels),
    Route("GET", "/api/channels", channels),
    Route("GET", "/api/vhosts/{vhost}/channels", channels),
    Route("GET", "/api/channels/{channel}", channel),
    Route("GET", "/api/consumers", consumers),
    Route("GET", "/api/consumers/{vhost}", consumers),
)
