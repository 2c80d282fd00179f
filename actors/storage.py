"""The node's one LMDB environment for messages, as each queue-worker process opens it.

Every durable queue's index (queue_index/) and the shared message store (msg_store/) live in one
environment under `<data_dir>/messages`, so that a publish (body into msg_store, publish record
into the index) and an ack (ack record, body released) are each one atomic transaction, and one
`env.sync()` makes everything written before it durable for every queue at once (group commit,
see actors/backing_queue.py). Queue workers are separate processes; LMDB serialises their
writers with its lock file.

The environment is opened with sync=False/metasync=False: a committed transaction survives
kill -9 of the process (it is in the OS page cache); only `sync()` makes it survive a power
loss, and only after `sync()` does a publisher get its confirm.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time

import lmdb

from msg_store import MsgStore
from queue_index import QueueIndex

_lock = threading.Lock()
_opened: dict[str, "Storage"] = {}  # path -> the process's Storage for it


class Storage:
    def __init__(self, config):
        path = os.path.join(config.data_dir, "messages")
        os.makedirs(path, exist_ok=True)
        self.config = config  # node configuration (storage settings)
        self.env = lmdb.open(  # the node's message environment, shared by every queue worker
            path, map_size=config.storage_map_size,
            max_dbs=len(MsgStore.db_names()) + len(QueueIndex.db_names()),
            max_readers=1024, sync=False, metasync=False, subdir=True)
        with self.env.begin(write=True) as txn:
            self.msg_store = MsgStore(self.env, txn=txn)  # refcounted bodies of large messages
        self.trimmed = 0.0  # monotonic time of the last maybe_trim
        self.map_range: tuple[int, int] | None = None  # (address, length) of the LMDB map

    @classmethod
    def of(cls, config) -> "Storage":
        """The process's Storage (LMDB wants one Environment per path per process)."""
        path = os.path.abspath(config.data_dir)
        with _lock:
            s = _opened.get(path)
            if s is None:
                s = _opened[path] = cls(config)
            return s

    def queue_index(self, vhost: str, name: str) -> QueueIndex:
        with self.env.begin(write=True) as txn:
            return QueueIndex(self.env, queue_id(vhost, name),
                              segment_entries=self.config.segment_entries,
                              max_journal_entries=self.config.max_journal_entries,
                              embed_msgs_below=self.config.embed_msgs_below, txn=txn)

    def sync(self) -> None:
        self.env.sync(True)

    def maybe_trim(self) -> None:
        """Drop this process's mapping of the LMDB file's pages (not the page cache) at most
        every TRIM_INTERVAL_S. LMDB reads through a read-only shared map, so every page a
        fold, an append or a page-in touched stays in the process's RSS until the kernel needs
        the memory; a deep queue would show gigabytes of RSS that are only cache. The map is
        read-only and file-backed: a later access faults the page back in from the cache."""
        now = time.monotonic()
        if now - self.trimmed < TRIM_INTERVAL_S:
            return
        self.trimmed = now
        if self.map_range is None:
            self.map_range = _mapping_of(os.path.join(self.env.path(), "data.mdb"))
        if self.map_range is not None and _libc is not None:
            start, length = self.map_range
            _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), MADV_DONTNEED)


TRIM_INTERVAL_S = 1.0
MADV_DONTNEED = 4
try:
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not Linux/glibc: no trimming
    _libc = None


def _mapping_of(path: str) -> tuple[int, int] | None:
    """(start, length) of this process's mapping of `path`, from /proc/self/maps."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5] == real:
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    return lo, hi - lo
    except OSError:
        pass
    return None


def queue_id(vhost: str, name: str) -> bytes:
    """A durable queue's key in the index: a digest of vhost and name (names may be 255 bytes
    each, index keys at most 400)."""
    return hashlib.blake2b(f"{vhost}\x1f{name}".encode(), digest_size=16).digest()
