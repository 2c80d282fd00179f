"""Cores and the codec are sans-IO: actors/core/ and protocol/ import no actor runtime, no
socket, no ZeroMQ and no storage, so they are unit-tested without any of them (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FORBIDDEN = {"pykka", "zmq", "socket", "lmdb", "selectors", "asyncio", "threading",
             # the shells' side of the project: the event-log writer, the runtime, transport
             "actors.events", "actors.runtime", "actors.transport", "actors.store.storage"}


def imported_modules(path: Path) -> set[str]:
    """Every module the file imports, and each of its parent packages ("a.b.c": a, a.b, a.b.c);
    `from a import b` counts as a.b as well."""
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {".".join(n.split(".")[:i + 1]) for n in names for i in range(n.count(".") + 1)}


def test_cores_and_protocol_import_no_io():
    files = sorted((REPO / "actors" / "core").glob("*.py")) + sorted((REPO / "protocol").glob("*.py"))
    assert len(files) > 10
    bad = {str(f.relative_to(REPO)): sorted(imported_modules(f) & FORBIDDEN) for f in files}
    assert {f: mods for f, mods in bad.items() if mods} == {}


def test_the_check_sees_an_import_it_forbids(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\nfrom zmq import Context\nimport pykka.messages\n"
                 "from actors import events\n")
    assert imported_modules(f) & FORBIDDEN == {"zmq", "pykka", "actors.events"}
