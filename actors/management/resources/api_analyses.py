"""The lifecycle traces of `make analyze`: Leveret's own, no RabbitMQ counterpart.

Lists the PySpark job's analyses under the data directory, the messages of one and the
lifecycle of one message (read by actors/management/traces.py, off the event loop), and serves
an analysis's report.html and plots; monitoring users only, with the API's basic auth.
"""

from __future__ import annotations

from aiohttp import web

from actors.management import api, traces, util
from actors.management.routes import Route


async def analyses(mgmt, request):
    await mgmt.state(request, api.is_monitor)
    return util.reply(request, await mgmt.offload(traces.analyses, mgmt.config.data_dir))


async def analysis_messages(mgmt, request):
    await mgmt.state(request, api.is_monitor)
    path = traces.folder(mgmt.config.data_dir, request.match_info["analysis"])
    return util.reply(request, await mgmt.offload(traces.messages, path))


async def analysis_message(mgmt, request):
    await mgmt.state(request, api.is_monitor)
    path = traces.folder(mgmt.config.data_dir, request.match_info["analysis"])
    return web.json_response(await mgmt.offload(traces.lifecycle, path,
                                                request.match_info["ref"]))


async def analysis_file(mgmt, request):
    """The job's report.html and its plots (monitoring users; basic auth as the API)."""
    await mgmt.state(request, api.is_monitor)
    base = traces.folder(mgmt.config.data_dir, request.match_info["analysis"]).resolve()
    target = (base / request.match_info["path"]).resolve()
    if base not in target.parents or not target.is_file():
        raise api.not_found()
    return web.FileResponse(target)


ROUTES = (
    Route("GET", "/api/leveret/analyses", analyses),
    Route("GET", "/api/leveret/analyses/{analysis}/messages", analysis_messages),
    Route("GET", "/api/leveret/analyses/{analysis}/messages/{ref}", analysis_message),
    Route("GET", "/analyses/{analysis}/{path:.*}", analysis_file),
)
