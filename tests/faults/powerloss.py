"""Power-loss simulation for the fault tests (tests/faults/test_power_loss.py): what a node's data
dir holds after an OS crash or a power cut, built from what its processes synced.

How it works (see powerloss_shim.c beside this file for the details):
1. `build_shim(tmp)` compiles powerloss_shim.c with the system C compiler into the test's temp dir
   (the test is skipped, saying why, when there is no compiler);
2. the node runs with `shim_env(...)` in its environment: LD_PRELOAD=the shim in the node and in
   every worker it spawns. For every regular file under the data dir the shim keeps, in a shadow
   dir, the image of what is ON DISK: the file's bytes at each fsync / fdatasync / msync(MS_SYNC)
   / syncfs / sync / O_DSYNC write that covered them, whichever process wrote them or synced;
3. `power_cut(broker)` freezes the node and all its descendants at once (SIGSTOP to the whole
   tree, then SIGKILL): nothing runs past the instant of the cut, not even a worker's SIGTERM
   handler (with `until`, a frozen tree that does not satisfy it runs on for a few ms and is
   frozen again: e.g. cut only while dirty_pages() > 0);
4. `restore(data_dir, shadow, mode, seed)` rewrites the data dir as the disk would hold it:
   - mode "drop": every write not followed by a sync is lost: each file becomes its last synced
     image; a file never synced is removed (LMDB's lock file, node.json, ...);
   - mode "reorder": the kernel wrote back an arbitrary subset of the dirty pages before the cut
     (as it does, in no particular order): each 4 KiB page whose crash-time content differs from
     its synced image keeps the crash-time content or the synced one, by a seeded coin; the size
     is the synced one or the crash-time one. This is the case where an LMDB environment opened
     with sync=False/metasync=False can find a meta page pointing at pages that never reached
     the disk.
   The harness knows nothing of the storage layout: it works on whatever files the node writes
   and whatever sync calls it makes.

Not modelled: directory entries (creations, renames and deletions are taken as they are at the
cut; a file never synced is removed whole), a page written back in an intermediate state between
two writes, torn sectors inside a page, writes by fallocate/copy_file_range/io_uring.
"""
from __future__ import annotations

import ctypes
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

SHIM_SOURCE = Path(__file__).with_name("powerloss_shim.c")
PAGE = 4096


def build_shim(tmp: Path) -> Path:
    """Compile the shim into tmp (skip the test when no C compiler is available)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("power-loss simulation needs a C compiler (cc/gcc/clang) to build its "
                    "LD_PRELOAD shim; none found")
    out = tmp / "powerloss_shim.so"
    res = subprocess.run([cc, "-O2", "-Wall", "-Wno-format-truncation", "-shared", "-fPIC", "-o", str(out),
                          str(SHIM_SOURCE), "-ldl", "-lpthread"], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"could not build the power-loss shim with {cc}: {res.stderr[-2000:]}")
    return out


def shim_env(shim: Path, data_dir: Path, shadow: Path, lie: bool = False) -> dict:
    """Environment for a process (and its children) whose writes under data_dir are tracked.
    lie=True: a disk that acknowledges every sync and persists nothing (to show a test fails)."""
    shadow.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {"LD_PRELOAD": str(shim), "POWERLOSS_DIR": os.path.realpath(data_dir),
           "POWERLOSS_SHADOW": os.path.realpath(shadow)}
    if lie:
        env["POWERLOSS_LIE"] = "1"
    return env


class Keys:
    """The shim's key of a file (device, inode, birth time), through its exported function."""

    def __init__(self, shim: Path):
        self.lib = ctypes.CDLL(str(shim))
        self.lib.powerloss_key.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]

    def __call__(self, path: Path) -> str | None:
        buf = ctypes.create_string_buffer(128)
        if self.lib.powerloss_key(os.fsencode(path), buf, 128) != 0:
            return None
        return buf.value.decode()


def process_tree(root: int) -> list[int]:
    """root and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _freeze(root: int) -> list[int]:
    """SIGSTOP root and every descendant until the tree is stable; returns the pids."""
    stopped: list[int] = []
    while True:
        new = [p for p in process_tree(root) if p not in stopped]
        if not new:
            return stopped
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            stopped.append(pid)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def power_cut(broker, until=None, attempts: int = 100, rng: random.Random | None = None) -> int:
    """Stop the node and every descendant at one instant (SIGSTOP to the whole tree), then
    SIGKILL them all and wait until they are gone. `until()`, if given, is asked while the tree
    is frozen: False lets it run again for a few milliseconds and freezes it anew (at most
    `attempts` times), so the cut can be made to fall where something is at stake (e.g.
    dirty_pages() > 0). Returns the number of freezes."""
    rng = rng or random.Random(0)
    for n in range(1, attempts + 1):
        stopped = _freeze(broker.pid)
        if until is None or n == attempts or until():
            break
        _signal_all(list(reversed(stopped)), signal.SIGCONT)
        time.sleep(rng.uniform(0.002, 0.02))
    _signal_all(stopped, signal.SIGKILL)
    broker.proc.wait(10)
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in stopped):
        assert time.monotonic() < deadline, "processes still alive after SIGKILL"
        time.sleep(0.01)
    return n


def _data_pages(fd: int, size: int) -> set[int]:
    """Page numbers of a file's data extents (a sparse file, e.g. a map ftruncate'd to 64 GiB,
    is never read whole)."""
    pages, pos = set(), 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:   # ENXIO: no data after pos
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        pages.update(range(start // PAGE, (end + PAGE - 1) // PAGE))
        pos = end
    return pages


def _page(fd: int, n: int, size: int) -> bytes:
    """Page n of the file as it reads, cut at size (b"" past it)."""
    want = max(0, min(PAGE, size - n * PAGE))
    return os.pread(fd, want, n * PAGE).ljust(want, b"\0") if want else b""


def dirty_pages(data_dir: Path, shadow: Path, keys: "Keys") -> int:
    """Pages of the files that have a synced image whose content now differs from it (what a
    power cut now could lose or tear)."""
    n = 0
    for path in (p for p in data_dir.rglob("*") if p.is_file()):
        key = keys(path)
        img = shadow / f"{key}.img" if key else None
        if img is None or not img.exists():
            continue
        with open(img, "rb") as a, open(path, "rb") as b:
            sa, sb = os.fstat(a.fileno()).st_size, os.fstat(b.fileno()).st_size
            pages = _data_pages(a.fileno(), sa) | _data_pages(b.fileno(), sb)
            n += sum(_page(a.fileno(), i, sa) != _page(b.fileno(), i, sb) for i in pages)
    return n


def _images(shadow: Path) -> dict[str, Path]:
    return {p.name[:-4]: p for p in shadow.glob("*.img")}


def _roll_back(shadow: Path) -> list[str]:
    """Undo the image updates of syncs the cut froze half-way (KEY.undo not empty: the old size,
    then (offset, length, old bytes) records): such a sync had not returned, so the disk holds
    what it held before it. Returns the keys rolled back."""
    rolled = []
    for undo in sorted(shadow.glob("*.undo")):
        raw = undo.read_bytes()
        if not raw:
            continue
        img = undo.with_suffix(".img")
        old_size = int.from_bytes(raw[:8], "little")
        records, pos = [], 8
        while pos + 16 <= len(raw):
            off = int.from_bytes(raw[pos:pos + 8], "little")
            n = int.from_bytes(raw[pos + 8:pos + 16], "little")
            records.append((off, raw[pos + 16:pos + 16 + n]))
            pos += 16 + n
        fd = os.open(img, os.O_RDWR)
        try:
            for off, old in reversed(records):
                os.pwrite(fd, old, off)
            os.ftruncate(fd, old_size)
        finally:
            os.close(fd)
        undo.write_bytes(b"")
        rolled.append(undo.name[:-5])
    return rolled


def restore(data_dir: Path, shadow: Path, keys: Keys, mode: str = "drop",
            seed: int = 0) -> dict:
    """Rewrite data_dir as the disk holds it after the cut (see the module docstring). Returns
    {"kept": [...], "removed": [...], "pages_synced": n, "pages_crash": n, "rolled_back": [keys
    of syncs frozen half-way]} for the report."""
    assert mode in ("drop", "reorder"), mode
    rng = random.Random(seed)
    report = {"kept": [], "removed": [], "pages_synced": 0, "pages_crash": 0,
              "rolled_back": _roll_back(shadow)}
    images = _images(shadow)
    files = sorted(p for p in data_dir.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files:
        rel = str(path.relative_to(data_dir))
        key = keys(path)
        img = images.get(key) if key else None
        if img is None:
            path.unlink()
            report["removed"].append(rel)
            continue
        with open(img, "rb") as a, open(path, "r+b") as b:
            sa, sb = os.fstat(a.fileno()).st_size, os.fstat(b.fileno()).st_size
            size = sa if mode == "drop" or sa == sb or rng.random() < 0.5 else sb
            writes = []   # (page, bytes) where the disk differs from the file as it is now
            for i in sorted(_data_pages(a.fileno(), sa) | _data_pages(b.fileno(), sb)):
                if i * PAGE >= size:
                    continue
                synced, crash = _page(a.fileno(), i, sa), _page(b.fileno(), i, sb)
                page = synced
                if mode == "reorder" and crash != synced:
                    if rng.random() < 0.5:
                        page, report["pages_crash"] = crash, report["pages_crash"] + 1
                    else:
                        report["pages_synced"] += 1
                page = page.ljust(min(PAGE, size - i * PAGE), b"\0")
                if page != crash.ljust(len(page), b"\0")[:len(page)]:
                    writes.append((i, page))
            os.ftruncate(b.fileno(), size)   # in place: sparse files stay sparse
            for i, page in writes:
                os.pwrite(b.fileno(), page, i * PAGE)
        report["kept"].append(rel)
    return report


def sync_events(shadow: Path) -> list[str]:
    """The shim's record of sync calls: "pid call key" lines."""
    p = shadow / "events.log"
    return p.read_text().splitlines() if p.exists() else []
