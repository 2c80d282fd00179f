"""What every resource does with a request that needs no node: rabbit_mgmt_util's share.

Mirrors the request side of ``rabbit_mgmt_util``: the JSON body (``with_decode``; only an
application/json body is read, 415 for another type), a boolean field, the vhost a path names
(``vhost/1`` and ``is_authorized_vhost``: 404 when it does not exist, 401 when the user may not
see it), a list reply with the list parameters (``reply_list``), and the permission patterns a
body sets. Who asks (basic auth, the user's tags) needs the node and is the server's
(server.py ``Management.login`` / ``Management.state``).
"""

from __future__ import annotations

import json

from aiohttp import web

from actors.core.permissions import pattern_error
from actors.management import api
from actors.management.api import ApiError


def require_type(request, *accepted: str) -> None:
    """415, as cowboy_rest answers a body of a type the resource does not accept."""
    if request.content_type not in accepted:
        given = request.headers.get("Content-Type", "no Content-Type")
        raise ApiError(415, "unsupported_media_type",
                       f"the body must be {' or '.join(accepted)}, not {given}")


async def body(request) -> dict:
    """The JSON object of a request; only an application/json one is read, so a page of
    another site cannot make a browser send one (an HTML form cannot set that type)."""
    if not request.can_read_body:
        return {}
    require_type(request, "application/json")
    try:
        doc = await request.json()
    except json.JSONDecodeError as e:
        raise api.bad_request(f"could not parse JSON document: {e}") from None
    if not isinstance(doc, dict):
        raise api.bad_request("not_json_object")
    return doc


def flag(doc: dict, key: str, default: bool) -> bool:
    """A boolean field: JSON true/false, or "true"/"false" as rabbitmqadmin sends them."""
    value = doc.get(key, default)
    if value in (True, "true"):
        return True
    if value in (False, "false"):
        return False
    raise api.bad_request(f"{key} must be true or false, not {value!r}")


def exchange_name(name: str) -> str:
    """The default exchange is `amq.default` in the API's paths."""
    return "" if name == "amq.default" else name


def path_vhost(request, state, visible) -> str | None:
    """The vhost the path names (None when it names none): 404 when it does not exist, 401
    when the user may not see it."""
    vhost = request.match_info.get("vhost")
    if vhost is None:
        return None
    if vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
        raise api.not_found()
    if vhost not in visible:
        raise ApiError(401, "not_authorised", "Access refused.")
    return vhost


def reply(request, items):
    """A list, paged, sorted and cut to the columns the query asks for (api.list_query)."""
    return web.json_response(api.list_query(items, request.query))


def refuse_bad_patterns(*patterns) -> None:
    """400, as RabbitMQ's management answers a permission whose regex does not compile (the
    metadata actor's refusal would come back as 404)."""
    for p in patterns:
        error = pattern_error(p) if isinstance(p, str) else "a permission pattern is a string"
        if error:
            raise api.bad_request(error)
