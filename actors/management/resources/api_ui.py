"""The web UI: its page at / and its files under /static (actors/management/www/).

Mirrors what rabbit_mgmt_dispatcher serves beside the API (``rabbit_mgmt_wm_static``: the
one-page UI and its scripts); the page asks the API with the credentials it keeps in
sessionStorage.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from actors.management.routes import Route, Static

WWW = Path(__file__).resolve().parents[1] / "www"  # the web UI's files


async def index(mgmt, request):
    return web.FileResponse(WWW / "index.html")


ROUTES = (
    Route("GET", "/", index),
    Static("/static", WWW),
)
