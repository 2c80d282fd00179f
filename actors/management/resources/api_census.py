"""Queue census on demand: Leveret's own (RabbitMQ has no such resource); leveretctl census
does the same.

    POST /api/leveret/census/{vhost}          every running queue of the vhost -> {"queues"}
    POST /api/leveret/census/{vhost}/{name}   one queue -> {"queue", "messages"}

Each queue's backing queue writes a `queue_census` event to the node's event log (which
messages the queue holds now, actors/queue/census.py), for the lifecycle job to check what it
thinks is still queued against (docs/events.md, "Census"). Administrators only: it names every
message position of a queue, and a request is a write to the log.
"""

from __future__ import annotations

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, util
from actors.management.routes import Route


async def census(mgmt, request):
    _, _, state, visible = await mgmt.state(request, api.is_admin)
    vhost = util.path_vhost(request, state, visible)
    name = request.match_info.get("name")
    if name is None:
        asked = await mgmt.ask(ops.QueueCensus(vhost=vhost))
        return web.json_response({"queues": [n for _, n in asked]})
    n = await mgmt.ask(ops.QueueCensus(vhost=vhost, name=name))
    return web.json_response({"queue": name, "messages": n})


ROUTES = (
    Route("POST", "/api/leveret/census/{vhost}", census),
    Route("POST", "/api/leveret/census/{vhost}/{name}", census),
)
