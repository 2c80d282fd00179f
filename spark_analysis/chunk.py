"""The "leveret-events v3" chunks: many events' records as columns, each encoded with one call
(docs/events.md, "File format"), shared by the writer (actors/events.py) and the readers
(reader.py, actors.events.read_file).

The writer buffers the events of each kind in a flat list of their own, `4 + its values`
items per event (msg_id, mono_ns, seq, hlc_ns, then the kind's values in the layout's order):
one list.extend per event, atomic under the GIL, and no record or values object kept per
event. A **kind chunk** is such a list's columns, as one msgpack array:

    [n, code, msg_ids, mono_ns, seq, hlc_ns, [column per value]]

- code: the kind's number in the header's table (an int: what tells a kind chunk apart);
- msg_ids: a list of n binaries or nils;
- mono_ns, seq, hlc_ns: n little-endian int64s as one binary, or a list of ints and nils when
  one does not fit (hlc_ns is nil in synthetic logs without stamps);
- a value column: a map {"v": value} when all n are that value (a queue's name, a channel's
  vhost: most columns of a busy process's chunk), else, for a field the job reads as a
  number (INT_FIELDS), n int64s as one binary when they fit, else a list of n values.

Events whose values do not match their kind's width (a map of undeclared fields after them)
are buffered as rows instead, WIDTH items each (code, msg_id, mono_ns, seq, hlc_ns, values),
and written as a **row chunk**: [n, codes, msg_ids, mono_ns, seq, hlc_ns, values], codes n
bytes (a list if one is >= 256), values a list of n arrays.

A drain writes a chunk per kind, so events follow each other in the file by kind, each
kind's in the order written; `seq` gives the process's order. A composite record (schema.PARTS)
stands for its parts: part i has seq + i and hlc_ns + i (the writer takes consecutive numbers
for it, or writes the parts as records of their own).
No Leveret or Spark import here: the reader's Python workers use it.
"""

from __future__ import annotations

import struct
import sys
from array import array

WIDTH = 6  # items of one event in a row buffer, and fields of a decoded record
HEAD = 4  # items of one event in a kind buffer before its values: msg_id, mono, seq, hlc
# fields the job reads as numbers (schema.FIELD_COLUMNS' bigint): int64 columns when they fit
INT_FIELDS = frozenset(("channel", "seq_no", "delivery_tag", "count", "seq_id", "unacked",
                        "channels", "recovered", "size", "worker", "dropped", "crashed_pid",
                        "seq_below", "offset", "epoch"))
_LITTLE = sys.byteorder == "little"  # int64 columns are little-endian in the file


def _int64s(column: list):
    """An int column as little-endian int64 bytes, or the list itself when an item is nil,
    not an int or out of range (the reader takes both)."""
    try:
        return struct.pack(f"<{len(column)}q", *column)
    except (struct.error, TypeError):
        return column


def _codes(column: list):
    try:
        return bytes(column)
    except (TypeError, ValueError):
        return column


def _column(column: list, ints: bool):
    """One value column: a constant as {"v": value}, ints as int64 bytes, else the list."""
    first = column[0]
    if column.count(first) == len(column):
        # (== holds between 1, 1.0 and True: a constant is one of one type)
        if type(first) not in (int, bool, float) or \
                list(map(type, column)).count(type(first)) == len(column):
            return {"v": first}
    if ints:
        return _int64s(column)
    return column


def encode_kind(code: int, flat: list, ints: tuple) -> list:
    """The kind chunk of a kind buffer's slice (len a multiple of HEAD + len(ints)); `ints`:
    per value, whether its field is in INT_FIELDS. Ready for msgpack."""
    width = HEAD + len(ints)
    return [len(flat) // width, code, flat[0::width], _int64s(flat[1::width]),
            _int64s(flat[2::width]), _int64s(flat[3::width]),
            [_column(flat[HEAD + j::width], i) for j, i in enumerate(ints)]]


def encode_rows(flat: list) -> list:
    """The row chunk of a row buffer's slice (len a multiple of WIDTH), ready for msgpack."""
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


def _values(column, n: int) -> list:
    if type(column) is dict:
        return [column.get("v")] * n
    return _ints(column, n)


def records(chunk):
    """(code, msg_id, mono_ns, seq, hlc_ns, values) of every event of a decoded chunk, in the
    order written; ValueError when the object is not a whole chunk."""
    if type(chunk) is not list or len(chunk) < 7 or type(chunk[0]) is not int:
        raise ValueError("chunk: not a chunk")
    n, codes, mids, monos, seqs, stamps, values = chunk[:7]
    if type(codes) is int:
        if type(values) is not list:
            raise ValueError("chunk: not a chunk")
        codes = [codes] * n
        values = list(zip(*[_values(c, n) for c in values])) if values else [()] * n
    elif isinstance(codes, (bytes, bytearray)):
        codes = list(codes)
    if len(codes) != n or len(mids) != n or len(values) != n:
        raise ValueError("chunk: a column's length is not the chunk's")
    return zip(codes, mids, _ints(monos, n), _ints(seqs, n), _ints(stamps, n), values)
