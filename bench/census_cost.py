"""Queue census cost: what one `queue_census` event of a queue of N messages costs its worker.

Run with ``python -m bench.census_cost [--messages N] [--runs R]``. Measures, best and median
of R runs, on this machine:

* the Queue's half: ``census.snapshot`` of a QueueCore holding N ready messages (in memory);
* the BackingQueue's half for a paged-out queue: the live index entries after the in-memory
  part read back (N entries of 1 KB bodies, embedded): by their keys alone
  (``QueueIndex.live_seq_ids``, the entries of the queue's own run), and with their values
  and the persistence check of a previous run's entries (after a restart:
  ``QueueIndex.live_records`` and ``delivery_mode`` of each); and ``census.emit`` (ranges, count, the event) into a real
  event log with events full;
* the event's size on disk.

Prints one table; nothing is asserted. Figures are in docs/events.md ("Census").
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import types

import lmdb

from actors import events
from actors.core.queue import QueueCore, QueuePort
from actors.core.queue_settings import parse as queue_settings
from actors.queue import census
from msg_store import MsgStore
from protocol.properties import BasicProperties, delivery_mode
from queue_index import IndexEntry, QueueIndex
from queue_index.entry import props_raw


class _Out:
    """QueueCore's port's callables (and its mirrors'), dropped (the census reads its state
    only)."""

    def __getattr__(self, name):
        return lambda *args: None


def _timed(fn, runs: int) -> tuple[float, float, object]:
    got, times = None, []
    for _ in range(runs):
        t = time.perf_counter()
        got = fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times), got


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args(argv)
    n = a.messages
    props = BasicProperties(delivery_mode=2).encode()
    body = b"." * 1024
    rows = []

    core = QueueCore("/", "q", queue_settings({}), QueuePort.of(_Out(), _Out()), 0)
    core.publish("", [[0, "", "q", props, True, 0, -1, None]] * n, [body] * n, 0)
    best, med, snap = _timed(lambda: census.snapshot(core, "requested"), a.runs)
    rows.append(("Queue: snapshot of N ready messages in memory", best, med))

    with tempfile.TemporaryDirectory() as tmp:
        env = lmdb.open(os.path.join(tmp, "messages"), map_size=8 << 30, subdir=True,
                        max_dbs=len(MsgStore.db_names()) + len(QueueIndex.db_names()) + 1)
        index = QueueIndex(env, b"q")
        with env.begin(write=True) as txn:
            for start in range(0, n, 10_000):
                index.publish(txn, [IndexEntry(s, os.urandom(16), "", "q", props, body,
                                               len(body)) for s in range(start,
                                                                         min(n, start + 10_000))])
        with env.begin() as txn:
            best, med, seqs = _timed(lambda: [s for s, _ in index.live_records(txn, -1)],
                                     a.runs)
            rows.append(("BackingQueue: paged part read back (keys and values)", best, med))
            best, med, _ = _timed(lambda: list(index.live_seq_ids(txn, -1)), a.runs)
            rows.append(("  keys only (entries of the queue's own run)", best, med))
            best, med, _ = _timed(lambda: [s for s, v in index.live_records(txn, -1)
                                           if delivery_mode(props_raw(v)) == 2], a.runs)
            rows.append(("  the same, each entry's persistence checked (after a restart)",
                         best, med))
        env.close()

        events.configure(types.SimpleNamespace(data_dir=tmp, events="full"), "bench", "n")
        empty = census.Census("started", [], {0: -1}, n)
        best, med, count = _timed(lambda: census.emit(events, "/", "q", empty, [seqs], True),
                                  a.runs)
        rows.append(("census.emit: ranges and the event (one range)", best, med))
        holes = seqs[::2]
        best, med, _ = _timed(lambda: census.emit(events, "/", "q", empty, [holes], True),
                              a.runs)
        rows.append(("census.emit: every other message gone (N/2 ranges)", best, med))
        events.close()
        size = sum(os.path.getsize(os.path.join(tmp, "events", f))
                   for f in os.listdir(os.path.join(tmp, "events")))
    print(f"census of a queue of {n} messages, {a.runs} runs, load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'what':60} {'best ms':>9} {'median ms':>10}")
    for what, best, med in rows:
        print(f"{what:60} {best * 1e3:9.1f} {med * 1e3:10.1f}")
    print(f"log: {size} bytes for {2 * a.runs} census events, one range or N/2 (count {count})")


if __name__ == "__main__":
    main()
