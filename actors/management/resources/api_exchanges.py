"""Exchanges: list, show, declare, delete, and publish into one.

Mirrors ``rabbit_mgmt_wm_exchanges`` / ``rabbit_mgmt_wm_exchange`` (PUT declares through
the operation AMQP channels use, with the user's configure permission checked first; DELETE
honours ``if-unused``) and ``rabbit_mgmt_wm_exchange_publish`` (published as an AMQP client
of this node logged in as the HTTP user; ``{"routed": bool}``). The default exchange is
``amq.default`` in paths. Its bindings are bindings.py's.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from actors import metadata_ops as ops
from actors.core.permissions import AuthDB
from actors.management import amqp, api, snapshot, util
from actors.management.routes import Route


async def exchanges(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    counts = snapshot.counts(state)
    return util.reply(request, [api.exchange_json(x, state["policies"], counts, details=False)
                                for x in state["exchanges"] if x["vhost"] in visible and
                                (vhost is None or x["vhost"] == vhost)])


async def exchange(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = util.exchange_name(request.match_info["name"])
    for x in state["exchanges"]:
        if x["vhost"] == vhost and x["name"] == name:
            return web.json_response(api.exchange_json(x, state["policies"],
                                                       snapshot.counts(state)))
    raise api.not_found()


async def put_exchange(mgmt, request):
    user, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = util.exchange_name(request.match_info["name"])
    body = await util.body(request)
    if "type" not in body:
        raise api.bad_request("key_missing: type")
    AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "exchange", name)
    existed = any(x["vhost"] == vhost and x["name"] == name for x in state["exchanges"])
    await mgmt.ask(ops.ExchangeDeclare(
        vhost=vhost, name=name, type=body["type"], passive=False,
        durable=util.flag(body, "durable", True),
        auto_delete=util.flag(body, "auto_delete", False),
        internal=util.flag(body, "internal", False),
        arguments=body.get("arguments") or {}, user=user))
    return web.Response(status=204 if existed else 201)


async def delete_exchange(mgmt, request):
    user, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = util.exchange_name(request.match_info["name"])
    if not any(x["vhost"] == vhost and x["name"] == name for x in state["exchanges"]):
        raise api.not_found()
    AuthDB.from_state(state["auth"]).require(user, vhost, "configure", "exchange", name)
    await mgmt.ask(ops.ExchangeDelete(vhost=vhost, name=name,
                                       if_unused=request.query.get("if-unused") == "true"))
    return web.Response(status=204)


async def publish(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    body = await util.body(request)
    for key in ("routing_key", "payload", "payload_encoding", "properties"):
        if key not in body:
            raise api.bad_request(f"key_missing: {key}")
    encoding = body["payload_encoding"]
    if encoding == "string":
        payload = str(body["payload"]).encode()
    elif encoding == "base64":
        try:
            payload = base64.b64decode(body["payload"], validate=True)
        except (binascii.Error, ValueError):
            raise api.bad_request("payload is not valid base64") from None
    else:
        raise api.bad_request(f"payload_encoding must be string or base64, not {encoding!r}")
    try:
        props = amqp.properties_from_json(body["properties"] or {})
    except (ValueError, TypeError) as e:
        raise api.bad_request(str(e)) from None
    routed = await mgmt.amqp(amqp.publish, mgmt.target(request, vhost),
                             util.exchange_name(request.match_info["name"]),
                             body["routing_key"], props, payload)
    return web.json_response({"routed": routed})


ROUTES = (
    Route("GET", "/api/exchanges", exchanges),
    Route("GET", "/api/exchanges/{vhost}", exchanges),
    Route("GET", "/api/exchanges/{vhost}/{name}", exchange),
    Route("PUT", "/api/exchanges/{vhost}/{name}", put_exchange),
    Route("DELETE", "/api/exchanges/{vhost}/{name}", delete_exchange),
    Route("POST", "/api/exchanges/{vhost}/{name}/publish", publish),
)
