"""Lifecycle event log: the per-process writer (schema "leveret-events v3", docs/events.md).

RabbitMQ's firehose (rabbit_trace) republishes publishes and deliveries to an exchange and stamps
them when the tracer reads them; this log records every step of a message (publish received,
routed, enqueued, stored, synced, confirmed, delivered, acked, requeued, expired, dead-lettered,
dropped, ...) with the time it happened, and spark_analysis/ joins the logs of every process of
every node per message.

What it owns, per OS process:
- a run id (random 64 bits, new at every start of the process) and a sequence number that every
  event takes, kept or not: a missing number in a run's files is a hole the analysis reports;
- bounded buffers, one flat list per kind that `put()` and `emit()` extend with an event's
  msg_id, mono_ns, seq, hlc_ns and values (an event whose values are not its kind's, with a
  map of undeclared fields, goes to a row buffer with its code): no record or values object
  kept per event, no lock, no encoding, no IO on the hot path (list.extend of a tuple and
  next() of itertools.count are atomic under the GIL, so any thread may emit, and an event's
  items are never split); an event that finds them full is counted as dropped;
- one background thread that, every FLUSH_INTERVAL seconds or on `flush()`, takes what is in the
  buffers (a slice, then `del` of that slice: extends that race with it land after the slice),
  encodes each kind's as chunks of its columns (spark_analysis/chunk.py: a constant column as
  one value, number columns as int64 bytes, one msgpack call per chunk) and appends them to
  `<data_dir>/events/<node>-<process>-<pid>-<n>.events`, starting file n+1 when the next chunk
  would take the file past `events_max_bytes`; it also writes the log's own markers:
  `process_start` first, a `heartbeat` every HEARTBEAT_INTERVAL, `events_dropped` after events
  were dropped, `process_stop` last on a clean close (a run without it ended in a crash).

File format: a msgpack stream. The first object of every file is a header map (schema, node,
process, pid, file number, boot id, wall and monotonic clocks read together, and the layout
table: every kind's actor and fields, spark_analysis/schema.py); every following object is a
chunk of up to CHUNK events of one kind (or rows), the columns of their records `[code, msg_id,
mono_ns, seq, hlc_ns, values]`: the kind's number in that table and its fields' values in the
table's order, no key strings (hlc_ns: the process's hybrid logical clock, actors/hlc.py,
which orders events across processes and hosts; the wall clock is the monotonic one mapped by
the header's pair, one clock read per event); a drain writes its kinds' chunks by their first
numbers, so a file's events follow each other by kind, their numbers giving the order. A
record of a composite kind (`published`: a publish and its routing, written at one moment by
one actor) stands for one event per part, part i with seq + i and hlc_ns + i (taken
consecutively, or the parts are written as records of their own). A stream needs no
framing, and a file cut short by kill -9 decodes up to its last whole chunk (one write each).

Level (`config.events`): "off" (emit is never reached: callers check `enabled()` first),
"full", or "sampled:N": the events of a message are kept when crc32(msg_id) % N == 0 -- every
event of a sampled message in every process (crc32, unlike hash(), is the same in every process),
none of the others; events without a msg_id are always kept.

Usage (the actors):
    from actors import events
    events.configure(config, process="conn-0", node="leveret@host")   # once per process
    if events.enabled():
        # the per-message kinds: values in the layout's order (schema.LAYOUT), no keywords
        events.put("synced", msg_id, (vhost, queue, seq_id, None))
        # any kind, fields by name (converted to the layout here: for the rare kinds)
        events.emit("queue_started", None, vhost=vh, queue=q, recovered=n)
    events.close()                                                     # before os._exit
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import socket
import threading
import time
import zlib

import msgpack

from actors import faults, hlc
from spark_analysis import chunk as chunks
from spark_analysis import schema as layout

__all__ = ["SCHEMA", "KINDS", "MESSAGE_KINDS", "COPY_KINDS", "PUBLISHER_KINDS", "PROCESS_KINDS",
           "LOG_KINDS", "DEAD_LETTER_KINDS", "REMOVAL_KINDS", "TX_KINDS", "REPLICA_KINDS", "EventLog",
           "configure", "enabled", "emit", "put", "put_published", "keeps", "written",
           "dropped", "run_id", "flush", "close", "sync", "syncs", "SYNC_MODES", "SCHEMAS",
           "values_of",
           "parse_level", "read_file"]

log = logging.getLogger("leveret.events")

SCHEMA = layout.SCHEMA
SCHEMAS = layout.SCHEMAS  # read_file reads these (v1: field maps, from older writers)

# Kinds of the schema, in a message's usual order (spark_analysis breaks timestamp ties by it).
MESSAGE_KINDS = ("publish_received", "routed", "unroutable", "returned")  # the publish, no queue
COPY_KINDS = ("enqueued", "stored", "synced", "delivered", "fetched", "acked", "nacked",
              "rejected", "requeued", "expired", "dead_lettered", "dropped")  # one queue's copy
PUBLISHER_KINDS = ("confirmed", "nacked_to_publisher")  # the answer to the publisher
PROCESS_KINDS = ("queue_crashed", "queue_started", "queue_census", "channel_closed",
                 "connection_closed", "process_crashed")  # no msg_id
LOG_KINDS = ("process_start", "heartbeat", "events_dropped", "process_stop")  # the log's own
# A dead-lettered copy's first event, under its own msg_id: parent, reason, DLX, target queues.
DEAD_LETTER_KINDS = ("dead_letter_published",)
# No msg_id: one event per purge or delete names every copy it removed (seq_below, time).
REMOVAL_KINDS = ("purged", "queue_deleted")
# No msg_id: a transaction's end, its publishes as a list (msg_ids).
TX_KINDS = ("tx_committed", "tx_rolled_back")
# A queue's mirrors and quorum members: a message taken from the master and settled (msg_id,
# queue), all it held dropped, a sync finished, a replica promoted to master (no msg_id).
REPLICA_KINDS = ("replica_enqueued", "replica_settled", "replica_dropped", "replica_synced",
                 "promoted")
KINDS = (MESSAGE_KINDS + COPY_KINDS + PUBLISHER_KINDS + PROCESS_KINDS + LOG_KINDS +
         DEAD_LETTER_KINDS + REMOVAL_KINDS + TX_KINDS + REPLICA_KINDS)
_CODE = layout.CODE  # kind -> its number in a record
_PARTS = {_CODE[k]: len(parts) for k, parts in layout.PARTS.items()}  # composite code -> parts
# composite code -> [(part code, indices of its fields in the composite's values)]: a composite
# whose parts could not take consecutive numbers is written as its parts
_SPLIT = {_CODE[k]: [(_CODE[p], tuple(layout.LAYOUT[k][1].index(f) for f in layout.LAYOUT[p][1]))
                     for p in parts] for k, parts in layout.PARTS.items()}
WIDTH = chunks.WIDTH  # row buffer items per event
HEAD = chunks.HEAD  # kind buffer items per event before its values
_NVALS = tuple(len(layout.LAYOUT[k][1]) for k in _CODE)  # code -> values a kind buffer takes
_INTS = tuple(tuple(f in chunks.INT_FIELDS for f in layout.LAYOUT[k][1]) for k in _CODE)
_NPARTS = tuple(_PARTS.get(code, 1) for code in range(len(_CODE)))  # code -> events it stands for
_NAMES = {kind: fields for kind, (_, fields) in layout.LAYOUT.items()}  # kind -> field names
_NAME_SETS = {kind: frozenset(fields) for kind, fields in _NAMES.items()}  # for emit()'s check
_ACTOR = {kind: actor for kind, (actor, _) in layout.LAYOUT.items()}  # kind -> implied actor
assert set(KINDS) <= set(_CODE), "every kind the writer knows has a layout"

FLUSH_INTERVAL = 0.2  # seconds between background writes
SYNC_MODES = ("off", "write", "fsync")  # config.events_sync: what sync() does before a confirm
HEARTBEAT_INTERVAL = 1.0  # seconds between heartbeat events: how long a silent crash can hide
DEFAULT_MAX_BUFFERED = 250_000  # events held between writes before emit() drops (~0.1 GB)
CHUNK = 4096  # events per chunk (a file rotates between chunks)
DEFAULT_MAX_BYTES = 64 << 20  # rotate files at this size unless config.events_max_bytes says


def parse_level(level: str) -> int:
    """"off" -> 0, "full" -> 1, "sampled:N" -> N (keep 1 message in N)."""
    level = (level or "off").strip().lower()
    if level == "off":
        return 0
    if level == "full":
        return 1
    if level.startswith("sampled:"):
        try:
            n = int(level.split(":", 1)[1])
        except ValueError:
            n = 0
        if n >= 1:
            return n
    raise ValueError(f"events: expected off, full or sampled:N (N >= 1), got {level!r}")


def _boot_id() -> str:
    """Names the monotonic clock: CLOCK_MONOTONIC is one clock for every process of one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _default(obj):
    """msgpack fallback for field values: sets and tuples as lists, anything else as its str."""
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, memoryview):
        return obj.tobytes()
    return str(obj)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "@._-" else "_" for c in name)


def new_run_id() -> str:
    """64 random bits as hex: names one run of one process, never reused after a restart."""
    return os.urandom(8).hex()


def _clock() -> int:
    return time.monotonic_ns()


def _stamp(mono_ns: int) -> int:
    return hlc.clock().at(mono_ns)


def values_of(kind: str, fields: dict) -> tuple:
    """A field map as the kind's record values (the layout's order); an actor other than the
    kind's own and fields the layout does not declare go into one trailing map."""
    names = _NAMES[kind]
    values = tuple(map(fields.get, names))
    known = _NAME_SETS[kind]
    if not fields.keys() <= known:
        extra = {k: v for k, v in fields.items() if k not in known and v is not None and
                 not (k == "actor" and v == _ACTOR[kind])}
        if extra:
            values += (extra,)
    return values


class EventLog:
    """One process run's log: the bounded buffer, the sequence numbers, the background writer
    thread and the current file."""

    def __init__(self, directory: str, node: str, process: str, sample: int = 1,
                 max_bytes: int = DEFAULT_MAX_BYTES, flush_interval: float = FLUSH_INTERVAL,
                 max_buffered: int = DEFAULT_MAX_BUFFERED,
                 heartbeat_interval: float = HEARTBEAT_INTERVAL, run_id: str | None = None,
                 clock=_clock, boot_id: str | None = None):
        self.directory = directory  # <data_dir>/events
        self.node = node  # node name, in the header and the file names
        self.process = process  # "node", "conn-0", "queue-1", ...
        self.run_id = run_id or new_run_id()  # this run of the process, in every header
        self.sample = max(1, sample)  # keep messages with crc32(msg_id) % sample == 0
        self.max_bytes = max(1024, max_bytes)  # rotate before a file passes this size
        self.flush_interval = flush_interval  # seconds between background writes
        self.heartbeat_interval = heartbeat_interval  # seconds between heartbeats, 0: none
        self.clock = clock  # () -> mono_ns of the log's own markers
        self.boot_id = _boot_id() if boot_id is None else boot_id  # names the monotonic clock
        self.pid = os.getpid()  # in the file name and header
        # per code, its events' msg_id, mono_ns, seq, hlc and values, flat (chunk.py)
        self.bufs: list[list] = [[] for _ in _CODE]
        self.adds = [b.extend for b in self.bufs]  # bound once: the hot path's calls
        self.rows: list = []  # events with other values than their kind's: WIDTH items each
        self.add_row = self.rows.extend  # bound once
        self.max_buffered = max(1, max_buffered)  # the buffers' bound, in events
        # sequence numbers drained or dropped: an event numbered `seq` finds about
        # seq - taken[0] events buffered (a box: the hot path reads it without the log)
        self.taken = [0]
        self.parts_drained = 0  # events taken out of the buffers so far (a composite's parts)
        self.next_seq = itertools.count().__next__  # every event's number, kept or dropped
        self.dropped = 0  # events dropped on a full buffer so far
        self.dropped_noted = 0  # of those, how many an events_dropped event has reported
        self.drop_lock = threading.Lock()  # guards `dropped` (taken on the full-buffer path only)
        self.packer = msgpack.Packer(default=_default)  # used by the writer thread only
        self.file = None  # the open .events file
        self.file_no = -1  # n in the file name
        self.file_bytes = 0  # bytes in the current file
        self.paths: list[str] = []  # every file this log wrote, oldest first
        self.written = 0  # events written so far, the log's own markers left out
        self.marks = 0  # the log's own markers appended since the last drain
        self.lock = threading.Lock()  # one drain at a time (writer thread or flush())
        self.wake = threading.Event()  # flush()/close() wake the writer early
        self.closed = False  # close() was called
        self.fsync_files = False  # events_sync fsync: a file rotated out is fsync'd first
        self.unsynced = False  # bytes written since the last fsync
        self.syncs = 0  # sync() calls that wrote or fsync'd something (events_sync)
        self.next_heartbeat = time.monotonic() + heartbeat_interval  # when the writer beats
        os.makedirs(directory, exist_ok=True)
        self.mark("process_start", {})
        self.thread = threading.Thread(target=self._run, name="leveret-events", daemon=True)
        self.thread.start()

    # -- hot path ----------------------------------------------------------------------------
    def emit(self, kind: str, msg_id: bytes | None, fields: dict) -> None:
        if self.sample > 1 and msg_id is not None and zlib.crc32(msg_id) % self.sample:
            return
        mono = time.monotonic_ns()
        self.record(kind, msg_id, mono, fields, _stamp(mono))

    def record(self, kind: str, msg_id: bytes | None, mono_ns: int, fields: dict,
               hlc_ns: int | None = None) -> None:
        """An event with a given time (replays and synthetic logs: bench/events_scale.py; without
        `hlc_ns` the analysis orders it by its monotonic time)."""
        self.record_values(kind, msg_id, mono_ns, values_of(kind, fields), hlc_ns)

    def record_values(self, kind: str, msg_id: bytes | None, mono_ns: int, values: tuple,
                      hlc_ns: int | None = None) -> None:
        """`record` with the values in the layout's order (what `put` takes); a composite kind
        takes a sequence number per part, and its parts share `hlc_ns` plus 0, 1, ..."""
        code = _CODE[kind]
        parts = _PARTS.get(code)
        if parts is None:
            seq = self.next_seq()
            if seq - self.taken[0] < self.max_buffered:
                self.add(code, msg_id, mono_ns, seq, hlc_ns, values)
            else:
                self.overflow()
            return
        seqs = [self.next_seq() for _ in range(parts)]
        stamps = [None] * parts if hlc_ns is None else list(range(hlc_ns, hlc_ns + parts))
        self.composite(code, msg_id, mono_ns, seqs, stamps, values)

    def add(self, code: int, msg_id, mono_ns: int, seq: int, hlc_ns, values) -> None:
        """Buffer one record: in its kind's buffer when it has the kind's values, else as a
        row (one extend either way: atomic, so any thread may add)."""
        if len(values) == _NVALS[code]:
            self.adds[code]((msg_id, mono_ns, seq, hlc_ns) + tuple(values))
        else:
            self.add_row((code, msg_id, mono_ns, seq, hlc_ns, values))

    def composite(self, code: int, msg_id, mono_ns: int, seqs: list, stamps: list,
                  values: tuple) -> None:
        """A composite record, its parts numbered and stamped: one record when the numbers and
        stamps follow each other (what a chunk can say), else its parts as records of their own
        (another thread took a number in between)."""
        if seqs[0] - self.taken[0] >= self.max_buffered:
            for _ in seqs:
                self.overflow()
            return
        first, stamp = seqs[0], stamps[0]
        if seqs == list(range(first, first + len(seqs))) and (
                stamp is None and stamps.count(None) == len(stamps) or
                stamp is not None and stamps == list(range(stamp, stamp + len(stamps)))):
            self.add(code, msg_id, mono_ns, first, stamp, values)
            return
        for (part, where), seq, t in zip(_SPLIT[code], seqs, stamps):
            self.add(part, msg_id, mono_ns, seq, t, tuple(values[i] for i in where))

    def overflow(self) -> None:
        """An event found the buffer full: its sequence number is spent, so the hole shows."""
        with self.drop_lock:
            self.dropped += 1

    def mark(self, kind: str, fields: dict) -> None:
        """One of the log's own events (LOG_KINDS): past the bound, so a full buffer cannot
        hide a heartbeat or the report of its own drops."""
        mono = self.clock()
        self.add(_CODE[kind], None, mono, self.next_seq(), _stamp(mono), values_of(kind, fields))
        self.marks += 1

    def heartbeat(self) -> None:
        self.mark("heartbeat", {"dropped": self.dropped})

    # -- writer ------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self.closed:
            wait = self.flush_interval
            if self.heartbeat_interval:
                wait = min(wait, max(0.0, self.next_heartbeat - time.monotonic()))
            self.wake.wait(wait)
            self.wake.clear()
            if self.closed:
                break
            if self.heartbeat_interval and time.monotonic() >= self.next_heartbeat:
                self.next_heartbeat = time.monotonic() + self.heartbeat_interval
                self.heartbeat()
            try:
                self._drain()
            except Exception:
                log.exception("event log: write failed; events of this round are lost")

    def _note_drops(self) -> None:
        dropped = self.dropped
        if dropped != self.dropped_noted:
            self.mark("events_dropped", {"count": dropped - self.dropped_noted,
                                         "dropped": dropped})
            self.dropped_noted = dropped

    def buffered(self) -> int:
        """Events waiting in the buffers (a composite record as one)."""
        return len(self.rows) // WIDTH + sum(len(b) // (HEAD + _NVALS[code])
                                             for code, b in enumerate(self.bufs))

    def _drain(self) -> None:
        with self.lock:
            self._note_drops()
            taken = []  # (code or None for rows, flat slice)
            for code, buf in enumerate(self.bufs):
                n = len(buf)
                if n:
                    taken.append((code, buf[:n]))
                    del buf[:n]
            n = len(self.rows)
            if n:
                taken.append((None, self.rows[:n]))
                del self.rows[:n]
            if not taken and self.file is not None:
                return
            events = 0  # as the files read back: a composite record counts as its parts
            for code, flat in taken:
                if code is None:
                    events += len(flat) // WIDTH
                    if _PARTS:
                        codes = flat[0::WIDTH]
                        for c, parts in _PARTS.items():
                            events += (parts - 1) * codes.count(c)
                else:
                    events += len(flat) // (HEAD + _NVALS[code]) * _NPARTS[code]
            # (before the write: a write that fails must not leave the bound thinking them held)
            self.parts_drained += events
            self.taken[0] = self.parts_drained + self.dropped
            # the kinds' chunks by their first numbers: a file's numbers stay near its order
            taken.sort(key=_first_seq)
            if self.file is None:
                self._open_next()
            for code, flat in taken:
                step = CHUNK * (WIDTH if code is None else HEAD + _NVALS[code])
                for i in range(0, len(flat), step):
                    self._write_chunk(code, flat[i:i + step])
            self.file.flush()
            # the log's own markers are not counted: a heartbeat every second would keep the
            # metric moving on an idle node (they are appended by the draining thread, or
            # under this lock, before it takes the buffers: a count, not a scan)
            marks, self.marks = self.marks, 0
            self.written += events - marks

    def _write_chunk(self, code: int | None, flat: list) -> None:
        """Encode events as one chunk (a kind's, or rows when `code` is None: their columns,
        one call each) and append it, rotating first when it would take the file past
        max_bytes; a chunk larger than a whole file goes in halves, and one that msgpack
        cannot encode event by event (an event that cannot be encoded is logged and
        dropped)."""
        width = WIDTH if code is None else HEAD + _NVALS[code]
        try:
            data = self.packer.pack(chunks.encode_rows(flat) if code is None else
                                    chunks.encode_kind(code, flat, _INTS[code]))
        except Exception:
            self.packer = msgpack.Packer(default=_default)
            if len(flat) > width:
                for i in range(0, len(flat), width):
                    self._write_chunk(code, flat[i:i + width])
            else:
                log.warning("event log: cannot encode %r, dropped", flat)
            return
        if self.file_bytes + len(data) > self.max_bytes and self.file_bytes > self.header_bytes:
            self._open_next()
        if self.header_bytes + len(data) > self.max_bytes and len(flat) > width:
            half = len(flat) // width // 2 * width
            self._write_chunk(code, flat[:half])
            self._write_chunk(code, flat[half:])
            return
        self._write(data)

    def _write(self, data) -> None:
        self.file.write(data)
        self.file_bytes += len(data)
        self.unsynced = True

    def _open_next(self) -> None:
        if self.file is not None:
            if self.fsync_files:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
        while True:
            self.file_no += 1
            name = f"{_safe(self.node)}-{_safe(self.process)}-{self.pid}-{self.file_no}.events"
            path = os.path.join(self.directory, name)
            try:
                self.file = open(path, "xb")  # a restarted process may reuse a pid: never append
                break
            except FileExistsError:
                continue
        self.paths.append(path)
        mono = time.monotonic_ns()
        header = self.packer.pack({
            "schema": SCHEMA, "node": self.node, "process": self.process, "pid": self.pid,
            "file_no": self.file_no, "host": socket.gethostname(), "boot_id": self.boot_id,
            "wall_ns": mono + hlc.clock().offset, "mono_ns": mono, "sample": self.sample,
            "run_id": self.run_id, "kinds": layout.layout_table()})
        self.file.write(header)
        self.file_bytes = self.header_bytes = len(header)

    # -- control -----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything emitted so far (by this thread) before returning."""
        self._drain()

    def sync(self, fsync: bool) -> None:
        """events_sync: everything emitted so far written to the file (a kill -9 of this
        process cannot take it: it is in the kernel's page cache), and with `fsync` on disk
        (a power cut cannot either)."""
        n = bool(self.rows) or any(self.bufs)  # (something to write)
        self._drain()
        with self.lock:  # (scheduler threads of one process sync at once)
            if fsync and self.unsynced and self.file is not None:
                os.fsync(self.file.fileno())
                self.unsynced = False
                n = n or 1
            if n:
                self.syncs += 1

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.wake.set()
        self.thread.join(timeout=5)
        self._drain()
        self.mark("process_stop", {"dropped": self.dropped})  # the run ended cleanly
        self._drain()
        with self.lock:
            if self.file is not None:
                self.file.close()


def read_file(path: str):
    """(header, iterator of events) of one .events file; a truncated tail ends the iterator.
    Every event comes as [kind, msg_id, wall_ns, mono_ns, fields, seq, hlc_ns] (a v3 or v2
    record mapped back through its header's table, a composite one as its parts, wall_ns its
    monotonic time mapped by the header; absent values left out of `fields`), from v1 files
    too. For tests and tools; spark_analysis/log_reader.py decodes the same format column
    by column."""
    f = open(path, "rb")
    unpacker = msgpack.Unpacker(f, raw=False, max_buffer_size=1 << 30)
    try:
        header = next(unpacker)
    except StopIteration:
        f.close()
        raise ValueError(f"{path}: empty event file")
    if not isinstance(header, dict) or header.get("schema") not in SCHEMAS:
        f.close()
        raise ValueError(f"{path}: not a {' or '.join(SCHEMAS)} file")
    table = header.get("kinds") if header["schema"] in layout.TABLE_SCHEMAS else None
    columnar = header["schema"] == SCHEMA
    offset = header.get("wall_ns", 0) - header.get("mono_ns", 0)

    def v2(rec):
        code, mid, mono, seq, stamp, values = rec
        for i, (kind, fields) in enumerate(layout.parts_of(table, code, values)):
            if type(seq) is list:
                yield [kind, mid, mono + offset, mono, fields, seq[i],
                       stamp[i] if type(stamp) is list else stamp]
            elif not i:
                yield [kind, mid, mono + offset, mono, fields, seq, stamp]
            else:  # (a composite's later parts: the numbers after the first's)
                yield [kind, mid, mono + offset, mono, fields, seq + i,
                       None if stamp is None else stamp + i]

    def events():
        with f:
            try:
                if table is None:
                    yield from unpacker
                elif columnar:
                    for rec in _in_seq_order(unpacker):
                        yield from v2(rec)
                else:
                    for rec in unpacker:
                        yield from v2(rec)
            except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError):
                return

    return header, events()


def _first_seq(taken) -> int:
    """The number of the first event of a drained slice (a kind's or the rows')."""
    code, flat = taken
    return flat[3] if code is None else flat[2]


def _in_seq_order(chunk_objects):
    """A v3 file's records in the order of their numbers (a drain writes a chunk per kind):
    what tests and tools expect to read, as from a v2 file."""
    recs = []
    try:
        for obj in chunk_objects:
            recs += chunks.records(obj)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError):
        pass  # a damaged tail: what came before it
    recs.sort(key=_seq_of)
    return recs


def _seq_of(rec):
    seq = rec[3]
    return seq if type(seq) is int else -1


# -- the process-wide log: module functions the actors call -------------------------------------
_log: EventLog | None = None  # this process's log, None when off
_sample = 0  # 0 off, 1 full, N sampled:N -- read by emit()
_sync_mode = 0  # events_sync: 0 off, 1 write, 2 fsync -- read by sync()
_drop = lambda event: None  # what the buffers' extends are while off
_adds = [_drop] * len(_CODE)  # per code, the log's kind buffer's extend while on
_add_row = _drop  # the log's row buffer's extend while on
_nvals = _NVALS  # code -> values a kind buffer takes (a module global read on the hot path)
_code = _CODE  # kind -> record code (a module global read on the hot path)
_PUBLISHED = _CODE["published"]
_NVALS_PUBLISHED = _NVALS[_PUBLISHED]
_next_seq = _overflow = lambda: 0  # the log's sequence numbers and drop counter while on
_taken = [0]  # the log's count of numbers drained or dropped while on (EventLog.taken)
_max_buffered = 0  # the log's bound while on, in events
_crc32, _mono = zlib.crc32, time.monotonic_ns
_run = (0, "")  # (pid, run id): a forked child is a new run
_at = hlc.clock().at  # this process's hybrid clock (replaced by a test-only skew)


def run_id() -> str:
    """This process run's id, with events on or off: connection ids carry it, so ids from two
    runs of one node never meet (the log's headers name the same run)."""
    global _run
    pid = os.getpid()
    if _run[0] != pid:
        _run = (pid, new_run_id())
    return _run[1]


def configure(config, process: str, node: str) -> None:
    """Start this process's log from `config.events` (closing one started before)."""
    global _log, _sample, _adds, _add_row, _next_seq, _taken, _max_buffered, _overflow, _at
    global _sync_mode
    close()
    sample = parse_level(getattr(config, "events", "off"))
    if not sample:
        return
    mode = getattr(config, "events_sync", "off")
    if mode not in SYNC_MODES:
        raise ValueError(f"events_sync must be one of {', '.join(SYNC_MODES)}, not {mode!r}")
    directory = os.path.join(getattr(config, "data_dir", "./var"), "events")
    max_bytes = int(getattr(config, "events_max_bytes", DEFAULT_MAX_BYTES))
    max_buffered = int(getattr(config, "events_max_buffered", DEFAULT_MAX_BUFFERED))
    boot_id = None
    skew = faults.clock_skew_ns(process, getattr(config, "host", ""))
    if skew:
        # a process standing for another host: its own clock, which the analysis may not map
        # through this machine's monotonic clock
        hlc.set_skew(skew)
        boot_id = f"{_boot_id()}+skew:{process}"
    _log = EventLog(directory, node, process, sample, max_bytes, max_buffered=max_buffered,
                    run_id=run_id(), boot_id=boot_id)
    _adds, _add_row, _next_seq = _log.adds, _log.add_row, _log.next_seq
    _taken, _max_buffered, _overflow = _log.taken, _log.max_buffered, _log.overflow
    _at = hlc.clock().at
    _sample = sample
    _sync_mode = SYNC_MODES.index(mode)
    _log.fsync_files = mode == "fsync"


def enabled() -> bool:
    return _sample != 0


def keeps(msg_id: bytes | None) -> bool:
    """Whether this message's events are kept (on, and sampled when sampled:N): a caller that
    builds several events of one message asks once and skips them all."""
    if _sample == 1:
        return True
    return bool(_sample) and (msg_id is None or not _crc32(msg_id) % _sample)


def put(kind: str, msg_id: bytes | None, values: tuple) -> None:
    """Append one event with its fields' values in the layout's order (schema.LAYOUT: the
    per-message kinds' hot path, no keyword map to build or encode); the monotonic time, the
    hybrid clock's stamp and the next sequence number are taken here, encoding and IO later
    on the log's thread; `values` a tuple (its items go into the kind's buffer, flattened).
    Values: str, int, float, bool, bytes, None, lists/tuples of them. A full buffer drops the
    event and counts it."""
    if _sample != 1:
        if not _sample or (msg_id is not None and _crc32(msg_id) % _sample):
            return
    seq = _next_seq()
    if seq - _taken[0] < _max_buffered:
        mono = _mono()
        code = _code[kind]
        if len(values) == _nvals[code]:
            _adds[code]((msg_id, mono, seq, _at(mono)) + values)
        else:
            _add_row((code, msg_id, mono, seq, _at(mono), values))
    else:
        _overflow()


def put_published(msg_id: bytes | None, values: tuple) -> None:
    """A publish and its routing as one record (the composite kind `published`: the fields of
    publish_received, then routed's): one call, one clock read and one record where two events
    took two, each part with its own sequence number and stamp (the second ones the first's
    plus one: what the chunk says; in the rare turn where another thread took a number or moved
    the clock in between, the two parts are buffered as records of their own)."""
    if _sample != 1:
        if not _sample or (msg_id is not None and _crc32(msg_id) % _sample):
            return
    seq = _next_seq()
    seq2 = _next_seq()
    if seq - _taken[0] < _max_buffered:
        mono = _mono()
        stamp = _at(mono)
        stamp2 = _at(mono)
        if seq2 == seq + 1 and stamp2 == stamp + 1 and len(values) == _NVALS_PUBLISHED:
            _adds[_PUBLISHED]((msg_id, mono, seq, stamp) + values)
        else:
            lg = _log
            if lg is not None:  # (not closed meanwhile)
                lg.composite(_PUBLISHED, msg_id, mono, [seq, seq2], [stamp, stamp2], values)
    else:
        _overflow()
        _overflow()


def emit(kind: str, msg_id: bytes | None = None, **fields) -> None:
    """`put` with the fields by name (converted to the layout's order here): for the kinds
    that are not on a message's path, where a keyword call reads better than its cost."""
    if _sample != 1:
        if not _sample or (msg_id is not None and _crc32(msg_id) % _sample):
            return
    put(kind, msg_id, values_of(kind, fields))


def written() -> int:
    """Events this process's log has written to its files so far (a composite record counts as
    the events it stands for), its own markers (LOG_KINDS) left out (0 when off)."""
    lg = _log
    return lg.written if lg is not None else 0


def dropped() -> int:
    """Events this process's log dropped on a full buffer so far (0 when off)."""
    lg = _log
    return lg.dropped if lg is not None else 0


def flush() -> None:
    """Write everything emitted so far before returning."""
    if _log is not None:
        _log.flush()


def sync() -> None:
    """Called where a publisher confirm leaves this process (the queue's Confirm to the
    channel, a mirror's acknowledgement to its master, the channel's basic.ack): with
    `events_sync` on, the events emitted so far are written (`write`) or fsync'd (`fsync`)
    first; off, nothing (one global read)."""
    if _sync_mode and _log is not None:
        _log.sync(_sync_mode == 2)


def syncs() -> int:
    """How many sync() calls had events to write (0 when off)."""
    lg = _log
    return lg.syncs if lg is not None else 0


def close() -> None:
    """Write what is buffered, then the `process_stop` marker, and close the file; emit() is
    a no-op afterwards. Call it before os._exit (atexit does not run then); kill -9 loses at
    most FLUSH_INTERVAL of events, and the run's missing stop marker says so."""
    global _log, _sample, _adds, _add_row, _sync_mode
    _sample = 0
    _sync_mode = 0
    _adds, _add_row = [_drop] * len(_CODE), _drop
    if _log is not None:
        lg, _log = _log, None
        lg.close()


atexit.register(close)
