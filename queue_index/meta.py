"""QueueMeta: one record per queue with the counters that make recovery O(1).

Updated in the same transaction as the records it counts, so after a crash it is exactly as
consistent as they are; QueueIndex.verify() recomputes it from a scan to prove it.
"""

from __future__ import annotations

import struct

_META = struct.Struct(">QQQQQQQI")


class QueueMeta:
    __slots__ = ("journal", "next_seq_id", "live", "live_bytes", "delivered", "unknown_acks",
                 "unknown_delivers", "segment_entries")

    def __init__(self, segment_entries: int, journal=0, next_seq_id=0, live=0, live_bytes=0,
                 delivered=0, unknown_acks=0, unknown_delivers=0):
        self.journal = journal  # records in the journal now (publish + deliver + ack)
        self.next_seq_id = next_seq_id  # max seq_id ever published + 1
        self.live = live  # entries published and not acked
        self.live_bytes = live_bytes  # sum of their body sizes
        self.delivered = delivered  # live entries delivered at least once
        self.unknown_acks = unknown_acks  # acks of unknown or already acked seq_ids (ignored)
        self.unknown_delivers = unknown_delivers  # delivers of unknown or acked seq_ids (ignored)
        self.segment_entries = segment_entries  # fixed when the queue's first record is written

    def pack(self) -> bytes:
        return _META.pack(self.journal, self.next_seq_id, self.live, self.live_bytes,
                          self.delivered, self.unknown_acks, self.unknown_delivers,
                          self.segment_entries)

    @classmethod
    def unpack(cls, raw: bytes) -> QueueMeta:
        (journal, next_seq_id, live, live_bytes, delivered, unknown_acks, unknown_delivers,
         segment_entries) = _META.unpack(raw)
        return cls(segment_entries, journal, next_seq_id, live, live_bytes, delivered,
                   unknown_acks, unknown_delivers)
