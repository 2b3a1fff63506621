"""The shape of the house (../shared/docs/STYLE.md): two layers, calls that flow down.

`lint-imports` (CI runs it; the contracts are in pyproject.toml) keeps the layers; this
test finds every import cycle of the package, which a layers contract alone does not (two
modules of one layer may import each other), and checks that importing the library does not
load the lab.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

grimp = pytest.importorskip("grimp")  # comes with import-linter ([dev])

LAB = ("sgemmlab.cli", "sgemmlab.tune", "sgemmlab.bench", "sgemmlab.anatomy")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (or one that imports itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def _package_graph() -> dict[str, set[str]]:
    g = grimp.build_graph("sgemmlab", include_external_packages=False)
    return {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}


def test_the_package_has_no_import_cycle():
    assert strongly_connected(_package_graph()) == []


def test_no_library_module_imports_the_lab():
    graph = _package_graph()
    library = [m for m in graph if m != "sgemmlab" and not m.startswith(LAB)
               and m != "sgemmlab.__main__"]
    assert "sgemmlab.api" in library and "sgemmlab.runtime.launch" in library
    bad = [(m, d) for m in library for d in graph[m] if d.startswith(LAB)]
    assert bad == []


def test_calling_the_library_loads_no_lab_module():
    code = ("import sys, sgemmlab, sgemmlab.dispatch; "
            f"print(sorted(m for m in sys.modules if m.startswith({LAB!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=300)
    assert done.stdout.strip() == "[]"
