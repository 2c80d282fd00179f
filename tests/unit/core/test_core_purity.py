"""Cores and the codec are sans-IO: actors/core/ and protocol/ import no actor runtime, no
socket, no ZeroMQ and no storage, so they are unit-tested without any of them (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FORBIDDEN = {"pykka", "zmq", "socket", "lmdb", "selectors", "asyncio", "threading"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_cores_and_protocol_import_no_io():
    files = sorted((REPO / "actors" / "core").glob("*.py")) + sorted((REPO / "protocol").glob("*.py"))
    assert len(files) > 10
    bad = {str(f.relative_to(REPO)): sorted(imported_modules(f) & FORBIDDEN) for f in files}
    assert {f: mods for f, mods in bad.items() if mods} == {}


def test_the_check_sees_an_import_it_forbids(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\nfrom zmq import Context\nimport pykka.messages\n")
    assert imported_modules(f) & FORBIDDEN == {"zmq", "pykka"}
