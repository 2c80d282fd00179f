"""bench/result_tables.py tables, bench/scenarios.py selection and amqpclient/url.py parsing (pure)."""
import dataclasses

import pytest

from bench import result_tables, scenarios
from bench.make_bench import parse_queue_args
from bench.scenario_run import distribute, role_specs
from amqpclient.url import parse_url


def _res(key, pub, con, p50=None, p99=None, confirm=None, error=None):
    r = {"scenario": key, "title": f"({key})", "publish_rate": pub, "consume_rate": con,
         "settings": {"confirm": confirm}, "error": error}
    if p50 is not None:
        r["confirm_latency_ms"] = {"p50": p50, "p99": p99}
    return r


def test_number_formats():
    assert result_tables.fmt_rate(12345.6) == "12,346"
    assert result_tables.fmt_rate(None) == "n/a"
    assert result_tables.fmt_ms(1.2345) == "1.23"
    assert result_tables.fmt_ms(33.66) == "33.7"
    assert result_tables.fmt_ms(1234.0) == "1,234"
    assert result_tables.fmt_ratio(0.5) == "0.50x"
    assert result_tables.fmt_ratio(None) == "n/a"


def test_single_table_is_markdown():
    t = result_tables.single_table([_res("a", 1000.0, 990.0),
                             _res("c", 500.0, 400.0, 2.0, 9.5, confirm=1000)])
    lines = t.splitlines()
    assert lines[0] == ("| scenario | publish msg/s | consume msg/s | confirm p50 ms "
                        "| confirm p99 ms |")
    assert lines[1] == "| --- | ---: | ---: | ---: | ---: |"
    assert lines[2] == "| (a) | 1,000 | 990 | – | – |"
    assert lines[3] == "| (c) | 500 | 400 | 2.00 | 9.50 |"
    assert all(line.count("|") == 6 for line in lines)


def test_single_table_shows_errors():
    t = result_tables.single_table([_res("a", None, None, error="boom")])
    assert t.splitlines()[2] == "| (a) | error | error | error | error |"


def test_compare_table_has_ratio_column():
    mine = [_res("a", 500.0, 250.0), _res("c", 100.0, 100.0, 4.0, 20.0, confirm=1000)]
    ref = [_res("a", 1000.0, 1000.0), _res("c", 400.0, 400.0, 2.0, 10.0, confirm=1000)]
    t = result_tables.compare_table(mine, ref, "Leveret", "RabbitMQ")
    lines = t.splitlines()
    assert lines[0] == "| scenario | figure | Leveret | RabbitMQ | Leveret / RabbitMQ |"
    assert lines[2] == "| (a) | publish msg/s | 500 | 1,000 | 0.50x |"
    assert lines[3] == "|  | consume msg/s | 250 | 1,000 | 0.25x |"
    assert "| (c) | publish msg/s | 100 | 400 | 0.25x |" in lines
    assert "|  | confirm p99 ms | 20.0 | 10.0 | 2.00x |" in lines
    assert len(lines) == 2 + 2 + 4          # (a): 2 rates; (c): 2 rates + 2 latencies


def test_compare_table_with_a_failed_broker():
    mine = [_res("a", None, None, error="Leveret did not start")]
    ref = [_res("a", 1000.0, 900.0)]
    lines = result_tables.compare_table(mine, ref, "Leveret", "RabbitMQ").splitlines()
    assert lines[2] == "| (a) | publish msg/s | error | 1,000 | n/a |"


def test_default_scenarios_are_a_b_c():
    sel = scenarios.select("default")
    assert [s.key for s in sel] == ["a", "b", "c"]
    a, b, c = sel
    assert a.no_ack and a.confirm is None and a.message_size == 1500
    assert not b.no_ack and b.prefetch == 100 and b.confirm is None
    assert c.prefetch == 100 and c.confirm == scenarios.DEFAULT_CONFIRM_WINDOW == 1000
    assert all(s.queues == s.producers == s.consumers == 1 for s in sel)


def test_select_groups_and_unknown():
    assert [s.key for s in scenarios.select("paper")] == ["paper-q1", "paper-q2", "paper-q4",
                                                          "paper-q8", "paper-q15"]
    assert [s.key for s in scenarios.select("c,a,c")] == ["c", "a"]
    with pytest.raises(KeyError):
        scenarios.select("nope")


def test_scenario_validation_and_variants():
    with pytest.raises(ValueError):
        dataclasses.replace(scenarios.B, ack_every=200)          # > prefetch: would stall
    c = scenarios.C.with_queue_arguments({"x-confirm-on": "disk"}).with_confirm_window(50)
    assert c.arguments == {"x-confirm-on": "disk"} and c.confirm == 50
    assert scenarios.A.with_confirm_window(50).confirm is None
    p = scenarios.SCENARIOS["paper-q4"]
    assert p.connections == 4 * (2 + 3)


def test_role_specs_and_distribution():
    p = scenarios.SCENARIOS["paper-q2"]
    specs = role_specs(p, ["q0", "q1"])
    assert len(specs) == 10
    assert [s["kind"] for s in specs[:6]] == ["consumer"] * 6     # consumers first
    assert specs[0]["channels"] == [1, 2, 3] and specs[-1]["channels"] == [1, 2]
    groups = distribute(specs, 4)
    assert len(groups) == 4 and sum(len(g) for g in groups) == 10
    assert distribute(specs[:2], 16) == [[specs[0]], [specs[1]]]


def test_parse_url():
    t = parse_url("amqp://u%40x:p%2Fw@example.org:5673/%2F")
    assert (t.user, t.password, t.host, t.port, t.vhost) == ("u@x", "p/w", "example.org", 5673,
                                                             "/")
    assert parse_url("amqp://h").vhost == "/" and parse_url("amqp://h").port == 5672
    assert parse_url("amqp://h/v1").vhost == "v1"
    assert parse_url("amqp://h/").vhost == ""
    assert "p%2Fw" not in t.display and parse_url(t.url) == t
    with pytest.raises(ValueError):
        parse_url("http://h/")


def test_parse_queue_args():
    assert parse_queue_args(["x-confirm-on=disk", "x-max-length=10", "x-flag=true"]) == {
        "x-confirm-on": "disk", "x-max-length": 10, "x-flag": True}


def test_bottleneck_warning():
    from bench.make_bench import bottleneck_warnings
    st = [{"mode": "publish", "rate": 1_000_000.0}, {"mode": "consume_ack", "rate": 100_000.0},
          {"mode": "consume_noack", "rate": 120_000.0}]
    ok = {"title": "(a)", "publish_rate": 60_000.0, "consume_rate": 40_000.0, "producers": 1,
          "consumers": 1}
    hot = dict(ok, consume_rate=70_000.0)
    assert bottleneck_warnings(st, [ok]) == []
    (w,) = bottleneck_warnings(st, [hot])
    assert "consume 70,000 msg/s" in w and "bottleneck" in w
    assert bottleneck_warnings(None, [hot]) == []
