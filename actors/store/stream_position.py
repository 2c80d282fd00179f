"""How far this node's log of a replicated stream goes, as a leader election compares it.

Read by the node's metadata actor (actors/node/metadata_cluster.py, LogQuery) in its own
read transaction of the node's LMDB environment, as actors/store/quorum_log.py's
``position`` is for a quorum queue: the epoch is the marker's (quorum_log's file: the epoch
of the leader whose log this one is a prefix of, written by the leader when it starts and by
a member once its join's truncation is done), the offset the log's last.
"""

from __future__ import annotations

from actors.store import quorum_log
from actors.store.storage import Storage, queue_id
from actors.store.stream_log import StreamLog


def log_position(config, vhost: str, name: str) -> list | None:
    """[epoch, last offset] of this node's log of the stream as an election compares it (the
    marker's epoch: that leader's log is what it is a prefix of), or None: no log whose
    epoch is known (a member that never finished a join: it may vote, not lead)."""
    epoch = quorum_log.epoch_of(config, vhost, name)
    if epoch is None:
        return None
    storage = Storage.of(config)
    lg = StreamLog(storage.env, storage.stream_dbs, queue_id(vhost, name), storage.begin,
                   1 << 62)
    return [epoch, lg.next - 1]
