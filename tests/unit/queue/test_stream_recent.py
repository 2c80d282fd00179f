"""actors/queue/stream_recent.py: what a stream's readers read lately, shared between them."""
from actors.queue.stream_log import Message
from actors.queue.stream_recent import RecentReads


def _msgs(first: int, n: int, size: int = 10) -> list:
    return [Message(o, "", "rk", b"\x00\x00", b"b" * size, None) for o in range(first, first + n)]


def _recent(max_bytes: int = 1000):
    heads = []

    def headed(props, offset):
        heads.append(offset)
        return props + offset.to_bytes(2, "big")

    return RecentReads(max_bytes, headed), heads


def test_a_message_read_once_is_headed_once_and_served_to_the_next_reader():
    recent, heads = _recent()
    first = recent.add(_msgs(0, 5))
    assert [x.offset for x, _ in first] == [0, 1, 2, 3, 4]
    assert first[3][1] == b"\x00\x00\x00\x03"
    again = recent.take(2, limit=100, max_msgs=10, max_bytes=1000)
    assert [x.offset for x, _ in again] == [2, 3, 4]
    recent.add(_msgs(3, 4))  # a read overlapping what is held heads only what is new
    assert heads == [0, 1, 2, 3, 4, 5, 6]


def test_take_stops_at_a_gap_the_limit_and_the_counts():
    recent, _ = _recent()
    recent.add(_msgs(0, 3))
    recent.add(_msgs(5, 3))
    assert [x.offset for x, _ in recent.take(0, 100, 10, 1000)] == [0, 1, 2]
    assert recent.take(3, 100, 10, 1000) == []
    assert [x.offset for x, _ in recent.take(5, 7, 10, 1000)] == [5, 6]  # committed below 7
    assert [x.offset for x, _ in recent.take(5, 100, 2, 1000)] == [5, 6]
    assert [x.offset for x, _ in recent.take(5, 100, 10, 15)] == [5, 6]  # 10 B each, >= 15


def test_forget_what_no_reader_will_read_and_what_is_past_the_bound():
    recent, _ = _recent(max_bytes=50)
    recent.add(_msgs(0, 4))
    recent.forget(low=2)
    assert list(recent.entries) == [2, 3] and recent.nbytes == 20
    recent.add(_msgs(4, 6))  # 80 bytes held, 50 allowed: the oldest go
    recent.forget(low=0)
    assert list(recent.entries) == [5, 6, 7, 8, 9] and recent.nbytes == 50
    recent.forget(low=None)  # no reader left
    assert len(recent) == 0 and recent.nbytes == 0
