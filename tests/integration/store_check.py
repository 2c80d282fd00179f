"""The message store of a node that is not running, checked record by record (fault and paging
tests).

After a kill -9 or a simulated power cut, and before the node starts again on the data dir:
every queue index must pass QueueIndex.verify() (its meta record, segment counts and chunk live
counts agree with its records; no live record points outside its chunk), every live entry's body
must be where its record says (its chunk, or msg_store), and every msg_store body must be
referenced by exactly as many live entries as its refcount says. The drain that follows proves
what the clients were promised; this proves the store itself was left consistent.
"""
from __future__ import annotations

from pathlib import Path

import lmdb

from msg_store import MsgStore
from queue_index import QueueIndex


def verify_store(data_dir: Path) -> dict:
    """Check the store under data_dir/messages; returns figures (queues, live entries, chunks,
    msg_store bodies). Raises AssertionError (IndexCorrupt's text included) on any mismatch."""
    path = Path(data_dir) / "messages"
    if not (path / "data.mdb").exists():
        return {"queues": 0, "live": 0, "chunks": 0, "bodies": 0}
    env = lmdb.open(str(path), subdir=True, map_size=64 << 30, readahead=False,
                    max_dbs=len(MsgStore.db_names()) + len(QueueIndex.db_names()) + 1)
    try:
        ms = MsgStore(env)
        with env.begin() as txn:
            qids = QueueIndex.queue_ids(env, txn)
        indexes = [QueueIndex(env, q) for q in qids]
        live = chunks = 0
        refs: dict[bytes, int] = {}  # msg_id -> live entries naming it
        with env.begin() as txn:
            for qi in indexes:
                try:
                    rec = qi.verify(txn)
                except ValueError as e:  # IndexCorrupt
                    raise AssertionError(f"queue index corrupt: {e}") from e
                entries = qi.read(txn, -1, 1 << 40)
                assert len(entries) == rec.live, (qi.queue_id, len(entries), rec)
                for e in entries:
                    if qi.embeds(e.body_size):
                        assert e.body is not None and len(e.body) == e.body_size, \
                            f"queue {qi.queue_id!r}: seq_id {e.seq_id} lost its body"
                    else:
                        assert ms.get(txn, e.msg_id) is not None, \
                            f"queue {qi.queue_id!r}: seq_id {e.seq_id}'s body not in msg_store"
                        refs[e.msg_id] = refs.get(e.msg_id, 0) + 1
                live += rec.live
                chunks += qi.stats(txn)["chunks"]
            stored = {}
            for msg_id in txn.cursor(db=ms._refs).iternext(values=False):
                stored[msg_id] = ms.refcount(txn, msg_id)
        assert stored == refs, \
            f"msg_store refcounts disagree with the live entries: " \
            f"{len(set(stored) ^ set(refs))} ids differ, " \
            f"{sum(stored[m] != refs[m] for m in set(stored) & set(refs))} counts differ"
        return {"queues": len(qids), "live": live, "chunks": chunks, "bodies": len(stored)}
    finally:
        env.close()
