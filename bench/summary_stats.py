"""Pure statistics helpers (no I/O, no clock)."""
from __future__ import annotations

import math
from typing import Iterable, Sequence


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) of already-sorted values, by linear interpolation between
    closest ranks (numpy's default "linear" method). NaN for an empty sequence."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within [0, 100], not {p}")
    if n == 1:
        return float(sorted_values[0])
    rank = (n - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    frac = rank - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize(values: Iterable[float], percentiles=(50, 95, 99, 99.9)) -> dict:
    """count, min, mean, max and the given percentiles (keys "p50", "p99", "p99.9") of values.
    Values are whatever unit the caller uses; an empty input gives count 0 and None elsewhere."""
    v = sorted(values)
    out: dict = {"count": len(v)}
    if not v:
        out.update({"min": None, "mean": None, "max": None})
        out.update({_pkey(p): None for p in percentiles})
        return out
    out["min"] = float(v[0])
    out["mean"] = math.fsum(v) / len(v)
    out["max"] = float(v[-1])
    for p in percentiles:
        out[_pkey(p)] = float(percentile(v, p))
    return out


def _pkey(p: float) -> str:
    return "p" + (str(int(p)) if float(p).is_integer() else str(p))


def rate(count_start: int, count_end: int, t_start: float, t_end: float) -> float:
    """Events per second between two (count, time) snapshots."""
    dt = t_end - t_start
    if dt <= 0:
        return math.nan
    return (count_end - count_start) / dt


def ratio(a, b):
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None:
        return None
    try:
        if b == 0 or math.isnan(a) or math.isnan(b):
            return None
    except TypeError:
        return None
    return a / b
