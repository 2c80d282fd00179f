"""A statistics sample and the last two samples of something, between which the management
API's rates (`_details.rate`) are computed, as rabbit_mgmt_metrics_collector keeps a process's
previous stats beside its current ones."""

from __future__ import annotations

from typing import Any, NamedTuple


class Sample(NamedTuple):
    at_ms: int  # when it was taken (wall-clock ms of the process that took it)
    stats: Any  # what it measured: a dict of counts and gauges, or a worker's connection rows


class Sampled(NamedTuple):
    """The last two samples of one queue, node or worker."""
    last: Sample
    previous: Sample | None  # None before the second


def put(table: dict, key, at_ms: int, stats) -> bool:
    """Record a sample of `key` in `table` (key -> Sampled), unless it is no newer than the
    last one (late or repeated): False then."""
    had = table.get(key)
    if had is not None and at_ms <= had.last.at_ms:
        return False
    table[key] = Sampled(Sample(at_ms, stats), had.last if had is not None else None)
    return True
