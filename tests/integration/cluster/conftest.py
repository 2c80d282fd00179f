"""Fixtures of the cluster tests: `nodes`, a 3-node cluster started for one test, and `shared`,
one started for the tests of a module that leave it whole (nodes.py)."""

from __future__ import annotations

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
