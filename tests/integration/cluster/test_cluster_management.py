"""The management API of a 3-node cluster: any node answers for the whole cluster (queues
homed on other nodes with their counts and rates, every connection), and the quorum-critical
health check says when stopping a node would cost the metadata its majority."""

from __future__ import annotations

import pytest

from conftest import free_port
from tests.integration.cluster.nodes import Nodes
from tests.integration.test_management import Api

pytestmark = pytest.mark.timeout(240)


class ManagedNodes(Nodes):
    def __init__(self, tmp_path):
        self.http = [free_port() for _ in range(3)]
        (tmp_path / "stats.toml").write_text("collect_statistics_interval = 300\n")
        super().__init__(tmp_path, 3, "--config", str(tmp_path / "stats.toml"))

    def args(self, i):
        return [*super().args(i), "--management-port", str(self.http[i])]


@pytest.fixture
def managed(tmp_path):
    n = ManagedNodes(tmp_path)
    yield n
    n.stop()


def test_any_node_answers_for_the_whole_cluster(managed):
    apis = [Api(p) for p in managed.http]
    with managed[1].connection(client_properties={"connection_name": "on-node2"}) as c:
        ch = c.channel()
        ch.queue_declare("homed-on-2", durable=True)
        ch.confirm_delivery()
        for _ in range(3):
            ch.basic_publish("", "homed-on-2", b"x")

        def seen_by_node1():
            status, q = apis[0]("GET", "/api/queues/%2F/homed-on-2")
            return status == 200 and q.get("messages") == 3 and \
                q["message_stats"].get("publish") == 3 and q
        q = managed.wait(seen_by_node1, 30, "node1's API to show node2's queue with its counts")
        assert q["node"] == "leveret@node2"
        conns = managed.wait(lambda: [x for x in apis[2]("GET", "/api/connections")[1]
                                      if x["client_properties"].get("connection_name") ==
                                      "on-node2"], 30, "node3's API to list a connection of node2")
        assert conns[0]["node"] == "leveret@node2"
    names = {n["name"]: n["running"] for n in apis[0]("GET", "/api/nodes")[1]}
    assert names == {"leveret@node1": True, "leveret@node2": True, "leveret@node3": True}
    assert apis[0]("GET", "/api/health/checks/node-is-quorum-critical")[0] == 200
    managed.kill9(2)
    status, body = managed.wait(lambda: (r := apis[0]("GET", "/api/health/checks/"
                                                             "node-is-quorum-critical"))[0]
                                == 503 and r, 30, "node1 to be quorum-critical with node3 down")
    assert body["status"] == "failed"
