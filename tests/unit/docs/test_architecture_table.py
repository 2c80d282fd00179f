"""docs/architecture.md's "Where the code runs" table names every module under actors/: a
module added without a line saying which process runs it and what it does fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _rows() -> dict[str, str]:
    """{folder as the table writes it ("actors/queue/", "actors/*.py"): the row's text}."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("### Where the code runs", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(actors/[^`]*)` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def _row_for(rows: dict, module: Path) -> tuple[str, str]:
    rel = module.relative_to(REPO).as_posix()
    folder = rel.rsplit("/", 1)[0] + "/"
    if folder == "actors/":
        return "actors/*.py", rows.get("actors/*.py", "")
    # the deepest row whose folder holds the module (actors/management/ holds resources/)
    best = max((f for f in rows if f.endswith("/") and rel.startswith(f)), key=len, default="")
    return best, rows.get(best, "")


def _named(row: str, module: Path) -> bool:
    name = module.stem
    return f"`{name}.py`" in row or f"`{name}`" in row or re.search(
        rf"`{re.escape(module.parent.name)}/`[^|]*`{re.escape(name)}`", row) is not None


def test_every_module_under_actors_is_in_the_where_the_code_runs_table():
    rows = _rows()
    assert "actors/*.py" in rows and "actors/core/" in rows
    missing = []
    for module in sorted((REPO / "actors").rglob("*.py")):
        if module.name == "__init__.py" or "__pycache__" in module.parts:
            continue
        folder, row = _row_for(rows, module)
        if not row or not _named(row, module):
            missing.append(f"{module.relative_to(REPO)} (row {folder or 'none'})")
    assert not missing, "not in docs/architecture.md's table:\n" + "\n".join(missing)
