"""The wire encoding of actors/messages.py: every message round-trips; bodies travel joined in
one frame and come back as the same list of bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors import messages as m
from actors.wire import packb


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


def test_batch_items_come_back_as_their_named_records():
    """A receiver reads a batch's items by name: decode hands back the sender's records, not
    msgpack's lists, and fills the defaults of fields an older sender left out."""
    sent = [m.Publish("a#ch", [m.PublishItem(3, "ex", "rk", b"\x00\x00", True, 2, 500, b"i" * 16)],
                      [b"x"]),
            m.Deliver("a#q", "q", [m.Delivery("c", 7, True, "ex", "rk", b"", "a#ch", 3, None)],
                      [b"x"]),
            m.GetReply(1, "a#q", m.Delivery("", 8, False, "ex", "rk", b""), 0, [b"x"]),
            m.MirrorPublish("a#q", 1, False,
                            [m.MirrorItem(9, "ex", "rk", b"", False, 0, 0, None)], [b"x"]),
            m.StreamChunks("a#q", 2, -1, [m.ChunkHead(5, 1, 1700000000000, 2, None)],
                           [m.StreamItem("ex", "rk", b"", b"i" * 16)], [b"x"])]
    for msg in sent:
        payload, frames = m.encode(msg)
        back = m.decode(payload, list(frames))
        items = [back.item] if isinstance(back, m.GetReply) else back.items
        expected = [msg.item] if isinstance(msg, m.GetReply) else msg.items
        assert [type(x) for x in items] == [type(x) for x in expected] and items == expected
    publish = m.decode(packb([m._TAG[m.Publish], "a#ch", [[3, "ex", "rk", b"", False, 0, -1]],
                              [1]]), [b"x"])
    assert publish.items == [m.PublishItem(3, "ex", "rk", b"", False, 0, -1, None)]
    deliver = m.decode(packb([m._TAG[m.Deliver], "a#q", "q", [["c", 7, False, "", "rk", b""]],
                              [1]]), [b"x"])
    assert deliver.items[0].seq_no == 0 and deliver.items[0].publisher == ""
    chunks = m.decode(packb([m._TAG[m.StreamChunks], "a#q", 2, -1, [[5, 2, 0, 2, None]],
                             [["ex", "rk", b"", None], ["ex", "rk2", b"", None]], [1, 1]]),
                      [b"xy"])
    # (a chunk head comes back as msgpack's list, which the member reads by unpacking)
    assert [it.routing_key for it in chunks.items] == ["rk", "rk2"]


@given(st.lists(st.tuples(st.sampled_from(["c1", "ctag-2", "a-longer-consumer-tag-\udcff"]),
                          st.integers(0, 1 << 40), st.text(max_size=5),
                          st.binary(max_size=40), st.none() | st.binary(min_size=16,
                                                                        max_size=16),
                          st.binary(max_size=300)), max_size=40))
def test_packed_deliveries_encode_as_the_deliveries_they_stand_for(rows):
    """A stream's fan-out encodes a message's delivery once (delivery_tail) and splices it
    behind each consumer's tag: the bytes are those of the Delivery records, which the
    receiver decodes and checks as from any Deliver."""
    records = [m.Delivery(ctag, seq, False, "ex", rk, props, "", 0, mid)
               for ctag, seq, rk, props, mid, _ in rows]
    bodies = [body for *_, body in rows]
    packed = m.PackedDeliveries()
    run = 0
    while run < len(records):  # runs of one, two, three... deliveries to one consumer each
        end = min(len(records), 2 * run + 1)
        for d in records[run:end]:
            packed.add(d.consumer_tag, [m.delivery_tail(*d[1:])])
        run = end
    assert len(packed) == len(records) and list(packed) == records
    plain = m.encode(m.Deliver("a#q", "q", records, bodies))
    spliced = m.encode(m.Deliver("a#q", "q", packed, bodies))
    assert spliced[0] == plain[0] and list(spliced[1]) == list(plain[1])
    back = m.decode(spliced[0], list(spliced[1]))
    assert back.items == records and all(type(d) is m.Delivery for d in back.items)
    assert back.bodies == bodies


def test_packed_deliveries_share_a_tail_between_consumers():
    tail = m.delivery_tail(7, False, "", "s", b"\x00\x00", msg_id=b"i" * 16)
    packed = m.PackedDeliveries()
    packed.add("a", [tail, tail])
    packed.add("b", [tail])
    back = m.decode(*m.encode(m.Deliver("a#q", "s", packed, [b"x", b"x", b"x"])))
    assert [(d.consumer_tag, d.seq_id, d.msg_id) for d in back.items] == \
        [("a", 7, b"i" * 16), ("a", 7, b"i" * 16), ("b", 7, b"i" * 16)]
