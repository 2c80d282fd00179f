"""The lifecycle job (spark_analysis/) held against the clients' truth, message by message: an
auditor that is wrong on a bad day is worse than none.

Pure: no Spark, no files, no clocks. The harness (jepsen.py, and the single-node kill -9 tests)
hands over what the clients saw (`Truth`, from the checker's history) and what the job wrote
(`view_from_rows` turns its lifecycle and anomaly rows into a `JobView` per message), and
`compare` gives one `Row` per message and the counts.

What the client saw decides what the job must say:
- delivered (a consumer read it, and acked it: the workload acks every delivery, and the drain
  takes whatever came back): the job must say `acked`; `unknown` only with a log gap named;
  never `lost`. One exception, counted (`acks_unseen`) and listed, not failed: a message never
  confirmed, read once, whose ack the broker never took (the consumer's ack crossed the close
  of a pausing node, which discards what follows its connection.close) and whose copy then
  went with its deposed master: the job's `vanished` is what the broker did, and the broker
  had promised nothing for it.
- lost (confirmed, never delivered): the job must say `lost` (its anomaly), or `unknown` with a
  gap; anything else is a missed loss.
- unconfirmed and never delivered (nacked, or no answer before the publisher gave up): the job
  must not say `acked`; any other verdict, or no lifecycle at all (the publish may never have
  reached the broker), agrees.
- duplicated (read twice or more): the job must count two deliveries or more, unless a log gap
  counts for the message (a delivery event may be in it). The job may count more deliveries
  than a client read (one in flight to a consumer whose connection died): that is counted
  (`job_only_duplicates`), not a disagreement.
- after a complete drain (the queue empty on every node at the end) no message is still in it:
  a `queued` or `unacked` verdict on a message no client got is counted (`stale`) and listed,
  not failed: no client's promise rests on it, but the job's final state is wrong.
- a delivered or confirmed message with no lifecycle at all agrees only when a log gap spans the
  moment its publish was attempted (its events died in a killed process's buffer).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

CONFIRMED, NACKED, UNKNOWN = "confirmed", "nacked", "unknown"  # as checker.py

# what the client saw of a message (Row.client)
DELIVERED, LOST, UNCONFIRMED = "delivered", "lost", "unconfirmed"
# how the job's verdict stands against it (Row.agreement)
EXACT, GAP, DISAGREE = "exact", "gap", "disagree"
ABSENT = "absent"  # JobView.verdict of a message the job has no lifecycle for


@dataclass(frozen=True)
class Truth:
    """What the clients saw of one message."""
    ident: int
    outcome: str                    # CONFIRMED | NACKED | UNKNOWN (the publisher's answer)
    deliveries: int                 # times a consumer read it
    attempted_ns: int | None = None  # wall clock when the publish was attempted


@dataclass(frozen=True)
class JobView:
    """What the job says of one message."""
    final_state: str                # the lifecycle's final_state
    log_gap: str | None = None      # the gap its verdict depends on (None: complete logs)
    deliveries: int = 0             # deliveries over all its copies
    acks: int = 0
    anomalies: tuple = ()           # kinds of its anomaly rows, sorted

    @property
    def verdict(self) -> str:
        """`lost` when the job calls it lost, else its final state."""
        return "lost" if "lost" in self.anomalies else self.final_state


@dataclass(frozen=True)
class Gap:
    """A log gap of the job's gaps table, on the job's time line (wall clock, ns)."""
    process: str
    t_from_ns: int
    t_to_ns: int
    reason: str = ""


@dataclass(frozen=True)
class Row:
    ident: int
    client: str                     # DELIVERED | LOST | UNCONFIRMED
    client_deliveries: int
    job: str                        # the job's verdict, ABSENT when it has no lifecycle
    job_deliveries: int
    agreement: str                  # EXACT | GAP | DISAGREE
    why: str = ""                   # what disagrees, or the gap that explains it


@dataclass
class Audit:
    rows: list = field(default_factory=list)                 # [Row], by ident
    pairs: Counter = field(default_factory=Counter)          # (client, job) -> messages
    job_only_duplicates: list = field(default_factory=list)  # idents
    stale: list = field(default_factory=list)                # idents: still in the queue
    #                                                          for the job after the drain
    acks_unseen: list = field(default_factory=list)          # idents: read, ack not taken,
    #                                                          unconfirmed, then vanished

    @property
    def messages(self) -> int:
        return len(self.rows)

    def of(self, agreement: str) -> list:
        return [r for r in self.rows if r.agreement == agreement]

    @property
    def false_lost(self) -> list:
        """The client got it; the job says lost."""
        return [r for r in self.rows if r.client == DELIVERED and r.job == "lost"]

    @property
    def missed_losses(self) -> list:
        """The client lost it; the job says neither lost nor unknown over a gap."""
        return [r for r in self.rows if r.client == LOST and r.agreement == DISAGREE]

    @property
    def duplicates_unseen(self) -> list:
        return [r for r in self.rows if r.client_deliveries > 1 and r.job_deliveries < 2]

    def counts(self) -> dict:
        n = self.messages
        exact, gap = len(self.of(EXACT)), len(self.of(GAP))
        return {"messages": n, "exact": exact, "gap": gap, "disagree": n - exact - gap,
                "agree_pct": round(100.0 * (exact + gap) / n, 3) if n else 100.0,
                "false_lost": len(self.false_lost), "missed_losses": len(self.missed_losses),
                "client_duplicates": sum(1 for r in self.rows if r.client_deliveries > 1),
                "duplicates_unseen": len(self.duplicates_unseen),
                "job_only_duplicates": len(self.job_only_duplicates),
                "stale": len(self.stale), "acks_unseen": len(self.acks_unseen)}

    def summary(self, limit: int = 10) -> str:
        c = self.counts()
        lines = ["job against clients: " + ", ".join(f"{k} {v}" for k, v in c.items()),
                 "  client -> job: " + ", ".join(
                     f"{a}->{b} {n}" for (a, b), n in sorted(self.pairs.items()))]
        lines += [f"  DISAGREE {r.ident}: client {r.client} x{r.client_deliveries}, job "
                  f"{r.job} x{r.job_deliveries}: {r.why}" for r in self.of(DISAGREE)[:limit]]
        if self.acks_unseen:
            lines.append(f"  acks unseen (read, ack not taken, never confirmed, vanished): "
                         f"{self.acks_unseen[:limit]}")
        if self.stale:
            lines.append(f"  stale (the job's queued/unacked after the drain): "
                         f"{self.stale[:limit]}")
        return "\n".join(lines)


def view_from_rows(lifecycle: dict, anomalies: list) -> JobView:
    """A lifecycle row of the job (as `to_pylist` gives it) and that message's anomaly rows."""
    return JobView(final_state=lifecycle["final_state"], log_gap=lifecycle.get("log_gap"),
                   deliveries=lifecycle.get("deliveries") or 0,
                   acks=lifecycle.get("acks") or 0,
                   anomalies=tuple(sorted(a["kind"] for a in anomalies)))


def views_by_message_id(lifecycles: list, anomalies: list, ident_of) -> dict:
    """{ident: JobView} from the job's rows; `ident_of(message_id) -> int | None` names the
    messages of the run (None: another run's, or a dead-lettered copy's parent link)."""
    by_msg: dict = {}
    for a in anomalies:
        by_msg.setdefault(a["msg_id"], []).append(a)
    views = {}
    for lc in lifecycles:
        if lc.get("parent_msg_id") is not None:
            continue  # a dead-lettered copy: a message of its own, not the publisher's
        ident = ident_of(lc.get("message_id"))
        if ident is None:
            continue
        if ident in views:
            raise ValueError(f"two lifecycles carry message_id {lc.get('message_id')!r}")
        views[ident] = view_from_rows(lc, by_msg.get(lc["msg_id"], []))
    return views


def _covering(gaps: list, t_ns: int | None, slack_ns: int) -> Gap | None:
    if t_ns is None:
        return None
    for g in gaps:
        if g.t_from_ns - slack_ns <= t_ns <= g.t_to_ns + slack_ns:
            return g
    return None


def judge(t: Truth, v: JobView | None, gaps: list = (), slack_ns: int = 500_000_000) -> Row:
    """One message: the client's truth against the job's view (None: no lifecycle)."""
    client = DELIVERED if t.deliveries else LOST if t.outcome == CONFIRMED else UNCONFIRMED
    if v is None:
        g = _covering(gaps, t.attempted_ns, slack_ns)
        if client == UNCONFIRMED:
            agreement, why = EXACT, ""
        elif g is not None:
            agreement, why = GAP, f"no lifecycle; log gap in {g.process}: {g.reason}"
        else:
            agreement, why = DISAGREE, "no lifecycle and no log gap at its publish"
        return Row(t.ident, client, t.deliveries, ABSENT, 0, agreement, why)
    job = v.verdict
    if job == "unknown" and v.log_gap and client != UNCONFIRMED:
        agreement, why = GAP, v.log_gap
    elif client == DELIVERED:
        agreement = EXACT if job == "acked" or _ack_unseen(t, v) else DISAGREE
        why = "" if agreement == EXACT else f"delivered and acked by the client, job says {job}"
    elif client == LOST:
        agreement = EXACT if job == "lost" else DISAGREE
        why = "" if agreement == EXACT else f"confirmed and never delivered, job says {job}"
    else:
        agreement = DISAGREE if job == "acked" else EXACT
        why = "never delivered to a client, job says acked" if agreement == DISAGREE else ""
    if agreement != DISAGREE and t.deliveries > 1 and v.deliveries < 2:
        if v.log_gap:
            agreement, why = GAP, f"read {t.deliveries} times, {v.deliveries} logged: {v.log_gap}"
        else:
            agreement = DISAGREE
            why = f"the client read it {t.deliveries} times, the job counts {v.deliveries}"
    return Row(t.ident, client, t.deliveries, job, v.deliveries, agreement, why)


def _ack_unseen(t: Truth, v: JobView) -> bool:
    """An unconfirmed message a consumer read, whose ack never reached the broker (the job
    logged its delivery and no ack) before its copy vanished (module docstring)."""
    return (t.outcome != CONFIRMED and v.final_state == "vanished" and not v.anomalies and
            v.acks == 0 and v.deliveries == t.deliveries)


def compare(truths: list, views: dict, gaps: list = (), slack_ns: int = 500_000_000,
            drained: bool = False) -> Audit:
    """truths: [Truth] of every publish attempted; views: {ident: JobView}; gaps: [Gap];
    drained: the run ended with the queue empty on every node."""
    audit = Audit()
    for t in sorted(truths, key=lambda t: t.ident):
        v = views.get(t.ident)
        row = judge(t, v, gaps, slack_ns)
        audit.rows.append(row)
        audit.pairs[(row.client, row.job)] += 1
        if v is not None and v.deliveries > 1 and t.deliveries == 1:
            audit.job_only_duplicates.append(t.ident)
        if v is not None and row.client == DELIVERED and _ack_unseen(t, v):
            audit.acks_unseen.append(t.ident)
        if drained and row.job in ("queued", "unacked") and row.client != DELIVERED:
            audit.stale.append(t.ident)
    return audit


def truths_from_history(published: dict, deliveries: list, attempted_ns: dict) -> list:
    """checker.py's history: {ident: outcome}, [Delivery], {ident: wall ns of the attempt}."""
    read = Counter(d.ident for d in deliveries)
    return [Truth(i, o, read.get(i, 0), attempted_ns.get(i)) for i, o in published.items()]
