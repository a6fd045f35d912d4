"""The scenario registry: named generators of synthetic local data for simulated devices.

A scenario maps (numpy Generator, device index) → {collection: rows}. Add one with `@scenario("name")` in
the module of its data family (fleet_sim/scenarios/) and import that module in the package's
`__init__`. Simulation data only: `generate` seeds the generator from (seed, device index) so runs are
reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Rows = dict[str, list[Any]]
ScenarioFn = Callable[[np.random.Generator, int], Rows]
SCENARIOS: dict[str, tuple[ScenarioFn, str]] = {}


def scenario(name: str, description: str) -> Callable[[ScenarioFn], ScenarioFn]:
    def deco(fn: ScenarioFn) -> ScenarioFn:
        if name in SCENARIOS:
            raise ValueError(f"scenario {name!r} registered twice")
        SCENARIOS[name] = (fn, description)
        return fn

    return deco


def generate(name: str, seed: int, index: int) -> Rows:
    try:
        fn, _ = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"scenario: unknown {name!r} (known: {', '.join(sorted(SCENARIOS))})") from None
    return fn(np.random.default_rng([seed, index]), index)
