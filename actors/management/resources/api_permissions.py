"""Permissions and topic permissions (the administrator's).

Mirrors ``rabbit_mgmt_wm_permissions`` (all, ``_vhost``, ``_user``) /
``rabbit_mgmt_wm_permission`` (configure, write, read patterns of a user in a vhost) and
``rabbit_mgmt_wm_topic_permissions`` (``_vhost``, ``_user``) / ``_topic_permission`` (write
and read patterns per exchange). A pattern that does not compile is a 400, before anything is
asked of the node.
"""

from __future__ import annotations

from aiohttp import web

from actors.management import api, util
from actors.management.routes import Route


def _known(state, vhost, user) -> None:
    """404 for a vhost or user (None: not asked for) that does not exist."""
    if vhost is not None and vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
        raise api.not_found()
    if user is not None and user not in {u["name"] for u in state["auth"]["users"]}:
        raise api.not_found()


async def permissions(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    vhost, user = request.match_info.get("vhost"), request.match_info.get("user")
    _known(state, vhost, user)
    return util.reply(request, [api.permission_json(p) for p in state["auth"]["permissions"]
                                if vhost in (None, p["vhost"]) and user in (None, p["user"])])


async def permission(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    for p in state["auth"]["permissions"]:
        if p["vhost"] == vhost and p["user"] == user:
            return web.json_response(api.permission_json(p))
    raise api.not_found()


async def put_permission(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    body = await util.body(request)
    missing = [k for k in ("configure", "write", "read") if k not in body]
    if missing:
        raise api.bad_request(f"{missing[0]} is required")
    util.refuse_bad_patterns(body["configure"], body["write"], body["read"])
    existed = any(p["vhost"] == vhost and p["user"] == user
                  for p in state["auth"]["permissions"])
    await mgmt.auth("set_permissions", [user, vhost, body["configure"], body["write"],
                                        body["read"]])
    return web.Response(status=204 if existed else 201)


async def delete_permission(mgmt, request):
    await mgmt.state(request, api.is_admin)
    await mgmt.auth("clear_permissions", [request.match_info["user"],
                                          request.match_info["vhost"]])
    return web.Response(status=204)


async def topic_permissions(mgmt, request):
    """/api/topic-permissions, /api/vhosts/{vhost}/topic-permissions,
    /api/users/{user}/topic-permissions (404 for an unknown vhost or user) and
    /api/topic-permissions/{vhost}/{user} (404 also when it has none)."""
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    vhost, user = request.match_info.get("vhost"), request.match_info.get("user")
    _known(state, vhost, user)
    rows = [{"user": p["user"], "vhost": p["vhost"], "exchange": p["exchange"],
             "write": p["write"], "read": p["read"]}
            for p in state["auth"]["topic_permissions"]
            if vhost in (None, p["vhost"]) and user in (None, p["user"])]
    if vhost is not None and user is not None and not rows:
        raise api.not_found()
    rows.sort(key=lambda r: (r["vhost"], r["user"]))
    return util.reply(request, rows)


def _user_and_vhost(request, state) -> tuple:
    """A topic permission's user and vhost; 400 vhost_or_user_not_found, as RabbitMQ."""
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    if vhost not in {v["name"] for v in state["auth"]["vhosts"]} or \
            user not in {u["name"] for u in state["auth"]["users"]}:
        raise api.bad_request("vhost_or_user_not_found")
    return user, vhost


async def put_topic_permission(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    user, vhost = _user_and_vhost(request, state)
    body = await util.body(request)
    missing = [k for k in ("exchange", "write", "read") if k not in body]
    if missing:
        raise api.bad_request(f"key_missing: {missing[0]}")
    util.refuse_bad_patterns(body["write"], body["read"])
    existed = any(p["vhost"] == vhost and p["user"] == user and
                  p["exchange"] == body["exchange"]
                  for p in state["auth"]["topic_permissions"])
    await mgmt.auth("set_topic_permissions", [user, vhost, body["exchange"], body["write"],
                                              body["read"]])
    return web.Response(status=204 if existed else 201)


async def delete_topic_permission(mgmt, request):
    """DELETE .../{vhost}/{user}: all of the user's in the vhost; .../{exchange}: one."""
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    vhost, user = request.match_info["vhost"], request.match_info["user"]
    exchange = request.match_info.get("exchange")
    if not any(p["vhost"] == vhost and p["user"] == user and
               exchange in (None, p["exchange"])
               for p in state["auth"]["topic_permissions"]):
        raise api.not_found()
    await mgmt.auth("clear_topic_permissions", [user, vhost] +
                    ([exchange] if exchange is not None else []))
    return web.Response(status=204)


ROUTES = (
    Route("GET", "/api/permissions", permissions),
    Route("GET", "/api/vhosts/{vhost}/permissions", permissions),
    Route("GET", "/api/users/{user}/permissions", permissions),
    Route("GET", "/api/permissions/{vhost}/{user}", permission),
    Route("PUT", "/api/permissions/{vhost}/{user}", put_permission),
    Route("DELETE", "/api/permissions/{vhost}/{user}", delete_permission),
    Route("GET", "/api/topic-permissions", topic_permissions),
    Route("GET", "/api/topic-permissions/{vhost}/{user}", topic_permissions),
    Route("PUT", "/api/topic-permissions/{vhost}/{user}", put_topic_permission),
    Route("DELETE", "/api/topic-permissions/{vhost}/{user}", delete_topic_permission),
    Route("DELETE", "/api/topic-permissions/{vhost}/{user}/{exchange}",
          delete_topic_permission),
    Route("GET", "/api/vhosts/{vhost}/topic-permissions", topic_permissions),
    Route("GET", "/api/users/{user}/topic-permissions", topic_permissions),
)
