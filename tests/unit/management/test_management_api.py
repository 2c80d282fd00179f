"""actors/management/api.py: RabbitMQ's management JSON and list query parameters, without a
broker."""

import pytest

from actors.management import api


ITEMS = [{"name": "b", "messages": 2, "arguments": {"x-max-length": 5}},
         {"name": "a", "messages": 10, "arguments": {}},
         {"name": "ca", "messages": 0, "arguments": {}}]


def test_no_parameters_keeps_the_list():
    assert api.list_query(ITEMS, {}) == ITEMS


def test_sort_and_sort_reverse_by_a_field_and_a_dotted_path():
    assert [i["name"] for i in api.list_query(ITEMS, {"sort": "messages"})] == ["ca", "b", "a"]
    assert [i["name"] for i in api.list_query(ITEMS, {"sort": "name",
                                                      "sort_reverse": "true"})] == \
        ["ca", "b", "a"]
    assert [i["name"] for i in api.list_query(ITEMS, {"sort": "arguments.x-max-length"})] == \
        ["a", "ca", "b"]  # (missing sorts first)


def test_columns_keep_only_the_named_fields_nested_as_in_the_item():
    assert api.list_query(ITEMS[:1], {"columns": "name,arguments.x-max-length,nope"}) == [
        {"name": "b", "arguments": {"x-max-length": 5}}]


def test_name_filter_plain_and_regex():
    assert [i["name"] for i in api.list_query(ITEMS, {"name": "a"})] == ["a", "ca"]
    assert [i["name"] for i in api.list_query(ITEMS, {"name": "^a$", "use_regex": "true"})] \
        == ["a"]
    with pytest.raises(api.ApiError) as e:
        api.list_query(ITEMS, {"name": "(", "use_regex": "true"})
    assert e.value.status == 400


def test_pagination_envelope():
    page = api.list_query(ITEMS, {"page": "2", "page_size": "2", "sort": "name"})
    assert page == {"filtered_count": 3, "item_count": 1, "page": 2, "page_count": 2,
                    "page_size": 2, "total_count": 3, "items": [ITEMS[2]]}
    filtered = api.list_query(ITEMS, {"page": "1", "name": "a"})
    assert (filtered["filtered_count"], filtered["total_count"]) == (2, 3)


@pytest.mark.parametrize("query", [{"page": "0"}, {"page": "x"}, {"page": "3", "page_size": "2"},
                                   {"page": "1", "page_size": "501"}])
def test_bad_pages_are_400(query):
    with pytest.raises(api.ApiError) as e:
        api.list_query(ITEMS, query)
    assert e.value.status == 400 and e.value.body()["error"] == "bad_request"


def test_properties_key_as_rabbit_mgmt_format():
    assert api.properties_key("", {}) == "~"
    assert api.properties_key("a.#", {}) == "a.%23"
    keyed = api.properties_key("k", {"x-match": "all"})
    assert keyed.startswith("k~") and keyed != api.properties_key("k", {"x-match": "any"})


def test_visible_vhosts_by_tags_and_permissions():
    state = {"auth": {"vhosts": [{"name": "/"}, {"name": "v2"}],
                      "permissions": [{"user": "u", "vhost": "v2"},
                                      {"user": "u", "vhost": "gone"}]}}
    assert api.visible_vhosts(state, "u", ["management"]) == {"v2"}
    assert api.visible_vhosts(state, "u", ["monitoring"]) == {"/", "v2"}
    assert not api.is_management(["impersonator"]) and api.is_management(["policymaker"])


def test_queue_json_with_and_without_counts_and_the_policy_that_applies():
    q = {"vhost": "/", "name": "q1", "durable": True, "auto_delete": False, "exclusive": "",
         "arguments": {}}
    pols = [{"vhost": "/", "name": "low", "pattern": "^q", "definition": {"ha-mode": "all"},
             "priority": 0, "apply_to": "queues"},
            {"vhost": "/", "name": "high", "pattern": "q1", "definition": {"confirm-on": "ack"},
             "priority": 5, "apply_to": "all"}]
    down = api.queue_json(q, None, pols)
    assert down["state"] == "down" and "messages" not in down and down["exclusive"] is False
    assert down["policy"] == "high" and down["effective_policy_definition"] == {
        "confirm-on": "ack"}
    up = api.queue_json(q, {"messages": 3, "messages_ready": 2, "messages_unacknowledged": 1,
                            "consumers": 1, "node": "n1"}, [])
    assert (up["state"], up["messages"], up["node"], up["policy"]) == ("running", 3, "n1", None)


# --- statistics (actors/core/queue_stats.py) -----------------------------------------------------
from actors.core.queue_stats import QueueCounters, StatsTable  # noqa: E402
from actors.messages import Delivery  # noqa: E402


class _Consumer:
    def __init__(self, no_ack):
        self.no_ack = no_ack


def test_counters_sample_only_when_something_changed():
    c = QueueCounters()
    first = c.sample({"messages": 0})
    assert first["publish"] == 0 and first["messages"] == 0
    assert c.sample({"messages": 0}) is None  # nothing new: nothing to emit
    c.publish += 3
    consumers = {("ch", "A"): _Consumer(False), ("ch", "B"): _Consumer(True)}
    c.delivered("ch", [Delivery("A", 1, False, "", "q", b""), Delivery("B", 2, True, "", "q", b""),
                       Delivery("gone", 3, False, "", "q", b"")], consumers)
    c.got(True, no_ack=False)
    s = c.sample({"messages": 2, "consumers": 2})
    assert (s["publish"], s["deliver"], s["deliver_no_ack"], s["get"], s["redeliver"],
            s["messages"], s["consumers"]) == (3, 2, 1, 1, 2, 2, 2)


def test_rates_between_the_last_two_samples_and_zero_once_quiet():
    t = StatsTable(interval_ms=5000)
    assert t.message_stats("/", "q", 0) == {}
    base = dict.fromkeys(("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "ack",
                          "redeliver"), 0)
    t.put("/", "q", 10_000, dict(base, publish=100))
    only_one = t.message_stats("/", "q", 10_000)
    assert only_one["publish"] == 100 and only_one["publish_details"] == {"rate": 0.0}
    t.put("/", "q", 15_000, dict(base, publish=600, deliver=200, get_no_ack=50))
    t.put("/", "q", 14_000, dict(base, publish=1))  # late: ignored
    s = t.message_stats("/", "q", 16_000)
    assert s["publish_details"] == {"rate": 100.0} and s["deliver_get"] == 250
    assert s["deliver_get_details"] == {"rate": 50.0}
    assert t.message_stats("/", "q", 26_000)["publish_details"] == {"rate": 0.0}
    t.forget("/", "q")
    assert t.message_stats("/", "q", 16_000) == {}
    assert api.sum_message_stats([s, s])["publish_details"] == {"rate": 200.0}


# --- Prometheus (actors/management/prometheus.py) ------------------------------------------------
from actors.management import prometheus  # noqa: E402


def test_prometheus_aggregates_or_labels_per_queue_and_filters_families():
    rows = [{"vhost": "/", "name": "a", "messages_ready": 2, "messages_unacknowledged": 1,
             "messages": 3, "consumers": 1},
            {"vhost": "v", "name": "b", "messages_ready": 5, "messages_unacknowledged": 0,
             "messages": 5, "consumers": 0}]
    stats = {("/", "a"): {"publish": 7}}
    status = {"alarms": ["disk"], "memory_used": 10, "memory_limit": 100, "disk_free": 5,
              "disk_free_limit": 1}
    text = prometheus.render(prometheus.metrics("n1", "c1", rows, stats, status,
                                                per_object=False)).decode()
    assert "rabbitmq_queue_messages_ready 7.0" in text
    assert "rabbitmq_queue_messages_published_total 7.0" in text
    assert "rabbitmq_alarms_free_disk_space_watermark 1.0" in text
    assert 'rabbitmq_identity_info{rabbitmq_cluster="c1",rabbitmq_node="n1"} 1.0' in text
    per = prometheus.render(prometheus.metrics(
        "n1", "c1", rows, stats, status, per_object=True,
        only=set(prometheus.FAMILIES["queue_coarse_metrics"]), vhosts={"v"})).decode()
    assert 'rabbitmq_queue_messages_ready{queue="b",vhost="v"} 5.0' in per
    assert 'queue="a"' not in per and "rabbitmq_build_info" not in per
    assert "rabbitmq_queue_consumers" not in per


def test_prometheus_reports_only_the_queues_whose_master_is_this_node():
    """A mirrored queue is listed by every node's API with its master's node; its metrics are
    that node's only, so a sum over the nodes counts it once."""
    rows = [{"vhost": "/", "name": "here", "node": "n1", "messages": 3, "messages_ready": 3},
            {"vhost": "/", "name": "there", "node": "n2", "messages": 4, "messages_ready": 4}]
    stats = {("/", "here"): {"publish": 3}, ("/", "there"): {"publish": 4}}
    text = prometheus.render(prometheus.metrics("n1", "c1", rows, stats, {},
                                                per_object=False)).decode()
    assert "rabbitmq_queue_messages 3.0" in text and "rabbitmq_queues 1.0" in text
    assert "rabbitmq_queue_messages_published_total 3.0" in text
    per = prometheus.render(prometheus.metrics("n2", "c1", rows, stats, {},
                                               per_object=True)).decode()
    assert 'queue="there"' in per and 'queue="here"' not in per
