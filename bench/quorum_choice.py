"""How to build quorum queues: the measurement behind docs/cluster.md, "Quorum queues".

Two candidates, each with 3 members on this machine's loopback and 1 KiB messages:

1. ``leveret``: Leveret's quorum queue as built (the mirrored queue's protocol; every member
   writes and syncs each message, the leader confirms once a majority has it), in a 3-node
   cluster started by bench/mirroring_cost.py's LocalCluster, beside a classic queue without mirrors
   and a classic queue mirrored to every node (ha-mode all) on the same cluster; a publisher on
   node 1 (the queues' home) with publisher confirms, persistent messages.
2. ``raft``: a Raft log per queue with PySyncObj, the Raft library Leveret already runs for its
   definitions (pinned pysyncobj, with Leveret's fsync of the journal, actors/node/raft_storage.py,
   and the cluster secret's encryption): three members in three processes, each replicating
   ``append(body)``; the leader's appends are measured from their call to their commit callback
   (the moment a quorum queue could confirm). Without ``appendEntriesUseBatch`` (one entry a
   message, as the definitions log runs) and with it.

For each: ``latency`` (200 publishes one at a time, each waiting for its confirm / commit: p50 and
p99 ms) and ``throughput`` (N messages with at most 256 unconfirmed: messages per second).

    .venv/bin/python -m bench.quorum_choice [--messages 3000] [--only leveret|raft]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BODY = b"x" * 1024
WINDOW = 256
LATENCY_N = 200


def _pcts(samples_ms: list) -> dict:
    s = sorted(samples_ms)
    return {"p50_ms": round(statistics.median(s), 2),
            "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))], 2)}


# --------------------------------------------------------------------------- 1. Leveret


async def _amqp_run(url: str, queue: str, n: int) -> dict:
    import aio_pika
    conn = await aio_pika.connect(url)
    try:
        ch = await conn.channel(publisher_confirms=True)
        ex = ch.default_exchange
        lat = []
        for _ in range(LATENCY_N):
            t0 = time.perf_counter()
            await ex.publish(aio_pika.Message(BODY, delivery_mode=2), routing_key=queue)
            lat.append((time.perf_counter() - t0) * 1000)
        sem = asyncio.Semaphore(WINDOW)

        async def one():
            async with sem:
                await ex.publish(aio_pika.Message(BODY, delivery_mode=2), routing_key=queue)
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        rate = n / (time.perf_counter() - t0)
        return {**_pcts(lat), "msg_per_s": round(rate)}
    finally:
        await conn.close()


def measure_leveret(n: int, log=print) -> dict:
    import pika
    from bench.mirroring_cost import LocalCluster
    out = {}
    with LocalCluster(log=log) as cluster:
        cluster.ctl(0, "set_policy", "ha-all", r"^mirrored\.", '{"ha-mode":"all"}')
        target = cluster.target(0)
        queues = {"classic": ("plain.q", {}), "mirrored (ha-mode all)": ("mirrored.q", {}),
                  "quorum": ("quorum.q", {"x-queue-type": "quorum"})}
        conn = pika.BlockingConnection(pika.URLParameters(target.url))
        ch = conn.channel()
        for name, args in queues.values():
            ch.queue_declare(name, durable=True, arguments=args)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every member synchronised
            rows = subprocess.run(
                [os.path.join(os.path.dirname(sys.executable), "leveretctl"), "--data-dir",
                 cluster.data_dir(0), "list_queues", "name", "synchronised_mirrors"],
                capture_output=True, text=True).stdout
            if all(line.count("leveret@node") == 2 for line in rows.splitlines()
                   if line.startswith(("mirrored.q", "quorum.q"))):
                break
            time.sleep(0.2)
        conn.close()
        for label, (name, _) in queues.items():
            out[label] = asyncio.run(_amqp_run(target.url, name, n))
            log(f"leveret {label}: {out[label]}")
            c = pika.BlockingConnection(pika.URLParameters(target.url))
            c.channel().queue_purge(name)
            c.close()
    return out


# --------------------------------------------------------------------------- 2. Raft per queue


def _member(me: str, others: list, folder: str, lead: bool, batch: bool):
    from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated
    from actors import secure
    from actors.node import raft_storage

    class Log(SyncObjConsumer):
        def __init__(self):
            super().__init__()
            self.n = 0

        @replicated
        def append(self, body):
            self.n += 1  # a quorum queue's state machine would enqueue the body here
            return self.n

    raft_storage.install()
    os.makedirs(folder, exist_ok=True)
    conf = SyncObjConf(journalFile=os.path.join(folder, "raft.journal"),
                       appendEntriesUseBatch=batch,
                       raftMinTimeout=0.4 if lead else 3.0, raftMaxTimeout=0.6 if lead else 4.0,
                       appendEntriesPeriod=0.1, commandsWaitLeader=False, useFork=False,
                       connectionTimeout=5.0,
                       dynamicMembershipChange=False,
                       password=secure.raft_password(b"bench-secret" * 3))
    state = Log()
    return SyncObj(me, others, conf=conf, consumers=[state]), state


def raft_follower_main(me: str, others: str, folder: str, batch: str) -> None:
    obj, _ = _member(me, others.split(","), folder, False, batch == "1")
    while True:  # until the driver kills it
        time.sleep(1)


def measure_raft(n: int, batch: bool, log=print) -> dict:
    from bench.refbroker import free_port
    ports = [free_port() for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    tmp = tempfile.mkdtemp(prefix="leveret-bench-raft-")
    procs = []
    try:
        for i in (1, 2):
            others = ",".join(a for a in addrs if a != addrs[i])
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "bench.quorum_choice", "--raft-follower", addrs[i],
                 others, os.path.join(tmp, f"m{i}"), "1" if batch else "0"],
                stdin=subprocess.DEVNULL))
        obj, state = _member(addrs[0], addrs[1:], os.path.join(tmp, "m0"), True, batch)
        deadline = time.monotonic() + 30
        while not (obj._isLeader() and obj.isReady()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not obj._isLeader():
            raise RuntimeError("member 0 did not become the leader")
        lat = []
        for _ in range(LATENCY_N):
            done = threading.Event()
            t0 = time.perf_counter()
            state.append(BODY, callback=lambda r, e: done.set())
            done.wait(10)
            lat.append((time.perf_counter() - t0) * 1000)
        sem = threading.Semaphore(WINDOW)
        all_done = threading.Event()
        left = [n]
        lock = threading.Lock()

        def cb(result, error):
            sem.release()
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    all_done.set()
        t0 = time.perf_counter()
        for _ in range(n):
            sem.acquire()
            state.append(BODY, callback=cb)
        all_done.wait(300)
        rate = n / (time.perf_counter() - t0)
        obj.destroy()
        return {**_pcts(lat), "msg_per_s": round(rate)}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--raft-follower"]:
        raft_follower_main(*argv[1:5])
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.quorum_choice")
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--only", choices=("leveret", "raft"))
    args = ap.parse_args(argv)
    results = {}
    if args.only in (None, "raft"):
        results["raft per queue (pysyncobj, one entry a message)"] = measure_raft(
            args.messages, False)
        print("raft unbatched:", results["raft per queue (pysyncobj, one entry a message)"])
        results["raft per queue (pysyncobj, batched appends)"] = measure_raft(
            args.messages, True)
        print("raft batched:", results["raft per queue (pysyncobj, batched appends)"])
    if args.only in (None, "leveret"):
        for k, v in measure_leveret(args.messages).items():
            results[f"leveret {k}"] = v
    print(json.dumps(results, indent=1))
    print("| variant | confirm p50 ms | p99 ms | msg/s (window 256) |")
    print("| --- | --- | --- | --- |")
    for k, v in results.items():
        print(f"| {k} | {v['p50_ms']} | {v['p99_ms']} | {v['msg_per_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
