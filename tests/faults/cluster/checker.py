"""The verdict of a Jepsen-style run: what the publishers were promised against what the
consumers got, counted as rabbitmq/jepsen's `total-queue` checker counts (lost, duplicated,
unexpected, recovered), plus what a mirrored queue adds: duplicates delivered by two masters
that served at the same time, and nacked publishes that were delivered all the same.

Pure: no sockets, no clocks; the workload (workload.py) writes the history, `check` reads it.

- lost: confirmed (basic.ack) and never delivered, in the run or the drain.
- duplicated: delivered more than once (any cause: an ack lost with its node, a requeue, a
  promoted mirror redelivering, two masters).
- two masters: delivered by two different masters whose consumer sessions overlapped in time
  (each delivered while the other was still delivering), i.e. two masters at once. A master that
  died and a mirror promoted after it deliver one after the other: that is a duplicate, not this.
- unexpected: delivered, never published.
- recovered: published, not confirmed (nacked, or no answer before the client gave up), and
  delivered all the same (jepsen's `recovered`); `nacked_delivered` the nacked ones among them.
- unflagged: a delivery of an id delivered before, with redelivered=false (A4), counted only.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

CONFIRMED, NACKED, UNKNOWN = "confirmed", "nacked", "unknown"


@dataclass(frozen=True)
class Session:
    """One basic.consume that was answered with consume-ok, until its cancel or its end."""
    sid: int
    via: str            # the node the consumer's connection is on
    master: str | None  # the queue's master as that node saw it at consume-ok (None: unknown)


@dataclass(frozen=True)
class Delivery:
    ident: int          # the message's unique id (from its body)
    sid: int            # the session (Session.sid) it came through
    t: float            # when the client read it (one monotonic clock for the whole run)
    redelivered: bool


@dataclass
class Report:
    attempted: int = 0
    confirmed: int = 0
    nacked: int = 0
    unknown: int = 0
    delivered: int = 0                                   # distinct ids delivered
    deliveries: int = 0                                  # deliveries, duplicates included
    lost: list = field(default_factory=list)             # sorted ids
    duplicated: list = field(default_factory=list)
    two_masters: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    recovered: list = field(default_factory=list)
    nacked_delivered: list = field(default_factory=list)
    unflagged: list = field(default_factory=list)
    masters: list = field(default_factory=list)          # master names seen delivering

    def counts(self) -> dict:
        return {"attempted": self.attempted, "confirmed": self.confirmed,
                "nacked": self.nacked, "unknown": self.unknown, "delivered": self.delivered,
                "lost": len(self.lost), "duplicated": len(self.duplicated),
                "two_masters": len(self.two_masters), "unexpected": len(self.unexpected),
                "recovered": len(self.recovered), "nacked_delivered": len(self.nacked_delivered),
                "unflagged": len(self.unflagged)}


def _overlap(a: tuple, b: tuple) -> bool:
    """Closed intervals (first, last) that share a moment."""
    return a[0] <= b[1] and b[0] <= a[1]


def check(published: dict, sessions: list, deliveries: list) -> Report:
    """published: {id: CONFIRMED | NACKED | UNKNOWN} for every publish attempted;
    sessions: [Session]; deliveries: [Delivery], in any order."""
    by_sid = {s.sid: s for s in sessions}
    r = Report(attempted=len(published))
    outcome = Counter(published.values())
    r.confirmed, r.nacked, r.unknown = outcome[CONFIRMED], outcome[NACKED], outcome[UNKNOWN]
    ordered = sorted(deliveries, key=lambda d: (d.t, d.sid))
    r.deliveries = len(ordered)
    times = Counter(d.ident for d in ordered)
    r.delivered = len(times)
    delivered = set(times)
    r.lost = sorted(i for i, o in published.items() if o == CONFIRMED and i not in delivered)
    r.unexpected = sorted(i for i in delivered if i not in published)
    r.duplicated = sorted(i for i, n in times.items() if n > 1)
    r.recovered = sorted(i for i in delivered if published.get(i) in (NACKED, UNKNOWN))
    r.nacked_delivered = sorted(i for i in delivered if published.get(i) == NACKED)
    seen: set = set()
    unflagged = set()
    for d in ordered:
        if d.ident in seen and not d.redelivered:
            unflagged.add(d.ident)
        seen.add(d.ident)
    r.unflagged = sorted(unflagged)
    # each session's span of deliveries; a master's sessions
    span: dict = {}
    for d in ordered:
        first, _ = span.get(d.sid, (d.t, d.t))
        span[d.sid] = (first, d.t)
    master_of = {sid: by_sid[sid].master if sid in by_sid else None for sid in span}
    r.masters = sorted({m for m in master_of.values() if m is not None})
    sids_of = defaultdict(set)
    for d in ordered:
        sids_of[d.ident].add(d.sid)
    two = []
    for ident in r.duplicated:
        sids = [s for s in sids_of[ident] if master_of.get(s) is not None]
        if any(master_of[a] != master_of[b] and _overlap(span[a], span[b])
               for i, a in enumerate(sids) for b in sids[i + 1:]):
            two.append(ident)
    r.two_masters = two
    return r


def verdict(r: Report, settle_s: float | None, settle_limit_s: float = 30.0) -> list:
    """What fails the run (empty: it passed): confirmed messages lost, deliveries by two masters
    at once, unexpected messages, no settling within settle_limit_s of the heal."""
    problems = []
    if r.lost:
        problems.append(f"{len(r.lost)} confirmed messages lost, e.g. {r.lost[:10]}")
    if r.two_masters:
        problems.append(f"{len(r.two_masters)} messages delivered by two masters at once, "
                        f"e.g. {r.two_masters[:10]}")
    if r.unexpected:
        problems.append(f"{len(r.unexpected)} unexpected messages, e.g. {r.unexpected[:10]}")
    if settle_s is None or settle_s > settle_limit_s:
        problems.append("the cluster did not settle within %.0f s of the heal" % settle_limit_s
                        + ("" if settle_s is None else " (took %.1f s)" % settle_s))
    return problems
