"""Bindings: list (all, per vhost, per exchange, per queue, between two ends), show, create,
delete.

Mirrors ``rabbit_mgmt_wm_bindings`` (its modes: all, vhost, exchange_source,
exchange_destination, queue, source_destination; POST creates one and answers 201 with its
Location) and ``rabbit_mgmt_wm_binding`` (one binding by its properties key). Creating or
deleting one needs write on the destination and read on the source, as queue.bind does. The
default exchange's implicit bindings are listed too.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from actors import metadata_ops as ops
from actors.core.permissions import AuthDB
from actors.management import api, snapshot, util
from actors.management.routes import Route


async def bindings(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    return util.reply(request, [api.binding_json(b) for b in snapshot.bindings(state)
                                if b[0] in visible and (vhost is None or b[0] == vhost)])


async def exchange_bindings(mgmt, request):
    """Bindings whose source (or destination) is this exchange."""
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = util.exchange_name(request.match_info["name"])
    if not any(x["vhost"] == vhost and x["name"] == name for x in state["exchanges"]):
        raise api.not_found()
    if request.match_info["side"] == "source":
        rows = [b for b in snapshot.bindings(state) if b[0] == vhost and b[1] == name]
    else:
        rows = [b for b in snapshot.bindings(state) if b[0] == vhost and b[2] == "exchange" and
                b[3] == name]
    return util.reply(request, [api.binding_json(b) for b in rows])


async def queue_bindings(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost = util.path_vhost(request, state, visible)
    name = request.match_info["name"]
    snapshot.find_queue(state, vhost, name)
    return util.reply(request, [
        api.binding_json(b) for b in snapshot.bindings(state)
        if b[0] == vhost and b[2] == "queue" and b[3] == name])


def _ends(request, state, visible):
    vhost = util.path_vhost(request, state, visible)
    kind = "queue" if request.match_info["kind"] == "q" else "exchange"
    return (vhost, util.exchange_name(request.match_info["source"]), kind,
            request.match_info["dest"])


async def binding_list(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    vhost, source, kind, dest = _ends(request, state, visible)
    return util.reply(request, [api.binding_json(b) for b in snapshot.bindings(state)
                                if b[:4] == [vhost, source, kind, dest]])


async def post_binding(mgmt, request):
    user, _, state, visible = await mgmt.state(request)
    vhost, source, kind, dest = _ends(request, state, visible)
    body = await util.body(request)
    auth = AuthDB.from_state(state["auth"])
    auth.require(user, vhost, "write", kind, dest)
    auth.require(user, vhost, "read", "exchange", source)
    rk = body.get("routing_key", "")
    args = body.get("arguments") or {}
    await mgmt.ask(ops.Bind(vhost=vhost, source=source, kind=kind, dest=dest,
                            routing_key=rk, arguments=args, owner=""))
    location = (f"{request.path}/{api.properties_key(rk, args)}")
    return web.Response(status=201, headers={"Location": location})


def _find_binding(request, state, visible):
    vhost, source, kind, dest = _ends(request, state, visible)
    # the path arrives unquoted once: RabbitMQ's UI and rabbitmqadmin quote the properties
    # key ("ui.%23" sent as "ui.%2523"), which then is the key itself; a client that sent
    # the key as it is ("ui.%23") is unquoted to the routing key's characters ("ui.#")
    given = request.match_info["props"]
    ends = [b for b in snapshot.bindings(state) if b[:4] == [vhost, source, kind, dest]]
    for wanted in (given, quote(given, safe="~")):  # RabbitMQ's form first
        for b in ends:
            if api.properties_key(b[4], b[5]) == wanted:
                return b
    raise api.not_found()


async def binding(mgmt, request):
    _, _, state, visible = await mgmt.state(request)
    return web.json_response(api.binding_json(_find_binding(request, state, visible)))


async def delete_binding(mgmt, request):
    user, _, state, visible = await mgmt.state(request)
    b = _find_binding(request, state, visible)
    vhost, source, kind, dest, rk, args = b
    auth = AuthDB.from_state(state["auth"])
    auth.require(user, vhost, "write", kind, dest)
    auth.require(user, vhost, "read", "exchange", source)
    await mgmt.ask(ops.Unbind(vhost=vhost, source=source, kind=kind,
                              dest=dest, routing_key=rk, arguments=args,
                              owner=""))
    return web.Response(status=204)


_BETWEEN = "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{dest}"  # source -> destination
ROUTES = (
    Route("GET", "/api/bindings", bindings),
    Route("GET", "/api/bindings/{vhost}", bindings),
    Route("GET", "/api/exchanges/{vhost}/{name}/bindings/{side:source|destination}",
          exchange_bindings),
    Route("GET", "/api/queues/{vhost}/{name}/bindings", queue_bindings),
    Route("GET", _BETWEEN, binding_list),
    Route("POST", _BETWEEN, post_binding),
    Route("GET", _BETWEEN + "/{props}", binding),
    Route("DELETE", _BETWEEN + "/{props}", delete_binding),
)
