"""The live view of a queue: journal and segments merged in seq_id order.

A seq_id is live when it has a publish record in the journal, or one in a segment and no ack
record in the journal; it is delivered when its publish record carries the DELIVERED flag or a
deliver record exists in either place. Both databases keep a seq_id's records adjacent and in
seq_id order, so one ordered merge of two cursors gives the view without loading either side.
"""

from __future__ import annotations

import heapq
from itertools import groupby
from operator import itemgetter

from queue_index.entry import DELIVERED
from queue_index.keys import ACK, DEL, J, PUB, S

_SRC_JOURNAL = 0
_SRC_SEGMENT = 1


def _journal(txn, db, prefix: bytes, after: int, values: bool):
    cur = txn.cursor(db=db)
    if not cur.set_range(prefix + J.pack(max(after + 1, 0), 0)):
        return
    plen = len(prefix)
    for key, value in cur.iternext() if values else _keys_only(cur):
        if key[:plen] != prefix:
            return
        seq, kind = J.unpack_from(key, plen)
        yield seq, _SRC_JOURNAL, kind, value


def _segments(txn, db, prefix: bytes, after: int, n: int, values: bool):
    cur = txn.cursor(db=db)
    start = max(after + 1, 0)
    if not cur.set_range(prefix + S.pack(start // n, start % n, 0)):
        return
    plen = len(prefix)
    for key, value in cur.iternext() if values else _keys_only(cur):
        if key[:plen] != prefix:
            return
        seg, rel, kind = S.unpack_from(key, plen)
        yield seg * n + rel, _SRC_SEGMENT, kind, value


def _keys_only(cur):
    for key in cur.iternext(values=False):
        yield key, None


def records(txn, journal, segments, prefix: bytes, after: int, n: int, values: bool = True):
    """(seq_id, publish value or None, ack seen, delivered seen) per seq_id > after, in order."""
    merged = heapq.merge(_journal(txn, journal, prefix, after, values),
                         _segments(txn, segments, prefix, after, n, values))
    for seq, group in groupby(merged, key=itemgetter(0)):
        pub = None
        published = acked = delivered = False
        for _, _, kind, value in group:
            if kind == PUB:
                published, pub = True, value
                if value is not None and value[0] & DELIVERED:
                    delivered = True
            elif kind == DEL:
                delivered = True
            elif kind == ACK:
                acked = True
        yield seq, published, pub, acked, delivered


def live(txn, journal, segments, prefix: bytes, after: int, n: int, values: bool = True):
    """(seq_id, publish value, delivered) of each live entry with seq_id > after, in order."""
    for seq, published, pub, acked, delivered in records(txn, journal, segments, prefix, after,
                                                         n, values):
        if published and not acked:
            yield seq, pub, delivered
