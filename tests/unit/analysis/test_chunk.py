"""The v3 chunk codec (spark_analysis/chunk.py) alone: the writer's flat buffers in, the same
records out, whatever the columns hold."""

from __future__ import annotations

import msgpack
import pytest

from spark_analysis import chunk

MID = bytes(range(16))


def _decode(c):
    """Records as lists (values too), through msgpack as the file holds them."""
    return [[*r[:5], list(r[5])] for r in
            chunk.records(msgpack.unpackb(msgpack.packb(c), raw=False))]


def _rows(records):
    return _decode(chunk.encode_rows([x for rec in records for x in rec]))


def _kind(code, records, ints):
    """(the kind chunk of [msg_id, mono, seq, hlc, values] records, its records decoded)."""
    flat = [x for mid, mono, seq, hlc, values in records for x in (mid, mono, seq, hlc, *values)]
    c = chunk.encode_kind(code, flat, ints)
    return c, _decode(c)


def test_rows_come_back_as_written():
    records = [[4, MID, 10 ** 14, 1, 1_795_000_000_000_000_000, ["/", "q", 7, False]],
               [28, None, 10 ** 14 + 5, 2, 1_795_000_000_000_000_001, [0]],
               [13, MID, -3, 3, 0, ["/", "q", "c", 1, "t", 2 ** 63 - 1, False, True, None]]]
    assert _rows(records) == records
    c = chunk.encode_rows([x for rec in records for x in rec])
    assert c[0] == 3 and c[1] == bytes([4, 28, 13])
    assert [type(c[k]) for k in (3, 4, 5)] == [bytes, bytes, bytes]  # int64 columns


def test_row_columns_that_do_not_fit_int64_or_a_byte_stay_lists():
    records = [[300, MID, 1, 2 ** 63, None, []], [1, None, 2, 5, 9, [None]]]
    assert _rows(records) == records
    c = chunk.encode_rows([x for rec in records for x in rec])
    assert c[1] == [300, 1] and c[4] == [2 ** 63, 5] and c[5] == [None, 9]


def test_a_kind_chunk_keeps_constants_once_and_numbers_as_int64s():
    records = [[MID, 100 + i, 7 + i, 5_000 + i, ["/", "q", i, False, None, ("q",)]]
               for i in range(5)]
    c, got = _kind(4, records, (False, False, True, False, False, False))
    assert got == [[4, MID, 100 + i, 7 + i, 5_000 + i, ["/", "q", i, False, None, ["q"]]]
                   for i in range(5)]
    cols = c[6]
    assert cols[0] == {"v": "/"} and cols[1] == {"v": "q"} and type(cols[2]) is bytes
    assert cols[3] == {"v": False} and cols[4] == {"v": None} and cols[5] == {"v": ("q",)}


def test_a_kind_chunk_keeps_types_apart_that_compare_equal():
    # 1 == True == 1.0: a column holding both is no constant, and keeps each value's type
    records = [[None, 1, 1, None, [True, 1, 2.0, "x"]], [None, 2, 2, None, [1, 1.0, 2, "y"]]]
    c, got = _kind(9, records, (False, True, True, False))
    assert got == [[9, None, 1, 1, None, [True, 1, 2.0, "x"]],
                   [9, None, 2, 2, None, [1, 1.0, 2, "y"]]]
    assert [type(v) for r in got for v in r[5][:3]] == [bool, int, float, int, float, int]
    assert c[5] == [None, None]  # no stamps: a list, not int64s


def test_a_kind_chunk_of_a_kind_without_values():
    _, got = _kind(24, [[None, 1, 0, 10, []], [None, 2, 1, 11, []]], ())
    assert got == [[24, None, 1, 0, 10, []], [24, None, 2, 1, 11, []]]


@pytest.mark.parametrize("bad", [
    [1, b"\x04", [MID]],  # columns missing
    ["x", b"\x04", [MID], b"", b"", b"", [[]]],  # n is not a number
    [2, b"\x04", [MID], b"\x00" * 8, b"\x00" * 8, b"\x00" * 8, [[]]],  # n too large
    [1, b"\x04", [MID], b"\x00" * 4, b"\x00" * 8, b"\x00" * 8, [[]]],  # a short int column
    [2, 4, [MID, MID], b"\x00" * 16, b"\x00" * 16, b"\x00" * 16, [["a"]]],  # a short column
    [4, MID, 1, 2, 3, []],  # a v2 record
])
def test_what_is_not_a_whole_chunk_raises(bad):
    with pytest.raises(ValueError):
        list(chunk.records(bad))
