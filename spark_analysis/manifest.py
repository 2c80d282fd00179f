"""Incremental runs: which .events files a run must decode, and OUT/manifest/, the record of what
OUT/events/ already holds (one row per file listed, written through Spark like every output).

Event files only grow (actors/events.py appends whole events and starts a new file past its
size limit), so against the previous run's manifest a file is
- unchanged (same length and modification time): its events are in OUT/events/, not read again;
- new: decoded;
- grown (longer than recorded): decoded, skipping the `events` already stored (a file is a
  stream of whole events, so the stored ones are exactly its first `events` records) -- once
  its header shows it is the file recorded (`replaced`), not a new one under the same name;
- anything else (shorter, rewritten at the same length, gone, the inputs or the column layout
  changed, two files with one name): OUT/events/ cannot be patched, every file is decoded again.

A file's clock offset (reader.clock_offsets) is fixed by the run that first read a file of that
clock: later files of the same boot are mapped with it, so stored times never move.

`plan` is plain Python (unit-tested without Spark); `read` and `write` do the I/O.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass, field

COLUMNS = ("path string, length bigint, modified_ms bigint, valid boolean, clock string, "
           "offset bigint, node string, opened_ns bigint, events bigint, run bigint, "
           "inputs string, layout string")


@dataclass(frozen=True)
class FileStat:
    """A file as the listing saw it."""
    path: str  # qualified URI, as Spark lists it
    length: int  # bytes
    modified_ms: int  # modification time, ms since the epoch


@dataclass(frozen=True)
class Entry:
    """One row of OUT/manifest/: a file listed by a run and what OUT/events/ holds of it."""
    path: str
    length: int  # bytes when it was last read (or listed unchanged)
    modified_ms: int
    valid: bool  # it had a v3, v2 or v1 header (not so a file caught before its header)
    clock: str | None  # reader.clock_key of its header
    offset: int | None  # the wall - mono offset its events were mapped with
    node: str | None  # its header's node
    opened_ns: int | None  # its header's wall clock: which file this is, whatever its name
    events: int  # its rows in OUT/events/: the records a later run skips when it has grown
    run: int  # the run that last decoded it
    inputs: str  # the job's --events, qualified and comma-joined
    layout: str  # schema.ddl() of OUT/events/ when it was written


@dataclass
class Plan:
    run: int  # this run's number (1 for the first run into OUT)
    full: bool  # decode every file and replace OUT/events/
    why: str  # what decided it, for the summary
    read: list[FileStat] = field(default_factory=list)  # files to decode now
    skip: dict[str, int] = field(default_factory=dict)  # path -> stored records to skip
    kept: list[Entry] = field(default_factory=list)  # previous entries still true
    previous: dict[str, Entry] = field(default_factory=dict)  # path -> entry, for grown files


def plan(previous: list[Entry] | None, listing: list[FileStat], inputs: str,
         layout: str) -> Plan:
    """What this run reads (see the module docstring)."""
    run = 1 + max((e.run for e in previous or ()), default=0)

    def full(why: str) -> Plan:
        return Plan(run, True, why, read=sorted(listing, key=lambda f: f.path))

    if not previous:
        return full("no earlier run in OUT")
    if {e.inputs for e in previous} != {inputs}:
        return full("--events differs from the earlier run's")
    if {e.layout for e in previous} != {layout}:
        return full("the events' columns changed since the earlier run")
    names = [posixpath.basename(f.path) for f in listing]
    if len(set(names)) != len(names):
        return full("two .events files share a name")
    now = {f.path: f for f in listing}
    gone = [e.path for e in previous if e.path not in now]
    if gone:
        return full(f"{len(gone)} file(s) gone since the earlier run")
    before = {e.path: e for e in previous}
    p = Plan(run, False, "incremental", previous=before)
    for f in sorted(listing, key=lambda f: f.path):
        e = before.get(f.path)
        if e is None:
            p.read.append(f)
        elif (f.length, f.modified_ms) == (e.length, e.modified_ms):
            p.kept.append(e)
        elif f.length > e.length:
            p.read.append(f)
            p.skip[f.path] = e.events if e.valid else 0
        else:
            return full(f"{posixpath.basename(f.path)} was rewritten since the earlier run")
    return p


def offsets(p: Plan, new_offsets: dict[str, int]) -> dict[str, int]:
    """{clock: offset} for this run's decoding: the recorded offset of every clock an earlier
    run saw, the freshly computed one (reader.clock_offsets over this run's new headers) for
    the others."""
    known = {e.clock: e.offset for e in p.previous.values()
             if e.valid and e.clock is not None and e.offset is not None}
    return {**new_offsets, **known}


def replaced(p: Plan, headers: dict[str, dict]) -> str | None:
    """Why a grown file is not the one recorded (its header is gone or another file's), or
    None. `headers`: path -> header of the files read."""
    for path in p.skip:
        e = p.previous[path]
        h = headers.get(path)
        if e.valid and (h is None or h.get("wall_ns") != e.opened_ns):
            return f"{posixpath.basename(path)} was replaced since the earlier run"
    return None


def entries(p: Plan, headers: dict[str, dict], clock_of: dict[str, str],
            offs: dict[str, int], counts: dict[str, int], inputs: str,
            layout: str) -> list[Entry]:
    """The manifest after this run: the kept entries, and one per file read (`headers`: path ->
    header of the files read whose header is valid; `clock_of`: path -> clock key; `counts`:
    file name -> its rows in OUT/events/ now)."""
    out = list(p.kept)
    for f in p.read:
        h = headers.get(f.path)
        clock = clock_of.get(f.path)
        out.append(Entry(f.path, f.length, f.modified_ms, h is not None, clock,
                         offs.get(clock) if clock is not None else None,
                         str(h.get("node")) if h is not None else None,
                         h.get("wall_ns") if h is not None else None,
                         counts.get(posixpath.basename(f.path), 0) if h is not None else 0,
                         p.run, inputs, layout))
    return sorted(out, key=lambda e: e.path)


# -- I/O -----------------------------------------------------------------------------------
def read(spark, uri: str) -> list[Entry] | None:
    """The manifest at `uri`, or None when there is none."""
    from spark_analysis import hadoop_fs

    if not hadoop_fs.exists(spark, uri):
        return None
    return [Entry(**r.asDict()) for r in spark.read.parquet(uri).collect()]


def write(spark, uri: str, rows: list[Entry]) -> None:
    spark.createDataFrame([asdict(e) for e in rows], COLUMNS).coalesce(1).write.mode(
        "overwrite").parquet(uri)
