"""The reader and read_file on every file version: v3 chunks (the records' columns, what the
writer writes), v2 records (the kind's number and its values in the order of the table the
file's header carries; a composite record for a publish and its routing) and v1 records (field
maps) of older writers give the same columns. Without Spark (log_reader.read_dir decodes as the
executors do)."""

from __future__ import annotations

import os

import msgpack

from actors import events
from spark_analysis import chunk, log_reader
from spark_analysis import schema as S

MID = bytes(range(16))
OFFSET = 900  # the headers' wall - mono
# (kind, msg_id, wall, mono, fields, hlc): what the actors write on a message's path (a publish
# and its routing at one moment), a field no table declares, a kind whose actor is a field
EVENTS = [
    ("publish_received", MID, 1_000, 100, dict(
        actor="channel", vhost="/", connection="c1", channel=1, seq_no=3, exchange="x",
        routing_key="k", message_id="m-1", persistent=True, size=10), 5_000),
    ("routed", MID, 1_000, 100, dict(actor="channel", vhost="/", queues=["q"],
                                     alternate_exchanges=["ae"]), 5_001),
    ("enqueued", MID, 1_002, 102, dict(actor="queue", vhost="/", queue="q", seq_id=7,
                                       paged=False, durable=True, epoch=0), 5_002),
    ("acked", MID, 1_003, 103, dict(actor="channel", vhost="/", queue="q", connection="c2",
                                    channel=2, delivery_tag=1, requeue=False, novel="x"), 5_003),
    ("queue_crashed", None, 1_004, 104, dict(actor="node", vhost="/", queue="q", worker=1),
     5_004),
    ("tx_committed", None, 1_005, 105, dict(actor="channel", vhost="/", connection="c1",
                                            channel=1, publishes=1, settles=0, msg_ids=[MID]),
     5_005),
]


def _v1_file(path):
    header = {"schema": S.SCHEMA_V1, "node": "n", "process": "p", "pid": 1, "file_no": 0,
              "boot_id": "b", "wall_ns": OFFSET, "mono_ns": 0, "sample": 1, "run_id": "r"}
    with open(path, "wb") as f:
        f.write(msgpack.packb(header))
        for seq, (kind, mid, wall, mono, fields, stamp) in enumerate(EVENTS, 1):
            assert wall == mono + OFFSET  # (as a v2 reader derives it)
            f.write(msgpack.packb([kind, mid, wall, mono, fields, seq, stamp]))


def _v2_file(path):
    """As writers before v3 wrote it: one msgpack array per record, a composite one with a
    number and a stamp per part."""
    header = {"schema": S.SCHEMA_V2, "node": "n", "process": "p", "pid": 1, "file_no": 0,
              "boot_id": "b", "wall_ns": OFFSET, "mono_ns": 0, "sample": 1, "run_id": "r",
              "kinds": S.layout_table()}
    (_, mid, _, mono, published, stamp), (_, _, _, _, routed, stamp2) = EVENTS[:2]
    names = S.LAYOUT["published"][1]
    fields = dict(published, **routed)
    with open(path, "wb") as f:
        f.write(msgpack.packb(header))
        f.write(msgpack.packb([S.CODE["published"], mid, mono, [1, 2], [stamp, stamp2],
                               [fields.get(n) for n in names]]))
        for seq, (kind, mid, wall, mono, fields, stamp) in enumerate(EVENTS[2:], 3):
            names = S.LAYOUT[kind][1]
            extra = {k: v for k, v in fields.items() if k not in names and k != "actor"}
            values = [fields.get(n) for n in names] + ([extra] if extra else [])
            f.write(msgpack.packb([S.CODE[kind], mid, mono, seq, stamp, values]))
    return str(path)


def _v3_file(directory):
    lg = events.EventLog(str(directory), "n", "p", flush_interval=3600, heartbeat_interval=0,
                         run_id="r", boot_id="b", clock=lambda: 0)
    (_, mid, _, mono, published, stamp), (_, _, _, _, routed, _) = EVENTS[:2]
    lg.record("published", mid, mono, dict(published, **routed), stamp)
    for kind, mid, wall, mono, fields, stamp in EVENTS[2:]:
        lg.record(kind, mid, mono, dict(fields), stamp)
    lg.close()
    with open(lg.paths[0], "r+b") as f:  # the header's clocks as the v1 file's
        data = f.read()
        unpacker = msgpack.Unpacker()
        unpacker.feed(data)
        header = next(unpacker)
        rest = data[unpacker.tell():]
    header.update(wall_ns=OFFSET, mono_ns=0)
    with open(lg.paths[0], "wb") as f:
        f.write(msgpack.packb(header) + rest)
    return lg.paths[0]


def _rows(path):
    keep = [name for name, _ in S.COLUMNS if name not in ("file", "pid", "clock_lead_ns")]
    rows = log_reader.read_dir(str(path)).to_pylist()
    rows.sort(key=lambda r: r["seq"])  # (a v3 file holds a chunk per kind)
    return [{k: r[k] for k in keep} for r in rows if r["kind"] not in S.LOG_KINDS]


def test_v3_v2_and_v1_files_give_the_same_columns(tmp_path):
    for v in ("v1", "v2"):
        os.makedirs(tmp_path / v)
    _v1_file(tmp_path / "v1" / "n-p-1-0.events")
    _v2_file(tmp_path / "v2" / "n-p-1-0.events")
    v3 = _v3_file(tmp_path / "v3")
    old, new = _rows(tmp_path / "v1"), _rows(v3)
    assert [r["kind"] for r in new] == [e[0] for e in EVENTS]
    assert new == old
    assert _rows(tmp_path / "v2") == old
    assert [r["seq"] for r in new] == list(range(1, len(EVENTS) + 1))
    assert [r["t_ns"] for r in new[:2]] == [5_000, 5_001]  # a stamp for each part
    assert new[0]["actor"] == "channel" and new[0]["message_id"] == "m-1"
    assert new[1]["alternate_exchanges"] == ["ae"] and new[1]["queues"] == ["q"]
    assert new[3]["extra"] == '{"novel": "x"}' and new[4]["actor"] == "node"
    assert new[5]["msg_ids"] == [MID] and new[5]["extra"] == '{"publishes": 1, "settles": 0}'


def test_read_file_gives_v1_shaped_events_from_every_version(tmp_path):
    _v1_file(tmp_path / "old.events")
    _, old = events.read_file(str(tmp_path / "old.events"))
    old = list(old)
    _, v2 = events.read_file(_v2_file(tmp_path / "v2.events"))
    assert list(v2) == old
    header, new = events.read_file(_v3_file(tmp_path / "v3"))
    assert header["schema"] == "leveret-events v3" and header["kinds"] == S.layout_table()
    new = [e for e in new if e[0] not in S.LOG_KINDS]
    assert new == old


def test_a_file_is_decoded_by_the_table_its_header_carries(tmp_path):
    # another version's table: kinds in another order, a field added at the end of a kind,
    # a kind this reader does not know
    table = [["brand_new", None, ["vhost"]],
             ["acked", "channel", ["vhost", "queue", "delivery_tag", "later"]]]
    recs = [[1, MID, 100, 1, 5_000, ["/", "q", 4, True]], [0, None, 101, 2, 5_001, ["/"]],
            [9, None, 102, 3, 5_002, ["/"]]]  # (no such code: skipped)
    for schema, body in ((S.SCHEMA_V2, [msgpack.packb(r) for r in recs]),
                         (S.SCHEMA, [msgpack.packb(chunk.encode_rows([x for r in recs
                                                                      for x in r]))])):
        header = {"schema": schema, "node": "n", "process": "p", "pid": 1, "file_no": 0,
                  "boot_id": "b", "wall_ns": 900, "mono_ns": 0, "sample": 1, "run_id": "r",
                  "kinds": table}
        d = tmp_path / schema[-2:]
        os.makedirs(d)
        with open(d / "x.events", "wb") as f:
            f.write(msgpack.packb(header) + b"".join(body))
        rows = log_reader.read_dir(str(d)).to_pylist()
        assert [(r["kind"], r["rank"] == len(S.KIND_ORDER)) for r in rows] == \
            [("acked", False), ("brand_new", True)]
        assert (rows[0]["actor"], rows[0]["queue"], rows[0]["delivery_tag"]) == \
            ("channel", "q", 4)
        assert rows[0]["extra"] == '{"later": true}'
