"""The package's import structure: no module imports itself through others (a circle), and the
layers of docs/ARCHITECTURE.md hold (`lint-imports`, the contracts in pyproject.toml; `make lint`
runs it too). Imports under TYPE_CHECKING and inside functions count: a circle of types is still
a circle to a reader."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent.parent
# The package's __lldb_init_module imports the lldb adapter when lldb calls it, never on import.
IGNORED = {("ualdbg", "ualdbg.adapters.lldb.entry")}


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(i for i in graph.find_modules_directly_imported_by(m) if (m, i) not in IGNORED and i in graph.modules)
             for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_circle() -> None:
    graph = grimp.build_graph("ualdbg")
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_one() -> None:
    graph = grimp.ImportGraph()
    for m in ("a", "b", "c"):
        graph.add_module(m)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")
    assert _circles(graph) == [["a", "b"]]


def test_layers_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "lint-imports is not installed (pip install -e '.[test]', or `make setup`)"
    r = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
