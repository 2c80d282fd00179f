"""The wire encoding of actors/messages.py: every message round-trips; bodies travel joined in
one frame and come back as the same list of bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors import messages as m


@given(st.lists(st.binary(max_size=3000), max_size=40))
def test_publish_round_trips_with_any_bodies(bodies):
    msg = m.Publish("ipc:///x#ch/1/1/1", [m.PublishItem(i, "ex", "rk", b"", False, 0, -1)
                                          for i in range(len(bodies))], bodies)
    payload, frames = m.encode(msg)
    assert len(frames) == (1 if bodies else 0)
    back = m.decode(payload, list(frames))
    assert back == msg and all(type(b) is bytes for b in back.bodies)


def test_messages_without_bodies_round_trip():
    for msg in (m.Rpc("a#b", 7, "queue.declare", {"name": "q", "passive": False}),
                m.RpcReply(7, True, {"queue_at": "ipc:///w#q\x1f/\x1fq"}),
                m.Confirm("a#q", [1, 2, 3], True), m.Sent("a#ch", 5)):
        payload, frames = m.encode(msg)
        assert frames == () and m.decode(payload, []) == msg


def test_a_bodies_frame_that_does_not_match_its_lengths_is_refused():
    payload, frames = m.encode(m.Deliver("a#q", "q", [[1], [2]], [b"ab", b"cd"]))
    with pytest.raises(ValueError):
        m.decode(payload, [frames[0] + b"x"])


def test_local_only_messages_cannot_be_encoded():
    with pytest.raises(KeyError):
        m.encode(m.Data(b"x"))
