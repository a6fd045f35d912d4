"""The device import path stays lean: what a phone or a browser extension loads to take part in a query.

A fresh interpreter imports every device module (all of `device_sdk` except the simulator, the scenarios
and the analyst CLI), runs one `contribute` per registered query kind on a task that the kind's own
`plan_round` produced (in this process: planning is server work, the device only receives the task's
JSON), and draws each mechanism's noise share. Then

- none of `FORBIDDEN` (the accountant, scipy, scikit-learn, the database and server stacks) is loaded; an
  import hook records, for each forbidden module, the chain of modules and calls that imported it;
- every third-party distribution that provides a loaded module is a dependency of a device install
  (`pip install 'fed-analytics[device]'`: the base requirements plus the `device` extra, transitively).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from queries.registry import KINDS, get_kind
from queries.training.frecency import example_params
from fleet_sim.urlbar_sim import make_device_rows

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "fed-analytics"
PROJECT_PACKAGES = {"fa_common", "secagg", "translog", "queries", "analytics_server", "device_sdk", "migrations"}
FORBIDDEN = (
    "dp_accounting",
    "scipy",
    "absl",
    "sklearn",
    "sqlalchemy",
    "alembic",
    "asyncpg",
    "aiosqlite",
    "pydantic_settings",
    "analytics_server",
)
NOT_ON_DEVICE = ("fleet_sim.simulator", "fleet_sim.cli", "fleet_sim.scenarios", "analyst_client.cli",
                 "analyst_client.client", "analyst_client.view")
"""Modules of device_sdk that are simulation or analyst tooling, not part of an app's device."""

# (kind, raw params, local rows of one device): every registered kind's declared examples, and a richer training case.
CASES: list[tuple[str, dict[str, Any], list[Any]]] = [(k.name, e.params, e.rows) for k in KINDS for e in k.examples] + [
    ("training", example_params(rounds=1, eval_every=0), make_device_rows(np.random.default_rng(0), n_interactions=5)),
]

PROBE = r'''
import importlib, json, sys

FORBIDDEN = set(json.loads(sys.argv[1]))
chains = {}


def _chain():
    """Outermost first: each module being executed at import time, and each project function on the way."""
    out = []
    frame = sys._getframe(2)
    while frame is not None:
        code, module = frame.f_code, frame.f_globals.get("__name__", "?")
        if not code.co_filename.startswith("<frozen"):
            label = module if code.co_name == "<module>" else None
            if label is None and module.split(".")[0] in ("secagg", "queries", "device_sdk"):
                label = f"{module}.{code.co_qualname}()"
            if label and (not out or out[-1] != label):
                out.append(label)
        frame = frame.f_back
    return out[::-1]


class Recorder:
    """Records who imports a forbidden module first; finds nothing itself (the next finder loads it)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.partition(".")[0]
        if top in FORBIDDEN and top not in chains:
            chains[top] = _chain() + [name]
        return None


sys.meta_path.insert(0, Recorder)
before = set(sys.modules)

import numpy as np

job = json.load(sys.stdin)
for module in job["modules"]:
    importlib.import_module(module)
for ref in job["attributes"]:
    module, _, attribute = ref.partition(":")
    getattr(importlib.import_module(module), attribute)

from queries.registry import get_kind

rng = np.random.default_rng(1)
for case in job["cases"]:
    kind = get_kind(case["kind"])
    vec = np.asarray(kind.contribute(kind.parse_task(case["task"]), case["rows"], rng))
    assert vec.shape == (case["dim"],), (case["kind"], vec.shape, case["dim"])

from queries.dp import sample_noise
from secagg.randomness import SeededRandom
from secagg.validity import Bits, ProofContext, Statement, prove, verify

proof, _ = prove(Statement((Bits(3, 1),), 1, 4), ProofContext(bytes(16), "q", 0, 1), [0, 1, 0], [1, -4, 0], SeededRandom(b"p"))
verify(Statement((Bits(3, 1),), 1, 4), ProofContext(bytes(16), "q", 0, 1), proof)

for mechanism in ("discrete_gaussian", "skellam"):
    share = sample_noise(mechanism, 4.0, 16, rng)  # a numpy Generator also offers the RandomSource `.bytes`
    assert len(share) == 16

loaded = set(sys.modules) - before
json.dump({"forbidden": chains, "loaded": {name: getattr(sys.modules[name], "__file__", None) for name in loaded}}, sys.stdout)
'''


def device_modules() -> list[str]:
    """Every module of device_sdk (found on disk, so new device modules are covered) minus NOT_ON_DEVICE."""
    out = []
    for path in sorted((ROOT / "device_sdk").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not any(name == n or name.startswith(n + ".") for n in NOT_ON_DEVICE):
            out.append(name)
    return out


def first_task(kind_name: str, raw_params: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The task and dimension of the kind's first round, planned the way the server plans it."""
    kind = get_kind(kind_name)
    params = kind.parse_params(raw_params)
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    assert plan is not None
    return json.loads(json.dumps(plan.task)), plan.dim


def run_probe(modules: list[str], cases: list[tuple[str, dict[str, Any], list[Any]]],
              attributes: list[str] | None = None) -> dict[str, Any]:
    """Runs PROBE in a fresh interpreter: imports `modules`, resolves `attributes` ("module:name"), contributes
    to each case's first round, draws noise. → {"forbidden": {top module: chain}, "loaded": {module: file or None}}."""
    job: dict[str, Any] = {"modules": modules, "attributes": attributes or [], "cases": []}
    for kind, raw, rows in cases:
        task, dim = first_task(kind, raw)
        job["cases"].append({"kind": kind, "task": task, "rows": rows, "dim": dim})
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(FORBIDDEN)], input=json.dumps(job), capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    return run_probe(device_modules(), CASES)


def test_every_registered_kind_declares_an_example_its_params_accept() -> None:
    for kind in KINDS:
        assert kind.examples, f"{kind.name}: declare at least one KindExample (QueryKind.examples)"
        for example in kind.examples:
            get_kind(kind.name).parse_params(example.params)


def test_device_modules_are_found() -> None:
    mods = device_modules()
    assert {"device_sdk", "device_sdk.client", "device_sdk.store", "device_sdk.noise"} <= set(mods)
    assert not any(m.startswith(("fleet_sim.scenarios", "fleet_sim.simulator")) for m in mods)


def test_device_path_loads_no_server_or_accountant_module(probe: dict[str, Any]) -> None:
    chains = probe["forbidden"]
    assert not chains, "the device path loads forbidden modules:\n" + "\n".join(
        f"  {top}: {' -> '.join(chain)}" for top, chain in sorted(chains.items()))


def _closure(extra: str) -> set[str]:
    """Canonical names of the distributions a `pip install 'fed-analytics[extra]'` installs, transitively."""
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(PROJECT, frozenset({extra}))]
    while todo:
        dist, extras = todo.pop()
        for line in importlib.metadata.requires(dist) or []:
            req = Requirement(line)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                continue
            name = canonicalize_name(req.name)
            key = name + "[" + ",".join(sorted(req.extras)) + "]"
            if key not in seen:
                seen.add(key)
                todo.append((name, frozenset(req.extras)))
    return {key.partition("[")[0] for key in seen}


def _distributions(loaded: dict[str, str | None]) -> dict[str, set[str]]:
    """Distribution → the loaded modules whose files it installed (its RECORD). The standard library, the
    project's own packages and file-less modules (builtins, Cython's `cython_runtime`) belong to none."""
    owners = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for f in dist.files or []:
            owners[os.path.abspath(dist.locate_file(f))] = name
    stdlib = os.path.abspath(sysconfig.get_path("stdlib"))
    site = tuple(os.path.abspath(sysconfig.get_path(key)) for key in ("purelib", "platlib"))
    out: dict[str, set[str]] = {}
    for name, file in sorted(loaded.items()):
        if file is None or name.partition(".")[0] in PROJECT_PACKAGES:
            continue
        where = os.path.abspath(file)
        if where.startswith(stdlib) and not where.startswith(site):
            continue
        assert where in owners, f"module {name!r} ({file}) is loaded on the device path but no distribution installed it"
        out.setdefault(owners[where], set()).add(name.partition(".")[0])
    return out


def test_device_path_needs_only_device_dependencies(probe: dict[str, Any]) -> None:
    allowed = _closure("device")
    assert {"numpy", "cryptography", "aiohttp", "pydantic", "pynacl", "rfc8785"} <= allowed
    assert not {"sqlalchemy", "alembic", "asyncpg", "aiosqlite", "dp-accounting", "scipy"} & allowed
    used = _distributions(probe["loaded"])
    # pynacl: validity proofs; rfc8785: the task digest's canonical JSON
    assert {"numpy", "cryptography", "aiohttp", "pydantic", "pynacl", "rfc8785"} <= set(used)
    outside = {d: mods for d, mods in used.items() if d not in allowed}
    assert not outside, f"the device path loads modules of distributions outside fed-analytics[device]: {outside}"


def test_probe_names_the_import_chain() -> None:
    """The hook names who imported a forbidden module: here a server-side name of the lazy `queries.dp`."""
    chains = run_probe([], [], attributes=["queries.dp:calibrate_query"])["forbidden"]
    assert chains["dp_accounting"] == ["__main__", "queries.dp.__getattr__()", "queries.dp.calibrate", "queries.dp.rdp",
                                       "dp_accounting"]


def test_every_public_dp_name_resolves() -> None:
    """`queries.dp` loads its server-side names lazily; each one in `__all__` resolves to its module's object."""
    from queries import dp

    for name in dp.__all__:
        value = getattr(dp, name)
        module = sys.modules[dp._LAZY.get(name, "queries.dp")]
        assert getattr(module, name) is value, name
    assert set(dp._LAZY) <= set(dp.__all__)
