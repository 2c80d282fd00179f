"""Scratch folders of benchmark brokers that outlive a killed run are swept by the next one.

A run ended by SIGKILL or SIGTERM (a timeout, a closed terminal) never reaches its `stop`, and
a deep-queue or persistent run leaves gigabytes behind: such leftovers once filled /tmp, and
the disk alarm then blocked every broker on the machine. Each folder made here names its owner
(PID and the process's start time, so a reused PID does not pass for it); `make` first removes
the folders of the same prefix whose owner is gone.
"""
from __future__ import annotations

import os
import shutil
import tempfile

OWNER = ".owner"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(owner: str) -> bool:
    try:
        pid, started = owner.split()
        return _start_time(int(pid)) == started
    except ValueError:
        return False


def sweep(prefix: str, base: str | None = None) -> list[str]:
    """Remove the folders named `prefix`* under `base` (the temp dir) whose owner is gone;
    folders without an owner file (made elsewhere, or before this module) are left alone."""
    base = base or tempfile.gettempdir()
    gone = []
    try:
        names = [n for n in os.listdir(base) if n.startswith(prefix)]
    except OSError:
        return gone
    for name in names:
        path = os.path.join(base, name)
        try:
            with open(os.path.join(path, OWNER)) as f:
                owner = f.read()
        except OSError:
            continue
        if not _alive(owner):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def make(prefix: str, base: str | None = None) -> str:
    """A new folder `prefix`*, owned by this process, after sweeping its prefix's leftovers."""
    sweep(prefix, base)
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    with open(os.path.join(path, OWNER), "w") as f:
        f.write(f"{os.getpid()} {_start_time(os.getpid())}")
    return path
