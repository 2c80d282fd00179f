"""MsgStore: message bodies keyed by msg_id, with a refcount per body, in LMDB.

Mirrors rabbit_msg_store.erl without its files, index and garbage collector: LMDB gives the
index (a B-tree keyed by msg_id) and reuses freed pages, so a released body's space is taken by
later writes and no compaction pass exists.

Sans-IO in the project's sense: no threads, no timers, no sync. The caller opens the node's one
LMDB environment (sync=False, metasync=False), passes its own write or read transaction to every
call, and makes the writes durable with env.sync(True) at group commit. That is what lets a
publish write the body here and the publish record into the queue index in one atomic
transaction, and an ack drop the index entry and release the body in another: after a crash the
refcounts are exactly right and nothing is rebuilt.

Named databases (see db_names()):
- ms.bodies  msg_id -> body
- ms.refs    msg_id -> (refcount u32, body size u32)   small, so a refcount change never
                                                       rewrites the body's pages
- ms.meta    b"bytes" -> total body bytes stored, b"unknown" -> releases of unknown ids
"""

from __future__ import annotations

import struct

_BODIES = b"ms.bodies"
_REFS = b"ms.refs"
_META = b"ms.meta"

_REF = struct.Struct(">II")  # refcount, body size
_U64 = struct.Struct(">Q")
_BYTES = b"bytes"  # meta key: sum of the sizes of the bodies stored
_UNKNOWN = b"unknown"  # meta key: releases of ids that were not stored (a caller bug, counted)


def db_names() -> tuple[bytes, ...]:
    """Names of the LMDB databases MsgStore opens: count them into the env's max_dbs."""
    return (_BODIES, _REFS, _META)


class MsgStore:
    """Refcounted bodies in the caller's LMDB environment; every method takes the caller's txn."""

    def __init__(self, env, txn=None):
        """Open (create) the named databases. Pass `txn` when the caller already holds a write
        transaction in this thread (LMDB allows one writer; opening starts one otherwise)."""
        self.env = env  # the node's LMDB environment, shared with the queue indexes
        self._bodies = env.open_db(_BODIES, txn=txn)  # msg_id -> body
        self._refs = env.open_db(_REFS, txn=txn)  # msg_id -> _REF(refcount, size)
        self._meta = env.open_db(_META, txn=txn)  # counters (_BYTES, _UNKNOWN)
        # bodies written (each put, a new body or one more reference) and read (each get), for
        # the node's msg_store_write_count / msg_store_read_count
        self.writes = 0
        self.reads = 0

    db_names = staticmethod(db_names)

    def put(self, txn, msg_id: bytes, body: bytes) -> None:
        """Store `body` with refcount 1, or add one reference if msg_id is already stored (a body
        routed to n durable queues is written once and counted n times)."""
        self.writes += 1
        if txn.put(msg_id, _REF.pack(1, len(body)), overwrite=False, db=self._refs):
            txn.put(msg_id, body, db=self._bodies)
            self._add(txn, _BYTES, len(body))
        else:
            n, size = _REF.unpack(txn.get(msg_id, db=self._refs))
            txn.put(msg_id, _REF.pack(n + 1, size), db=self._refs)

    def put_many(self, txn, items) -> None:
        """put() for each (msg_id, body) pair, with one update of the byte counter."""
        refs, bodies, added = self._refs, self._bodies, 0
        for msg_id, body in items:
            self.writes += 1
            if txn.put(msg_id, _REF.pack(1, len(body)), overwrite=False, db=refs):
                txn.put(msg_id, body, db=bodies)
                added += len(body)
            else:
                n, size = _REF.unpack(txn.get(msg_id, db=refs))
                txn.put(msg_id, _REF.pack(n + 1, size), db=refs)
        if added:
            self._add(txn, _BYTES, added)

    def release(self, txn, msg_ids) -> None:
        """Drop one reference per id; the last one deletes the body (LMDB reuses its pages).
        An id that is not stored is counted in stats()["unknown_releases"] and otherwise ignored:
        a caller's bookkeeping slip must not kill a queue."""
        refs, freed, unknown = self._refs, 0, 0
        for msg_id in msg_ids:
            ref = txn.get(msg_id, db=refs)
            if ref is None:
                unknown += 1
                continue
            n, size = _REF.unpack(ref)
            if n > 1:
                txn.put(msg_id, _REF.pack(n - 1, size), db=refs)
            else:
                txn.delete(msg_id, db=refs)
                txn.delete(msg_id, db=self._bodies)
                freed += size
        if freed:
            self._add(txn, _BYTES, -freed)
        if unknown:
            self._add(txn, _UNKNOWN, unknown)

    def get(self, txn, msg_id: bytes) -> bytes | None:
        self.reads += 1
        return txn.get(msg_id, db=self._bodies)

    def refcount(self, txn, msg_id: bytes) -> int:
        ref = txn.get(msg_id, db=self._refs)
        return _REF.unpack(ref)[0] if ref is not None else 0

    def stats(self, txn) -> dict:
        """bodies stored, their total bytes, releases of unknown ids, LMDB pages used by bodies."""
        st = txn.stat(self._bodies)
        return {
            "bodies": st["entries"],
            "bytes": self._counter(txn, _BYTES),
            "unknown_releases": self._counter(txn, _UNKNOWN),
            "pages": st["leaf_pages"] + st["branch_pages"] + st["overflow_pages"],
        }

    def _counter(self, txn, key: bytes) -> int:
        raw = txn.get(key, db=self._meta)
        return _U64.unpack(raw)[0] if raw is not None else 0

    def _add(self, txn, key: bytes, delta: int) -> None:
        txn.put(key, _U64.pack(self._counter(txn, key) + delta), db=self._meta)
