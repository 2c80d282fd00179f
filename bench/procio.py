"""Bytes a broker wrote to storage, and the CPU it spent, while a scenario was measured.

`write_bytes` of /proc/PID/io counts the bytes a process caused to be sent to the storage
layer: a page-cache page is counted when the process dirties it (write(), pwrite(), or a store
through a shared writable map), once until writeback cleans it, and O_DIRECT writes as issued.
So it is what the broker makes the disk write (file data; not the file system's own journal),
whatever its write pattern. Summed over the broker's process and every descendant (Leveret's
node and its worker processes; RabbitMQ's start script, its beam.smp and helpers).

A caveat measured on this machine (Linux 6.18, ext4): the page cache keeps large folios (up to
64 KiB and more, made by readahead and by large writes), and write_bytes counts a whole folio
when one 4 KiB block of it is dirtied, while ext4 writes back only the dirty blocks. 5000
random 4 KiB pwrites into a file first read through mmap (LMDB's reads) counted 50 KB each in
write_bytes and wrote 4 KB each to the device. So the window also reads the sectors written to
the block device under the brokers' data directories (/sys/dev/block/M:m/stat): what the disk
really got, file system journal included, but from every process on the machine (run on a
quiet machine).

The CPU is utime + stime of /proc/PID/stat over the same tree at both instants: the cores the
broker's whole process tree used, so CPU per message compares brokers whatever their process
layout (Leveret's workers; RabbitMQ's beam.smp schedulers and helpers).

    window = IoWindow(root_pid, t_measure, t_end, path).start()   # samples at both instants
    ...
    window.result() -> {"write_bytes": int, "processes": int, "disk_bytes": int | None,
                        "cpu_seconds": float} | None
"""
from __future__ import annotations

import os
import tempfile
import threading
import time

from bench.refbroker import descendants


def write_bytes(pid: int) -> int | None:
    """write_bytes of /proc/PID/io; None if the process is gone or not readable."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _tree(root: int, read) -> dict:
    """pid -> read(pid) for root and every live descendant it could read (not None)."""
    out = {}
    for pid in [root] + [p for p, _ in descendants(root)]:
        v = read(pid)
        if v is not None:
            out[pid] = v
    return out


def tree_write_bytes(root: int) -> dict[int, int]:
    """pid -> write_bytes for root and every live descendant it could read."""
    return _tree(root, write_bytes)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of /proc/PID/stat in seconds; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[0] is the state (field 3); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(root: int) -> dict[int, float]:
    """pid -> CPU seconds for root and every live descendant it could read."""
    return _tree(root, cpu_seconds)


def disk_bytes(path: str | None = None) -> int | None:
    """Bytes written to the block device holding `path` (default: the temp directory, where
    the benchmark's brokers keep their data) since boot: sectors written x 512."""
    try:
        dev = os.stat(path or tempfile.gettempdir()).st_dev
        with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat") as f:
            return int(f.read().split()[6]) * 512
    except (OSError, IndexError, ValueError):
        return None


def delta(before: dict, after: dict):
    """Bytes written (or CPU spent) between two samples: a process that started in between
    counts from 0; one that ended in between is lost (its count went with it), so a broker
    whose processes come and go is under-counted, never over-counted."""
    return sum(v - before.get(pid, 0) for pid, v in after.items())


class IoWindow(threading.Thread):
    """Samples the process tree's write_bytes and CPU at t_from and at t_until
    (time.monotonic())."""

    def __init__(self, root: int, t_from: float, t_until: float, path: str | None = None):
        super().__init__(daemon=True, name="bench-io-window")
        self.root, self.t_from, self.t_until = root, t_from, t_until
        self.path = path  # a directory on the brokers' disk (default: the temp directory)
        self.before: dict[int, int] | None = None  # sample at t_from
        self.after: dict[int, int] | None = None  # sample at t_until
        self.disk: list = []  # disk_bytes() at t_from and t_until
        self.cpu: list = []  # tree_cpu_seconds() at t_from and t_until
        self.cancelled = threading.Event()

    def start(self) -> "IoWindow":
        super().start()
        return self

    def run(self) -> None:
        for t, slot in ((self.t_from, "before"), (self.t_until, "after")):
            if self.cancelled.wait(max(0.0, t - time.monotonic())):
                return
            setattr(self, slot, tree_write_bytes(self.root))
            self.cpu.append(tree_cpu_seconds(self.root))
            self.disk.append(disk_bytes(self.path))

    def result(self, timeout: float = 5.0) -> dict | None:
        self.join(timeout)
        if self.before is None or self.after is None or not self.after:
            return None
        disk = (self.disk[1] - self.disk[0]
                if len(self.disk) == 2 and None not in self.disk else None)
        return {"write_bytes": delta(self.before, self.after), "processes": len(self.after),
                "disk_bytes": disk, "cpu_seconds": delta(self.cpu[0], self.cpu[1])}

    def cancel(self) -> None:
        self.cancelled.set()
