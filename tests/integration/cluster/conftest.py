"""Fixtures of the cluster tests: `nodes`, a 3-node cluster started for one test; `shared` and
`mended`, the one cluster of a module (KeptCluster), for the tests that leave it whole and for
those that kill, stop or cut off its nodes, made whole again after each (nodes.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.integration.cluster.nodes import Nodes

WHOLE_WAIT_S = 60  # a new cluster's log lists every member up this soon on a busy machine


@pytest.fixture
def nodes(tmp_path):
    n = Nodes(tmp_path)
    yield n
    n.stop()


def forget_queues_and_policies(nodes: Nodes) -> None:
    """Delete every queue and policy of vhost "/": a later test's mirrors and elections must
    not carry an earlier test's backlog, nor its policies decide where its queues' mirrors
    go."""
    for policy in json.loads(nodes[0].ctl("list_policies").stdout):
        nodes[0].ctl("clear_policy", policy["name"])
    names = [line.split("\t")[0] for line in
             nodes[0].ctl("list_queues", "name").stdout.splitlines()[2:] if line.strip()]
    if names:
        with nodes[0].connection() as c:
            ch = c.channel()
            for name in names:
                ch.queue_delete(name)


class KeptCluster:
    """One cluster for a module's tests (a cluster's start costs about 7 CPU-seconds, more than
    most of them). A test that kills, stops or cuts off nodes takes it whole and gives it back;
    giving back continues what the test stopped, restarts what it killed (on the nodes' data:
    a restart costs less than a cluster's start), waits for the cluster to be whole again and
    deletes every queue and policy; a cluster that cannot be mended is stopped and the next
    test gets a new one. A test that leaves every node up just uses it (`shared`)."""

    def __init__(self, start: Callable[[Path], Nodes], tmp_path_factory):
        self._start = start
        self._tmp = tmp_path_factory
        self.nodes: Nodes | None = None
        self._used = False  # tests that name their own queues and policies used it since
        self._mended = False  # found whole by the last give_back, nothing run on it since

    def started(self) -> Nodes:
        if self.nodes is None:
            self.nodes = self._start(self._tmp.mktemp("cluster"))
            self._used = False
        return self.nodes

    def use(self) -> Nodes:
        """For a test that leaves every node up and names its own queues and policies."""
        self._used = True
        self._mended = False
        return self.started()

    def take(self) -> Nodes:
        self.started()
        if self._used:  # their policies could place the mirrors of this test's queues
            forget_queues_and_policies(self.nodes)
            self._used = False
            self._mended = False
        # whole: just made so by the last give_back (then every node answering is enough; a
        # cluster_status of each costs three leveretctl runs), or waited for now (a cluster
        # just started answers AMQP on every node before its log lists every member up: on a
        # busy machine a single look found it not whole yet)
        if not (all(b.alive() for b in self.nodes.brokers) if self._mended
                else self._whole_within(WHOLE_WAIT_S)):
            logs = self.nodes.logs()
            self.stop()  # the next test starts a new one
            raise AssertionError(f"the cluster is not whole at the start of the test:\n{logs}")
        self._mended = False
        return self.nodes

    def _whole_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.nodes.whole():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def give_back(self) -> None:
        try:
            self.nodes.mend()
            forget_queues_and_policies(self.nodes)
        except BaseException:
            self.stop()
            raise
        self._mended = True

    def stop(self) -> None:
        self._mended = False
        if self.nodes is not None:
            self.nodes.stop()
            self.nodes = None


def start_nodes(tmp_path: Path) -> Nodes:
    return Nodes(tmp_path)


@pytest.fixture(scope="module")
def cluster_starter() -> Callable[[Path], Nodes]:
    """How the module's kept cluster starts (a module may override it: other nodes, options)."""
    return start_nodes


@pytest.fixture(scope="module")
def kept_cluster(cluster_starter, tmp_path_factory):
    kept = KeptCluster(cluster_starter, tmp_path_factory)
    yield kept
    kept.stop()


@pytest.fixture
def shared(kept_cluster):
    """The module's 3-node cluster, for tests that kill, stop and partition no node and name
    their own queues, users and policies; every node must still answer after the test, as the
    next one expects (else the cluster is stopped: the next test gets a new one)."""
    n = kept_cluster.use()
    yield n
    down = [i + 1 for i, b in enumerate(n.brokers) if not b.alive()]
    if down:
        logs = n.logs()
        kept_cluster.stop()
        raise AssertionError(f"nodes {down} of the shared cluster went down:\n{logs}")


@pytest.fixture
def mended(kept_cluster):
    """The module's 3-node cluster, whole at the start of the test (asserted), for a test that
    may kill, stop or cut off its nodes and names its own queues; after it, made whole again
    with no queue or policy left (KeptCluster)."""
    yield kept_cluster.take()
    kept_cluster.give_back()
