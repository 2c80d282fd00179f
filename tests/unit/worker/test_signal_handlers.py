"""A SIGTERM/SIGINT handler of a broker process only notes the signal: one that set a
threading.Event (or took any lock) could deadlock, the handler running in the main thread
while that thread holds the same lock inside the Event's wait, and the process would then hang
until the node's SIGKILL, its event log without a clean stop marker."""
from __future__ import annotations

import ast
import pathlib

ACTORS = pathlib.Path(__file__).resolve().parents[3] / "actors"


def _handlers():
    """(file, line, handler expression) of every signal.signal(SIGTERM|SIGINT, handler)."""
    for path in sorted(ACTORS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "signal.signal" and \
                    ast.unparse(node.args[0]) in ("signal.SIGTERM", "signal.SIGINT", "sig"):
                yield path.relative_to(ACTORS.parent), node.lineno, node.args[1]


def test_no_signal_handler_sets_an_event_or_takes_a_lock():
    found = list(_handlers())
    assert len(found) >= 4  # the worker's two and cluster_run's, at least
    for path, line, handler in found:
        if isinstance(handler, ast.Lambda):
            calls = [ast.unparse(c.func) for c in ast.walk(handler) if isinstance(c, ast.Call)]
            assert not [c for c in calls if c.endswith((".set", ".acquire", ".put"))], \
                (path, line, ast.unparse(handler))


def test_the_workers_handlers_only_append_to_a_list():
    (source,) = [p for p in ACTORS.rglob("process.py") if p.parent.name == "worker"]
    handlers = [h for path, _, h in _handlers() if path.name == "process.py" and
                path.parent.name == "worker"]
    assert len(handlers) == 2 and source.exists()
    for h in handlers:
        assert isinstance(h, ast.Lambda) and ast.unparse(h.body).startswith("signalled.append(")
