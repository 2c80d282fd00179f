"""Scratch folders of killed benchmark runs are swept by the next run (bench/scratch.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from bench import scratch


def test_a_folder_whose_owner_died_is_swept_and_a_live_owners_is_kept(tmp_path):
    mine = scratch.make("lv-x-", str(tmp_path))
    # a folder made by a process that has ended (as a run killed by SIGKILL leaves it)
    code = "from bench import scratch; print(scratch.make('lv-x-', %r))" % str(tmp_path)
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout.strip()
    with open(os.path.join(dead, "big"), "wb") as f:
        f.write(b"x" * 1000)
    foreign = tmp_path / "lv-x-foreign"  # no owner file: not ours to remove
    foreign.mkdir()
    other = scratch.make("lv-y-", str(tmp_path))
    os.remove(os.path.join(other, scratch.OWNER))
    with open(os.path.join(other, scratch.OWNER), "w") as f:
        f.write(f"{os.getpid()} 1")  # a reused PID: the start time does not match

    new = scratch.make("lv-x-", str(tmp_path))
    assert os.path.isdir(mine) and os.path.isdir(new) and foreign.is_dir()
    assert not os.path.exists(dead)
    assert os.path.isdir(other)  # another prefix is not swept by this one
    assert scratch.sweep("lv-y-", str(tmp_path)) == [other]
