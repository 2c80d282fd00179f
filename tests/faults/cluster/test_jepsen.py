"""The Jepsen-style test of a 3-node cluster (issue 15 item 5), short: one fault of 5 s per
nemesis, on a mirrored durable queue with a backlog (jepsen.py has the run, checker.py the
counts; `make jepsen` is the long run, 80 s of faults per nemesis).

Asserted (C5 for mirrored queues, C8): no confirmed message lost, no message delivered by two
masters at once, the cluster settled (every node confirms a publish and answers a consume)
within 30 s of the heal, the queue drained through every node. Duplicates, recovered and
nacked-yet-delivered messages are counted and printed (`-s` shows them).

Partitions need nftables and root (netfilter.py); without them those nemeses skip, saying why.
"""

from __future__ import annotations

import os

import pytest

from tests.faults.cluster import netfilter
from tests.faults.cluster.jepsen import NEMESES, PARTITIONS, Plan, run

pytestmark = pytest.mark.timeout(240)

SEED = int(os.environ.get("JEPSEN_SEED", "1"))

# the bridge (the master's node cut from one node, a third sees both) can still leave two
# masters delivering at once for a moment: nobody lost the majority, so nobody pauses, while the
# other side promotes a mirror (issue 15 item 2, open; docs/cluster.md "Partitions")
BRIDGE = pytest.mark.xfail(reason="issue 15 item 2: a bridge partition can promote a mirror "
                                  "while the old master, still in the majority, delivers")


@pytest.mark.parametrize("nemesis", [pytest.param(n, marks=[BRIDGE] if n == "bridge" else [])
                                     for n in NEMESES])
def test_jepsen_short__C5_C8(nemesis, tmp_path):
    if nemesis in PARTITIONS and (why := netfilter.available()):
        pytest.skip(f"partitions need nftables: {why}")
    plan = Plan(nemesis, cycles=1, fault_s=5.0, warmup_s=3.0, heal_s=0.0, seed=SEED,
                drain_timeout_s=30.0, fail_fast=True)
    try:
        r = run(plan, tmp_path)
    except netfilter.Unavailable as e:
        pytest.skip(f"partitions need nftables: {e}")
    print(r.summary())
    assert r.backlog and r.backlog > 50, f"no backlog when the fault came\n{r.summary()}"
    assert r.report.confirmed and r.report.delivered, r.summary()
    assert not r.problems, f"{r.summary()}\n{r.notes}\n{r.logs}"
