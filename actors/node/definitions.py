"""Durable definitions (users, vhosts, permissions, durable exchanges, queues, bindings) in LMDB.

Mirrors the disc copies of RabbitMQ's mnesia tables. The node's metadata actor is the only
writer, once per mailbox drain at most (actors/node/change_feed.py). Everything but the queues
is one msgpack value, rewritten when it changes: it changes rarely and stays small. Each durable
queue is a record of its own (`queue` key + its vhost and name), so a drain that only declares
queues writes those records, not every definition: 10,000 durable declares used to rewrite the
whole set each time. Every write is one synced LMDB transaction.

A store written before the queues had records of their own keeps them in the value's "queues";
`load` reads them from there, and the next full `save` moves them to records.
"""

from __future__ import annotations

import os

import lmdb

from actors.wire import packb, unpackb

_KEY = b"definitions"
_HASH_KEY = b"imported_definitions_hash"  # load_definitions' last imported file (skip_if_unchanged)
_QUEUE = b"queue\x00"  # prefix of a durable queue's record: + msgpack [vhost, name]


def _queue_key(vhost: str, name: str) -> bytes:
    return _QUEUE + packb([vhost, name])


class Definitions:
    def __init__(self, path: str, map_size: int = 64 << 20):
        os.makedirs(path, exist_ok=True)
        self.env = lmdb.open(path, map_size=map_size, subdir=True, max_dbs=1,  # synced commits
                             mode=0o600)  # files: this user only (docs/security.md)

    def load(self) -> dict:
        """Every definition; "queues" from the queue records (and an older store's value)."""
        with self.env.begin() as txn:
            raw = txn.get(_KEY)
            defs = unpackb(raw) if raw else {}
            queues = {(q["vhost"], q["name"]): q for q in defs.get("queues", [])}
            for key, value in _queue_records(txn):
                q = unpackb(value)
                queues[(q["vhost"], q["name"])] = q
        if queues or raw:
            defs["queues"] = list(queues.values())
        return defs

    def save(self, defs: dict) -> None:
        """Replace every definition: the value without the queues, one record per queue."""
        rest = {k: v for k, v in defs.items() if k != "queues"}
        with self.env.begin(write=True) as txn:
            for key, _ in list(_queue_records(txn)):
                txn.delete(key)
            for q in defs.get("queues", []):
                txn.put(_queue_key(q["vhost"], q["name"]), packb(q))
            txn.put(_KEY, packb(rest))

    def save_queues(self, put: list[dict], gone: list[tuple[str, str]],
                    rest: dict | None = None) -> None:
        """Write these queues' records and drop those of `gone` (vhost, name); `rest`: also
        replace the value of everything else (its "queues" left out), in the same commit."""
        with self.env.begin(write=True) as txn:
            for vhost, name in gone:
                txn.delete(_queue_key(vhost, name))
            for q in put:
                txn.put(_queue_key(q["vhost"], q["name"]), packb(q))
            if rest is not None:
                txn.put(_KEY, packb({k: v for k, v in rest.items() if k != "queues"}))

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


def _queue_records(txn):
    """(key, value) of every queue record, in key order."""
    cursor = txn.cursor()
    if not cursor.set_range(_QUEUE):
        return
    for key, value in cursor:
        if not key.startswith(_QUEUE):
            return
        yield key, value
