"""Queues: list, show, declare, delete, purge, get messages from, and sync.

Mirrors ``rabbit_mgmt_wm_queues`` / ``rabbit_mgmt_wm_queue`` (figures from each queue's last
sample; PUT declares through the operation AMQP channels use, with the user's configure
permission checked first; DELETE honours ``if-unused`` / ``if-empty``),
``rabbit_mgmt_wm_queue_purge`` and ``rabbit_mgmt_wm_queue_get`` (as an AMQP client of this
node logged in as the HTTP user) and ``rabbit_mgmt_wm_queue_actions`` (sync / cancel_sync).
Its bindings are bindings.py's.
"""

from __future__ import annotations

import json

from aiohttp import web

from actors import metadata_ops as ops
from actors.core.permissions import AuthDB
from actors.management import amqp, api, snapshot, util
from actors.management.routes import Route


async def queues(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    rows = snapshot.queue_rows(state)
    stats = snapshot.stats(state)
    consumers = snapshot.consumers_by_queue(state)
    depth = snapshot.depth(state)
    use = snapshot.use(state)
    return util.reply(request, [
        api.queue_json(q, rows.get((q["vhost"], q["name"])), state["policies"],
                       state.get("operator_policies", ()),
                       stats.get((q["vhost"], q["name"])),
                       consumers.get((q["vhost"], q["name"])),
                       depth.get((q["vhost"], q["name"])), use.get((q["vhost"], q["name"])),
                       details=False)
        for q in state["queues"] if q["vhost"] in visible and
        (vhost is None or q["vhost"] == vhost)])


async def queue(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = request.match_info["name"]
    q = snapshot.find_queue(state, vhost, name)
    rows = snapshot.queue_rows(state)  # its last sample, as every list (and RabbitMQ's)
    return web.json_response(api.queue_json(q, rows.get((vhost, name)), state["policies"],
                                            state.get("operator_policies", ()),
                                            snapshot.stats(state).get((vhost, name)),
                                            snapshot.consumers_by_queue(state).get((vhost, name)),
                                            snapshot.depth(state).get((vhost, name)),
                                            snapshot.use(state).get((vhost, name))))


async def put_queue(mgmt, request):
    user, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = request.match_info["name"]
    body = await util.body(request)
    AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "queue", name)
    existed = any(q["vhost"] == vhost and q["name"] == name for q in state["queues"])
    await mgmt.ask(ops.QueueDeclare(
        vhost=vhost, name=name, passive=False,
        durable=util.flag(body, "durable", True), exclusive=False,
        auto_delete=util.flag(body, "auto_delete", False),
        arguments=body.get("arguments") or {}, owner="", user=user))
    return web.Response(status=204 if existed else 201)


async def delete_queue(mgmt, request):
    user, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = request.match_info["name"]
    snapshot.find_queue(state, vhost, name)
    AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "queue", name)
    await mgmt.ask(ops.QueueDelete(vhost=vhost, name=name,
                                    if_unused=request.query.get("if-unused") == "true",
                                    if_empty=request.query.get("if-empty") == "true",
                                    owner=""))
    return web.Response(status=204)


async def purge(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    await mgmt.amqp(amqp.purge, mgmt.target(request, vhost), request.match_info["name"])
    return web.Response(status=204)


async def get(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    body = await util.body(request)
    ackmode = body.get("ackmode")
    if ackmode not in amqp.ACKMODES:
        raise api.bad_request(f"ackmode must be one of {', '.join(amqp.ACKMODES)}")
    encoding = body.get("encoding", "auto")
    if encoding not in ("auto", "base64"):
        raise api.bad_request("encoding must be auto or base64")
    try:
        count = int(body.get("count", 1))
        truncate = None if body.get("truncate") in (None, "") else int(body["truncate"])
    except (TypeError, ValueError):
        raise api.bad_request("count and truncate must be integers") from None
    got = await mgmt.amqp(amqp.get, mgmt.target(request, vhost), request.match_info["name"],
                          count, ackmode)
    return web.json_response([amqp.message_json(g, p, b, encoding, truncate)
                              for g, p, b in got])


async def queue_action(mgmt, request):
    """rabbit_mgmt_wm_queue_actions (administrator): {"action": "sync"} syncs a
    ha-sync-mode manual queue's mirrors still behind, "cancel_sync" stops a sync under way
    (leveretctl sync_queue / cancel_sync_queue)."""
    _, _, state, visible = await mgmt.state(request, api.is_admin)
    vhost = util.path_vhost(request, state, visible)
    action = (await util.body(request)).get("action")
    if action not in ("sync", "cancel_sync"):
        raise api.bad_request(f"unknown action {json.dumps(action)}")
    await mgmt.ask(ops.QueueSync(vhost=vhost, name=request.match_info["name"],
                                  cancel=action == "cancel_sync"))
    return web.Response(status=204)


ROUTES = (
    Route("GET", "/api/queues", queues),
    Route("GET", "/api/queues/{vhost}", queues),
    Route("GET", "/api/queues/{vhost}/{name}", queue),
    Route("PUT", "/api/queues/{vhost}/{name}", put_queue),
    Route("DELETE", "/api/queues/{vhost}/{name}", delete_queue),
    Route("DELETE", "/api/queues/{vhost}/{name}/contents", purge),
    Route("POST", "/api/queues/{vhost}/{name}/get", get),
    Route("POST", "/api/queues/{vhost}/{name}/actions", queue_action),
)
