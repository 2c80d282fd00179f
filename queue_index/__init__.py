"""Per-queue index: a journal and segments in the node's LMDB environment, small bodies in chunks.

Mirrors rabbit_queue_index.erl (see index.py and docs/storage.md).
"""

from queue_index.entry import IndexEntry
from queue_index.index import IndexCorrupt, QueueIndex, Recovery, db_names

__all__ = ["IndexCorrupt", "IndexEntry", "QueueIndex", "Recovery", "db_names"]
