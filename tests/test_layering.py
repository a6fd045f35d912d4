"""Which way imports point, and that the helpers shared through `fa_common` are not written again (issue 47).

Read from the source (the import graph of tests/test_no_import_cycles.py, function-level imports included, and the
AST), not by importing:

- `scripts/`, the product packages and `devstack` never import `tests`; the product packages import neither
  `devstack` nor `scripts` (both are development tooling, not shipped);
- `fa_common` imports no other package of the project, and loading all of it loads no heavy dependency (a device
  install carries it);
- in `analytics_server` only the HTTP edge (`analytics_server/http/`) names `HttpError`, and only the app factory
  imports the edge: the core raises `fa_common.errors` types, which the edge maps (`fa_common.http_errors`);
  elsewhere `HttpError` is named only by the issuer's routes (`fa_issuer/app.py`) and its one definition;
- each helper `fa_common` holds is defined there and nowhere else: no second limiter, base64 or canonical-JSON
  helper, clock or key-file writer (a file created or chmod-ed with mode 0600 outside `fa_common.keyfile`).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

from tests.test_no_import_cycles import PACKAGES, ROOT, Edge, import_graph, modules_under

PRODUCT = tuple(p for p in PACKAGES if p != "devstack") + ("migrations",)
TOOLING = ("devstack", "scripts")
EVERYTHING = PRODUCT + TOOLING + ("tests",)

SHARED = {
    "HttpError": "fa_common.http_errors",
    "http_error": "fa_common.http_errors",
    "RequestError": "fa_common.errors",
    "AddressRateLimiter": "fa_common.ratelimit",
    "AddressLimiter": "fa_common.ratelimit",
    "address_prefix": "fa_common.ratelimit",
    "client_key": "fa_common.ratelimit",
    "retry_after_header": "fa_common.ratelimit",
    "b64": "fa_common.b64",
    "b64e": "fa_common.b64",
    "b64d": "fa_common.b64",
    "b64url_e": "fa_common.b64",
    "b64url_d": "fa_common.b64",
    "b64url_encode": "fa_common.b64",
    "b64url_decode": "fa_common.b64",
    "canonical_json": "fa_common.canonical",
    "write_private": "fa_common.keyfile",
    "write_seed": "fa_common.keyfile",
    "read_seed": "fa_common.keyfile",
    "load_app_key": "fa_issuer.cli",  # the issuer CLI's: a SigningKey over fa_common.keyfile.read_seed
    "Clock": "fa_common.clock",
    "SystemClock": "fa_common.clock",
    "ManualClock": "fa_common.clock",
}
"""Module-level functions and classes defined exactly once, in the named module."""
HEAVY = ("aiohttp", "sqlalchemy", "pydantic", "pydantic_settings", "numpy", "nacl", "cryptography", "alembic")
"""What loading `fa_common` must not load (it may use the standard library and rfc8785)."""


def _modules(packages: tuple[str, ...]) -> dict[str, Path]:
    return modules_under(ROOT, packages)


@functools.cache
def _trees(packages: tuple[str, ...]) -> list[tuple[str, Path, ast.Module]]:
    return [(mod, path, ast.parse(path.read_text(), str(path))) for mod, path in _modules(packages).items()]


@functools.cache
def _graph() -> list[Edge]:
    return import_graph(ROOT, EVERYTHING, functions=True)


def _top(module: str) -> str:
    return module.partition(".")[0]


def _describe(edges: list[Edge]) -> str:
    modules = _modules(EVERYTHING)
    return "\n".join(f"  {modules[a].relative_to(ROOT)}:{line} imports {b}" for a, b, line in sorted(set(edges)))


def test_the_graph_covers_scripts_devstack_and_tests() -> None:
    edges = _graph()
    tops = {_top(a) for a, _, _ in edges}
    assert {"scripts", "devstack", "tests", "fa_common", "analytics_server"} <= tops


def test_nothing_but_the_tests_imports_tests() -> None:
    bad = [e for e in _graph() if _top(e[1]) == "tests" and _top(e[0]) != "tests"]
    assert not bad, "imports of tests outside tests/ (move what they need to devstack/):\n" + _describe(bad)


def test_the_product_imports_no_tooling() -> None:
    bad = [e for e in _graph() if _top(e[0]) in PRODUCT and _top(e[1]) in TOOLING]
    assert not bad, "product modules importing development tooling:\n" + _describe(bad)


def test_fa_common_is_a_leaf() -> None:
    bad = [e for e in _graph() if _top(e[0]) == "fa_common" and _top(e[1]) != "fa_common"]
    assert not bad, "fa_common imports another package of the project:\n" + _describe(bad)


def test_loading_fa_common_loads_no_heavy_dependency() -> None:
    modules = sorted(_modules(("fa_common",)))
    code = (f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
            f"print(' '.join(sorted({{n.partition('.')[0] for n in sys.modules}} & set({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [], f"importing fa_common loads {out.stdout.strip()}"


def _names_http_error(tree: ast.Module) -> list[int]:
    """Lines naming `HttpError`: a use, an attribute, an import of it, a definition (docstrings do not count)."""
    lines = []
    for node in ast.walk(tree):
        if ((isinstance(node, ast.Name) and node.id == "HttpError")
                or (isinstance(node, ast.Attribute) and node.attr == "HttpError")
                or (isinstance(node, ast.ClassDef) and node.name == "HttpError")):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                a.name.rpartition(".")[2] == "HttpError" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_http_error_is_named_only_at_the_http_edges() -> None:
    allowed = ("analytics_server.http.", "fa_common.http_errors", "fa_issuer.app")
    bad = []
    for mod, path, tree in _trees(PRODUCT + TOOLING):
        if not mod.startswith(allowed):
            bad += [f"  {path.relative_to(ROOT)}:{line}" for line in _names_http_error(tree)]
    assert not bad, ("HttpError outside the HTTP edges (raise a fa_common.errors type; the edge maps it):\n"
                     + "\n".join(bad))


def test_only_the_app_factory_imports_the_servers_http_edge() -> None:
    bad = [e for e in _graph() if e[1].startswith("analytics_server.http")
           and not e[0].startswith("analytics_server.http") and e[0] != "analytics_server.app"
           and _top(e[0]) != "tests"]
    assert not bad, "the server's core imports its HTTP edge:\n" + _describe(bad)


def test_each_shared_helper_is_defined_once() -> None:
    where: dict[str, list[str]] = {}
    for mod, path, tree in _trees(PRODUCT + TOOLING):
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in SHARED:
                where.setdefault(node.name, []).append(mod)
    wrong = {name: mods for name, mods in where.items() if mods != [SHARED[name]]}
    missing = {name for name, home in SHARED.items() if home.startswith("fa_common") and name not in where} - {
        "AddressLimiter", "client_key", "b64", "b64url_encode", "b64url_decode"}  # old names, defined nowhere now
    assert not wrong, f"shared helpers defined again (import them from fa_common): {wrong}"
    assert not missing, f"shared helpers missing from fa_common: {sorted(missing)}"


def _is_0600(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0o600


def test_only_fa_common_writes_0600_key_files() -> None:
    """`os.open(…, 0o600)`, `os.chmod(…, 0o600)`, `path.chmod(0o600)`, `os.fchmod(…, 0o600)`: a private file
    made by hand instead of by fa_common.keyfile."""
    bad = []
    for mod, path, tree in _trees(PRODUCT + TOOLING):
        if mod == "fa_common.keyfile":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "open", "chmod", "fchmod") and any(_is_0600(a) for a in node.args):
                bad.append(f"  {path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "0600 files written outside fa_common.keyfile (use write_private / write_seed):\n" + "\n".join(bad)


def test_only_fa_common_canonicalises_json() -> None:
    bad: list[Edge] = []
    for mod, path, tree in _trees(PRODUCT + TOOLING):
        if mod == "fa_common.canonical":
            continue
        for node in ast.walk(tree):
            if ((isinstance(node, ast.Import) and any(a.name == "rfc8785" for a in node.names))
                    or (isinstance(node, ast.ImportFrom) and node.module == "rfc8785")):
                bad.append((mod, "rfc8785", node.lineno))
    assert not bad, "RFC 8785 used outside fa_common.canonical:\n" + _describe(bad)


def test_the_checks_catch_what_they_guard() -> None:
    """The AST checks on a known tree: a HttpError use, a hand-made 0600 file, a helper defined twice."""
    tree = ast.parse("from fa_common.http_errors import HttpError\nimport os\n\n"
                     "def b64e(data):\n    raise HttpError(400, 'x')\n\n"
                     "def save(p):\n    os.open(p, os.O_CREAT, 0o600)\n")
    assert _names_http_error(tree) == [1, 5]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert any(any(_is_0600(a) for a in c.args) for c in calls)
    assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in SHARED] == ["b64e"]
