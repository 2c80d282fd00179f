"""The acceptor's hand-over (actors/connection/handoff.py) counts connections node-wide for
max_connections (R3): each hand-over says what the socket speaks and whether the node is over
its limit; the worker says when it has closed handed sockets; a dead worker's connections stop
counting. Real sockets and event loops, no broker."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from actors.connection import handoff
from actors.runtime.eventloop import EventLoop


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


class Worker:
    """A Receiver on a loop of its own, keeping what it is handed."""

    def __init__(self, fd: int):
        self.io = EventLoop("test-worker")
        self.got: list = []  # (sock, peer, tls, over_limit)
        self.lock = threading.Lock()
        self.receiver = handoff.Receiver(self.io, fd, self._accept)

    def _accept(self, sock, peer, tls, over):
        with self.lock:
            self.got.append((sock, peer, tls, over))

    def close_one(self):
        with self.lock:
            sock = self.got.pop(0)[0]
        sock.close()
        self.io.call(self.receiver.ended)

    def stop(self):
        for entry in self.got:
            entry[0].close()
        self.io.stop()


@pytest.fixture
def rig():
    node_io = EventLoop("test-node")
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    clients, workers = [], []

    def connect():
        c = socket.create_connection(lsock.getsockname())
        clients.append(c)
        s, peer = lsock.accept()
        return s, peer

    def worker(dealer, index):
        node_end, worker_end = handoff.pair()
        w = Worker(worker_end.detach())
        workers.append(w)
        dealer.set(index, node_end)
        return w

    yield node_io, connect, worker
    for w in workers:
        w.stop()
    for c in clients:
        c.close()
    lsock.close()
    node_io.stop()


def deal(node_io, dealer, connect, tls=False):
    s, peer = connect()
    done = threading.Event()
    node_io.call(lambda: (dealer.deal(s, peer, tls), done.set()))
    assert done.wait(5)


def test_hand_overs_say_tls_and_over_limit__R3(rig):
    node_io, connect, worker = rig
    dealer = handoff.Dealer(limit=2)
    dealer.start(node_io)
    w = worker(dealer, 0)
    deal(node_io, dealer, connect)
    deal(node_io, dealer, connect, tls=True)
    deal(node_io, dealer, connect)  # the third: over a limit of 2
    wait_for(lambda: len(w.got) == 3)
    assert [(g[2], g[3]) for g in w.got] == [(False, False), (True, False), (False, True)]
    assert dealer.open_connections() == 3


def test_closed_connections_stop_counting__R3(rig):
    node_io, connect, worker = rig
    dealer = handoff.Dealer(limit=1)
    dealer.start(node_io)
    w = worker(dealer, 0)
    deal(node_io, dealer, connect)
    wait_for(lambda: len(w.got) == 1)
    w.close_one()
    wait_for(lambda: dealer.open_connections() == 0)
    deal(node_io, dealer, connect)
    wait_for(lambda: len(w.got) == 1)
    assert w.got[0][3] is False  # room again


def test_the_count_is_node_wide_across_workers__R3(rig):
    node_io, connect, worker = rig
    dealer = handoff.Dealer(limit=2)
    dealer.start(node_io)
    a, b = worker(dealer, 0), worker(dealer, 1)
    for _ in range(3):
        deal(node_io, dealer, connect)
    wait_for(lambda: len(a.got) + len(b.got) == 3)
    assert len(a.got) == 2 and len(b.got) == 1  # round robin
    assert sorted(g[3] for g in a.got + b.got) == [False, False, True]


def test_a_dead_workers_connections_stop_counting(rig):
    node_io, connect, worker = rig
    dealer = handoff.Dealer(limit=1)
    dealer.start(node_io)
    worker(dealer, 0)
    deal(node_io, dealer, connect)
    assert dealer.open_connections() == 1
    w = worker(dealer, 0)  # slot 0 restarted: its old connections died with it
    assert dealer.open_connections() == 0
    deal(node_io, dealer, connect)
    wait_for(lambda: len(w.got) == 1)
    assert w.got[0][3] is False


def test_no_limit_never_says_over(rig):
    node_io, connect, worker = rig
    dealer = handoff.Dealer(limit=None)
    dealer.start(node_io)
    w = worker(dealer, 0)
    for _ in range(5):
        deal(node_io, dealer, connect)
    wait_for(lambda: len(w.got) == 5)
    assert not any(g[3] for g in w.got)
