"""Clients in other languages work unchanged (issue 13): amqplib (Node.js) and amqp091-go.

Each program in tests/clients/node/*.js and each subcommand of tests/clients/go (one binary) is
run against the module's broker with its URL as the only argument; it exits 0 and prints
"OK <program> ..." when every check passed, or exits 1 with "FAIL <why> (step: ...)" on stderr
(its own watchdog fails it after CLIENT_TIMEOUT_MS: a reply that never comes names the step it
waited in).
docs/clients.md says what each program checks.

amqplib comes from tests/clients/node/package-lock.json (`make test` runs `npm ci` there);
amqp091-go is Debian's golang-github-rabbitmq-amqp091-go-dev, built offline in GOPATH mode.
Either missing skips its tests with the command that installs it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
NODE_DIR = CLIENTS / "node"
GO_DIR = CLIENTS / "go"
GOPATH = Path("/usr/share/gocode")
AMQP091 = GOPATH / "src" / "github.com" / "rabbitmq" / "amqp091-go"
WATCHDOG_MS = 60_000  # the programs' own watchdog (CLIENT_TIMEOUT_MS): fails naming its step
RUN_TIMEOUT = 90  # seconds, then the program is killed

# the first test of each client also builds (go build) or checks it: room for a loaded machine
pytestmark = pytest.mark.timeout(300)

GO_INSTALL = "apt-get install golang-go golang-github-rabbitmq-amqp091-go-dev"
NODE_INSTALL = "apt-get install nodejs npm"


@pytest.fixture(scope="module")
def go_binary(tmp_path_factory):
    """The amqp091-go programs, built once per module (GOPATH mode: no network)."""
    go = shutil.which("go")
    if go is None or not AMQP091.is_dir():
        pytest.skip(f"Go or amqp091-go is missing: {GO_INSTALL}")
    out = tmp_path_factory.mktemp("goclients")
    env = dict(os.environ, GO111MODULE="off", GOPATH=str(GOPATH), GOFLAGS="",
               GOCACHE=os.environ.get("GOCACHE") or str(out / "gocache"))
    binary = out / "leveret-clients"
    res = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_DIR, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"go build failed:\n{res.stdout}\n{res.stderr}"
    return binary


@pytest.fixture(scope="module")
def node_binary():
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"Node.js is missing: {NODE_INSTALL}")
    if not (NODE_DIR / "node_modules" / "amqplib").is_dir():
        pytest.skip("amqplib is not installed: cd tests/clients/node && npm ci (make test does it)")
    return node


@pytest.fixture(params=["node", "go"])
def client(request):
    """A function running one program of this client library against a URL."""
    if request.param == "node":
        node = request.getfixturevalue("node_binary")
        return lambda program, url: [node, str(NODE_DIR / f"{program}.js"), url]
    binary = request.getfixturevalue("go_binary")
    return lambda program, url: [str(binary), program, url]


def run(client, broker, program: str) -> str:
    cmd = client(program, broker.url)
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                             stdin=subprocess.DEVNULL,
                             env=dict(os.environ, CLIENT_TIMEOUT_MS=str(WATCHDOG_MS)))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{program} still running after {RUN_TIMEOUT} s: {e.stdout!r} {e.stderr!r}\n"
                    f"{broker.log_tail()}")
    assert res.returncode == 0, (f"{' '.join(cmd[:-1])} exited {res.returncode}\n"
                                 f"stdout: {res.stdout}\nstderr: {res.stderr}\n"
                                 f"broker log:\n{broker.log_tail()}")
    assert res.stdout.startswith(f"OK {program}"), res.stdout
    return res.stdout


def test_publish_confirms__C1_C2_C4(client, broker):
    out = run(client, broker, "confirms")
    assert "500 confirmed" in out


def test_consume_with_acks_prefetch_and_requeue__A1_A2_A3_A4_P1(client, broker):
    out = run(client, broker, "consume_ack")
    # 200 messages plus the one rejected and redelivered: tags 1..201 on the channel
    assert "200 consumed, last tag 201" in out


def test_rpc_over_direct_reply_to__S3(client, broker):
    out = run(client, broker, "rpc_direct_reply")
    assert "50 replies" in out


def test_channel_error_closes_only_the_channel__E5(client, broker):
    run(client, broker, "channel_error")


def test_consumer_cancelled_by_the_broker_leaves_the_channel_usable(client, broker):
    run(client, broker, "consumer_cancel")


def test_close_channels_and_connection_while_publishing__E5(client, broker):
    out = run(client, broker, "concurrent_close")
    assert "5 rounds" in out


def test_amqplib_high_watermark_publishers_not_blocked__R1(node_binary, broker):
    """amqplib's own "find/set high watermark" tests (they once hung here): a queue without
    consumers takes a full client write buffer at once, and the connection closes behind it."""
    out = run(lambda program, url: [node_binary, str(NODE_DIR / f"{program}.js"), url], broker,
              "high_watermark")
    assert "high watermark" in out
