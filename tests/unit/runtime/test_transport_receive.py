"""The transport's receive path (issue 11, item 7): a multipart that is not one of ours is logged
(rate-limited, with the endpoint, the sender address it claims and its first bytes) and dropped,
and the process goes on reading; an exception escaping the receive loop itself ends the process
with EXIT_RECEIVE_FAILED so that its supervisor restarts it, instead of leaving it deaf."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading

import pytest
import zmq

from actors import messages as m
from actors import transport as transport_mod
from actors.runtime import EventLoop
from actors.transport import EXIT_RECEIVE_FAILED, LogThrottle, Transport
from actors.wire import packb

SENT = m.encode(m.Sent("ipc:///w.sock#ch/1", 1))[0]
TAG = {cls: i for i, cls in enumerate(m._TYPES)}


class Inbox:
    def __init__(self, want: int = 1):
        self.got = []
        self.want = want
        self.done = threading.Event()

    def tell(self, msg):
        self.got.append(msg)
        if len(self.got) >= self.want:
            self.done.set()


@pytest.fixture
def receiver():
    t = Transport("ipc:///nonexistent/receiver.sock")
    inbox = Inbox()
    t.register("a", inbox)
    return t, inbox


MALFORMED = [
    ("non-UTF-8 actor name", [b"\xff\xfea", SENT], "not UTF-8"),
    ("garbage msgpack", [b"a", b"\xc1\xc1\xc1"], "undecodable payload"),
    ("unknown tag", [b"a", packb([999, "x#y", 1])], "unknown tag 999"),
    ("wrong field count", [b"a", packb([TAG[m.Sent], "x#y"])], "Sent with 1 fields"),
    ("a lone frame", [b"a"], "1 frames"),
    ("too many frames", [b"a", SENT, b"x", b"y"], "4 frames"),
    ("a short batch", [b"", packb([2, 2]), b"a", SENT], "batch announcing 6 frames in 4"),
    ("a long batch", [b"", packb([2]), b"a", SENT, b"a", SENT], "announcing 4 frames in 6"),
    ("a batch count out of range", [b"", packb([1, 3]), b"a", SENT, b"a", SENT],
     "a message of 1 frames"),
    ("a batch with a bad header", [b"", b"\xc1", b"a", SENT], "undecodable header"),
    ("an empty batch", [b""], "undecodable header"),
]


@pytest.mark.parametrize("label, parts, why", MALFORMED, ids=[x[0] for x in MALFORMED])
def test_a_malformed_multipart_is_logged_and_dropped(receiver, caplog, label, parts, why):
    t, inbox = receiver
    with caplog.at_level(logging.WARNING, logger="actors.transport"):
        t._receive(parts)
    assert inbox.got == [] and t.malformed == 1
    line = caplog.records[-1].getMessage()
    assert line.startswith("malformed message dropped at ipc:///nonexistent/receiver.sock: ")
    assert why in line and "first bytes" in line


def test_the_log_line_names_the_sender_the_message_claims(receiver, caplog):
    t, _ = receiver
    bad = packb([TAG[m.Publish], "ipc:///run/conn-0-1.sock#ch/1/1/1", [["x"]], [1]])
    with caplog.at_level(logging.WARNING, logger="actors.transport"):
        t._receive([b"a", bad, b"b"])
    assert "claimed sender ipc:///run/conn-0-1.sock#ch/1/1/1" in caplog.records[-1].getMessage()


def test_the_good_messages_of_a_well_framed_batch_still_arrive(receiver, caplog):
    t, inbox = receiver
    inbox.want = 2
    with caplog.at_level(logging.WARNING, logger="actors.transport"):
        t._receive([b"", packb([2, 2, 2]), b"a", SENT, b"\xff", SENT, b"a", SENT])
    assert len(inbox.got) == 2 and t.malformed == 1


def test_malformed_lines_are_rate_limited(receiver, caplog, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(transport_mod.time, "monotonic", lambda: now[0])
    t, _ = receiver
    with caplog.at_level(logging.WARNING, logger="actors.transport"):
        for _ in range(5000):
            t._receive([b"a", b"\xc1"])
        assert len(caplog.records) == transport_mod.MALFORMED_LOG_BURST
        now[0] += transport_mod.MALFORMED_LOG_PERIOD
        t._receive([b"a", b"\xc1"])
    assert t.malformed == 5001
    more = 5000 - transport_mod.MALFORMED_LOG_BURST
    assert caplog.records[-1].getMessage().endswith(f"({more} more not logged)")


def test_log_throttle():
    th = LogThrottle(burst=2, period=10)
    th.window = 0.0
    assert [th.allow() for _ in range(4)][:2] == [0, 0]
    th.window -= 10  # the next period
    assert th.allow() == 2


def test_a_send_to_an_address_that_is_no_endpoint_is_dropped_not_raised(caplog):
    t = Transport("ipc:///nonexistent/sender.sock")
    with caplog.at_level(logging.WARNING, logger="actors.transport"):
        t.send("garbage#x", m.Sent("a#b", 1))  # what a forged reply_to would make us do
        t.send("tcp://x:y#x", m.Sent("a#b", 1))
        t.send("ipc:///\udcff#x", m.Sent("a#b", 1))  # not UTF-8 (surrogate escapes)
    assert "message to 'garbage' dropped" in caplog.records[0].getMessage()
    assert len(caplog.records) == 3


@pytest.mark.parametrize("on_loop", [True, False], ids=["event-loop", "thread"])
def test_malformed_traffic_does_not_make_the_process_deaf(tmp_path, on_loop):
    """The issue's reproduction: one message with a non-UTF-8 actor name killed the receive
    thread. Each malformed kind, then a good message: it arrives."""
    t = Transport(f"ipc://{tmp_path}/r.sock")
    inbox = Inbox()
    t.register("a", inbox)
    t.start(EventLoop("test-deaf") if on_loop else None)
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    push.connect(t.endpoint)
    try:
        for _, parts, _ in MALFORMED:
            push.send_multipart(parts)
        push.send_multipart([b"a", SENT])
        assert inbox.done.wait(10), "the transport stopped reading"
        assert inbox.got == [m.Sent("ipc:///w.sock#ch/1", 1)] and t.malformed == len(MALFORMED)
    finally:
        push.close()
        t.close()


CRASHING_RECEIVER = textwrap.dedent("""
    import sys, zmq
    from actors.runtime import EventLoop
    from actors.transport import Transport

    def fallback(name, msg):  # a bug in what the receive loop calls
        raise RuntimeError("boom in " + name)

    t = Transport(sys.argv[1])
    t.set_fallback(fallback)
    t.start(EventLoop("loop") if sys.argv[2] == "loop" else None)
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes it: never, unless the process lives on
""")


@pytest.mark.parametrize("mode", ["loop", "thread"])
def test_an_exception_escaping_the_receive_loop_ends_the_process(tmp_path, mode):
    endpoint = f"ipc://{tmp_path}/crash.sock"
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_RECEIVER, endpoint, mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 1000)
        push.connect(endpoint)
        push.send_multipart([b"nobody", SENT])
        push.close()
        assert proc.wait(20) == EXIT_RECEIVE_FAILED
        err = proc.stderr.read()
        assert f"the receive loop of {endpoint} failed: exiting (status 70)" in err
        assert "RuntimeError: boom in nobody" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
