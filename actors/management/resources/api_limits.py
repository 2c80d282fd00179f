"""Vhost and user limits (max-connections, max-queues, max-channels).

Mirrors ``rabbit_mgmt_wm_limits`` / ``rabbit_mgmt_wm_limit`` (/api/vhost-limits) and
``rabbit_mgmt_wm_user_limits`` / ``rabbit_mgmt_wm_user_limit`` (/api/user-limits): lists of
``{vhost|user, value}``, one limit set or cleared at a time by the administrator.
"""

from __future__ import annotations

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, util
from actors.management.routes import Route


def _scope(request) -> str:
    return "vhost" if request.path.startswith("/api/vhost-limits") else "user"


def _known(state, scope: str, name: str) -> bool:
    table = state["auth"]["vhosts" if scope == "vhost" else "users"]
    return name in {x["name"] for x in table}


async def limits(mgmt, request):
    """A list of {vhost|user, value}; a vhost's or user's own (404 if it does not
    exist) is [] without limits, as RabbitMQ's."""
    scope = _scope(request)
    need = api.is_admin if scope == "user" else None
    _, _, state, visible = await mgmt.state(request, need)
    name = request.match_info.get("name")
    if name is not None and not _known(state, scope, name):
        raise api.not_found()
    rows = [{scope: n, "value": v} for s, n, v in state["limits"]
            if s == scope and v and (name is None or n == name) and
            (scope == "user" or n in visible)]
    return util.reply(request, rows)


async def put_limit(mgmt, request):
    scope = _scope(request)
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    name, key = request.match_info["name"], request.match_info["limit"]
    if not _known(state, scope, name):
        raise api.not_found(f"{scope}_not_found")
    body = await util.body(request)
    if "value" not in body:
        raise api.bad_request("key_missing: value")
    current = next((v for s, n, v in state["limits"] if s == scope and n == name), {})
    await mgmt.ask(ops.Limits(method="set", scope=scope, name=name,
                              value=dict(current, **{key: body["value"]})))
    return web.Response(status=204)


async def delete_limit(mgmt, request):
    """Clears one limit; one that is not set: nothing to do, 204 as RabbitMQ's
    clear_limit answers."""
    scope = _scope(request)
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    name, key = request.match_info["name"], request.match_info["limit"]
    current = next((v for s, n, v in state["limits"] if s == scope and n == name), None)
    if current is None or key not in current:
        return web.Response(status=204)
    rest = {k: v for k, v in current.items() if k != key}
    await mgmt.ask(ops.Limits(method="set" if rest else "clear", scope=scope,
                              name=name, **({"value": rest} if rest else {})))
    return web.Response(status=204)


ROUTES = tuple(
    route for base in ("/api/vhost-limits", "/api/user-limits") for route in (
        Route("GET", base, limits),
        Route("GET", base + "/{name}", limits),
        Route("PUT", base + "/{name}/{limit}", put_limit),
        Route("DELETE", base + "/{name}/{limit}", delete_limit),
    ))
