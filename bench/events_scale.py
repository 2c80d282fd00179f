"""Scale run of the lifecycle job: generate N synthetic events, then time the job on them.

    python -m bench.events_scale --events 10000000 --dir /tmp/leveret-scale [--skip-generate]

Generation: W worker processes (default: one per CPU), each playing one node's channel process
and queue process (`leveret@nK`, conn-K and queue-K) with the fields the actors emit, and
writing through actors/events.py (EventLog.record: the v3 records the broker writes, a routed
publish as one `published` record as the channel writes it; 64 MiB files), with a virtual
clock: messages published at --rate per second per worker, each step a few hundred
microseconds after the previous one. The mix, per message:
82% published, routed, enqueued, confirmed, delivered, acked (persistent half of them, with
stored + synced: 6 or 8 events); 5% nacked once with requeue, redelivered, acked; 3% expired;
2% rejected to a dead-letter queue; 2% dropped by overflow; 5% still queued at the end;
1% unroutable mandatory publishes (returned).

Then runs `python -m spark_analysis.lifecycle --events DIR/events --out DIR/out` (local[*]) and
prints the generation time, the job time and its summary. Not a test; figures in docs/events.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import time

from actors.events import EventLog

QUEUES = [f"orders-{i}" for i in range(8)]


class Gen:
    """One worker: a node's channel and queue processes, a virtual clock."""

    def __init__(self, directory: str, k: int, rate: float, start_mono: int):
        node = f"leveret@n{k}"
        # virtual time: no timed heartbeats; a bound far above the 20 000 messages per flush
        opts = dict(flush_interval=3600, heartbeat_interval=0, max_buffered=1 << 21)
        self.chan = EventLog(directory, node, f"conn-{k}", **opts)
        self.queue = EventLog(directory, node, f"queue-{k}", **opts)
        self.rng = random.Random(k)
        self.gap = int(1e9 / rate)  # ns between two publishes of this worker
        self.start = start_mono  # virtual monotonic time of the first publish
        self.prefix = os.urandom(8)
        self.copy_prefix = os.urandom(8)  # the msg_ids of dead-lettered copies
        self.count = 0  # events so far
        self.tag = 0  # delivery tags of the one consumer channel
        for q in QUEUES + ["dlq"]:
            self.emit(self.queue, "queue_started", None, start_mono - 1_000_000, actor="queue",
                      queue=q, recovered=0)

    def emit(self, log, kind, mid, t, **fields):
        fields["vhost"] = "/"
        log.record(kind, mid, t, fields)
        self.count += 1

    def message(self, i: int) -> None:
        rng, ch, qu = self.rng, self.chan, self.queue
        mid = self.prefix + i.to_bytes(8, "big")
        t = self.start + i * self.gap
        step = lambda: int(rng.expovariate(1 / 300_000)) + 20_000  # noqa: E731  ~0.3 ms
        q = QUEUES[i % len(QUEUES)]
        persistent = i % 2 == 0
        r = rng.random()
        publish = dict(actor="channel", connection="c1", channel=1, seq_no=i + 1,
                       exchange="amq.direct", routing_key=q, persistent=persistent,
                       message_id=f"m-{i}", size=100)
        if r >= 0.99:
            self.emit(ch, "publish_received", mid, t, **publish)
            t += step()
            self.emit(ch, "unroutable", mid, t, actor="channel", mandatory=True)
            self.emit(ch, "returned", mid, t + step(), actor="channel")
            self.emit(ch, "confirmed", mid, t + 2 * step(), actor="channel", connection="c1",
                      channel=1, seq_no=i + 1)
            return
        # (as the channel writes a routed publish: one record, publish_received and routed)
        self.emit(ch, "published", mid, t, queues=[q], **publish)
        t += step()
        self.emit(qu, "enqueued", mid, t, actor="queue", queue=q, seq_id=i, paged=False,
                  durable=True)
        if persistent:
            t += step()
            self.emit(qu, "stored", mid, t, actor="backing_queue", queue=q, seq_id=i,
                      where="index")
            t += step() + 2_000_000
            self.emit(qu, "synced", mid, t, actor="backing_queue", queue=q, seq_id=i)
        t += step()
        self.emit(ch, "confirmed", mid, t, actor="channel", connection="c1", channel=1,
                  seq_no=i + 1)
        if r < 0.05:  # still queued at the end
            return
        if r < 0.07:
            self.emit(qu, "dropped", mid, t + step(), actor="queue", queue=q, seq_id=i,
                      reason="maxlen")
            return
        if r < 0.10:
            self.emit(qu, "expired", mid, t + 50 * step(), actor="queue", queue=q, seq_id=i)
            return
        t += step()
        self.tag += 1
        self.emit(ch, "delivered", mid, t, actor="channel", queue=q, connection="c2",
                  channel=1, delivery_tag=self.tag, consumer_tag="ctag", redelivered=False,
                  no_ack=False)
        t += step()
        if r < 0.12:
            self.emit(ch, "rejected", mid, t, actor="channel", queue=q, connection="c2",
                      channel=1, delivery_tag=self.tag, requeue=False)
            # (as the broker writes it: the copy is a message of its own, linked to this one)
            child = self.copy_prefix + i.to_bytes(8, "big")
            self.emit(qu, "dead_lettered", mid, t + step(), actor="queue", queue=q, seq_id=i,
                      reason="rejected", exchange="dlx", new_msg_id=child)
            self.emit(qu, "dead_letter_published", child, t + 2 * step(), actor="queue",
                      parent_msg_id=mid, reason="rejected", exchange="dlx", routing_key=q,
                      queues=["dlq"], source_queue=q, persistent=persistent,
                      message_id=f"m-{i}")
            self.emit(qu, "enqueued", child, t + 3 * step(), actor="queue", queue="dlq",
                      seq_id=i, paged=False, durable=True)
            return
        if r < 0.17:
            self.emit(ch, "nacked", mid, t, actor="channel", queue=q, connection="c2",
                      channel=1, delivery_tag=self.tag, requeue=True)
            t += step()
            self.emit(qu, "requeued", mid, t, actor="queue", queue=q, seq_id=i)
            t += step()
            self.tag += 1
            self.emit(ch, "delivered", mid, t, actor="channel", queue=q, connection="c2",
                      channel=1, delivery_tag=self.tag, consumer_tag="ctag", redelivered=True,
                      no_ack=False)
            t += step()
        self.emit(ch, "acked", mid, t, actor="channel", queue=q, connection="c2", channel=1,
                  delivery_tag=self.tag)

    def close(self):
        self.chan.close()
        self.queue.close()


def _worker(args) -> tuple[int, int]:
    directory, k, target, rate, start_mono = args
    g = Gen(directory, k, rate, start_mono)
    i = 0
    while g.count < target:
        g.message(i)
        i += 1
        if i % 20000 == 0:
            g.chan.flush()
            g.queue.flush()
    g.close()
    return g.count, i


def generate(directory: str, events: int, workers: int, rate: float) -> tuple[int, int]:
    os.makedirs(directory, exist_ok=True)
    start = time.monotonic_ns() - int(events / workers / 7 / rate * 1e9)  # ends about now
    jobs = [(directory, k, events // workers, rate, start) for k in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        done = pool.map(_worker, jobs)
    return sum(d[0] for d in done), sum(d[1] for d in done)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.events_scale")
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--dir", default="/tmp/leveret-events-scale")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--rate", type=float, default=2000.0, help="publishes/s per worker")
    p.add_argument("--skip-generate", action="store_true", help="reuse DIR/events")
    p.add_argument("--job-args", default="", help="more arguments for the job")
    args = p.parse_args(argv)
    ev_dir, out_dir = os.path.join(args.dir, "events"), os.path.join(args.dir, "out")
    if not args.skip_generate:
        shutil.rmtree(ev_dir, ignore_errors=True)
        t0 = time.perf_counter()
        n, msgs = generate(ev_dir, args.events, args.workers, args.rate)
        gen = time.perf_counter() - t0
        size = sum(os.path.getsize(os.path.join(ev_dir, f)) for f in os.listdir(ev_dir))
        print(f"generated {n} events of {msgs} messages in {len(os.listdir(ev_dir))} files, "
              f"{size / 2 ** 20:.0f} MiB, in {gen:.1f} s", flush=True)
    cmd = [sys.executable, "-m", "spark_analysis.lifecycle", "--events", ev_dir, "--out",
           out_dir] + args.job_args.split()
    print("running:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    print(f"job: exit {rc}, {time.perf_counter() - t0:.1f} s wall (JVM start included)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
