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
    # node1 restarts: the queue (idle since: it has nothing new to sample) sends it its last
    # sample once node1 is up again, so node1's API lists it with its counts again
    managed.kill9(0)
    managed.wait(lambda: not managed.status(1).get("leveret@node1", (True,))[0], 30,
                 "node2 to see node1 down")
    managed.start(0)
    managed.wait(lambda: (r := apis[0]("GET", "/api/queues/%2F")[1]) and isinstance(r, list)
                 and [q for q in r if q["name"] == "homed-on-2" and q.get("messages") == 3],
                 60, "the restarted node1's API to list node2's idle queue with its counts")
    names = {n["name"]: n["running"] for n in apis[0]("GET", "/api/nodes")[1]}
    assert names == {"leveret@node1": True, "leveret@node2": True, "leveret@node3": True}
    assert apis[0]("GET", "/api/health/checks/node-is-quorum-critical")[0] == 200
    managed.kill9(2)
    status, body = managed.wait(lambda: (r := apis[0]("GET", "/api/health/checks/"
                                                             "node-is-quorum-critical"))[0]
                                == 503 and r, 30, "node1 to be quorum-critical with node3 down")
    assert body["status"] == "failed"


class MeteredNodes(ManagedNodes):
    def __init__(self, tmp_path):
        self.prom = [free_port() for _ in range(3)]
        super().__init__(tmp_path)

    def args(self, i):
        return [*super().args(i), "--prometheus-port", str(self.prom[i])]


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    """One cluster (with the management and Prometheus ports) for the module's tests that
    leave it whole: a cluster's start costs more than either of them."""
    n = MeteredNodes(tmp_path_factory.mktemp("metered"))
    yield n
    n.stop()


def _scrape(port: int, path: str) -> dict:
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_a_mirrored_queue_is_counted_once_and_stats_are_the_cluster_s(metered):
    """Prometheus: a queue mirrored on every node is reported by its master's node only (a
    dashboard summing over the nodes counts it once, as rabbitmq_prometheus' local queue
    metrics). The API of any node shows the cluster's exchange counts and churn."""
    managed = metered
    apis = [Api(p) for p in managed.http]
    managed[0].ctl("set_policy", "ha-all", "^ha\\.", '{"ha-mode": "all"}')
    with managed[1].connection() as c:
        ch = c.channel()
        ch.queue_declare("ha.counted", durable=True)
        ch.exchange_declare("ha.x", "fanout")
        ch.queue_bind("ha.counted", "ha.x")
        ch.confirm_delivery()
        for _ in range(4):
            ch.basic_publish("ha.x", "", b"x")

    def mirrored():
        q = apis[0]("GET", "/api/queues/%2F/ha.counted")[1]
        return q.get("messages") == 4 and len(q.get("synchronised_slave_nodes") or ()) == 2
    managed.wait(mirrored, 30, "the queue mirrored on both other nodes with 4 messages")
    key = ("rabbitmq_queue_messages", (("queue", "ha.counted"), ("vhost", "/")))

    def per_node():
        found = [_scrape(p, "/metrics/per-object").get(key) for p in managed.prom]
        return found if found[1] == 4 else None
    assert managed.wait(per_node, 30, "node2's per-object queue metrics") == [None, 4, None]
    total = [_scrape(p, "/metrics").get(("rabbitmq_queue_messages", ())) for p in
             managed.prom]
    assert total[0] == total[2] == 0 and total[1] == 4  # the sum over nodes: 4, not 12
    assert [_scrape(p, "/metrics")[("rabbitmq_queues", ())] for p in managed.prom] == \
        [0, 1, 0]

    def exchange_seen(api):
        ms = api("GET", "/api/exchanges/%2F/ha.x")[1].get("message_stats", {})
        return ms.get("publish_in") == 4 and ms
    for api in apis:  # any node answers with the publishing node's counts
        ms = managed.wait(lambda: exchange_seen(api), 30, "the exchange's counts")
        assert ms["publish_out"] == 4
    churn = managed.wait(lambda: (lambda r: r if r["connection_closed"] >= 1 else None)(
        apis[2]("GET", "/api/overview")[1]["churn_rates"]), 30, "node2's churn on node3")
    assert churn["connection_created"] >= 1 and churn["channel_created"] >= 1


def test_each_member_s_row_has_its_own_figures_and_alarms(metered):
    """/api/nodes on any node: each member's row has that member's own figures (its pid, its
    data directory) and alarms (R2's, as each member reports its own), from the sample it
    sends every node; the alarms health check lists every member's alarms, local-alarms the
    answering node's only."""
    managed = metered
    apis = [Api(p) for p in managed.http]

    def rows(i=0):
        status, nodes = apis[i]("GET", "/api/nodes")
        return {n["name"]: n for n in nodes} if status == 200 else {}

    names = [f"leveret@node{i + 1}" for i in range(3)]
    nodes = managed.wait(lambda: (r := rows()) and all("os_pid" in r.get(n, {}) for n in names)
                         and r, 30, "node1's API to show every member's sample")
    for i, name in enumerate(names):
        assert nodes[name]["os_pid"] == str(managed[i].pid)
        assert nodes[name]["db_dir"] == str(managed[i].data_dir)
        assert nodes[name]["mem_alarm"] is False and nodes[name]["running"] is True
    managed[1].ctl("set_vm_memory_high_watermark", "0.0000001")
    try:
        nodes = managed.wait(lambda: (r := rows()) and r[names[1]]["mem_alarm"] and r, 30,
                             "node1's API to show node2's memory alarm")
        assert not nodes[names[0]]["mem_alarm"] and not nodes[names[2]]["mem_alarm"]
        status, body = apis[0]("GET", "/api/health/checks/alarms")
        assert status == 503 and body["alarms"] == [{"node": names[1], "resource": "memory"}]
        assert apis[0]("GET", "/api/health/checks/local-alarms") == (200, {"status": "ok"})
        status, body = apis[1]("GET", "/api/health/checks/local-alarms")
        assert status == 503 and body["reason"] == "There are alarms in effect on the node"
    finally:
        managed[1].ctl("set_vm_memory_high_watermark", "0.4")
    managed.wait(lambda: (r := rows(2)) and r[names[1]]["mem_alarm"] is False, 30,
                 "node3's API to show node2's alarm cleared")
