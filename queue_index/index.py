"""QueueIndex: one durable queue's index (rabbit_queue_index.erl) in the node's LMDB environment.

Records, keyed by the queue's seq_id: publish (the entry; a body below embed_msgs_below bytes is
written into one of the queue's chunks, chunks.py, and the record points at it), deliver, ack.
They go to a journal first; when it holds max_journal_entries records its oldest fold_records
records are folded (fold.py) into segments of segment_entries seq_ids (a bounded step per
write: a whole journal is tens of MB of pages in one transaction). A publish whose ack arrives
while both are in the journal is deleted with it and never reaches a segment, so a queue that
keeps up with its consumers only ever touches its journal (and its chunks, each deleted with
the ack of its last live entry).

Sans-IO: every method takes the caller's LMDB transaction; the caller writes the msg_store side
of a publish or an ack in the same transaction and makes it durable with env.sync(True) at group
commit. A QueueIndex object holds configuration and database handles only, never state that an
aborted transaction could leave behind: every counter is in the queue's QueueMeta record.

Mistakes a queue can survive are counted, not raised: deliver or ack of an unknown or already
acked seq_id. Mistakes that would corrupt the index raise ValueError (seq_id not increasing, a
malformed entry); the caller then aborts its transaction.
"""

from __future__ import annotations

from itertools import islice
from typing import Iterable, Iterator, NamedTuple

import lmdb

from queue_index import chunks, keys
from queue_index.entry import (CHUNKED, DELIVERED, EMBEDDED, IndexEntry, body_size, chunk_of,
                               chunk_ref, decode, encode, encode_chunked, msg_id)
from queue_index.fold import drop_range, fold, segment_counts
from queue_index.keys import ACK, DEL, J, PUB, S, SEQ
from queue_index.meta import QueueMeta
from queue_index.scan import live, records

_JOURNAL = b"qi.journal"
_SEGMENTS = b"qi.segments"
_COUNTS = b"qi.counts"
_QUEUES = b"qi.queues"
_CHUNKS = b"qi.chunks"
_CHUNK_LIVE = b"qi.chunk_live"
_PUB, _DEL, _ACK = bytes((PUB,)), bytes((DEL,)), bytes((ACK,))


def db_names() -> tuple[bytes, ...]:
    """Names of the LMDB databases QueueIndex opens (shared by all queues): count them into the
    env's max_dbs."""
    return (_JOURNAL, _SEGMENTS, _COUNTS, _QUEUES, _CHUNKS, _CHUNK_LIVE)


class Recovery(NamedTuple):
    live: int  # entries published and not acked
    live_bytes: int  # sum of their body sizes (embedded or in msg_store)
    next_seq_id: int  # max seq_id ever published + 1 (0 for a queue never published to)
    delivered: int  # live entries delivered at least once


class IndexCorrupt(ValueError):
    """verify() found the counters and the records disagreeing."""


class QueueIndex:
    def __init__(self, env, queue_id: bytes, *, segment_entries: int = 16384,
                 max_journal_entries: int = 32768, embed_msgs_below: int = 4096,
                 fold_records: int = 2048, chunk_bytes: int = 256 << 10, txn=None):
        """Open (create) the shared databases. Pass `txn` when the caller already holds a write
        transaction in this thread."""
        if segment_entries < 1 or max_journal_entries < 1 or fold_records < 1 or \
                chunk_bytes < 1:
            raise ValueError("segment_entries, max_journal_entries, fold_records and "
                             "chunk_bytes must be positive")
        self.env = env  # the node's LMDB environment, shared with msg_store and other queues
        self.queue_id = queue_id  # stable key of this durable queue (caller derives it)
        self.segment_entries = segment_entries  # for a new queue; an existing one keeps its own
        self.max_journal_entries = max_journal_entries  # fold the journal when it holds this many
        self.fold_records = fold_records  # ...its oldest this many records at a time
        self.embed_msgs_below = embed_msgs_below  # bodies shorter than this live in the index
        self.chunk_bytes = chunk_bytes  # body bytes a chunk holds at most (a larger body alone)
        self._prefix = keys.prefix(queue_id)  # this queue's key prefix in every database
        self._journal = env.open_db(_JOURNAL, txn=txn)  # journal records, all queues
        self._segments = env.open_db(_SEGMENTS, txn=txn)  # segment records, all queues
        self._counts = env.open_db(_COUNTS, txn=txn)  # per-segment publish/ack counts
        self._queues = env.open_db(_QUEUES, txn=txn)  # QueueMeta per queue
        self._chunks = env.open_db(_CHUNKS, txn=txn)  # bodies of embedded entries, all queues
        self._chunk_live = env.open_db(_CHUNK_LIVE, txn=txn)  # per chunk: live, bodies

    db_names = staticmethod(db_names)

    @staticmethod
    def queue_ids(env, txn) -> list[bytes]:
        """queue_ids with anything in the index (at boot: delete those no longer defined)."""
        try:
            db = env.open_db(_QUEUES, txn=txn, create=False)
        except lmdb.NotFoundError:
            return []
        return [keys.queue_id(k) for k in txn.cursor(db=db).iternext(values=False)]

    @staticmethod
    def next_seq_id_of(env, txn, queue_id: bytes) -> int:
        """A queue's next_seq_id (max seq_id ever published + 1, 0 for none) read without
        opening (creating) its index: any transaction, read-only included."""
        try:
            db = env.open_db(_QUEUES, txn=txn, create=False)
        except lmdb.NotFoundError:
            return 0
        raw = txn.get(keys.prefix(queue_id), db=db)
        return QueueMeta.unpack(raw).next_seq_id if raw is not None else 0

    def embeds(self, body_size: int) -> bool:
        """True when a body of this size is stored inside the publish record."""
        return body_size < self.embed_msgs_below

    # -- writes --------------------------------------------------------------------------------

    def publish(self, txn, entries: Iterable[IndexEntry]) -> None:
        """Journal publish records. The body of an entry that embeds() its body_size must be in
        the entry: the call's such bodies are written end to end into chunks of at most
        chunk_bytes (chunks.py) and each record points at its body; a chunk that would hold
        less than chunks.INLINE_BELOW bytes is not written, its bodies stay in their records
        (as an empty body does). Any other entry's body is not stored: the caller puts it into
        msg_store in this txn. seq_ids must increase (ValueError otherwise)."""
        entries = list(entries)
        plan, refs = chunks.plan(entries, self.embed_msgs_below, self.chunk_bytes)
        m = self._load(txn)
        p, jdb, below, limit = self._prefix, self._journal, self.embed_msgs_below, \
            self.max_journal_entries
        put, pack = txn.put, J.pack
        append = True  # a new seq_id's key is the queue's last: append while no queue follows
        for i, e in enumerate(entries):
            seq = e.seq_id
            if seq < m.next_seq_id:
                raise ValueError(f"seq_id {seq} is not above {m.next_seq_id - 1}")
            ref = refs.get(i)
            value = encode(e, e.body_size < below) if ref is None else encode_chunked(e, *ref)
            key = p + pack(seq, PUB)
            if not (append and put(key, value, append=True, db=jdb)):
                append = False
                put(key, value, db=jdb)
            m.next_seq_id = seq + 1
            m.live += 1
            m.live_bytes += e.body_size
            if e.delivered:
                m.delivered += 1
            m.journal += 1
            if m.journal >= limit:
                self._fold(txn, m)
                append = True
        append = True  # the same for this queue's chunks
        for first, bodies in plan:
            append = chunks.write(txn, self._chunks, self._chunk_live, p, first, bodies, append)
        self._save(txn, m)

    def deliver(self, txn, seq_ids: Iterable[int]) -> None:
        """Journal deliver records (a message handed to a consumer: redelivered=true after a
        restart). Delivering an unknown or acked seq_id is ignored and counted; delivering one
        already delivered is ignored."""
        m = self._load(txn)
        p, jdb, sdb, n = self._prefix, self._journal, self._segments, m.segment_entries
        get, put = txn.get, txn.put
        for seq in seq_ids:
            base = p + SEQ.pack(seq)
            pub = get(base + _PUB, db=jdb)
            if pub is None:  # in a segment, or acked, or unknown
                pub = get(p + S.pack(seq // n, seq % n, PUB), db=sdb)
                if pub is None or get(base + _ACK, db=jdb) is not None:
                    m.unknown_delivers += 1
                    continue
                if get(p + S.pack(seq // n, seq % n, DEL), db=sdb) is not None:
                    continue
            if pub[0] & DELIVERED or not put(base + _DEL, b"", overwrite=False, db=jdb):
                continue  # delivered before
            m.delivered += 1
            m.journal += 1
            if m.journal >= self.max_journal_entries:
                self._fold(txn, m)
        self._save(txn, m)

    def ack(self, txn, seq_ids: Iterable[int]) -> list[bytes]:
        """Journal acks; a publish still in the journal is deleted with its deliver record
        instead. Returns the msg_ids of acked entries whose body is in msg_store: the caller
        releases them in this txn. A chunk whose last live entry this acks is deleted here. An
        unknown or already acked seq_id is ignored and counted."""
        m = self._load(txn)
        p, jdb, sdb, n = self._prefix, self._journal, self._segments, m.segment_entries
        get, pop, delete = txn.get, txn.pop, txn.delete
        released = []
        acked: dict[int, int] = {}  # chunk -> its entries acked by this call
        for seq in seq_ids:
            base = p + SEQ.pack(seq)
            pub = pop(base + _PUB, db=jdb)
            if pub is not None:  # publish still in the journal: both cancel out
                m.journal -= 1
                delivered = delete(base + _DEL, db=jdb)
                if delivered:
                    m.journal -= 1
            else:
                pub = get(p + S.pack(seq // n, seq % n, PUB), db=sdb)
                if pub is None or not txn.put(base + _ACK, b"", overwrite=False, db=jdb):
                    m.unknown_acks += 1  # never published, or acked before
                    continue
                m.journal += 1
                delivered = delete(base + _DEL, db=jdb)  # superseded by the ack record
                if delivered:
                    m.journal -= 1
                else:
                    delivered = get(p + S.pack(seq // n, seq % n, DEL), db=sdb) is not None
            m.live -= 1
            m.live_bytes -= body_size(pub)
            if delivered or pub[0] & DELIVERED:
                m.delivered -= 1
            if pub[0] & CHUNKED:
                c = chunk_of(pub)
                acked[c] = acked.get(c, 0) + 1
            elif not pub[0] & EMBEDDED:
                released.append(msg_id(pub))
            if m.journal >= self.max_journal_entries:
                self._fold(txn, m)
        if acked:
            chunks.release(txn, self._chunks, self._chunk_live, p, acked)
        self._save(txn, m)
        return released

    def fold(self, txn) -> None:
        """Fold the whole journal into the segments now (the writes fold its oldest
        fold_records records when it is full)."""
        m = self._load(txn)
        if m.journal:
            fold(txn, self._journal, self._segments, self._counts, self._prefix, m)
            self._save(txn, m)

    def delete(self, txn) -> list[bytes]:
        """Remove everything of this queue, its meta record too (the queue_id then starts again
        from seq_id 0). Returns the msg_ids of live entries whose body is in msg_store: the
        caller releases them in this txn."""
        m = self._load(txn)
        released = [msg_id(v) for _, v, _ in live(txn, self._journal, self._segments,
                                                   self._prefix, -1, m.segment_entries)
                    if not v[0] & (EMBEDDED | CHUNKED)]
        for db in (self._journal, self._segments, self._counts, self._chunks,
                   self._chunk_live):
            drop_range(txn, db, self._prefix)
        txn.delete(self._prefix, db=self._queues)
        return released

    def delete_some(self, txn, limit: int) -> tuple[list[bytes], bool]:
        """delete() a bounded step at a time, for a caller that commits between steps: a deep
        queue's index is gigabytes of pages, which one transaction would hold dirty and mapped.
        A step folds up to `limit` journal records (an ack record then takes its publish record
        out of the segments), or, once the journal is empty, deletes up to `limit` segment
        records, then up to `limit` chunks (each with its count). Returns the msg_ids of the
        live msg_store entries it deleted (the caller releases them in this txn) and whether
        the queue is gone (its meta record too). Between
        steps the meta record's counters are not kept: read nothing of a queue being deleted
        (a crash between steps leaves what delete() or delete_some() still removes)."""
        m = self._load(txn)
        if m.journal:
            if not fold(txn, self._journal, self._segments, self._counts, self._prefix, m,
                        limit):
                m.journal = 0  # (a count without records: nothing to fold)
            self._save(txn, m)
            return [], False
        released, n, plen = [], 0, len(self._prefix)
        cur = txn.cursor(db=self._segments)
        if cur.set_range(self._prefix):
            key = cur.key()
            while key[:plen] == self._prefix and n < limit:
                if key[-1] == PUB:
                    value = cur.value()
                    if not value[0] & (EMBEDDED | CHUNKED):
                        released.append(msg_id(value))
                cur.delete()
                n += 1
                key = cur.key()
        if n < limit:  # the chunks (deleting one reads the first of its overflow pages only)
            cur = txn.cursor(db=self._chunk_live)
            if cur.set_range(self._prefix):
                key = cur.key()
                while key[:plen] == self._prefix and n < limit:
                    txn.delete(key, db=self._chunks)
                    cur.delete()
                    n += 1
                    key = cur.key()
        if n < limit:
            drop_range(txn, self._chunks, self._prefix)  # (none left but a corrupt index's)
            drop_range(txn, self._counts, self._prefix)
            txn.delete(self._prefix, db=self._queues)
            return released, True
        return released, False

    # -- reads ---------------------------------------------------------------------------------

    def recover(self, txn) -> Recovery:
        """The queue's totals at start-up, from its meta record: no scan of any segment."""
        m = self._load(txn)
        return Recovery(m.live, m.live_bytes, m.next_seq_id, m.delivered)

    def read(self, txn, after_seq_id: int, limit: int) -> list[IndexEntry]:
        """Up to `limit` live entries with seq_id > after_seq_id, in seq_id order, with their
        bodies unless those are in msg_store; each chunk they name is read once. A chunk that
        is missing (a corrupt index, which verify() reports) gives its entries body None, as a
        body missing from msg_store is found missing."""
        m = self._load(txn)
        bodies = chunks.Reader(txn, self._chunks, self._prefix)
        return [decode(seq, value, delivered, bodies.get(chunk_of(value))
                       if value[0] & CHUNKED else None)
                for seq, value, delivered in
                islice(live(txn, self._journal, self._segments, self._prefix, after_seq_id,
                            m.segment_entries), limit)]

    def live_seq_ids(self, txn, after_seq_id: int = -1) -> Iterator[int]:
        """seq_ids of the live entries > after_seq_id, in order, without decoding them (purge)."""
        n = self._load(txn).segment_entries
        for seq, _, _ in live(txn, self._journal, self._segments, self._prefix, after_seq_id, n,
                              values=False):
            yield seq

    def live_records(self, txn, after_seq_id: int = -1) -> Iterator[tuple[int, bytes]]:
        """(seq_id, publish record value, undecoded) of the live entries > after_seq_id, in
        order (a queue census that must tell persistent entries from transient ones)."""
        n = self._load(txn).segment_entries
        for seq, value, _ in live(txn, self._journal, self._segments, self._prefix,
                                  after_seq_id, n):
            yield seq, value

    def stats(self, txn) -> dict:
        m = self._load(txn)
        return {"live": m.live, "live_bytes": m.live_bytes, "delivered": m.delivered,
                "next_seq_id": m.next_seq_id, "journal": m.journal,
                "segments": len(segment_counts(txn, self._counts, self._prefix)),
                "chunks": len(chunks.live_counts(txn, self._chunk_live, self._prefix)),
                "unknown_acks": m.unknown_acks, "unknown_delivers": m.unknown_delivers,
                "segment_entries": m.segment_entries}

    def verify(self, txn) -> Recovery:
        """Recompute the totals by scanning journal and segments; raise IndexCorrupt if the meta
        record, the segment counts or the chunks' live counts disagree with the records, or a
        live record points outside its chunk. For tests and leveretctl."""
        m = self._load(txn)
        n = m.segment_entries
        total = total_bytes = delivered_n = journal_n = orphans = 0
        max_seq = -1
        in_segment: dict[int, int] = {}  # segment -> publish records still in it
        in_chunk: dict[int, int] = {}  # chunk -> live records pointing into it
        chunk_sizes = chunks.sizes(txn, self._chunks, self._prefix)
        outside = 0  # live records whose body is not inside its chunk
        for _ in _range_keys(txn, self._journal, self._prefix):
            journal_n += 1
        for key in _range_keys(txn, self._segments, self._prefix):
            seg, _, kind = S.unpack_from(key, len(self._prefix))
            if kind == PUB:
                in_segment[seg] = in_segment.get(seg, 0) + 1
        for seq, published, pub, acked, delivered in records(
                txn, self._journal, self._segments, self._prefix, -1, n):
            if not published:  # a deliver or ack record whose publish record is gone
                orphans += 1
            else:
                max_seq = seq
            if published and not acked:
                total += 1
                total_bytes += body_size(pub)
                delivered_n += bool(delivered)
                ref = chunk_ref(pub)
                if ref is not None:
                    in_chunk[ref[0]] = in_chunk.get(ref[0], 0) + 1
                    if ref[1] + body_size(pub) > chunk_sizes.get(ref[0], -1):
                        outside += 1
        counted = {seg: pubs - acks for seg, (pubs, acks) in
                   segment_counts(txn, self._counts, self._prefix).items()}
        problems = []
        if (total, total_bytes, delivered_n, journal_n) != (m.live, m.live_bytes, m.delivered,
                                                            m.journal):
            problems.append(f"meta says live={m.live} bytes={m.live_bytes} "
                            f"delivered={m.delivered} journal={m.journal}, records say "
                            f"{total} {total_bytes} {delivered_n} {journal_n}")
        if orphans:
            problems.append(f"{orphans} seq_ids with deliver or ack records and no publish")
        if max_seq >= m.next_seq_id:
            problems.append(f"seq_id {max_seq} recorded, next_seq_id {m.next_seq_id}")
        if {s: c for s, c in counted.items() if c} != in_segment:
            problems.append(f"segment counts {counted} != publish records {in_segment}")
        chunk_live = {c: live_n for c, (live_n, _) in
                      chunks.live_counts(txn, self._chunk_live, self._prefix).items()}
        if chunk_live != in_chunk:
            problems.append(f"chunk live counts {chunk_live} != live records {in_chunk}")
        if set(chunk_sizes) != set(chunk_live):
            problems.append(f"chunks {sorted(chunk_sizes)} != counted {sorted(chunk_live)}")
        if outside:
            problems.append(f"{outside} live records point outside their chunk")
        if problems:
            raise IndexCorrupt(f"queue {self.queue_id!r}: " + "; ".join(problems))
        return Recovery(total, total_bytes, m.next_seq_id, delivered_n)

    # -- internals -----------------------------------------------------------------------------

    def _load(self, txn) -> QueueMeta:
        raw = txn.get(self._prefix, db=self._queues)
        return QueueMeta.unpack(raw) if raw is not None else QueueMeta(self.segment_entries)

    def _save(self, txn, m: QueueMeta) -> None:
        txn.put(self._prefix, m.pack(), db=self._queues)

    def _fold(self, txn, m: QueueMeta) -> None:
        """The journal is full: fold its oldest fold_records records (a seq_id's records
        together), so a write never folds more than that at once, however large
        max_journal_entries is; the youngest records stay, where an ack still cancels them."""
        fold(txn, self._journal, self._segments, self._counts, self._prefix, m,
             self.fold_records)


def _range_keys(txn, db, key_prefix: bytes):
    cur = txn.cursor(db=db)
    if not cur.set_range(key_prefix):
        return
    plen = len(key_prefix)
    for key in cur.iternext(values=False):
        if key[:plen] != key_prefix:
            return
        yield key
