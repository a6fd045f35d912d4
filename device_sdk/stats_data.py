"""Simulated-device data for the `feature_stats` and `heavy_hitters` kinds (simulation data only).

Registers the scenarios
- `breast_cancer` — all 569 rows of scikit-learn's breast-cancer data, label-skewed over
  `BREAST_CANCER_SHARDS` shards (device i holds shard i mod the shard count, so a fleet of exactly that
  many devices holds every row once), collection `features` as {feature_name: value} dicts. About 3 % of
  the rows get one value spoiled — "NaN", "Infinity", null or the key removed (the local store holds
  JSON, which has no float NaN/inf) — to show they count as missing.
- `zipf_words` — collection `words`: one pseudo-word per device from a fixed vocabulary (lowercase ASCII,
  ≤ 6 letters) with Zipf(1.1) ranks.
- `planted` — collection `words`: with probability `PLANTED` the device holds one of the planted strings
  (known top strings of the population), otherwise a `zipf_words` tail word.

`breast_cancer_pooled` and `feature_matrix` give the pooled ground truth for tests and demos.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from device_sdk.scenarios import Rows, generate, scenario
from device_sdk.training_data import BREAST_CANCER_SHARDS, SPLIT_SEED, _label_skewed, _sklearn

SPOIL_RATE = 0.03
WORD_MAX_LENGTH = 6
WORD_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
PLANTED = {"hello": 0.14, "world": 0.11, "fed": 0.08, "query": 0.06}
"""Planted strings and the probability that a device holds each (the rest: Zipf tail words)."""


@functools.lru_cache(maxsize=1)
def _breast_cancer() -> tuple[list[str], np.ndarray, list[np.ndarray]]:
    data = _sklearn().datasets.load_breast_cancer()
    names = [str(n).replace(" ", "_") for n in data.feature_names]
    return names, np.asarray(data.data, dtype=np.float64), _label_skewed(data.target.astype(np.float64), BREAST_CANCER_SHARDS)


def breast_cancer_feature_names() -> list[str]:
    return list(_breast_cancer()[0])


@scenario("breast_cancer", f"all of sklearn's breast cancer rows, label-skewed over {BREAST_CANCER_SHARDS} shards, "
          "collection features {feature: value}; ~3 % of rows carry one NaN/inf/missing value")
def _breast_cancer_rows(rng: np.random.Generator, i: int) -> Rows:
    names, X, shards = _breast_cancer()
    rows: list[dict[str, Any]] = []
    for j in shards[i % BREAST_CANCER_SHARDS]:
        row: dict[str, Any] = dict(zip(names, map(float, X[j])))
        if rng.random() < SPOIL_RATE:
            name = names[int(rng.integers(len(names)))]
            how = int(rng.integers(4))
            if how == 3:
                del row[name]
            else:  # the local store holds JSON only, so non-finite values arrive as text or null
                row[name] = ("NaN", "Infinity", None)[how]
        rows.append(row)
    return {"features": rows}


def breast_cancer_pooled(seed: int, devices: int = BREAST_CANCER_SHARDS) -> list[dict[str, Any]]:
    """Every `features` row of devices 0..devices-1 of a `breast_cancer` fleet with this seed."""
    return [row for i in range(devices) for row in generate("breast_cancer", seed, i)["features"]]


def feature_matrix(rows: list[dict[str, Any]], names: list[str]) -> np.ndarray:
    """Rows × names as floats, NaN where a value is missing, not a number, or not finite."""
    out = np.full((len(rows), len(names)), np.nan)
    for r, row in enumerate(rows):
        for c, name in enumerate(names):
            v = row.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[r, c] = float(v)
    return out


@functools.lru_cache(maxsize=1)
def _vocabulary() -> tuple[list[str], np.ndarray]:
    from queries.heavy_hitters.population import pseudo_words

    vocab = [w for w in pseudo_words(600, np.random.default_rng(SPLIT_SEED), WORD_MAX_LENGTH) if w not in PLANTED]
    weights = np.arange(1, len(vocab) + 1, dtype=np.float64) ** -1.1
    return vocab, weights / weights.sum()


def _zipf_word(rng: np.random.Generator) -> str:
    vocab, p = _vocabulary()
    return vocab[int(rng.choice(len(vocab), p=p))]


@scenario("zipf_words", f"collection words: one pseudo-word (≤ {WORD_MAX_LENGTH} lowercase letters) per device, "
          "Zipf(1.1) over a fixed vocabulary")
def _zipf_words(rng: np.random.Generator, i: int) -> Rows:
    return {"words": [_zipf_word(rng)]}


@scenario("planted", f"collection words: planted top strings {', '.join(PLANTED)} "
          f"(p = {', '.join(map(str, PLANTED.values()))}), otherwise a zipf_words word")
def _planted(rng: np.random.Generator, i: int) -> Rows:
    u, acc = rng.random(), 0.0
    for word, p in PLANTED.items():
        acc += p
        if u < acc:
            return {"words": [word]}
    return {"words": [_zipf_word(rng)]}
