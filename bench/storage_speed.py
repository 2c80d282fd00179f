"""Storage speed: publish + deliver + ack cycles per second through queue_index and msg_store.

Run with ``python -m bench.storage_speed [--messages N] [--dir D]``. One queue, one process, one
core; 1500-byte bodies (embedded in the index) and 8000-byte bodies (msg_store + index); write
transactions of 100 messages; env.sync(True) every 200 ms (group commit), and once at the end,
inside the timed span. Two load shapes:

* steady:  publish batch k, then deliver + ack batch k-1 (the queue holds ~2 batches: consumers
           keep up, so publishes and acks meet in the journal);
* backlog: publish all N, then deliver + ack all N (a queue that backs up: every message goes
           through the segments).

Three ways to store the same thing:

* (a) journal: QueueIndex as built (journal in LMDB, folded into segments at 32768 records);
* (a') journal-2k: the same with max_journal_entries=2048 (shorter folds, less cancelling);
* (b) direct:  the same key layout written straight into the segments, no journal (DirectIndex
           below: per-segment counts updated on every write call);
* (c) file:    an append-only journal file (and an append-only body file for non-embedded
           bodies) written with one os.write per batch and fsync'd every 200 ms: the I/O floor of
           RabbitMQ's file journal, without its segment files, its msg_store index and its garbage
           collection, which this variant does not do at all.

Also times the entry encoding (struct as built against msgpack). Prints tables; asserts only that
each run left the index consistent (QueueIndex.verify).
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import time

import lmdb
import msgpack

from msg_store import MsgStore
from queue_index import IndexEntry, QueueIndex
from queue_index import entry as codec
from queue_index.fold import _COUNTS, drop_range
from queue_index.keys import DEL, PUB, S, SEQ

BATCH = 100
SYNC_EVERY = 0.2
PROPS = b"\x90\x00\x18application/octet-stream\x02"  # content-type + delivery-mode=2


class DirectIndex(QueueIndex):
    """Variant (b): every record goes straight into its segment; no journal, no cancelling."""

    def publish(self, txn, entries):
        m = self._load(txn)
        p, n, sdb, added = self._prefix, m.segment_entries, self._segments, {}
        for e in entries:
            seq = e.seq_id
            txn.put(p + S.pack(seq // n, seq % n, PUB), codec.encode(e, self.embeds(e.body_size)),
                    db=sdb)
            added[seq // n] = added.get(seq // n, 0) + 1
            m.next_seq_id, m.live, m.live_bytes = seq + 1, m.live + 1, m.live_bytes + e.body_size
        for seg, k in added.items():
            self._count(txn, seg, k, 0)
        self._save(txn, m)

    def deliver(self, txn, seq_ids):
        m = self._load(txn)
        p, n, sdb = self._prefix, m.segment_entries, self._segments
        for seq in seq_ids:
            if txn.put(p + S.pack(seq // n, seq % n, DEL), b"", overwrite=False, db=sdb):
                m.delivered += 1
        self._save(txn, m)

    def ack(self, txn, seq_ids):
        m = self._load(txn)
        p, n, sdb, acked, released = self._prefix, m.segment_entries, self._segments, {}, []
        for seq in seq_ids:
            key = p + S.pack(seq // n, seq % n, PUB)
            pub = txn.pop(key, db=sdb)
            if pub is None:
                m.unknown_acks += 1
                continue
            if txn.delete(p + S.pack(seq // n, seq % n, DEL), db=sdb) or pub[0] & codec.DELIVERED:
                m.delivered -= 1
            m.live, m.live_bytes = m.live - 1, m.live_bytes - codec.body_size(pub)
            if not pub[0] & codec.EMBEDDED:
                released.append(codec.msg_id(pub))
            acked[seq // n] = acked.get(seq // n, 0) + 1
        for seg, k in acked.items():
            self._count(txn, seg, 0, k)
        self._save(txn, m)
        return released

    def _count(self, txn, seg, pubs, acks):
        key = self._prefix + SEQ.pack(seg)
        raw = txn.get(key, db=self._counts)
        old_pubs, old_acks = _COUNTS.unpack(raw) if raw else (0, 0)
        if old_pubs + pubs == old_acks + acks:
            txn.delete(key, db=self._counts)
            drop_range(txn, self._segments, self._prefix + SEQ.pack(seg))
        else:
            txn.put(key, _COUNTS.pack(old_pubs + pubs, old_acks + acks), db=self._counts)


def entries(first: int, size: int, embeds: bool) -> list[IndexEntry]:
    body = b"b" * size if embeds else None
    return [IndexEntry(s, s.to_bytes(16, "big"), "amq.direct", "bench.key", PROPS, body, size)
            for s in range(first, first + BATCH)]


class Syncer:
    """Group commit: sync when SYNC_EVERY has passed since the last one."""

    def __init__(self, sync):
        self.sync = sync  # the durable flush (env.sync(True) or fsync of the journal file)
        self.last = time.perf_counter()  # time of the last sync
        self.count = 0  # syncs done
        self.spent = 0.0  # seconds spent in them

    def maybe(self, force=False):
        now = time.perf_counter()
        if force or now - self.last >= SYNC_EVERY:
            self.sync()
            self.last = time.perf_counter()
            self.count += 1
            self.spent += self.last - now


def run_lmdb(path: str, cls, n: int, size: int, shape: str, **config) -> dict:
    env = lmdb.open(path, max_dbs=16, map_size=16 << 30, sync=False, metasync=False)
    ms, qi = MsgStore(env), cls(env, b"/|bench", **config)
    embeds = qi.embeds(size)
    body = b"b" * size
    syncer = Syncer(lambda: env.sync(True))

    longest = 0.0  # the longest write transaction: it holds the node's one writer lock

    def pub(first):
        nonlocal longest
        batch = entries(first, size, embeds)
        t = time.perf_counter()
        with env.begin(write=True) as txn:
            if not embeds:
                ms.put_many(txn, [(e.msg_id, body) for e in batch])
            qi.publish(txn, batch)
        longest = max(longest, time.perf_counter() - t)
        syncer.maybe()

    def consume(first):
        nonlocal longest
        seqs = range(first, first + BATCH)
        t = time.perf_counter()
        with env.begin(write=True) as txn:
            qi.deliver(txn, seqs)
            ms.release(txn, qi.ack(txn, seqs))
        longest = max(longest, time.perf_counter() - t)
        syncer.maybe()

    t0 = time.perf_counter()
    if shape == "steady":
        for first in range(0, n, BATCH):
            pub(first)
            if first:
                consume(first - BATCH)
        consume(n - BATCH)
    else:
        for first in range(0, n, BATCH):
            pub(first)
        for first in range(0, n, BATCH):
            consume(first)
    syncer.maybe(force=True)
    elapsed = time.perf_counter() - t0
    with env.begin() as txn:
        rec = qi.verify(txn)
        assert rec.live == 0 and ms.stats(txn)["bodies"] == 0, (rec, ms.stats(txn))
    file_mb = env.info()["last_pgno"] * 4096 / 1e6
    env.close()
    return {"rate": n / elapsed, "syncs": syncer.count, "sync_ms": 1e3 * syncer.spent /
            max(syncer.count, 1), "file_mb": file_mb, "txn_ms": 1e3 * longest}


_REC = struct.Struct(">BQI")  # kind, seq_id, length of what follows


def run_file(path: str, n: int, size: int, shape: str) -> dict:
    """Variant (c): append-only files, one write per batch, fsync every 200 ms."""
    os.makedirs(path)
    jfd = os.open(os.path.join(path, "journal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    sfd = os.open(os.path.join(path, "store"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    embeds = size < 4096
    body = b"b" * size

    def sync():
        os.fsync(jfd)
        if not embeds:
            os.fsync(sfd)

    syncer = Syncer(sync)

    def pub(first):
        recs, bodies = [], []
        for e in entries(first, size, embeds):
            value = codec.encode(e, embeds)
            recs += (_REC.pack(PUB, e.seq_id, len(value)), value)
            if not embeds:
                bodies += (e.msg_id, body)
        if bodies:
            os.write(sfd, b"".join(bodies))
        os.write(jfd, b"".join(recs))
        syncer.maybe()

    def consume(first):
        seqs = range(first, first + BATCH)
        os.write(jfd, b"".join(_REC.pack(k, s, 0) for s in seqs for k in (DEL, 2)))
        syncer.maybe()

    t0 = time.perf_counter()
    if shape == "steady":
        for first in range(0, n, BATCH):
            pub(first)
            if first:
                consume(first - BATCH)
        consume(n - BATCH)
    else:
        for first in range(0, n, BATCH):
            pub(first)
        for first in range(0, n, BATCH):
            consume(first)
    syncer.maybe(force=True)
    elapsed = time.perf_counter() - t0
    file_mb = (os.fstat(jfd).st_size + os.fstat(sfd).st_size) / 1e6
    os.close(jfd)
    os.close(sfd)
    return {"rate": n / elapsed, "syncs": syncer.count,
            "sync_ms": 1e3 * syncer.spent / max(syncer.count, 1), "file_mb": file_mb,
            "txn_ms": float("nan")}


def encoding_rates(seconds: float = 0.5) -> list[tuple[str, float]]:
    e = entries(0, 1500, True)[7]
    packed_struct = codec.encode(e, True)
    packed_msgpack = msgpack.packb(list(e))
    n = 20000

    def rate(fn):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, time.perf_counter() - t0)
        return n / best

    return [
        ("struct encode", rate(lambda: codec.encode(e, True))),
        ("msgpack encode", rate(lambda: msgpack.packb(list(e)))),
        ("struct decode", rate(lambda: codec.decode(7, packed_struct))),
        ("msgpack decode", rate(lambda: IndexEntry(*msgpack.unpackb(packed_msgpack)))),
        ("struct ack peek (flags, size, msg_id)",
         rate(lambda: (packed_struct[0], codec.body_size(packed_struct),
                       codec.msg_id(packed_struct)))),
        ("msgpack ack peek (full unpack)", rate(lambda: msgpack.unpackb(packed_msgpack))),
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000, help="messages per run (x100)")
    ap.add_argument("--dir", default=None, help="where to put the scratch files (default: TMP)")
    args = ap.parse_args(argv)
    n = max(BATCH, args.messages // BATCH * BATCH)
    root = tempfile.mkdtemp(prefix="leveret-storage-speed-", dir=args.dir)
    print(f"{n} messages per run, batches of {BATCH} per transaction, sync every "
          f"{int(SYNC_EVERY * 1000)} ms; scratch dir {root}")
    print(f"{'body':>6} {'shape':8} {'variant':10} {'cycles/s':>10} {'syncs':>6} "
          f"{'ms/sync':>8} {'file MB':>8} {'max txn ms':>10}")
    try:
        for size in (1500, 8000):
            for shape in ("steady", "backlog"):
                for name in ("journal", "journal-2k", "direct", "file"):
                    path = os.path.join(root, f"{size}-{shape}-{name}")
                    if name == "file":
                        r = run_file(path, n, size, shape)
                    elif name == "direct":
                        r = run_lmdb(path, DirectIndex, n, size, shape)
                    else:
                        r = run_lmdb(path, QueueIndex, n, size, shape, max_journal_entries=(
                            2048 if name == "journal-2k" else 32768))
                    shutil.rmtree(path)
                    print(f"{size:>6} {shape:8} {name:10} {r['rate']:>10,.0f} {r['syncs']:>6} "
                          f"{r['sync_ms']:>8.1f} {r['file_mb']:>8.1f} {r['txn_ms']:>10.1f}",
                          flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\nentry encoding, 1500-byte embedded body (ops/s, best of 3):")
    for label, r in encoding_rates():
        print(f"  {label:40} {r:>12,.0f}")


if __name__ == "__main__":
    main()
