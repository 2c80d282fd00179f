"""The v3 chunk codec (spark_analysis/chunk.py) alone: the writer's flat buffer in, the same
records out, whatever the columns hold."""

from __future__ import annotations

import msgpack
import pytest

from spark_analysis import chunk

MID = bytes(range(16))


def _flat(records):
    return [x for rec in records for x in rec]


def _round_trip(records):
    data = msgpack.packb(chunk.encode(_flat(records)))
    return [list(r) for r in chunk.records(msgpack.unpackb(data, raw=False))]


def test_records_come_back_as_written():
    records = [[4, MID, 10 ** 14, 1, 1_795_000_000_000_000_000, ["/", "q", 7, False]],
               [28, None, 10 ** 14 + 5, 2, 1_795_000_000_000_000_001, [0]],
               [13, MID, -3, 3, 0, ["/", "q", "c", 1, "t", 2 ** 63 - 1, False, True, None]]]
    got = _round_trip(records)
    assert got == records
    c = chunk.encode(_flat(records))
    assert c[0] == 3 and c[1] == bytes([4, 28, 13])
    assert [type(c[k]) for k in (3, 4, 5)] == [bytes, bytes, bytes]  # int64 columns


def test_columns_that_do_not_fit_int64_or_a_byte_stay_lists():
    records = [[300, MID, 1, 2 ** 63, None, []], [1, None, 2, 5, 9, [None]]]
    assert _round_trip(records) == records
    c = chunk.encode(_flat(records))
    assert c[1] == [300, 1] and c[4] == [2 ** 63, 5] and c[5] == [None, 9]


@pytest.mark.parametrize("bad", [
    [1, b"\x04", [MID]],  # columns missing
    ["x", b"\x04", [MID], b"", b"", b"", [[]]],  # n is not a number
    [2, b"\x04", [MID], b"\x00" * 8, b"\x00" * 8, b"\x00" * 8, [[]]],  # n too large
    [1, b"\x04", [MID], b"\x00" * 4, b"\x00" * 8, b"\x00" * 8, [[]]],  # a short int column
    [4, MID, 1, 2, 3, []],  # a v2 record
])
def test_what_is_not_a_whole_chunk_raises(bad):
    with pytest.raises(ValueError):
        list(chunk.records(bad))
