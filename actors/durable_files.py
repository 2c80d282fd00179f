"""Small files made durable: written, renamed and unlinked with the data and the directory entry
on disk before the call returns (the Raft journal's dumps, a quorum queue member's log marker);
and the process's count of its syncs (these, and the message store's durable commits), which
/api/nodes shows as io_sync_count and io_sync_avg_time."""

from __future__ import annotations

import os
import threading
import time


class SyncCounts:
    """The process's syncs to disk and the time they took (file_handle_cache_stats' io_sync
    count and time in RabbitMQ): read by the process's statistics sampler."""

    def __init__(self):
        self.lock = threading.Lock()  # backing queues and the Raft thread sync concurrently
        self.count = 0  # syncs done
        self.time_us = 0  # microseconds they took, in all

    def add(self, seconds: float) -> None:
        with self.lock:
            self.count += 1
            self.time_us += int(seconds * 1_000_000)

    def totals(self) -> dict:
        with self.lock:
            return {"io_sync_count": self.count, "io_sync_time_us": self.time_us}


SYNCS = SyncCounts()  # this process's


def fsync(fd: int) -> None:
    """os.fsync, counted and timed in SYNCS."""
    t0 = time.perf_counter()
    os.fsync(fd)
    SYNCS.add(time.perf_counter() - t0)


def fsync_dir(path: str) -> None:
    """fsync the directory holding `path` (a rename or an unlink in it reaches the disk)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def atomic_replace(tmp: str, final: str) -> None:
    """os.replace with the data and the rename on disk."""
    with open(tmp, "rb+") as f:
        fsync(f.fileno())
    os.replace(tmp, final)
    fsync_dir(final)
