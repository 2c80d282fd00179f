"""Which index ids a durable queue's messages live under: one per priority lane, as
rabbit_priority_queue gives each priority a sub-queue. The queue's BackingQueue writes them; the
node keeps them when it drops the indexes of queues that no longer exist."""

from __future__ import annotations

from actors.store.storage import queue_id


def lane_name(name: str, priority: int) -> str:
    """The name whose index holds a priority queue's messages of one priority (0: the queue's
    own), as rabbit_priority_queue:mutate_name/2 names its sub-queues."""
    return name if not priority else f"{name}\x00{chr(priority)}"


def priorities(arguments) -> int:
    """How many priorities (lanes) a queue with these x-arguments has (1 without
    x-max-priority; at most 256, as the queue core clamps it)."""
    maxp = (arguments or {}).get("x-max-priority")
    if isinstance(maxp, bool) or not isinstance(maxp, int) or maxp <= 0:
        return 1
    return min(maxp, 255) + 1


def lane_queue_ids(vhost: str, name: str, arguments) -> list:
    """Every index id a durable queue with these arguments may use (the node keeps them)."""
    return [queue_id(vhost, lane_name(name, p)) for p in range(priorities(arguments))]
