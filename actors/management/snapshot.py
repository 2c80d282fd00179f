"""The node's `mgmt_state` answer, indexed as the resources read it (pure: no IO).

Mirrors the query side of ``rabbit_mgmt_db``: every list, the overview, the vhosts and a single
queue answer from the statistics the queues and workers emit every
collect_statistics_interval, as RabbitMQ's management database does; nothing is asked of a
queue per request (`leveretctl list_queues` asks them, as rabbitmqctl does). The answer itself
is the metadata actor's (actors/node/metadata_management.py).
"""

from __future__ import annotations

from actors.management import api


def queue_rows(state) -> dict:
    """(vhost, name) -> the queue's row: its node, mirrors, state and the depth, consumers,
    head message timestamp and disk counts of its last sample (the metadata actor's
    `_sampled_queue_rows`)."""
    return {(r["vhost"], r["name"]): r for r in state["queue_rows"]}


def stats(state) -> dict:
    """(vhost, queue) -> message_stats, from the node's statistics table."""
    return {(v, n): s for v, n, s in state.get("queue_stats", ())}


def depth(state) -> dict:
    """(vhost, queue) -> the rates of change of its depth (queue_stats.depth_rates)."""
    return {(v, n): d for v, n, d in state.get("queue_depth_rates", ())}


def disk(state) -> dict:
    """(vhost, queue) -> disk_reads / disk_writes with their rates (queue_stats.disk_stats)."""
    return {(v, n): d for v, n, d in state.get("queue_disk", ())}


def counts(state) -> dict:
    """The cluster's counts: path tuple -> (count, rate) (metadata `_cluster_counts`)."""
    return {tuple(path): (n, rate) for path, n, rate in state.get("counts", ())}


def use(state) -> dict:
    """(vhost, queue) -> consumer_capacity, consumer_utilisation and idle_since (ms) from its
    last sample (queue_stats.StatsTable.consumer_use, idle_since)."""
    return {(v, n): u for v, n, u in state.get("queue_use", ())}


def consumers_by_queue(state) -> dict:
    """(vhost, queue) -> its consumers, as /api/consumers lists them."""
    out: dict = {}
    for c in state.get("connections", ()):
        for ch in c["channel_list"]:
            for cons in ch["consumers"]:
                out.setdefault((cons["queue"]["vhost"], cons["queue"]["name"]), []).append(cons)
    return out


def bindings(state) -> list:
    """Every binding as [vhost, source, kind, destination, routing key, arguments], the
    default exchange's implicit ones first."""
    return api.default_bindings(state["queues"]) + [list(b) for b in state["bindings"]]


def find_queue(state, vhost, name) -> dict:
    """The queue's definition, or 404."""
    for q in state["queues"]:
        if q["vhost"] == vhost and q["name"] == name:
            return q
    raise api.not_found()


def cluster_name(state) -> str:
    """The first member's name (Leveret's cluster_name), this node's without a cluster."""
    return state["members"][0]["name"] if state["members"] else state["node"]


def nodes(state) -> list:
    """Every member with the figures of its own last sample (its memory, disk, alarms...:
    each node measures itself and sends its sample to every node up)."""
    rows = state.get("node_rows") or {}
    return [api.node_json(mbr, rows.get(mbr["name"])) for mbr in state["members"]]
