"""The node's one LMDB environment for messages, as each queue-worker process opens it.

Every durable queue's index (queue_index/) and the shared message store (msg_store/) live in one
environment under `<data_dir>/messages`, so that a publish (body into msg_store, publish record
into the index) and an ack (ack record, body released) are atomic, and one flush transaction
writes what every backing queue of the process staged (group commit, see
actors/queue/backing_queue.py). Queue workers are separate processes; LMDB serialises their
writers with its lock file.

The environment is opened with LMDB's durable defaults (sync=True, metasync=True): a commit
writes and fdatasyncs the data pages, then writes and syncs the meta page that points at them,
so the file on disk is at every instant either the previous commit or the new one, whatever an
OS crash or power cut keeps of the unsynced writes, and a commit that returned survives both.
That costs two fdatasyncs per write transaction, so the backing queues write few of them: they
stage their publishes and acks and `flush()` writes everything the process's backing queues
staged in one transaction (group commit; docs/storage.md has the measurements).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import threading
import time

import logging

import lmdb

from actors.durable_files import SYNCS
from msg_store import MsgStore
from queue_index import QueueIndex

from actors.store import stream_log

log = logging.getLogger("leveret.storage")
_lock = threading.Lock()
_opened: dict[str, "Storage"] = {}  # path -> the process's Storage for it


class Storage:
    def __init__(self, config):
        path = os.path.join(config.data_dir, "messages")
        os.makedirs(path, exist_ok=True)
        self.config = config  # node configuration (storage settings)
        self.env = lmdb.open(  # the node's message environment, shared by every queue worker
            path, map_size=config.storage_map_size,
            max_dbs=len(MsgStore.db_names()) + len(QueueIndex.db_names()) + 1 +
            len(stream_log.DB_NAMES),
            max_readers=1024, sync=True, metasync=True, subdir=True, readahead=False,
            mode=0o600)  # files: this user only (docs/security.md)
        with self.env.begin(write=True) as txn:
            self.msg_store = MsgStore(self.env, txn=txn)  # refcounted bodies of large messages
            self.clean = self.env.open_db(b"clean", txn=txn)  # queue_id -> stopped cleanly
            # streams' logs (actors/store/stream_log.py): messages, chunks, segments
            self.stream_dbs = [self.env.open_db(name, txn=txn) for name in stream_log.DB_NAMES]
            self.dbs = [self.env.open_db(name, txn=txn)  # every database, for usage()
                        for name in MsgStore.db_names() + QueueIndex.db_names()] + \
                [self.clean] + self.stream_dbs
        self.alarm = False  # the disk alarm is on: persistent publishes are refused
        self.checked = 0.0  # monotonic time of the last usage check
        self.used = 0.0  # the last usage() seen
        self.touched = False  # a transaction ran since the last trim(): map pages to drop
        self.map_range: tuple[int, int] | None = None  # (address, length) of the LMDB map
        self.dirty: list = []  # backing queues with staged writes, for the next flush()
        self.flush_lock = threading.Lock()  # one flush at a time
        self.flushes = 0  # flush transactions committed (tests, docs/storage.md figures)

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
        with self.begin(write=True) as txn:
            return QueueIndex(self.env, queue_id(vhost, name),
                              segment_entries=self.config.segment_entries,
                              max_journal_entries=self.config.max_journal_entries,
                              embed_msgs_below=self.config.embed_msgs_below, txn=txn)

    def stage(self, bq) -> None:
        """A backing queue has writes for the next flush()."""
        if not bq.staged:
            bq.staged = True
            self.dirty.append(bq)

    def unstage(self, bq) -> None:
        if bq.staged:
            bq.staged = False
            self.dirty.remove(bq)

    def flush(self) -> bool:
        """Write what every staged backing queue holds in one transaction, durable when this
        returns (group commit: one pair of fdatasyncs for every queue of the process); each
        is told `flushed(ok)`. False when the store (map) was full: nothing was written."""
        with self.flush_lock:
            members, self.dirty = self.dirty, []
            if not members:
                return True
            for bq in members:
                bq.staged = False
            failed = []  # backing queues whose writes raised: taken out, refused
            while True:
                bq = None
                try:
                    if members:
                        with self.begin(write=True) as txn:
                            for bq in members:
                                bq.write_staged(txn)
                        self.flushes += 1
                    ok = True
                    break
                except lmdb.MapFullError:
                    ok = False
                    break
                except Exception:
                    if bq is None:
                        raise
                    # an index refusing an entry (a bug, never expected): one queue's failure
                    # must not abort the group's transaction for good and leave every queue
                    # of the process without its confirms; the others are written again
                    log.exception("queue '%s' in vhost '%s': its index refused this flush's "
                                  "writes; its publishes are refused, the other queues' "
                                  "written", bq.qname, bq.vhost)
                    members.remove(bq)
                    failed.append(bq)
            acked = [bq for bq in members if bq.pending_acks]
            if not ok and acked:
                # a full map: the acks alone first (deleting needs pages too, copy-on-write,
                # but frees more than it takes), then the publishes in what they freed
                try:
                    with self.begin(write=True) as txn:
                        for bq in acked:
                            bq.write_staged(txn, publishes=False)
                    self.flushes += 1
                    for bq in acked:
                        bq.acks_written()
                    with self.begin(write=True) as txn:
                        for bq in members:
                            bq.write_staged(txn, acks=False)
                    ok = True
                    self.flushes += 1
                except lmdb.MapFullError:
                    pass
            elif ok:
                for bq in acked:
                    bq.acks_written()
            if not ok:
                log.error("message store full (storage_map_size=%d bytes in %s): refusing "
                          "persistent messages until space is freed",
                          self.config.storage_map_size, self.env.path())
        for bq in members:
            bq.flushed(ok)
        for bq in failed:
            bq.flushed(False)  # its publishes refused (nacked); its acks wait for the next flush
        return ok

    def usage(self) -> float:
        """Fraction of the map in use: pages of every database (free pages excluded)."""
        with self.begin() as txn:
            st = [txn.stat(db) for db in self.dbs] + [txn.stat()]
        pages = sum(s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"] for s in st)
        return pages * st[-1]["psize"] / self.config.storage_map_size

    def disk_alarm(self, staged: int = 0) -> bool:
        """rabbit's disk alarm for the message store: on above ALARM_HIGH of the map in use,
        off again below ALARM_LOW. Refusing publishes before LMDB itself is full keeps room
        for acks, which need pages too (copy-on-write), so space can come back. `staged`:
        body bytes staged for the next flush (not in the map yet), counted as if written."""
        now = time.monotonic()
        if self.used >= ALARM_CHECK_ALWAYS or now - self.checked >= ALARM_CHECK_S:
            self.checked = now
            self.used = self.usage()
        used = self.used + staged / self.config.storage_map_size
        if used >= ALARM_HIGH and not self.alarm:
            self.alarm = True
            log.error("message store full: %.0f%% of storage_map_size (%d bytes) in %s is "
                      "used; persistent messages are refused until consumers free space",
                      used * 100, self.config.storage_map_size, self.env.path())
        elif used < ALARM_LOW and self.alarm:
            self.alarm = False
            log.warning("message store has room again (%.0f%% used)", used * 100)
        return self.alarm

    def staged_bytes(self) -> int:
        """Body bytes the process's backing queues staged for the next flush."""
        return sum(bq.pending_bytes for bq in self.dirty)

    def mark_clean(self, qid: bytes) -> None:
        """The queue stopped cleanly: its deliver records are complete."""
        with self.begin(write=True) as txn:  # durable at commit
            txn.put(qid, b"1", db=self.clean)

    def was_clean(self, qid: bytes) -> bool:
        """Whether the queue's last run ended cleanly (and forget it: this run is not over)."""
        with self.begin(write=True) as txn:
            return txn.pop(qid, db=self.clean) is not None

    def drop_stale(self, keep: set) -> list:
        """Delete the index of every queue whose id is not in `keep` (queues that are no longer
        defined: exclusive durable ones at a restart, deleted while down), releasing their
        bodies. Returns the ids dropped."""
        with self.begin() as txn:
            stale = [q for q in QueueIndex.queue_ids(self.env, txn) if q not in keep]
        for qid in stale:
            with self.begin(write=True) as txn:
                index = QueueIndex(self.env, qid, txn=txn)
                txn.pop(qid, db=self.clean)
            self.delete_index(index)
            try:  # its ack log (actors/queue/backing_queue.py)
                os.unlink(os.path.join(self.env.path(), "acks", qid.hex()))
            except FileNotFoundError:
                pass
        stale += stream_log.drop_stale(self.env, self.stream_dbs, self.begin, keep)
        return stale

    def delete_index(self, index: QueueIndex) -> None:
        """Delete a queue's index and release its bodies, DELETE_STEP records per transaction
        (durable each), the map trimmed after each: a deep queue's index in one transaction
        held every page of it dirty and mapped (a 1M-message queue's delete peaked at 2 GB
        of RSS). A crash between steps leaves a part that the next delete removes (the node
        drops the indexes of queues no longer defined at boot)."""
        done = False
        while not done:
            with self.begin(write=True) as txn:
                released, done = index.delete_some(txn, DELETE_STEP)
                if released:
                    self.msg_store.release(txn, released)
            self.trim()

    def begin(self, write: bool = False):
        """A transaction of the environment; the map pages it touches are dropped by the next
        trim(). A write transaction's commit is counted as a sync (durable_files.SYNCS)."""
        self.touched = True
        return _durable(self.env) if write else self.env.begin()

    def io_totals(self) -> dict:
        """Message bodies this process read from and wrote to msg_store (RabbitMQ's
        msg_store_read_count / msg_store_write_count)."""
        return {"msg_store_read_count": self.msg_store.reads,
                "msg_store_write_count": self.msg_store.writes}

    def trim(self) -> None:
        """Drop this process's mapping of the LMDB file's pages (not the page cache) after
        transactions ran (the backing queue calls this after each message it handled). LMDB
        reads through a read-only shared map, so every page a fold, an append or a page-in
        touched stays in the process's RSS until the kernel needs the memory; a deep queue
        would show gigabytes of RSS that are only cache, and what one transaction touches is
        dropped before the next, so the RSS they add is bounded by one transaction's reads.
        The map is read-only and file-backed: a later access faults the page back in from the
        cache. About a millisecond when pages are mapped, microseconds when none are."""
        if not self.touched:
            return
        self.touched = False
        if self.map_range is None:
            self.map_range = _mapping_of(os.path.join(self.env.path(), "data.mdb"))
        if self.map_range is not None and _libc is not None:
            start, length = self.map_range
            _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), MADV_DONTNEED)


@contextlib.contextmanager
def _durable(env):
    """A write transaction whose commit, when it wrote anything (LMDB then fdatasyncs the data
    and writes the meta page synchronously: sync=True, metasync=True), is one sync in
    durable_files.SYNCS, timed; an exception aborts it as lmdb's own context manager does."""
    txn = env.begin(write=True)
    try:
        yield txn
    except BaseException:
        txn.abort()
        raise
    mine = txn.id()
    t0 = time.perf_counter()
    txn.commit()
    if env.info()["last_txnid"] >= mine:  # (a commit that wrote nothing syncs nothing)
        SYNCS.add(time.perf_counter() - t0)


def io_totals() -> dict:
    """This process's storage counts: its syncs and their time, its msg_store reads and
    writes (what its statistics sampler sends the node)."""
    out = dict(SYNCS.totals(), msg_store_read_count=0, msg_store_write_count=0)
    with _lock:
        opened = list(_opened.values())
    for s in opened:
        for k, v in s.io_totals().items():
            out[k] += v
    return out


ALARM_HIGH, ALARM_LOW = 0.6, 0.5  # disk alarm watermarks (fractions of storage_map_size):
#   LMDB needs room beyond the pages in use (its free list, pages a reader still sees, the
#   copy-on-write of every commit), and acks must still find pages when the alarm is on
DELETE_STEP = 4096  # index records deleted per transaction (delete_index)
ALARM_CHECK_S = 0.05  # usage is read at most this often per process...
ALARM_CHECK_ALWAYS = 0.4  # ...and on every write once this much is in use
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
