"""Reads "leveret-events v3" files (actors/events.py), and v2 and v1 files of older writers, into
Spark.

`load(spark, paths, offsets)`: the executors read the files through Hadoop's FileSystem
(Spark's `binaryFile` source: `file://`, `hdfs://`, `s3a://` or plain paths on the default file
system), Spark packs them into input partitions sized from the cluster's parallelism, and a
Python worker decodes each file's msgpack stream with msgpack's C unpacker into Arrow record
batches (a PyArrow UDTF: no pickled rows, no pandas); a v3 kind chunk's columns become Arrow
arrays directly (`_kind_chunk`), anything else goes record by record. `scan` lists the files
(no content read) and `headers` reads their header maps (only the first HEAD_BYTES of each file
reach Python). A file cut short by kill -9 is read up to its last whole chunk (v3) or event
(v2, v1); a file without a v3, v2 or v1 header is skipped. A v3 or v2 record holds its kind's
number and its fields' values in the order of the table its file's header carries
(schema.LAYOUT when written; v3 writes records as columnar chunks, chunk.py, taken apart here
into the same records); they land in the same columns as a v1 record's field map, so the job's
output does not depend on the version.

Times: every event carries wall and monotonic nanoseconds taken together, and its process's
hybrid logical clock (actors/hlc.py). `t_ns` is the hybrid clock: its process's monotonic time
mapped onto the wall clock, pushed forward where a message from a process whose clock ran ahead
arrived first, so an event caused by another (through any chain of messages, across hosts) is
always later, and latencies between processes of one host stay exact to the microsecond.
`clock_lead_ns` is how far the hybrid clock ran ahead of the process's own mapped time there:
the clock skew that event's ordering relied on (the report gives the largest). Files of older
writers (no hybrid clock) map monotonic time onto the wall clock once per boot (`mono_ns +
offset[boot_id]`, offset = median of wall - mono over the file headers of that boot).

The decoding functions (`clock_offsets`, `decode`, and `list_files`, `read_header`, `read_dir`
for logs on the local disk, without Spark) import neither pyspark nor anything of Leveret.
"""

from __future__ import annotations

import json
import os
import posixpath
import statistics
from typing import Iterator

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis import chunk as C
from spark_analysis import schema as S

_ARROW = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "boolean": pa.bool_(),
          "binary": pa.binary(), "array<string>": pa.list_(pa.string()),
          "array<binary>": pa.list_(pa.binary()), "array<bigint>": pa.list_(pa.int64())}
ARROW_SCHEMA = pa.schema([(name, _ARROW[typ]) for name, typ in S.COLUMNS])
FIELD_NAMES = [name for name, _ in S.FIELD_COLUMNS]
FIELD_TYPES = [_ARROW[typ] for _, typ in S.FIELD_COLUMNS]
FIELD_INDEX = {name: i for i, name in enumerate(FIELD_NAMES)}
_ACTOR = FIELD_INDEX["actor"]
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
    """The header map of a v3, v2 or v1 file, or None (empty, truncated header, other format)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return None
    return _header_of(head)


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


def _slots(table) -> list | None:
    """A v3 or v2 header's layout table as, per code, its parts: [(kind, actor, [(value index,
    column index or -1, field name)], declared fields)], one part for an ordinary kind, one per
    part kind for a composite one (which takes the values of the fields its part declares);
    None when the header has no usable table."""
    try:
        by_kind = {str(e[0]): e for e in table}
        out = []
        for entry in table:
            names = list(entry[2])
            parts = entry[3] if len(entry) > 3 else [entry[0]]
            slots = []
            for part in parts:
                _, actor, own = by_kind[part][:3]
                own = set(own)
                slots.append((str(part), actor, [(i, FIELD_INDEX.get(n, -1), n)
                                                 for i, n in enumerate(names) if n in own],
                              len(names)))
            out.append(slots)
        return out
    except (TypeError, ValueError, KeyError, IndexError):
        return None


def _v2_records(objects) -> Iterator:
    """The event records of a v2 stream (an object of another shape is skipped)."""
    for rec in objects:
        if type(rec) is list and len(rec) >= 6:
            yield rec


def _v3_records(objects) -> Iterator:
    """The event records of a v3 stream's chunks, in the order written (an object that is not
    a whole chunk is skipped)."""
    for obj in objects:
        try:
            recs = C.records(obj)
        except (ValueError, TypeError):
            continue
        yield from recs


def decode(data: bytes, path: str, offset: int | None, batch_size: int = BATCH,
           skip: int = 0) -> Iterator[pa.RecordBatch]:
    """Record batches (ARROW_SCHEMA) of the events in one file's bytes. `offset` maps its
    monotonic times onto the wall clock (None: use the file header's own); the first `skip`
    events are left out (an earlier run stored them)."""
    unpacker = _unpacker(len(data) + 1)
    unpacker.feed(data)
    try:
        header = next(unpacker)
    except (StopIteration, ValueError, msgpack.UnpackException):
        return
    if not isinstance(header, dict) or header.get("schema") not in S.SCHEMAS:
        return
    slots = None
    if header["schema"] in S.TABLE_SCHEMAS:
        slots = _slots(header.get("kinds"))
        if slots is None:
            return
    own_offset = int(header.get("wall_ns", 0)) - int(header.get("mono_ns", 0))
    if offset is None:
        offset = own_offset
    node, process = str(header.get("node", "")), str(header.get("process", ""))
    pid, name = int(header.get("pid", 0) or 0), posixpath.basename(path)
    run_id = header.get("run_id")
    run_id = str(run_id) if run_id else None
    if slots is None:
        it = iter(unpacker)
    elif header["schema"] == S.SCHEMA:
        it = _v3_records(unpacker)
    else:
        it = _v2_records(unpacker)
    try:
        while skip > 0:
            rec = next(it)
            if slots is None:
                if type(rec) is list and len(rec) >= 5:
                    skip -= 1
            else:
                try:
                    skip -= len(slots[rec[0]])  # (a composite record's rows are stored together)
                except (IndexError, TypeError):
                    pass
    except (StopIteration, ValueError, msgpack.UnpackException):
        return
    args = (slots, batch_size, own_offset, node, process, pid, name, run_id, offset)
    if header["schema"] == S.SCHEMA and not skip:
        yield from _chunk_batches(unpacker, *args)
    else:
        yield from _record_batches(it, *args)


def _chunk_batches(objects, slots, batch_size, own_offset, node, process, pid, name, run_id,
                   offset) -> Iterator[pa.RecordBatch]:
    """The batches of a v3 stream: a kind chunk's straight from its columns, anything else
    through the record path; gathered into batches of at least `batch_size` events, in the
    order written."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    try:
        for obj in objects:
            b = _kind_chunk(obj, slots, own_offset, node, process, pid, name, run_id, offset)
            got = [b] if b is not None else list(_record_batches(
                _v3_records([obj]), slots, batch_size, own_offset, node, process, pid, name,
                run_id, offset))
            pending += got
            rows += sum(x.num_rows for x in got)
            if rows >= batch_size:
                yield from pa.Table.from_batches(pending).combine_chunks().to_batches()
                pending, rows = [], 0
    except (ValueError, msgpack.UnpackException):
        pass  # a damaged tail: keep what came before it
    if pending:
        yield from pa.Table.from_batches(pending).combine_chunks().to_batches()


def _record_batches(it, slots, batch_size, own_offset, node, process, pid, name, run_id,
                    offset) -> Iterator[pa.RecordBatch]:
    """The batches of a stream's records, one at a time (v1 maps, v2 records, and what a v3
    stream holds besides kind chunks)."""
    nfields, index = len(FIELD_NAMES), FIELD_INDEX
    done = False
    while not done:
        kinds, mids, walls, monos, seqs, hlcs = [], [], [], [], [], []
        # (room for a composite record's parts past the batch's size)
        cols = [[None] * (batch_size + 8) for _ in range(nfields)]
        extras: list = [None] * (batch_size + 8)
        i = 0
        try:
            for rec in it:
                if slots is not None:
                    # v3, v2: [code, msg_id, mono, seq, hlc, values]
                    try:
                        parts = slots[rec[0]]
                        mid, mono, seq, stamp, values = rec[1], rec[2], rec[3], rec[4], rec[5]
                        nvals = len(values)
                    except (IndexError, TypeError):
                        continue
                    many = type(seq) is list
                    for p, (kind, actor, where, declared) in enumerate(parts):
                        kinds.append(kind)
                        mids.append(mid)
                        walls.append(None if mono is None else mono + own_offset)
                        monos.append(mono)
                        if many:
                            seqs.append(seq[p] if p < len(seq) else None)
                            hlcs.append(stamp[p] if type(stamp) is list and p < len(stamp)
                                        else None)
                        elif not p:
                            seqs.append(seq)
                            hlcs.append(stamp)
                        else:  # a composite's later parts: the numbers after the first's
                            seqs.append(seq + p if type(seq) is int else None)
                            hlcs.append(stamp + p if type(stamp) is int else None)
                        if actor is not None:
                            cols[_ACTOR][i] = actor
                        extra = None
                        for k, j, n in where:
                            if k >= nvals:
                                break
                            v = values[k]
                            if v is None:
                                continue
                            if j >= 0:
                                cols[j][i] = v
                            else:
                                if extra is None:
                                    extra = {}
                                extra[n] = v
                        if nvals > declared and type(values[-1]) is dict:
                            # fields the table does not declare (or another actor)
                            for k, v in values[-1].items():
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
                    if i >= batch_size:
                        break
                    continue
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
        if i < len(extras):
            cols = [c[:i] for c in cols]
            extras = extras[:i]
        yield _batch(_array(kinds, pa.string()), _array(mids, pa.binary()),
                     _array(walls, pa.int64()), _array(monos, pa.int64()),
                     _array(seqs, pa.int64()), _array(hlcs, pa.int64()),
                     [_array(c, typ) for c, typ in zip(cols, FIELD_TYPES)],
                     pa.array(extras, pa.string()), i, node, process, pid, name, run_id, offset)


def _batch(kind_arr, mid_arr, wall_arr, mono_arr, seq_arr, hlc_arr, fields, extra_arr, n: int,
           node, process, pid, name, run_id, offset) -> pa.RecordBatch:
    """One ARROW_SCHEMA batch of n events from their record and field columns."""
    mapped = pc.coalesce(pc.add(mono_arr, pa.scalar(offset, pa.int64())), wall_arr)
    t_ns = pc.coalesce(hlc_arr, mapped)
    ranks = pc.fill_null(pc.index_in(kind_arr, value_set=_KIND_SET), len(S.KIND_ORDER))
    arrays = [
        pa.array([node] * n, pa.string()),
        pa.array([process] * n, pa.string()),
        pa.array([pid] * n, pa.int64()),
        pa.array([name] * n, pa.string()),
        kind_arr,
        ranks.cast(pa.int32()),
        mid_arr,
        t_ns,
        wall_arr,
        mono_arr,
        pa.array([run_id] * n, pa.string()),
        seq_arr,
        pc.subtract(hlc_arr, mapped),
    ]
    arrays += fields
    arrays.append(extra_arr)
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _int64_column(column, n: int) -> pa.Array | None:
    """A chunk's int64 column (little-endian bytes, or a list of ints and nils) as an Arrow
    array, or None when it is neither (the record path decides then)."""
    if isinstance(column, (bytes, bytearray)):
        if len(column) != 8 * n or not C._LITTLE:
            return None
        return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(bytes(column))])
    if type(column) is list and len(column) == n and all(
            v is None or type(v) is int for v in column):
        try:
            return pa.array(column, pa.int64())
        except (pa.ArrowInvalid, OverflowError):
            return None
    return None


def _value_column(column, n: int, typ: pa.DataType):
    """A kind chunk's value column as (Arrow array of `typ`, Python list or None): a constant
    ({"v": value}), int64 bytes or a list of n values; None when it is none of those."""
    if type(column) is dict:
        values = [column.get("v")] * n
        return _array(values, typ), values
    if isinstance(column, (bytes, bytearray)):
        if typ == pa.int64():
            arr = _int64_column(column, n)
            return (arr, None) if arr is not None else None
        values = C._ints(column, n)
        return _array(values, typ), values
    if type(column) is list and len(column) == n:
        return _array(column, typ), column
    return None


def _kind_chunk(chunk, slots, own_offset: int, node, process, pid, name, run_id,
                offset) -> pa.RecordBatch | None:
    """The batch of a v3 kind chunk's events, built from its columns (no loop over its
    records), the same rows as the record path gives; None for anything else (a row chunk,
    a column of an unexpected shape, undeclared fields, another actor's map): the record path
    takes it then."""
    if type(chunk) is not list or len(chunk) < 7 or type(chunk[0]) is not int or \
            type(chunk[1]) is not int:
        return None
    n, code, mids, monos, seqs, stamps, values = chunk[:7]
    if type(values) is not list or type(mids) is not list or len(mids) != n or n <= 0 or \
            not 0 <= code < len(slots):
        return None
    parts = slots[code]
    nvals = len(values)
    if any(nvals > declared for *_, declared in parts):
        return None
    mono_arr, seq_arr, hlc_arr = (_int64_column(monos, n), _int64_column(seqs, n),
                                  _int64_column(stamps, n))
    if mono_arr is None or seq_arr is None or hlc_arr is None:
        return None
    try:
        mid_arr = pa.array(mids, pa.binary())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return None
    wall_arr = pc.add(mono_arr, pa.scalar(own_offset, pa.int64()))
    columns: dict[int, tuple] = {}  # value index -> (array, list or None), per field type
    batches = []
    for p, (kind, actor, where, _) in enumerate(parts):
        fields: list = [None] * len(FIELD_NAMES)
        extra_cols = []
        for k, j, fname in where:
            if k >= nvals:
                break
            if j < 0:
                got = _value_column(values[k], n, pa.string())
                if got is None:
                    return None
                vals = got[1] if got[1] is not None else got[0].to_pylist()
                if any(v is not None for v in vals):
                    extra_cols.append((fname, vals))
                continue
            key = (k, j)
            if key not in columns:
                got = _value_column(values[k], n, FIELD_TYPES[j])
                if got is None:
                    return None
                columns[key] = got
            fields[j] = columns[key][0]
        if actor is not None:
            const = pa.array([actor] * n, pa.string())
            fields[_ACTOR] = const if fields[_ACTOR] is None else pc.coalesce(
                fields[_ACTOR], const)
        fields = [pa.nulls(n, typ) if f is None else f for f, typ in zip(fields, FIELD_TYPES)]
        extras = [None] * n
        if extra_cols:
            for i in range(n):
                extra = {f: vals[i] for f, vals in extra_cols if vals[i] is not None}
                if extra:
                    extras[i] = json.dumps(extra, default=_json_default)
        batches.append(_batch(pa.array([kind] * n, pa.string()), mid_arr, wall_arr, mono_arr,
                              seq_arr if not p else pc.add(seq_arr, pa.scalar(p, pa.int64())),
                              hlc_arr if not p else pc.add(hlc_arr, pa.scalar(p, pa.int64())),
                              fields, pa.array(extras, pa.string()), n, node, process, pid,
                              name, run_id, offset))
    if len(batches) == 1:
        return batches[0]
    # a composite record's parts follow each other: part 0 and 1 of the first record, ...
    order = pa.array([p * n + r for r in range(n) for p in range(len(batches))], pa.int64())
    return pa.Table.from_batches(batches).take(order).combine_chunks().to_batches()[0]


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


# -- Spark: listing, headers and decoding through Hadoop's file systems ------------------------
GLOB = "*.events"  # what the listing keeps, at any depth under the given directories
HEAD_BYTES = 16384  # a v3/v2 header map is ~2.5 KB (its layout table), a v1 one a few hundred bytes


def _binary_files(spark, paths: list[str]):
    """Spark's binaryFile source over `paths` (directories searched recursively): path, length,
    modificationTime and content, read by the executors through Hadoop's FileSystem."""
    return (spark.read.format("binaryFile").option("recursiveFileLookup", "true")
            .option("pathGlobFilter", GLOB).load(paths))


def scan(spark, paths: list[str]) -> list:
    """Every .events file under `paths` (manifest.FileStat): the listing alone, no content is
    read. Raises pyspark's AnalysisException for a path that does not exist."""
    from pyspark.sql import functions as F

    from spark_analysis.manifest import FileStat

    rows = _binary_files(spark, paths).select(
        "path", "length", F.unix_millis("modificationTime").alias("modified_ms")).collect()
    return [FileStat(r["path"], int(r["length"]), int(r["modified_ms"])) for r in rows]


def _header_of(data) -> dict | None:
    """The header map at the start of a file's bytes, or None (empty, cut short, other
    format)."""
    unpacker = _unpacker(len(data) + 1)
    unpacker.feed(data)
    try:
        header = next(unpacker)
    except (StopIteration, ValueError, msgpack.UnpackException):
        return None
    if not isinstance(header, dict) or header.get("schema") not in S.SCHEMAS:
        return None
    return header


def _head_reader():
    """The UDTF of `headers`: (path, first bytes) rows in, (path, header as JSON) out."""
    from pyspark.sql.functions import arrow_udtf

    @arrow_udtf(returnType="path string, header string")
    class Heads:
        def eval(self, batch: pa.RecordBatch):
            paths, heads = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            out = []
            for head in heads:
                h = _header_of(head) if head is not None else None
                out.append(None if h is None else json.dumps(h, default=_json_default))
            yield pa.RecordBatch.from_arrays([pa.array(paths, pa.string()),
                                              pa.array(out, pa.string())], ["path", "header"])
    return Heads


def headers(spark, paths: list[str]) -> dict[str, dict]:
    """{path: header map} of the files among `paths` that have a v3, v2 or v1 header: the
    executors read the files, only their first HEAD_BYTES come back to Python, one small row per
    file to the driver."""
    from pyspark.sql import functions as F

    if not paths:
        return {}
    heads = _binary_files(spark, paths).select(
        "path", F.substring("content", 1, HEAD_BYTES).alias("head"))
    rows = _head_reader()(heads.asTable()).collect()
    return {r["path"]: json.loads(r["header"]) for r in rows if r["header"] is not None}


def _decoder(offsets: dict[str, int], skip: dict[str, int], batch_size: int):
    """The UDTF of `load`: (path, content) rows in, ARROW_SCHEMA batches out. A PyArrow-native
    UDTF (pyspark >= 4.1): Arrow in and out of the Python worker, no pandas, no pickled rows."""
    from pyspark.sql.functions import arrow_udtf

    @arrow_udtf(returnType=S.ddl())
    class DecodeEvents:
        def eval(self, batch: pa.RecordBatch):
            paths, contents = batch.column(0).to_pylist(), batch.column(1)
            for i, path in enumerate(paths):
                buf = contents[i].as_buffer()
                if buf is None:
                    continue
                data = memoryview(buf)
                header = _header_of(data[:HEAD_BYTES])
                if header is None:
                    continue
                yield from decode(data, path, offsets.get(clock_key(header, path)), batch_size,
                                  skip.get(path, 0))
    return DecodeEvents


def load(spark, paths: list[str], offsets: dict[str, int], skip: dict[str, int] | None = None,
         batch_size: int = BATCH) -> "pyspark.sql.DataFrame":  # noqa: F821
    """The events DataFrame (schema.COLUMNS) of the .events files `paths`: read by the
    executors through Hadoop's FileSystem (Spark's binaryFile source, one input partition per
    few files, sized by Spark from the cluster's parallelism), decoded in Python workers into
    Arrow batches. `offsets`: {clock key: wall - mono ns}; `skip`: {path: records already
    stored} for files that grew since an earlier run."""
    files = _binary_files(spark, paths).select("path", "content")
    return _decoder(offsets, dict(skip or {}), batch_size)(files.asTable())
