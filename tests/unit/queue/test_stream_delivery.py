"""actors/queue/stream_delivery.py: a stream message's delivery encoded from a template gives
the bytes of the full encoding (its x-stream-offset header set, its fields packed)."""
from hypothesis import given
from hypothesis import strategies as st

from actors import messages as m
from actors.queue import stream_delivery
from actors.queue.stream_delivery import DeliveryEncoder, full
from actors.store.stream_log import Message
from protocol.properties import BasicProperties

PROPS = [b"", b"\x00\x00",
         BasicProperties(delivery_mode=2).encode(),
         BasicProperties(headers={"a": 1, "x-stream-offset": 7}, delivery_mode=2).encode(),
         # properties after the headers whose bytes may look like a long
         BasicProperties(headers={"k": "v"}, delivery_mode=2, priority=0, timestamp=0,
                         correlation_id="\x00" * 8).encode(),
         BasicProperties(headers={}, expiration="12345678", app_id="\x00" * 9).encode()]


def _message(offset, props, msg_id=None, rk="rk"):
    return Message(offset, "ex", rk, props, b"body", msg_id)


@given(st.lists(st.tuples(st.integers(0, 1 << 62), st.sampled_from(PROPS),
                          st.none() | st.binary(min_size=16, max_size=16),
                          st.sampled_from(["rk", "", "k\udcff"])), max_size=60))
def test_every_encoding_is_the_full_one(rows):
    enc = DeliveryEncoder()
    for offset, props, msg_id, rk in rows:
        x = _message(offset, props, msg_id, rk)
        assert enc(x) == full(x)


def test_a_template_is_used_once_checked_on_another_offset():
    enc = DeliveryEncoder()
    props = BasicProperties(headers={"a": 1}, delivery_mode=2).encode()
    for offset in (0, 0, 1, 2, 300, 1 << 40):
        x = _message(offset, props, b"i" * 16)
        assert enc(x) == full(x)
    (t,) = enc.templates.values()
    assert t[2] is None  # checked: later messages are spliced into it
    back = m.decode(*m.encode(m.Deliver("a#q", "s", _packed(enc(_message(9, props))),
                                         [b"body"])))
    d = back.items[0]
    assert d.seq_id == 9 and BasicProperties.decode(d.props_raw).headers == \
        {"a": 1, "x-stream-offset": 9}


def test_properties_unique_to_each_message_are_encoded_in_full_and_bounded(monkeypatch):
    monkeypatch.setattr(stream_delivery, "TEMPLATES_MAX", 8)
    enc = DeliveryEncoder()
    for offset in range(50):
        props = BasicProperties(message_id=f"id-{offset}").encode()
        x = _message(offset, props)
        assert enc(x) == full(x)
    assert len(enc.templates) <= 8


def _packed(tail):
    p = m.PackedDeliveries()
    p.add("c", [tail])
    return p


def test_a_template_that_found_a_long_in_the_wrong_place_is_dropped():
    enc = DeliveryEncoder()
    props = PROPS[4]  # a correlation id of eight zero bytes after the headers
    for offset in (0, 1, 2):
        x = _message(offset, props)
        assert enc(x) == full(x)
    assert list(enc.templates.values()) == [stream_delivery._NONE]
