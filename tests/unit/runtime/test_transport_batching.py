"""The transport batches, per destination process, what the actors of one event-loop turn send:
one ZeroMQ multipart per destination per turn, delivered in the order sent."""

from __future__ import annotations

import threading

import zmq

from actors import messages as m
from actors.runtime import EventLoop
from actors.transport import Transport


class Inbox:
    def __init__(self):
        self.got = []
        self.done = threading.Event()

    def tell(self, msg):
        self.got.append(msg)
        if len(self.got) >= 3:
            self.done.set()


def test_sends_of_one_turn_go_as_one_multipart_and_arrive_in_order(tmp_path):
    far = f"ipc://{tmp_path}/far.sock"
    raw = zmq.Context.instance().socket(zmq.PULL)  # sees the wire as it is
    raw.bind(far)
    sender = Transport(f"ipc://{tmp_path}/near.sock")
    sender.start(EventLoop("test-batching"))

    def one_turn():  # three sends by actors of one turn
        sender.send(far + "#a", m.Sent("x#ch", 1))
        sender.send(far + "#b", m.Publish("x#ch", [[1, "", "k", b"", False, 0, -1]], [b"body"]))
        sender.send(far + "#a", m.Sent("x#ch", 2))

    sender._loop.call(one_turn)
    assert raw.poll(5000)
    parts = raw.recv_multipart()
    assert parts[0] == b""  # a batch
    assert not raw.poll(200)  # and only one multipart
    # the same bytes, read by a transport, are the three messages in order
    receiver = Transport(f"ipc://{tmp_path}/unused.sock")
    inbox = Inbox()
    receiver.register("a", inbox)
    receiver.register("b", inbox)
    receiver._receive(parts)
    assert [type(x).__name__ for x in inbox.got] == ["Sent", "Publish", "Sent"]
    assert inbox.got[0].n == 1 and inbox.got[2].n == 2 and inbox.got[1].bodies == [b"body"]
    raw.close(0)


def test_a_lone_send_is_not_wrapped(tmp_path):
    far = f"ipc://{tmp_path}/far.sock"
    raw = zmq.Context.instance().socket(zmq.PULL)
    raw.bind(far)
    sender = Transport(f"ipc://{tmp_path}/near.sock")
    sender.start(EventLoop("test-lone"))
    sender._loop.call(lambda: sender.send(far + "#a", m.Sent("x#ch", 7)))
    assert raw.poll(5000)
    parts = raw.recv_multipart()
    assert parts[0] == b"a" and m.decode(parts[1], parts[2:]) == m.Sent("x#ch", 7)
    raw.close(0)


def test_an_endpoint_that_cannot_be_bound_fails_the_start_instead_of_hanging(tmp_path):
    """A cluster worker's tcp:// port can be taken between the node picking it and the worker
    binding it: the worker must exit (and be restarted on a new port), not wait forever."""
    import pytest
    import socket as socketlib
    taken = socketlib.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    endpoint = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
    from actors.secure import Curve
    curve = Curve(b"s" * 32)  # (without the cluster's keys tcp:// is refused before binding)
    with pytest.raises(zmq.ZMQError, match="[Aa]ddress"):
        Transport(endpoint, curve).start(EventLoop("test-taken"))
    with pytest.raises(zmq.ZMQError, match="[Aa]ddress"):
        Transport(endpoint, curve).start()
    with pytest.raises(zmq.ZMQError, match="cluster secret"):
        Transport(endpoint).start()
    taken.close()
