"""A Jepsen-style run against a 3-node Leveret cluster (issue 15 item 5), and `make jepsen`.

One run: three nodes on 127.0.0.11-13 (loopnodes.py), an nftables table of the run's own
(netfilter.py), a durable queue `jepsen.q` mirrored on every node (policy ha-mode all) and homed
on node 1; six publishers with confirms (two per node) and three consumers with manual acks (one
per node) that consume slower than the publishers publish, so the queue has a backlog when the
faults come (workload.py). Then `cycles` times: a fault for `fault_s`, healed, `heal_s` of calm
(none after the last). From the last heal: probes on every node until each confirms a publish
and answers a consume (the time to settle), the clients stop, a consumer on every node drains
the queue, and checker.py judges the history.

Nemeses (rabbitmq/jepsen's, on three nodes):
- kill9-home: kill -9 of the queue's master's node; healed by starting it again.
- kill9-random: kill -9 of a node picked at random; healed by starting it again.
- isolate-home: the master's node cut from the other two; healed by removing the cut.
- majority-minority: a node other than the master's cut from the other two (the master stays
  in the majority; isolate-home is the other case).
- bridge: the master's node and one other cannot talk, the Raft leader when it is another
  node (so the leader loses the master while the third node, the bridge, sees both).

The queue under test is mirrored (the default) or a quorum queue (`Plan.queue_type`). The
nodes write their event logs (`--events full`); once a run's cluster has stopped, the lifecycle
job (spark_analysis/) runs on them and its verdict on every message is held against what the
clients saw (audit.py, audit_job.py): a disagreement fails the run like a lost message.

`python -m tests.faults.cluster.jepsen` (`make jepsen`) runs each nemesis for 80 s of faults
(4 cycles of 10 s of fault and 10 s healed) and prints a table (with the job's agreement:
exact, over a log gap, disagreeing); `--help` for the knobs (`--queue-type quorum`,
`--no-audit`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pamqp import commands

if __package__ in (None, ""):  # python tests/faults/cluster/jepsen.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.faults.cluster import audit, checker, netfilter  # noqa: E402
from tests.faults.cluster.loopnodes import LoopNodes  # noqa: E402  (puts rawamqp on the path)
from tests.faults.cluster import audit_job  # noqa: E402
from tests.faults.cluster import workload  # noqa: E402
from tests.faults.cluster.workload import History, Node  # noqa: E402

NEMESES = ("kill9-home", "kill9-random", "isolate-home", "majority-minority", "bridge")
PARTITIONS = ("isolate-home", "majority-minority", "bridge")
QUEUE = "jepsen.q"
QUEUE_TYPES = ("mirrored", "quorum")  # the queue under test: ha-mode all, or x-queue-type


@dataclass
class Plan:
    nemesis: str
    cycles: int = 1            # faults, each followed by its heal
    fault_s: float = 5.0       # how long each fault lasts
    heal_s: float = 5.0        # calm between two faults
    warmup_s: float = 3.0      # workload before the first fault (the backlog grows)
    publishers: int = 6
    consumers: int = 3
    pub_rate: float = 25.0     # messages a second, each publisher
    con_rate: float = 20.0     # deliveries a second, each consumer
    settle_limit_s: float = 30.0  # the assertion
    settle_wait_s: float = 30.0   # how long to probe for (more than the limit: to measure)
    drain_timeout_s: float = 90.0
    seed: int = 1
    fail_fast: bool = False    # once the run has failed (two masters delivered before the
                               # heal, or it did not settle), probe and drain 5 s at most
                               # (the short run in `make test`)
    queue_type: str = "mirrored"  # QUEUE_TYPES: mirrored by the ha-all policy, or a quorum
                                  # queue of three members (the policy does not apply to it)
    nodes: int = 3             # 1: a single node, no cluster (a durable queue; kill -9 only)


@dataclass
class Result:
    plan: Plan
    report: checker.Report
    settle_s: float | None
    settle_failures: dict      # node -> why its last probe failed, when it did not settle
    drain: dict
    problems: list
    faults: list = field(default_factory=list)   # (t, what)
    backlog: int | None = None                   # messages in the queue at the first fault
    dropped: int = 0                              # packets our nftables rule dropped
    elapsed_s: float = 0.0
    cut_short: str = ""                          # why settling and the drain were cut short
    notes: str = ""
    logs: str = ""
    history: History | None = None              # what the clients saw (the audit reads it)
    audit: audit.Audit | None = None             # the lifecycle job against that history

    def summary(self) -> str:
        c = self.report.counts()
        settle = "never" if self.settle_s is None else "%.1f s" % self.settle_s
        lines = [f"nemesis {self.plan.nemesis} on a {self.plan.queue_type} queue (seed "
                 f"{self.plan.seed}, {self.plan.cycles} x "
                 f"{self.plan.fault_s:g} s): settled {settle} after the heal, backlog "
                 f"{self.backlog} at the first fault, {self.dropped} packets dropped",
                 "  " + ", ".join(f"{k} {v}" for k, v in c.items()),
                 "  masters seen delivering: " + (", ".join(self.report.masters) or "none"),
                 "  drain: " + json.dumps(self.drain)]
        lines += ["  faults: " + "; ".join("%.1f %s" % f for f in self.faults)]
        if self.settle_failures:
            lines.append("  not settled: " + json.dumps(self.settle_failures))
        if self.report.duplicated:
            lines.append(f"  duplicated e.g. {self.report.duplicated[:5]}")
        if self.report.nacked_delivered:
            lines.append(f"  nacked yet delivered e.g. {self.report.nacked_delivered[:5]}")
        if self.cut_short:
            lines.append(f"  cut short: {self.cut_short}")
        if self.audit is not None:
            lines.append("  " + self.audit.summary().replace("\n", "\n  "))
        lines += [f"  FAIL: {p}" for p in self.problems] or ["  ok"]
        return "\n".join(lines)


class Nemesis:
    """start() makes the fault, stop() heals it; both note what they did."""

    def __init__(self, kind: str, nodes: LoopNodes, part, rng: random.Random, h: History,
                 queue: str = QUEUE):
        self.kind, self.nodes, self.part, self.rng, self.h = kind, nodes, part, rng, h
        self.queue = queue
        self.killed: int | None = None

    def start(self) -> str:
        names = self.nodes.names
        # (the master and the leader as most nodes name them, asked of every node at once)
        master, leader = self.nodes.master_and_leader(self.queue)
        home = self.nodes.index(master) if master in names else 0
        others = [i for i in range(self.nodes.n) if i != home]
        if self.kind in ("kill9-home", "kill9-random"):
            i = home if self.kind == "kill9-home" else self.rng.randrange(self.nodes.n)
            self.nodes.kill9(i)
            self.killed = i
            return f"kill -9 {names[i]} (master {names[home]})"
        if self.kind == "isolate-home":
            self.part.partition([names[home]], [names[j] for j in others])
            return f"isolate {names[home]} (the master)"
        if self.kind == "majority-minority":
            m = self.rng.choice(others)
            self.part.partition([names[m]], [names[j] for j in range(self.nodes.n) if j != m])
            return f"isolate {names[m]} (master {names[home]} in the majority)"
        if self.kind == "bridge":
            far = names.index(leader) if leader in names and leader != names[home] \
                else self.rng.choice(others)
            bridge = next(j for j in others if j != far)
            self.part.cut(names[home], names[far])
            return (f"cut {names[home]} (master) from {names[far]}, {names[bridge]} bridges "
                    f"(leader {leader})")
        raise ValueError(self.kind)

    def stop(self) -> str:
        if self.killed is not None:
            i, self.killed = self.killed, None
            self.nodes.spawn(i)
            return f"start {self.nodes.names[i]} again"
        self.part.heal()
        return "heal the partition"


def _declare(node: Node, queue: str = QUEUE, queue_type: str = "mirrored") -> None:
    args = {"x-queue-type": "quorum"} if queue_type == "quorum" else {}
    c = workload._connect(node, timeout=10)
    try:
        c.rpc(1, commands.Queue.Declare(queue=queue, durable=True, arguments=args),
              commands.Queue.DeclareOk, timeout=10)
    finally:
        c.close()


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out ({timeout:.0f} s) waiting for {what}")


def _settle(nodes: LoopNodes, refs: list, h: History, heal_t: float, wait_s: float,
            queue: str = QUEUE):
    """Probe every node (in parallel) until one round passes on all; (seconds since heal_t or
    None, {node: why} of the last round that failed)."""
    seq = itertools.count(1)
    failures: dict = {}
    while True:
        why = {}
        threads = [threading.Thread(
            target=lambda i=i: why.__setitem__(refs[i].name, workload.probe(
                h, refs[i], queue, seq, lambda: nodes.master_seen_by(i, queue))), daemon=True)
            for i in range(nodes.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        failed = {k: v for k, v in why.items() if v}
        if not failed and len(why) == nodes.n:
            return time.monotonic() - heal_t, {}
        failures = failed
        if time.monotonic() - heal_t > wait_s:
            return None, failures
        time.sleep(0.1)


class Cluster:
    """Three nodes (loopnodes.py) and, when nftables can be used, the run's own table
    (netfilter.py, made before the nodes start: every link gets marked). `close()` ends both.
    One cluster may serve several runs one after the other (the short run in `make test`): each
    run uses a queue of its own and leaves the cluster settled, or it is marked failed."""

    def __init__(self, tmp: Path, need_partitions: bool = False, events: bool = True,
                 n: int = 3):
        # every node writes its event log (the lifecycle job's input: audit_job.py)
        # (a single node is named apart: one analysis may read its logs beside a cluster's)
        self.nodes = LoopNodes(tmp, n=n, extra=("--events", "full") if events else (),
                               prefix="node" if n > 1 else "single")
        self.part = None
        self.failed = False  # a run on it failed: start another cluster for the next run
        try:
            self.part = netfilter.Partitioner(self.nodes.net())
        except netfilter.Unavailable:
            if need_partitions:
                raise
        try:
            self.nodes.start()
            # (right after a boot an election may still be going on: the operation waits for
            # a leader, leveretctl may give up first; ask again)
            if n > 1:
                _wait(lambda: self.nodes.ctl(0, "set_policy", "ha-all", "^jepsen\\.",
                                             '{"ha-mode": "all"}', timeout=15) is not None,
                      60, "the ha-all policy set")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.part is not None:
            self.part.close()
        self.nodes.stop_all(grace=5.0)

    def node_folders(self) -> list:
        return [self.nodes.tmp / f"node{i + 1}" for i in range(self.nodes.n)]


def run(plan: Plan, tmp: Path, log=print, spark=None) -> Result:
    """One run of `plan` on a cluster of its own, its nodes and files in `tmp`; with `spark`,
    the lifecycle job then runs on the stopped nodes' logs and is audited (audit_job.py)."""
    cluster = Cluster(tmp, need_partitions=plan.nemesis in PARTITIONS, events=spark is not None,
                      n=plan.nodes)
    # (the ha-all policy matches `jepsen.`: a quorum queue's name stays out of it)
    queue = QUEUE if plan.queue_type == "mirrored" else "quorum.q"
    try:
        result = run_on(cluster, plan, queue, log)
    finally:
        cluster.close()
    if spark is not None:
        job = audit_job.analyse(audit_job.events_dirs(cluster.node_folders()), tmp / "analysis",
                                spark)
        result.audit = audit_job.audit_run(job, result.history, queue,
                                           drained=result.drain.get("complete", False))
        result.problems += audit_job.problems(result.audit)
        log(f"  {plan.nemesis}: lifecycle job: {job.summary}; {result.audit.counts()}")
    return result


def run_on(cluster: Cluster, plan: Plan, queue: str = QUEUE, log=print) -> Result:
    """One run of `plan` on `cluster`, with `queue` (declared here, homed on node 1)."""
    t_start = time.monotonic()
    rng = random.Random(f"{plan.seed}:{plan.nemesis}")
    nodes, part = cluster.nodes, cluster.part
    if part is None and plan.nemesis in PARTITIONS:
        raise netfilter.Unavailable(netfilter.available() or "no nftables table")
    dropped0 = part.dropped() if part else 0  # (the table's counter counts every run)
    h = History()  # (its clock starts again with the workload)
    clients: list = []
    nemesis = None
    try:
        n = nodes.n
        refs = [Node(nodes.names[i], nodes.hosts[i], nodes.amqp_ports[i]) for i in range(n)]
        _declare(refs[0], queue, plan.queue_type)  # its home: node 1
        if n > 1:
            _wait(lambda: (r := nodes.queue_row(1, queue)) and
                  r["synced"].count("leveret@") == n - 1, 60, f"the mirrors of {queue} synchronised")
        h.t0 = time.monotonic()
        pubs = [workload.Publisher(h, refs[i % n], queue, i, rate=plan.pub_rate)
                for i in range(plan.publishers)]
        cons = [workload.Consumer(h, refs[i % n], queue, i,
                                  lambda i=i: nodes.master_seen_by(i % n, queue),
                                  rate=plan.con_rate) for i in range(plan.consumers)]
        clients = pubs + cons
        for c in clients:
            c.start()
        time.sleep(plan.warmup_s)
        nemesis = Nemesis(plan.nemesis, nodes, part, rng, h, queue)
        faults = []
        backlog = None
        heal_t = time.monotonic()
        for cycle in range(plan.cycles):
            if backlog is None:
                backlog = workload.queue_counts(refs[0], queue)
            what = nemesis.start()
            faults.append((h.now(), what))
            h.note("nemesis: " + what)
            log(f"  {plan.nemesis} {h.now():6.1f} s: {what}")
            time.sleep(plan.fault_s)
            heal_t = time.monotonic()
            what = nemesis.stop()
            faults.append((h.now(), what))
            h.note("nemesis: " + what)
            log(f"  {plan.nemesis} {h.now():6.1f} s: {what}")
            if cycle < plan.cycles - 1:
                time.sleep(plan.heal_s)
        settle_wait, drain_timeout, cut_short = plan.settle_wait_s, plan.drain_timeout_s, ""
        if plan.fail_fast:
            with h.lock:
                early = checker.check(dict(h.published), list(h.sessions), list(h.deliveries))
            if early.two_masters:
                cut_short = (f"{len(early.two_masters)} messages delivered by two masters "
                             f"before the heal")
                settle_wait, drain_timeout = 5.0, 5.0
                log(f"  {plan.nemesis} {h.now():6.1f} s: failed already ({cut_short}): "
                    f"settling and the drain cut short")
        settle_s, settle_failures = _settle(nodes, refs, h, heal_t, settle_wait, queue)
        h.note("settled" if settle_s is not None else "did not settle")
        log(f"  {plan.nemesis} {h.now():6.1f} s: "
            + ("settled in %.1f s" % settle_s if settle_s is not None else
               f"not settled: {settle_failures}"))
        if plan.fail_fast and settle_s is None:
            drain_timeout = 5.0
            cut_short = cut_short or "it did not settle"
        for c in clients:
            c.stop_event.set()
        for c in clients:
            c.join(15)
        errors = [f"{c.name}: {c.error!r}" for c in clients if c.error is not None]
        drained = workload.drain(h, refs, queue, lambda i: nodes.master_seen_by(i, queue),
                                 timeout=drain_timeout)
        log(f"  {plan.nemesis} {h.now():6.1f} s: drained {drained}")
        report = checker.check(dict(h.published), list(h.sessions), list(h.deliveries))
        problems = errors + checker.verdict(report, settle_s, plan.settle_limit_s)
        if cut_short and settle_s is None and settle_wait < plan.settle_limit_s:
            problems = [p if "did not settle" not in p else
                        f"settling not measured (cut short: {cut_short})" for p in problems]
        if not drained["complete"]:
            problems.append(f"the drain did not empty the queue: {drained['counts']}")
        if problems:
            cluster.failed = True
        return Result(plan, report, settle_s, settle_failures, drained, problems, faults,
                      backlog, part.dropped() - dropped0 if part else 0, time.monotonic() - t_start,
                      cut_short, h.notes_text(), "" if not problems else nodes.logs(30),
                      history=h)
    except BaseException as e:
        cluster.failed = True
        if isinstance(e, Exception):  # (the nodes' view of what went wrong, with the error)
            log(f"  {plan.nemesis}: {type(e).__name__}: {e}\n{nodes.logs(40)}")
        raise
    finally:
        for c in clients:
            c.stop_event.set()
        if part is not None:
            part.heal()  # (the cut of a run that raised: the next run starts healed)
        if nemesis is not None and nemesis.killed is not None:
            cluster.failed = True  # a node still down: the next run needs a new cluster


COLUMNS = (("nemesis", 18), ("queue", 8), ("attempted", 9), ("confirmed", 9), ("nacked", 6), ("unknown", 7),
           ("lost", 4), ("duplicated", 10), ("two_masters", 11), ("unexpected", 10),
           ("recovered", 9), ("nacked_delivered", 16), ("unflagged", 9), ("settle", 7),
           ("job_exact", 9), ("job_gap", 7), ("job_disagree", 12), ("verdict", 7))


def table(results: list) -> str:
    head = " | ".join(name.ljust(w) for name, w in COLUMNS)
    rows = [head, "-|-".join("-" * w for _, w in COLUMNS)]
    for r in results:
        job = r.audit.counts() if r.audit is not None else {}
        c = dict(r.report.counts(), nemesis=r.plan.nemesis, queue=r.plan.queue_type,
                 job_exact=job.get("exact", "-"), job_gap=job.get("gap", "-"),
                 job_disagree=job.get("disagree", "-"),
                 settle="never" if r.settle_s is None else "%.1f s" % r.settle_s,
                 verdict="FAIL" if r.problems else "ok")
        rows.append(" | ".join(str(c[name]).ljust(w) for name, w in COLUMNS))
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults.cluster.jepsen",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--nemesis", action="append", choices=NEMESES,
                   help="run this nemesis (repeat; default: all)")
    p.add_argument("--cycles", type=int, default=4)
    p.add_argument("--fault-s", type=float, default=10.0)
    p.add_argument("--heal-s", type=float, default=10.0)
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--settle-wait-s", type=float, default=60.0,
                   help="probe this long after the last heal (the assertion is 30 s)")
    p.add_argument("--queue-type", action="append", choices=QUEUE_TYPES,
                   help="the queue under test (repeat for both; default: mirrored)")
    p.add_argument("--nodes", type=int, choices=(1, 3), default=3,
                   help="1: a single node, no cluster (the kill -9 nemeses only)")
    p.add_argument("--no-audit", action="store_true",
                   help="events off, no lifecycle job (default: the job's verdicts are held "
                   "against the clients', message by message)")
    p.add_argument("--keep", action="store_true", help="keep the nodes' folders")
    p.add_argument("--out", help="also write the table and summaries to this file")
    a = p.parse_args(argv)
    seed = a.seed if a.seed is not None else random.randrange(10**6)
    why = netfilter.available()
    if why:
        print(f"partition nemeses cannot run: {why}", file=sys.stderr)
    results = []
    spark = None if a.no_audit else audit_job.spark_session()
    try:
        for queue_type, name in itertools.product(a.queue_type or ["mirrored"],
                                                  a.nemesis or NEMESES):
            if name in PARTITIONS and (why or a.nodes == 1):
                continue
            plan = Plan(name, cycles=a.cycles, fault_s=a.fault_s, heal_s=a.heal_s,
                        warmup_s=a.warmup_s, seed=seed, settle_wait_s=a.settle_wait_s,
                        queue_type=queue_type, nodes=a.nodes)
            tmp = Path(tempfile.mkdtemp(prefix=f"leveret-jepsen-{name}-"))
            print(f"{name} ({queue_type}): nodes in {tmp}", flush=True)
            try:
                r = run(plan, tmp, log=lambda s: print(s, flush=True), spark=spark)
            finally:
                if not a.keep:
                    shutil.rmtree(tmp, ignore_errors=True)
            results.append(r)
            print(r.summary(), flush=True)
            if r.problems:
                print(r.notes, "\n", r.logs, flush=True)
    finally:
        if spark is not None:
            spark.stop()
    out = table(results) + "\n\n" + "\n".join(r.summary() for r in results)
    print("\n" + out)
    if a.out:
        Path(a.out).write_text(out + "\n")
    return 1 if any(r.problems for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
