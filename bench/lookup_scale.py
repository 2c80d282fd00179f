"""Lookup times on a big analysis: "where did my message go" in under a second.

    python -m bench.lookup_scale --events 10000000 --dir /tmp/leveret-lookup [--skip-generate]
        [--group-rows 49152] [--repeat 5]

Writes, with pyarrow, the part of an analysis the traces read, in the layout
spark_analysis/lookup.py gives it (the full Spark job on 10M events takes many minutes; the
layout is what the lookups' speed depends on):
    lookup/steps/  --events rows, FILES files range-partitioned and sorted by (msg_id, t_ns,
                   rank), row groups of --group-rows rows (about 1 MiB, as the job's; the job's
                   groups of the same rows are smaller still), the columns of
                   lookup.STEP_COLUMNS the events of a plain journey have
    lookup/keys/   one row per (key, value, msg_id), sorted by (key, value, t_first_ns)
    lookup/times/  one row per message, sorted by t_first_ns (its publish)
    lifecycles/    one row per message, in no order (as the job writes it), the columns the
                   time-range search reads
    events/        an empty folder (an analysis is recognised by events/ and lifecycles/)
Messages: publish_received, routed, enqueued, stored, confirmed, delivered, acked (7 events),
1 ms apart, 8 queues and routing keys, unique message_id, correlation_id and traceparent.

Then times each lookup in a process of its own (cold: a new interpreter, pyarrow imported,
files opened afresh), as `leveretctl trace` and a management request would: the search, then
the path of the first message found. Prints, for each, the medians of --repeat runs: the
search, the path, the whole process and its imports (Python, pyarrow, the module).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

FILES = 8  # the job's shuffle partitions on a 2-core machine (lifecycle.py: at least 8)
KINDS = ("publish_received", "routed", "enqueued", "stored", "confirmed", "delivered", "acked")
ACTORS = ("channel", "channel", "queue", "backing_queue", "channel", "channel", "channel")
T0 = 1_795_000_000_000_000_000  # virtual start of the log (2026-11-18)
GAP = 100_000  # ns between two publishes


def generate(root: str, events: int, group_rows: int) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from spark_analysis import schema as S

    rng = np.random.default_rng(1)
    # msg_ids: 16 random bytes, in msg_id order (the first 8 sorted and distinct)
    hi = np.unique(rng.integers(0, 2**63, size=events // len(KINDS), dtype=np.int64))
    n = len(hi)
    raw = np.empty((n, 16), np.uint8)
    raw[:, :8] = hi.astype(">u8").view(np.uint8).reshape(n, 8)
    raw[:, 8:] = rng.integers(0, 256, size=(n, 8), dtype=np.uint8)
    ids_arr = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), n, [None, pa.py_buffer(raw.tobytes())]).cast(pa.binary())
    order = rng.permutation(n)  # publish order is not msg_id order
    t_pub = T0 + order.astype(np.int64) * GAP
    q = order % 8
    k = len(KINDS)
    rep = np.repeat(np.arange(n), k)
    step = np.tile(np.arange(k), n)
    kinds = pa.DictionaryArray.from_arrays(pa.array(step.astype(np.int32)), pa.array(KINDS))
    qnames = np.array([f"orders-{i}" for i in range(8)], dtype=object)
    is_queue_step = np.isin(step, [2, 3, 5, 6])
    steps = pa.table({
        "msg_id": ids_arr.take(pa.array(rep)),
        "t_ns": pa.array(t_pub[rep] + step * 1_000_000),
        "rank": pa.array(np.array([S.RANK[x] for x in KINDS], np.int32)[step]),
        "kind": kinds.cast(pa.string()),
        "node": pa.array(np.where(step == 2, "leveret@b", "leveret@a").astype(object)),
        "process": pa.array(np.where(np.isin(step, [2, 3]), "queue-0", "conn-0").astype(object)),
        "pid": pa.array(np.where(np.isin(step, [2, 3]), 2002, 1001)),
        "actor": pa.array(np.array(ACTORS, dtype=object)[step]),
        "vhost": pa.array(np.full(n * k, "/", dtype=object)),
        "queue": _only(is_queue_step, qnames[q[rep]]),
        "connection": _only(step == 0, np.full(n * k, "127.0.0.1:5000 -> 127.0.0.1:5672",
                                               dtype=object)),
        "channel": _only(np.isin(step, [0, 4, 5, 6]), np.ones(n * k, np.int64)),
        "delivery_tag": _only(np.isin(step, [5, 6]), order[rep].astype(np.int64) + 1),
        "exchange": _only(step == 0, np.full(n * k, "amq.direct", dtype=object)),
        "routing_key": _only(step == 0, qnames[q[rep]]),
        "message_id": _only(step == 0, np.char.add("order-", order.astype(str))
                            .astype(object)[rep]),
        "redelivered": _only(step == 5, np.zeros(n * k, bool)),
    })
    del rep, step
    _write_parts(steps, os.path.join(root, "lookup", "steps"), group_rows)
    hexes = np.array([row.tobytes().hex() for row in raw], dtype=object)
    parts = []
    for key, values in (("message_id", np.char.add("order-", order.astype(str))),
                        ("correlation_id", np.char.add("corr-", order.astype(str))),
                        ("traceparent", np.char.add(np.char.add("00-", np.char.zfill(
                            order.astype(str), 32)), "-00f067aa0ba902b7-01")),
                        ("routing_key", qnames[q].astype(str)),
                        ("queue", qnames[q].astype(str))):
        parts.append(pa.table({"key": pa.array(np.full(n, key, dtype=object)),
                               "value": pa.array(values.astype(object)),
                               "msg_id": ids_arr,
                               "t_first_ns": pa.array(t_pub + (2_000_000 if key == "queue"
                                                               else 0)),
                               "vhost": pa.array(np.full(n, "/", dtype=object))}))
    keys = pa.concat_tables(parts)
    keys = keys.take(pc.sort_indices(keys, sort_keys=[("key", "ascending"),
                                                      ("value", "ascending"),
                                                      ("t_first_ns", "ascending")]))
    _write_parts(keys, os.path.join(root, "lookup", "keys"), group_rows)
    shuffled = rng.permutation(n)
    lc = pa.table({"msg_id": pa.array(hexes[shuffled]),
                   "message_id": pa.array(np.char.add("order-", order.astype(str))
                                          .astype(object)[shuffled]),
                   "vhost": pa.array(np.full(n, "/", dtype=object)),
                   "final_state": pa.array(np.full(n, "acked", dtype=object)),
                   "t_published_ns": pa.array(t_pub[shuffled])})
    _write_parts(lc, os.path.join(root, "lifecycles"), 1 << 20)
    by_time = np.argsort(order)
    times = pa.table({"t_first_ns": pa.array(t_pub[by_time]),
                      "msg_id": pa.array(hexes[by_time]),
                      "message_id": pa.array(np.char.add("order-", order.astype(str))
                                             .astype(object)[by_time]),
                      "vhost": pa.array(np.full(n, "/", dtype=object)),
                      "final_state": pa.array(np.full(n, "acked", dtype=object))})
    _write_parts(times, os.path.join(root, "lookup", "times"), group_rows)
    os.makedirs(os.path.join(root, "events"), exist_ok=True)
    first = int(np.argmin(order))
    middle = int(np.argmax(order == n // 2))
    return {"events": n * k, "messages": n, "example_msg_id": hexes[middle],
            "example_order": n // 2, "first_msg_id": hexes[first],
            "example_queue": str(qnames[q[middle]])}


def _only(keep, values):
    """A column with `values` where `keep`, null elsewhere."""
    import pyarrow as pa
    return pa.array(values, mask=~keep)


def _write_parts(table, folder: str, group_rows: int) -> None:
    import pyarrow.parquet as pq
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    per = -(-table.num_rows // FILES)
    for i in range(FILES):
        pq.write_table(table.slice(i * per, per), os.path.join(folder, f"part-{i:05d}.parquet"),
                       row_group_size=group_rows, compression="snappy")


# one lookup in a cold process: (what, the search's arguments)
PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
import pyarrow.compute, pyarrow.dataset  # (what traces.py imports on first use)
from actors.management import traces
t1 = time.perf_counter()
path, how, args = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
found = traces.find(path, *args) if how == "find" else traces.published_between(path, *args)
t2 = time.perf_counter()
assert [r["t_first_ns"] for r in found] == sorted(r["t_first_ns"] for r in found)
p = traces.message_path(path, found[0]["msg_id"])
t3 = time.perf_counter()
print(json.dumps({"found": len(found), "steps": len(p["steps"]), "import_s": t1 - t0,
                  "first": found[0]["t_first_ns"],
                  "search_s": t2 - t1, "path_s": t3 - t2}))
"""


def probe(root: str, meta: dict, repeat: int = 1) -> list:
    n = meta["order"] if "order" in meta else meta["example_order"]
    t_mid = T0 + n * GAP
    cases = [
        ("msg_id", "find", ["msg_id", meta["example_msg_id"]]),
        ("message_id", "find", ["message_id", f"order-{n}"]),
        ("correlation_id", "find", ["correlation_id", f"corr-{n}"]),
        ("traceparent", "find", ["traceparent", f"00-{n:032d}-00f067aa0ba902b7-01"]),
        ("routing_key (first 100)", "find", ["routing_key", meta["example_queue"]]),
        ("queue (first 100)", "find", ["queue", meta["example_queue"]]),
        ("queue + 1 s window", "find", ["queue", meta["example_queue"], t_mid, t_mid + 10**9]),
        ("time range 1 s (first 100)", "between", [t_mid, t_mid + 10**9]),
        ("time range, whole log", "between", [None, None]),
    ]
    expected_first = {"time range 1 s (first 100)": t_mid, "time range, whole log": T0}
    out = []
    for name, how, args in cases:
        runs = []
        for _ in range(repeat):
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", PROBE, root, how, json.dumps(args)],
                               capture_output=True, text=True, check=True)
            res = json.loads(r.stdout)
            res.update(name=name, process_s=time.perf_counter() - t)
            if name in expected_first:  # the earliest, not any 100 of the range
                assert res["first"] == expected_first[name], res
            runs.append(res)
        res = {k: statistics.median(r[k] for r in runs) if isinstance(runs[0][k], float)
               else runs[0][k] for k in runs[0]}  # medians of the timings
        out.append(res)
        print(f"{name:<28} found {res['found']:>4}  search {res['search_s'] * 1000:7.1f} ms  "
              f"path {res['path_s'] * 1000:6.1f} ms  ({res['steps']} steps)  "
              f"process {res['process_s']:5.2f} s (import {res['import_s']:.2f} s)",
              flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--dir", default="/tmp/leveret-lookup")
    p.add_argument("--group-rows", type=int, default=49152,
                   help="rows per row group (49152: about 1 MiB of steps uncompressed, no "
                        "smaller than the job's parquet.block.size gives)")
    p.add_argument("--skip-generate", action="store_true")
    p.add_argument("--repeat", type=int, default=5,
                   help="cold processes per lookup (the medians are printed)")
    a = p.parse_args(argv)
    meta_path = os.path.join(a.dir, "meta.json")
    if not a.skip_generate:
        t = time.perf_counter()
        meta = generate(a.dir, a.events, a.group_rows)
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        print(f"generated {meta['events']} events, {meta['messages']} messages in "
              f"{time.perf_counter() - t:.0f} s under {a.dir}", flush=True)
    with open(meta_path) as f:
        meta = json.load(f)
    probe(a.dir, meta, a.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
