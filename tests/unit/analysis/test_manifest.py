"""spark_analysis.manifest: which .events files an incremental run decodes (no Spark)."""

from __future__ import annotations

from spark_analysis.manifest import Entry, FileStat, entries, offsets, plan, replaced

INPUTS = "file:/logs"
LAYOUT = "`kind` string"


def _entry(path, length, modified_ms=1000, events=10, run=1, valid=True, clock="boot-1",
           offset=77, inputs=INPUTS, layout=LAYOUT):
    return Entry(path, length, modified_ms, valid, clock, offset, "leveret@a" if valid else None,
                 5 if valid else None, events, run, inputs, layout)


def test_first_run_reads_everything():
    files = [FileStat("file:/logs/b.events", 10, 1), FileStat("file:/logs/a.events", 5, 1)]
    p = plan(None, files, INPUTS, LAYOUT)
    assert (p.run, p.full) == (1, True)
    assert [f.path for f in p.read] == ["file:/logs/a.events", "file:/logs/b.events"]


def test_unchanged_files_are_kept_new_ones_read_grown_ones_read_past_what_is_stored():
    before = [_entry("file:/logs/a.events", 100, events=7),
              _entry("file:/logs/b.events", 50, events=3),
              _entry("file:/logs/c.events", 0, valid=False, events=0, clock=None, offset=None)]
    now = [FileStat("file:/logs/a.events", 100, 1000),  # unchanged
           FileStat("file:/logs/b.events", 80, 2000),  # grew
           FileStat("file:/logs/c.events", 40, 2000),  # had no header yet, now has
           FileStat("file:/logs/d.events", 60, 2000)]  # new
    p = plan(before, now, INPUTS, LAYOUT)
    assert (p.run, p.full) == (2, False)
    assert [e.path for e in p.kept] == ["file:/logs/a.events"]
    assert [f.path for f in p.read] == ["file:/logs/b.events", "file:/logs/c.events",
                                        "file:/logs/d.events"]
    assert p.skip == {"file:/logs/b.events": 3, "file:/logs/c.events": 0}
    # the known clock keeps its recorded offset; a new clock gets the fresh one
    assert offsets(p, {"boot-1": 99, "boot-2": 5}) == {"boot-1": 77, "boot-2": 5}
    headers = {"file:/logs/b.events": {"node": "leveret@a", "wall_ns": 5},
               "file:/logs/c.events": {"node": "leveret@c", "wall_ns": 6},
               "file:/logs/d.events": {"node": "leveret@d", "wall_ns": 7}}
    assert replaced(p, headers) is None
    after = entries(p, headers, {"file:/logs/b.events": "boot-1", "file:/logs/c.events": "boot-2",
                                 "file:/logs/d.events": "boot-2"},
                    {"boot-1": 77, "boot-2": 5}, {"a.events": 7, "b.events": 9, "c.events": 4,
                                                  "d.events": 6}, INPUTS, LAYOUT)
    got = {e.path.rsplit("/", 1)[1]: (e.run, e.events, e.length, e.valid, e.clock, e.offset)
           for e in after}
    assert got == {"a.events": (1, 7, 100, True, "boot-1", 77),  # (kept as it was)
                   "b.events": (2, 9, 80, True, "boot-1", 77),
                   "c.events": (2, 4, 40, True, "boot-2", 5),
                   "d.events": (2, 6, 60, True, "boot-2", 5)}


def test_anything_that_cannot_be_patched_means_a_full_read():
    before = [_entry("file:/logs/a.events", 100), _entry("file:/logs/b.events", 50)]
    both = [FileStat("file:/logs/a.events", 100, 1000), FileStat("file:/logs/b.events", 50, 1000)]
    assert not plan(before, both, INPUTS, LAYOUT).full
    cases = {
        "gone": ([both[0]], INPUTS, LAYOUT),
        "shorter": ([both[0], FileStat("file:/logs/b.events", 40, 2000)], INPUTS, LAYOUT),
        "rewritten": ([both[0], FileStat("file:/logs/b.events", 50, 2000)], INPUTS, LAYOUT),
        "other inputs": (both, "file:/other", LAYOUT),
        "other columns": (both, INPUTS, LAYOUT + ", `x` int"),
        "same name twice": (both + [FileStat("file:/more/a.events", 1, 1)], INPUTS, LAYOUT),
    }
    for name, (files, inputs, layout) in cases.items():
        p = plan(before, files, inputs, layout)
        assert p.full and p.run == 2, name
        assert sorted(f.path for f in p.read) == sorted(f.path for f in files), name


def test_a_longer_file_under_a_recorded_name_that_is_another_file_is_not_taken_for_grown():
    before = [_entry("file:/logs/a.events", 100, events=7)]
    p = plan(before, [FileStat("file:/logs/a.events", 150, 2000)], INPUTS, LAYOUT)
    assert p.skip == {"file:/logs/a.events": 7}
    assert replaced(p, {"file:/logs/a.events": {"wall_ns": 5}}) is None  # the same file
    assert "a.events was replaced" in replaced(p, {"file:/logs/a.events": {"wall_ns": 9}})
    assert "a.events was replaced" in replaced(p, {})  # no header any more
