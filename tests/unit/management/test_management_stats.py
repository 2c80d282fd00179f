"""Channel statistics (actors/core/channel_stats.py), queue depth rates, and the pure parts of
/api/definitions and /api/parameters (actors/management/api.py), without a broker."""

from actors.core import channel_stats as cs
from actors.core.queue_stats import QueueCounters, StatsTable
from actors.core.samples import Sample
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
    total = cs.merge({}, retired)  # a deep copy: add_into adds into nested dicts and lists
    cs.add_into(total, live)
    assert (total["publish"], total["confirm"], sum(total["latency_counts"])) == (4, 2, 3)
    assert sum(retired["latency_counts"]) == 3
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


# --- exchanges, churn, per-vhost channel counts, consumer use, idle_since (issue 14) ----------
def test_exchange_counts_per_vhost_survive_the_channel_and_add_up_across_workers():
    c = cs.ChannelCounters("v")
    c.published("fan", 2)  # routed to two queues: publish_out counts both copies
    c.published("fan", 2)
    c.published("", 0)  # unroutable: in, not out
    c.confirm, c.drop_unroutable = 3, 1
    retired: dict = {}
    cs.add_into(retired, c)
    assert retired["vhosts"]["v"]["exchanges"] == {
        "fan": {"publish_in": 2, "publish_out": 4}, "": {"publish_in": 1, "publish_out": 0}}
    assert retired["vhosts"]["v"]["confirm"] == 3
    later = cs.merge(retired, {"vhosts": {"v": {"exchanges": {"fan": {"publish_in": 1,
                                                                       "publish_out": 2}}}}})
    workers = {"w1": (3000, later, Sample(1000, retired)), "w2": (2900, retired, None)}
    counts = cs.cluster_counts(workers, {"vhosts": {"v": {"confirm": 5}}}, 3100, 1000)
    # w1: 1 more publish into fan over 2 s; w2 has no previous sample: no rate
    assert counts[("vhosts", "v", "exchanges", "fan", "publish_in")] == (5, 0.5)
    assert counts[("vhosts", "v", "exchanges", "fan", "publish_out")] == (10, 1.0)
    assert counts[("vhosts", "v", "confirm")] == (11, 0.0)  # dead workers' 5 kept
    x = api.exchange_json({"vhost": "v", "name": "fan", "type": "fanout", "durable": True,
                           "auto_delete": False, "internal": False, "arguments": {}}, [],
                          counts)
    assert x["message_stats"] == {"publish_in": 5, "publish_in_details": {"rate": 0.5},
                                  "publish_out": 10, "publish_out_details": {"rate": 1.0}}
    # once w1's last sample is older than two intervals its rate is 0
    assert cs.cluster_counts(workers, {}, 9000, 1000)[
        ("vhosts", "v", "exchanges", "fan", "publish_in")] == (5, 0.0)
    quiet = api.exchange_json({"vhost": "v", "name": "other", "type": "direct",
                               "durable": True, "auto_delete": False, "internal": False,
                               "arguments": {}}, [], counts)
    assert "message_stats" not in quiet  # nothing published into it (as RabbitMQ)


def test_churn_rates_and_the_channel_keys_of_the_overview():
    counts = {("connections_opened",): (3, 0.5), ("queues_deleted",): (1, 0.0),
              ("vhosts", "a", "confirm"): (2, 1.0), ("vhosts", "b", "confirm"): (5, 0.5)}
    churn = api.churn_rates(counts)
    assert churn["connection_created"] == 3 and churn["connection_created_details"] == \
        {"rate": 0.5}
    assert churn["queue_deleted"] == 1 and churn["channel_closed"] == 0
    assert sorted(k for k in churn if not k.endswith("_details")) == sorted(
        k for k, _ in api.CHURN)
    ms = api.channel_message_stats(counts, ["a", "b"])
    assert ms["confirm"] == 7 and ms["confirm_details"] == {"rate": 1.5}
    assert ms["drop_unroutable"] == 0 and ms["return_unroutable_details"] == {"rate": 0.0}
    assert api.channel_message_stats(counts, ["a"])["confirm"] == 2  # only visible vhosts


def test_consumer_use_is_rabbitmqs_moving_average():
    """rabbit_queue_consumers: active from the start (1.0); a period (active 1 s, then
    blocked 1 s) weighs in with half-life 1 s; active again it climbs back; the sampled state
    stays the same while nothing changes."""
    from actors.core.queue_stats import ConsumerUse, use_avg, utilisation
    use = ConsumerUse(0)
    assert utilisation(use.state(), 5000) == 1.0
    use.update(False, 1000)  # every consumer blocked at 1 s
    state = use.state()
    # 1 s active, 1 s blocked: 0.5 * (1 - 2^-2) + 1.0 * 2^-2
    assert abs(utilisation(state, 2000) - 0.625) < 1e-9
    assert utilisation(state, 4000) < 0.3  # (computed at read time: no new sample needed)
    use.update(False, 1500)  # still blocked: no change
    assert use.state() == state
    use.update(True, 2000)
    assert abs(use.avg - 0.625) < 1e-9
    assert utilisation(use.state(), 3000) == use_avg(1000, 0, 0.625) == 0.8125
    assert use.state(offset=10)[1] == 2010  # wall-clock offset applied to `since`


def test_queue_consumer_use_and_idle_since_in_the_table_and_api():
    from actors.core.queue_stats import ConsumerUse
    q = QueueCounters()
    use = ConsumerUse(0)
    s1 = q.sample({"messages": 0, "consumers": 1}, use.state())
    assert q.sample({"messages": 0, "consumers": 1}, use.state()) is None  # idle: nothing
    q.got_empty()
    s2 = q.sample({"messages": 0, "consumers": 1}, use.state())
    assert s2["get_empty"] == 1
    table = StatsTable(1000)
    table.put("/", "q", 1000, s1)
    table.put("/", "q", 2000, s2)
    assert table.message_stats("/", "q", 2100)["get_empty_details"] == {"rate": 1.0}
    assert table.consumer_use("/", "q", 2100) == {"consumer_capacity": 1.0,
                                                  "consumer_utilisation": 1.0}
    assert table.idle_since("/", "q", 2900) is None  # heard from within an interval
    assert table.idle_since("/", "q", 3100) == 2000
    row = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0, "consumers": 1}
    qdef = {"vhost": "/", "name": "q", "durable": True, "auto_delete": False,
            "exclusive": False, "arguments": {}}
    out = api.queue_json(qdef, row, [], use=dict(table.consumer_use("/", "q", 3100),
                                                 idle_since=1795546684028))
    assert out["consumer_capacity"] == out["consumer_utilisation"] == 1.0
    assert out["idle_since"] == "2026-11-24T18:58:04.028+00:00"
    out = api.queue_json(qdef, dict(row, consumers=0), [], use={"consumer_capacity": 1.0,
                                                                "consumer_utilisation": 1.0})
    assert out["consumer_capacity"] == 0 and out["consumer_utilisation"] is None
    assert "idle_since" not in out


def test_a_channel_is_idle_once_a_whole_sample_saw_no_change():
    from actors.connection.stats import mark_idle

    def rows(publish):
        return [{"channel_list": [{"name": "c (1)", "message_stats": {"publish": publish},
                                   "messages_unacknowledged": 0, "messages_unconfirmed": 0,
                                   "consumer_count": 0}]}]
    r1 = rows(1)
    seen = mark_idle(r1, {}, 1000)
    assert "idle_since" not in r1[0]["channel_list"][0]
    r2 = rows(1)
    seen = mark_idle(r2, seen, 2000)
    assert r2[0]["channel_list"][0]["idle_since"] == 1000
    r3 = rows(2)  # busy again
    seen = mark_idle(r3, seen, 3000)
    assert "idle_since" not in r3[0]["channel_list"][0] and seen["c (1)"][1] == 3000
    ch = api.channel_json(dict(r2[0]["channel_list"][0], consumers=[]))
    assert ch["idle_since"] == "1970-01-01T00:00:01.000+00:00"


def test_a_sample_adds_the_live_channels_into_a_copy_of_the_retired_counts():
    """process_totals must not add the live channels' counts into the process's retired
    totals: with a shallow copy, add_into wrote into retired's per-exchange dicts and latency
    list, so every sample after a first channel closed counted the live ones once more (an
    exchange's publish_in grew with each sample: test_management's again-x saw 11 for 4)."""
    import threading
    from types import SimpleNamespace
    from actors.connection.stats import process_totals
    closed = cs.ChannelCounters("/")
    closed.published("x", 1)
    closed.confirmed_after(0.0001)
    retired: dict = {}
    cs.add_into(retired, closed)
    live = cs.ChannelCounters("/")
    live.published("x", 1)
    live.published("x", 1)
    live.confirmed_after(0.0001)
    ref = SimpleNamespace(actor_inbox=SimpleNamespace(actor=SimpleNamespace(
        core=SimpleNamespace(stats=live))))
    host = SimpleNamespace(lock=threading.Lock(), retired=retired, channels={"c": ref},
                           churn={"channels_closed": 1})
    for _ in range(3):  # every sample: the same counts
        total = process_totals(host)
        assert total["vhosts"]["/"]["exchanges"]["x"] == {"publish_in": 3, "publish_out": 3}
        assert total["latency_counts"][0] == 2 and total["channels_closed"] == 1
    assert retired["vhosts"]["/"]["exchanges"]["x"] == {"publish_in": 1, "publish_out": 1}
    assert retired["latency_counts"][0] == 1


# --- the queue lists come from the samples (issue 14 item 1) ------------------------------------
from actors.node.metadata_management import ManagementMixin  # noqa: E402


class _Metadata(ManagementMixin):
    """The metadata actor's state the management rows read, with a transport that records
    every message sent (a list that asked each queue would send one per queue)."""

    def __init__(self, queues: dict):
        self.queues = queues
        self.queue_stats = StatsTable(5000)
        self.sent: list = []
        self.transport = type("T", (), {"send": lambda _, *a: self.sent.append(a)})()

    @staticmethod
    def _member_name(member):
        return member or "leveret@here"


def test_2000_queues_are_listed_from_their_samples_without_asking_one():
    queues = {("/", f"q{i}"): {"vhost": "/", "name": f"q{i}", "address": f"ipc://w#q{i}",
                               "home": None, "mirrors": [], "synced": []}
              for i in range(2000)}
    queues[("/", "q7")]["address"] = None  # its worker restarts it: down
    node = _Metadata(queues)
    for i in range(1999):  # (q1999 has not sampled yet)
        node.queue_stats.put("/", f"q{i}", 1000, {
            "messages": i, "messages_ready": i, "messages_unacknowledged": 0, "consumers": 1,
            "head_message_timestamp": 1700000000 if i == 3 else None, "disk_reads": 2,
            "disk_writes": i})
    rows = {r["name"]: r for r in node._sampled_queue_rows()}
    assert node.sent == []  # nothing asked of any queue
    assert len(rows) == 2000
    assert (rows["q3"]["messages"], rows["q3"]["head_message_timestamp"],
            rows["q3"]["disk_writes"], rows["q3"]["state"]) == (3, 1700000000, 3, "running")
    assert rows["q4"]["head_message_timestamp"] is None and rows["q4"]["node"] == "leveret@here"
    assert rows["q7"]["state"] == "down" and "messages" not in rows["q7"]
    assert rows["q1999"]["state"] == "running" and "messages" not in rows["q1999"]
    # the API's queue: the sample's figures; a queue not sampled yet shows none
    q = api.queue_json(dict(queues[("/", "q3")], durable=True, auto_delete=False,
                            exclusive="", arguments={}), rows["q3"], [])
    assert (q["messages"], q["head_message_timestamp"], q["state"]) == (3, 1700000000,
                                                                        "running")
    assert "disk_reads" not in q  # RabbitMQ 3.10's queue JSON has none (format_queue_stats)
    fresh = api.queue_json(dict(queues[("/", "q1999")], durable=True, auto_delete=False,
                                exclusive="", arguments={}), rows["q1999"], [])
    assert "messages" not in fresh and "head_message_timestamp" not in fresh


def test_disk_reads_and_writes_with_rates_in_the_overview_only():
    t = StatsTable(1000)
    t.put("/", "a", 1000, {"disk_reads": 0, "disk_writes": 10})
    t.put("/", "a", 3000, {"disk_reads": 4, "disk_writes": 30})
    t.put("/", "b", 3000, {"disk_reads": 1, "disk_writes": None})
    a, b = t.disk_stats("/", "a", 3100), t.disk_stats("/", "b", 3100)
    assert a == {"disk_reads": 4, "disk_reads_details": {"rate": 2.0},
                 "disk_writes": 30, "disk_writes_details": {"rate": 10.0}}
    overview = api.vhost_message_stats([], {}, ["/"], [a, b])
    assert (overview["disk_reads"], overview["disk_writes"]) == (5, 30)
    assert overview["disk_writes_details"] == {"rate": 10.0}
    none = api.vhost_message_stats([], {}, ["/"], [])  # no queue: 0, as RabbitMQ's
    assert none["disk_reads"] == 0 and none["disk_reads_details"] == {"rate": 0.0}
    assert "disk_reads" not in api.vhost_message_stats([], {}, ["/"])  # a vhost's: none
    assert "disk_reads" not in t.message_stats("/", "a", 3100)  # a queue's: none


def test_samples_carry_the_head_timestamp_and_disk_counts_only_when_changed():
    c = QueueCounters()
    s = c.sample({"messages": 1, "head_message_timestamp": None, "disk_reads": 0,
                  "disk_writes": 1})
    assert s["head_message_timestamp"] is None and s["disk_writes"] == 1
    assert c.sample({"messages": 1, "head_message_timestamp": None, "disk_reads": 0,
                     "disk_writes": 1}) is None
    assert c.sample({"messages": 1, "head_message_timestamp": 5, "disk_reads": 0,
                     "disk_writes": 1})["head_message_timestamp"] == 5


def test_list_items_leave_out_what_only_an_object_s_own_answer_has():
    """RabbitMQ 3.10's lists (tests/data/rabbitmq-3.10-api/queues.json, exchanges.json,
    channels.json, connections.json) against the single objects' answers."""
    q = {"vhost": "/", "name": "q", "durable": True, "auto_delete": False, "exclusive": "",
         "arguments": {}}
    row = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0, "consumers": 0}
    listed, own = api.queue_json(q, row, [], details=False), api.queue_json(q, row, [])
    assert set(own) - set(listed) == {"consumer_details", "incoming", "deliveries"}
    x = {"vhost": "/", "name": "x", "type": "topic", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {}}
    assert set(api.exchange_json(x, [])) - set(api.exchange_json(x, [], details=False)) == {
        "incoming", "outgoing"}
    ch = {"name": "c (1)", "publishes": [], "deliveries": [], "consumers": []}
    assert set(api.channel_json(ch, details=True)) - set(api.channel_json(ch)) == {
        "publishes", "deliveries", "consumer_details"}
    conn = {"name": "c", "id": "1", "channel_list": [], "ssl_protocol": "", "ssl": False}
    assert api.connection_json(conn)["ssl_protocol"] == ""
    assert api.connection_json(conn, details=False)["ssl_protocol"] is None


def test_a_counter_that_went_down_was_reset_and_its_rate_is_from_the_new_baseline():
    """A restarted queue counts from 0 again: its next sample's counters are lower than the
    last one's. That is a reset, as rabbit_mgmt_metrics_collector's get_difference/3 takes a
    process it has no old stats of: the rate is the new count over the interval, never
    negative. Likewise a worker's totals and a channel's or connection's counts."""
    table = StatsTable(1000)
    table.put("/", "q", 1000, {"publish": 500, "deliver": 400, "ack": 400, "get_empty": 3})
    table.put("/", "q", 3000, {"publish": 20, "deliver": 10, "ack": 0, "get_empty": 3})
    ms = table.message_stats("/", "q", 3100)
    assert ms["publish"] == 20 and ms["publish_details"] == {"rate": 10.0}
    assert ms["deliver_details"] == {"rate": 5.0} and ms["ack_details"] == {"rate": 0.0}
    assert ms["get_empty_details"] == {"rate": 0.0}  # unchanged: no growth
    # deliver_get is derived (deliver + gets): it went down too, from 400 to 10
    assert ms["deliver_get_details"] == {"rate": 5.0}
    assert all(v["rate"] >= 0 for k, v in ms.items() if k.endswith("_details"))
    # the depth may fall (a queue drains): its rates of change stay signed
    table.put("/", "d", 1000, {"messages": 10})
    table.put("/", "d", 2000, {"messages": 4})
    assert table.depth_rates("/", "d", 2100)["messages_details"] == {"rate": -6.0}
    # a worker restarted under the same endpoint, and a connection's byte counts
    counts = cs.cluster_counts({"w": (3000, {"publish": 6}, Sample(1000, {"publish": 90}))}, {},
                               3100, 1000)
    assert counts[("publish",)] == (6, 3.0)
    assert cs.with_rates({"recv_oct": 100}, {"recv_oct": 5000}, 2000,
                         ("recv_oct",))["recv_oct_details"] == {"rate": 50.0}
