"""The cost of power-loss-safe LMDB commits (docs/storage.md, "Power-loss safety"):

    .venv/bin/python -m bench.sync_cost DIR

200 flush transactions of 100 x 1,600-byte appends plus the deletion of the batch before (the
backing queue's steady state), timed with sync=False/metasync=False + env.sync(True) after each
commit (one fdatasync: the old cadence, not power-loss safe) and with sync=True/metasync=True
(LMDB's defaults: data pages synced before the meta page, then the meta page), twice each, in
fresh environments under DIR. A measurement, not a test.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import lmdb


def run(d: str, durable: bool, n: int = 200, batch: int = 100) -> tuple[float, float]:
    """Median and mean ms per flush of `batch` appends (and the previous batch's deletion)."""
    env = lmdb.open(d, map_size=1 << 30, sync=durable, metasync=durable, readahead=False,
                    max_dbs=2)
    db = env.open_db(b"j")
    body = os.urandom(1600)
    seq = 0
    times = []
    for _ in range(n):
        t = time.perf_counter()
        with env.begin(write=True) as txn:
            for _ in range(batch):
                txn.put(seq.to_bytes(8, "big"), body, db=db, append=True)
                seq += 1
            if seq > 2 * batch:  # ack the previous batch
                for k in range(seq - 2 * batch, seq - batch):
                    txn.delete(k.to_bytes(8, "big"), db=db)
        if not durable:
            env.sync(True)
        times.append((time.perf_counter() - t) * 1000)
    env.close()
    return statistics.median(times), statistics.mean(times)


def main(argv: list[str]) -> None:
    base = argv[0]
    for durable in (False, True, False, True):
        med, mean = run(tempfile.mkdtemp(dir=base), durable)
        how = "sync=True,metasync=True" if durable else "sync=False + env.sync"
        print(f"{how}: {med:.2f} ms median, {mean:.2f} ms mean per flush of 100 x 1600 B")


if __name__ == "__main__":
    main(sys.argv[1:])
