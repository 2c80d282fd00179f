"""Durable storage for pysyncobj's Raft log: every write reaches the disk before Raft acts on it.

Raft's safety rests on a member persisting log entries, its current term and its vote before it
answers anyone (a vote, an append-entries ack, a commit the leader then reports). pysyncobj
0.3.17 (pinned) writes all three without `fsync`: the journal is a memory-mapped file it never
`msync`s, the `.meta` file (term, vote, commit index) and the compaction dump are written and
renamed without `fsync`. A kill -9 loses nothing (the page cache survives the process), but a
power loss or kernel crash could drop a committed definition from a majority and let it be
overwritten.

`install()` closes that gap without forking the library: the journal's `add`,
`deleteEntriesFrom` and `clear` are followed by `msync` + `fsync` of the file (pysyncobj calls
them on its own thread, before it sends the message that depends on them); `.meta` and the dump
are `fsync`ed before their atomic rename and the folder after it. Definitions change rarely, so
one `fsync` per log entry costs nothing measurable on the message path (no message passes
through the log).

It reaches into pysyncobj's private (name-mangled) attributes, so it checks them and fails at
start-up if a new pysyncobj moved them: bump requirements.lock and this module together.
"""

from __future__ import annotations

import os
import shutil

import pysyncobj.serializer as _serializer
import pysyncobj.syncobj as _syncobj
from pysyncobj.journal import FileJournal, MetaStorer
from pysyncobj.pickle import dumps

from actors.durable_files import atomic_replace, fsync_dir


class DurableMetaStorer(MetaStorer):
    """pysyncobj's MetaStorer, with the term and vote on disk before storeMeta returns."""

    def storeMeta(self, meta):  # noqa: N802 - pysyncobj's name
        path = self.getPath()
        with open(path + ".tmp", "wb") as f:
            f.write(dumps(meta))
            f.flush()
            os.fsync(f.fileno())
        shutil.move(path + ".tmp", path)
        fsync_dir(path)


def make_durable_journal(journal: FileJournal) -> None:
    """Sync the journal file after every change pysyncobj makes to it."""
    rfile = journal._FileJournal__journalFile
    mm, f = rfile._ResizableFile__mm, rfile._ResizableFile__f  # noqa: F841 - checked here

    def sync():
        # (re-read: the file re-maps itself when it grows)
        rfile._ResizableFile__mm.flush()  # msync(MS_SYNC) of the mapping
        os.fsync(rfile._ResizableFile__f.fileno())  # and the file's size

    for name in ("add", "deleteEntriesFrom", "clear"):
        original = getattr(journal, name)

        def synced(*args, _original=original):
            result = _original(*args)
            sync()
            return result
        setattr(journal, name, synced)
    old = journal._FileJournal__metaStorer
    journal._FileJournal__metaStorer = DurableMetaStorer(old.getPath())


def durable_journal(journal_file):
    """pysyncobj's createJournal, with a durable FileJournal (journal_file is never None here:
    actors/node/cluster.py always gives one)."""
    journal = FileJournal(journal_file)
    make_durable_journal(journal)
    return journal


def install() -> None:
    """Make every SyncObj created from now on keep its journal, meta file and dumps durable.
    Called before SyncObj() so that nothing is written before (its thread starts at once)."""
    _syncobj.createJournal = durable_journal
    _serializer.atomicReplace = atomic_replace
