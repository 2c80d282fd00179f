"""The scale scenario: what many queues and many idle connections cost, Leveret beside RabbitMQ.

    .venv/bin/python -m bench.scale [--queues 10000] [--connections 5000] [--only leveret]
    make bench-compare BENCH_ARGS="--scenarios scale"     # the defaults; not in the default set

For each broker (a Leveret node started by bench/leveret_node.py in a temporary directory, then a
private RabbitMQ started by bench/refbroker.py; a fresh node for each of the two parts, so a
broker left broken by one part does not spoil the other):

1. queues: one lean connection (amqpclient/lean_connection.py) declares N transient, non-exclusive queues
   named scale-q-00001.. on a few channels, one declare in flight per channel; wall time, the
   RSS and thread count of the broker's processes before and after (settled), RSS per queue;
   then one persistent-less message is published (mandatory, with confirms) to 100 of them,
   spread over the range, and basic.get fetches each back; then the queues are deleted, timed.
2. connections: N idle connections (heartbeat 0, one channel open on each) opened by a few
   client processes (lean client, RLIMIT_NOFILE raised to the hard limit); RSS per connection,
   threads before/after, the time to open one more connection + channel (median of 5) with
   the broker idle and with the N open; whether the N are still open after settling; then they
   are closed (connection.close sent on every one, then every close-ok awaited) and the thread
   count and RSS after closing are read.

The broker's processes: Leveret's node PID and all its descendants; RabbitMQ's
RabbitMQNode.pids (the rabbitmq-server script and the private epmd) and their descendants
(beam.smp, erl_child_setup, inet_gethost).  Figures are read from /proc/PID/status (VmRSS,
Threads), summed over the processes, so pages shared by forked workers count once per process.

A failure is a figure, not an exception: when a broker stops answering, the part reports how far
it got (queues declared, connections opened) and the error, the broker's log is scanned for
errors, and the run goes on to the next part.  A measurement: nothing here passes or fails,
except that the exit status is 1 when an error was recorded.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import resource
import selectors
import shlex
import socket
import statistics
import sys
import time

from amqpclient import codec as codec_mod
from bench import result_tables
from amqpclient.lean_connection import AMQPClosed, LeanConnection
from bench.refbroker import amqp_answers, descendants
from bench.summary_stats import ratio
from amqpclient.url import AMQPTarget, parse_url

KEY = "scale"
TITLE = "Scale: many queues, many idle connections"
QUEUE_PREFIX = "scale-q-"
DEFAULT_QUEUES = 10_000
DEFAULT_CONNECTIONS = 5_000
FD_RESERVE = 64                   # descriptors a client process keeps for itself


def log_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Options:
    queues: int = DEFAULT_QUEUES            # queues to declare (0: skip the part)
    connections: int = DEFAULT_CONNECTIONS  # idle connections to open (0: skip the part)
    brokers: tuple = ("leveret", "rabbitmq")
    channels: int = 8                       # declaring channels (one declare in flight on each)
    sample: int = 100                       # queues checked with publish + basic.get
    client_procs: int = 4                   # processes opening the idle connections
    probes: int = 5                         # new connection + channel timings (median)
    settle: float = 2.0                     # seconds before reading RSS after a step
    timeout: float = 60.0                   # seconds without an answer that count as a stall
    codec: str = "auto"                     # codec under the lean client
    server: str | None = None               # leveret-server executable
    keep_node_dir: bool = False             # keep Leveret's data directory and server.log


# -- pure helpers ---------------------------------------------------------------------------------

def split_spec(spec: str) -> tuple[str, bool]:
    """(the --scenarios value without "scale", whether the scale scenario is wanted).  Unlike
    the cluster scenario it is only run when named: no group includes it."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    return ",".join(p for p in parts if p != KEY), KEY in parts


def queue_name(i: int, n: int) -> str:
    """The name of queue i (0-based) of n: scale-q-00001 .. (at least 5 digits)."""
    return f"{QUEUE_PREFIX}{i + 1:0{max(5, len(str(n)))}d}"


def sample_indices(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n), first and last included (all of them if k >= n)."""
    if k >= n:
        return list(range(n))
    if k <= 0:
        return []
    if k == 1:
        return [0]
    return sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})


def split_counts(n: int, parts: int) -> list[int]:
    """n split into `parts` near-equal positive counts (fewer parts when n < parts)."""
    parts = max(1, min(parts, n)) if n > 0 else 0
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def client_procs_needed(n: int, wanted: int, fd_limit: int) -> int:
    """At least `wanted` processes, more when n connections would not fit in fd_limit each."""
    per = max(1, fd_limit - FD_RESERVE)
    return max(1, min(n, max(wanted, math.ceil(n / per)))) if n > 0 else 0


def per_item_kb(before_kb: int | None, after_kb: int | None, n: int) -> float | None:
    if before_kb is None or after_kb is None or n <= 0:
        return None
    return (after_kb - before_kb) / n


def parse_status(text: str) -> dict:
    """VmRSS (KB) and Threads of a /proc/PID/status text."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "VmRSS":
            out["rss_kb"] = int(value.split()[0])
        elif key == "Threads":
            out["threads"] = int(value.split()[0])
    return out


def median_ms(seconds: list[float]) -> float | None:
    return statistics.median(seconds) * 1000.0 if seconds else None


ERROR_MARKERS = (" ERROR ", " CRITICAL ", "Traceback", "[error]", "[critical]")
WARNING_MARKERS = (" WARNING ", "[warning]")


def error_lines(text: str, markers=ERROR_MARKERS) -> list[str]:
    return [line for line in text.splitlines() if any(m in line for m in markers)]


# -- the broker's processes --------------------------------------------------------------------

def process_kind(cmdline: bytes) -> str:
    """A short name for a broker process from its /proc/PID/cmdline: Leveret's worker kind
    (`--kind queue` -> "queue"; a worker forked by the node's launcher has its command as one
    string, setproctitle's), "launcher" for that launcher, else the program's base name."""
    args = cmdline.replace(b"\0", b" ").decode(errors="replace").split()
    if "--kind" in args[:-1]:
        return args[args.index("--kind") + 1]
    if "actors.worker.launcher" in args:
        return "launcher"
    return os.path.basename(args[0]) if args else "?"


def process_usage(roots: list[int]) -> dict:
    """RSS (KB), threads and process count summed over roots and their descendants, and each
    process's own figures under "per_process"."""
    pids = []
    for r in roots:
        if r not in pids:
            pids.append(r)
        pids += [p for p, _ in descendants(r) if p not in pids]
    rss = threads = procs = 0
    each = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                st = parse_status(f.read())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                kind = process_kind(f.read())
        except OSError:
            continue
        if "rss_kb" not in st:              # a zombie
            continue
        rss += st["rss_kb"]
        threads += st.get("threads", 0)
        procs += 1
        each.append({"pid": pid, "kind": kind, **st})
    return {"rss_kb": rss, "threads": threads, "processes": procs, "per_process": each}


def raise_nofile() -> int:
    """RLIMIT_NOFILE soft to hard; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class Broker:
    """A started broker as the scale parts see it (Leveret node or private RabbitMQ)."""

    def __init__(self, kind: str, node, log):
        self.kind = kind                    # "leveret" or "rabbitmq"
        self.node = node                    # LeveretNode or RabbitMQNode (started)
        self.log = log

    @property
    def target(self) -> AMQPTarget:
        return parse_url(self.node.url)

    def roots(self) -> list[int]:
        if self.kind == "leveret":
            return [self.node.pid] if self.node.pid else []
        return list(self.node.pids)

    def usage(self) -> dict:
        return process_usage(self.roots())

    def exited(self) -> str | None:
        """Why the broker's main process is gone, None while it runs."""
        proc = self.node.proc
        if proc is not None and proc.poll() is not None:
            return f"the broker's process exited with status {proc.returncode}"
        return None

    def health(self) -> str:
        """A phrase for error messages: exited, or whether it still answers AMQP."""
        gone = self.exited()
        if gone:
            return gone
        t = self.target
        if amqp_answers(t.host, t.port, 5.0):
            return "the broker still answers a new connection's protocol header"
        return "the broker does not answer a new connection's protocol header within 5s"

    def log_errors(self, limit: int = 20) -> dict:
        """Error lines of Leveret's server.log or RabbitMQ's captured stdout."""
        name = "server.log" if self.kind == "leveret" else "stdout.log"
        path = os.path.join(self.node.dir or "", name)
        try:
            with open(path, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            return {"log": name, "count": None, "lines": []}
        lines, warnings = error_lines(text), error_lines(text, WARNING_MARKERS)
        return {"log": name, "count": len(lines), "lines": lines[:limit],
                "warnings": len(warnings), "warning_lines": warnings[:limit]}


def start_broker(kind: str, opts: Options, log) -> Broker:
    if kind == "leveret":
        from bench.leveret_node import SERVER, LeveretNode
        node = LeveretNode(server=opts.server or SERVER, log=log, keep_dir=opts.keep_node_dir)
    else:
        from bench.refbroker import RabbitMQNode
        node = RabbitMQNode(log=log)
        node.nodename = f"leveret-bench-scale-{os.getpid()}@localhost"
    node.start()
    return Broker(kind, node, log)


# -- the lean client, non-blocking ------------------------------------------------------------------

def send_all(conn: LeanConnection, data: bytes, timeout: float) -> None:
    conn.out += data
    deadline = time.monotonic() + timeout
    while conn.out:
        if not conn.flush():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker took nothing for {timeout:g}s")
            time.sleep(0.001)


def next_commands(conn: LeanConnection, sel: selectors.BaseSelector, timeout: float) -> list:
    """Commands available within timeout ([] when none came); closes raise AMQPClosed."""
    if not conn.backlog and not sel.select(timeout):
        return []
    return conn.recv_commands()


def progress_log(log, label: str, verb: str, total: int, t0: float):
    """A progress callback for pipeline(): a line every tenth of `total` (at least 1,000)."""
    step = max(1000, total // 10)

    def progress(done: int) -> None:
        if done % step == 0:
            log(f"[{label}]   {done:,} queues {verb} ({time.monotonic() - t0:.1f}s)")

    return progress


def pipeline(conn: LeanConnection, sel, channels: list[int], methods, reply_cls,
             timeout: float, progress=None) -> tuple[int, str | None]:
    """Send `methods` with at most one in flight per channel; (replies received, error)."""
    it = iter(methods)
    free = list(reversed(channels))
    inflight: set[int] = set()
    done = 0
    more = True
    name = reply_cls.__name__
    try:
        while True:
            batch = bytearray()
            while free and more:
                m = next(it, None)
                if m is None:
                    more = False
                    break
                ch = free.pop()
                inflight.add(ch)
                batch += conn.codec.encode_method(ch, m)
            if batch:
                send_all(conn, bytes(batch), timeout)
            if not inflight:
                return done, None
            cmds = next_commands(conn, sel, timeout)
            if not cmds:
                return done, f"no {name} within {timeout:g}s ({len(inflight)} in flight)"
            for cmd in cmds:
                if type(cmd.method) is reply_cls and cmd.channel in inflight:
                    inflight.discard(cmd.channel)
                    free.append(cmd.channel)
                    done += 1
                    if progress:
                        progress(done)
                else:
                    conn.handle_other(cmd)
    except (AMQPClosed, OSError) as e:
        return done, f"{type(e).__name__}: {e}"


def open_lean(target: AMQPTarget, codec, timeout: float, channels: int = 1) -> LeanConnection:
    conn = LeanConnection(target, codec, timeout=timeout, name="leveret-bench-scale").connect()
    for ch in range(1, channels + 1):
        conn.channel_open(ch)
    return conn


# -- part 1: queues -------------------------------------------------------------------------

def check_sample(conn: LeanConnection, sel, channel: int, names: list[str],
                 timeout: float) -> dict:
    """Publish one message (mandatory, confirmed) to each named queue, then basic.get each."""
    M, codec = conn.M, conn.codec
    out = {"sampled": len(names), "confirmed": 0, "returned": 0, "nacked": 0, "got": 0,
           "empty": 0, "wrong_body": 0, "get_retries": 0, "error": None}
    bodies = {n: f"scale-check {n}".encode() for n in names}
    props = codec.properties_raw()
    try:
        send_all(conn, b"".join(codec.encode_publish(channel, "", n, True, props, bodies[n],
                                                     conn.frame_max) for n in names), timeout)
        acked = 0                              # highest delivery tag settled
        settled: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(settled) < len(names):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(settled)} of {len(names)} publishes confirmed "
                                   f"after {timeout:g}s")
            for cmd in next_commands(conn, sel, 1.0):
                t = type(cmd.method)
                if t in (M.BasicAck, M.BasicNack):
                    tag = cmd.method.delivery_tag
                    tags = range(acked + 1, tag + 1) if cmd.method.multiple else [tag]
                    for x in tags:
                        if x not in settled:
                            settled.add(x)
                            out["nacked" if t is M.BasicNack else "confirmed"] += 1
                    acked = max(acked, tag if cmd.method.multiple else acked)
                elif t is M.BasicReturn:
                    out["returned"] += 1
                else:
                    conn.handle_other(cmd)
        todo = list(names)
        for attempt in range(6):               # an empty get is retried up to 5 times, 0.5 s apart
            empty = []
            for n in todo:
                send_all(conn, codec.encode_method(channel, M.BasicGet(queue=n, no_ack=True)),
                         timeout)
                reply = None
                deadline = time.monotonic() + timeout
                while reply is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no basic.get reply for {n} within {timeout:g}s")
                    for cmd in next_commands(conn, sel, 1.0):
                        if type(cmd.method) in (M.BasicGetOk, M.BasicGetEmpty) \
                                and cmd.channel == channel and reply is None:
                            reply = cmd
                        else:
                            conn.handle_other(cmd)
                if type(reply.method) is M.BasicGetEmpty:
                    empty.append(n)
                elif bytes(reply.body or b"") == bodies[n]:
                    out["got"] += 1
                else:
                    out["wrong_body"] += 1
            todo = empty
            if not todo:
                break
            if attempt < 5:
                out["get_retries"] += 1
                time.sleep(0.5)
        out["empty"] = len(todo)
    except (AMQPClosed, OSError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def run_queues(broker: Broker, opts: Options, log) -> dict:
    n, label = opts.queues, broker.kind
    codec = codec_mod.load(opts.codec)
    names = [queue_name(i, n) for i in range(n)]
    res: dict = {"queues": n, "channels": opts.channels, "declared": 0, "deleted": None,
                 "errors": []}
    chans = list(range(1, opts.channels + 1))
    check_ch = opts.channels + 1
    conn = None
    try:
        conn = open_lean(broker.target, codec, opts.timeout, opts.channels + 1)
        conn.confirm_select(check_ch)
        conn.set_nonblocking()
    except (AMQPClosed, OSError) as e:
        res["errors"].append(f"could not open the declaring connection: {type(e).__name__}: "
                             f"{e}")
        return res
    sel = selectors.DefaultSelector()
    sel.register(conn.sock, selectors.EVENT_READ)
    time.sleep(opts.settle)
    res["before"] = broker.usage()
    log(f"[{label}] declaring {n:,} queues over {opts.channels} channels ...")
    declare = (conn.M.QueueDeclare(queue=q, passive=False, durable=False, exclusive=False,
                                   auto_delete=False, arguments={}) for q in names)
    t0 = time.monotonic()
    done, err = pipeline(conn, sel, chans, declare, conn.M.QueueDeclareOk, opts.timeout,
                         progress_log(log, label, "declared", n, t0))
    res["declare_s"] = time.monotonic() - t0
    res["declared"] = done
    if err:
        res["errors"].append(f"declare stopped after {done:,} of {n:,} queues: {err}; "
                             f"{broker.health()}")
        log(f"[{label}]   {res['errors'][-1]}")
    time.sleep(opts.settle)
    res["after"] = broker.usage()
    res["rss_per_queue_kb"] = per_item_kb(res["before"]["rss_kb"], res["after"]["rss_kb"], done)
    log(f"[{label}]   {done:,} declared in {res['declare_s']:.2f}s; RSS "
        f"{res['before']['rss_kb'] / 1024:.0f} -> {res['after']['rss_kb'] / 1024:.0f} MiB, "
        f"threads {res['before']['threads']} -> {res['after']['threads']}")
    declared = names[:done]
    if err:                                 # the connection may be unusable: start another
        try:
            sel.close()
            conn.close(1.0)
            conn = open_lean(broker.target, codec, opts.timeout, opts.channels + 1)
            conn.confirm_select(check_ch)
            conn.set_nonblocking()
            sel = selectors.DefaultSelector()
            sel.register(conn.sock, selectors.EVENT_READ)
        except (AMQPClosed, OSError) as e:
            res["errors"].append(f"no new connection for the check and the deletion: "
                                 f"{type(e).__name__}: {e}")
            return res
    if declared:
        sample = [declared[i] for i in sample_indices(len(declared), opts.sample)]
        log(f"[{label}] publish + basic.get on {len(sample)} of them ...")
        res["check"] = chk = check_sample(conn, sel, check_ch, sample, opts.timeout)
        bad = {k: chk[k] for k in ("returned", "nacked", "empty", "wrong_body") if chk[k]}
        if chk["error"] or bad or chk["got"] != len(sample):
            res["errors"].append(f"sample check: {chk['got']} of {len(sample)} messages got "
                                 f"back" + (f", {bad}" if bad else "")
                                 + (f"; {chk['error']}" if chk["error"] else ""))
        log(f"[{label}]   {chk['got']} of {len(sample)} got back"
            + (f" ({chk['get_retries']} retry rounds)" if chk["get_retries"] else ""))
        log(f"[{label}] deleting {len(declared):,} queues ...")
        delete = (conn.M.QueueDelete(queue=q) for q in declared)
        t0 = time.monotonic()
        done_del, err = pipeline(conn, sel, chans, delete, conn.M.QueueDeleteOk, opts.timeout,
                                 progress_log(log, label, "deleted", len(declared), t0))
        res["delete_s"] = time.monotonic() - t0
        res["deleted"] = done_del
        if err:
            res["errors"].append(f"delete stopped after {done_del:,} of {len(declared):,} "
                                 f"queues: {err}; {broker.health()}")
            log(f"[{label}]   {res['errors'][-1]}")
        else:
            log(f"[{label}]   deleted in {res['delete_s']:.2f}s")
        time.sleep(opts.settle)
        res["after_delete"] = broker.usage()
    sel.close()
    conn.close()
    return res


# -- part 2: idle connections -------------------------------------------------------------------

def _conn_worker(pipe, target: AMQPTarget, count: int, codec_name: str, timeout: float) -> None:
    """A client process: say "ready", on "go" open `count` connections with a channel each and
    report, then on "check" peek at every socket and on "close" close them all
    (multiprocessing spawn target).  Stops opening at the first failure and reports it."""
    raise_nofile()
    codec = codec_mod.load(codec_name)
    pipe.send(("ready",))
    if pipe.recv() != "go":
        return
    conns: list[LeanConnection] = []
    err = None
    t0 = time.monotonic()
    for i in range(count):
        try:
            conns.append(open_lean(target, codec, timeout))
        except (AMQPClosed, OSError) as e:
            err = f"{type(e).__name__}: {e}"
            break
        if (i + 1) % 250 == 0:
            pipe.send(("progress", i + 1))
    pipe.send(("opened", len(conns), err, time.monotonic() - t0))
    while True:
        cmd = pipe.recv()
        if cmd == "check":
            state = {"open": 0, "closed": 0, "data": 0}
            for c in conns:
                try:
                    c.sock.setblocking(False)
                    state["data" if c.sock.recv(1, socket.MSG_PEEK) else "closed"] += 1
                except BlockingIOError:
                    state["open"] += 1
                except OSError:
                    state["closed"] += 1
            pipe.send(("checked", state))
        elif cmd == "close":
            t0 = time.monotonic()
            ok, first_err = 0, None
            close = codec.encode_method(0, codec.methods.ConnectionClose(
                reply_code=200, reply_text="bench done", class_id=0, method_id=0))
            sent = []
            for c in conns:                     # every close first, then every close-ok
                try:
                    c.sock.settimeout(timeout)
                    c.sock.sendall(close)
                    sent.append(c)
                except OSError as e:
                    first_err = first_err or f"{type(e).__name__}: {e}"
            deadline = time.monotonic() + timeout
            for c in sent:
                try:
                    c.wait(0, codec.methods.ConnectionCloseOk,
                           timeout=max(0.1, deadline - time.monotonic()))
                    ok += 1
                except (AMQPClosed, OSError) as e:
                    first_err = first_err or f"{type(e).__name__}: {e}"
            for c in conns:
                try:
                    c.sock.close()
                except OSError:
                    pass
            pipe.send(("closed", ok, first_err, time.monotonic() - t0))
            return
        else:
            return


def probe_ms(target: AMQPTarget, codec, count: int, timeout: float) -> tuple[float | None,
                                                                             str | None]:
    """Median ms to open a connection and a channel, over `count` tries (closed after each)."""
    times = []
    for _ in range(count):
        t0 = time.monotonic()
        try:
            conn = open_lean(target, codec, timeout)
        except (AMQPClosed, OSError) as e:
            return median_ms(times), f"{type(e).__name__}: {e}"
        times.append(time.monotonic() - t0)
        conn.close()
    return median_ms(times), None


class Workers:
    """The client processes holding the idle connections."""

    def __init__(self, target: AMQPTarget, counts: list[int], codec: str, timeout: float):
        ctx = multiprocessing.get_context("spawn")
        self.pipes, self.procs = [], []
        for c in counts:
            here, there = ctx.Pipe()
            p = ctx.Process(target=_conn_worker, args=(there, target, c, codec, timeout),
                            daemon=True)
            p.start()
            there.close()
            self.pipes.append(here)
            self.procs.append(p)

    def gather(self, kind: str, timeout: float, on_progress=None) -> list:
        """The `kind` message of every worker (None for one that died or took too long);
        progress messages go to on_progress(worker, count)."""
        from multiprocessing.connection import wait
        out: list = [None] * len(self.pipes)
        waiting = dict(enumerate(self.pipes))
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for pipe in wait(list(waiting.values()), timeout=1.0):
                i = next(k for k, v in waiting.items() if v is pipe)
                try:
                    msg = pipe.recv()
                except (EOFError, OSError):
                    del waiting[i]
                    continue
                if msg[0] == "progress":
                    if on_progress:
                        on_progress(i, msg[1])
                elif msg[0] == kind:
                    out[i] = msg[1:]
                    del waiting[i]
        return out

    def tell(self, cmd: str) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(cmd)
            except OSError:
                pass

    def stop(self) -> None:
        for p in self.procs:
            p.join(10.0)
            if p.is_alive():
                p.terminate()               # our own child, by its PID
                p.join(5.0)
        for pipe in self.pipes:
            pipe.close()


def settle_threads(broker: Broker, target_threads: int, timeout: float) -> tuple[dict, float]:
    """Poll until the broker's thread count is back to target_threads (or timeout)."""
    t0 = time.monotonic()
    while True:
        u = broker.usage()
        if u["threads"] <= target_threads or time.monotonic() - t0 > timeout:
            return u, time.monotonic() - t0
        time.sleep(0.5)


def run_connections(broker: Broker, opts: Options, log) -> dict:
    n, label = opts.connections, broker.kind
    codec = codec_mod.load(opts.codec)
    target = broker.target
    fd_limit = raise_nofile()
    procs = client_procs_needed(n, opts.client_procs, fd_limit)
    counts = split_counts(n, procs)
    res: dict = {"connections": n, "client_procs": len(counts), "opened": 0, "errors": []}
    res["probe_idle_ms"], err = probe_ms(target, codec, opts.probes, opts.timeout)
    if err:
        res["errors"].append(f"new connection on the idle broker failed: {err}")
    time.sleep(opts.settle)
    res["before"] = broker.usage()
    log(f"[{label}] opening {n:,} idle connections from {len(counts)} client processes ...")
    opened = [0] * len(counts)
    last = [time.monotonic()]

    def progress(i: int, count: int) -> None:
        opened[i] = count
        if time.monotonic() - last[0] > 10.0:
            last[0] = time.monotonic()
            log(f"[{label}]   {sum(opened):,} open ({time.monotonic() - t0:.0f}s)")

    workers = Workers(target, counts, opts.codec, opts.timeout)
    try:
        ready = workers.gather("ready", 120.0)
        if None in ready:
            res["errors"].append(f"{ready.count(None)} client process(es) did not start")
        # each worker opens its share one at a time; a stall ends a worker after opts.timeout
        t0 = time.monotonic()
        workers.tell("go")
        reports = workers.gather("opened", opts.timeout + 30.0 + n * 0.1, progress)
        res["open_s"] = time.monotonic() - t0            # from "go" to the last one open
        for i, r in enumerate(reports):
            if r is None:
                res["errors"].append(f"client process {i} did not report (opened at least "
                                     f"{opened[i]:,} of {counts[i]:,})")
                continue
            res["opened"] += r[0]
            if r[1]:
                res["errors"].append(f"client process {i} stopped after {r[0]:,} of "
                                     f"{counts[i]:,} connections: {r[1]}")
        if res["opened"] < n:
            res["errors"].append(f"{res['opened']:,} of {n:,} connections opened; "
                                 f"{broker.health()}")
        log(f"[{label}]   {res['opened']:,} open in {res['open_s']:.1f}s")
        for e in res["errors"]:
            log(f"[{label}]   {e}")
        time.sleep(opts.settle)
        res["after"] = broker.usage()
        res["rss_per_connection_kb"] = per_item_kb(res["before"]["rss_kb"],
                                                   res["after"]["rss_kb"], res["opened"])
        res["probe_loaded_ms"], err = probe_ms(target, codec, opts.probes, opts.timeout)
        if err:
            res["errors"].append(f"new connection with {res['opened']:,} open failed: {err}")
        workers.tell("check")
        states = [s[0] for s in workers.gather("checked", 60.0) if s]
        res["still_open"] = sum(s["open"] for s in states)
        res["closed_by_broker"] = sum(s["closed"] for s in states)
        res["unexpected_data"] = sum(s["data"] for s in states)
        if res["closed_by_broker"] or res["unexpected_data"]:
            res["errors"].append(f"after settling, {res['closed_by_broker']:,} connections "
                                 f"were closed by the broker and {res['unexpected_data']:,} "
                                 f"had unexpected data")
        log(f"[{label}]   RSS {res['before']['rss_kb'] / 1024:.0f} -> "
            f"{res['after']['rss_kb'] / 1024:.0f} MiB, threads {res['before']['threads']} -> "
            f"{res['after']['threads']}, new connection {result_tables.fmt_ms(res['probe_loaded_ms'])}"
            f" ms; closing them ...")
        t0 = time.monotonic()
        workers.tell("close")
        closed = workers.gather("closed", opts.timeout + 60.0)
        res["close_s"] = time.monotonic() - t0
        res["closed_ok"] = sum(c[0] for c in closed if c)
        errs = [c[1] for c in closed if c and c[1]]
        if res["closed_ok"] < res["opened"]:
            res["errors"].append(f"{res['closed_ok']:,} of {res['opened']:,} connections got "
                                 f"close-ok" + (f" (first error: {errs[0]})" if errs else ""))
    finally:
        workers.stop()
    time.sleep(opts.settle)
    res["after_close"], res["threads_return_s"] = settle_threads(
        broker, res["before"]["threads"], 30.0)
    log(f"[{label}]   closed in {res['close_s']:.1f}s; RSS after "
        f"{res['after_close']['rss_kb'] / 1024:.0f} MiB, threads {res['after_close']['threads']}")
    return res


# -- both parts, both brokers ------------------------------------------------------------------

def run_broker(kind: str, opts: Options, log) -> dict:
    """Both parts on `kind`, each on a freshly started node."""
    out: dict = {"broker": kind, "label": "Leveret" if kind == "leveret" else "RabbitMQ"}
    for part, n, fn in (("queues", opts.queues, run_queues),
                        ("connections", opts.connections, run_connections)):
        if n <= 0:
            continue
        try:
            broker = start_broker(kind, opts, log)
        except Exception as e:  # noqa: BLE001 - reported in the table
            out[part] = {"errors": [f"{kind} did not start: {str(e).splitlines()[0]}"]}
            continue
        try:
            version = broker.node.version()
            if version:
                out["label"] = version if kind == "rabbitmq" else "Leveret"
                out["version"] = version
            try:
                out[part] = fn(broker, opts, log)
            except Exception as e:  # noqa: BLE001 - a bug or a broker gone: report it
                out[part] = {"errors": [f"{type(e).__name__}: {e}; {broker.health()}"]}
            out[part]["log_errors"] = broker.log_errors()
            if broker.exited():
                out[part]["errors"].append(broker.exited())
        finally:
            broker.node.stop()
            if opts.keep_node_dir and kind == "leveret":
                log(f"[{kind}] node directory kept: {broker.node.dir}")
    return out


def run(opts: Options, log=log_stderr) -> dict:
    """{"options", "brokers": [per-broker results]}."""
    raise_nofile()                          # the brokers inherit the raised limit
    doc = {"options": dataclasses.asdict(opts), "brokers": []}
    for kind in opts.brokers:
        if kind == "rabbitmq":
            from bench.refbroker import rabbitmq_installed
            if not rabbitmq_installed():
                doc["brokers"].append({"broker": kind, "label": "RabbitMQ", "queues": {
                    "errors": ["rabbitmq-server is not installed (make bench-compare "
                               "installs it)"]}})
                continue
        doc["brokers"].append(run_broker(kind, opts, log))
    return doc


def options_from_bench(args, reference: bool) -> Options:
    """Options for `python -m bench --scenarios scale` (defaults; RabbitMQ only with a
    reference broker, i.e. under make bench-compare)."""
    return Options(brokers=("leveret", "rabbitmq") if reference else ("leveret",),
                   codec=getattr(args, "codec", "auto"), server=getattr(args, "server", None),
                   keep_node_dir=getattr(args, "keep_node_dir", False))


# -- report ---------------------------------------------------------------------------------

def _get(d: dict, path: str):
    for k in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _mib(kb):
    return None if kb is None else kb / 1024.0


# (section, figure, getter on a part's results, format)
FIGURES = [
    ("queues", "queues declared", lambda r: r.get("declared"), "int"),
    ("queues", "declare, s", lambda r: r.get("declare_s"), "s"),
    ("queues", "declare, queues/s",
     lambda r: ratio(r.get("declared"), r.get("declare_s")), "int"),
    ("queues", "RSS before, MiB", lambda r: _mib(_get(r, "before.rss_kb")), "mib"),
    ("queues", "RSS after declare, MiB", lambda r: _mib(_get(r, "after.rss_kb")), "mib"),
    ("queues", "RSS per queue, KB", lambda r: r.get("rss_per_queue_kb"), "kb"),
    ("queues", "threads before", lambda r: _get(r, "before.threads"), "int"),
    ("queues", "threads after declare", lambda r: _get(r, "after.threads"), "int"),
    ("queues", "processes after declare", lambda r: _get(r, "after.processes"), "int"),
    ("queues", "sample: messages got back", lambda r: _get(r, "check.got"), "int"),
    ("queues", "delete, s", lambda r: r.get("delete_s"), "s"),
    ("queues", "RSS after delete, MiB", lambda r: _mib(_get(r, "after_delete.rss_kb")), "mib"),
    ("queues", "threads after delete", lambda r: _get(r, "after_delete.threads"), "int"),
    ("queues", "error / warning lines in the broker's log",
     lambda r: _get(r, "log_errors"), "log"),
    ("connections", "connections opened", lambda r: r.get("opened"), "int"),
    ("connections", "open all, s", lambda r: r.get("open_s"), "s"),
    ("connections", "RSS before, MiB", lambda r: _mib(_get(r, "before.rss_kb")), "mib"),
    ("connections", "RSS with all open, MiB", lambda r: _mib(_get(r, "after.rss_kb")), "mib"),
    ("connections", "RSS per connection, KB", lambda r: r.get("rss_per_connection_kb"), "kb"),
    ("connections", "threads before", lambda r: _get(r, "before.threads"), "int"),
    ("connections", "threads with all open", lambda r: _get(r, "after.threads"), "int"),
    ("connections", "new connection + channel, idle broker, ms (median)",
     lambda r: r.get("probe_idle_ms"), "ms"),
    ("connections", "new connection + channel, all open, ms (median)",
     lambda r: r.get("probe_loaded_ms"), "ms"),
    ("connections", "still open after settling", lambda r: r.get("still_open"), "int"),
    ("connections", "close all, s", lambda r: r.get("close_s"), "s"),
    ("connections", "RSS after close, MiB", lambda r: _mib(_get(r, "after_close.rss_kb")),
     "mib"),
    ("connections", "threads after close", lambda r: _get(r, "after_close.threads"), "int"),
    ("connections", "error / warning lines in the broker's log",
     lambda r: _get(r, "log_errors"), "log"),
]


NOTE = ("RSS: VmRSS summed over the broker's processes (Leveret: the node and its descendants; "
        "RabbitMQ: the rabbitmq-server script, epmd and their descendants), read after settling; "
        "per queue / per connection = (after - before) / count. Threads: the Threads: lines of "
        "/proc/PID/status, summed. A fresh node for each part.")


def fmt_value(v, kind: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if kind == "log":
        return f"{v.get('count')} / {v.get('warnings')}"
    if kind == "int":
        return f"{v:,.0f}"
    if kind == "mib":
        return f"{v:,.1f}"
    if kind == "kb":
        return f"{v:,.2f}"
    if kind == "s":
        return f"{v:,.2f}"
    return result_tables.fmt_ms(v)


def table(doc: dict) -> str:
    """A Markdown table: a row per figure, a column per broker, and the ratio of the first
    broker to the second when there are two."""
    brokers = doc["brokers"]
    labels = [b.get("label", b["broker"]) for b in brokers]
    opts = doc.get("options", {})
    head = ["part", "figure"] + labels
    if len(brokers) == 2:
        head.append(f"{labels[0]} / {labels[1]}")
    lines = ["| " + " | ".join(head) + " |",
             "| " + " | ".join(["---", "---"] + ["---:"] * (len(head) - 2)) + " |"]
    shown = None
    for section, name, get, kind in FIGURES:
        parts = [b.get(section) for b in brokers]
        if all(p is None for p in parts):
            continue
        vals = [get(p) if p else None for p in parts]
        if section == "queues" and name.startswith("sample"):
            name = f"sample of {min(opts.get('sample', 100), opts.get('queues', 0))}: " \
                   "messages got back"
        cells = [fmt_value(v, kind) for v in vals]
        if len(brokers) == 2:
            cells.append(result_tables.fmt_ratio(ratio(vals[0], vals[1])) if kind != "log" else "")
        title = ""
        if section != shown:
            n = opts.get(section)
            title = f"{n:,} {section}" if n else section
            shown = section
        lines.append("| " + " | ".join([title, name] + cells) + " |")
    return "\n".join(lines)


def errors_text(doc: dict) -> str:
    """What went wrong in the parts (a broker that stopped answering, a check that failed)."""
    out = []
    for b in doc["brokers"]:
        for part in ("queues", "connections"):
            for e in (b.get(part) or {}).get("errors", []):
                out.append(f"- {b.get('label', b['broker'])} {part}: {e}")
    return "\n".join(out)


def log_text(doc: dict, lines: int = 5) -> str:
    """The first error lines of each broker's log, per part (the counts are in the table)."""
    out = []
    for b in doc["brokers"]:
        for part in ("queues", "connections"):
            le = (b.get(part) or {}).get("log_errors") or {}
            if le.get("count"):
                out.append(f"- {b.get('label', b['broker'])} {part}: {le['count']} error "
                           f"line(s) in {le['log']}:")
                out += [f"    {line[:300]}" for line in le["lines"][:lines]]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description="Many queues and many idle connections: RSS, threads and timings of "
                    "Leveret and RabbitMQ 3.10.8 side by side (each started for the run).")
    p.add_argument("--queues", type=int, default=DEFAULT_QUEUES,
                   help=f"queues to declare (default {DEFAULT_QUEUES:,}; 0 skips the part)")
    p.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS,
                   help=f"idle connections to open (default {DEFAULT_CONNECTIONS:,}; 0 skips)")
    p.add_argument("--only", choices=["leveret", "rabbitmq"], help="run one broker only")
    p.add_argument("--channels", type=int, default=Options.channels,
                   help="declaring channels, one declare in flight on each (default 8)")
    p.add_argument("--sample", type=int, default=Options.sample,
                   help="queues checked with publish + basic.get (default 100)")
    p.add_argument("--client-procs", type=int, default=Options.client_procs,
                   help="client processes holding the idle connections (default 4; more when "
                        "the descriptor limit needs it)")
    p.add_argument("--probes", type=int, default=Options.probes,
                   help="new connection + channel timings, median reported (default 5)")
    p.add_argument("--settle", type=float, default=Options.settle,
                   help="seconds to wait before reading RSS after a step (default 2)")
    p.add_argument("--timeout", type=float, default=Options.timeout,
                   help="seconds without an answer counted as a stall (default 60)")
    p.add_argument("--codec", choices=["auto", "protocol", "pamqp"], default="auto",
                   help="codec under the lean client (default auto)")
    p.add_argument("--server", help="leveret-server executable (default REPO/.venv/bin/"
                                    "leveret-server)")
    p.add_argument("--keep-node-dir", action="store_true",
                   help="keep the Leveret nodes' data directories and server.log")
    p.add_argument("--json", help="write the JSON results here (default bench/results/"
                                  "<time>-scale-<labels>.json)")
    return p


def command_line(argv: list[str]) -> str:
    exe = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) \
        else sys.executable
    return " ".join([exe, "-m", "bench.scale"] + [shlex.quote(a) for a in argv])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    if a.queues < 0 or a.connections < 0 or a.channels < 1:
        raise SystemExit("--queues and --connections must be >= 0, --channels >= 1")
    opts = Options(queues=a.queues, connections=a.connections,
                   brokers=(a.only,) if a.only else ("leveret", "rabbitmq"),
                   channels=a.channels, sample=a.sample, client_procs=max(1, a.client_procs),
                   probes=max(1, a.probes), settle=a.settle, timeout=a.timeout, codec=a.codec,
                   server=a.server, keep_node_dir=a.keep_node_dir)
    from bench.machine import machine_info
    cmd = command_line(argv)
    log_stderr(f"$ {cmd}")
    doc = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info(),
           "command": cmd}
    doc.update(run(opts))
    print(f"\n### {TITLE} ({machine_info()['cpus']} CPUs)\n")
    print(f"`{cmd}`\n")
    print(table(doc))
    print(f"\n{NOTE}")
    errs = errors_text(doc)
    if errs:
        print("\nErrors:\n" + errs)
    logs = log_text(doc)
    if logs:
        print("\nError lines in the brokers' logs:\n" + logs)
    path = a.json or result_tables.results_path(
        "scale-" + "-vs-".join(b.get("label", b["broker"]) for b in doc["brokers"]))
    result_tables.write_json(doc, path)
    print(f"\nJSON: {os.path.relpath(path)}")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
