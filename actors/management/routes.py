"""The dispatch table's records and how they are installed on an aiohttp application.

Mirrors ``rabbit_mgmt_dispatcher``: each path is routed to the resource module that answers
it, by a table, never by building a method name from a string. A resource module (under
resources/) lists its paths in ``ROUTES``, a tuple of ``Route`` (and ``Static``) records whose
handlers are its own functions ``async def handler(mgmt, request)``; server.py lists the
modules it serves in ``API_RESOURCES`` / ``PROMETHEUS_RESOURCES`` and installs them here with
the server (``Management``: the node to ask, the login, the configuration) bound to each
handler.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from aiohttp import web

Handler = Callable[..., Awaitable[web.StreamResponse]]  # (mgmt, request) -> response


@dataclass(frozen=True, slots=True)
class Route:
    """One method on one path (aiohttp's syntax: ``{vhost}``, ``{kind:[qe]}``)."""

    method: str  # GET also answers HEAD, as aiohttp's add_get
    path: str
    handler: Handler


@dataclass(frozen=True, slots=True)
class Static:
    """A folder of files served under a path prefix (no symlinks followed)."""

    prefix: str
    folder: Path


def install(app: web.Application, resources, mgmt) -> None:
    """Every route of every resource module, in the order given, bound to `mgmt`."""
    router = app.router
    for module in resources:
        for route in module.ROUTES:
            if isinstance(route, Static):
                router.add_static(route.prefix, route.folder, follow_symlinks=False)
            elif route.method == "GET":
                router.add_get(route.path, bind(route.handler, mgmt))
            else:
                router.add_route(route.method, route.path, bind(route.handler, mgmt))


def bind(handler: Handler, mgmt) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler (request -> response) that calls `handler(mgmt, request)`."""
    @functools.wraps(handler)
    async def handle(request):
        return await handler(mgmt, request)
    return handle
