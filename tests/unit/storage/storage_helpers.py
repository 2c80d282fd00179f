"""Shared pieces of the storage unit tests: the node's LMDB environment and entry builders."""

from __future__ import annotations

import lmdb

from msg_store import MsgStore
from queue_index import IndexEntry, QueueIndex

MAX_DBS = len(MsgStore.db_names()) + len(QueueIndex.db_names())


def open_env(path, map_size: int = 256 << 20) -> lmdb.Environment:
    """The environment as the node opens it: no sync per commit (env.sync at group commit)."""
    return lmdb.open(str(path), max_dbs=MAX_DBS, map_size=map_size, sync=False, metasync=False,
                     subdir=True)


def mid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def body_for(n: int, size: int) -> bytes:
    return (n.to_bytes(8, "big") * (size // 8 + 1))[:size]


def entry(seq: int, size: int = 100, *, msg: int | None = None, delivered: bool = False,
          embed_below: int = 4096) -> IndexEntry:
    """An entry for seq_id `seq`; its body is set when a default-configured index embeds it."""
    n = seq if msg is None else msg
    body = body_for(n, size) if size < embed_below else None
    return IndexEntry(seq, mid(n), "ex", f"rk.{seq}", b"\x80\x00" + bytes([seq % 256]), body,
                      size, priority=seq % 10, expires_at=seq * 1000, delivered=delivered)


def publish(qi: QueueIndex, ms: MsgStore, txn, entries) -> None:
    """Publish as the backing queue will: non-embedded bodies into msg_store in the same txn."""
    for e in entries:
        if not qi.embeds(e.body_size):
            ms.put(txn, e.msg_id, body_for(int.from_bytes(e.msg_id, "big"), e.body_size))
    qi.publish(txn, entries)


def ack(qi: QueueIndex, ms: MsgStore, txn, seq_ids) -> list[bytes]:
    released = qi.ack(txn, seq_ids)
    ms.release(txn, released)
    return released


# The kill -9 test: what iteration i of the child's loop does, in one transaction.
CRASH_BATCH = 5


def crash_plan(i: int) -> tuple[list[IndexEntry], list[int], list[int]]:
    """(entries to publish, seq_ids to deliver, seq_ids to ack) of iteration i: publish a
    batch, deliver the previous one, ack the one three batches back except multiples of 7
    (which stay, so segments fill and fold)."""
    b = CRASH_BATCH
    pubs = [entry(s, 5000 if s % 3 == 0 else 900) for s in range(b * i, b * i + b)]  # 900:
    #         three or four of them in a batch, a chunk (INLINE_BELOW) in every transaction
    delivers = list(range(max(b * (i - 1), 0), b * i)) if i else []
    acks = [s for s in range(b * (i - 3), b * (i - 3) + b) if s % 7] if i >= 3 else []
    return pubs, delivers, acks


def crash_model(k: int) -> dict[int, bool]:
    """seq_id -> delivered, of the live entries after iterations 0..k committed (k=-1: none)."""
    live: dict[int, bool] = {}
    for i in range(k + 1):
        pubs, delivers, acks = crash_plan(i)
        for e in pubs:
            live[e.seq_id] = False
        for s in delivers:
            if s in live:
                live[s] = True
        for s in acks:
            live.pop(s, None)
    return live


def legacy_publish(qi: QueueIndex, ms: MsgStore, txn, entries) -> None:
    """Publish as QueueIndex did before the chunk layout (a store an older node wrote): an
    embedded body inside its publish record (entry.encode(e, True), the EMBEDDED flag), the
    journal and the meta record counted as they were. For the tests that read, ack, fold and
    delete such records with the code of today."""
    from queue_index.entry import encode
    from queue_index.keys import J, PUB
    for e in entries:
        if not qi.embeds(e.body_size):
            ms.put(txn, e.msg_id, body_for(int.from_bytes(e.msg_id, "big"), e.body_size))
    m = qi._load(txn)
    for e in entries:
        if e.seq_id < m.next_seq_id:
            raise ValueError(f"seq_id {e.seq_id} is not above {m.next_seq_id - 1}")
        txn.put(qi._prefix + J.pack(e.seq_id, PUB), encode(e, qi.embeds(e.body_size)),
                db=qi._journal)
        m.next_seq_id = e.seq_id + 1
        m.live += 1
        m.live_bytes += e.body_size
        m.delivered += bool(e.delivered)
        m.journal += 1
        if m.journal >= qi.max_journal_entries:
            qi._fold(txn, m)
    qi._save(txn, m)
