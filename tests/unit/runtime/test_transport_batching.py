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
    """A tcp:// port that is taken (a fixed one; cluster workers bind `:*` since the node's
    pick-then-close race): the process must exit (and be restarted), not wait forever."""
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


def test_a_wildcard_port_is_the_bound_one_in_every_address():
    """A cluster worker binds `tcp://host:*` (node.py `_endpoint`): the kernel's port, never one
    picked beforehand that another process could take. The endpoint and the addresses the
    transport hands out are the bound port's, and messages sent to them arrive."""
    from actors.secure import Curve
    curve = Curve(b"s" * 32)
    receiver = Transport("tcp://127.0.0.1:*", curve)
    receiver.start(EventLoop("test-wildcard"))
    port = receiver.endpoint.rpartition(":")[2]
    assert receiver.endpoint.startswith("tcp://127.0.0.1:") and port.isdigit() and int(port) > 0
    inbox = Inbox()
    address = receiver.register("a", inbox)
    assert address.startswith(receiver.endpoint + "#")
    sender = Transport("tcp://127.0.0.1:*", curve)
    sender.start(EventLoop("test-wildcard-sender"))
    assert sender.endpoint != receiver.endpoint
    for n in (1, 2, 3):
        sender._loop.call(lambda n=n: sender.send(address, m.Sent("x#ch", n)))
    assert inbox.done.wait(10)
    assert [x.n for x in inbox.got] == [1, 2, 3]
    sender.close()
    receiver.close()
