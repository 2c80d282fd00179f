"""Deep queue: publish N messages with no consumer, watch the queue worker's RSS, then drain with
one consumer (issue 3, item 6: bodies paged out to the index/msg_store; issue 12: transient
queues page too).

    .venv/bin/python -m bench.deep_queue --messages 2000000        # starts its own node
    .venv/bin/python -m bench.deep_queue --messages 2000000 --transient  # a transient queue
    .venv/bin/python -m bench.deep_queue --transient --max-priority 9  # half at 9, half at 0
    .venv/bin/python -m bench.deep_queue --transient --max-length 1000000  # drop-head
    .venv/bin/python -m bench.deep_queue --transient --rabbitmq  # RabbitMQ (classic queue v2)
    .venv/bin/python -m bench.deep_queue --url amqp://... --pid PID  # an external broker

Prints the peak RSS of the queue worker while filling and while draining, the publish and
drain rates, and the bytes written per message in each phase (bench/procio.py: write_bytes of
the node's process tree, and the disk's sectors written, machine-wide). A measurement, not a test: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import threading
import time

from bench import codec as codec_mod
from bench.loadgen import run_loop, setup_role
from bench.node import LeveretNode
from bench.procio import delta, disk_bytes, tree_write_bytes
from bench.url import parse_url


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """VmRSS, or RssAnon (the process's own memory) / RssFile (mapped file pages: LMDB's map
    pages read or written, which the kernel can drop at any time) of /proc/PID/status."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def queue_worker_pids(node_pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(node_pid)],
                         capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "--kind queue" in line]


class RssWatch(threading.Thread):
    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids = pids
        self.peak = 0  # VmRSS
        self.peak_anon = 0  # RssAnon
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, sum(rss_kb(p) for p in self.pids))
            self.peak_anon = max(self.peak_anon, sum(rss_kb(p, "RssAnon") for p in self.pids))


def phase(target, codec, specs, until, timeout):
    roles = [setup_role(target, codec, s) for s in specs]
    t0 = time.monotonic()
    deadline = t0 + timeout
    step = 1.0
    while time.monotonic() < deadline and not until(roles):
        now = time.monotonic()
        run_loop(roles, now, now, now + step)
    elapsed = time.monotonic() - t0
    for r in roles:
        r.conn.close()
    return roles, elapsed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=2_000_000)
    p.add_argument("--size", type=int, default=1500)
    p.add_argument("--url", help="broker to use (default: start a Leveret node)")
    p.add_argument("--pid", type=int, help="with --url: process whose children are measured")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--transient", action="store_true",
                   help="a non-durable queue and transient messages (default: durable, persistent)")
    p.add_argument("--max-priority", type=int, default=0,
                   help="a priority queue (x-max-priority); the two publishing channels send "
                        "priority 0 and this priority")
    p.add_argument("--max-length", type=int, default=0,
                   help="a length-limited queue (x-max-length, drop-head)")
    p.add_argument("--rabbitmq", action="store_true",
                   help="measure a private RabbitMQ node instead (bench/refbroker.py), with "
                        "x-queue-version 2 (classic queues v2), RSS of all its processes")
    a = p.parse_args(argv)
    durable = not a.transient
    node = rmq = None
    if a.rabbitmq:
        from bench.refbroker import RabbitMQNode, descendants
        rmq = RabbitMQNode()
        rmq.start()
        target, node_pid = parse_url(rmq.url), None
    elif a.url:
        target, node_pid = parse_url(a.url), a.pid
    else:
        node = LeveretNode()
        node.start()
        target, node_pid = parse_url(node.url), node.pid
    try:
        pids = queue_worker_pids(node_pid) if node_pid else []
        if rmq is not None:
            pids = [rmq.proc.pid] + [pid for pid, _ in descendants(rmq.proc.pid)]
        codec = codec_mod.load("auto")
        queue = "deep-queue"
        setup = setup_role(target, codec, {"kind": "producer", "channels": [1], "confirm": None,
                                           "queue": queue, "persistent": durable,
                                           "message_size": a.size})
        args = {}
        if a.max_priority:
            args["x-max-priority"] = a.max_priority
        if a.max_length:
            args["x-max-length"] = a.max_length
        if rmq is not None:
            args["x-queue-version"] = 2
        setup.conn.queue_declare(1, queue, durable=durable, arguments=args)
        setup.conn.queue_purge(1, queue)
        setup.conn.close()
        watch = RssWatch(pids)
        watch.start()
        base = sum(rss_kb(p) for p in pids)
        io = [(tree_write_bytes(node_pid) if node_pid else {}, disk_bytes())]
        prod = {"kind": "producer", "channels": [1, 2], "confirm": 2000, "queue": queue,
                "persistent": durable, "message_size": a.size,
                "priorities": {1: 0, 2: a.max_priority} if a.max_priority else None}
        roles, t_fill = phase(target, codec, [prod],
                              lambda rs: rs[0].confirmed >= a.messages, a.timeout)
        confirmed = roles[0].confirmed
        expect = min(confirmed, a.max_length) if a.max_length else confirmed  # (drop-head)
        io.append((tree_write_bytes(node_pid) if node_pid else {}, disk_bytes()))
        fill_peak, watch.peak = watch.peak, 0
        fill_anon, watch.peak_anon = watch.peak_anon, 0
        cons = {"kind": "consumer", "channels": [1], "queue": queue, "no_ack": False,
                "ack_every": 1, "prefetch": 100}
        roles, t_drain = phase(target, codec, [cons],
                               lambda rs: rs[0].consumed >= expect, a.timeout)
        drained = roles[0].consumed
        io.append((tree_write_bytes(node_pid) if node_pid else {}, disk_bytes()))
        watch.stop.set()
        print(f"{'RabbitMQ ' + str(rmq.version()) if rmq else 'queue workers'} {pids}: RSS "
              f"before {base / 1024:.0f} MiB")
        kind = ("persistent" if durable else "transient") + "".join(
            f" {k}={v}" for k, v in args.items())
        print(f"filled {confirmed:,} {kind} {a.size}-byte messages in {t_fill:.0f} s "
              f"({confirmed / t_fill:,.0f} msg/s); peak queue-worker RSS "
              f"{fill_peak / 1024:.0f} MiB (anonymous {fill_anon / 1024:.0f} MiB)")
        for (label, n), (a, b) in zip((("filling", confirmed), ("draining", drained)),
                                      zip(io, io[1:])):
            wb = delta(a[0], b[0]) if node_pid else None
            disk = b[1] - a[1] if None not in (a[1], b[1]) else None
            print(f"{label}: " + (f"{wb / max(n, 1):,.0f} bytes written (write_bytes) per "
                                  "message, " if wb is not None else "") +
                  (f"{disk / max(n, 1):,.0f} disk bytes per message (machine-wide)"
                   if disk is not None else ""))
        print(f"drained {drained:,} in {t_drain:.0f} s ({drained / t_drain:,.0f} msg/s); "
              f"peak queue-worker RSS {watch.peak / 1024:.0f} MiB (anonymous "
              f"{watch.peak_anon / 1024:.0f} MiB)")
    finally:
        if node is not None:
            node.stop()
        if rmq is not None:
            rmq.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
