"""Fixtures of the cluster tests: `nodes`, a 3-node cluster started for one test; `shared`, one
started for the tests of a module that leave it whole; `mended`, one started for the tests of
a module that kill, stop or cut off its nodes, made whole again after each (nodes.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from tests.integration.cluster.nodes import Nodes


@pytest.fixture
def nodes(tmp_path):
    n = Nodes(tmp_path)
    yield n
    n.stop()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    n = Nodes(tmp_path_factory.mktemp("cluster"))
    yield n
    n.stop()


@pytest.fixture
def shared(shared_cluster):
    """The module's 3-node cluster, for tests that kill, stop and partition no node and name
    their own queues, users and policies (a cluster's start costs more than most of them:
    about 7 CPU-seconds); every node must still answer after the test, as the next one
    expects."""
    yield shared_cluster
    down = [i + 1 for i, b in enumerate(shared_cluster.brokers) if not b.alive()]
    assert not down, f"nodes {down} of the shared cluster went down:\n{shared_cluster.logs()}"


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
    """One cluster for a module's tests that kill, stop or cut off nodes: each test takes it
    whole and gives it back; giving back continues what the test stopped, restarts what it
    killed (on the nodes' data: a restart costs less than a cluster's start) and waits for the
    cluster to be whole again; a cluster that cannot be mended is stopped and the next test
    gets a new one."""

    def __init__(self, start: Callable[[Path], Nodes], tmp_path_factory):
        self._start = start
        self._tmp = tmp_path_factory
        self.nodes: Nodes | None = None

    def take(self) -> Nodes:
        if self.nodes is None:
            self.nodes = self._start(self._tmp.mktemp("cluster"))
        if not self.nodes.whole():
            logs = self.nodes.logs()
            self.stop()  # the next test starts a new one
            raise AssertionError(f"the cluster is not whole at the start of the test:\n{logs}")
        return self.nodes

    def give_back(self) -> None:
        try:
            self.nodes.mend()
            forget_queues_and_policies(self.nodes)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
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
def mended(kept_cluster):
    """The module's 3-node cluster, whole at the start of the test (asserted), for a test that
    may kill, stop or cut off its nodes and names its own queues; after it, made whole again
    with no queue or policy left (KeptCluster)."""
    yield kept_cluster.take()
    kept_cluster.give_back()
