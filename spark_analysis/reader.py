"""Reads "leveret-events v1" files (actors/events.py) into Spark: a Python data source.

`spark.read.format("leveret-events").load("DIR[,DIR...]")` after `register(spark)`: one input
partition per .events file found (recursively) under the given directories or files, biggest
first; each Python worker reads its file, decodes the msgpack stream with msgpack's C unpacker
and hands Spark Arrow record batches of up to `batchSize` events (no pickled rows, no JVM-side
copy of the raw bytes: measured in docs/events.md). A file cut short by kill -9 is read up to
its last whole event; a file without a v1 header is skipped.

Times: every event carries wall and monotonic nanoseconds taken together, and its process's
hybrid logical clock (actors/hlc.py). `t_ns` is the hybrid clock: its process's monotonic time
mapped onto the wall clock, pushed forward where a message from a process whose clock ran ahead
arrived first, so an event caused by another (through any chain of messages, across hosts) is
always later, and latencies between processes of one host stay exact to the microsecond.
`clock_lead_ns` is how far the hybrid clock ran ahead of the process's own mapped time there:
the clock skew that event's ordering relied on (the report gives the largest). Files of older
writers (no hybrid clock) map monotonic time onto the wall clock once per boot (`mono_ns +
offset[boot_id]`, offset = median of wall - mono over the file headers of that boot).

The decoding functions (`list_files`, `read_header`, `clock_offsets`, `decode`) import neither
pyspark nor anything of Leveret; the data source classes need pyspark >= 4.0.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from typing import Iterator

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis import schema as S

_ARROW = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "boolean": pa.bool_(),
          "binary": pa.binary(), "array<string>": pa.list_(pa.string()),
          "array<binary>": pa.list_(pa.binary()), "array<bigint>": pa.list_(pa.int64())}
ARROW_SCHEMA = pa.schema([(name, _ARROW[typ]) for name, typ in S.COLUMNS])
FIELD_NAMES = [name for name, _ in S.FIELD_COLUMNS]
FIELD_TYPES = [_ARROW[typ] for _, typ in S.FIELD_COLUMNS]
FIELD_INDEX = {name: i for i, name in enumerate(FIELD_NAMES)}
BATCH = 65536  # events per Arrow record batch
_KIND_SET = pa.array(S.KIND_ORDER, pa.string())


def list_files(paths: str | list[str]) -> list[str]:
    """Every .events file under the given directories (recursively) or among the given files;
    `paths` may be a comma-separated string."""
    if isinstance(paths, str):
        paths = [p for p in paths.split(",") if p]
    found = []
    for p in paths:
        if os.path.isfile(p):
            found.append(os.path.abspath(p))
            continue
        for root, _, names in os.walk(p):
            found += [os.path.join(os.path.abspath(root), n) for n in names
                      if n.endswith(".events")]
    return sorted(set(found))


def _unpacker(max_size: int) -> msgpack.Unpacker:
    return msgpack.Unpacker(raw=False, unicode_errors="replace", strict_map_key=False,
                            max_buffer_size=max(max_size, 1 << 16))


def read_header(path: str) -> dict | None:
    """The header map of a v1 file, or None (empty, truncated header, other format)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    unpacker = _unpacker(len(head) + 1)
    unpacker.feed(head)
    try:
        header = next(unpacker)
    except (StopIteration, ValueError, msgpack.UnpackException):
        return None
    if not isinstance(header, dict) or header.get("schema") != S.SCHEMA:
        return None
    return header


def clock_key(header: dict, path: str) -> str:
    """Which monotonic clock a file's events use: its boot, or the file itself if unknown."""
    return header.get("boot_id") or f"file:{path}"


def clock_offsets(headers: dict[str, dict]) -> dict[str, int]:
    """{clock key: wall - mono offset in ns} from {path: header}: the median over the headers
    that share a clock."""
    per_clock: dict[str, list[int]] = {}
    for path, h in headers.items():
        try:
            per_clock.setdefault(clock_key(h, path), []).append(int(h["wall_ns"]) -
                                                                 int(h["mono_ns"]))
        except (KeyError, TypeError, ValueError):
            continue
    return {k: int(statistics.median_low(v)) for k, v in per_clock.items()}


def _coerce(value, typ: pa.DataType):
    """A field value of an unexpected type, made to fit its column (or None)."""
    if value is None:
        return None
    try:
        if typ == pa.string():
            if isinstance(value, (bytes, bytearray)):
                return bytes(value).decode("utf-8", "replace")
            return value if isinstance(value, str) else str(value)
        if typ == pa.int64():
            return int(value) if -2 ** 63 <= int(value) < 2 ** 63 else None
        if typ == pa.bool_():
            return bool(value)
        if typ == pa.binary():
            return bytes(value) if isinstance(value, (bytes, bytearray)) else \
                str(value).encode()
        if typ in (pa.list_(pa.string()), pa.list_(pa.binary()), pa.list_(pa.int64())):
            items = value if isinstance(value, (list, tuple)) else [value]
            return [_coerce(v, typ.value_type) for v in items]
    except (TypeError, ValueError):
        return None
    return None


def _array(values: list, typ: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return pa.array([_coerce(v, typ) for v in values], type=typ)


def _json_default(obj):
    return obj.hex() if isinstance(obj, (bytes, bytearray)) else repr(obj)


def decode(data: bytes, path: str, offset: int | None,
           batch_size: int = BATCH) -> Iterator[pa.RecordBatch]:
    """Record batches (ARROW_SCHEMA) of the events in one file's bytes. `offset` maps its
    monotonic times onto the wall clock (None: use the file header's own)."""
    unpacker = _unpacker(len(data) + 1)
    unpacker.feed(data)
    try:
        header = next(unpacker)
    except (StopIteration, ValueError, msgpack.UnpackException):
        return
    if not isinstance(header, dict) or header.get("schema") != S.SCHEMA:
        return
    if offset is None:
        offset = int(header.get("wall_ns", 0)) - int(header.get("mono_ns", 0))
    node, process = str(header.get("node", "")), str(header.get("process", ""))
    pid, name = int(header.get("pid", 0) or 0), os.path.basename(path)
    run_id = header.get("run_id")
    run_id = str(run_id) if run_id else None
    nfields, index = len(FIELD_NAMES), FIELD_INDEX
    it = iter(unpacker)
    done = False
    while not done:
        kinds, mids, walls, monos, seqs, hlcs = [], [], [], [], [], []
        cols = [[None] * batch_size for _ in range(nfields)]
        extras: list = [None] * batch_size
        i = 0
        try:
            for rec in it:
                if type(rec) is not list or len(rec) < 5:
                    continue  # not an event record: skipped
                kind, mid, wall, mono, fields = rec[0], rec[1], rec[2], rec[3], rec[4]
                kinds.append(kind)
                mids.append(mid)
                walls.append(wall)
                monos.append(mono)
                seqs.append(rec[5] if len(rec) > 5 else None)
                hlcs.append(rec[6] if len(rec) > 6 else None)
                if fields:
                    extra = None
                    for k, v in fields.items():
                        j = index.get(k)
                        if j is None:
                            if extra is None:
                                extra = {}
                            extra[k] = v
                        else:
                            cols[j][i] = v
                    if extra is not None:
                        extras[i] = json.dumps(extra, default=_json_default)
                i += 1
                if i == batch_size:
                    break
            else:
                done = True
        except (ValueError, msgpack.UnpackException):
            done = True  # a damaged tail: keep what came before it
        if not i:
            break
        if i < batch_size:
            cols = [c[:i] for c in cols]
            extras = extras[:i]
        kind_arr = _array(kinds, pa.string())
        mono_arr = _array(monos, pa.int64())
        wall_arr = _array(walls, pa.int64())
        mapped = pc.coalesce(pc.add(mono_arr, pa.scalar(offset, pa.int64())), wall_arr)
        hlc_arr = _array(hlcs, pa.int64())
        t_ns = pc.coalesce(hlc_arr, mapped)
        ranks = pc.fill_null(pc.index_in(kind_arr, value_set=_KIND_SET), len(S.KIND_ORDER))
        arrays = [
            pa.array([node] * i, pa.string()),
            pa.array([process] * i, pa.string()),
            pa.array([pid] * i, pa.int64()),
            pa.array([name] * i, pa.string()),
            kind_arr,
            ranks.cast(pa.int32()),
            _array(mids, pa.binary()),
            t_ns,
            wall_arr,
            mono_arr,
            pa.array([run_id] * i, pa.string()),
            _array(seqs, pa.int64()),
            pc.subtract(hlc_arr, mapped),
        ]
        arrays += [_array(c, typ) for c, typ in zip(cols, FIELD_TYPES)]
        arrays.append(pa.array(extras, pa.string()))
        yield pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def read_dir(paths, batch_size: int = BATCH) -> pa.Table:
    """Every event under `paths` as one Arrow table, decoded here (tests and small logs)."""
    files = list_files(paths)
    headers = {p: h for p in files if (h := read_header(p)) is not None}
    offsets = clock_offsets(headers)
    batches = []
    for p, h in headers.items():
        with open(p, "rb") as f:
            batches += decode(f.read(), p, offsets.get(clock_key(h, p)), batch_size)
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


# -- Spark data source ------------------------------------------------------------------------
try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
except ImportError:  # pyspark < 4.0, or decoding without Spark
    DataSource = DataSourceReader = InputPartition = object


@dataclass
class FilePartition(InputPartition):
    path: str  # one .events file
    offset: int | None  # wall - mono of its clock, None = its own header's


class EventsReader(DataSourceReader):
    def __init__(self, options):
        self.paths = options.get("path") or options.get("paths") or ""  # comma-separated
        self.batch = int(options.get("batchSize", BATCH))  # events per Arrow batch

    def partitions(self):
        files = list_files(self.paths)
        headers = {p: h for p in files if (h := read_header(p)) is not None}
        offsets = clock_offsets(headers)
        order = sorted(headers, key=lambda p: -os.path.getsize(p))
        return [FilePartition(p, offsets.get(clock_key(headers[p], p))) for p in order]

    def read(self, partition):
        with open(partition.path, "rb") as f:
            data = f.read()
        yield from decode(data, partition.path, partition.offset, self.batch)


class EventsDataSource(DataSource):
    """`leveret-events`: the events of .events files, one row per event (schema.COLUMNS)."""

    @classmethod
    def name(cls):
        return "leveret-events"

    def schema(self):
        return S.ddl()

    def reader(self, schema):
        return EventsReader(self.options)


def register(spark) -> None:
    spark.dataSource.register(EventsDataSource)


def load(spark, paths) -> "pyspark.sql.DataFrame":  # noqa: F821
    """The events DataFrame of every .events file under `paths` (list or comma-separated)."""
    if not isinstance(paths, str):
        paths = ",".join(paths)
    return spark.read.format("leveret-events").load(paths)
