"""`python -m bench.paper` (make bench-paper): the experiment of seed 003, section 4, on Leveret.

The paper (RabbitMQ 3.6.6 and PerfTest 1.2.0 on one 4-core machine) runs, in one vhost, N
durable queues with 2 producer connections x 2 channels and 3 consumer connections x 3
channels each; 1500-byte persistent messages; the queues bound to one durable direct exchange,
to two of them above 15 queues; publisher confirms and consumer acks.  It plots the send rate
against N before and after each optimisation (figure 5: confirm after the consumer's ack;
figure 6: the same without per-message tracking in the queue).  Leveret has both as the queue
argument ``x-confirm-on``: ``enqueue`` (RabbitMQ's rule, the "before"), ``ack`` (figure 5's
"after") and ``ack-lite`` (figure 6's "after").

What is here:

* ``ResendTracker``: the unconfirmed messages of one publishing channel (pure bookkeeping):
  each message keeps its encoded frames (body included) until a ``basic.ack`` for any of its
  copies; a message not confirmed within the resend timeout, or whose latest copy is nacked,
  is published again under a new delivery tag.  The paper leaves reliability to the publisher
  ("由生产者重发消息"); this is that publisher.
* ``ResendProducer`` / ``IdConsumer``: bench/loadgen.py roles on the lean client.  The
  producer publishes through an exchange with the queue's routing key and puts a unique
  message id in body bytes 8-15 (bytes 0-7 are loadgen's send timestamp); the consumer acks
  every message and records the ids, so the coordinator counts duplicates.
* ``run_point``: one (queue count, mode) against a broker: declares the exchanges and queues,
  runs the load generator processes (bench/scenario_run.py's helpers), deletes everything.
* tables, ratios beside the paper's, the plot (figures 5 and 6's shape) and the CLI.

The "send rate" is the paper's: messages confirmed per second (each message counted once,
whichever copy was confirmed).  Confirm latency runs from a message's first send to the
confirm of any of its copies, so it includes the resend timeout when a message was resent.
"""
from __future__ import annotations

import argparse
import collections
import math
import multiprocessing
import os
import statistics
import sys
import time
from array import array

from bench import result_tables
from bench.aggregate import aggregate
from bench.loadgen import _TS, HIGH_WATER, BATCH, Consumer, Producer
from bench.scenario_run import (READY_TIMEOUT, abort_workers, collect_results, distribute,
                          stop_workers)

MODES = ("enqueue", "ack", "ack-lite")
ALL_QUEUES = (1, 2, 3, 5, 10, 15, 20, 30)
QUICK_QUEUES = (1, 2, 5)
QUEUES_PER_EXCHANGE = 15          # the paper: one exchange up to 15 queues, two above
ID_OFFSET = 8                     # message id: body bytes 8..15 (0..7: send timestamp)
SCAN_NS = 10_000_000              # look for expired messages every 10 ms
# Resend timeout: above the confirm latency the window itself causes (Little's law: 4 channels
# x 1000 messages per queue / the send rate: 5-25 s for 10-30 queues on 2 CPUs), so that only
# nacked or lost messages are resent, not every message of a slow broker (a resend storm).
DEFAULT_RESEND_TIMEOUT = 60.0

# The paper's results (section 4.2): send rate after / before each optimisation, as printed.
PAPER = {
    "ack": {1: (3.08, "3.08x"), 2: (2.01, "2.01x"), 15: (1.409, "+40.9%"),
            30: (1.403, "+40.3%")},
    "ack-lite": {1: (3.48, "3.48x"), 2: (2.16, "2.16x"), 15: (1.526, "+52.6%"),
                 30: (1.534, "+53.4%")},
}
# ... and the mean gain over the queue counts above 3
PAPER_MEAN_GAIN_ABOVE_3 = {"ack": 0.429, "ack-lite": 0.565}
OPTIMISED = ("ack", "ack-lite")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- resend bookkeeping (pure) --------------------------------------------------------------

class _Pending:
    """One unconfirmed message of a channel."""

    __slots__ = ("seq", "sent_ns", "first_ns", "wire", "copies")

    def __init__(self, seq: int, now_ns: int, wire: bytes):
        self.seq = seq                # delivery tag of its latest copy
        self.sent_ns = now_ns         # when its latest copy was handed to the socket
        self.first_ns = now_ns        # when it was first handed to the socket
        self.wire = wire              # its encoded basic.publish + header + body frames
        self.copies = 1               # times published


class ResendTracker:
    """Unconfirmed messages of one confirm-mode channel, with resends.

    Every publish takes the channel's next delivery tag (the broker numbers them the same
    way).  A ``basic.ack`` for any copy of a message confirms it (later acks of its other
    copies are counted in ``redundant``); a ``basic.nack`` of its latest copy asks for a
    resend, one of an older copy is ignored (a newer copy is in flight).  ``expired`` lists
    the messages whose latest copy has waited ``timeout_ns``: ``pending`` is kept in the
    order of the latest send, so that is a walk from the front.
    """

    def __init__(self):
        self.next_seq = 1                                   # the channel's next delivery tag
        self.seqs: collections.deque[int] = collections.deque()  # tags in flight, in order
        #                                                   (acked ones are dropped lazily)
        self.seq_id: dict[int, int] = {}                    # tag in flight -> message id
        self.pending: collections.OrderedDict[int, _Pending] = collections.OrderedDict()
        self.redundant = 0                                  # acks of already-confirmed copies

    @property
    def outstanding(self) -> int:
        """Messages (not copies) not confirmed yet: what the confirm window bounds."""
        return len(self.pending)

    def publish(self, msg_id: int, wire: bytes, now_ns: int) -> int:
        seq = self._take_seq(msg_id)
        self.pending[msg_id] = _Pending(seq, now_ns, wire)
        return seq

    def resend(self, msg_id: int, now_ns: int) -> bytes | None:
        """Publish `msg_id` again: returns the frames to send, None if it is confirmed."""
        p = self.pending.get(msg_id)
        if p is None:
            return None
        p.seq = self._take_seq(msg_id)
        p.sent_ns = now_ns
        p.copies += 1
        self.pending.move_to_end(msg_id)
        return p.wire

    def _take_seq(self, msg_id: int) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.seqs.append(seq)
        self.seq_id[seq] = msg_id
        return seq

    def _answered(self, tag: int, multiple: bool) -> list[tuple[int, int]]:
        """(tag, message id) of the copies a basic.ack/nack answers, removed from flight."""
        seqs, seq_id = self.seqs, self.seq_id
        out = []
        if multiple:
            while seqs and seqs[0] <= tag:
                s = seqs.popleft()
                mid = seq_id.pop(s, None)
                if mid is not None:
                    out.append((s, mid))
        else:
            mid = seq_id.pop(tag, None)
            if mid is not None:
                out.append((tag, mid))
            while seqs and seqs[0] not in seq_id:
                seqs.popleft()
        return out

    def ack(self, tag: int, multiple: bool, now_ns: int, latencies=None) -> int:
        """Messages newly confirmed; their latencies (first send to now, ns) are appended to
        `latencies` unless it is None."""
        n = 0
        pending = self.pending
        for _seq, mid in self._answered(tag, multiple):
            p = pending.pop(mid, None)
            if p is None:
                self.redundant += 1
                continue
            n += 1
            if latencies is not None:
                latencies.append(now_ns - p.first_ns)
        return n

    def nack(self, tag: int, multiple: bool) -> tuple[int, list[int]]:
        """(copies nacked, ids of the messages to resend: those whose latest copy it was)."""
        answered = self._answered(tag, multiple)
        pending = self.pending
        resend = [mid for seq, mid in answered
                  if mid in pending and pending[mid].seq == seq]
        return len(answered), resend

    def expired(self, now_ns: int, timeout_ns: int) -> list[int]:
        """Ids of the messages whose latest copy was sent at least timeout_ns ago."""
        out = []
        for mid, p in self.pending.items():
            if now_ns - p.sent_ns < timeout_ns:
                break
            out.append(mid)
        return out


def count_duplicates(id_blobs) -> dict:
    """Deliveries, distinct message ids and duplicates (deliveries of an id already delivered)
    from the consumers' id arrays (array('q').tobytes())."""
    seen: set[int] = set()
    deliveries = 0
    for blob in id_blobs:
        if not blob:
            continue
        a = array("q")
        a.frombytes(blob)
        deliveries += len(a)
        seen.update(a)
    return {"deliveries": deliveries, "distinct": len(seen),
            "duplicates": deliveries - len(seen)}


# -- load generator roles (run in bench/loadgen.py's worker processes) ----------------------

class ResendProducer(Producer):
    """Producer through an exchange that keeps every unconfirmed message and resends it when
    it is nacked or not confirmed within spec["resend_timeout"] seconds.  Message ids are
    spec["uid"] << 40 | a counter, in body bytes 8-15."""

    def __init__(self, conn, spec, codec):
        super().__init__(conn, spec, codec)
        if self.window is None:
            raise ValueError("ResendProducer needs publisher confirms (a confirm window)")
        if spec["message_size"] < ID_OFFSET + 8:
            raise ValueError("messages need at least 16 body bytes (timestamp + id)")
        self.timeout_ns = int(spec["resend_timeout"] * 1e9)
        self.id_prefix = spec["uid"] << 40
        self.next_id = 0
        self.trackers = {ch: ResendTracker() for ch in self.channels}
        # every channel's template split around the 16 stamped bytes (timestamp + id)
        self.parts = {ch: (tpl[:self.ts_off], tpl[self.ts_off + ID_OFFSET + 8:])
                      for ch, tpl in self.templates.items()}
        self.resent_timeout = 0
        self.resent_nack = 0
        self.next_scan_ns = 0

    def fill(self, now_ns: int) -> bool:
        conn = self.conn
        if len(conn.out) >= HIGH_WATER or conn.blocked:
            conn.flush()
            return False
        if now_ns >= self.next_scan_ns:
            self.next_scan_ns = now_ns + SCAN_NS
            self._resend_expired(now_ns)
        added = False
        chans = self.channels
        nch = len(chans)
        pack = _TS.pack
        for i in range(nch):
            ch = chans[(self.rr + i) % nch]
            tr = self.trackers[ch]
            n = min(BATCH, self.window - tr.outstanding)
            if n <= 0:
                continue
            head, tail = self.parts[ch]
            ts = pack(now_ns)
            publish = tr.publish
            prefix = self.id_prefix
            first = self.next_id
            wires = []
            for k in range(first, first + n):
                mid = prefix | k
                wire = b"".join((head, ts, pack(mid), tail))
                publish(mid, wire, now_ns)
                wires.append(wire)
            self.next_id = first + n
            conn.out += b"".join(wires)
            self.added += n
            added = True
            if len(conn.out) >= HIGH_WATER:
                break
        self.rr += 1
        conn.flush()
        return added and len(conn.out) < HIGH_WATER

    def _resend_expired(self, now_ns: int) -> None:
        out = self.conn.out
        for tr in self.trackers.values():
            for mid in tr.expired(now_ns, self.timeout_ns):
                wire = tr.resend(mid, now_ns)
                if wire is not None:
                    out += wire
                    self.resent_timeout += 1

    def on_read(self, now_ns: int) -> None:
        M = self.M
        samples = self.samples if self.measuring else None
        resent = False
        for cmd in self.conn.recv_commands():
            m = cmd.method
            t = type(m)
            if t is M.BasicAck:
                self.confirmed += self.trackers[cmd.channel].ack(
                    m.delivery_tag, m.multiple, now_ns, samples)
            elif t is M.BasicNack:
                tr = self.trackers[cmd.channel]
                n, again = tr.nack(m.delivery_tag, m.multiple)
                self.nacked += n
                for mid in again:
                    wire = tr.resend(mid, now_ns)
                    if wire is not None:
                        self.conn.out += wire
                        self.resent_nack += 1
                        resent = True
            else:
                self.conn.handle_other(cmd)
        if resent:
            self.conn.flush()

    def counters(self) -> dict:
        d = super().counters()
        d["resent_timeout"] = self.resent_timeout
        d["resent_nack"] = self.resent_nack
        d["redundant_confirms"] = sum(t.redundant for t in self.trackers.values())
        d["unconfirmed"] = sum(t.outstanding for t in self.trackers.values())
        return d


class IdConsumer(Consumer):
    """Consumer that acks every message (basic.ack per message, one write per socket read) and
    records every delivered message id (body bytes 8-15) and the redelivered flags."""

    def __init__(self, conn, spec, codec):
        super().__init__(conn, spec, codec)
        self.ids = array("q")
        self.redelivered = 0

    def on_read(self, now_ns: int) -> None:
        cmds = self.conn.recv_commands()
        if not cmds:
            return
        deliver_cls = self.deliver_cls
        encode_ack = self.encode_ack
        unpack = _TS.unpack_from
        measuring = self.measuring
        samples = self.samples
        ids = self.ids
        acks = []
        n = 0
        for cmd in cmds:
            m = cmd.method
            if type(m) is deliver_cls:
                n += 1
                body = cmd.body
                if measuring:
                    samples.append(now_ns - unpack(body, 0)[0])
                ids.append(unpack(body, ID_OFFSET)[0])
                if m.redelivered:
                    self.redelivered += 1
                acks.append(encode_ack(cmd.channel, m.delivery_tag, False))
            else:
                self.conn.handle_other(cmd)
        self.consumed += n
        if acks:
            self.conn.out += b"".join(acks)
            self.conn.flush()

    def counters(self) -> dict:
        d = super().counters()
        d["redelivered"] = self.redelivered
        return d

    def result(self) -> dict:
        r = super().result()
        r["ids"] = self.ids.tobytes()
        return r


# -- one point of the experiment ------------------------------------------------------------

def topology(n_queues: int, run_id: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(exchanges, [(queue, its exchange)]): queues 1-15 on the first durable direct exchange,
    16-30 on a second one, as the paper."""
    n_ex = max(1, math.ceil(n_queues / QUEUES_PER_EXCHANGE))
    exchanges = [f"leveret-paper-{run_id}-ex{i + 1}" for i in range(n_ex)]
    bindings = [(f"leveret-paper-{run_id}-q{i + 1}", exchanges[i // QUEUES_PER_EXCHANGE])
                for i in range(n_queues)]
    return exchanges, bindings


def paper_specs(bindings: list[tuple[str, str]], *, producers: int = 2,
                producer_channels: int = 2, consumers: int = 3, consumer_channels: int = 3,
                size: int = 1500, confirm_window: int = 1000, prefetch: int | None = 100,
                resend_timeout: float = DEFAULT_RESEND_TIMEOUT) -> list[dict]:
    """One spec per connection (bench/loadgen.py): consumers first so that they are
    subscribed before anything is published; routing key = queue name."""
    specs: list[dict] = []
    for q, _ex in bindings:
        for _ in range(consumers):
            specs.append({"kind": "consumer", "role": "bench.paper:IdConsumer", "queue": q,
                          "channels": list(range(1, consumer_channels + 1)),
                          "no_ack": False, "prefetch": prefetch, "ack_every": 1})
    uid = 0
    for q, ex in bindings:
        for _ in range(producers):
            uid += 1
            specs.append({"kind": "producer", "role": "bench.paper:ResendProducer",
                          "queue": q, "exchange": ex, "routing_key": q,
                          "channels": list(range(1, producer_channels + 1)),
                          "confirm": confirm_window, "persistent": True,
                          "message_size": size, "resend_timeout": resend_timeout,
                          "uid": uid})
    return specs


class _Control:
    """The coordinator's connection for declarations (lean client, channel 1)."""

    def __init__(self, target, codec_name: str):
        from amqpclient import codec as codec_mod
        from amqpclient.lean_connection import LeanConnection
        self.conn = LeanConnection(target, codec_mod.load(codec_name),
                                   name="leveret-bench paper control", timeout=60.0).connect()
        self.conn.channel_open(1)
        self.M = self.conn.M

    def exchange_declare(self, name: str) -> None:
        M = self.M
        self.conn.rpc(1, M.ExchangeDeclare(exchange=name, exchange_type="direct",
                                           durable=True), M.ExchangeDeclareOk)

    def exchange_delete(self, name: str) -> None:
        M = self.M
        self.conn.rpc(1, M.ExchangeDelete(exchange=name), M.ExchangeDeleteOk)

    def queue_declare(self, name: str, arguments: dict) -> None:
        self.conn.queue_declare(1, name, durable=True, arguments=arguments)

    def queue_bind(self, queue: str, exchange: str, routing_key: str) -> None:
        M = self.M
        self.conn.rpc(1, M.QueueBind(queue=queue, exchange=exchange, routing_key=routing_key),
                      M.QueueBindOk)

    def queue_delete(self, name: str) -> None:
        self.conn.queue_delete(1, name)

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass


def queue_arguments(mode: str, mode_arg: bool = True) -> dict:
    return {"x-confirm-on": mode} if mode_arg else {}


def run_point(target, n_queues: int, mode: str, *, seconds: float, warmup: float,
              size: int = 1500, confirm_window: int = 1000, prefetch: int | None = 100,
              resend_timeout: float = DEFAULT_RESEND_TIMEOUT, codec: str = "auto",
              max_procs: int = 16,
              mode_arg: bool = True, log=log) -> dict:
    """Run the paper's setup with `n_queues` queues declared with x-confirm-on=`mode`."""
    from bench.loadgen import worker_main
    run_id = f"{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    exchanges, bindings = topology(n_queues, run_id)
    specs = paper_specs(bindings, size=size, confirm_window=confirm_window, prefetch=prefetch,
                        resend_timeout=resend_timeout)
    result: dict = {"queues": n_queues, "mode": mode, "error": None, "seconds": seconds,
                    "warmup": warmup, "exchanges": len(exchanges),
                    "queue_arguments": queue_arguments(mode, mode_arg),
                    "connections": len(specs)}
    procs, pipes = [], []
    control = None
    declared_q: list[str] = []
    declared_x: list[str] = []
    try:
        control = _Control(target, codec)
        for ex in exchanges:
            control.exchange_declare(ex)
            declared_x.append(ex)
        for q, ex in bindings:
            try:
                control.queue_declare(q, queue_arguments(mode, mode_arg))
            except Exception as e:
                raise RuntimeError(f"queue.declare with x-confirm-on={mode} failed: {e}") from e
            declared_q.append(q)
            control.queue_bind(q, ex, q)
        ctx = multiprocessing.get_context("spawn")
        for g in distribute(specs, max_procs):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(target, codec, g, child), daemon=True,
                            name=f"bench-paper-q{n_queues}-{mode}")
            p.start()
            child.close()
            procs.append(p)
            pipes.append(parent)
        deadline = time.monotonic() + READY_TIMEOUT
        for pipe in pipes:
            if not pipe.poll(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"a load-generator process was not ready in {READY_TIMEOUT}s")
            msg = pipe.recv()
            if msg[0] == "error":
                raise RuntimeError(f"load generator setup failed: {msg[1]}")
        t_start = time.monotonic() + 0.2
        t_measure = t_start + warmup
        t_end = t_measure + seconds
        for pipe in pipes:
            pipe.send(("go", t_start, t_measure, t_end))
        roles, errors = collect_results(pipes, t_end)
        result["processes"] = len(procs)
        result.update(summarize_roles(roles))
        if errors:
            result["error"] = "\n".join(errors)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
        abort_workers(pipes)
    finally:
        stop_workers(procs, pipes)
        _cleanup(target, codec, control, declared_q, declared_x, log)
    return result


def _cleanup(target, codec, control, queues, exchanges, log) -> None:
    if not queues and not exchanges:
        if control is not None:
            control.close()
        return
    for attempt in range(2):
        try:
            if control is None:
                control = _Control(target, codec)
            for q in queues:
                control.queue_delete(q)
            for ex in exchanges:
                control.exchange_delete(ex)
            break
        except Exception as e:
            if control is not None:
                control.close()
            control = None
            if attempt:
                log(f"  (could not delete the benchmark queues/exchanges: {e})")
    if control is not None:
        control.close()


def summarize_roles(roles: list[dict]) -> dict:
    """The point's figures from the workers' role results (pure)."""
    out = aggregate(roles)
    out["send_rate"] = out.pop("confirm_rate")
    producers = [r for r in roles if r["kind"] == "producer"]
    consumers = [r for r in roles if r["kind"] == "consumer"]

    def final(r: dict, key: str) -> int:
        snaps = r.get("snapshots") or []
        return (snaps[-1].get(key) or 0) if snaps else 0

    out["resends_timeout"] = sum(final(r, "resent_timeout") for r in producers)
    out["resends_nack"] = sum(final(r, "resent_nack") for r in producers)
    out["resends"] = out["resends_timeout"] + out["resends_nack"]
    out["redundant_confirms"] = sum(final(r, "redundant_confirms") for r in producers)
    out["unconfirmed_at_end"] = sum(final(r, "unconfirmed") for r in producers)
    out["redelivered"] = sum(final(r, "redelivered") for r in consumers)
    out.update(count_duplicates(r.get("ids") for r in consumers))
    return out


def combine_runs(runs: list[dict]) -> dict:
    """One point from --repeat runs: the mean of the rates and latency percentiles (the paper
    averages 3 runs), the sum of the counts; the runs are kept under "runs"."""
    ok = [r for r in runs if not r.get("error")]
    base = dict(ok[0] if ok else runs[0])
    base["runs"] = runs
    if len(runs) == 1 or not ok:
        return base
    base["error"] = None if len(ok) == len(runs) else \
        f"{len(runs) - len(ok)} of {len(runs)} runs failed: " + \
        next(r["error"] for r in runs if r.get("error"))

    def mean(values):
        values = [v for v in values if v is not None]
        return statistics.fmean(values) if values else None

    for k in ("send_rate", "publish_rate", "consume_rate", "loadgen_cpu_cores"):
        base[k] = mean(r.get(k) for r in ok)
    for k in ("confirm_latency_ms", "e2e_latency_ms"):
        dicts = [r.get(k) for r in ok if r.get(k)]
        if dicts:
            base[k] = {f: mean(d.get(f) for d in dicts) for f in dicts[0]}
    for k in ("resends", "resends_timeout", "resends_nack", "duplicates", "deliveries",
              "redelivered", "nacked", "redundant_confirms"):
        base[k] = sum(r.get(k) or 0 for r in ok)
    return base


# -- tables, ratios, plot (pure but for the file the plot writes) ---------------------------

def _by_point(results: list[dict]) -> dict[tuple[int, str], dict]:
    return {(r["queues"], r["mode"]): r for r in results}


def send_rate(r: dict | None) -> float | None:
    if not r or (r.get("error") and r.get("send_rate") is None):
        return None
    return r.get("send_rate")


def ratio_rows(results: list[dict]) -> list[dict]:
    """Per queue count: enqueue's send rate and, for ack and ack-lite, the ratio to it with the
    paper's figure beside it (None where not measured / not in the paper)."""
    pts = _by_point(results)
    rows = []
    for n in sorted({r["queues"] for r in results}):
        base = send_rate(pts.get((n, "enqueue")))
        row = {"queues": n, "enqueue": base}
        for mode in OPTIMISED:
            v = send_rate(pts.get((n, mode)))
            row[mode] = v / base if v is not None and base else None
            row[f"paper {mode}"] = PAPER[mode].get(n, (None, None))[0]
        rows.append(row)
    return rows


def mean_gain_above(rows: list[dict], mode: str, above: int = 3) -> float | None:
    """The paper's "average improvement above 3 queues": the arithmetic mean of
    (ratio - 1) over the queue counts above `above` that were measured."""
    gains = [r[mode] - 1 for r in rows if r["queues"] > above and r.get(mode) is not None]
    return statistics.fmean(gains) if gains else None


def fmt_gain(ratio: float | None) -> str:
    if ratio is None:
        return "–"
    return f"{ratio:.2f}x ({(ratio - 1) * 100:+.1f}%)"


def results_table(results: list[dict]) -> str:
    head = ["queues", "x-confirm-on", "send msg/s (confirmed)", "publish msg/s",
            "consume msg/s", "confirm p50 ms", "confirm p99 ms", "resends", "duplicates"]
    lines = ["| " + " | ".join(head) + " |", "| ---: | --- |" + " ---: |" * (len(head) - 2)]
    for r in sorted(results, key=lambda r: (r["queues"], MODES.index(r["mode"])
                                            if r["mode"] in MODES else 99)):
        cells = [str(r["queues"]), r["mode"]]
        if r.get("error") and r.get("send_rate") is None:
            cells += ["error"] * (len(head) - 2)
        else:
            cl = r.get("confirm_latency_ms") or {}
            cells += [result_tables.fmt_rate(r.get("send_rate")), result_tables.fmt_rate(r.get("publish_rate")),
                      result_tables.fmt_rate(r.get("consume_rate")), result_tables.fmt_ms(cl.get("p50")),
                      result_tables.fmt_ms(cl.get("p99")), f"{r.get('resends', 0):,}",
                      f"{r.get('duplicates', 0):,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_table(results: list[dict]) -> str:
    rows = ratio_rows(results)
    head = ["queues", "enqueue send msg/s"]
    for mode in OPTIMISED:
        head += [f"{mode} / enqueue", f"paper ({mode})"]
    lines = ["| " + " | ".join(head) + " |", "| ---: |" + " ---: |" * (len(head) - 1)]
    for row in rows:
        cells = [str(row["queues"]), result_tables.fmt_rate(row["enqueue"])]
        for mode in OPTIMISED:
            cells += [fmt_gain(row[mode]), PAPER[mode].get(row["queues"], (None, "–"))[1]]
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["mean gain above 3 queues", ""]
    for mode in OPTIMISED:
        g = mean_gain_above(rows, mode)
        cells += ["–" if g is None else f"{g * 100:+.1f}%",
                  f"+{PAPER_MEAN_GAIN_ABOVE_3[mode] * 100:.1f}%"]
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def resend_notes(results: list[dict], timeout: float) -> list[str]:
    """A line per point whose publishers resent after the timeout.  When the confirm latency
    itself passed the timeout, those are not lost messages but a resend storm (every message
    in the window goes twice), and that point's send rate measures the storm."""
    out = []
    for r in results:
        n = r.get("resends_timeout") or 0
        if not n:
            continue
        p99 = (r.get("confirm_latency_ms") or {}).get("p99")
        storm = p99 is not None and p99 >= timeout * 1000 * 0.8
        out.append(f"- {r['queues']} queues, {r['mode']}: {n:,} messages resent after "
                   f"{timeout:g} s without a confirm (confirm p99 {result_tables.fmt_ms(p99)} ms)"
                   + ("; the confirm latency reached the timeout, so this is a resend storm, "
                      "not lost messages: raise --resend-timeout or lower --confirm-window "
                      "to measure the broker instead" if storm else ""))
    return out


def plot(results: list[dict], path: str, title: str = "") -> str:
    """Send rate against queue count, one line per mode, shaped like the paper's figures 5
    (enqueue vs ack) and 6 (enqueue vs ack-lite): one panel per optimised mode measured, a
    single panel when only one mode was."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = _by_point(results)
    measured = [m for m in MODES if any(r["mode"] == m for r in results)]
    extra = [m for m in sorted({r["mode"] for r in results}) if m not in MODES]
    optimised = [m for m in OPTIMISED if m in measured]
    if optimised and "enqueue" in measured:
        panels = [(f"Fig. {5 if m == 'ack' else 6}: enqueue vs {m}", ["enqueue", m])
                  for m in optimised]
    else:
        panels = [("send rate", measured + extra)]
    style = {"enqueue": ("o", "-", "tab:blue"), "ack": ("s", "--", "tab:orange"),
             "ack-lite": ("^", "-.", "tab:green")}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    qs_all = sorted({r["queues"] for r in results})
    for ax, (name, modes) in zip(axes[0], panels):
        for mode in modes:
            xs, ys = [], []
            for n in qs_all:
                v = send_rate(pts.get((n, mode)))
                if v is not None:
                    xs.append(n)
                    ys.append(v)
            marker, ls, color = style.get(mode, ("x", ":", None))
            ax.plot(xs, ys, marker=marker, linestyle=ls, color=color,
                    label=f"x-confirm-on={mode}")
        ax.set_title(name)
        ax.set_xlabel("queues")
        ax.set_ylabel("send rate (confirmed msg/s)")
        ax.set_xticks(qs_all)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- command line ---------------------------------------------------------------------------

def parse_list(text: str, conv=str) -> list:
    return [conv(p.strip()) for p in text.split(",") if p.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.paper",
        description="Seed 003's experiment (figures 5 and 6): per queue 2 producer connections "
                    "x 2 channels and 3 consumer connections x 3 channels, 1500-byte persistent "
                    "messages to durable queues behind durable direct exchanges, confirms with "
                    "resends and manual acks, for several queue counts and x-confirm-on modes. "
                    "Without --url it starts a Leveret node.")
    p.add_argument("--url", help="use this broker (amqp://user:pass@host:port/vhost) instead of "
                                 "starting a Leveret node")
    p.add_argument("--label", help="broker name in the output (default: Leveret, or the "
                                   "server's product and version with --url)")
    p.add_argument("--queues", help="comma-separated queue counts (default "
                                    f"{','.join(map(str, ALL_QUEUES))}; --quick: "
                                    f"{','.join(map(str, QUICK_QUEUES))})")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated x-confirm-on values (default enqueue,ack,ack-lite)")
    p.add_argument("--quick", action="store_true",
                   help="a short version: 1, 2 and 5 queues, 5 s measured after 2 s warm-up "
                        "(explicit --queues/--seconds/--warmup win)")
    p.add_argument("--seconds", type=float, help="measured seconds per point (default 20; "
                                                 "--quick 5)")
    p.add_argument("--warmup", type=float, help="warm-up seconds per point (default 5; --quick "
                                                "2)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per point; rates and percentiles are averaged, as the paper "
                        "averages 3 runs (default 1)")
    p.add_argument("--resend-timeout", type=float, default=DEFAULT_RESEND_TIMEOUT,
                   help="publishers resend a message not confirmed within this many seconds "
                        f"(default {DEFAULT_RESEND_TIMEOUT:g}: above the confirm latency of a "
                        "loaded 2-CPU machine, see docs/bench.md; 5 s there is a resend storm "
                        "from 10 queues up)")
    p.add_argument("--confirm-window", type=int, default=1000,
                   help="unconfirmed messages in flight per publishing channel (default 1000)")
    p.add_argument("--prefetch", type=int, default=100,
                   help="basic.qos prefetch_count per consuming channel (default 100; 0: none)")
    p.add_argument("--size", type=int, default=1500, help="body bytes (default 1500, >= 16)")
    p.add_argument("--no-mode-arg", action="store_true",
                   help="declare the queues without x-confirm-on (for brokers that refuse it); "
                        "the mode is then only a label")
    p.add_argument("--pause", type=float, default=2.0,
                   help="seconds between points, for the broker to settle (default 2)")
    p.add_argument("--codec", choices=["auto", "protocol", "pamqp"], default="auto")
    p.add_argument("--procs", type=int, default=16,
                   help="at most this many load-generator processes (default 16)")
    p.add_argument("--json", help="results JSON (default bench/results/<time>-paper-<label>.json)")
    p.add_argument("--plot", help="PNG plot (default: the JSON's path with .png)")
    p.add_argument("--server", help="leveret-server executable (default REPO/.venv/bin/"
                                    "leveret-server)")
    p.add_argument("--keep-node-dir", action="store_true",
                   help="keep the started Leveret node's data directory and log")
    return p


def resolve(args) -> tuple[list[int], list[str], float, float]:
    queues = parse_list(args.queues, int) if args.queues else \
        list(QUICK_QUEUES if args.quick else ALL_QUEUES)
    modes = parse_list(args.modes)
    seconds = args.seconds if args.seconds is not None else (5.0 if args.quick else 20.0)
    warmup = args.warmup if args.warmup is not None else (2.0 if args.quick else 5.0)
    if not queues or any(n < 1 for n in queues):
        raise SystemExit("--queues wants positive integers")
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise SystemExit(f"--modes: unknown {', '.join(unknown) or '(none given)'}; known: "
                         f"{', '.join(MODES)}")
    if args.size < ID_OFFSET + 8:
        raise SystemExit("--size must be at least 16 (timestamp + message id)")
    return queues, modes, seconds, warmup


def run_all(url: str, label: str, queues: list[int], modes: list[str], seconds: float,
            warmup: float, args) -> list[dict]:
    from amqpclient.url import parse_url
    target = parse_url(url)
    results = []
    first = True
    for n in queues:
        for mode in modes:               # modes interleaved per queue count: drift hits all
            runs = []
            for i in range(max(1, args.repeat)):
                if not first:
                    time.sleep(args.pause)
                first = False
                log(f"[{label}] {n} queue{'s' if n > 1 else ''}, x-confirm-on={mode}: "
                    f"{warmup:g}s warm-up + {seconds:g}s"
                    + (f" (run {i + 1} of {args.repeat})" if args.repeat > 1 else "") + " ...")
                r = run_point(target, n, mode, seconds=seconds, warmup=warmup, size=args.size,
                              confirm_window=args.confirm_window,
                              prefetch=args.prefetch or None,
                              resend_timeout=args.resend_timeout, codec=args.codec,
                              max_procs=args.procs, mode_arg=not args.no_mode_arg)
                runs.append(r)
                if r.get("error"):
                    log(f"[{label}]   error: {r['error'].strip().splitlines()[0]}")
                else:
                    cl = r.get("confirm_latency_ms") or {}
                    log(f"[{label}]   send {result_tables.fmt_rate(r.get('send_rate'))} msg/s, publish "
                        f"{result_tables.fmt_rate(r.get('publish_rate'))}, consume "
                        f"{result_tables.fmt_rate(r.get('consume_rate'))}, confirm p50 "
                        f"{result_tables.fmt_ms(cl.get('p50'))} ms p99 {result_tables.fmt_ms(cl.get('p99'))}"
                        f" ms, resends {r.get('resends', 0)}, duplicates "
                        f"{r.get('duplicates', 0)} (load generator "
                        f"{r.get('loadgen_cpu_cores')} cores)")
            results.append(combine_runs(runs))
    return results


def main(argv: list[str] | None = None) -> int:
    from bench.machine import machine_info
    from bench.refbroker import server_version
    from amqpclient.url import parse_url

    args = build_parser().parse_args(argv)
    queues, modes, seconds, warmup = resolve(args)
    doc: dict = {"experiment": "seed 003 figures 5 and 6",
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info(),
                 "args": vars(args),
                 "settings": {"queues": queues, "modes": modes, "seconds": seconds,
                              "warmup": warmup, "producers_per_queue": 2,
                              "producer_channels": 2, "consumers_per_queue": 3,
                              "consumer_channels": 3, "size": args.size, "persistent": True,
                              "durable": True, "exchange_type": "direct",
                              "queues_per_exchange": QUEUES_PER_EXCHANGE,
                              "confirm_window": args.confirm_window,
                              "prefetch": args.prefetch, "resend_timeout": args.resend_timeout},
                 "paper": {"ratios": {m: {str(n): v[0] for n, v in d.items()}
                                      for m, d in PAPER.items()},
                           "mean_gain_above_3": PAPER_MEAN_GAIN_ABOVE_3},
                 "results": []}
    if args.url:
        t = parse_url(args.url)
        label = args.label or server_version(t.host, t.port) or t.display
        doc["broker"] = {"label": label, "url": t.display}
        results = run_all(args.url, label, queues, modes, seconds, warmup, args)
    else:
        from bench.leveret_node import SERVER, LeveretNode
        label = args.label or "Leveret"
        node = LeveretNode(server=args.server or SERVER, log=log, keep_dir=args.keep_node_dir)
        try:
            node.start()
        except Exception as e:
            log(f"could not start Leveret: {e}")
            return 1
        try:
            log(f"Leveret node pid {node.pid} on {node.url} ({node.version()})")
            doc["broker"] = {"label": label, "url": "started by the benchmark",
                             "version": node.version()}
            results = run_all(node.url, label, queues, modes, seconds, warmup, args)
        finally:
            node.stop()
            if args.keep_node_dir:
                log(f"node directory kept: {node.dir}")
    doc["results"] = results
    rows = ratio_rows(results)
    doc["ratios"] = rows
    doc["mean_gain_above_3"] = {m: mean_gain_above(rows, m) for m in OPTIMISED}

    cpus = doc["machine"].get("cpus")
    print(f"\n### {label}: the paper's experiment ({seconds:g} s measured after {warmup:g} s "
          f"warm-up per point{f', mean of {args.repeat} runs' if args.repeat > 1 else ''}, "
          f"{cpus} CPUs)\n")
    print(results_table(results))
    print("\n### Send rate of each mode / enqueue, beside the paper's (RabbitMQ 3.6.6)\n")
    print(ratio_table(results))
    notes = resend_notes(results, args.resend_timeout)
    if notes:
        print("\nResends:\n" + "\n".join(notes))
    path = args.json or result_tables.results_path(f"paper-{label}")
    png = args.plot or os.path.splitext(path)[0] + ".png"
    try:
        plot(results, png, f"{label}: seed 003's experiment, {seconds:g} s per point, "
                           f"{cpus} CPUs")
        doc["plot"] = png
    except ImportError as e:
        log(f"no plot (matplotlib is missing: {e}); `make venv` installs it")
        png = None
    result_tables.write_json(doc, path)
    if png:
        print(f"\nPlot: {os.path.relpath(png)}")
    print(f"JSON: {os.path.relpath(path)}")
    failed = [r for r in results if r.get("error")]
    if failed:
        print("\nErrors:\n" + "\n".join(
            f"- {r['queues']} queues, {r['mode']}: {r['error'].strip().splitlines()[0]}"
            for r in failed))
    return 1 if failed else 0


if __name__ == "__main__":          # required: the load generator uses the spawn start method
    sys.exit(main())
