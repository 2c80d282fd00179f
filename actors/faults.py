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

The same file can plant bugs, each in the queues it names, so that a test can show the
lifecycle job (spark_analysis/) naming them:

    {"bugs": {"drop_synced_at_recovery": ["q1"], "confirm_before_sync": ["q2"],
              "deliver_twice": ["q3"], "lose_dead_lettered_copy": ["q4"]}}

- drop_synced_at_recovery: the backing queue's recovery leaves out the first message it read
  back from before the restart (synced, confirmed: a durability bug);
- confirm_before_sync: the backing queue confirms a persistent message as soon as it is given
  it, before any sync (and never reports it synced);
- deliver_twice: the queue hands a message to its consumer twice, the second time without the
  redelivered flag;
- lose_dead_lettered_copy: a dead-lettered copy is announced (`dead_letter_published`) and
  never sent to its target queues.

The same file can crash actors on purpose, as RabbitMQ's crashing_queues_SUITE kills queue
processes, so that a test sees their supervisor restart them (or give up):

    {"crash": [{"actor": "queue", "vhost": "/", "name": "q1", "times": 1, "on": "Publish"}]}

each entry crashes the named actor ("queue": a Queue actor, "mirror": a Mirror, "metadata":
the node's metadata actor, which names no queue) with `InjectedCrash` when it handles a
message (of the class named by `on`, when given), `times` times in all in this process.

`bug(name, queue, host)` answers for the process (host: the node's listen address); it
refuses to run (SystemExit) when the variable is set and that host is not a loopback address.
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

CRASHABLE = ("queue", "mirror", "metadata")


class InjectedCrash(Exception):
    """A test-only crash planted by the fault file: the actor's supervisor must handle it."""


BUGS = ("drop_synced_at_recovery", "confirm_before_sync", "deliver_twice",
        "lose_dead_lettered_copy")


class _Bugs:
    """The bugs the fault file plants (name -> queue names), read again when it changes."""

    def __init__(self):
        self.path = ""  # the file read last
        self.mtime = None  # its mtime_ns then
        self.checked = -CHECK_S  # monotonic time of the last look at it
        self.planted: dict = {}  # bug -> frozenset of queue names
        self.crash: list = []  # the file's crash entries (dicts)
        self.crashed: dict = {}  # (actor, vhost, name) -> crashes injected in this process
        self.lock = threading.Lock()

    def get(self, path: str) -> dict:
        self._load(path)
        return self.planted

    def crashes(self, path: str) -> list:
        self._load(path)
        return self.crash

    def _load(self, path: str) -> None:
        now = time.monotonic()
        with self.lock:
            if path == self.path and now - self.checked < CHECK_S:
                return
            self.checked = now
            try:
                mtime = os.stat(path).st_mtime_ns
            except OSError:
                mtime = None
            if path == self.path and mtime == self.mtime:
                return
            self.path, self.mtime, planted, crash = path, mtime, {}, []
            if mtime is not None:
                try:
                    with open(path) as f:
                        doc = json.load(f)
                    wanted, crash = doc.get("bugs", {}), list(doc.get("crash", []))
                except (OSError, ValueError) as e:
                    log.warning("fault injection: cannot read %s: %s", path, e)
                    wanted = {}
                for name, queues in wanted.items():
                    if name not in BUGS:
                        raise SystemExit(f"leveret: unknown bug {name!r} in {path} "
                                         f"(known: {', '.join(BUGS)})")
                    planted[name] = frozenset(queues)
            if planted != self.planted:
                log.warning("fault injection: bugs planted: %s", "; ".join(
                    f"{b} in {', '.join(sorted(q))}" for b, q in planted.items()) or "none")
            for c in crash:
                if c.get("actor") not in CRASHABLE:
                    raise SystemExit(f"leveret: unknown actor {c.get('actor')!r} to crash in "
                                     f"{path} (known: {', '.join(CRASHABLE)})")
            if crash != self.crash:
                log.warning("fault injection: crashes planted: %s", crash or "none")
            self.planted = planted
            self.crash = crash


_bugs = _Bugs()
_PATH = os.environ.get(ENV, "")  # read once: `bug` is asked on the delivery path


def bug(name: str, queue: str, host: str) -> bool:
    """Is the test-only bug `name` planted in `queue`? False unless LEVERET_FAULT_INJECTION is
    set; SystemExit when it is and `host` (the node's listen address) is not loopback."""
    path = _PATH
    if not path:
        return False
    from_env(host)  # (refuses a node that is not on loopback)
    return queue in _bugs.get(path).get(name, ())


def crash(actor: str, vhost: str, name: str, msg, host: str) -> None:
    """Raise InjectedCrash when the fault file plants a crash of this actor (`actor`, and for
    a queue or mirror its `vhost` and `name`) on `msg` that has not yet been used up; nothing
    unless LEVERET_FAULT_INJECTION is set. SystemExit when it is and `host` is not loopback."""
    path = _PATH
    if not path:
        return
    entries = _bugs.crashes(path)
    if not entries:
        return
    kind = type(msg).__name__
    for c in entries:
        if c.get("actor") != actor or c.get("on", kind) != kind:
            continue
        if actor != "metadata" and (c.get("vhost", "/"), c.get("name")) != (vhost, name):
            continue
        key = (actor, vhost, name)
        with _bugs.lock:
            done = _bugs.crashed.get(key, 0)
            if done >= int(c.get("times", 1)):
                return
            _bugs.crashed[key] = done + 1
        from_env(host)  # (refuses a node that is not on loopback)
        raise InjectedCrash(f"injected crash {done + 1} of {actor} "
                            f"{name or ''} on {kind} (test-only fault file)")
