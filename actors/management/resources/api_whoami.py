"""Who is logged in, and which UI extensions there are.

Mirrors ``rabbit_mgmt_wm_whoami`` (the user and its tags: what the UI asks right after login)
and ``rabbit_mgmt_wm_extensions`` (none: no management plugins beside the API itself).
"""

from __future__ import annotations

from aiohttp import web

from actors.management.routes import Route


async def whoami(mgmt, request):
    user, tags = await mgmt.login(request)
    return web.json_response({"name": user, "tags": tags})


async def extensions(mgmt, request):
    await mgmt.login(request)
    return web.json_response([])  # no management plugins beside the API itself


ROUTES = (
    Route("GET", "/api/whoami", whoami),
    Route("GET", "/api/extensions", extensions),
)
