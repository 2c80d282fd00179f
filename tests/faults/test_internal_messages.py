"""Forged and malformed messages on a node's internal ZeroMQ endpoints (issue 11, item 7).

The issue's reproduction: one ZeroMQ message with a non-UTF-8 actor name killed the receive
thread of every process it reached, and the node then answered nothing while its supervisor saw
nothing wrong. Here a PUSH socket connects to the ipc:// endpoint of every process of a live
node (each worker's, and the node's own) and sends each kind of malformed message; after each,
the broker still serves pika clients on every connection worker and queue worker (publish with
confirms, consume), no process was restarted, and the log has the "malformed message" line of
every endpoint. And a receive loop that fails (an exception escaping it: a fault injected from
outside the production code, by tests/faults/inject/sitecustomize.py) takes its process down:
a worker is restarted by the node, the node itself exits non-zero.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import zmq

from actors import messages as m
from actors.transport import EXIT_RECEIVE_FAILED
from actors.wire import packb
from amqp_helpers import safe_close, unique, wait_until
from conftest import Broker

pytestmark = [pytest.mark.skipif(bool(os.environ.get("LEVERET_TEST_URL")),
                                 reason="talks to a Leveret node's internal endpoints"),
              pytest.mark.timeout(180)]

INJECT = Path(__file__).resolve().parent / "inject"
TAG = {cls: i for i, cls in enumerate(m._TYPES)}
SENT = m.encode(m.Sent("ipc:///forged.sock#ch/1/1/1", 1))[0]
PUB_ITEM = [1, "", "k", b"", False, 0, -1]

MALFORMED = {
    "non-utf8-actor-name": [b"\xff\xfe\xfd", SENT],
    "garbage-msgpack": [b"control", b"\xc1\xff\x00garbage"],
    "unknown-tag": [b"control", packb([9999, "ipc:///forged.sock#x", 1])],
    "wrong-field-count": [b"control", packb([TAG[m.Rpc], "ipc:///forged.sock#x", 1])],
    "wrong-field-type": [b"control", packb([TAG[m.WorkerDown], "queue", {"not": "a str"}])],
    "short-batch": [b"", packb([2, 2, 3]), b"control", SENT],
    "batch-bad-counts": [b"", packb(["x", None]), b"control", SENT, b"control", SENT],
    "bodies-do-not-add-up": [b"nobody", packb([TAG[m.Publish], "ipc:///forged.sock#ch/9",
                                               [PUB_ITEM, PUB_ITEM], [10, 10]]), b"short"],
}


def endpoints(broker: Broker) -> dict[str, str]:
    """{"node" | "conn-0" | "queue-1" ...: its ipc:// endpoint} of the running processes."""
    info = json.loads((broker.data_dir / "node.json").read_text())
    found = {"node": info["metadata"].partition("#")[0]}
    for kind in ("conn", "queue"):
        for index, pid in broker.worker_pids(kind).items():
            # (a worker forked by the launcher shows its command as one string: setproctitle)
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ").split()
            found[f"{kind}-{index}"] = args[args.index("--endpoint") + 1]
    return found


def push(endpoint: str, *messages: list) -> None:
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 5000)
    sock.connect(endpoint)
    for parts in messages:
        sock.send_multipart(parts)
    sock.close()  # lingers until they are handed over


def all_pids(broker: Broker) -> dict[str, int]:
    return {f"{kind}-{i}": pid for kind in ("conn", "queue")
            for i, pid in broker.worker_pids(kind).items()}


def serves(broker: Broker) -> None:
    """Every connection worker and every queue worker serves: one connection per connection
    worker (they are dealt in turn), each publishing with confirms to queues on every queue
    worker (placed on the least loaded) and consuming what it published."""
    workers = len(broker.worker_pids("conn"))
    queues = len(broker.worker_pids("queue"))
    conns = [broker.connection() for _ in range(workers)]
    try:
        for conn in conns:
            ch = conn.channel()
            ch.confirm_delivery()
            for _ in range(queues):
                q = ch.queue_declare(unique("im"), exclusive=True).method.queue
                ch.basic_publish("", q, b"still served", mandatory=True)  # raises if nacked
                got = []
                ch.basic_consume(q, lambda c, meth, p, body: got.append(body), auto_ack=True)
                wait_until(lambda: conn.process_data_events(0.05) or got, timeout=10,
                           message=f"a delivery from {q}")
                assert got == [b"still served"]
    finally:
        for conn in conns:
            safe_close(conn)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    broker = Broker.start_leveret(tmp_path_factory.mktemp("internal"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_malformed_message_is_logged_and_dropped_by_every_process(node, kind):
    before = all_pids(node)
    targets = endpoints(node)
    for endpoint in targets.values():
        push(endpoint, MALFORMED[kind])
    log = lambda: node.log_path.read_text(errors="replace")  # noqa: E731
    for name, endpoint in targets.items():
        wait_until(lambda: log().count(f"malformed message dropped at {endpoint}:") >=
                   1 + list(MALFORMED).index(kind), timeout=10,
                   message=f"the malformed-message line of {name} for {kind}")
    serves(node)
    assert all_pids(node) == before, node.log_tail()
    assert "receive loop" not in log() and "Traceback" not in log(), node.log_tail()


def test_a_forged_request_for_an_actor_that_is_not_a_queue_is_answered_not_fatal(node):
    """A well-formed Consume, Get or QueueOp for a name no queue has reaches the queue worker's
    missing-queue answer (a 404 to the address it claims), whatever the name looks like."""
    before = all_pids(node)
    forged = [[b"not-a-queue", m.encode(m.Consume("ipc:///forged.sock#x", 1, "c", False, False,
                                                  0, 0, "o", {}))[0]],
              [b"q\x1fonly-two-parts", m.encode(m.Get("ipc:///forged.sock#x", 2, True, "o"))[0]],
              [b"\x1f\x1f", m.encode(m.QueueOp("bad address", 3, "info", {}))[0]]]
    for name, endpoint in endpoints(node).items():
        if name.startswith("queue"):
            push(endpoint, *forged)
    serves(node)
    assert all_pids(node) == before, node.log_tail()
    assert "Traceback" not in node.log_path.read_text(errors="replace"), node.log_tail()


def test_a_flood_of_malformed_messages_is_logged_at_a_bounded_rate(node):
    endpoint = endpoints(node)["queue-0"]
    size = lambda: node.log_path.stat().st_size  # noqa: E731
    push(endpoint, *([[b"control", b"\xc1"]] * 2000), [b"control", SENT])
    serves(node)
    # 2,000 messages: at most the burst of lines per minute, not one line each
    lines = [x for x in node.log_path.read_text(errors="replace").splitlines()
             if f"malformed message dropped at {endpoint}:" in x]
    from actors.transport import MALFORMED_LOG_BURST
    assert len(lines) <= MALFORMED_LOG_BURST, len(lines)
    assert size() < 2_000_000


# -- a receive loop that fails ends its process ------------------------------------------------
@pytest.fixture
def injected(tmp_path, monkeypatch):
    """A node whose processes load tests/faults/inject/sitecustomize.py: a message for the actor
    named "crash-the-receive-loop" raises out of the transport's receive path, as a bug there
    would."""
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(INJECT) + (os.pathsep + path if path else ""))
    broker = Broker.start_leveret(tmp_path)
    monkeypatch.delenv("PYTHONPATH") if path is None else monkeypatch.setenv("PYTHONPATH", path)
    try:
        yield broker
    finally:
        broker.stop()


def test_a_worker_whose_receive_loop_fails_exits_and_is_restarted(injected):
    broker = injected
    targets = endpoints(broker)
    victim_pid = broker.worker_pids("queue")[0]
    conn_pid = broker.worker_pids("conn")[0]
    push(targets["queue-0"], [b"crash-the-receive-loop", SENT])
    push(targets["conn-0"], [b"crash-the-receive-loop", SENT])
    wait_until(lambda: broker.worker_pids("queue").get(0) not in (None, victim_pid) and
               broker.worker_pids("conn").get(0) not in (None, conn_pid), timeout=20,
               message="queue worker 0 and conn worker 0 restarted")
    log = broker.log_path.read_text(errors="replace")
    assert f"the receive loop of {targets['queue-0']} failed: exiting (status 70)" in log
    assert "RuntimeError: injected fault in the receive loop" in log
    assert f"queue worker 0 (pid {victim_pid}) exited: exit status {EXIT_RECEIVE_FAILED} " \
           f"(its ZeroMQ receive loop failed)" in log
    assert f"conn worker 0 (pid {conn_pid}) exited: exit status {EXIT_RECEIVE_FAILED}" in log
    wait_until(lambda: serves(broker) is None, timeout=20, message="served after the restarts")


def test_a_node_whose_receive_loop_fails_exits_non_zero(injected):
    broker = injected
    workers = [(pid, _started(pid)) for pid in all_pids(broker).values()]
    push(endpoints(broker)["node"], [b"crash-the-receive-loop", SENT])
    assert broker.proc.wait(20) == EXIT_RECEIVE_FAILED, broker.log_tail()
    assert "the receive loop of ipc://" in broker.log_path.read_text(errors="replace")
    # its workers die with it (PR_SET_PDEATHSIG): nothing is left to answer half a broker
    # (a SIGKILL takes effect once a process leaves uninterruptible sleep: an fsync on a
    # loaded machine, hence the generous wait)
    for pid, started in workers:
        wait_until(lambda: _state(pid, started) in ("gone", "Z", "X"), timeout=60,
                   message=f"worker {pid} gone (state {_state(pid, started)})")


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (state first)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _started(pid: int) -> str:
    return _stat(pid)[19]  # (starttime, field 22: with the pid, names one process)


def _state(pid: int, started: str) -> str:
    """A process's state letter from /proc ("gone" when it has been reaped, or its pid now
    names another process: pids are reused within seconds on a busy machine)."""
    try:
        fields = _stat(pid)
    except OSError:
        return "gone"
    return fields[0] if fields[19] == started else "gone"
