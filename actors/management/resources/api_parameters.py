"""Runtime and global parameters.

Mirrors ``rabbit_mgmt_wm_parameters`` / ``rabbit_mgmt_wm_parameter`` (the components
Leveret has: ``operator_policy`` and ``vhost-limits``, set through the operations their own
endpoints use, and ``shovel``, set as leveretctl set_parameter sets it; ``policy`` is listed by /api/policies and refused here, as
rabbit_runtime_parameters refuses it; a component no plugin registered is refused as
RabbitMQ refuses it) and ``rabbit_mgmt_wm_global_parameters`` / ``_global_parameter``
(``cluster_name`` only, read-only: it is the first node's node_name).
"""

from __future__ import annotations

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, snapshot, util
from actors.management.api import ApiError
from actors.management.routes import Route


async def parameters(mgmt, request):
    _, _, state, visible = await mgmt.state(request, api.is_policymaker)
    component = request.match_info.get("component")
    vhost = util.path_vhost(request, state, visible)
    rows = [p for p in api.parameters(state) if p["vhost"] in visible and
            (vhost is None or p["vhost"] == vhost)]
    if component is None:  # rabbit_runtime_parameters:list/0 leaves policies out
        rows = [p for p in rows if p["component"] != "policy"]
    else:
        rows = [p for p in rows if p["component"] == component]
    return util.reply(request, rows)


async def parameter(mgmt, request):
    _, _, state, visible = await mgmt.state(request, api.is_policymaker)
    vhost = util.path_vhost(request, state, visible)
    key = (vhost, request.match_info["component"], request.match_info["name"])
    for p in api.parameters(state):
        if (p["vhost"], p["component"], p["name"]) == key:
            return web.json_response(p)
    raise api.not_found()


async def put_parameter(mgmt, request):
    """operator_policy and vhost-limits are set through the operations their own
    endpoints use; policies are refused as rabbit_runtime_parameters:set/5 refuses
    them, and a component Leveret does not have (federation-upstream, shovel...) as
    RabbitMQ refuses one no plugin registered."""
    _, tags, state, visible = await mgmt.state(request, api.is_policymaker)
    vhost = util.path_vhost(request, state, visible)
    component, name = request.match_info["component"], request.match_info["name"]
    body = await util.body(request)
    if component == "policy":
        raise api.bad_request("policies may not be set using this method")
    if component not in api.COMPONENTS:
        raise api.unknown_component(component)
    if "value" not in body:
        raise api.bad_request("key_missing: value")
    value = body["value"]
    if not isinstance(value, dict):
        raise api.bad_request(f"Validation failed\n\n{value!r} is not a JSON object\n")
    if component == "shovel":  # (rabbit_mgmt_wm_parameter: the policymaker's)
        existed = any((p["vhost"], p["component"], p["name"]) == (vhost, component, name)
                      for p in api.parameters(state))
        await mgmt.ask(ops.Parameter(method="set", vhost=vhost, component=component,
                                     name=name, value=value))
        return web.Response(status=204 if existed else 201)
    if not api.is_admin(tags):  # (operator policies and limits are the administrator's)
        raise ApiError(401, "not_authorised", "Not administrator user")
    if component == "operator_policy":
        missing = [k for k in ("pattern", "definition") if k not in value]
        if missing:
            raise api.bad_request(f"Validation failed\n\nKey \"{missing[0]}\" not "
                                  "found in operator_policy\n")
        existed = any(p["vhost"] == vhost and p["name"] == name
                      for p in state["operator_policies"])
        await mgmt.ask(ops.Policy(method="set", vhost=vhost, name=name,
                                  pattern=value["pattern"],
                                  definition=value["definition"],
                                  priority=int(value.get("priority", 0)),
                                  apply_to=value.get("apply-to", "all"),
                                  operator=True))
        return web.Response(status=204 if existed else 201)
    if name != "limits":
        raise api.bad_request("Validation failed\n\nvhost-limits has one parameter, "
                              f"named limits, not {name!r}\n")
    existed = any(s == "vhost" and n == vhost for s, n, _ in state["limits"])
    await mgmt.ask(ops.Limits(method="set", scope="vhost", name=vhost,
                              value=value))
    return web.Response(status=204 if existed else 201)


async def delete_parameter(mgmt, request):
    _, tags, state, visible = await mgmt.state(request, api.is_policymaker)
    vhost = util.path_vhost(request, state, visible)
    component, name = request.match_info["component"], request.match_info["name"]
    if component == "policy":
        raise api.bad_request("policies may not be cleared using this method")
    if not any((p["vhost"], p["component"], p["name"]) == (vhost, component, name)
               for p in api.parameters(state)):
        raise api.not_found()
    if component == "shovel":
        await mgmt.ask(ops.Parameter(method="clear", vhost=vhost, component=component,
                                     name=name))
        return web.Response(status=204)
    if not api.is_admin(tags):
        raise ApiError(401, "not_authorised", "Not administrator user")
    if component == "operator_policy":
        await mgmt.ask(ops.Policy(method="clear", vhost=vhost, name=name,
                                  operator=True))
    else:
        await mgmt.ask(ops.Limits(method="clear", scope="vhost", name=vhost))
    return web.Response(status=204)


async def global_parameters(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_policymaker)
    return util.reply(request, api.global_parameters(snapshot.cluster_name(state)))


async def global_parameter(mgmt, request):
    _, _, state, _ = await mgmt.state(request, api.is_policymaker)
    for p in api.global_parameters(snapshot.cluster_name(state)):
        if p["name"] == request.match_info["name"]:
            return web.json_response(p)
    raise api.not_found()


async def put_global_parameter(mgmt, request):
    """Refused: Leveret's cluster name is its first node's name (node_name), not a
    parameter, and it has no other global parameter."""
    await mgmt.state(request, api.is_admin)
    raise api.bad_request("global parameters cannot be set on Leveret: cluster_name is "
                          "the first node's node_name setting")


ROUTES = (
    Route("GET", "/api/parameters", parameters),
    Route("GET", "/api/parameters/{component}", parameters),
    Route("GET", "/api/parameters/{component}/{vhost}", parameters),
    Route("GET", "/api/parameters/{component}/{vhost}/{name}", parameter),
    Route("PUT", "/api/parameters/{component}/{vhost}/{name}", put_parameter),
    Route("DELETE", "/api/parameters/{component}/{vhost}/{name}", delete_parameter),
    Route("GET", "/api/global-parameters", global_parameters),
    Route("GET", "/api/global-parameters/{name}", global_parameter),
    Route("PUT", "/api/global-parameters/{name}", put_global_parameter),
    Route("DELETE", "/api/global-parameters/{name}", put_global_parameter),
)
