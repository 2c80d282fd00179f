"""The cost of power-loss-safe LMDB commits (docs/storage.md, "Power-loss safety"):

    .venv/bin/python -m bench.sync_cost DIR

200 flush transactions of 100 x 1,600-byte appends plus the deletion of the batch before (the
backing queue's steady state), timed with sync=False/metasync=False + env.sync(True) after each
commit (one fdatasync: the old cadence, not power-loss safe) and with sync=True/metasync=True
(LMDB's defaults: data pages synced before the meta page, then the meta page), twice each, in
fresh environments under DIR. A measurement, not a test.
"""
import lmdb, os, sys, time, tempfile, statistics
def run(d, durable, n=200, batch=100):
    env = lmdb.open(d, map_size=1<<30, sync=durable, metasync=durable, readahead=False, max_dbs=2)
    db = env.open_db(b"j")
    body = os.urandom(1600)
    seq = 0; times=[]
    for i in range(n):
        t=time.perf_counter()
        with env.begin(write=True) as txn:
            for _ in range(batch):
                txn.put(seq.to_bytes(8,'big'), body, db=db, append=True); seq+=1
            if seq > 2*batch:  # ack the previous batch
                for k in range(seq-2*batch, seq-batch):
                    txn.delete(k.to_bytes(8,'big'), db=db)
        if not durable: env.sync(True)
        times.append((time.perf_counter()-t)*1000)
    env.close()
    return statistics.median(times), statistics.mean(times)
base = sys.argv[1]
for durable in (False, True, False, True):
    d = tempfile.mkdtemp(dir=base)
    med, mean = run(d, durable)
    print(f"{'sync=True,metasync=True' if durable else 'sync=False + env.sync'}: {med:.2f} ms median, {mean:.2f} ms mean per flush of 100 x 1600 B")
