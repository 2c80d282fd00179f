"""Management API: a queue census on demand (Leveret's own; leveretctl census does the same).

    POST /api/leveret/census/{vhost}          every running queue of the vhost -> {"queues"}
    POST /api/leveret/census/{vhost}/{name}   one queue -> {"queue", "messages"}

Each queue's backing queue writes a `queue_census` event to the node's event log (which
messages the queue holds now, actors/queue/census.py), for the lifecycle job to check what it
thinks is still queued against (docs/events.md). Administrators only: it reads every message
position of a queue, and a request is a write to the log.
"""

from __future__ import annotations

from aiohttp import web

from actors.management import api


def register(router, server) -> None:
    """Adds the routes to `router`; `server` (ManagementServer) logs in and asks the node."""

    async def census(request):
        _, _, state, visible = await server._state(request, api.is_admin)
        vhost = server._vhost(request, state, visible)
        name = request.match_info.get("name")
        if name is None:
            asked = await server.ask("queue.census", {"vhost": vhost})
            return web.json_response({"queues": [n for _, n in asked]})
        n = await server.ask("queue.census", {"vhost": vhost, "name": name})
        return web.json_response({"queue": name, "messages": n})

    router.add_post("/api/leveret/census/{vhost}", census)
    router.add_post("/api/leveret/census/{vhost}/{name}", census)
