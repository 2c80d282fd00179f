"""A node's own figures for the management API's /api/nodes (rabbit_mgmt_external_stats'
role): what the node's supervision thread measures of the node process and its workers every
collect_statistics_interval (`measure`), and the table of every member's last two samples the
metadata actor keeps (`NodeTable`), from which /api/nodes answers with `*_details.rate`.

Every member measures itself and sends its sample (`NodeStats`) to the metadata actor of every
member up, as queues send theirs: a member's row in any node's /api/nodes has that member's own
figures and alarms, and no request asks another node anything.

The probes read /proc (Linux), as rabbit_mgmt_external_stats reads /proc/PID/fd; each is a
function of the pids, injected in tests.
"""

from __future__ import annotations

import os
import resource

from actors.core import samples
from actors.core.queue_stats import increase

# figures of a sample shown with `<key>_details: {"rate": per second}` (RabbitMQ 3.10's node
# keys with details: rabbit_mgmt_format's node stats)
RATED = ("mem_used", "fd_used", "sockets_used", "proc_used", "disk_free", "gc_num",
         "gc_bytes_reclaimed", "context_switches", "io_read_count", "io_read_bytes",
         "io_read_avg_time", "io_write_count", "io_write_bytes", "io_write_avg_time",
         "io_sync_count", "io_sync_avg_time", "io_seek_count", "io_seek_avg_time",
         "io_reopen_count", "mnesia_ram_tx_count", "mnesia_disk_tx_count",
         "msg_store_read_count", "msg_store_write_count", "queue_index_read_count",
         "queue_index_write_count", "connection_created", "connection_closed",
         "channel_created", "channel_closed", "queue_declared", "queue_created",
         "queue_deleted")
# of those, the counters (a rate is their growth; one that went down was reset); the others
# are gauges (a rate is their change, signed, as RabbitMQ's for mem_used or disk_free)
COUNTERS = frozenset(RATED) - {"mem_used", "fd_used", "sockets_used", "proc_used",
                                "disk_free"}


def _tasks(pid: int) -> list:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def fds_open(pids) -> int:
    """File descriptors open in these processes (the kernel's count: /proc/PID/fd)."""
    n = 0
    for pid in pids:
        try:
            n += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            pass
    return n


def threads(pids) -> dict:
    """Over every OS thread of these processes: how many there are, how many are running or
    ready to run (state R: the run queue), and their context switches (voluntary and not)."""
    count = runnable = switches = 0
    for pid in pids:
        for tid in _tasks(pid):
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    text = f.read()
            except OSError:
                continue
            count += 1
            for line in text.splitlines():
                key, _, value = line.partition(":")
                if key == "State":
                    runnable += value.split()[0] == "R"
                elif key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                    switches += int(value)
    return {"threads": count, "runnable": runnable, "context_switches": switches}


IO_KEYS = {"read_bytes": "io_read_bytes", "write_bytes": "io_write_bytes",
           "syscr": "io_read_count", "syscw": "io_write_count"}


def io_counts(pids) -> dict:
    """What these processes read and wrote (/proc/PID/io): bytes from and to storage
    (read_bytes, write_bytes: what reached the block layer; page cache hits are no reads)
    and read and write system calls (syscr, syscw: sockets and pipes included; LMDB reads
    its mapped files without any)."""
    out = dict.fromkeys(IO_KEYS.values(), 0)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in IO_KEYS:
                        out[IO_KEYS[key]] += int(value)
        except (OSError, ValueError):
            pass
    return out


def sync_avg_ms(before: tuple | None, count: int, time_us: int) -> float:
    """io_sync_avg_time: milliseconds per sync over the syncs since the previous sample
    (`before`: its (count, time_us)), as rabbit_mgmt_external_stats divides the time's growth
    by the count's; 0.0 when none was done since."""
    done = count - (before[0] if before else 0)
    took = time_us - (before[1] if before else 0)
    return round(took / done / 1000.0, 3) if done > 0 and took >= 0 else 0.0


def thread_limit() -> int:
    """How many threads the node's user may run: RLIMIT_NPROC (Linux counts threads), or the
    kernel's threads-max when that is unlimited."""
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if soft != resource.RLIM_INFINITY:
        return soft
    try:
        with open("/proc/sys/kernel/threads-max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def measure(pids, fds=fds_open, tasks=threads, io=io_counts) -> dict:
    """What the supervision thread measures of the node process and its workers (`pids`)."""
    t = tasks(pids)
    return {"fd_used": fds(pids), "proc_used": t["threads"], "run_queue": t["runnable"],
            "context_switches": t["context_switches"], **io(pids)}


class NodeTable:
    """Every member's last two samples."""

    def __init__(self, interval_ms: int):
        self.interval_ms = interval_ms
        self.samples: dict[str, samples.Sampled] = {}  # member name -> its last two

    def put(self, node: str, at_ms: int, sample: dict) -> None:
        samples.put(self.samples, node, at_ms, sample)

    def row(self, node: str, now_ms: int) -> dict | None:
        """The member's last sample with `<key>_details.rate` beside each RATED key (per
        second between its last two samples; 0 once the last is older than two intervals: the
        member is gone or its metadata actor stuck), None before its first sample."""
        entry = self.samples.get(node)
        if entry is None:
            return None
        (t1, s1), prev = entry.last, entry.previous
        out = dict(s1)
        quiet = now_ms - t1 > 2 * self.interval_ms
        for key in RATED:
            if key not in s1:
                continue
            rate = 0.0
            if prev is not None and not quiet and t1 > prev.at_ms:
                before = prev.stats.get(key, 0)
                change = increase(before, s1[key]) if key in COUNTERS else s1[key] - before
                rate = round(change * 1000.0 / (t1 - prev.at_ms), 1)
            out[f"{key}_details"] = {"rate": rate}
        return out
