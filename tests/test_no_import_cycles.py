"""No import cycles between the project's modules — neither among the imports that run when a module is
imported nor once the imports inside functions are counted too — and scenario modules import in any order.

The graph is read from the source (AST), not by importing: an edge A → B for every import statement that
runs when A is imported (module level, including `try`/`if` blocks and class bodies; not under
`if TYPE_CHECKING:`), and — for the second test — every import statement inside a function as well. A
function-level import hides a cycle from the interpreter, not from the design: two modules that need each
other are one module or share a leaf. `FUNCTION_LEVEL_ALLOWED` lists the function-level edges tolerated, each
with its reason. Relative imports are resolved; `from pkg import name`
is an edge to the submodule `pkg.name` when there is one, else to `pkg`; `import a.b.c` is an edge to the
deepest project module it names. A strongly connected component of more than one module (or a module
importing itself) is a cycle; the failure lists each with the import lines that close it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fa_common", "secagg", "translog", "queries", "analytics_server", "device_sdk", "analyst_client", "fleet_sim", "fa_issuer", "devstack")

Edge = tuple[str, str, int]
"""(importing module, imported module, line)."""


def modules_under(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _import_time_statements(body: list[ast.stmt], functions: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if functions:  # runs when called, not when imported
                yield from _import_time_statements(node.body, functions)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_time_statements(node.orelse, functions)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    stmts = [c for c in children if isinstance(c, ast.stmt)]
                    stmts += [s for c in children if isinstance(c, (ast.ExceptHandler, ast.match_case)) for s in c.body]
                    yield from _import_time_statements(stmts, functions)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _deepest(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES, functions: bool = False) -> list[Edge]:
    """The edges of the import graph; with `functions`, imports inside functions count too."""
    modules = modules_under(root, packages)
    edges: list[Edge] = []
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _import_time_statements(ast.parse(path.read_text(), str(path)).body, functions):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                dep = _deepest(target, modules)
                if dep is not None:
                    edges.append((mod, dep, node.lineno))
    return edges


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan), each sorted, largest first."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out, key=lambda c: (-len(c), c))


def describe(cycle: list[str], edges: list[Edge], modules: dict[str, Path]) -> str:
    members = set(cycle)
    lines = [f"  {' <-> '.join(cycle)}"]
    for a, b, line in sorted(set(edges)):
        if a in members and b in members:
            lines.append(f"    {modules[a].relative_to(ROOT)}:{line} imports {b}")
    return "\n".join(lines)


FUNCTION_LEVEL_ALLOWED: dict[tuple[str, str], str] = {}
"""(importing module, imported module) pairs of function-level imports allowed to close a cycle, with the reason.
Empty: every cycle is refused."""


def test_no_import_cycles() -> None:
    edges = import_graph(ROOT)
    assert len(edges) > 100  # the graph is really read
    found = cycles(edges)
    modules = modules_under(ROOT, PACKAGES)
    assert not found, "import cycles:\n" + "\n".join(describe(c, edges, modules) for c in found)


def test_no_import_cycles_counting_function_level_imports() -> None:
    edges = [e for e in import_graph(ROOT, functions=True) if (e[0], e[1]) not in FUNCTION_LEVEL_ALLOWED]
    assert len(edges) > len(import_graph(ROOT))  # function-level imports are really read
    found = cycles(edges)
    modules = modules_under(ROOT, PACKAGES)
    assert not found, "import cycles through imports inside functions:\n" + "\n".join(
        describe(c, edges, modules) for c in found)


def test_cycle_finder_on_a_known_graph(tmp_path: Path) -> None:
    """A module-level cycle through a relative import is found; function-local and TYPE_CHECKING imports are
    not edges; `from pkg import sub` depends on the submodule, not on the package."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg import a\n",
        "a.py": "from . import b\n",
        "b.py": "try:\n    from .sub.c import X\nexcept ImportError:\n    pass\n",
        "sub/__init__.py": "",
        "sub/c.py": "from typing import TYPE_CHECKING\nimport pkg.a\nX = 1\n",
        "d.py": "def f():\n    import pkg.e\nif TYPE_CHECKING:\n    import pkg.e\n",
        "e.py": "import pkg.d\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    edges = import_graph(tmp_path, ("pkg",))
    assert {(a, b) for a, b, _ in edges} == {
        ("pkg", "pkg.a"), ("pkg.a", "pkg.b"), ("pkg.b", "pkg.sub.c"), ("pkg.sub.c", "pkg.a"), ("pkg.e", "pkg.d")}
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    # counting function-level imports, pkg.d → pkg.e (inside f) closes a second cycle; TYPE_CHECKING stays out
    edges = import_graph(tmp_path, ("pkg",), functions=True)
    assert ("pkg.d", "pkg.e") in {(a, b) for a, b, _ in edges}
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.sub.c"], ["pkg.d", "pkg.e"]]


SCENARIO_MODULES = sorted(m for m in modules_under(ROOT, ("fleet_sim",)) if m.startswith("fleet_sim.scenarios."))


@pytest.mark.parametrize("module", SCENARIO_MODULES)
def test_scenario_module_imports_first(module: str) -> None:
    """Each scenario module can be the first one a fresh interpreter imports, and then every scenario is known."""
    code = (f"import {module}\n"
            "from fleet_sim.scenarios import SCENARIOS\n"
            "print(' '.join(sorted(SCENARIOS)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert set(out.stdout.split()) >= {"words", "features", "mixed", "breast_cancer", "breast_cancer_train", "digits",
                                       "breast_cancer_patient", "startup_times",
                                       "zipf_words", "planted", "frecency"}
