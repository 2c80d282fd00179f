"""Group commit across backing queues (behaviour C7): every queue of a worker shares one LMDB
environment, so one sync covers what all of them wrote before it, and a later sync of a queue
whose writes it covered costs no fsync."""

from __future__ import annotations

from actors.config import Config
from actors.queue.storage import Storage


def test_a_sync_covers_every_write_before_it_and_the_next_one_is_skipped(tmp_path, monkeypatch):
    s = Storage(Config(data_dir=str(tmp_path), storage_map_size=1 << 24))
    fsyncs = []
    monkeypatch.setattr(s, "env", _CountingEnv(s.env, fsyncs))
    with s.env.begin(write=True) as txn:
        txn.put(b"a", b"1")
    first = s.committed()
    with s.env.begin(write=True) as txn:
        txn.put(b"b", b"2")
    second = s.committed()
    assert s.sync_upto(first) is True  # queue A syncs: both writes are on disk now
    assert s.sync_upto(second) is False  # queue B's write was covered: no fsync
    assert len(fsyncs) == 1
    with s.env.begin(write=True) as txn:
        txn.put(b"c", b"3")
    assert s.sync_upto(s.committed()) is True  # a write after the sync needs a new one
    assert len(fsyncs) == 2


class _CountingEnv:
    def __init__(self, env, calls):
        self._env, self._calls = env, calls

    def sync(self, force=False):
        self._calls.append(force)
        return self._env.sync(force)

    def __getattr__(self, name):
        return getattr(self._env, name)
