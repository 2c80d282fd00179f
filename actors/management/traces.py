"""Lifecycle traces where operators look (issue 14 item 7): the reports `make analyze` wrote
under the node's data directory, the messages of one, and one message's lifecycle step by step
(kind, actor, node, process, time, and what the step names), read from the Spark job's Parquet
output with pyarrow (no Spark in the node).

An analysis is a folder of the data directory holding the job's `events/` and `lifecycles/`
(`make analyze` writes `<data_dir>/analysis`; `--out` may name any other folder there).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from actors.management.api import ApiError, bad_request, not_found

# lifecycle columns shown in the list of messages (the rest: nested, for the job's report)
LIST_COLUMNS = ("msg_id", "message_id", "vhost", "exchange", "routing_key", "final_state",
                "redeliveries", "n_events", "persistent")
STEP_FIELDS = ("queue", "connection", "channel", "delivery_tag", "consumer_tag", "exchange",
               "routing_key", "redelivered", "requeue", "reason", "where", "no_ack", "count",
               "queues", "new_msg_id", "parent_msg_id")


def analyses(data_dir: str) -> list:
    """[{name, report, messages}] of every analysis folder in the data directory."""
    import pyarrow.dataset as ds  # here, not at import: pyarrow adds 0.3 s to every node's start
    out = []
    root = Path(data_dir)
    if not root.is_dir():
        return out
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if (folder / "events").is_dir() and (folder / "lifecycles").is_dir():
            try:
                n = ds.dataset(folder / "lifecycles", format="parquet").count_rows()
            except (OSError, ValueError) as e:
                n = f"unreadable: {e}"
            out.append({"name": folder.name, "messages": n,
                        "report": (folder / "report.html").is_file(),
                        "written_at": datetime.datetime.fromtimestamp(
                            (folder / "lifecycles").stat().st_mtime,
                            datetime.timezone.utc).isoformat()})
    return out


def folder(data_dir: str, name: str) -> Path:
    """The analysis folder `name` (a plain name of the data directory, nothing else)."""
    if not name or name != os.path.basename(name) or name in (".", ".."):
        raise bad_request("an analysis is named by its folder in the data directory")
    path = Path(data_dir) / name
    if not ((path / "events").is_dir() and (path / "lifecycles").is_dir()):
        raise not_found(f"no analysis '{name}' in the data directory")
    return path


def messages(path: Path, limit: int = 10000) -> list:
    """The analysed messages (one row each), at most `limit`."""
    import pyarrow.dataset as ds
    data = ds.dataset(path / "lifecycles", format="parquet")
    cols = [c for c in LIST_COLUMNS if c in data.schema.names]
    table = data.head(limit, columns=cols)
    return [_plain(r) for r in table.to_pylist()]


def lifecycle(path: Path, ref: str) -> dict:
    """One message's steps in order: `ref` is its msg_id (hex) or the publisher's
    message_id."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    events = ds.dataset(path / "events", format="parquet")
    # a publisher's message_id names its own message, not the copies dead-lettering made of it
    # (they carry it too, and are found by their msg_id, which their parent's trace shows)
    conds = [(pc.field("message_id") == ref) & (pc.field("kind") != "dead_letter_published")]
    try:
        conds.append(pc.field("msg_id") == bytes.fromhex(ref))
    except ValueError:
        pass
    cond = conds[0] if len(conds) == 1 else conds[0] | conds[1]
    ids = {r["msg_id"] for r in events.to_table(columns=["msg_id"], filter=cond).to_pylist()
           if r["msg_id"]}
    if not ids:
        raise not_found(f"no message '{ref}' in this analysis")
    if len(ids) > 1:
        raise ApiError(409, "ambiguous", f"message_id '{ref}' names {len(ids)} messages; "
                       "ask by msg_id: " + ", ".join(sorted(i.hex() for i in ids)))
    msg_id = ids.pop()
    cols = [c for c in ("kind", "rank", "t_ns", "actor", "node", "process", "pid",
                        "message_id", *STEP_FIELDS) if c in events.schema.names]
    rows = events.to_table(columns=cols, filter=pc.field("msg_id") == msg_id).to_pylist()
    rows.sort(key=lambda r: (r["t_ns"] or 0, r["rank"] or 0))
    t0 = rows[0]["t_ns"] if rows else 0
    steps = []
    for r in rows:
        step = {"kind": r["kind"], "actor": r.get("actor"), "node": r.get("node"),
                "process": r.get("process"), "pid": r.get("pid"),
                "time": _iso(r["t_ns"]), "after_ms": round((r["t_ns"] - t0) / 1e6, 3)}
        step.update({k: _plain(r[k]) for k in STEP_FIELDS if r.get(k) is not None})
        steps.append(step)
    message_id = next((r["message_id"] for r in rows if r.get("message_id")), None)
    return {"msg_id": msg_id.hex(), "message_id": message_id, "steps": steps}


def _iso(t_ns) -> str | None:
    if t_ns is None:
        return None
    return datetime.datetime.fromtimestamp(t_ns / 1e9, datetime.timezone.utc).isoformat(
        timespec="microseconds")


def _plain(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value
