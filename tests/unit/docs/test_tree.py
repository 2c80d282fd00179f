"""The tree says where a file runs: no two modules share a name (a `queue.py` of the actor and
one of the core read alike in a traceback or an import), no module under actors/ that one
process runs sits loose beside the shared ones, and tests/unit mirrors the packages."""

from __future__ import annotations

import ast
import collections
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# what every kind of process imports (docs/architecture.md, "Where the code runs")
SHARED = {"config", "durable_files", "events", "faults", "hlc", "local_link", "messages",
          "metadata_ops", "naming", "replica", "secure", "timers", "transport", "wire"}
# a package's marker files, and the test tree's per-folder fixtures
ANY_NUMBER = {"__init__.py", "__main__.py", "conftest.py"}


def _tracked(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.split()
    return [REPO / p for p in sorted(set(out))]  # (a merge in progress lists a path per stage)


def _repeated(paths: list[Path]) -> dict[str, list[str]]:
    by_name = collections.defaultdict(list)
    for p in paths:
        if p.name not in ANY_NUMBER:
            by_name[p.name].append(p.relative_to(REPO).as_posix())
    return {name: where for name, where in by_name.items() if len(where) > 1}


def test_no_two_product_modules_share_a_name():
    product = [p for p in _tracked("*.py") if not p.relative_to(REPO).as_posix().startswith("tests/")]
    assert not _repeated(product)


def test_no_two_test_modules_share_a_name():
    assert not _repeated(_tracked("tests/*.py"))


def test_the_loose_modules_of_actors_are_the_shared_ones():
    loose = {p.stem for p in (REPO / "actors").glob("*.py") if p.name != "__init__.py"}
    assert loose == SHARED


def _imported_actors_packages(test: Path) -> set[str]:
    """The actors/ packages a test module imports from (actors.queue.x -> "queue")."""
    found = set()
    for node in ast.walk(ast.parse(test.read_text())):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "actors" and len(parts) > 1 and (REPO / "actors" / parts[1]).is_dir():
                found.add(parts[1])
    return found


def test_unit_tests_of_one_actors_package_live_in_its_folder():
    """A unit test that imports from exactly one actors/ package sits in tests/unit/<package>
    (core tests may import the shared modules too; analysis, bench and the others test
    packages outside actors/)."""
    misplaced = []
    for test in sorted((REPO / "tests" / "unit").rglob("test_*.py")):
        folder = test.parent.name
        packages = _imported_actors_packages(test)
        if len(packages) == 1 and (REPO / "actors" / folder).is_dir():
            (package,) = packages
            if package != folder:
                misplaced.append(f"{test.relative_to(REPO)} tests actors/{package}/")
    assert not misplaced
