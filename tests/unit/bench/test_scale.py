"""bench/scale.py's pure helpers (no broker)."""
import os

from bench import scale


def test_split_spec_only_when_named():
    assert scale.split_spec("scale") == ("", True)
    assert scale.split_spec("a, scale ,c") == ("a,c", True)
    assert scale.split_spec("default") == ("default", False)
    assert scale.split_spec("all") == ("all", False)
    assert scale.split_spec("a,c") == ("a,c", False)


def test_queue_names_are_zero_padded_from_one():
    assert scale.queue_name(0, 10_000) == "scale-q-00001"
    assert scale.queue_name(9_999, 10_000) == "scale-q-10000"
    assert scale.queue_name(0, 500) == "scale-q-00001"
    assert scale.queue_name(0, 123_456) == "scale-q-000001"
    names = [scale.queue_name(i, 10_000) for i in range(10_000)]
    assert len(set(names)) == 10_000 and names == sorted(names)


def test_sample_indices_spread_and_bounded():
    s = scale.sample_indices(10_000, 100)
    assert len(s) == 100 and s[0] == 0 and s[-1] == 9_999 and s == sorted(set(s))
    assert scale.sample_indices(50, 100) == list(range(50))
    assert scale.sample_indices(10, 1) == [0]
    assert scale.sample_indices(10, 0) == []
    assert scale.sample_indices(0, 100) == []


def test_split_counts():
    assert scale.split_counts(5_000, 4) == [1_250] * 4
    assert scale.split_counts(10, 4) == [3, 3, 2, 2]
    assert scale.split_counts(2, 4) == [1, 1]
    assert scale.split_counts(0, 4) == []


def test_client_procs_follow_the_descriptor_limit():
    assert scale.client_procs_needed(5_000, 4, 20_000) == 4
    assert scale.client_procs_needed(5_000, 1, 1_024) == 6      # 960 per process
    assert scale.client_procs_needed(3, 4, 1_024) == 3
    assert scale.client_procs_needed(0, 4, 1_024) == 0


def test_per_item_kb():
    assert scale.per_item_kb(1_000, 3_000, 100) == 20.0
    assert scale.per_item_kb(3_000, 1_000, 100) == -20.0        # a shrink is shown as such
    assert scale.per_item_kb(None, 1_000, 100) is None
    assert scale.per_item_kb(1_000, 2_000, 0) is None


def test_parse_status():
    text = "Name:\tpython\nVmPeak:\t  9 kB\nVmRSS:\t  12345 kB\nThreads:\t7\n"
    assert scale.parse_status(text) == {"rss_kb": 12345, "threads": 7}
    assert scale.parse_status("Name:\tzombie\nThreads:\t1\n") == {"threads": 1}


def test_process_usage_counts_this_process():
    u = scale.process_usage([os.getpid()])
    assert u["processes"] >= 1 and u["threads"] >= 1 and u["rss_kb"] > 0


def test_error_lines_pick_levels():
    text = ("2026-11-24 10:00:00,000 INFO [node] leveret.node: up\n"
            "2026-11-24 10:00:01,000 ERROR [conn0] leveret.reader: boom\n"
            "2026-11-24 10:00:02,000 WARNING [q0] leveret.queue: slow\n"
            "2026-11-24 10:00:03.000 [error] <0.1.0> closing AMQP connection\n")
    assert len(scale.error_lines(text)) == 2
    assert len(scale.error_lines(text, scale.WARNING_MARKERS)) == 1


def test_table_ratio_and_missing_figures():
    doc = {"options": {"queues": 100, "connections": 10, "sample": 100},
           "brokers": [
               {"broker": "leveret", "label": "Leveret",
                "queues": {"declared": 100, "declare_s": 2.0, "rss_per_queue_kb": 20.0,
                           "before": {"rss_kb": 1024, "threads": 10},
                           "log_errors": {"count": 0, "warnings": 2}},
                "connections": {"errors": ["leveret did not start: x"]}},
               {"broker": "rabbitmq", "label": "RabbitMQ 3.10.8",
                "queues": {"declared": 100, "declare_s": 1.0, "rss_per_queue_kb": 40.0}}]}
    t = scale.table(doc)
    assert "| Leveret / RabbitMQ 3.10.8 |" in t.splitlines()[0]
    assert "| 100 queues | queues declared | 100 | 100 | 1.00x |" in t
    assert "| declare, s | 2.00 | 1.00 | 2.00x |" in t
    assert "| RSS per queue, KB | 20.00 | 40.00 | 0.50x |" in t
    assert "| sample of 100: messages got back | n/a | n/a | n/a |" in t
    assert "| error / warning lines in the broker's log | 0 / 2 | n/a |  |" in t
    assert "| 10 connections | connections opened | n/a | n/a | n/a |" in t
    assert "did not start" in scale.errors_text(doc)
    assert scale.log_text(doc) == ""


def test_table_single_broker_has_no_ratio():
    doc = {"options": {"queues": 5, "connections": 0},
           "brokers": [{"broker": "leveret", "label": "Leveret", "queues": {"declared": 5}}]}
    lines = scale.table(doc).splitlines()
    assert lines[0] == "| part | figure | Leveret |"
    assert all("connections" not in line for line in lines)


def test_process_kind():
    assert scale.process_kind(b"/v/bin/python\0-m\0actors.worker.process\0--kind\0queue\0") == "queue"
    assert scale.process_kind(b"/usr/lib/erlang/erts-12.2/bin/beam.smp\0-W\0w\0") == "beam.smp"
    # a worker forked by the launcher (its title one string) and the launcher itself
    assert scale.process_kind(b"/v/bin/python -m actors.worker.process --kind conn --index 1\0") == "conn"
    assert scale.process_kind(b"/v/bin/python3\0-m\0actors.worker.launcher\0--fd\0005\0") == \
        "launcher"
    assert scale.process_kind(b"") == "?"
