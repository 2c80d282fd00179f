"""Event log speed: what actors/events.py costs the hot path, and what its writer thread does.

Run with ``python -m bench.events_speed [--events N] [--threads T]``. Measures, on this machine:

* ``put()`` as the actors call it on a message's path (``if events.enabled():
  events.put(kind, msg_id, (9 values))``) and ``emit()`` as they call it for the other kinds
  (``events.emit(kind, msg_id, **6 fields)``) with events off, full and sampled:100, in ns per
  call: the loop runs while the background writer encodes and writes, so the figure includes
  the GIL it takes;
* emit() alone, the writer thread idle during the loop (what the calling thread pays);
* the same from T threads at once (list.append needs no lock);
* the writer thread alone: encoding + write of a filled buffer, ns per event and bytes per event;
* the file format: v3 columnar chunks of 4096 events of one kind (what actors/events.py
  writes: the records' columns, spark_analysis/chunk.py), a msgpack stream of v2 records (the kind's
  values in order, one array per record), of v1 records (a field map with string keys) and
  4-byte length-prefixed v1 records, encode and decode in ns per event.

Prints one table; nothing is asserted. Figures are in docs/events.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import types

import msgpack

from actors import events
from spark_analysis import chunk

FIELDS = dict(actor="queue", vhost="/", queue="orders", channel=3, consumer_tag="ctag-1",
              delivery_tag=12345)


def _ids(n: int) -> list[bytes]:
    prefix = os.urandom(8)
    return [prefix + i.to_bytes(8, "big") for i in range(n)]


def _emit_loop(ids: list[bytes]) -> float:
    """ns per `if enabled(): emit(...)` over ids, the way an actor calls it."""
    enabled, ev = events.enabled, events
    t0 = time.perf_counter_ns()
    for i, mid in enumerate(ids):
        if enabled():
            ev.emit("delivered", mid, actor="queue", vhost="/", queue="orders", channel=3,
                    consumer_tag="ctag-1", delivery_tag=i)
    return (time.perf_counter_ns() - t0) / len(ids)


def _put_loop(ids: list[bytes]) -> float:
    """ns per `if enabled(): put(...)` over ids, the way the channel logs a delivery."""
    enabled, put = events.enabled, events.put
    t0 = time.perf_counter_ns()
    for i, mid in enumerate(ids):
        if enabled():
            put("delivered", mid, ("/", "orders", "127.0.0.1:5672/1", 3, "ctag-1", i, False,
                                   False, None))
    return (time.perf_counter_ns() - t0) / len(ids)


def bench_emit(level: str, n: int, directory: str, loop=_emit_loop) -> tuple[float, float]:
    """(ns per call of `loop`'s kind, seconds until everything is on disk after the loop)."""
    cfg = types.SimpleNamespace(data_dir=directory, events=level)
    events.configure(cfg, "bench", "bench")
    ids = _ids(n)
    ns = loop(ids)
    t0 = time.perf_counter()
    events.close()
    return ns, time.perf_counter() - t0


def bench_sync(mode: str, batches: int, directory: str, per_batch: int = 10) -> float:
    """ns per confirm batch with events_sync `mode`: `per_batch` events emitted, then the
    events.sync() a queue or channel calls before its confirms leave."""
    cfg = types.SimpleNamespace(data_dir=directory, events="full", events_sync=mode)
    events.configure(cfg, "bench", "bench")
    ids = _ids(per_batch)
    emit, sync = events.emit, events.sync
    t0 = time.perf_counter_ns()
    for i in range(batches):
        for mid in ids:
            emit("enqueued", mid, actor="queue", vhost="/", queue="orders", seq_id=i)
        sync()
    ns = (time.perf_counter_ns() - t0) / batches
    events.close()
    return ns


def repeat(fn, times: int):
    """(best, median) of the first value fn() returns over `times` runs (this machine is shared:
    the best run is the cost, the median shows the noise)."""
    runs = sorted(_first(fn()) for _ in range(times))
    return runs[0], runs[len(runs) // 2]


def _first(value):
    return value[0] if isinstance(value, tuple) else value


def bench_emit_alone(n: int, directory: str, loop=_emit_loop) -> float:
    """ns per call (full) with the writer thread idle during the loop: the hot path's own cost."""
    events.configure(types.SimpleNamespace(data_dir=directory, events="full"), "bench", "bench")
    events._log.flush_interval = 3600  # the writer waits out the loop (its first wait is short)
    events._log.wake.set()
    time.sleep(0.05)
    ns = loop(_ids(n))
    events.close()
    return ns


def bench_threads(threads: int, n: int, directory: str) -> float:
    """ns per emit per thread with `threads` threads emitting at once (wall time / events)."""
    events.configure(types.SimpleNamespace(data_dir=directory, events="full"), "bench", "bench")
    per = n // threads
    id_lists = [_ids(per) for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def run(ids):
        start.wait()
        _emit_loop(ids)

    ts = [threading.Thread(target=run, args=(ids,)) for ids in id_lists]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter_ns()
    for t in ts:
        t.join()
    elapsed = time.perf_counter_ns() - t0
    events.close()
    return elapsed / (per * threads)


def bench_writer(n: int, directory: str) -> tuple[float, float]:
    """The writer thread's work alone: (ns per event to encode + write, bytes per event)."""
    lg = events.EventLog(directory, "bench", "writer", flush_interval=3600)
    now, mono = time.time_ns(), time.monotonic_ns()
    for i, mid in enumerate(_ids(n)):
        lg.record_values("delivered", mid, mono + i, (
            "/", "orders", "127.0.0.1:5672/1", 3, "ctag-1", i, False, False, None))
    t0 = time.perf_counter_ns()
    lg.flush()
    ns = (time.perf_counter_ns() - t0) / n
    lg.close()
    size = sum(os.path.getsize(p) for p in lg.paths)
    return ns, size / n


def bench_formats(n: int) -> dict[str, float]:
    """Encode/decode ns per event: v3 chunks, msgpack streams of v2 and v1 records, and
    length-prefixed v1 records."""
    now, mono = time.time_ns(), time.monotonic_ns()
    ids = _ids(n)
    pack = msgpack.Packer().pack
    out = {}
    v2 = [(9, mid, mono + i, i, now + i, ("/", "orders", "127.0.0.1:5672/1", 3, "ctag-1", i,
                                          False, False, None))
          for i, mid in enumerate(ids)]
    # (the writer's buffer of the kind: msg_id, mono, seq, hlc, then the values)
    flat = [x for rec in v2 for x in (*rec[1:5], *rec[5])]
    code = events._CODE["delivered"]
    ints = events._INTS[code]
    step = events.CHUNK * (chunk.HEAD + len(ints))
    t0 = time.perf_counter_ns()
    stream = b"".join(pack(chunk.encode_kind(code, flat[i:i + step], ints))
                      for i in range(0, len(flat), step))
    out["v3 chunks encode"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(stream) + 1)
    unpacker.feed(stream)
    count = sum(1 for c in unpacker for _ in chunk.records(c))
    out["v3 chunks decode"] = (time.perf_counter_ns() - t0) / n
    out["v3 chunks bytes/event"] = len(stream) / n
    assert count == n
    t0 = time.perf_counter_ns()
    stream = b"".join(map(pack, v2))
    out["v2 stream encode"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(stream) + 1)
    unpacker.feed(stream)
    count = sum(1 for _ in unpacker)
    out["v2 stream decode"] = (time.perf_counter_ns() - t0) / n
    out["v2 stream bytes/event"] = len(stream) / n
    assert count == n
    recs = [["delivered", mid, now + i, mono + i, dict(FIELDS, delivery_tag=i), i, now + i]
            for i, mid in enumerate(ids)]
    t0 = time.perf_counter_ns()
    stream = b"".join(map(pack, recs))
    out["v1 stream encode"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(stream) + 1)
    unpacker.feed(stream)
    count = sum(1 for _ in unpacker)
    out["v1 stream decode"] = (time.perf_counter_ns() - t0) / n
    assert count == n
    hdr = struct.Struct(">I").pack
    t0 = time.perf_counter_ns()
    parts = []
    for r in recs:
        b = pack(r)
        parts.append(hdr(len(b)))
        parts.append(b)
    framed = b"".join(parts)
    out["v1 length-prefixed encode"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    unpackb, unpack_from, pos, end, count = msgpack.unpackb, struct.Struct(">I").unpack_from, \
        0, len(framed), 0
    while pos < end:
        (size,) = unpack_from(framed, pos)
        unpackb(framed[pos + 4:pos + 4 + size], raw=False)
        pos += 4 + size
        count += 1
    out["v1 length-prefixed decode"] = (time.perf_counter_ns() - t0) / n
    assert count == n
    out["v1 stream bytes/event"] = len(stream) / n
    out["v1 length-prefixed bytes/event"] = len(framed) / n
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.events_speed")
    p.add_argument("--events", type=int, default=200_000, help="events per run")
    p.add_argument("--repeat", type=int, default=5, help="runs per row: best and median shown")
    p.add_argument("--threads", type=int, default=4)
    args = p.parse_args(argv)
    n, k = args.events, args.repeat
    tmp = tempfile.mkdtemp(prefix="leveret-events-bench-")
    rows = []

    def d(name):
        return tempfile.mkdtemp(prefix=name.replace(":", "_"), dir=tmp)

    try:
        for name, loop in (("put()", _put_loop), ("emit()", _emit_loop)):
            for level in ("off", "full", "sampled:100"):
                best, med = repeat(lambda: bench_emit(level, n, d(level), loop), k)
                rows.append((f"{name}, events={level}", best, med, "ns/event",
                             "writer thread running"))
            best, med = repeat(lambda: bench_emit_alone(n, d("alone"), loop), k)
            rows.append((f"{name}, full, writer idle", best, med, "ns/event",
                         "the caller's own cost"))
        best, med = repeat(lambda: bench_threads(args.threads, n, d("threads")), k)
        rows.append((f"emit(), full, {args.threads} threads", best, med, "ns/event",
                     "wall time / all events"))
        writer = [bench_writer(n, d("writer")) for _ in range(k)]
        ns = sorted(w[0] for w in writer)
        rows.append(("writer thread: encode + write", ns[0], ns[k // 2], "ns/event",
                     f"{writer[0][1]:.1f} bytes/event on disk"))
        for mode in ("off", "write", "fsync"):
            batches = max(1, n // (10 if mode != "fsync" else 1000))
            best, med = repeat(lambda: bench_sync(mode, batches, d("sync")), k)
            rows.append((f"10 emit() + sync(), events_sync={mode}", best, med, "ns/batch",
                         "a confirm batch of 10 events"))
        formats = [bench_formats(n) for _ in range(k)]
        for name in formats[0]:
            vals = sorted(f[name] for f in formats)
            unit = "bytes/event" if "bytes" in name else "ns/event"
            rows.append((f"format: {name}", vals[0], vals[k // 2], unit, ""))
    finally:
        events.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {n} events per run, "
          f"{k} runs per row; load average {os.getloadavg()[0]:.1f}")
    print(f"{'':<36} {'best':>8} {'median':>8}")
    for name, best, med, unit, note in rows:
        print(f"{name:<36} {best:8.0f} {med:8.0f} {unit:<12} {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
