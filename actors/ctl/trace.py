"""`leveretctl trace MESSAGE_ID [--analysis NAME] [--by KIND]`: where a message went, as the
management UI's Traces page shows it, printed as text. Reads the lifecycle job's output in the
data directory with pyarrow (actors/management/traces.py), so no node needs to run.

--by says what MESSAGE_ID is: msg_id, message_id (the default: the publisher's property, or a
msg_id in hex), correlation_id, traceparent, routing_key or queue. One message found: its path;
several: the list, to ask again by msg_id.
"""

from __future__ import annotations

import sys

from actors.management import traces
from actors.management.api import ApiError


def trace(data_dir: str, ref: str, analysis: str = "analysis", by: str = "message_id",
          limit: int = 50, out=None) -> int:
    out = out or sys.stdout
    try:
        path = traces.folder(data_dir, analysis)
        if by == "message_id":
            found = traces.find(path, by, ref, limit=limit) or traces.find(path, "msg_id", ref)
        else:
            found = traces.find(path, by, ref, limit=limit)
        if not found:
            print(f"leveretctl: no message with {by} '{ref}' in analysis '{analysis}'",
                  file=sys.stderr)
            return 1
        if len(found) > 1:
            print(f"{len(found)}{'+' if len(found) >= limit else ''} messages with {by} "
                  f"'{ref}'; trace one by msg_id (--by msg_id):", file=out)
            for r in found:
                print(f"  {r['msg_id']}  {r['t_first']}  vhost {r['vhost']}", file=out)
            return 0
        print_path(traces.message_path(path, found[0]["msg_id"]), out)
        return 0
    except ApiError as e:
        print(f"leveretctl: {e.reason}", file=sys.stderr)
        return 1


def print_path(p: dict, out) -> None:
    """One message's path: a line per step (time, +ms, kind, where, what it names)."""
    names = [f"msg_id {p['msg_id']}"] + [f"{k} {p[k]}" for k in
                                         ("message_id", "correlation_id", "traceparent",
                                          "parent_msg_id") if p.get(k)]
    print(", ".join(names), file=out)
    for s in p["steps"]:
        where = f"{s['node']} {s['process']} {s['actor'] or ''}".rstrip()
        detail = " ".join(f"{k}={s[k]}" for k in ("queue", "exchange", "routing_key",
                                                  "delivery_tag", "redelivered", "requeue",
                                                  "reason", "new_msg_id", "parent_msg_id")
                          if s.get(k) not in (None, ""))
        after = f"+{s['after_ms']:.3f}"
        print(f"  {s['time']}  {after:>11}ms  {s['kind']:<22} {where}"
              f"{'  ' + detail if detail else ''}", file=out)
    for child in p["dead_lettered_to"]:
        print(f"  dead-lettered copy: leveretctl trace {child} --by msg_id", file=out)
