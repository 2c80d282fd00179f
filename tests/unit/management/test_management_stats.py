"""Channel statistics (actors/core/channel_stats.py), queue depth rates, and the pure parts of
/api/definitions and /api/parameters (actors/management/api.py), without a broker."""

from actors.core import channel_stats as cs
from actors.core.queue_stats import QueueCounters, StatsTable
from actors.management import api


def test_channel_counters_histogram_and_totals_that_never_go_back():
    c = cs.ChannelCounters()
    c.publish, c.confirm, c.deliver = 3, 2, 1
    c.confirmed_after(0.0004)  # first bucket
    c.confirmed_after(0.3)  # 0.5 s bucket
    c.confirmed_after(60)  # +Inf
    assert c.latency_counts[0] == 1 and c.latency_counts[cs.LATENCY_BUCKETS.index(0.5)] == 1
    assert c.latency_counts[-1] == 1 and abs(c.latency_sum - 60.3004) < 1e-9
    retired: dict = {}
    cs.add_into(retired, c)  # the channel closed: its counts stay
    live = cs.ChannelCounters()
    live.publish = 1
    total = dict(retired)
    cs.add_into(total, live)
    assert (total["publish"], total["confirm"], sum(total["latency_counts"])) == (4, 2, 3)
    merged = cs.merge(total, {"publish": 1, "latency_counts": [1] + [0] * 14,
                              "connections_opened": 2})
    assert (merged["publish"], merged["latency_counts"][0], merged["connections_opened"]) == \
        (5, 2, 2)


def test_channel_message_stats_lists_every_counter_and_rates_between_samples():
    c = cs.ChannelCounters()
    c.publish, c.get, c.deliver_no_ack = 10, 1, 2
    ms = cs.message_stats(c)
    assert ms["publish"] == 10 and ms["get_empty"] == 0 and ms["deliver_get"] == 3
    rated = cs.with_rates({"publish": 10, "ack": 0}, {"publish": 4}, 2000, ("publish", "ack"))
    assert rated["publish_details"] == {"rate": 3.0} and rated["ack_details"] == {"rate": 0.0}
    assert cs.with_rates({"publish": 10}, None, 0, ("publish",))["publish_details"] == \
        {"rate": 0.0}


def test_queue_confirms_by_mode_and_depth_rates():
    q = QueueCounters()
    q.confirmed("enqueue", 3)
    q.confirmed("ack", 1)
    q.confirmed("ack-lite", 5)  # (the consuming channel counts those)
    s = q.sample({"messages": 4})
    assert (s["confirmed_enqueue"], s["confirmed_ack"]) == (3, 1)
    table = StatsTable(1000)
    table.put("/", "q", 1000, {"messages": 4, "messages_ready": 4, "messages_unacknowledged": 0})
    table.put("/", "q", 3000, {"messages": 10, "messages_ready": 8,
                               "messages_unacknowledged": 2})
    assert table.depth_rates("/", "q", 3100) == {
        "messages_details": {"rate": 3.0}, "messages_ready_details": {"rate": 2.0},
        "messages_unacknowledged_details": {"rate": 1.0}}
    assert table.depth_rates("/", "q", 9000)["messages_details"] == {"rate": 0.0}  # quiet


def test_vhost_definitions_and_import_into_a_vhost():
    doc = {"rabbit_version": "3.10.8", "users": [{"name": "u"}],
           "parameters": [{"vhost": "v", "component": "vhost-limits", "name": "limits",
                           "value": {}}],
           "policies": [{"vhost": "v", "name": "p"}, {"vhost": "w", "name": "p2"}],
           "queues": [{"vhost": "v", "name": "q"}], "exchanges": [], "bindings": []}
    one = api.vhost_definitions(doc, "v")
    assert "users" not in one and one["rabbit_version"] == "3.10.8"
    assert one["queues"] == [{"name": "q"}]  # vhost removed
    assert one["policies"] == [{"vhost": "v", "name": "p"}]  # kept, as 3.10
    assert one["parameters"][0]["vhost"] == "v"
    back = api.into_vhost(one, "x")
    assert back["queues"] == [{"name": "q", "vhost": "x"}] and "users" not in back


def test_runtime_parameters_of_policies_operator_policies_and_limits():
    state = {"policies": [{"vhost": "/", "name": "p", "pattern": ".*", "definition": {},
                           "priority": 1, "apply_to": "queues"}],
             "operator_policies": [{"vhost": "/", "name": "op", "pattern": "^a",
                                    "definition": {"max-length": 1}, "priority": 0,
                                    "apply_to": "all"}],
             "limits": [["vhost", "/", {"max-queues": 3}], ["user", "bob", {"max-channels": 1}]]}
    rows = api.parameters(state)
    assert [(r["component"], r["name"]) for r in rows] == [
        ("policy", "p"), ("operator_policy", "op"), ("vhost-limits", "limits")]
    assert rows[1]["value"] == {"pattern": "^a", "definition": {"max-length": 1},
                                "priority": 0, "apply-to": "all"}
    assert api.unknown_component("shovel").reason == \
        "Validation failed\n\ncomponent shovel not found\n"
