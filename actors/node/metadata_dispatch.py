"""The metadata actor's dispatch table: each operation record (actors/metadata_ops.py) to the
one handler that carries it out, built once when the actor's module is imported.

A handler is a method marked `@handles(SomeOp)` and called `handler(actor, rpc, **fields)`;
the table refuses to build when an operation has no handler, two handlers claim one, or a
handler's parameters differ from its record's fields, so a mismatch fails at import rather
than when a client first asks.
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields
from typing import Callable, Iterable

from actors.metadata_ops import OPS, Op

HANDLES = "_handles_op"  # the attribute `handles` marks a handler with
DEFERRED = object()  # a handler's result when the reply comes later (from a queue, a start)


def handles(op: type[Op]) -> Callable:
    """Mark a method as the handler of operation record `op`."""
    def mark(fn):
        setattr(fn, HANDLES, op)
        return fn
    return mark


def build_table(cls: type, ops: Iterable[type[Op]] = ()) -> dict[type[Op], Callable]:
    """Record type -> handler function, for every handler `cls` has (its mixins' too);
    TypeError when the handlers and `ops` (default: every operation) do not match one to one
    or a handler's parameters are not its record's fields."""
    wanted = set(ops) or set(OPS.values())
    table: dict[type[Op], Callable] = {}
    for attr in dir(cls):
        fn = getattr(cls, attr)
        op = getattr(fn, HANDLES, None)
        if op is None:
            continue
        if op in table:
            raise TypeError(f"{op.__name__} has two handlers: {table[op].__name__} and {attr}")
        if op not in wanted:
            raise TypeError(f"{attr} handles {op.__name__}, which is not an operation")
        _check_signature(op, fn)
        table[op] = fn
    missing = sorted(op.__name__ for op in wanted - set(table))
    if missing:
        raise TypeError(f"operations without a handler: {', '.join(missing)}")
    return table


def _check_signature(op: type[Op], fn: Callable) -> None:
    """A handler takes (self, rpc, then exactly its record's fields with the same defaults)."""
    params = list(inspect.signature(fn).parameters.values())[2:]
    got = {p.name: (MISSING if p.default is inspect.Parameter.empty else p.default)
           for p in params}
    want = {f.name: f.default for f in fields(op)}
    if got != want:
        raise TypeError(f"{fn.__name__} takes {got} but {op.__name__} has fields {want}")
