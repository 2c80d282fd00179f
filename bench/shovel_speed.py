"""Dynamic shovel throughput: queue to queue on one Leveret node, per ack mode.

Run with ``python -m bench.shovel_speed [--messages N] [--body BYTES]``. Starts a node of
its own (a temp data dir, a spare port), and for each ack mode (on-confirm, on-publish,
no-ack) fills a durable source queue with N persistent messages, sets a shovel to a second
queue with ``leveretctl set_parameter`` and times until the second queue holds all N (the
time includes leveretctl's start and the shovel's two connections). Prints one line per mode;
nothing is asserted. Figures are in docs/shovels.md ("Throughput").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika

from bench.refbroker import amqp_answers, free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench.shovel_speed", description=__doc__)
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--body", type=int, default=200, help="body size in bytes")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shovel-speed-") as tmp:
        data, port = Path(tmp) / "data", free_port()
        log = open(Path(tmp) / "server.log", "wb")
        node = subprocess.Popen([str(BIN / "leveret-server"), "--host", "127.0.0.1", "--port",
                                 str(port), "--data-dir", str(data), "--management-port", "0",
                                 "--prometheus-port", "0"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not amqp_answers("127.0.0.1", port) and time.monotonic() < deadline:
                time.sleep(0.1)
            run(f"amqp://guest:guest@127.0.0.1:{port}/%2F", data, a.messages, a.body)
        finally:
            node.terminate()  # (this process's own child, by its PID)
            node.wait(30)
            log.close()
    return 0


def run(url: str, data: Path, n: int, body_size: int) -> None:
    def ctl(*args):
        subprocess.run([str(BIN / "leveretctl"), "--data-dir", str(data), *args], check=True,
                       capture_output=True)

    with pika.BlockingConnection(pika.URLParameters(url)) as c:
        ch = c.channel()
        count = lambda q: ch.queue_declare(q, passive=True).method.message_count  # noqa: E731
        body = b"x" * body_size
        for mode in ("on-confirm", "on-publish", "no-ack"):
            src, dst = f"speed-src-{mode}", f"speed-dst-{mode}"
            for q in (src, dst):
                ch.queue_declare(q, durable=True)
            for _ in range(n):
                ch.basic_publish("", src, body, pika.BasicProperties(delivery_mode=2))
            while count(src) < n:
                time.sleep(0.05)
            t0 = time.monotonic()
            ctl("set_parameter", "shovel", f"speed-{mode}", json.dumps({
                "src-uri": url, "src-queue": src, "dest-uri": url, "dest-queue": dst,
                "ack-mode": mode}))
            while count(dst) < n:
                time.sleep(0.01)
            dt = time.monotonic() - t0
            ctl("clear_parameter", "shovel", f"speed-{mode}")
            print(f"{mode:>10}: {n} messages of {body_size} B in {dt:.2f} s = "
                  f"{n / dt:,.0f} msg/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
