"""The Jepsen-style test of a 3-node cluster (issue 15 item 5), short: one fault per nemesis, on a
mirrored durable queue with a backlog (jepsen.py has the run, checker.py the counts; `make
jepsen` is the long run, 80 s of faults per nemesis, each on a cluster of its own).

Asserted (C5 for mirrored queues, C8): no confirmed message lost, no message delivered by two
masters at once, the cluster settled (every node confirms a publish and answers a consume)
within 30 s of the heal, the queue drained through every node. Duplicates, recovered and
nacked-yet-delivered messages are counted and printed (`-s` shows them).

To stay short the nemeses share one cluster (booting three nodes is most of a run otherwise):
each has a queue of its own (`jepsen.q.<nemesis>`, homed on node 1, mirrored on the others),
starts from the settled, drained cluster the previous one left, and a run that fails, or
leaves a node down, gets the next one a new cluster. Each fault lasts as long as what it checks
takes to happen (actors/core/pause.py's clocks): a kill -9 6 s (a member that is not the leader
is marked down, its masters' mirrors promoted, after 5 s; a killed leader's node is marked down
when it restarts, as a new incarnation), a partition 8 s (the cut-off side pauses after 1-4 s;
the majority marks it down 5 s after the cut when its leader has led a while), the bridge 12 s
(the old master's node pauses without a leader's contact after 4 s; a leader elected through
the bridge marks it down 9 s after its election, at about 10 s).

Partitions need nftables and root (netfilter.py); without them those nemeses skip, saying why.

The nodes write their event logs (`--events full`), and the last test stops the cluster, runs
the lifecycle job once over every node's logs and holds its verdict on each message of each run
against what that run's clients saw (audit.py): no disagreement at all. One more run: a
quorum queue's home behind a partition (on the shared cluster).
"""

from __future__ import annotations

import os

import pytest

from tests.faults.cluster import audit_job, netfilter
from tests.faults.cluster.jepsen import NEMESES, PARTITIONS, Cluster, Plan, run_on

pytestmark = pytest.mark.timeout(240)

SEED = int(os.environ.get("JEPSEN_SEED", "1"))
FAULT_S = {"kill9-home": 6.0, "kill9-random": 6.0, "isolate-home": 8.0,
           "majority-minority": 4.0, "bridge": 12.0}


# (nemesis, queue type, nodes): the five on a mirrored queue, a quorum queue's home behind a
# partition, and a single node killed -9 under the same clients
# (the single-node kill -9 is `make jepsen --nodes 1`, and test_event_lifecycle.py's kill -9
# tests hold the job to the clients on one node: the suite's time goes to the cluster here)
RUNS = [(nemesis, "mirrored", 3) for nemesis in NEMESES] + [("isolate-home", "quorum", 3)]


class Clusters:
    """The cluster the nemeses share, started again after a run that failed; every cluster
    started and every run's result, for the audit."""

    def __init__(self, tmp_factory):
        self.tmp_factory = tmp_factory
        self.current: Cluster | None = None
        self.single: Cluster | None = None  # the one-node "cluster" of the single-node run
        self.started: list = []  # [Cluster], each closed before the audit reads its logs
        self.results: list = []  # [(queue, Result)]

    def get(self, n: int = 3) -> Cluster:
        if n == 1:
            self.single = Cluster(self.tmp_factory.mktemp("single"), n=1)
            self.started.append(self.single)
            return self.single
        if self.current is not None and self.current.failed:
            self.current.close()
            self.current = None
        if self.current is None:
            self.current = Cluster(self.tmp_factory.mktemp("jepsen"))
            self.started.append(self.current)
        return self.current

    def close(self) -> None:
        for c in self.started:  # (closing one twice is harmless)
            c.close()
        self.current = None


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    c = Clusters(tmp_path_factory)
    yield c
    c.close()


@pytest.mark.parametrize("nemesis,queue_type,n", RUNS)
def test_jepsen_short__C5_C8(nemesis, queue_type, n, clusters):
    if nemesis in PARTITIONS and (why := netfilter.available()):
        pytest.skip(f"partitions need nftables: {why}")
    plan = Plan(nemesis, cycles=1, fault_s=FAULT_S[nemesis], warmup_s=1.0, heal_s=0.0,
                seed=SEED, drain_timeout_s=30.0, fail_fast=True, queue_type=queue_type, nodes=n)
    cluster = clusters.get(n)
    # (the ha-all policy matches `jepsen.`: a quorum queue's name stays out of it)
    queue = f"quorum.q.{nemesis}" if queue_type == "quorum" else \
        f"single.q.{nemesis}" if n == 1 else f"jepsen.q.{nemesis}"
    try:
        r = run_on(cluster, plan, queue)
    except netfilter.Unavailable as e:
        pytest.skip(f"partitions need nftables: {e}")
    clusters.results.append((queue, r))
    if n == 1:
        clusters.single.close()  # (its logs wait for the audit)
    print(r.summary())
    assert r.backlog and r.backlog > 50, f"no backlog when the fault came\n{r.summary()}"
    assert r.report.confirmed and r.report.delivered, r.summary()
    assert not r.problems, f"{r.summary()}\n{r.notes}\n{r.logs}"


@pytest.mark.timeout(480)  # (Spark's JVM may start here; the job takes long on a loaded machine)
def test_jepsen_short_lifecycle_job_agrees_with_the_clients__C5_C8(clusters, spark, tmp_path):
    """The job's verdict on every message of every run above against the run's history:
    acked where the clients got it, lost (or unknown over a log gap) where they lost it, never
    lost where they got it, and every duplicate they read seen (audit.py)."""
    if not clusters.results:
        pytest.skip("no Jepsen run to audit (run the nemeses of this module first)")
    clusters.close()  # (a live process's log has no end: the job would take it for a gap)
    dirs = [d for c in clusters.started for d in audit_job.events_dirs(c.node_folders())]
    job = audit_job.analyse(dirs, tmp_path / "analysis", spark)
    failures = []
    for queue, r in clusters.results:
        a = audit_job.audit_run(job, r.history, queue, drained=r.drain.get("complete", False))
        print(f"{r.plan.nemesis} ({r.plan.queue_type}, {queue}): {a.summary()}")
        assert a.messages == r.report.attempted
        failures += [f"{queue}: {p}\n{a.summary()}" for p in audit_job.problems(a)]
    assert not failures, "\n".join(failures) + f"\n{job.summary}"
