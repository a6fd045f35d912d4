"""Hand-made synthetic scenarios: `words` (typed words, Zipf over 20 words, plus one UI setting),
`features` (numeric rows {age, income, sessions}), `startup_times` (app start-up times for quantiles: skewed,
heavy-tailed, tied, some beyond 10 s, some missing) and `mixed` (all of them)."""

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


def startup_rows(rng: np.random.Generator) -> list[dict[str, float | None]]:
    """1–3 app start-ups {startup_ms}: most log-normal around 0.7 s, a slow mode around 2 s, 0.6 % between 8 and 30 s
    (mostly beyond a 10 s range: clipped and counted; the 0.99-quantile stays inside it), rounded to 10 ms (ties);
    2 % of rows with the value missing."""
    rows: list[dict[str, float | None]] = []
    for _ in range(int(rng.integers(1, 4))):
        u = rng.random()
        ms = rng.lognormal(6.5, 0.6) if u < 0.85 else rng.lognormal(7.6, 0.5) if u < 0.994 else rng.uniform(8000, 30000)
        rows.append({"startup_ms": None if rng.random() < 0.02 else float(round(ms, -1))})
    return rows


@scenario("startup_times", "app start-up times for quantiles: collection startup {startup_ms}, 1-3 per device "
          "(skewed, heavy-tailed, rounded to 10 ms, about 0.5 % above 10 s, 2 % missing)")
def _startup_times(rng: np.random.Generator, i: int) -> Rows:
    return {"startup": startup_rows(rng)}


@scenario("mixed", "words + settings + features + startup")
def _mixed(rng: np.random.Generator, i: int) -> Rows:
    # startup times from a child stream, so the other collections stay what they were before they were added
    return {**_words(rng, i), **_features(rng, i), "startup": startup_rows(rng.spawn(1)[0])}

