"""Synthetic local data for simulated devices: a registry of named scenarios, seeded per device.

A scenario maps (numpy Generator, device index) → {collection: rows}. Add one with `@scenario("name")`.
Simulation data only: the generator is seeded from (seed, device index) so runs are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Rows = dict[str, list[Any]]
ScenarioFn = Callable[[np.random.Generator, int], Rows]
SCENARIOS: dict[str, tuple[ScenarioFn, str]] = {}

WORDS = ["moon", "sun", "star", "cloud", "rain", "snow", "wind", "storm", "river", "ocean", "forest", "desert",
         "mountain", "valley", "island", "bridge", "castle", "garden", "meadow", "canyon"]
SETTINGS = ["dark", "light", "system"]
SETTINGS_P = [0.55, 0.3, 0.15]


def scenario(name: str, description: str) -> Callable[[ScenarioFn], ScenarioFn]:
    def deco(fn: ScenarioFn) -> ScenarioFn:
        if name in SCENARIOS:
            raise ValueError(f"scenario {name!r} registered twice")
        SCENARIOS[name] = (fn, description)
        return fn

    return deco


def _zipf_words(rng: np.random.Generator, k: int) -> list[str]:
    weights = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.1
    idx = rng.choice(len(WORDS), size=k, p=weights / weights.sum())
    return [WORDS[i] for i in idx]


@scenario("words", "typed words (Zipf over 20 words, 1-6 per device, some unseen 'xyzzy') and one UI setting")
def _words(rng: np.random.Generator, i: int) -> Rows:
    words = _zipf_words(rng, int(rng.integers(1, 7)))
    if rng.random() < 0.05:
        words.append("xyzzy")
    return {"words": words, "settings": [str(rng.choice(SETTINGS, p=SETTINGS_P))]}


@scenario("features", "numeric feature rows {age, income, sessions}, 1-3 rows per device")
def _features(rng: np.random.Generator, i: int) -> Rows:
    rows = []
    for _ in range(int(rng.integers(1, 4))):
        rows.append(
            {
                "age": float(np.clip(rng.normal(40, 12), 18, 90)),
                "income": float(np.clip(rng.lognormal(10.5, 0.5), 0, 1e6)),
                "sessions": float(rng.poisson(5)),
            }
        )
    return {"features": rows}


@scenario("mixed", "words + settings + features")
def _mixed(rng: np.random.Generator, i: int) -> Rows:
    return {**_words(rng, i), **_features(rng, i)}


def generate(name: str, seed: int, index: int) -> Rows:
    try:
        fn, _ = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"scenario: unknown {name!r} (known: {', '.join(sorted(SCENARIOS))})") from None
    return fn(np.random.default_rng([seed, index]), index)


# Scenarios of the training kind (breast_cancer_train, digits, frecency) live in their own module.
from device_sdk import training_data as _training_data  # noqa: E402,F401
# Scenarios of feature_stats and heavy_hitters (breast_cancer, zipf_words, planted) live in their own module.
from device_sdk import stats_data as _stats_data  # noqa: E402,F401
