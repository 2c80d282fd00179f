"""actors/node/resources.py: the memory and disk alarms' decisions, with probes injected."""

from __future__ import annotations

import pytest

from actors.config import Config
from actors.node.resources import ResourceMonitor, parse_bytes

GB = 1024 ** 3


def monitor(rss=100, free=10 * GB, **cfg):
    figures = {"rss": rss, "free": free}
    mon = ResourceMonitor(Config(**cfg), "/data", rss=lambda pid: figures["rss"],
                          ram=lambda: 4 * GB, free=lambda path: figures["free"])
    return mon, figures


def test_rabbitmq_information_units():
    assert parse_bytes(1234) == 1234
    assert parse_bytes("50MB") == 50_000_000
    assert parse_bytes("1GiB") == parse_bytes("1G") == GB
    assert parse_bytes("2kB") == 2000 and parse_bytes("2KiB") == 2048
    for bad in ("lots", "-5", "5 parsecs", True):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_memory_alarm_over_the_node_and_its_workers_sets_and_clears():
    mon, fig = monitor(rss=GB // 2)  # 0.4 of 4 GiB = 1.6 GiB; 3 processes at 0.5 GiB each
    assert mon.check(0.0, [1, 2]) is None and mon.memory_used == GB
    assert mon.check(0.5, [1, 2, 3]) is None  # memory is looked at once a second
    assert mon.check(1.0, [1, 2, 3]) is None  # 1.5 GiB
    fig["rss"] = GB
    assert mon.check(2.0) == {"memory"}  # the last pids, 3 GiB
    fig["rss"] = 1
    assert mon.check(3.0) == frozenset()


def test_an_absolute_watermark_set_at_run_time_is_judged_at_the_next_check():
    mon, _ = monitor(rss=1000)
    assert mon.check(0.0, [1]) is None
    mon.set_memory_watermark(absolute=999)
    assert mon.check(0.01) == {"memory"} and mon.memory_limit() == 999
    mon.set_memory_watermark(relative=0.5)
    assert mon.check(0.02) == frozenset() and mon.memory_limit() == 2 * GB
    with pytest.raises(ValueError):
        mon.set_memory_watermark(relative=1.5)
    assert mon.memory_relative == 0.5


def test_disk_alarm_looks_again_sooner_near_the_limit():
    mon, fig = monitor(free=10 * GB)
    assert mon.check(0.0, [1]) is None
    assert mon.next_disk == 10.0  # far from 50 MB: every 10 s
    fig["free"] = 60_000_000
    assert mon.check(10.0) is None and mon.next_disk < 10.2  # 10 MB above it: soon
    fig["free"] = 40_000_000
    assert mon.check(mon.next_disk) == {"disk"}
    mon.set_disk_free_limit(relative=0.001)  # 4.3 MB
    assert mon.check(mon.next_disk) == frozenset()
    assert mon.status()["disk_free_limit"] == int(4 * GB * 0.001)
