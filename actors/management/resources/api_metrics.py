"""The Prometheus endpoint, on prometheus_port: no authentication, as RabbitMQ's.

Mirrors ``rabbit_prometheus_handler``: /metrics (aggregated), /metrics/per-object and
/metrics/detailed (``?family=...&vhost=...``), rendered by actors/management/prometheus.py
from the queues' samples (no queue is asked per scrape), the node's status and counters, and
the file descriptors of the node process and its workers.
"""

from __future__ import annotations

import asyncio
import os
import resource

from aiohttp import web

from actors import metadata_ops as ops
from actors.management import api, prometheus, snapshot
from actors.management.routes import Route
from actors.node import node_stats


async def metrics(mgmt, request):
    state, status, counters = await asyncio.gather(
        mgmt.ask(ops.MgmtState()), mgmt.ask(ops.Status()), mgmt.ask(ops.MgmtCounters()))
    rows = state["queue_rows"]  # the queues' samples: no queue is asked per scrape
    only = vhosts = None
    path = request.path
    if path == "/metrics/detailed":
        names = set()
        for family in request.query.getall("family", []):
            if family not in prometheus.FAMILIES:
                raise api.bad_request(f"unknown family {family!r}; known: "
                                      f"{', '.join(sorted(prometheus.FAMILIES))}")
            names.update(prometheus.FAMILIES[family])
        only = names
        vhosts = set(request.query.getall("vhost", [])) or None
    body = prometheus.render(prometheus.metrics(
        state["node"], snapshot.cluster_name(state), rows, snapshot.stats(state), status,
        per_object=path != "/metrics", only=only, vhosts=vhosts, counters=counters,
        processes=_processes(mgmt, counters)))
    return web.Response(body=body, headers={"Content-Type": prometheus.CONTENT_TYPE})


def _processes(mgmt, counters) -> dict:
    """rabbitmq_process_*: file descriptors open in the node process and its workers (the
    kernel's count, /proc), the limit (RLIMIT_NOFILE, the same for all: inherited), and
    TCP sockets: client connections and the listeners."""
    pids = [os.getpid()]
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    open_fds = node_stats.fds_open(pids)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    listeners = 1 + bool(mgmt.config.tls_port) + bool(mgmt.port) + bool(mgmt.prometheus_port)
    return {"open_fds": open_fds, "max_fds": limit, "max_tcp_sockets": limit,
            "open_tcp_sockets": counters.get("now", {}).get("connections", 0) + listeners}


ROUTES = (
    Route("GET", "/metrics", metrics),
    Route("GET", "/metrics/per-object", metrics),
    Route("GET", "/metrics/detailed", metrics),
)
