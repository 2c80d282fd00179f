"""Local links: the loops of one node's processes send each other their multiparts over a Unix
stream socket instead of ZeroMQ's I/O threads; the receiver checks and delivers them as it
does what comes over ZeroMQ, in the order sent, and a sender whose link breaks goes on over
ZeroMQ."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest

from actors import local_link
from actors import messages as m
from actors.runtime import EventLoop
from actors.transport import Transport


class Inbox:
    def __init__(self, want: int):
        self.got = []
        self.want = want
        self.done = threading.Event()

    def tell(self, msg):
        self.got.append(msg)
        if len(self.got) >= self.want:
            self.done.set()


def _pair(tmp_path, want: int):
    far = Transport(f"ipc://{tmp_path}/far.sock")
    far.start(EventLoop("test-far"))
    inbox = Inbox(want)
    far.register("a", inbox)
    near = Transport(f"ipc://{tmp_path}/near.sock")
    near.start(EventLoop("test-near"))
    return near, far, inbox


def _on_loop(transport, fn):
    done = threading.Event()
    transport._loop.call(lambda: (fn(), done.set()))
    assert done.wait(5)


def test_frames_survive_any_split_of_the_stream():
    rng = random.Random(7)
    sent = [[b"", b"\x93\x01\x02", b"name", b"x" * rng.randrange(0, 3000)] for _ in range(50)]
    sent.append([b"a", b""])  # empty frames too
    stream = b"".join(local_link.encode(p) for p in sent)
    for _ in range(20):
        reader, got, at = local_link.FrameReader(), [], 0
        while at < len(stream):
            step = rng.randrange(1, 700)
            got += reader.feed(stream[at:at + step])
            at += step
        assert got == sent
        assert reader.buf == b""


@pytest.mark.parametrize("raw, why", [
    (struct.pack("<I", 0), "0 frames"),
    (struct.pack("<I", local_link.MAX_FRAMES + 1), "frames"),
    (struct.pack("<III", 2, 1 << 31, 1 << 30), "bytes"),
])
def test_bytes_that_are_not_a_multipart_are_refused(raw, why):
    with pytest.raises(local_link.Malformed, match=why):
        local_link.FrameReader().feed(raw)


def test_one_loop_sends_another_over_a_link_in_order(tmp_path):
    near, far, inbox = _pair(tmp_path, 200)
    address = far.address("a")

    def turn(first):  # several sends per turn: a batch on the link
        for n in range(first, first + 20):
            near.send(address, m.Sent("x#ch", n))

    for first in range(0, 200, 20):
        _on_loop(near, lambda first=first: turn(first))
    assert inbox.done.wait(5)
    assert [x.n for x in inbox.got] == list(range(200))
    link = near._links.by_endpoint[far.endpoint]
    assert link is not None and not link.broken  # they went by the link, not ZeroMQ


def test_a_message_larger_than_the_socket_buffer_waits_and_arrives_whole(tmp_path):
    near, far, inbox = _pair(tmp_path, 3)
    body = bytes(range(256)) * (40 * 1024)  # 10 MiB: written over many turns of the loop
    address = far.address("a")
    for n in range(3):
        _on_loop(near, lambda n=n: near.send(address, m.Publish(
            "x#ch", [[n, "", "k", b"", False, 0, -1]], [body])))
    assert inbox.done.wait(10)
    assert [x.items[0][0] for x in inbox.got] == [0, 1, 2]
    assert all(x.bodies == [body] for x in inbox.got)


def test_a_broken_link_gives_way_to_zeromq(tmp_path):
    near, far, inbox = _pair(tmp_path, 2)
    address = far.address("a")
    _on_loop(near, lambda: near.send(address, m.Sent("x#ch", 1)))
    assert _wait(lambda: inbox.got) and inbox.got[0].n == 1
    _on_loop(far, far._listener.close)  # the receiving end of every link goes away
    _on_loop(near, lambda: near.send(address, m.Sent("x#ch", 2)))
    assert inbox.done.wait(5)  # ZeroMQ, still bound at the same address, brought it
    assert [x.n for x in inbox.got] == [1, 2]
    found = near._links.by_endpoint[far.endpoint]
    assert found is None or found.broken  # and ZeroMQ from now on


def _wait(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_garbage_on_a_link_is_logged_and_the_link_closed(tmp_path, caplog):
    near, far, inbox = _pair(tmp_path, 1)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(local_link.link_path(far.endpoint))
    raw.sendall(struct.pack("<I", 0) + b"junk")
    assert _wait(lambda: far.malformed == 1)
    raw.settimeout(5)
    assert raw.recv(10) == b""  # closed by the receiver
    raw.close()
    # the others' links are not disturbed
    _on_loop(near, lambda: near.send(far.address("a"), m.Sent("x#ch", 9)))
    assert inbox.done.wait(5) and inbox.got[0].n == 9


def test_no_link_where_nothing_listens_or_the_path_is_too_long(tmp_path):
    loop = EventLoop("test-nolink")
    links = local_link.Links(loop)
    done = threading.Event()
    found = []
    loop.call(lambda: (found.append(links.link(f"ipc://{tmp_path}/nobody.sock")), done.set()))
    assert done.wait(5) and found == [None]
    assert local_link.link_path("ipc:///" + "x" * 110) is None
    assert local_link.link_path("tcp://127.0.0.1:5000") is None
