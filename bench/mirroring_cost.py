"""The cluster scenario of `python -m bench` (`--scenarios cluster`, part of the default set):
the cost of mirroring.

It owns a 3-node cluster started for the run with `python -m actors.node.cluster_run` on spare
loopback ports in a temporary directory (stopped with SIGTERM to the launcher's PID, SIGKILL
after a timeout, and any node process that outlives it stopped by PID), and runs scenario (c)'s
load twice with the producer on node 1 and the consumer on node 2, on a queue declared on node 1
(its home):

1. unmirrored: a queue named leveret-bench-cluster-...;
2. mirrored: after `leveretctl --data-dir <node1> set_policy ha-all '^mirrored\\.'
   '{"ha-mode":"all"}'`, a queue named mirrored.leveret-bench-cluster-...

Both results carry the scenario key "cluster" and a "variant"; bench/make_bench.py prints them and
their ratio mirrored / unmirrored with bench/result_tables.py.  docs/bench.md, "The cluster scenario".
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from bench import result_tables, scenarios, scratch
from bench.aggregate import combine_runs
from bench.refbroker import amqp_answers, descendants, free_port, stop_leftovers
from amqpclient.url import AMQPTarget

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "cluster"
NODES = 3
START_TIMEOUT = 120.0       # every node answers AMQP and node 2 sees node 1's queues
STOP_TIMEOUT = 60.0         # launcher SIGTERM -> SIGKILL (it gives each node 20 s itself)
POLICY = ("ha-all", r"^mirrored\.", '{"ha-mode":"all"}')
MIRRORED_PREFIX = "mirrored.leveret-bench"

SCENARIO = dataclasses.replace(
    scenarios.C, key=KEY, title="(c) on a 3-node cluster, publish node 1, consume node 2",
    description="3 nodes started for the run; scenario (c) (manual ack, prefetch 100, "
                "confirms) with the producer on node 1, the consumer on node 2 and the queue's "
                "home on node 1; once on a plain queue, once on a queue mirrored to every node "
                "(ha-mode all); prints both and mirrored / unmirrored.",
    default=False)


class ClusterError(RuntimeError):
    pass


def split_spec(spec: str) -> tuple[str, bool]:
    """(the --scenarios value without "cluster", whether the cluster scenario is wanted).
    The groups "default" and "all" include it."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    want = any(p in (KEY, "default", "all") for p in parts)
    return ",".join(p for p in parts if p != KEY), want


def free_port_run(n: int, host: str = "127.0.0.1", avoid: range = range(0)) -> int:
    """A port p such that p .. p+n-1 are free on host and outside `avoid` (cluster_run gives
    node i the port base+i)."""
    for _ in range(100):
        base = free_port(host)
        ports = range(base, base + n)
        if base + n > 65536 or set(ports) & set(avoid):
            continue
        socks = []
        try:
            for p in ports:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((host, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise ClusterError(f"found no {n} consecutive free ports on {host}")


class LocalCluster:
    """`python -m actors.node.cluster_run` on spare ports in a temporary directory (a context
    manager)."""

    def __init__(self, nodes: int = NODES, host: str = "127.0.0.1", keep_dir: bool = False,
                 log=print):
        self.nodes = nodes                  # number of nodes
        self.host = host                    # listen address of every node
        self.keep_dir = keep_dir            # leave the data dirs and logs behind
        self.log = log                      # progress messages
        self.dir: str | None = None         # the nodes' data dirs (node1..) and logs
        self.port: int | None = None        # AMQP port of node 1 (node i+1: port+i)
        self.proc: subprocess.Popen | None = None   # the launcher
        self._nodes: list[tuple[int, int]] = []     # (pid, start time) of its processes

    def target(self, i: int) -> AMQPTarget:
        """Node i+1's AMQP address (guest, vhost /)."""
        return AMQPTarget(host=self.host, port=self.port + i)

    def data_dir(self, i: int) -> str:
        return os.path.join(self.dir, f"node{i + 1}")

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.dir = scratch.make("leveret-bench-cluster-")
        self.port = free_port_run(self.nodes, self.host)
        raft = free_port_run(self.nodes, self.host,
                             avoid=range(self.port, self.port + self.nodes))
        cmd = [sys.executable, "-m", "actors.node.cluster_run", "--nodes", str(self.nodes),
               "--host", self.host, "--port", str(self.port), "--cluster-port", str(raft),
               "--data-dir", self.dir, "--management-port", "0", "--prometheus-port", "0"]
        self.log(f"starting a {self.nodes}-node cluster: {' '.join(cmd)}")
        with open(os.path.join(self.dir, "cluster_run.log"), "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=REPO)
        deadline = time.monotonic() + START_TIMEOUT
        waiting = list(range(self.nodes))
        while waiting:
            if self.proc.poll() is not None:
                raise ClusterError(f"cluster_run exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"node(s) {[i + 1 for i in waiting]} did not answer within "
                                   f"{START_TIMEOUT:g}s:\n{self.log_tail()}")
            waiting = [i for i in waiting if not amqp_answers(self.host, self.port + i, 1.0)]
            if waiting:
                time.sleep(0.2)
        self._nodes = descendants(self.proc.pid)

    def ctl(self, i: int, *args: str) -> None:
        """leveretctl --data-dir <node i+1> ARGS; raises ClusterError when it fails."""
        exe = os.path.join(os.path.dirname(sys.executable), "leveretctl")
        cmd = [exe if os.path.exists(exe) else "leveretctl", "--data-dir", self.data_dir(i),
               *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise ClusterError(f"{' '.join(cmd)} failed ({res.returncode}): "
                               f"{(res.stdout + res.stderr).strip()}")

    def log_tail(self, n: int = 15) -> str:
        out = []
        for name in ["cluster_run.log"] + [f"node{i + 1}.log" for i in range(self.nodes)]:
            try:
                with open(os.path.join(self.dir, name), "rb") as f:
                    lines = f.read().decode(errors="replace").splitlines()[-n:]
                out.append(f"--- {name}\n" + "\n".join(lines))
            except OSError:
                pass
        return "\n".join(out)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._nodes = self._nodes or descendants(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        stop_leftovers(self._nodes, 5.0)
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def check_replication(cluster: LocalCluster, codec: str) -> None:
    """Declare a queue on node 1 and wait until node 2 sees it (the cluster has formed and
    replicates definitions); then delete it."""
    from bench.scenario_run import Control, wait_visible
    probe = f"leveret-bench-cluster-probe-{os.getpid()}"
    control = Control(cluster.target(0), "lean", codec)
    try:
        control.declare(probe, False, {})
        wait_visible(cluster.target(1), [probe], codec, timeout=START_TIMEOUT)
        control.delete(probe)
    finally:
        control.close()


def _run(cluster: LocalCluster, scenario, variant: str, args, log) -> dict:
    """One variant, --repeat times (median of each figure, as bench/make_bench.py's run_target)."""
    from bench.scenario_run import run_scenario
    runs = []
    for n in range(max(1, args.repeat)):
        log(f"[cluster] {variant}: {args.warmup:g}s warm-up + {args.seconds:g}s"
            + (f" (run {n + 1} of {args.repeat})" if args.repeat > 1 else "") + " ...")
        try:
            r = run_scenario(cluster.target(0), scenario, seconds=args.seconds,
                             warmup=args.warmup, client=args.client, codec="protocol",
                             max_procs=args.procs, log=log, consume_target=cluster.target(1),
                             queue_prefix=(MIRRORED_PREFIX if variant == "mirrored"
                                           else "leveret-bench"))
        except Exception as e:  # noqa: BLE001 - reported in the table
            r = {"scenario": scenario.key, "title": scenario.title,
                 "settings": scenario.to_dict(), "error": f"{type(e).__name__}: {e}"}
        if args.repeat > 1 and not r.get("error"):
            log(f"[cluster]   run {n + 1}: publish {result_tables.fmt_rate(r.get('publish_rate'))} "
                f"msg/s, consume {result_tables.fmt_rate(r.get('consume_rate'))} msg/s")
        runs.append(r)
        time.sleep(1.0)
    r = runs[0] if len(runs) == 1 else combine_runs(runs)
    r["variant"] = variant
    r["broker"] = f"Leveret cluster, {variant}"
    if not r.get("error") and r.get("publish_rate") and not r.get("consume_rate"):
        r["error"] = "the consumer on node 2 received nothing while node 1 confirmed publishes"
    if r.get("error"):
        r["error"] = f"{variant}: {r['error']}"
        log(f"[cluster]   error: {r['error'].strip().splitlines()[0]}")
    else:
        cl = r.get("confirm_latency_ms") or {}
        log(f"[cluster]   publish {result_tables.fmt_rate(r.get('publish_rate'))} msg/s, consume "
            f"{result_tables.fmt_rate(r.get('consume_rate'))} msg/s, confirm p50 "
            f"{result_tables.fmt_ms(cl.get('p50'))} ms p99 {result_tables.fmt_ms(cl.get('p99'))} ms")
    return r


def run(args, scenario=SCENARIO, log=print) -> list[dict]:
    """[unmirrored result, mirrored result] (each with "error" when it could not run)."""
    def failed(variant: str, why: str) -> dict:
        return {"scenario": scenario.key, "title": scenario.title, "variant": variant,
                "settings": scenario.to_dict(), "error": f"{variant}: {why}"}

    cluster = LocalCluster(log=log, keep_dir=getattr(args, "keep_node_dir", False))
    try:
        try:
            cluster.start()
            check_replication(cluster, "protocol")
        except Exception as e:  # noqa: BLE001 - both variants report it
            log(f"[cluster] could not start the cluster: {e}")
            why = f"the cluster did not come up: {str(e).splitlines()[0]}"
            return [failed("unmirrored", why), failed("mirrored", why)]
        log(f"[cluster] nodes on {cluster.host}:{cluster.port}-{cluster.port + NODES - 1}, "
            f"data in {cluster.dir}")
        results = [_run(cluster, scenario, "unmirrored", args, log)]
        try:
            cluster.ctl(0, "set_policy", *POLICY)
        except Exception as e:  # noqa: BLE001
            results.append(failed("mirrored", f"set_policy: {e}"))
        else:
            results.append(_run(cluster, scenario, "mirrored", args, log))
        return results
    finally:
        cluster.stop()
        if cluster.keep_dir and cluster.dir:
            log(f"[cluster] directory kept: {cluster.dir}")


def tables(results: list[dict]) -> str:
    """The figures of both variants, then mirrored / unmirrored (Markdown)."""
    by = {r.get("variant"): r for r in results}
    rows = [dict(r, title=f"{r.get('variant')}") for r in results]
    out = result_tables.single_table(rows)
    if "mirrored" in by and "unmirrored" in by:
        out += "\n\n" + result_tables.compare_table([by["mirrored"]], [by["unmirrored"]],
                                             "mirrored", "unmirrored")
    return out
