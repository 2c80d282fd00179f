"""A stream's log in the node's LMDB environment: chunks of messages by offset, in segments.

Mirrors osiris' log (``osiris_log.erl``) as Leveret stores it: a stream is an append-only
sequence of messages numbered from 0 (the offset); what one write adds is a chunk (its first
offset, message count, timestamp, body bytes and the Bloom filter of its messages' filter
values); chunks follow each other in segments of at most ``segment_bytes`` body bytes, and
retention (actors/core/stream.py ``segments_to_drop``) deletes whole segments, oldest first.

Three databases of the worker's environment (actors/store/storage.py), every key led by the
queue's id (16 bytes) then a big-endian 8-byte number, so that cursor order is log order:
``stream_msgs`` (offset -> message), ``stream_chunks`` (first offset -> chunk) and
``stream_segments`` (segment number -> its first and last offset, bytes, newest timestamp).

Readers never hold the log in memory: ``read`` walks the chunks from an offset with a cursor
and returns at most a bounded batch, so a consumer of a backlog of millions costs one batch.
One writer per stream (its StreamWriter actor); any number of readers (the StreamQueue).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import msgpack

from actors.core.stream import LogView, Segment, chunk_filter, chunk_matches, segments_to_drop

__all__ = ["DB_NAMES", "Entry", "Chunk", "StreamLog", "drop_stale"]

DB_NAMES = (b"stream_msgs", b"stream_chunks", b"stream_segments")
_N = struct.Struct(">Q")
DELETE_STEP = 4096  # keys deleted per transaction when a stream or a segment goes


class Entry(NamedTuple):
    """A message as a writer hands it to the log."""
    exchange: str
    routing_key: str
    props_raw: bytes
    body: bytes
    msg_id: bytes | None  # the event log's id (None with events off)
    filter_value: str | None  # x-stream-filter-value


class Message(NamedTuple):
    """A message read back."""
    offset: int
    exchange: str
    routing_key: str
    props_raw: bytes
    body: bytes
    msg_id: bytes | None


class Chunk(NamedTuple):
    """A chunk's record."""
    first: int
    count: int
    ts: int  # wall-clock ms of its write
    nbytes: int
    bloom: bytes | None
    segment: int
    epoch: int = 0  # the stream's epoch when its leader took these publishes (replication)


class StreamLog:
    """One stream's log over an LMDB environment (shared with the worker's other queues)."""

    def __init__(self, env, dbs, qid: bytes, begin, segment_bytes: int):
        self.env = env
        self.qid = qid  # 16-byte queue id (storage.queue_id)
        self.begin = begin  # Storage.begin: a (durable, counted) transaction
        self.segment_bytes = segment_bytes  # a segment rolls past this many body bytes
        self.msgs, self.chunks, self.segs = dbs  # Storage.stream_dbs (DB_NAMES' order)
        self.segments: list[Segment] = []  # every segment, oldest first
        self.next = 0  # the offset the next message gets
        self.last_chunk = 0  # the first offset of the newest chunk
        self._load()

    # --- keys ------------------------------------------------------------------------------
    def _key(self, n: int) -> bytes:
        return self.qid + _N.pack(n)

    def _num(self, key: bytes) -> int:
        return _N.unpack_from(key, 16)[0]

    def _mine(self, key) -> bool:
        return key is not None and bytes(key[:16]) == self.qid

    # --- recovery --------------------------------------------------------------------------
    def _load(self) -> None:
        """The segment table and the log's end, from what is on disk (no message read)."""
        with self.begin() as txn:
            cur = txn.cursor(self.segs)
            if cur.set_range(self.qid):
                for key, val in cur:
                    if not self._mine(key):
                        break
                    first, last, nbytes, last_ts = msgpack.unpackb(val)
                    self.segments.append(Segment(self._num(key), first, last, nbytes, last_ts))
            cur = txn.cursor(self.chunks)
            found = cur.set_range(self._key((1 << 64) - 1))
            if (cur.prev() if found else cur.last()) and self._mine(cur.key()):
                self.last_chunk = self._num(cur.key())
                self.next = self.last_chunk + msgpack.unpackb(cur.value())[0]

    # --- what readers need -----------------------------------------------------------------
    @property
    def first(self) -> int:
        return self.segments[0].first if self.segments else self.next

    @property
    def count(self) -> int:
        return self.next - self.first

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)

    def view(self, from_ts: int | None = None) -> LogView:
        """The log as a reader's start sees it; with ``from_ts``, the chunks of the segments
        that may hold a chunk at or after that time (read lazily)."""
        chunks = () if from_ts is None else self._chunks_from_ts(from_ts)
        return LogView(self.first, self.next, self.last_chunk, chunks)

    def _chunks_from_ts(self, ts: int):
        seg = next((s for s in self.segments if s.last_ts >= ts), None)
        if seg is None:
            return
        with self.begin() as txn:
            cur = txn.cursor(self.chunks)
            if not cur.set_range(self._key(seg.first)):
                return
            for key, val in cur:
                if not self._mine(key):
                    return
                yield self._num(key), msgpack.unpackb(val)[1]

    def read(self, offset: int, max_msgs: int, max_bytes: int, filters=(),
             match_unfiltered=False, end: int | None = None) -> tuple[list, int]:
        """Messages from ``offset`` on, at most ``max_msgs`` and about ``max_bytes`` of body
        (at least one), below ``end`` (the committed offset; default the log's end), skipping
        the chunks a filter rules out -> (messages, the offset to read from next). An offset
        below the log's first reads from the first."""
        out: list[Message] = []
        nbytes = 0
        pos = max(offset, self.first)
        limit = self.next if end is None else min(end, self.next)
        if pos >= limit:
            return out, pos
        with self.begin() as txn:
            chunks = txn.cursor(self.chunks)
            msgs = txn.cursor(self.msgs)
            # the chunk holding `pos`: the last one whose first offset is at or below it
            found = chunks.set_range(self._key(pos))
            if not (found and self._mine(chunks.key()) and self._num(chunks.key()) == pos):
                if not (chunks.prev() if found else chunks.last()) or \
                        not self._mine(chunks.key()):
                    chunks.set_range(self.qid)
            while pos < limit:
                key = chunks.key()
                if not self._mine(key):
                    break
                first = self._num(key)
                rec = msgpack.unpackb(chunks.value())
                count, bloom = rec[0], rec[3]
                end = first + count
                if end > pos and chunk_matches(bloom, filters, match_unfiltered):
                    pos = max(pos, first)
                    if msgs.set_key(self._key(pos)):
                        for mkey, val in msgs:
                            if not self._mine(mkey) or self._num(mkey) >= min(end, limit):
                                break
                            ex, rk, props, body, msg_id = msgpack.unpackb(val)
                            out.append(Message(self._num(mkey), ex, rk, props, body, msg_id))
                            nbytes += len(body)
                            pos = self._num(mkey) + 1
                            if len(out) >= max_msgs or nbytes >= max_bytes:
                                return out, pos
                pos = max(pos, end)
                if not chunks.next():
                    break
        return out, pos

    # --- the writer --------------------------------------------------------------------------
    def append(self, entries: list, now_ms: int, filter_size: int, epoch: int = 0) -> Chunk:
        """Write one chunk (durable when this returns: one transaction, synced) and roll the
        segment first when this chunk would take it past ``segment_bytes``."""
        bloom = chunk_filter([e.filter_value for e in entries], filter_size)
        return self._write(self.next, now_ms, epoch, bloom, entries)

    def append_chunk(self, first: int, ts: int, epoch: int, bloom: bytes | None,
                     entries: list) -> Chunk:
        """A member's copy of one of the leader's chunks, at the leader's offset, time and
        epoch (the member's log is a prefix of the leader's: ``first`` is its end, or above
        an empty log's end when the leader's retention removed what came before)."""
        if first != self.next and not (first > self.next and not self.segments):
            raise ValueError(f"chunk at {first} does not follow the log's end {self.next}")
        return self._write(first, ts, epoch, bloom, entries)

    def _write(self, first: int, now_ms: int, epoch: int, bloom, entries: list) -> Chunk:
        nbytes = sum(len(e.body) for e in entries)
        seg = self.segments[-1] if self.segments else None
        if seg is None or (seg.nbytes and seg.nbytes + nbytes > self.segment_bytes):
            seg = Segment(seg.number + 1 if seg else 0, first, first - 1, 0, now_ms)
            self.segments.append(seg)
        chunk = Chunk(first, len(entries), now_ms, nbytes, bloom, seg.number, epoch)
        seg = seg._replace(last=first + len(entries) - 1, nbytes=seg.nbytes + nbytes,
                           last_ts=now_ms)
        with self.begin(write=True) as txn:
            for i, e in enumerate(entries):
                txn.put(self._key(first + i), msgpack.packb(
                    [e.exchange, e.routing_key, bytes(e.props_raw), bytes(e.body), e.msg_id]),
                    db=self.msgs)
            txn.put(self._key(first), msgpack.packb(list(chunk[1:])), db=self.chunks)
            txn.put(self._key(seg.number), msgpack.packb(
                [seg.first, seg.last, seg.nbytes, seg.last_ts]), db=self.segs)
        self.segments[-1] = seg
        self.next = first + len(entries)
        self.last_chunk = first
        return chunk

    # --- replication -------------------------------------------------------------------------
    def _chunk(self, key, val) -> Chunk:
        rec = msgpack.unpackb(val)
        return Chunk(self._num(key), rec[0], rec[1], rec[2], rec[3], rec[4],
                     rec[5] if len(rec) > 5 else 0)

    def read_chunks(self, offset: int, max_bytes: int) -> list:
        """Whole chunks from the one that starts at ``offset`` (a chunk boundary, or below
        the log's first: from the first) -> [(Chunk, [Entry...])], at least one chunk when
        there is one, about ``max_bytes`` of bodies."""
        out: list = []
        nbytes = 0
        if max(offset, self.first) >= self.next:
            return out
        with self.begin() as txn:
            chunks = txn.cursor(self.chunks)
            msgs = txn.cursor(self.msgs)
            if not chunks.set_range(self._key(max(offset, self.first))):
                return out
            for key, val in chunks:
                if not self._mine(key):
                    break
                c = self._chunk(key, val)
                entries = []
                if c.count and msgs.set_key(self._key(c.first)):
                    for mkey, mval in msgs:
                        if not self._mine(mkey) or self._num(mkey) >= c.first + c.count:
                            break
                        ex, rk, props, body, msg_id = msgpack.unpackb(mval)
                        entries.append(Entry(ex, rk, props, body, msg_id, None))
                out.append((c, entries))
                nbytes += c.nbytes
                if nbytes >= max_bytes:
                    break
        return out

    def overview(self) -> list:
        """[[epoch, last offset of that epoch's chunks], ...] in log order (osiris'
        overview): what a joining member tells the leader of its log."""
        out: list = []
        with self.begin() as txn:
            cur = txn.cursor(self.chunks)
            if not cur.set_range(self.qid):
                return out
            for key, val in cur:
                if not self._mine(key):
                    break
                c = self._chunk(key, val)
                last = c.first + c.count - 1
                if out and out[-1][0] == c.epoch:
                    out[-1][1] = last
                else:
                    out.append([c.epoch, last])
        return out

    def truncate(self, end: int) -> None:
        """Keep the log below offset ``end`` only (a member whose tail the leader does not
        hold); an ``end`` below the log's first empties it, and the next chunk it takes may
        start anywhere (the leader's first)."""
        if end >= self.next:
            return
        self._delete_range(end, self.next)
        kept = [s for s in self.segments if s.first < end]
        gone = [s for s in self.segments if s.first >= end]
        last_chunk, tail = 0, None
        if kept:
            seg = kept[-1]
            nbytes, last_ts = 0, seg.last_ts
            with self.begin() as txn:
                cur = txn.cursor(self.chunks)
                if cur.set_range(self._key(seg.first)):
                    for key, val in cur:
                        if not self._mine(key) or self._num(key) >= end:
                            break
                        c = self._chunk(key, val)
                        nbytes, last_ts, last_chunk = nbytes + c.nbytes, c.ts, c.first
            tail = seg._replace(last=end - 1, nbytes=nbytes, last_ts=last_ts)
            kept[-1] = tail
        with self.begin(write=True) as txn:
            for s in gone:
                txn.delete(self._key(s.number), db=self.segs)
            if tail is not None:
                txn.put(self._key(tail.number), msgpack.packb(
                    [tail.first, tail.last, tail.nbytes, tail.last_ts]), db=self.segs)
        self.segments = kept
        self.next = end if kept else max(end, 0)
        self.last_chunk = last_chunk if kept else self.next

    def retain(self, max_bytes: int | None, max_age_ms: int | None, now_ms: int) -> list:
        """Apply retention: delete the segments it names -> the Segments deleted."""
        numbers = segments_to_drop(self.segments, max_bytes, max_age_ms, now_ms)
        gone = [s for s in self.segments if s.number in numbers]
        for s in gone:
            self._delete_range(s.first, s.last + 1)
            with self.begin(write=True) as txn:
                txn.delete(self._key(s.number), db=self.segs)
        self.segments = [s for s in self.segments if s.number not in numbers]
        return gone

    def _delete_range(self, lo: int, hi: int) -> None:
        """Delete the messages and chunks of offsets [lo, hi), DELETE_STEP keys per
        transaction (a cursor's delete moves it to the next key)."""
        for db in (self.msgs, self.chunks):
            pos, done = lo, False
            while not done:
                with self.begin(write=True) as txn:
                    cur = txn.cursor(db)
                    done = not cur.set_range(self._key(pos))
                    n = 0
                    while not done:
                        key = cur.key()
                        if not key or not self._mine(key) or self._num(key) >= hi:
                            done = True
                        elif n >= DELETE_STEP:
                            pos = self._num(key)
                            break
                        else:
                            cur.delete()
                            n += 1

    def delete(self) -> None:
        """The stream is deleted: every key of it goes."""
        _delete_all(self.env, self.begin, self.qid, [self.msgs, self.chunks, self.segs])
        self.segments = []


def _delete_all(env, begin, qid: bytes, dbs) -> None:
    for db in dbs:
        while True:
            with begin(write=True) as txn:
                cur = txn.cursor(db)
                n = 0
                if cur.set_range(qid):
                    while n < DELETE_STEP and cur.key() and bytes(cur.key()[:16]) == qid:
                        cur.delete()
                        n += 1
            if n < DELETE_STEP:
                break


def stream_ids(env, dbs) -> set:
    """The queue ids that have a stream log in the environment."""
    segs = dbs[2]
    out = set()
    with env.begin() as txn:
        for key in txn.cursor(segs).iternext(values=False):
            out.add(bytes(key[:16]))
    return out


def drop_stale(env, dbs, begin, keep: set) -> list:
    """Delete the logs of streams whose id is not in ``keep`` (deleted while the node was
    down) -> the ids dropped."""
    stale = [q for q in stream_ids(env, dbs) if q not in keep]
    for qid in stale:
        _delete_all(env, begin, qid, dbs)
    return stale
