"""Bytes LMDB writes per persistent 1,500-byte message for candidate index layouts, with many
queues in one environment (the paper setup at 4-15 queues costs 1.7-2.5x
RabbitMQ's bytes written, 1.13x at one queue). A simulation of the flushes, not the broker: each
"flush" is one durable write transaction (sync=True, metasync=True, as Storage opens the
environment) that publishes `per` messages into each of Q queues and deletes (acks) those of the
flush `--lag` flushes back. The bytes are what the process hands the kernel for the LMDB file
(pwrite64/pwritev/writev), counted by strace after a warm-up, so large-folio accounting
(docs/storage.md) does not blur them.

    .venv/bin/python -m bench.index_layout                  # every layout, Q = 1, 4, 8, 15
    .venv/bin/python -m bench.index_layout --layouts current,chunk --queues 8

Layouts:
  current  queue_index as built: `prefix | seq | kind` keys, 1.6 KB records (body embedded)
  time     time-major keys `flush | prefix | seq | kind` (sorted per flush), one writer
  time2    the same with two writers (`worker | flush | ...`): worker 0's keys are not last
  append   small index records (~130 B), bodies in msg_store under an id taken from the last
           key at flush time (always appended), refs keyed by msg_id (4 channels per queue)
  chunk    small index records, the bodies of a queue's flush in one value (overflow pages),
           `prefix | first seq`, deleted when its messages are acked (RabbitMQ CQv2's per-queue
           store files, in LMDB)
  index    queue_index as built now (the chunk layout: QueueIndex.publish and ack, journal,
           folds, chunk live counts), msg_store untouched (every body is below the embed limit)
Needs strace. A measurement, not a test.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

LAYOUTS = ("current", "time", "time2", "append", "chunk", "index")
BODY = b"x" * 1500
META = b"m" * 100  # the rest of an index entry: flags, sizes, msg_id, exchange, key, props
WARM = b"--warm--\n"


def put(txn, key, value, db) -> None:
    if not txn.put(key, value, append=True, db=db):  # as queue_index: append, else a put
        txn.put(key, value, db=db)


def simulate(layout: str, queues: int, per: int, flushes: int, lag: int, path: str) -> int:
    """Run the flushes; returns the messages published after the warm-up marker."""
    import lmdb
    from queue_index import IndexEntry, QueueIndex
    env = lmdb.open(path, map_size=8 << 30, max_dbs=4 + len(QueueIndex.db_names()), sync=True,
                    metasync=True, readahead=False)
    journal, bodies, refs = (env.open_db(n) for n in (b"journal", b"bodies", b"refs"))
    rnd = random.Random(1)
    prefixes = [struct.pack(">H", 16) + rnd.randbytes(16) for _ in range(queues)]
    channels = [[rnd.randbytes(8) for _ in range(4)] for _ in range(queues)]
    seq = [0] * queues
    index = [QueueIndex(env, p[2:]) for p in prefixes]  # layout "index", configured as Storage
    live: list[list] = []  # per flush: what its acks delete, (db, key); or (q, seq_ids)
    warm = flushes // 3
    for f in range(flushes):
        if f == warm:
            os.write(1, WARM)
        with env.begin(write=True) as txn:
            dels = []
            if layout == "current":
                for q in range(queues):
                    for _ in range(per):
                        key = prefixes[q] + struct.pack(">QB", seq[q], 0)
                        seq[q] += 1
                        put(txn, key, META + BODY, journal)
                        dels.append((journal, key))
            elif layout in ("time", "time2"):
                worker = f % 2 if layout == "time2" else 0
                keys = []
                for q in range(queues):
                    for _ in range(per):
                        keys.append(struct.pack(">BQ", worker, f) + prefixes[q] +
                                    struct.pack(">QB", seq[q], 0))
                        seq[q] += 1
                for key in sorted(keys):
                    put(txn, key, META + BODY, journal)
                    dels.append((journal, key))
            elif layout == "append":
                cur = txn.cursor(db=bodies)
                nxt = struct.unpack(">Q", cur.key())[0] + 1 if cur.last() else 0
                for q in range(queues):
                    for _ in range(per):
                        s = seq[q]
                        seq[q] += 1
                        mid = channels[q][s % 4] + struct.pack(">Q", s)
                        loc = struct.pack(">Q", nxt)
                        nxt += 1
                        key = prefixes[q] + struct.pack(">QB", s, 0)
                        put(txn, key, META + mid, journal)
                        txn.put(mid, struct.pack(">II", 1, len(BODY)) + loc, db=refs)
                        put(txn, loc, BODY, bodies)
                        dels += [(journal, key), (refs, mid), (bodies, loc)]
            elif layout == "chunk":
                for q in range(queues):
                    first = seq[q]
                    for i in range(per):
                        key = prefixes[q] + struct.pack(">QB", seq[q], 0)
                        seq[q] += 1
                        put(txn, key, META + struct.pack(">QI", first, i), journal)
                        dels.append((journal, key))
                    ckey = prefixes[q] + struct.pack(">Q", first)
                    put(txn, ckey, BODY * per, bodies)
                    dels.append((bodies, ckey))
            elif layout == "index":
                for q in range(queues):
                    es = []
                    for _ in range(per):
                        s = seq[q]
                        seq[q] += 1
                        es.append(IndexEntry(s, channels[q][s % 4] + struct.pack(">Q", s),
                                             "", "q", META[:20], BODY, len(BODY)))
                    index[q].publish(txn, es)
                    dels.append((q, [e.seq_id for e in es]))
            live.append(dels)
            if len(live) > lag:
                for a, b in live.pop(0):
                    if layout == "index":
                        index[a].ack(txn, b)
                    else:
                        txn.delete(b, db=a)
    env.close()
    return queues * per * (flushes - warm)


def measure(layout: str, queues: int, per: int, flushes: int, lag: int) -> float:
    """Bytes written per message, the simulation run in a child process under strace."""
    tmp = tempfile.mkdtemp(prefix="leveret-layout-")
    try:
        trace = os.path.join(tmp, "strace")
        cmd = ["strace", "-f", "-qq", "-e", "trace=pwrite64,pwritev,writev,write", "-o", trace,
               sys.executable, "-m", "bench.index_layout", "--child", layout, str(queues),
               str(per), str(flushes), str(lag), os.path.join(tmp, "env")]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        messages = int(out.split()[-1])
        written, warm = 0, False
        with open(trace) as f:
            for line in f:
                if not warm:
                    warm = "--warm--" in line
                    continue
                m = re.search(r"(?:pwrite64|pwritev|writev)\(\d+, .*\)\s+=\s+(\d+)", line)
                if m:
                    written += int(m.group(1))
        return written / messages
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        layout, q, per, flushes, lag, path = argv[1:]
        n = simulate(layout, int(q), int(per), int(flushes), int(lag), path)
        print(f"\nmessages {n}", flush=True)
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--queues", default="1,4,8,15")
    p.add_argument("--messages", type=int, default=3000,
                   help="messages per flush, over all queues (default 3000: ~15k msg/s at "
                        "five flushes a second)")
    p.add_argument("--flushes", type=int, default=60)
    p.add_argument("--lag", type=int, default=3, help="flushes between a publish and its ack")
    a = p.parse_args(argv)
    if not shutil.which("strace"):
        print("needs strace", file=sys.stderr)
        return 2
    qs = [int(q) for q in a.queues.split(",")]
    print("| layout | " + " | ".join(f"{q} queue{'s' if q > 1 else ''}" for q in qs) + " |")
    print("| --- |" + " ---: |" * len(qs))
    for layout in a.layouts.split(","):
        row = [measure(layout, q, max(a.messages // q, 1), a.flushes, a.lag) for q in qs]
        print(f"| {layout} | " + " | ".join(f"{b:,.0f}" for b in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
