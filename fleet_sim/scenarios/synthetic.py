"""Hand-made synthetic scenarios: `words` (typed words, Zipf over 20 words, plus one UI setting),
`features` (numeric rows {age, income, sessions}) and `mixed` (both)."""

from __future__ import annotations

import numpy as np

from fleet_sim.scenarios.registry import Rows, scenario

WORDS = ["moon", "sun", "star", "cloud", "rain", "snow", "wind", "storm", "river", "ocean", "forest", "desert",
         "mountain", "valley", "island", "bridge", "castle", "garden", "meadow", "canyon"]
SETTINGS = ["dark", "light", "system"]
SETTINGS_P = [0.55, 0.3, 0.15]


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

