"""The "leveret-events v3" chunk: many events' records as columns, encoded with one call per
column (docs/events.md, "File format"), shared by the writer (actors/events.py) and the
readers (reader.py, actors.events.read_file).

The writer buffers an event as WIDTH consecutive items of one flat list (code, msg_id,
mono_ns, seq, hlc_ns, values): a list.extend, atomic under the GIL, with no record object to
allocate, track and free. A chunk is that list's columns, as one msgpack array:

    [n, codes, msg_ids, mono_ns, seq, hlc_ns, values]

- codes: n bytes (a kind's number in the header's table; a list of ints if one is >= 256);
- msg_ids: a list of n binaries or nils;
- mono_ns, seq, hlc_ns: n little-endian int64s as one binary (array.tobytes), or a list of
  ints and nils when a value does not fit (hlc_ns is nil in synthetic logs without stamps);
- values: a list of n arrays, each the kind's values in the table's order, as in v2.

A composite record (schema.PARTS) stands for its parts: part i has seq + i and hlc_ns + i
(the writer takes consecutive numbers for it, or writes the parts as records of their own).
No Leveret or Spark import here: the reader's Python workers use it.
"""

from __future__ import annotations

import sys
from array import array

WIDTH = 6  # items of one event in the writer's flat buffer, and fields of a decoded record
_LITTLE = sys.byteorder == "little"  # int64 columns are little-endian in the file


def _int64s(column: list):
    """An int column as little-endian int64 bytes, or the list itself when an item is nil or
    out of range (the reader takes both)."""
    try:
        a = array("q", column)
    except (TypeError, OverflowError):
        return column
    if not _LITTLE:
        a.byteswap()
    return a.tobytes()


def _codes(column: list):
    try:
        return bytes(column)
    except (TypeError, ValueError):
        return column


def encode(flat: list) -> list:
    """The chunk of a flat buffer slice (len a multiple of WIDTH), ready for msgpack."""
    return [len(flat) // WIDTH, _codes(flat[0::WIDTH]), flat[1::WIDTH],
            _int64s(flat[2::WIDTH]), _int64s(flat[3::WIDTH]), _int64s(flat[4::WIDTH]),
            flat[5::WIDTH]]


def _ints(column, n: int) -> list:
    if isinstance(column, (bytes, bytearray, memoryview)):
        a = array("q")
        a.frombytes(column)
        if not _LITTLE:
            a.byteswap()
        column = a.tolist()
    if len(column) != n:
        raise ValueError("chunk: a column's length is not the chunk's")
    return column


def records(chunk) -> zip:
    """(code, msg_id, mono_ns, seq, hlc_ns, values) of every event of a decoded chunk, in the
    order written; ValueError when the object is not a whole chunk."""
    if type(chunk) is not list or len(chunk) < 7 or type(chunk[0]) is not int:
        raise ValueError("chunk: not a chunk")
    n, codes, mids, monos, seqs, stamps, values = chunk[:7]
    codes = list(codes) if isinstance(codes, (bytes, bytearray)) else codes
    if len(codes) != n or len(mids) != n or len(values) != n:
        raise ValueError("chunk: a column's length is not the chunk's")
    return zip(codes, mids, _ints(monos, n), _ints(seqs, n), _ints(stamps, n), values)
