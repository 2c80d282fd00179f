"""Shared, refcounted store for message bodies too big to embed in a queue index.

Mirrors rabbit_msg_store.erl: a body fanned out to several durable queues is written once and
counted once per queue; the last release deletes it. See store.py and docs/storage.md.
"""

from msg_store.store import MsgStore, db_names

__all__ = ["MsgStore", "db_names"]
