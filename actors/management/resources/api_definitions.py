"""Definitions: export and import, whole or per vhost (the administrator's).

Mirrors ``rabbit_mgmt_wm_definitions``: GET is the export of actors/node/definitions_json.py
(the same as `leveretctl export_definitions`; ``?download=NAME`` makes it an attachment);
POST imports a document, a JSON body or the UI's multipart form with a ``file`` part, all of
it or, when any object is refused, nothing (``rabbit_definitions:apply_defs/3`` per vhost).
"""

from __future__ import annotations

import json

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, util
from actors.management.routes import Route


async def definitions(mgmt, request):
    """GET: the definitions JSON (actors/node/definitions_json.py's export, the same as
    `leveretctl export_definitions`); `?download=NAME` makes it an attachment."""
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
        raise api.bad_request("vhost_not_found")
    doc = await mgmt.ask(ops.DefinitionsExport())
    if vhost is not None:
        doc = api.vhost_definitions(doc, vhost)
    headers = {"Cache-Control": "no-cache"}
    download = request.query.get("download")
    if download:
        if not all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in download):
            raise api.bad_request("download must be a file name (an HTTP token)")
        headers["Content-Disposition"] = f"attachment; filename={download}"
    return web.json_response(doc, headers=headers)


async def post_definitions(mgmt, request):
    """POST: import a definitions document (JSON body, or the UI's multipart form with
    a `file` part), as `leveretctl import_definitions`: all of it or, when any object is
    refused, nothing. Per vhost: its parameters, policies, queues, exchanges and bindings
    go into that vhost (rabbit_definitions:apply_defs/3)."""
    _, _, state, _ = await mgmt.state(request, api.is_admin)
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in {v["name"] for v in state["auth"]["vhosts"]}:
        raise api.not_found("vhost_not_found")
    doc = await _document(request)
    if vhost is not None:
        doc = api.into_vhost(doc, vhost)
    await mgmt.ask(ops.DefinitionsImport(doc=doc), timeout_ms=60000)
    return web.Response(status=204)


async def _document(request) -> dict:
    """JSON, or the file of a multipart form (RabbitMQ's UI; cross-origin ones are
    refused by the server's same-origin check), as rabbit_mgmt_wm_definitions accepts
    them."""
    if request.can_read_body:
        util.require_type(request, "application/json", "multipart/form-data")
    if request.content_type == "multipart/form-data":
        form = await request.post()
        part = form.get("file")
        if part is None:
            raise api.bad_request("failed_to_parse_json")
        raw = part.file.read() if hasattr(part, "file") else str(part).encode()
    else:
        raw = await request.read()
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise api.bad_request("failed_to_parse_json") from None
    if not isinstance(doc, dict):
        raise api.bad_request("failed_to_parse_json")
    return doc


ROUTES = (
    Route("GET", "/api/definitions", definitions),
    Route("POST", "/api/definitions", post_definitions),
    Route("GET", "/api/definitions/{vhost}", definitions),
    Route("POST", "/api/definitions/{vhost}", post_definitions),
)
