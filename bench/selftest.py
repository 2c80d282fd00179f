"""How fast is the load generator itself?

Runs the very same worker code (bench/loadgen.py, one process, one connection) against a
trivial fake broker in another process that costs almost nothing per message:

* publish:          the sink answers the handshake, then reads and discards everything.
* publish+confirms: the same, and after every read it sends one basic.ack(multiple=true)
                    for every complete message received so far (bytes / message size),
                    so the producer runs with its 1000-message window as against a broker.
* consume+ack:      the source sends pre-encoded basic.deliver commands (1500-byte bodies) as
                    fast as the socket takes them, and reads and discards the acks; the
                    consumer decodes every frame and acks every message (one write per read).
* consume no-ack:   the same without acks.

The figures are the maximum rates one load-generator process sustains on this machine; a
scenario against a real broker is only meaningful while its rates stay well below them (the
broker and the load generator share the machine's cores, so the report also gives the
load generator's CPU use in every scenario).
"""
from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time

from amqpclient import codec as codec_mod
from bench.aggregate import aggregate
from bench.loadgen import make_body
from amqpclient.url import AMQPTarget

MODES = [
    # (key, label, role spec overrides)
    ("publish", "publish, no confirms", {"kind": "producer", "confirm": None}),
    ("publish_confirm", "publish, confirms (window 1000)", {"kind": "producer", "confirm": 1000}),
    ("consume_ack", "consume, ack per message", {"kind": "consumer", "no_ack": False}),
    ("consume_noack", "consume, no-ack", {"kind": "consumer", "no_ack": True}),
]


def _server_handshake(sock, codec, kind: str, confirm: bool) -> bytes:
    """Answer the lean client's setup; returns any bytes read beyond it."""
    M = codec.methods
    enc = codec.encode_method
    buf = b""
    while len(buf) < 8:
        buf += sock.recv(8 - len(buf))
    sock.sendall(enc(0, M.ConnectionStart(version_major=0, version_minor=9,
                                          server_properties={"product": "bench-sink"},
                                          mechanisms="PLAIN", locales="en_US")))
    dec = codec.FrameDecoder(expect_header=False)
    asm = codec.CommandAssembler()
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("client went away during setup")
        dec.feed(data)
        for fr in dec.frames():
            cmd = asm.process(fr)
            if cmd is None:
                continue
            t = type(cmd.method)
            ch = cmd.channel
            if t is M.ConnectionStartOk:
                sock.sendall(enc(0, M.ConnectionTune(channel_max=2047, frame_max=131072,
                                                     heartbeat=0)))
            elif t is M.ConnectionOpen:
                sock.sendall(enc(0, M.ConnectionOpenOk()))
            elif t is M.ChannelOpen:
                sock.sendall(enc(ch, M.ChannelOpenOk()))
                if kind == "producer" and not confirm:
                    return b""
            elif t is M.ConfirmSelect:
                sock.sendall(enc(ch, M.ConfirmSelectOk()))
                return b""
            elif t is M.BasicQos:
                sock.sendall(enc(ch, M.BasicQosOk()))
            elif t is M.BasicConsume:
                sock.sendall(enc(ch, M.BasicConsumeOk(consumer_tag="bench-ctag")))
                return b""
            elif t is M.QueueDeclare:
                sock.sendall(enc(ch, M.QueueDeclareOk(queue=cmd.method.queue)))


def sink_main(codec_name: str, mode: str, msg_len: int, size: int, pipe) -> None:
    """The fake broker (a multiprocessing spawn target)."""
    codec = codec_mod.load(codec_name)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    pipe.send(lsock.getsockname()[1])
    sock, _ = lsock.accept()
    lsock.close()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    kind = "producer" if mode.startswith("publish") else "consumer"
    stop = threading.Event()
    cpu0 = None
    try:
        _server_handshake(sock, codec, kind, mode == "publish_confirm")
        cpu0 = (time.monotonic(), _cpu())
        if kind == "producer":
            buf = bytearray(1 << 20)
            received = 0
            acked = 0
            while True:
                n = sock.recv_into(buf)
                if not n:
                    break
                received += n
                if mode == "publish_confirm":
                    done = received // msg_len
                    if done > acked:
                        acked = done
                        sock.sendall(codec.encode_ack(1, acked, True))
        else:
            body = make_body(size)
            props = codec.properties_raw(None)
            chunk = b"".join(
                codec.encode_deliver(1, b"bench-ctag", tag, False, b"", b"q", props, body,
                                     131072) for tag in range(1, 129))

            def drain():
                b = bytearray(1 << 20)
                try:
                    while not stop.is_set():
                        if not sock.recv_into(b):
                            break
                except OSError:
                    pass
                stop.set()

            t = threading.Thread(target=drain, daemon=True)
            t.start()
            try:
                while not stop.is_set():
                    sock.sendall(chunk)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        stop.set()
        if cpu0 is not None:
            t1, c1 = time.monotonic(), _cpu()
            try:
                pipe.send(("cpu", (c1 - cpu0[1]) / max(1e-9, t1 - cpu0[0])))
            except Exception:
                pass
        sock.close()


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def run_selftest(seconds: float = 3.0, warmup: float = 1.0, codec: str = "auto",
                 size: int = 1500, modes: list[str] | None = None, log=print) -> list[dict]:
    from bench.loadgen import worker_main
    c = codec_mod.load(codec)
    body = make_body(size)
    msg_len = len(c.encode_publish(1, b"", b"q", False, c.properties_raw(None), body, 131072))
    ctx = multiprocessing.get_context("spawn")
    out = []
    for key, label, over in MODES:
        if modes and key not in modes:
            continue
        spec = {"queue": "q", "channels": [1], "message_size": size, "persistent": False,
                "confirm": None, "prefetch": None, "no_ack": False, "ack_every": 1}
        spec.update(over)
        sp, sc = ctx.Pipe()
        sink = ctx.Process(target=sink_main, args=(codec, key, msg_len, size, sc), daemon=True)
        sink.start()
        sc.close()
        wp, wc = ctx.Pipe()
        worker = None
        res = {"mode": key, "label": label, "error": None}
        try:
            if not sp.poll(30):
                raise RuntimeError("the sink did not start")
            port = sp.recv()
            worker = ctx.Process(target=worker_main,
                                 args=(AMQPTarget(port=port), codec, [spec], wc), daemon=True)
            worker.start()
            wc.close()
            if not wp.poll(30):
                raise RuntimeError("the load generator did not get ready")
            msg = wp.recv()
            if msg[0] == "error":
                raise RuntimeError(msg[1])
            t_start = time.monotonic() + 0.1
            wp.send(("go", t_start, t_start + warmup, t_start + warmup + seconds))
            if not wp.poll(warmup + seconds + 30):
                raise RuntimeError("the load generator did not report")
            msg = wp.recv()
            if msg[0] == "error":
                raise RuntimeError(msg[1])
            agg = aggregate(msg[1])
            rate = agg["publish_rate"] if spec["kind"] == "producer" else agg["consume_rate"]
            res.update(rate=rate, loadgen_cpu_cores=agg["loadgen_cpu_cores"],
                       frames_per_s=None if rate is None else round(rate * 3, 1),
                       mbytes_per_s=None if rate is None else round(rate * msg_len / 1e6, 1),
                       confirm_rate=agg.get("confirm_rate"))
            if worker is not None:
                worker.join(10)
            if sp.poll(5):
                m = sp.recv()
                if m[0] == "cpu":
                    res["sink_cpu_cores"] = round(m[1], 3)
        except Exception as e:
            res["error"] = f"{type(e).__name__}: {e}"
        finally:
            for p in (worker, sink):
                if p is None:
                    continue
                p.join(5)
                if p.is_alive():
                    p.terminate()
                    p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join(5)
            sp.close()
            wp.close()
        out.append(res)
    return out


def selftest_table(rows: list[dict]) -> str:
    from bench.result_tables import fmt_rate
    lines = ["| load generator, 1 process / 1 connection | msg/s | frames/s | MB/s "
             "| client CPU (cores) | fake broker CPU (cores) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['label']} | error | | | | |")
            continue
        lines.append(f"| {r['label']} | {fmt_rate(r.get('rate'))} | "
                     f"{fmt_rate(r.get('frames_per_s'))} | {r.get('mbytes_per_s')} | "
                     f"{r.get('loadgen_cpu_cores')} | {r.get('sink_cpu_cores', 'n/a')} |")
    return "\n".join(lines)
