"""Run a scenario (bench/scenarios.py) against one broker.

The coordinator declares the scenario's queues on a control connection, starts the load
generator processes (multiprocessing, spawn), waits until every connection is set up, gives
them common start / measure / end instants, collects their counters, deletes the queues, and
aggregates (bench/aggregate.py).  Every child is tracked by PID and stopped if it does not end.
With `consume_target` (bench/mirroring_cost.py) the consumers connect to another node than the
control connection and the producers, once the queues are visible there.

A scenario with an exchange type gets one exchange of that type, bound to every queue, which
its producers publish to; one with a consumer start delay has its measured window start when
the consumers join, and the coordinator polls the queues' depth (passive queue.declare) on the
control connection meanwhile, for the time the backlog takes to drain.
"""
from __future__ import annotations

import multiprocessing
import os
import time

from amqpclient import codec as codec_mod
from bench.aggregate import aggregate, drain_summary, drained_depth
from bench.procio import IoWindow
from bench.scenarios import Scenario
from amqpclient.url import AMQPTarget

READY_TIMEOUT = 60.0
READY_PER_CONNECTION = 0.05       # s more to get ready per connection of the scenario
RESULT_GRACE = 60.0
DEPTH_POLL = 0.25                 # s between queue depth polls (consumer start delay)


class BenchError(RuntimeError):
    pass


class Control:
    """A control connection (lean client, or pika with --client pika) for queue admin."""

    def __init__(self, target: AMQPTarget, client: str, codec_name: str):
        self.client = client
        if client == "pika":
            import pika
            params = pika.URLParameters(target.url)
            params.heartbeat = 0
            self.conn = pika.BlockingConnection(params)
            self.ch = self.conn.channel()
        else:
            from amqpclient.lean_connection import LeanConnection
            self.conn = LeanConnection(target, codec_mod.load(codec_name),
                                       name="leveret-bench control", timeout=60.0).connect()
            self.conn.channel_open(1)

    def declare(self, queue: str, durable: bool, arguments: dict) -> None:
        if self.client == "pika":
            self.ch.queue_declare(queue, durable=durable, arguments=arguments or None)
        else:
            self.conn.queue_declare(1, queue, durable=durable, arguments=arguments)

    def delete(self, queue: str) -> None:
        if self.client == "pika":
            self.ch.queue_delete(queue)
        else:
            self.conn.queue_delete(1, queue)

    def declare_exchange(self, exchange: str, exchange_type: str) -> None:
        M = self.conn.M
        self.conn.rpc(1, M.ExchangeDeclare(exchange=exchange, exchange_type=exchange_type),
                      M.ExchangeDeclareOk)

    def bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        M = self.conn.M
        self.conn.rpc(1, M.QueueBind(queue=queue, exchange=exchange, routing_key=routing_key),
                      M.QueueBindOk)

    def delete_exchange(self, exchange: str) -> None:
        M = self.conn.M
        self.conn.rpc(1, M.ExchangeDelete(exchange=exchange), M.ExchangeDeleteOk)

    def depth(self, queue: str) -> int:
        """Messages ready in the queue (passive queue.declare's message_count)."""
        return self.conn.queue_declare(1, queue, passive=True)[0]

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass


def role_specs(scenario: Scenario, queues: list[str],
               consume_target: AMQPTarget | None = None, exchange: str = "") -> list[dict]:
    """One dict per connection: consumers first so they are subscribed before publishing.
    Consumers get "target": consume_target when given (else they use the run's target).
    With an exchange (scenario.exchange_type) the scenario's producers all publish to it (routing
    key ""); else each queue gets its own on the default exchange.  Paced producers (scenario.
    rate) get "rate" and a "phase" spreading their first slots evenly over one interval."""
    specs: list[dict] = []
    for q in queues:
        for _ in range(scenario.consumers):
            specs.append({"kind": "consumer", "queue": q,
                          "channels": list(range(1, scenario.consumer_channels + 1)),
                          "no_ack": scenario.no_ack, "prefetch": scenario.prefetch,
                          "ack_every": scenario.ack_every,
                          "arguments": dict(scenario.consumer_arguments)})
            if scenario.consumer_start_delay:
                specs[-1]["start_delay"] = scenario.consumer_start_delay
            if consume_target is not None:
                specs[-1]["target"] = consume_target
    if scenario.exchange_type:
        if not exchange:
            raise ValueError(f"{scenario.key}: an exchange name is needed")
        targets = [(queues[0], {"exchange": exchange, "routing_key": ""})] * scenario.producers
    else:
        targets = [(q, {}) for q in queues for _ in range(scenario.producers)]
    for i, (q, route) in enumerate(targets):
        specs.append({"kind": "producer", "queue": q,
                      "channels": list(range(1, scenario.producer_channels + 1)),
                      "confirm": scenario.confirm, "persistent": scenario.persistent,
                      "message_size": scenario.message_size, **route})
        if scenario.rate is not None:
            specs[-1]["rate"] = scenario.rate
            specs[-1]["phase"] = i / len(targets)
    return specs


def distribute(specs: list[dict], max_procs: int) -> list[list[dict]]:
    """Spread connections over at most max_procs processes, round-robin."""
    n = max(1, min(len(specs), max_procs))
    groups: list[list[dict]] = [[] for _ in range(n)]
    for i, s in enumerate(specs):
        groups[i % n].append(s)
    return groups


def _stop_process(p) -> None:
    p.join(5.0)
    if p.is_alive():
        p.terminate()                 # SIGTERM to its PID
        p.join(5.0)
    if p.is_alive():
        p.kill()                      # SIGKILL to its PID
        p.join(5.0)


def collect_results(pipes, t_end: float) -> tuple[list, list]:
    """(role results, errors) of every load-generator process, waiting until RESULT_GRACE after
    the run's end for each."""
    roles, errors = [], []
    for pipe in pipes:
        if not pipe.poll(max(0.0, t_end + RESULT_GRACE - time.monotonic())):
            errors.append("a load-generator process did not report")
            continue
        try:
            msg = pipe.recv()
        except EOFError:
            errors.append("a load-generator process died")
            continue
        if msg[0] == "error":
            errors.append(msg[1])
        else:
            roles.extend(msg[1])
    return roles, errors


def abort_workers(pipes) -> None:
    """Tell every load-generator process to give up (a run failed)."""
    for pipe in pipes:
        try:
            pipe.send(("abort",))
        except Exception:  # noqa: BLE001 - the process may be gone already
            pass


def stop_workers(procs, pipes) -> None:
    """End every load-generator process by its PID and close the pipes to them."""
    for p in procs:
        _stop_process(p)
    for pipe in pipes:
        pipe.close()


def wait_visible(target: AMQPTarget, queues: list[str], codec_name: str,
                 timeout: float = READY_TIMEOUT) -> None:
    """Block until a passive queue.declare of every queue succeeds on target (another node of
    a cluster learns of the queues through metadata replication)."""
    from amqpclient.lean_connection import AMQPClosed, LeanConnection
    deadline = time.monotonic() + timeout
    while True:
        conn = LeanConnection(target, codec_mod.load(codec_name), name="leveret-bench check",
                              timeout=10.0).connect()
        try:
            conn.channel_open(1)
            for q in queues:
                conn.queue_declare(1, q, passive=True)
            return
        except AMQPClosed as e:
            if time.monotonic() > deadline:
                raise BenchError(f"the queues are not visible on {target.display} after "
                                 f"{timeout:g}s: {e}")
        finally:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - the channel may be closed already
                pass
        time.sleep(0.2)


def poll_depth(control: Control, queues: list[str], t_from: float, t_until: float,
               interval: float = DEPTH_POLL) -> list[tuple[float, int]]:
    """(seconds since t_from, ready messages in all the queues) every `interval` from t_from
    until t_until; the time is that of the last answer of each round."""
    series: list[tuple[float, int]] = []
    t = t_from
    while t < t_until:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        total = sum(control.depth(q) for q in queues)
        series.append((round(time.monotonic() - t_from, 3), total))
        t = max(t + interval, time.monotonic())
    return series


def run_scenario(target: AMQPTarget, scenario: Scenario, *, seconds: float = 10.0,
                 warmup: float = 2.0, client: str = "lean", codec: str = "auto",
                 max_procs: int = 16, log=print, consume_target: AMQPTarget | None = None,
                 queue_prefix: str = "leveret-bench", broker_pid: int | None = None) -> dict:
    """Run one scenario; with `broker_pid` (the broker's root process, on this machine) the
    result also has `write_bytes`, what that process and its descendants wrote in the measured
    window (bench/procio.py), and `bytes_per_msg`, that divided by the messages consumed in it;
    `disk_bytes` and `disk_bytes_per_msg` are the same for the sectors the disk got;
    `broker_cpu_us_per_msg` is the CPU that process tree used per message consumed, and
    `broker_cpu_cores` the cores it kept busy on average."""
    if client == "pika" and scenario.lean_only:
        raise BenchError(f"{scenario.key}: --client pika does not do paced producers, "
                         "exchanges or late consumers (one process per connection); use the "
                         "lean client")
    run_id = f"{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    queues = [f"{queue_prefix}-{scenario.key}-{run_id}-{i}" for i in range(scenario.queues)]
    exchange = f"{queue_prefix}-{scenario.key}-{run_id}-x" if scenario.exchange_type else ""
    specs = role_specs(scenario, queues, consume_target, exchange)
    if client == "pika":
        from bench.pikaworker import worker_main
        groups = [[s] for s in specs]         # pika: one connection per process
    else:
        from bench.loadgen import worker_main
        groups = distribute(specs, max_procs)
    control = Control(target, client, codec)
    procs = []
    pipes = []
    result: dict = {"scenario": scenario.key, "title": scenario.title,
                    "settings": scenario.to_dict(), "error": None,
                    "target_publish_rate": scenario.target_publish_rate,
                    "target_consume_rate": scenario.target_consume_rate}
    declared_exchange = False
    io_window = None
    try:
        for q in queues:
            control.declare(q, scenario.durable, scenario.arguments)
        if exchange:
            control.declare_exchange(exchange, scenario.exchange_type)
            declared_exchange = True
            for q in queues:
                control.bind(q, exchange)
        if consume_target is not None:
            wait_visible(consume_target, queues, codec)
        ctx = multiprocessing.get_context("spawn")
        t_spawn = time.monotonic()
        for g in groups:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(target, codec, g, child), daemon=True,
                            name=f"bench-{scenario.key}")
            p.start()
            child.close()
            procs.append(p)
            pipes.append(parent)
        infos = []
        ready_timeout = READY_TIMEOUT + READY_PER_CONNECTION * len(specs)
        deadline = time.monotonic() + ready_timeout
        for pipe in pipes:
            if not pipe.poll(max(0.0, deadline - time.monotonic())):
                raise BenchError("a load-generator process did not get ready within "
                                 f"{ready_timeout:g}s")
            msg = pipe.recv()
            if msg[0] == "error":
                raise BenchError(f"load generator setup failed: {msg[1]}")
            infos.append(msg[1])
        result["setup_seconds"] = round(time.monotonic() - t_spawn, 3)
        delay = scenario.consumer_start_delay
        t_start = time.monotonic() + 0.2
        t_measure = t_start + (delay if delay else warmup)   # late consumers: from the join
        t_end = t_measure + seconds
        for pipe in pipes:
            pipe.send(("go", t_start, t_measure, t_end))
        if broker_pid:
            io_window = IoWindow(broker_pid, t_measure, t_end).start()
        depth = None
        if delay:
            try:
                depth = poll_depth(control, queues, t_measure, t_end)
            except Exception as e:  # noqa: BLE001 - the depth is a bonus; the run goes on
                log(f"  (queue depth polling stopped: {type(e).__name__}: {e})")
        roles, errors = collect_results(pipes, t_end)
        result["processes"] = len(procs)
        result["codec"] = infos[0].get("codec") if infos else None
        result["client"] = client
        result["seconds"] = seconds
        result["warmup"] = 0.0 if delay else warmup
        result.update(aggregate(roles))
        if delay:
            result.update(drain_summary(roles, depth, drained_depth(scenario)))
        io = io_window.result() if io_window is not None else None
        if io is not None:
            result["write_bytes"] = io["write_bytes"]
            result["disk_bytes"] = io["disk_bytes"]
            n = result.get("consumed")
            result["bytes_per_msg"] = round(io["write_bytes"] / n) if n else None
            result["disk_bytes_per_msg"] = (round(io["disk_bytes"] / n)
                                            if n and io["disk_bytes"] is not None else None)
            result["broker_cpu_cores"] = round(io["cpu_seconds"] / seconds, 3)
            result["broker_cpu_us_per_msg"] = (round(io["cpu_seconds"] / n * 1e6, 1)
                                               if n else None)
        if errors:
            result["error"] = "\n".join(errors)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
        abort_workers(pipes)
    finally:
        if io_window is not None:
            io_window.cancel()
        stop_workers(procs, pipes)
        try:
            for q in queues:
                control.delete(q)
            if declared_exchange:
                control.delete_exchange(exchange)
        except Exception as e:
            log(f"  (could not delete the benchmark queues: {e})")
        control.close()
    return result
