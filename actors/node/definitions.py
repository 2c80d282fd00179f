"""Durable definitions (users, vhosts, permissions, durable exchanges, queues, bindings) in LMDB.

Mirrors the disc copies of RabbitMQ's mnesia tables. The node's metadata actor is the only
writer. The whole set is one msgpack value rewritten on each change: definitions change rarely
and stay small, so one write transaction per change (LMDB syncs it) is simpler than per-key
records and just as durable.
"""

from __future__ import annotations

import os

import lmdb

from actors.wire import packb, unpackb

_KEY = b"definitions"
_HASH_KEY = b"imported_definitions_hash"  # load_definitions' last imported file (skip_if_unchanged)


class Definitions:
    def __init__(self, path: str, map_size: int = 64 << 20):
        os.makedirs(path, exist_ok=True)
        self.env = lmdb.open(path, map_size=map_size, subdir=True, max_dbs=1,  # synced commits
                             mode=0o600)  # files: this user only (docs/security.md)

    def load(self) -> dict:
        with self.env.begin() as txn:
            raw = txn.get(_KEY)
        return unpackb(raw) if raw else {}

    def save(self, defs: dict) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(_KEY, packb(defs))

    def load_hash(self) -> str:
        """The content hash of the definitions file last imported at boot ("" for none)."""
        with self.env.begin() as txn:
            raw = txn.get(_HASH_KEY)
        return raw.decode() if raw else ""

    def save_hash(self, content_hash: str) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(_HASH_KEY, content_hash.encode())

    def close(self) -> None:
        self.env.close()
