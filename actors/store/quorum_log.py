"""A quorum queue member's log on this node, as a leader election reads it.

A member's log is its node's queue index for the queue (the leader's own, or what a member's
Mirror wrote and synced: actors/queue/mirror.py), plus a marker file
`<data_dir>/messages/quorum/<queue id>` that says the index holds a *complete* copy of the log
of the leader of promotion count `epoch` (the queue's `epoch` in the metadata, bumped at each
promotion): written (synced) by a leader when it starts, and by a member once it has
acknowledged the batch that ended its synchronisation; removed (synced) before a member drops
its index to synchronise again, and with the index. No marker: no complete log here (a resync
under way, or nothing), so the member may vote but not lead (actors/core/quorum.py `elect`).

The end of the log is the index's next_seq_id - 1: the highest seq_id ever written and synced
there (the leader numbers messages in order, and a member writes them in that order), which
acks do not lower.

A member whose node restarted offers a live leader of the same epoch the log it kept
(`offer`); the leader then sends only what comes after it (and which of the kept messages it
still holds), as Raft keeps a follower's log and appends what it lacks. Meanwhile the marker is
*partial* (`mark_partial`): the index holds a complete log up to `last` only, whatever the
sync writes after it, and that is the position the member votes with; the sync's end makes it
complete again. `position` is read by the node's metadata actor (a read transaction of the
node's LMDB environment): RabbitMQ's Raft compares (last term, last index) the same way.
"""

from __future__ import annotations

import json
import os

from actors.durable_files import atomic_replace, fsync_dir
from actors.store.storage import Storage, queue_id
from queue_index import QueueIndex


def _dir(config) -> str:
    return os.path.join(config.data_dir, "messages", "quorum")


def _path(config, vhost: str, name: str) -> str:
    return os.path.join(_dir(config), queue_id(vhost, name).hex())


def mark_complete(config, vhost: str, name: str, epoch: int,
                  log_id: str | None = None) -> None:
    """This node's index of the queue holds a complete log of the leader of `epoch` (synced
    before this returns: the acknowledgement or the start that depends on it comes after).
    `log_id`: a member's name for its log in the event log (replica_log.py), kept with it.
    Nothing is written when the marker says so already (a leader restarting where it was)."""
    _write(config, vhost, name, _marker(epoch, log_id))


def mark_partial(config, vhost: str, name: str, epoch: int, last: int,
                 log_id: str | None = None) -> None:
    """The index holds a complete log of the leader of `epoch` up to seq_id `last` (a kept log
    being synchronised: what the sync writes after `last` does not count yet)."""
    _write(config, vhost, name, dict(_marker(epoch, log_id), last=int(last)))


def _marker(epoch: int, log_id: str | None) -> dict:
    marker = {"epoch": int(epoch)}
    if log_id:
        marker["log"] = str(log_id)
    return marker


def log_id_of(config, vhost: str, name: str) -> str | None:
    """The name the member that wrote the marker gave its log in the event log, if any."""
    marker = _read(config, vhost, name)
    log_id = None if marker is None else marker.get("log")
    return log_id if isinstance(log_id, str) else None


def _write(config, vhost: str, name: str, marker: dict) -> None:
    if _read(config, vhost, name) == marker:
        return
    folder = _dir(config)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = _path(config, vhost, name)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(marker).encode())
    finally:
        os.close(fd)
    atomic_replace(tmp, path)


def _read(config, vhost: str, name: str) -> dict | None:
    try:
        with open(_path(config, vhost, name), "rb") as f:
            marker = json.loads(f.read())
        int(marker["epoch"])
        if "last" in marker:
            int(marker["last"])
        return marker
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def mark_incomplete(config, vhost: str, name: str) -> None:
    """The index is about to be dropped (a resync, the queue deleted): no complete log here
    from now on, on disk before anything of the index goes."""
    path = _path(config, vhost, name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(path)


def epoch_of(config, vhost: str, name: str) -> int | None:
    """The epoch of the (complete or partial) log this node holds of the queue, None when it
    holds none."""
    marker = _read(config, vhost, name)
    return None if marker is None else int(marker["epoch"])


def is_partial(config, vhost: str, name: str) -> bool:
    marker = _read(config, vhost, name)
    return marker is not None and "last" in marker


def _last_written(config, vhost: str, name: str) -> int:
    storage = Storage.of(config)
    with storage.begin() as txn:
        nxt = QueueIndex.next_seq_id_of(storage.env, txn, queue_id(vhost, name))
    return max(nxt - 1, 0)


def position(config, vhost: str, name: str) -> list | None:
    """[epoch, last seq_id] of the log this node holds complete of the queue (the last written
    and synced; a partial log's `last`), or None (no complete log here)."""
    marker = _read(config, vhost, name)
    if marker is None:
        return None
    if "last" in marker:
        return [int(marker["epoch"]), int(marker["last"])]
    return [int(marker["epoch"]), _last_written(config, vhost, name)]


def offer(config, vhost: str, name: str) -> list | None:
    """[epoch, last] of a log a leader of that epoch may append to (Mirror's join), or None: a
    complete log, or a partial one with nothing written after its `last` (a sync that wrote
    more and was cut short leaves an index a leader could not append to in order)."""
    marker = _read(config, vhost, name)
    if marker is None:
        return None
    last = _last_written(config, vhost, name)
    if "last" in marker and int(marker["last"]) != last:
        return None
    return [int(marker["epoch"]), last]


def drop_stale(config, keep: set) -> list:
    """Remove the markers of queues whose ids are not in `keep` (boot: queues no longer
    defined here). Returns the ids removed."""
    try:
        names = os.listdir(_dir(config))
    except FileNotFoundError:
        return []
    gone = []
    for n in names:
        try:
            qid = bytes.fromhex(n.removesuffix(".tmp"))
        except ValueError:
            continue
        if qid not in keep or n.endswith(".tmp"):
            try:
                os.unlink(os.path.join(_dir(config), n))
            except FileNotFoundError:
                pass
            gone.append(qid)
    return gone
