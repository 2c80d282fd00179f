"""amqplib's own stream example (node_modules/amqplib/examples/stream_queues) against Leveret.

The two programs are amqplib's, unchanged but for the broker URL they hard-code
('amqp://localhost'): send_stream.js declares the stream (x-max-length-bytes 2 GB), publishes
one message and exits; receive_stream.js declares it again, sets prefetch 100, consumes from
``x-stream-offset: first`` with manual acks and prints each message, forever (the test stops it
by its pid once the message is printed).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"
EXAMPLE = NODE_DIR / "node_modules" / "amqplib" / "examples" / "stream_queues"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node():
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is missing: apt-get install nodejs npm")
    if not EXAMPLE.is_dir():
        pytest.skip("amqplib is not installed: cd tests/clients/node && npm ci (make test does it)")
    return node


def _program(name: str, url: str, tmp_path: Path) -> Path:
    src = (EXAMPLE / name).read_text()
    assert "'amqp://localhost'" in src  # the one line changed
    out = tmp_path / name
    out.write_text(src.replace("'amqp://localhost'", repr(url)))
    return out


def test_amqplib_stream_example(node, broker, tmp_path):
    env = dict(os.environ, NODE_PATH=str(NODE_DIR / "node_modules"))
    send = subprocess.run([node, str(_program("send_stream.js", broker.url, tmp_path))],
                          capture_output=True, text=True, timeout=60, env=env)
    assert send.returncode == 0 and " [x] Sent 'Hello World! " in send.stdout, send
    sent = send.stdout.split("'")[1]
    recv = subprocess.Popen([node, str(_program("receive_stream.js", broker.url, tmp_path))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = recv.stdout.readline()
            if not line:
                break
            lines.append(line)
            if f" [x] Received '{sent}'" in line:
                break
        assert any(f" [x] Received '{sent}'" in x for x in lines), lines
    finally:
        recv.terminate()
        recv.wait(10)
        with broker.connection() as conn:
            conn.channel().queue_delete("my_first_stream")
