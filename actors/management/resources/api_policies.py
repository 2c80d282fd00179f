"""Policies and operator policies: list, show, set, clear.

Mirrors ``rabbit_mgmt_wm_policies`` / ``rabbit_mgmt_wm_policy`` (/api/policies: the
policymaker's) and ``rabbit_mgmt_wm_operator_policies`` / ``_operator_policy``
(/api/operator-policies: the administrator's). Set and cleared through the operation
leveretctl set_policy uses.
"""

from __future__ import annotations

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, util
from actors.management.routes import Route


def _operator(request) -> bool:
    """/api/operator-policies (administrator) or /api/policies (policymaker)."""
    return request.path.startswith("/api/operator-policies")


def _rights(request):
    return api.is_admin if _operator(request) else api.is_policymaker


def _table(request, state) -> list:
    return state["operator_policies" if _operator(request) else "policies"]


async def policies(mgmt, request):
    need = api.is_admin if _operator(request) else None
    _, _, state, visible = await mgmt.state(request, need)
    vhost = util.path_vhost(request, state, visible)
    return util.reply(request, [api.policy_json(p) for p in _table(request, state)
                                if p["vhost"] in visible and
                                (vhost is None or p["vhost"] == vhost)])


async def policy(mgmt, request):
    need = api.is_admin if _operator(request) else None
    _, _, state, visible = await mgmt.state(request, need)
    vhost = util.path_vhost(request, state, visible)
    for p in _table(request, state):
        if p["vhost"] == vhost and p["name"] == request.match_info["name"]:
            return web.json_response(api.policy_json(p))
    raise api.not_found()


async def put_policy(mgmt, request):
    _, _, state, visible = await mgmt.state(request, _rights(request))
    vhost = util.path_vhost(request, state, visible)
    name = request.match_info["name"]
    body = await util.body(request)
    for key in ("pattern", "definition"):
        if key not in body:
            raise api.bad_request(f"key_missing: {key}")
    existed = any(p["vhost"] == vhost and p["name"] == name for p in _table(request, state))
    await mgmt.ask(ops.Policy(method="set", vhost=vhost, name=name,
                              pattern=body["pattern"], definition=body["definition"],
                              priority=int(body.get("priority", 0)),
                              apply_to=body.get("apply-to", "all"),
                              operator=_operator(request)))
    return web.Response(status=204 if existed else 201)


async def delete_policy(mgmt, request):
    _, _, state, visible = await mgmt.state(request, _rights(request))
    vhost = util.path_vhost(request, state, visible)
    name = request.match_info["name"]
    if not any(p["vhost"] == vhost and p["name"] == name for p in _table(request, state)):
        raise api.not_found()
    await mgmt.ask(ops.Policy(method="clear", vhost=vhost, name=name,
                              operator=_operator(request)))
    return web.Response(status=204)


ROUTES = tuple(
    route for base in ("/api/policies", "/api/operator-policies") for route in (
        Route("GET", base, policies),
        Route("GET", base + "/{vhost}", policies),
        Route("GET", base + "/{vhost}/{name}", policy),
        Route("PUT", base + "/{vhost}/{name}", put_policy),
        Route("DELETE", base + "/{vhost}/{name}", delete_policy),
    ))
