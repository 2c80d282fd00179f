"""Deep queue: publish N messages with no consumer, watch the queue worker's RSS, then drain with
one consumer (bodies are paged out to the index/msg_store; transient queues page too).

    .venv/bin/python -m bench.deep_queue --messages 2000000        # starts its own node
    .venv/bin/python -m bench.deep_queue --messages 2000000 --transient  # a transient queue
    .venv/bin/python -m bench.deep_queue --transient --max-priority 9  # half at 9, half at 0
    .venv/bin/python -m bench.deep_queue --transient --max-length 1000000  # drop-head
    .venv/bin/python -m bench.deep_queue --transient --rabbitmq  # RabbitMQ (classic queue v2)
    .venv/bin/python -m bench.deep_queue --transient --confirm-on ack  # x-confirm-on=ack
    .venv/bin/python -m bench.deep_queue --matrix --rabbitmq  # every type, both brokers, a table
    .venv/bin/python -m bench.deep_queue --stream --messages 1000000 --size 100  # a stream
    .venv/bin/python -m bench.deep_queue --stream --compare  # Leveret, then RabbitMQ, a table
    .venv/bin/python -m bench.deep_queue --url amqp://... --pid PID  # an external broker

Prints the peak RSS of the queue worker while filling and while draining, the publish and
drain rates, and the bytes written per message in each phase (bench/procio.py: write_bytes of
the node's process tree, and the disk's sectors written, machine-wide). A measurement, not a test: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import subprocess
import threading
import time

from amqpclient import codec as codec_mod
from bench.loadgen import run_loop, setup_role
from bench.leveret_node import LeveretNode
from bench.procio import delta, disk_bytes, tree_write_bytes
from amqpclient.url import parse_url


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


def queue_count(target, codec, queue: str) -> int:
    """The queue's message count (a passive queue.declare)."""
    setup = setup_role(target, codec, {"kind": "producer", "channels": [1], "confirm": None,
                                       "queue": queue, "persistent": False,
                                       "message_size": 10})
    try:
        return setup.conn.queue_declare(1, queue, passive=True)[0]
    finally:
        setup.conn.close()


def run_case(messages: int, size: int, durable: bool, max_priority: int = 0,
             max_length: int = 0, confirm_on: str = "", rabbitmq: bool = False,
             url: str | None = None, pid: int | None = None, timeout: float = 3600,
             stream: bool = False) -> dict:
    """Fill one queue with no consumer, then drain it with one; returns the figures. A
    stream is read from its first offset (it keeps its messages: the drain reads them)."""
    node = rmq = None
    if rabbitmq:
        from bench.refbroker import RabbitMQNode, descendants
        rmq = RabbitMQNode()
        rmq.start()
        target, node_pid = parse_url(rmq.url), None
    elif url:
        target, node_pid = parse_url(url), pid
    else:
        node = LeveretNode()
        node.start()
        target, node_pid = parse_url(node.url), node.pid
    try:
        pids = queue_worker_pids(node_pid) if node_pid else []
        if rmq is not None:
            pids = [rmq.proc.pid] + [p for p, _ in descendants(rmq.proc.pid)]
        codec = codec_mod.load("auto")
        queue = "deep-queue"
        setup = setup_role(target, codec, {"kind": "producer", "channels": [1], "confirm": None,
                                           "queue": queue, "persistent": durable,
                                           "message_size": size})
        args = {}
        if max_priority:
            args["x-max-priority"] = max_priority
        if max_length:
            args["x-max-length"] = max_length
        if confirm_on:
            args["x-confirm-on"] = confirm_on
        if stream:
            args["x-queue-type"] = "stream"
        elif rmq is not None:
            args["x-queue-version"] = 2
        setup.conn.queue_declare(1, queue, durable=durable, arguments=args)
        if not stream:  # (a stream refuses queue.purge; the node is a fresh one)
            setup.conn.queue_purge(1, queue)
        setup.conn.close()
        watch = RssWatch(pids)
        watch.start()
        base = sum(rss_kb(p) for p in pids)
        io = [(tree_write_bytes(node_pid) if node_pid else {}, disk_bytes())]
        # x-confirm-on=ack: the confirm waits for a consumer's ack, so the publisher keeps
        # every message unconfirmed (confirm mode, an unbounded window) and the fill is over
        # when it has sent them all and the queue holds them
        prod = {"kind": "producer", "channels": [1, 2],
                "confirm": 2000 if not confirm_on else 1 << 40, "queue": queue,
                "persistent": durable, "message_size": size,
                "priorities": {1: 0, 2: max_priority} if max_priority else None}
        if confirm_on:  # (counters() counts from the last run_loop step only)
            done = lambda rs: rs[0].conn.bytes_sent // rs[0].msg_len >= messages  # noqa: E731
        else:
            done = lambda rs: rs[0].confirmed >= messages  # noqa: E731
        roles, t_fill = phase(target, codec, [prod], done, timeout)
        if confirm_on:
            t0 = time.monotonic() - t_fill
            want = min(messages, max_length or messages)
            last = -1  # (a few of the last messages sent may not reach the queue: the count
            #            is taken once it stops growing)
            while (held := queue_count(target, codec, queue)) < want and held != last and \
                    time.monotonic() - t0 < timeout:
                last = held
                time.sleep(1.0)
            t_fill = time.monotonic() - t0
            confirmed = held if not max_length else roles[0].conn.bytes_sent // roles[0].msg_len
        else:
            confirmed = roles[0].confirmed
        # what the queue holds: the confirmed messages and those still unconfirmed when the
        # publisher stopped (drop-head: the last max_length); the drain takes all of it
        expect = queue_count(target, codec, queue)
        if stream and rmq is not None:
            # RabbitMQ's count of a stream comes from metrics a few seconds old (0 just
            # after the fill): the drain reads what was confirmed, which the log holds
            expect = max(expect, confirmed)
        io.append((tree_write_bytes(node_pid) if node_pid else {}, disk_bytes()))
        fill_peak, watch.peak = watch.peak, 0
        fill_anon, watch.peak_anon = watch.peak_anon, 0
        cons = {"kind": "consumer", "channels": [1], "queue": queue, "no_ack": False,
                "ack_every": 1, "prefetch": 100,
                "arguments": {"x-stream-offset": "first"} if stream else {}}
        roles, t_drain = phase(target, codec, [cons],
                               lambda rs: rs[0].consumed >= expect, timeout)
        drained = roles[0].consumed
        io.append((tree_write_bytes(node_pid) if node_pid else {}, disk_bytes()))
        watch.stop.set()
        left = queue_count(target, codec, queue)
        per_msg = []
        for n, (a, b) in zip((confirmed, drained), zip(io, io[1:])):
            wb = delta(a[0], b[0]) if node_pid else None
            disk = b[1] - a[1] if None not in (a[1], b[1]) else None
            per_msg.append((wb / max(n, 1) if wb is not None else None,
                            disk / max(n, 1) if disk is not None else None))
        kind = ("persistent" if durable else "transient") + "".join(
            f" {k}={v}" for k, v in args.items())
        return {"broker": (rmq.version() or "RabbitMQ") if rmq else "Leveret", "pids": pids,
                "kind": kind, "size": size, "base": base, "filled": confirmed,
                "t_fill": t_fill, "fill_peak": fill_peak, "fill_anon": fill_anon,
                "drained": drained, "t_drain": t_drain, "drain_peak": watch.peak,
                "drain_anon": watch.peak_anon, "left": left, "per_msg": per_msg}
    finally:
        if node is not None:
            node.stop()
        if rmq is not None:
            rmq.stop()


def report(r: dict) -> None:
    print(f"{r['broker']} {r['pids']}: RSS before {r['base'] / 1024:.0f} MiB")
    print(f"filled {r['filled']:,} {r['kind']} {r['size']}-byte messages in {r['t_fill']:.0f} s "
          f"({r['filled'] / r['t_fill']:,.0f} msg/s); peak queue-worker RSS "
          f"{r['fill_peak'] / 1024:.0f} MiB (anonymous {r['fill_anon'] / 1024:.0f} MiB)")
    for label, (wb, disk) in zip(("filling", "draining"), r["per_msg"]):
        print(f"{label}: " + (f"{wb:,.0f} bytes written (write_bytes) per message, "
                              if wb is not None else "") +
              (f"{disk:,.0f} disk bytes per message (machine-wide)" if disk is not None
               else ""))
    print(f"drained {r['drained']:,} in {r['t_drain']:.0f} s "
          f"({r['drained'] / r['t_drain']:,.0f} msg/s), {r['left']:,} left; peak queue-worker "
          f"RSS {r['drain_peak'] / 1024:.0f} MiB (anonymous {r['drain_anon'] / 1024:.0f} MiB)",
          flush=True)


# --matrix: every queue type, transient and persistent, Leveret and RabbitMQ in one invocation
MATRIX = [("plain", {}), ("priority", {"max_priority": 9}),
          ("length-limited", {"max_length": None}),  # (half the messages)
          ("x-confirm-on=ack", {"confirm_on": "ack"})]


def table(rows: list) -> None:
    """(label, kind, run_case's figures) rows as one markdown table."""
    print("\n| broker | queue | messages | filled | fill rate | peak RSS (anonymous) | drained "
          "| left | drain rate | peak RSS (anonymous) | disk bytes / msg filling |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, kind, r in rows:
        disk = r["per_msg"][0][1]
        print(f"| {r['broker']} | {label} | {kind} | {r['filled']:,} | "
              f"{r['filled'] / r['t_fill']:,.0f} msg/s | {r['fill_peak'] / 1024:.0f} MiB "
              f"({r['fill_anon'] / 1024:.0f}) | {r['drained']:,} | {r['left']:,} | "
              f"{r['drained'] / r['t_drain']:,.0f} msg/s | {r['drain_peak'] / 1024:.0f} MiB "
              f"({r['drain_anon'] / 1024:.0f}) | "
              f"{'%.0f' % disk if disk is not None else '-'} |")


def compare(a) -> None:
    """The same case on a fresh Leveret node, then on a private RabbitMQ node (one
    invocation: the same machine's conditions, as far as a shared machine allows)."""
    rows = []
    label = "stream" if a.stream else "plain"
    for rabbitmq in (False, True):
        r = run_case(a.messages, a.size, not a.transient, a.max_priority, a.max_length,
                     "" if rabbitmq else a.confirm_on, rabbitmq, timeout=a.timeout,
                     stream=a.stream)
        report(r)
        rows.append((label, "persistent" if not a.transient else "transient", r))
    table(rows)


def matrix(a) -> None:
    rows = []
    for durable in (False, True):
        for label, opts in MATRIX:
            opts = {k: (a.messages // 2 if v is None else v) for k, v in opts.items()}
            for rabbitmq in (False, True) if a.rabbitmq else (False,):
                if rabbitmq and "confirm_on" in opts:
                    continue  # (not a RabbitMQ feature)
                r = run_case(a.messages, a.size, durable, rabbitmq=rabbitmq,
                             timeout=a.timeout, **opts)
                report(r)
                rows.append((label, "persistent" if durable else "transient", r))
    table(rows)


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
    p.add_argument("--confirm-on", default="",
                   help="x-confirm-on (Leveret): e.g. ack; the publisher keeps every message "
                        "unconfirmed until the drain")
    p.add_argument("--stream", action="store_true",
                   help="a stream (x-queue-type stream), drained by a consumer from its first "
                        "offset")
    p.add_argument("--rabbitmq", action="store_true",
                   help="measure a private RabbitMQ node instead (bench/refbroker.py), with "
                        "x-queue-version 2 (classic queues v2), RSS of all its processes; with "
                        "--matrix: RabbitMQ as well, beside each Leveret case")
    p.add_argument("--matrix", action="store_true",
                   help="every queue type (plain, --max-priority 9, --max-length messages/2, "
                        "x-confirm-on=ack), transient then persistent, each on a fresh node, and "
                        "a table at the end")
    p.add_argument("--compare", action="store_true",
                   help="the case on Leveret, then on a private RabbitMQ node, and a table of "
                        "both (x-confirm-on is Leveret's alone: RabbitMQ runs without it)")
    a = p.parse_args(argv)
    if a.compare:
        compare(a)
        return 0
    if a.matrix:
        matrix(a)
        return 0
    report(run_case(a.messages, a.size, not a.transient, a.max_priority, a.max_length,
                    a.confirm_on, a.rabbitmq, a.url, a.pid, a.timeout, stream=a.stream))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
