"""Test-only fault injection: network partitions between the nodes of a cluster on loopback.

No RabbitMQ counterpart (its test suites partition nodes with `inet_tcp_proxy`, a distribution
carrier that drops traffic between chosen nodes, in the same spirit). Enabled only when the
environment variable LEVERET_FAULT_INJECTION names a JSON file, which a test writes:

    {"cut": [["127.0.0.2", "127.0.0.3"], ["127.0.0.2", "127.0.0.4"]]}

each pair two cluster hosts (the host part of each node's `cluster_address`; a test gives every
node a loopback address of its own) whose links are cut, both ways: every process of a node
drops the ZeroMQ messages it would send to a process of the other (actors/transport.py), and
the node's Raft transport drops its connection to the other and refuses new ones
(actors/node/cluster.py). Rewriting the file (atomically) changes the cuts; an empty list, or no
file, heals them. A process notices within CHECK_S.

A process started with the variable set logs that it is, and refuses to start when its cluster
address is not a loopback address: no production node can be partitioned by a stray variable.

The same file may skew the clock of some processes, to stand for hosts whose clocks disagree
(the lifecycle events' hybrid clock must order their events all the same, actors/hlc.py):

    {"clock_skew_ms": {"queue": -5000}}

keys are process names or their kind ("queue" for queue-0, queue-1, ...); read once, when the
process starts its event log, and only when the node listens on a loopback address.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import threading
import time

log = logging.getLogger("leveret.faults")

ENV = "LEVERET_FAULT_INJECTION"
CHECK_S = 0.05  # how often a process looks at the file (at most, and only while it sends)


class Faults:
    """One process's view of the cuts: which hosts it must not talk to."""

    def __init__(self, path: str, host: str):
        self.path = path  # the JSON file the test writes
        self.host = host  # this process's cluster host
        self.cut_hosts: frozenset = frozenset()  # hosts cut from this one
        self._checked = -CHECK_S  # monotonic time of the last look at the file
        self._mtime = None  # its mtime_ns then (None: no file)
        self._lock = threading.Lock()

    def cut(self, host: str) -> bool:
        """Is the link from this process's host to `host` cut?"""
        now = time.monotonic()
        if now - self._checked >= CHECK_S:
            self._reload(now)
        return host in self.cut_hosts

    def cut_endpoint(self, endpoint: str) -> bool:
        """A ZeroMQ endpoint `tcp://host:port` (ipc:// ones are never cut: same node)."""
        if not endpoint.startswith("tcp://"):
            return False
        return self.cut(endpoint[6:].rpartition(":")[0])

    def _reload(self, now: float) -> None:
        with self._lock:
            if now - self._checked < CHECK_S:
                return
            self._checked = now
            try:
                mtime = os.stat(self.path).st_mtime_ns
            except OSError:
                mtime = None
            if mtime == self._mtime:
                return
            self._mtime = mtime
            cut = set()
            if mtime is not None:
                try:
                    with open(self.path) as f:
                        pairs = json.load(f).get("cut", [])
                except (OSError, ValueError) as e:
                    log.warning("fault injection: cannot read %s: %s", self.path, e)
                    return
                for a, b in pairs:
                    if a == self.host:
                        cut.add(b)
                    elif b == self.host:
                        cut.add(a)
            if frozenset(cut) != self.cut_hosts:
                log.warning("fault injection: links of %s cut to %s", self.host,
                            ", ".join(sorted(cut)) or "nobody (healed)")
            self.cut_hosts = frozenset(cut)


def from_env(host: str) -> Faults | None:
    """The process's Faults when LEVERET_FAULT_INJECTION is set, else None. SystemExit when it
    is set and `host` (this node's cluster host) is not a loopback address."""
    path = os.environ.get(ENV, "")
    if not path:
        return None
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise SystemExit(f"leveret: {ENV} is set (test-only fault injection) but the cluster "
                         f"address {host} is not a loopback address: refusing to start")
    global _announced
    if not _announced:
        _announced = True
        log.warning("fault injection enabled (%s=%s): for tests only", ENV, path)
    return Faults(path, host)


def clock_skew_ns(process: str, host: str) -> int:
    """The test-only clock skew of this process (0 when LEVERET_FAULT_INJECTION is not set or
    names none for it). SystemExit when one is set and `host` is not a loopback address."""
    path = os.environ.get(ENV, "")
    if not path:
        return 0
    try:
        with open(path) as f:
            skews = json.load(f).get("clock_skew_ms") or {}
    except (OSError, ValueError):
        return 0
    ms = skews.get(process, skews.get(process.partition("-")[0]))
    if not ms:
        return 0
    from_env(host)  # (the loopback check, and the warning that faults are on)
    log.warning("fault injection: this process's clock runs %+d ms off", ms)
    return int(ms) * 1_000_000


_announced = False  # this process logged that fault injection is on
