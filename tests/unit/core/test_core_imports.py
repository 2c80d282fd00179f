"""The cores import each other without a cycle, and never from inside a function.

A cycle among actors/core modules used to be dodged with function-local imports of private
helpers (errors <-> queue_args <-> quorum); the graph here counts every import statement
wherever it stands, so a dodged cycle fails as a plain one does.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CORE = ROOT / "actors" / "core"
PACKAGE = "actors.core"


def core_modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (the package itself included)."""
    out = {PACKAGE: CORE / "__init__.py"}
    for path in sorted(CORE.glob("*.py")):
        if path.name != "__init__.py":
            out[f"{PACKAGE}.{path.stem}"] = path
    return out


def imported(tree: ast.AST, modules) -> list[tuple[str, bool]]:
    """(core module imported, whether the import stands inside a function) for every import
    statement of the tree that names a module of the package."""
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name, inner) for a in child.names if a.name in modules)
            elif isinstance(child, ast.ImportFrom) and child.module is not None:
                if child.level:
                    raise AssertionError("relative import in actors/core: write it absolute")
                if child.module == PACKAGE:  # from actors.core import queue_args, NO_EVENTS
                    for a in child.names:
                        name = f"{PACKAGE}.{a.name}"
                        found.append((name if name in modules else PACKAGE, inner))
                elif child.module in modules:
                    found.append((child.module, inner))
            visit(child, inner)

    visit(tree, False)
    return found


def import_graph(sources: dict[str, str]) -> tuple[dict[str, set], list[str]]:
    """(module -> the core modules it imports, "module imports X inside a function" lines)."""
    graph: dict[str, set] = {name: set() for name in sources}
    local = []
    for name, text in sources.items():
        for target, in_function in imported(ast.parse(text), sources):
            if target != name:
                graph[name].add(target)
            if in_function:
                local.append(f"{name} imports {target} inside a function")
    return graph, local


def find_cycle(graph: dict[str, set]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None when it is acyclic."""
    done: set = set()
    path: list[str] = []
    on_path: set = set()

    def dfs(node):
        path.append(node)
        on_path.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            if nxt not in done:
                cycle = dfs(nxt)
                if cycle:
                    return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = dfs(start)
            if cycle:
                return cycle
    return None


def _sources() -> dict[str, str]:
    return {name: path.read_text() for name, path in core_modules().items()}


def test_core_import_graph_is_acyclic():
    graph, _ = import_graph(_sources())
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle among actors/core: " + " -> ".join(cycle)


def test_no_core_module_imports_another_inside_a_function():
    _, local = import_graph(_sources())
    assert local == []


def test_every_core_module_imports_first_in_a_fresh_interpreter():
    """Each module imported first, alone, as a worker process would: no import order hides a
    cycle (one interpreter, the package's modules forgotten before each)."""
    names = sorted(core_modules())
    script = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('actors')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# --- the checker itself finds what it is for ---------------------------------------------------
def test_find_cycle_finds_a_dodged_cycle():
    sources = {
        "actors.core": "",
        "actors.core.a": "from actors.core.b import x\n",
        "actors.core.b": "def f():\n    from actors.core import a\n    return a\n",
        "actors.core.c": "from actors.core import a, NO_EVENTS\n",
    }
    graph, local = import_graph(sources)
    assert graph["actors.core.c"] == {"actors.core.a", "actors.core"}
    assert find_cycle(graph) == ["actors.core.a", "actors.core.b", "actors.core.a"]
    assert local == ["actors.core.b imports actors.core.a inside a function"]


@pytest.mark.parametrize("graph", [{}, {"a": {"b"}, "b": {"c"}, "c": set()},
                                   {"a": {"b", "c"}, "b": {"c"}, "c": set()}])
def test_find_cycle_passes_acyclic_graphs(graph):
    assert find_cycle(graph) is None
