"""Where did a message go: Leveret's own, no RabbitMQ counterpart (RabbitMQ's firehose tracer
logs messages as they pass; this reads what the lifecycle job made of the event logs).

    GET /api/traces/{analysis}?msg_id=|message_id=|correlation_id=|traceparent=|routing_key=
        |queue=V [&from=T&to=T] [&limit=N]   the messages found by one key (first had between
                                             the times, when given), earliest first
    GET /api/traces/{analysis}?from=T&to=T   the messages published between two times
    GET /api/traces/{analysis}/{msg_id}      one message's path: its steps in order, with the
                                             links to its dead-letter copies and its parent

Times are ISO 8601 (UTC unless they say) or Unix seconds. Monitoring users only, as the other
analysis routes (actors/management/traces.py reads the Parquet, off the event loop).
"""

from __future__ import annotations

from aiohttp import web

from actors.management import api, traces
from actors.management.routes import Route

FIND_BY = ("msg_id",) + tuple(traces.lookup.KEYS)
MAX_LIMIT = 10000


async def search(mgmt, request):
    await mgmt.state(request, api.is_monitor)
    path = traces.folder(mgmt.config.data_dir, request.match_info["analysis"])
    q = request.query
    given = [k for k in FIND_BY if k in q]
    if len(given) > 1:
        raise api.bad_request(f"find by one key at a time, not {', '.join(given)}")
    t_from, t_to = traces.parse_time(q.get("from")), traces.parse_time(q.get("to"))
    try:
        limit = min(MAX_LIMIT, max(1, int(q.get("limit", "100"))))
    except ValueError:
        raise api.bad_request("limit is a number") from None
    if given:
        found = await mgmt.offload(traces.find, path, given[0], q[given[0]], t_from, t_to,
                                   limit)
    elif t_from is not None or t_to is not None:
        found = await mgmt.offload(traces.published_between, path, t_from, t_to, limit)
    else:
        raise api.bad_request(f"find by one of {', '.join(FIND_BY)}, or from= and to=")
    return web.json_response(found)


async def message(mgmt, request):
    await mgmt.state(request, api.is_monitor)
    path = traces.folder(mgmt.config.data_dir, request.match_info["analysis"])
    return web.json_response(await mgmt.offload(traces.message_path, path,
                                                request.match_info["msg_id"]))


ROUTES = (
    Route("GET", "/api/traces/{analysis}", search),
    Route("GET", "/api/traces/{analysis}/{msg_id}", message),
)
