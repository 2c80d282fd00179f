"""leveret-server's cluster flags (actors/node/serve.py): what cannot form a cluster is refused at
start with a message, not after boot_timeout."""

from __future__ import annotations

import pytest

from actors.node.serve import parse_args


def test_cluster_flags_make_a_clustered_config():
    cfg = parse_args(["--node-name", "leveret@a", "--cluster-nodes", "h:1, h:2,h:3",
                      "--cluster-address", "h:2"])
    assert cfg.cluster_nodes == ("h:1", "h:2", "h:3") and cfg.clustered
    assert cfg.node == "leveret@a"


@pytest.mark.parametrize("nodes, me, says", [
    ("h:1,h:2,h:3", "h:4", "must be one of --cluster-nodes"),
    ("h:1,h:2,h:2", "h:1", "names h:2 more than once"),
])
def test_cluster_flags_that_cannot_form_a_cluster_are_refused(capsys, nodes, me, says):
    with pytest.raises(SystemExit) as e:
        parse_args(["--cluster-nodes", nodes, "--cluster-address", me])
    assert e.value.code == 2
    assert says in capsys.readouterr().err
