"""The Writer gives delivery credit back to queues in bumps: at once past CREDIT_BATCH
deliveries or CREDIT_BYTES written, else CREDIT_DELAY later, and only once the socket took the
bytes (a client that does not read holds its queues' credit)."""

from __future__ import annotations

import threading
import time

import pytest

from actors import messages as m
from actors.connection import writer as writer_mod
from actors.connection.writer import Writer
from actors.runtime import EventLoop


class FakeConn:
    """The socket side a Writer uses: write (takes all, or nothing while `full`), io."""

    def __init__(self, io):
        self.io = io
        self.reader = None
        self.full = False
        self.written = []

    def write(self, data):
        self.written.append(data)
        return not self.full


class Queues:
    """The transport: records each Sent with when it was sent."""

    def __init__(self):
        self.sent = []
        self.lock = threading.Lock()

    def send(self, address, msg):
        with self.lock:
            self.sent.append((time.monotonic(), address, msg.channel, msg.n))

    def total(self):
        with self.lock:
            return sum(n for _, _, _, n in self.sent)


@pytest.fixture
def writer():
    io = EventLoop("test-writer")
    conn, queues = FakeConn(io), Queues()
    ref = Writer.start(conn, queues)
    yield ref, conn, queues
    ref.stop()
    io.stop()


def _deliver(ref, n=1, size=100):
    ref.tell(m.Write(b"x" * size, [(("q1", "ch1"), n)]))


def _wait(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True


def test_a_lone_deliverys_credit_goes_back_after_the_delay_as_one_bump(writer, monkeypatch):
    monkeypatch.setattr(writer_mod, "CREDIT_DELAY", 0.3)  # the three writes land within it
    ref, conn, queues = writer
    began = time.monotonic()
    for _ in range(3):
        _deliver(ref)
    assert _wait(lambda: queues.total() == 3)
    assert len(queues.sent) == 1  # one Sent for the three
    at, address, channel, n = queues.sent[0]
    assert (address, channel, n) == ("q1", "ch1", 3)
    assert at - began >= writer_mod.CREDIT_DELAY * 0.9


def test_a_full_batch_goes_back_at_once(writer, monkeypatch):
    monkeypatch.setattr(writer_mod, "CREDIT_DELAY", 30.0)  # the timer would be far too late
    ref, conn, queues = writer
    _deliver(ref, writer_mod.CREDIT_BATCH)
    assert _wait(lambda: queues.total() == writer_mod.CREDIT_BATCH, timeout=5)


def test_enough_bytes_go_back_at_once(writer, monkeypatch):
    monkeypatch.setattr(writer_mod, "CREDIT_DELAY", 30.0)
    ref, conn, queues = writer
    _deliver(ref, 1, size=writer_mod.CREDIT_BYTES)
    assert _wait(lambda: queues.total() == 1, timeout=5)


def test_credit_waits_for_a_socket_that_does_not_drain(writer):
    ref, conn, queues = writer
    conn.full = True
    _deliver(ref, 5)
    time.sleep(writer_mod.CREDIT_DELAY * 20)
    assert queues.total() == 0  # held: the client is not reading
    ref.tell(m.Drained())
    assert _wait(lambda: queues.total() == 5)
