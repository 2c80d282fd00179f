"""actors/node/raft_storage.py: pysyncobj's journal, term/vote and dumps reach the disk (fsync)
before pysyncobj acts on them, and what they hold reads back after a reopen."""

from __future__ import annotations

import os
import time

import pytest
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.journal import FileJournal

from actors.node import raft_storage
from conftest import free_port


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync call, as the path of the file (or folder) synced."""
    calls = []
    real = os.fsync

    def spy(fd):
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)
    monkeypatch.setattr(os, "fsync", spy)
    return calls


def test_each_journal_change_is_synced_and_reads_back(tmp_path, fsyncs):
    path = str(tmp_path / "raft.journal")
    journal = raft_storage.durable_journal(path)
    for idx in range(1, 4):
        before = len(fsyncs)
        journal.add(b"entry %d" % idx, idx, 1)
        assert fsyncs[before:] == [path]  # synced before add returns
    before = len(fsyncs)
    journal.deleteEntriesFrom(2)
    assert fsyncs[before:] == [path]
    journal._destroy()
    again = FileJournal(path)
    assert [again[i][:2] for i in range(len(again))] == [(b"entry 1", 1), (b"entry 2", 2)]


def test_term_and_vote_are_synced_before_set_returns(tmp_path, fsyncs):
    path = str(tmp_path / "raft.journal")
    journal = raft_storage.durable_journal(path)
    journal.setCurrentTerm(7, "127.0.0.1:1")
    assert path + ".meta.tmp" in fsyncs and str(tmp_path) in fsyncs
    journal._destroy()
    again = FileJournal(path)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, "127.0.0.1:1")


class Counter(SyncObj):
    def __init__(self, me, conf):
        super().__init__(me, [], conf)
        self.n = 0

    @replicated
    def incr(self):
        self.n += 1
        return self.n


def test_installed_syncobj_syncs_its_log_and_dump(tmp_path, fsyncs):
    """A one-member SyncObj created after install(): its entries are synced as they are
    appended and its compaction dump is synced before the rename."""
    raft_storage.install()
    journal = str(tmp_path / "raft.journal")
    dump = str(tmp_path / "raft.dump")
    conf = SyncObjConf(journalFile=journal, fullDumpFile=dump, useFork=False,
                       logCompactionMinEntries=3, logCompactionMinTime=0.01,
                       raftMinTimeout=0.4, raftMaxTimeout=0.6, appendEntriesPeriod=0.1)
    obj = Counter(f"127.0.0.1:{free_port()}", conf)
    try:
        for i in range(1, 6):
            assert obj.incr(sync=True, timeout=10) == i
        assert journal in fsyncs
        deadline = time.monotonic() + 10
        while not os.path.exists(dump) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dump + ".tmp" in fsyncs  # the dump went through the synced rename
    finally:
        obj.destroy_synchronous()
