"""Small files made durable: written, renamed and unlinked with the data and the directory entry
on disk before the call returns (the Raft journal's dumps, a quorum queue member's log marker)."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """fsync the directory holding `path` (a rename or an unlink in it reaches the disk)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_replace(tmp: str, final: str) -> None:
    """os.replace with the data and the rename on disk."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    fsync_dir(final)
