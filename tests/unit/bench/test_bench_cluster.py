"""bench/mirroring_cost.py's pure helpers and the runner's consume_target (no broker)."""
import socket

from bench import mirroring_cost
from bench.scenario_run import role_specs
from amqpclient.url import AMQPTarget


def test_split_spec():
    assert mirroring_cost.split_spec("default") == ("default", True)
    assert mirroring_cost.split_spec("all") == ("all", True)
    assert mirroring_cost.split_spec("cluster") == ("", True)
    assert mirroring_cost.split_spec("a, cluster ,c") == ("a,c", True)
    assert mirroring_cost.split_spec("a,c") == ("a,c", False)
    assert mirroring_cost.split_spec("paper") == ("paper", False)


def test_free_port_run_is_free_and_avoids():
    base = mirroring_cost.free_port_run(3)
    other = mirroring_cost.free_port_run(3, avoid=range(base, base + 3))
    assert not set(range(base, base + 3)) & set(range(other, other + 3))
    for p in range(base, base + 3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_consumers_go_to_consume_target():
    node2 = AMQPTarget(port=5673)
    specs = role_specs(mirroring_cost.SCENARIO, ["q"], consume_target=node2)
    assert [s["kind"] for s in specs] == ["consumer", "producer"]
    assert specs[0]["target"] == node2
    assert "target" not in specs[1]
    assert all("target" not in s for s in role_specs(mirroring_cost.SCENARIO, ["q"]))


def test_scenario_is_c_with_confirms_and_acks():
    s = mirroring_cost.SCENARIO
    assert (s.confirm, s.no_ack, s.prefetch, s.queues, s.default) == (1000, False, 100, 1, False)


def _res(variant, pub, con, p50, p99, error=None):
    return {"scenario": "cluster", "title": mirroring_cost.SCENARIO.title, "variant": variant,
            "publish_rate": pub, "consume_rate": con, "settings": {"confirm": 1000},
            "confirm_latency_ms": {"p50": p50, "p99": p99}, "error": error}


def test_tables_show_both_variants_and_the_ratio():
    t = mirroring_cost.tables([_res("unmirrored", 10000.0, 9000.0, 40.0, 80.0),
                        _res("mirrored", 5000.0, 4500.0, 80.0, 200.0)]).splitlines()
    assert t[2] == "| unmirrored | 10,000 | 9,000 | 40.0 | 80.0 |"
    assert t[3] == "| mirrored | 5,000 | 4,500 | 80.0 | 200 |"
    assert t[5] == "| scenario | figure | mirrored | unmirrored | mirrored / unmirrored |"
    assert t[7].endswith("| publish msg/s | 5,000 | 10,000 | 0.50x |")
    assert t[8] == "|  | consume msg/s | 4,500 | 9,000 | 0.50x |"
    assert t[9] == "|  | confirm p50 ms | 80.0 | 40.0 | 2.00x |"
    assert t[10] == "|  | confirm p99 ms | 200 | 80.0 | 2.50x |"


def test_tables_with_a_failed_variant():
    t = mirroring_cost.tables([_res("unmirrored", 10000.0, 9000.0, 40.0, 80.0),
                        _res("mirrored", None, None, None, None, error="mirrored: boom")])
    assert "| mirrored | error | error | error | error |" in t
    assert "| publish msg/s | error | 10,000 | n/a |" in t
