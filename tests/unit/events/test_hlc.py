"""The hybrid logical clock of the lifecycle events (actors/hlc.py) and the transport carrying
it (actors/transport.py): an event caused by another, through messages between processes whose
clocks disagree, always has the larger stamp."""

from __future__ import annotations

import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import events, hlc
from actors import messages as m
from actors.hlc import HybridClock
from actors.runtime import EventLoop
from actors.transport import Transport
from actors.wire import packb, unpackb


class Clock:
    """A settable monotonic clock; wall = mono + skew."""
    def __init__(self, skew=0):
        self.mono, self.skew = 1_000_000, skew

    def wall(self):
        return self.mono + self.skew


def make(skew=0):
    c = Clock(skew)
    return c, HybridClock(wall_ns=c.wall, mono_ns=lambda: c.mono)


@settings(max_examples=200, deadline=None)
@given(skews=st.lists(st.integers(-10**10, 10**10), min_size=2, max_size=4),
       steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 10**6)),
                      max_size=40))
def test_a_chain_of_messages_orders_events_whatever_the_skews(skews, steps):
    """Processes with clocks up to 10 s apart pass messages; before each send the sender logs an
    event, after each receive the receiver logs one: the receiver's is always later."""
    procs = [make(s) for s in skews]
    for a, b, advance in steps:
        a, b = a % len(procs), b % len(procs)
        for c, _ in procs:
            c.mono += advance
        (ca, ha), (cb, hb) = procs[a], procs[b]
        cause = ha.at(ca.mono)
        stamp = ha.send()
        assert stamp > cause
        hb.observe(stamp)
        assert hb.at(cb.mono) > cause


def test_events_follow_the_process_clock_when_nothing_ran_ahead():
    c, h = make(skew=5_000)
    assert h.at(c.mono) == c.mono + 5_000
    c.mono += 10
    assert h.at(c.mono) == c.mono + 5_000  # exact to the nanosecond: latencies stay true
    assert h.at(c.mono) == c.mono + 5_001  # the same instant twice: still in order


def test_a_clock_behind_is_pushed_forward_and_its_events_stay_in_order():
    c, h = make(skew=0)
    ahead = c.mono + 7_000_000_000
    h.observe(ahead)  # a message from a process 7 s ahead
    stamps = [h.at(c.mono + i) for i in range(3)]
    assert ahead < stamps[0] < stamps[1] < stamps[2]
    h.observe(5)  # an old stamp changes nothing
    assert h.at(c.mono) == stamps[2] + 1


def test_the_node_offset_is_shared_with_its_workers(monkeypatch):
    monkeypatch.delenv(hlc.OFFSET_ENV, raising=False)
    hlc.share_offset()
    import os
    assert int(os.environ[hlc.OFFSET_ENV]) == hlc.clock().offset
    assert hlc.HybridClock(offset=hlc._inherited_offset()).offset == hlc.clock().offset


def test_sends_are_stamped_and_receives_observe_while_events_are_on(tmp_path, monkeypatch):
    far = f"ipc://{tmp_path}/far.sock"
    raw = zmq.Context.instance().socket(zmq.PULL)
    raw.bind(far)
    monkeypatch.setattr(events, "_sample", 1)  # events on, as configure() turns them on
    sender = Transport(f"ipc://{tmp_path}/near.sock")
    sender.start(EventLoop("test-hlc"))
    before = hlc.clock().last
    sender._loop.call(lambda: sender.send(far + "#a", m.Sent("x#ch", 7)))
    assert raw.poll(5000)
    parts = raw.recv_multipart()
    assert parts[0] == b"\0"  # a stamped batch, even of one message
    stamp, counts = unpackb(parts[1])
    assert counts == [2] and stamp > before
    receiver = Transport(f"ipc://{tmp_path}/unused.sock")
    got = []
    receiver.register("a", type("Inbox", (), {"tell": lambda self, msg: got.append(msg)})())
    ahead = [parts[0], packb([stamp + 10**12, counts]), *parts[2:]]  # from 1000 s ahead
    receiver._receive(ahead)
    assert got == [m.Sent("x#ch", 7)]
    assert hlc.clock().at(0) > stamp + 10**12
    raw.close(0)


def test_a_reply_read_outside_a_transport_is_unframed_in_every_form():
    """leveretctl reads the metadata actor's reply on a socket of its own: a stamped batch of
    one while the node's events are on (it failed with 'unknown tag' on the stamp)."""
    from actors.transport import unframe
    reply = m.RpcReply(1, True, {"x": 1})
    payload, frames = m.encode(reply)
    assert unframe([b"ctl", payload]) == [("ctl", reply)]
    assert unframe([b"", packb([2]), b"ctl", payload]) == [("ctl", reply)]
    assert unframe([b"\0", packb([5, [2]]), b"ctl", payload]) == [("ctl", reply)]
    import pytest
    with pytest.raises(m.Malformed):
        unframe([b"\0", packb([5, [3]]), b"ctl", payload])
