"""Users: list, show, create or change, delete (the administrator's).

Mirrors ``rabbit_mgmt_wm_users`` / ``rabbit_mgmt_wm_user``: PUT with ``password`` or
``password_hash`` (+ ``hashing_algorithm``) and ``tags`` (a list, or a comma-separated string
as the UI and rabbitmqadmin send it); a new user needs one of the two. Changed through the
operations leveretctl add_user / change_password / set_user_tags use, the password hashed
here so that it never travels (permissions.hashed_auth_call).
"""

from __future__ import annotations

from aiohttp import web

from actors.management import api, util
from actors.management.routes import Route


async def users(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    return util.reply(request, [api.user_json(u, state) for u in state["auth"]["users"]])


async def user(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    name = request.match_info["user"]
    for u in state["auth"]["users"]:
        if u["name"] == name:
            return web.json_response(api.user_json(u, state))
    raise api.not_found()


async def put_user(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    name = request.match_info["user"]
    body = await util.body(request)
    tags = body.get("tags", "")
    # "administrator, monitoring": each tag stripped, as rabbit_auth_backend_internal's
    # tag_list_from (the web UI's and rabbitmqadmin's comma-separated string)
    tags = [t.strip() for t in (tags.split(",") if isinstance(tags, str) else tags)
            if t.strip()]
    exists = any(u["name"] == name for u in state["auth"]["users"])
    if "password" in body:
        if exists:
            await mgmt.auth("change_password", [name, body["password"]])
        else:
            await mgmt.auth("add_user", [name, body["password"], tags])
    elif "password_hash" in body:
        algo = body.get("hashing_algorithm", "rabbit_password_hashing_sha256")
        if exists:
            await mgmt.auth("change_password_hash", [name, body["password_hash"], algo])
        else:
            await mgmt.auth("add_user_with_hash", [name, body["password_hash"], algo, tags])
    elif not exists:
        raise api.bad_request("password or password_hash is required")
    if exists:
        await mgmt.auth("set_user_tags", [name, tags])
    return web.Response(status=204 if exists else 201)


async def delete_user(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    name = request.match_info["user"]
    if not any(u["name"] == name for u in state["auth"]["users"]):
        raise api.not_found()
    await mgmt.auth("delete_user", [name])
    return web.Response(status=204)


ROUTES = (
    Route("GET", "/api/users", users),
    Route("GET", "/api/users/{user}", user),
    Route("PUT", "/api/users/{user}", put_user),
    Route("DELETE", "/api/users/{user}", delete_user),
)
