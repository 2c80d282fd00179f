"""Fixtures of the cluster tests: `nodes`, a 3-node cluster started for one test (nodes.py)."""

from __future__ import annotations

import pytest

from tests.integration.cluster.nodes import Nodes


@pytest.fixture
def nodes(tmp_path):
    n = Nodes(tmp_path)
    yield n
    n.stop()
