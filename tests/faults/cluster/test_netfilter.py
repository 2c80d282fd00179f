"""netfilter.py's partitions on loopback, without a broker: a process of "node A" (its gid)
talks to a listener on node B's address; cut(A, B) stops an established connection both ways
and refuses new ones, while a connection of the test's own (gid 0) to the same listener goes
on; heal() lets everything through again; close() removes the table."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from tests.faults.cluster import netfilter

pytestmark = pytest.mark.timeout(60)

CHILD = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5)
for line in sys.stdin:
    try:
        s.sendall(line.strip().encode())
        print("echo" if s.recv(16) else "eof", flush=True)
    except OSError as e:
        print(type(e).__name__, flush=True)
"""


def _echo_server(host: str):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, 0))
    srv.listen()

    def serve(c):
        with c:
            try:
                while data := c.recv(16):
                    c.sendall(data)
            except OSError:
                pass  # a peer whose link was cut resets its connection: that one ends

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    return srv


def _connects(host: str, port: int, gid: int) -> bool:
    res = subprocess.run([sys.executable, "-c",
                          f"import socket; socket.create_connection(('{host}', {port}), "
                          f"timeout=1.5)"], group=gid, capture_output=True, timeout=20)
    return res.returncode == 0


def test_cut_drops_a_nodes_links_both_ways_and_heal_restores_them():
    if why := netfilter.available():
        pytest.skip(f"partitions need nftables: {why}")
    base = 40000 + (os.getpid() % 5000) * 4
    ga, gb = base + 1, base + 2
    a_host, b_host = "127.0.0.21", "127.0.0.22"
    part = netfilter.Partitioner({"a": (ga, a_host), "b": (gb, b_host)})
    srv = _echo_server(b_host)
    port = srv.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", CHILD, b_host, str(port)], group=ga,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    mine = socket.create_connection((b_host, port), timeout=1.5)  # gid 0: the test's own

    def child_says() -> str:
        child.stdin.write("x\n")
        child.stdin.flush()
        return child.stdout.readline().strip()

    def mine_echoes() -> bool:
        mine.sendall(b"y")
        return mine.recv(16) == b"y"
    try:
        assert child_says() == "echo"
        assert _connects(b_host, port, ga)
        part.cut("a", "b")
        assert child_says() == "TimeoutError"      # the established link: nothing comes back
        assert not _connects(b_host, port, ga)     # a new one: no answer to its SYN
        assert mine_echoes()                       # the test's own connection goes on
        assert part.dropped() > 0
        part.heal()
        assert _connects(b_host, port, ga)
        assert child_says() == "echo"
    finally:
        child.kill()
        child.wait(10)
        mine.close()
        srv.shutdown(socket.SHUT_RDWR)  # (wakes the accept thread, which then ends)
        srv.close()
        part.close()
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert part.table not in tables
