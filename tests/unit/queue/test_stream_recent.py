"""actors/queue/stream_recent.py: what a stream's readers read lately, encoded once and shared
between them."""
from actors.store.stream_log import Message
from actors.queue.stream_recent import COMPACT_AT, RecentReads


def _msgs(first: int, n: int, size: int = 10) -> list:
    return [Message(o, "", "rk", b"\x00\x00", b"b" * size, None) for o in range(first, first + n)]


def _recent(max_bytes: int = 1000):
    encoded = []

    def encode(x):
        encoded.append(x.offset)
        return b"d" + x.offset.to_bytes(2, "big")

    return RecentReads(max_bytes, encode), encoded


def _offsets(taken) -> list:
    return [int.from_bytes(t[1:], "big") for t in taken[0]]


def test_a_message_read_once_is_encoded_once_and_served_to_the_next_reader():
    recent, encoded = _recent()
    recent.add(_msgs(0, 5))
    tails, bodies = recent.take(2, limit=100, max_msgs=10, max_bytes=1000)
    assert tails == [b"d\x00\x02", b"d\x00\x03", b"d\x00\x04"] and bodies == [b"b" * 10] * 3
    recent.add(_msgs(3, 4))  # a read overlapping what is held encodes only what is new
    assert encoded == [0, 1, 2, 3, 4, 5, 6]
    assert _offsets(recent.take(0, 100, 10, 1000)) == list(range(7)) and len(recent) == 7


def test_take_stops_at_a_gap_the_limit_and_the_counts():
    recent, _ = _recent()
    recent.add(_msgs(0, 3))
    recent.add(_msgs(5, 3))
    assert _offsets(recent.take(0, 100, 10, 1000)) == [0, 1, 2]
    assert recent.take(3, 100, 10, 1000) == ([], [])
    assert _offsets(recent.take(5, 7, 10, 1000)) == [5, 6]  # committed below 7
    assert recent.take(5, 5, 10, 1000) == ([], [])  # nothing committed from 5 on
    assert _offsets(recent.take(5, 100, 2, 1000)) == [5, 6]
    assert _offsets(recent.take(5, 100, 10, 15)) == [5, 6]  # 10 B each, >= 15
    assert _offsets(recent.take(6, 100, 10, 10)) == [6]  # at least one
    recent.add(_msgs(3, 2))  # the gap filled: the run before it grows, the next is held still
    assert _offsets(recent.take(0, 100, 10, 1000)) == [0, 1, 2, 3, 4]
    assert _offsets(recent.take(4, 100, 10, 1000)) == [4]
    assert _offsets(recent.take(5, 100, 10, 1000)) == [5, 6, 7]


def test_a_reader_far_behind_has_a_run_of_its_own():
    recent, encoded = _recent(max_bytes=10_000)
    recent.add(_msgs(1000, 5))  # the readers at the head
    recent.add(_msgs(0, 5))  # one from `first`
    recent.add(_msgs(1005, 2))
    recent.add(_msgs(5, 2))
    assert _offsets(recent.take(1003, 2000, 10, 10_000)) == [1003, 1004, 1005, 1006]
    assert _offsets(recent.take(2, 2000, 10, 10_000)) == [2, 3, 4, 5, 6]
    assert len(encoded) == 14


def test_forget_what_no_reader_will_read_and_what_is_past_the_bound():
    recent, _ = _recent(max_bytes=50)
    recent.add(_msgs(0, 4))
    recent.forget(low=2)
    assert _offsets(recent.take(0, 100, 10, 1000)) == [] and recent.nbytes == 20
    assert _offsets(recent.take(2, 100, 10, 1000)) == [2, 3]
    recent.add(_msgs(4, 6))  # 80 bytes held, 50 allowed: the oldest go
    recent.forget(low=0)
    assert _offsets(recent.take(5, 100, 10, 1000)) == [5, 6, 7, 8, 9] and recent.nbytes == 50
    assert recent.take(4, 100, 10, 1000) == ([], [])
    recent.add(_msgs(100, 2))  # past the bound with two runs: the older run goes first
    recent.forget(low=0)
    assert recent.nbytes == 20 and _offsets(recent.take(100, 200, 10, 1000)) == [100, 101]
    recent.forget(low=None)  # no reader left
    assert len(recent) == 0 and recent.nbytes == 0 and not recent


def test_a_long_run_drops_its_front_in_bulk_and_keeps_serving():
    recent, _ = _recent(max_bytes=1 << 30)
    n = COMPACT_AT * 2 + 10
    recent.add(_msgs(0, n, size=1))
    for low in range(0, n - 5, 100):
        recent.forget(low)
        assert _offsets(recent.take(low, n, 3, 1000)) == [low, low + 1, low + 2]
        assert recent.nbytes == n - low
    assert len(recent.runs[0].tails) < n  # cut, not only skipped


def test_a_run_that_reaches_the_logs_end_takes_the_next_chunk_as_written():
    recent, encoded = _recent()
    assert not recent.ends_at(0)  # no reader read anything: a chunk is not held for none
    recent.add(_msgs(0, 3))
    assert recent.ends_at(3) and not recent.ends_at(2) and not recent.ends_at(4)
    recent.add(_msgs(3, 2))  # the StreamQueue's chunk just written, not read back
    assert recent.ends_at(5) and _offsets(recent.take(0, 100, 10, 1000)) == [0, 1, 2, 3, 4]
    assert encoded == [0, 1, 2, 3, 4]


def test_what_is_dropped_is_released_at_once():
    recent, _ = _recent(max_bytes=1 << 30)
    recent.add(_msgs(0, 10, size=5))
    recent.forget(low=6)
    run = recent.runs[0]
    assert run.bodies[:6] == [None] * 6 and run.tails[:6] == [None] * 6
    assert recent.nbytes == 20 and _offsets(recent.take(6, 100, 10, 1000)) == [6, 7, 8, 9]
