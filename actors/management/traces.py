"""Lifecycle traces where operators look: the reports `make analyze` wrote
under the node's data directory, the messages of one, and one message's lifecycle step by step
(kind, actor, node, process, time, and what the step names), read from the Spark job's Parquet
output with pyarrow (no Spark in the node).

An analysis is a folder of the data directory holding the job's `events/` and `lifecycles/`
(`make analyze` writes `<data_dir>/analysis`; `--out` may name any other folder there).
Messages are found by msg_id, by a key a client set or an operator knows (spark_analysis/
lookup.py: message_id, correlation_id, traceparent, routing key, queue) or by the time they
were published; in the job's `lookup/` layout (sorted, small row groups: a lookup reads a few
of them) when the analysis has one, else by a scan of `events/`.
"""

from __future__ import annotations

import datetime
import decimal
import os
from pathlib import Path

from actors.management.api import ApiError, bad_request, not_found
from spark_analysis import lookup

# lifecycle columns shown in the list of messages (the rest: nested, for the job's report)
LIST_COLUMNS = ("msg_id", "message_id", "vhost", "exchange", "routing_key", "final_state",
                "redeliveries", "n_events", "persistent")
STEP_FIELDS = ("queue", "connection", "channel", "delivery_tag", "consumer_tag", "exchange",
               "routing_key", "redelivered", "requeue", "reason", "where", "no_ack", "count",
               "queues", "new_msg_id", "parent_msg_id", "source_queue")


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
    # a publisher's message_id names its own message, not the copies dead-lettering made of it
    # (they carry it too, and are found by their msg_id, which their parent's trace shows)
    ids = {r["msg_id"] for r in find(path, "message_id", ref, limit=50)}
    if not ids:
        return message_path(path, ref)  # a msg_id in hex, or no such message
    if len(ids) > 1:
        raise ApiError(409, "ambiguous", f"message_id '{ref}' names {len(ids)} messages; "
                       "ask by msg_id: " + ", ".join(sorted(ids)))
    return message_path(path, ids.pop())


# --- finding messages: the job's lookup/ layout, or a scan of events/ for older analyses ----
def find(path: Path, key: str, value: str, t_from_ns: int | None = None,
         t_to_ns: int | None = None, limit: int = 100) -> list:
    """The messages whose `key` (msg_id or one of lookup.KEYS) is `value`, first had between
    the two times when given: [{msg_id, key, value, vhost, t_first, t_first_ns}], at most
    `limit`, earliest first."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    if key == "msg_id":
        steps = message_path(path, value, missing_ok=True)
        if steps is None:
            return []
        first = steps["steps"][0]
        rows = [{"msg_id": steps["msg_id"], "t_first_ns": first["t_ns"],
                 "vhost": first.get("vhost")}]
    elif key not in lookup.KEYS:
        raise bad_request(f"find by one of: msg_id, {', '.join(lookup.KEYS)}")
    elif (path / "lookup" / "keys").is_dir():
        cond = (pc.field("key") == key) & (pc.field("value") == value)
        if t_from_ns is not None:
            cond = cond & (pc.field("t_first_ns") >= t_from_ns)
        if t_to_ns is not None:
            cond = cond & (pc.field("t_first_ns") < t_to_ns)
        data = ds.dataset(path / "lookup" / "keys", format="parquet")
        rows = _head(data, cond, ["msg_id", "t_first_ns", "vhost"], limit)
    else:
        rows = _scan_events(path, key, value, t_from_ns, t_to_ns, limit)
    rows = [r for r in rows if (t_from_ns is None or r["t_first_ns"] >= t_from_ns)
            and (t_to_ns is None or r["t_first_ns"] < t_to_ns)]
    rows.sort(key=lambda r: (r["t_first_ns"], r["msg_id"]))
    return [{"msg_id": _plain(r["msg_id"]), "key": key, "value": value, "vhost": r["vhost"],
             "t_first": _iso(r["t_first_ns"]), "t_first_ns": r["t_first_ns"]}
            for r in rows[:limit]]


def published_between(path: Path, t_from_ns: int | None, t_to_ns: int | None,
                      limit: int = 100) -> list:
    """The messages published between the two times (the lifecycles' t_published_ns; a
    dead-lettered copy is found through its parent), earliest first: [{msg_id, message_id,
    vhost, final_state, t_first, t_first_ns}], at most `limit`."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    sorted_ = (path / "lookup" / "times").is_dir()
    # the lookup's times are the lifecycles' publish times, in order (older analyses: unsorted)
    t = "t_first_ns" if sorted_ else "t_published_ns"
    data = ds.dataset(path / "lookup" / "times" if sorted_ else path / "lifecycles",
                      format="parquet")
    cond = pc.field(t).is_valid()
    if t_from_ns is not None:
        cond = cond & (pc.field(t) >= t_from_ns)
    if t_to_ns is not None:
        cond = cond & (pc.field(t) < t_to_ns)
    columns = ["msg_id", "message_id", "vhost", "final_state", t]
    if sorted_:
        rows = _head(data, cond, columns, limit)
    else:
        table = data.to_table(columns=columns, filter=cond)
        rows = table.take(pc.sort_indices(table, sort_keys=[(t, "ascending")])[:limit]) \
            .to_pylist()
    rows.sort(key=lambda r: (r[t], r["msg_id"]))
    return [{"msg_id": r["msg_id"], "message_id": r["message_id"], "vhost": r["vhost"],
             "final_state": r["final_state"], "t_first": _iso(r[t]), "t_first_ns": r[t]}
            for r in rows[:limit]]


def message_path(path: Path, msg_id: str, missing_ok: bool = False) -> dict | None:
    """One message's path: its steps in order (t_ns, then the kind's rank) with the time,
    node, process, actor and queue of each, and the links to follow: the dead-letter copies
    it made (`dead_lettered_to`) and the message it is a copy of (`parent_msg_id`)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    try:
        mid = bytes.fromhex(msg_id)
    except ValueError:
        mid = None
    source = path / "lookup" / "steps"
    if not source.is_dir():  # an analysis written before the lookup layout
        source = path / "events"
    data = ds.dataset(source, format="parquet")
    cols = [c for c in ("kind", "rank", "t_ns", "actor", "node", "process", "pid", "vhost",
                        "message_id", "correlation_id", "traceparent", *STEP_FIELDS)
            if c in data.schema.names]
    rows = [] if mid is None else data.to_table(columns=cols,
                                                filter=pc.field("msg_id") == mid).to_pylist()
    if not rows:
        if missing_ok:
            return None
        raise not_found(f"no message '{msg_id}' in this analysis")
    rows.sort(key=lambda r: (r["t_ns"] or 0, r["rank"] or 0))
    t0 = rows[0]["t_ns"]
    steps = []
    for r in rows:
        step = {"kind": r["kind"], "actor": r.get("actor"), "node": r.get("node"),
                "process": r.get("process"), "pid": r.get("pid"), "vhost": r.get("vhost"),
                "time": _iso(r["t_ns"]), "t_ns": r["t_ns"],
                "after_ms": round((r["t_ns"] - t0) / 1e6, 3)}
        step.update({k: _plain(r[k]) for k in STEP_FIELDS if r.get(k) is not None})
        steps.append(step)

    def first(field):
        return next((_plain(r[field]) for r in rows if r.get(field)), None)
    return {"msg_id": mid.hex(), "message_id": first("message_id"),
            "correlation_id": first("correlation_id"), "traceparent": first("traceparent"),
            "parent_msg_id": first("parent_msg_id"),
            "dead_lettered_to": sorted({s["new_msg_id"] for s in steps
                                        if s["kind"] == "dead_lettered" and
                                        s.get("new_msg_id")}),
            "steps": steps}


def _head(data, cond, columns: list, limit: int) -> list:
    """The first `limit` rows of `data` matching `cond`, reading no further than needed."""
    rows: list = []
    # (no read-ahead: the rows wanted are in the first row groups that match, in file order)
    for batch in data.scanner(columns=columns, filter=cond, batch_readahead=0,
                              fragment_readahead=0).to_batches():
        rows.extend(batch.slice(0, limit - len(rows)).to_pylist())
        if len(rows) >= limit:
            break
    return rows


def _scan_events(path: Path, key: str, value: str, t_from_ns, t_to_ns, limit: int) -> list:
    """find() in an analysis without lookup/: a filtered scan of every event."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    column, kinds = lookup.KEYS[key]
    data = ds.dataset(path / "events", format="parquet")
    if column not in data.schema.names:
        return []
    cond = (pc.field(column) == value) & pc.field("kind").isin(list(kinds)) \
        & pc.field("msg_id").is_valid()
    first: dict = {}
    for r in data.to_table(columns=["msg_id", "t_ns", "vhost"], filter=cond).to_pylist():
        seen = first.get(r["msg_id"])
        if seen is None or r["t_ns"] < seen["t_ns"]:
            first[r["msg_id"]] = r
    return [{"msg_id": r["msg_id"], "t_first_ns": r["t_ns"], "vhost": r["vhost"]}
            for r in first.values()]


def parse_time(text: str | None) -> int | None:
    """A time of the API's `from`/`to` (ISO 8601, UTC unless it says, or Unix seconds) in ns."""
    if text is None or text == "":
        return None
    try:
        return int(decimal.Decimal(text) * 1_000_000_000)  # (exact to the ns, as t_first_ns)
    except (decimal.InvalidOperation, ValueError):
        pass
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"'{text}' is not a time (ISO 8601 or Unix seconds)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (t - epoch) // datetime.timedelta(microseconds=1) * 1000


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
