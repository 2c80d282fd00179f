"""Where connections go: the node's acceptor deals accepted sockets round robin to the
connection workers (actors/connection/handoff.py), and it survives running out of descriptors.
Behaviour: a client's connection always opens while the node has room (B1: connection
handshake)."""

from __future__ import annotations

import os
import socket
import time

import pika

from conftest import Broker


def socket_inode(server_port: int, client_port: int) -> int:
    """The inode of the server side of the TCP connection 127.0.0.1:client_port ->
    127.0.0.1:server_port (from /proc/net/tcp)."""
    want_local, want_remote = f"{server_port:04X}", f"{client_port:04X}"
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[1].endswith(":" + want_local) and cols[2].endswith(":" + want_remote):
                return int(cols[9])
    raise AssertionError(f"no server socket for client port {client_port}")


def owner_of(inode: int, pids: dict[int, int]) -> int:
    """The index of the worker process holding the socket."""
    target = f"socket:[{inode}]"
    for index, pid in pids.items():
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return index
            except OSError:
                continue
    raise AssertionError(f"no worker holds {target}")


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def test_connections_are_dealt_round_robin_to_the_connection_workers__B1(tmp_path):
    broker = Broker.start_leveret(tmp_path, "--conn-workers", "2")
    conns = []
    try:
        pids = broker.worker_pids("conn")
        assert sorted(pids) == [0, 1]
        owners = []
        for _ in range(6):
            c = broker.connection()
            conns.append(c)
            client_port = c._impl._transport._sock.getsockname()[1]
            owners.append(owner_of(socket_inode(broker.port, client_port), pids))
        # one after the other: never twice in a row on the same worker
        assert all(a != b for a, b in zip(owners, owners[1:])), owners
        assert owners.count(0) == owners.count(1) == 3, owners
        for c in conns:  # and they work
            ch = c.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", q, b"x")
            assert ch.basic_get(q, auto_ack=True)[2] == b"x"
    finally:
        for c in conns:
            c.close()
        broker.stop()


def test_acceptor_survives_running_out_of_descriptors_and_threads_do_not_grow__B1(tmp_path):
    limit = 200
    broker = Broker.start_leveret(tmp_path, "--conn-workers", "1", "--queue-workers", "1",
                                  nofile=limit)
    idle = []
    try:
        worker = broker.worker_pids("conn")[0]
        threads_before = threads_of(worker)
        # more idle clients than the worker may hold: some are refused or closed, none hangs
        # the listener for good
        for _ in range(limit + 100):
            s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            idle.append(s)
        time.sleep(1.0)
        assert threads_of(worker) <= threads_before + 2, "threads grew with connections"
        for s in idle:
            s.close()
        idle.clear()
        # once they are gone a new client gets in, promptly
        deadline = time.monotonic() + 20
        while True:
            try:
                c = broker.connection(socket_timeout=2, stack_timeout=3)
                break
            except pika.exceptions.AMQPConnectionError:
                assert time.monotonic() < deadline, broker.log_tail()
                time.sleep(0.2)
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"after")
        assert ch.basic_get(q, auto_ack=True)[2] == b"after"
        c.close()
        t0 = time.monotonic()
        broker.connection().close()
        assert time.monotonic() - t0 < 5
        assert broker.proc.poll() is None
        assert "Too many open files" in (tmp_path / "leveret-server.log").read_text()
    finally:
        for s in idle:
            s.close()
        broker.stop()
