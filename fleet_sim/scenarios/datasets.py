"""scikit-learn's data sets as simulated-device data (simulation data only), split non-IID (label-skewed)
over a fixed number of shards; device i holds shard i mod the shard count, so a fleet of exactly that many
devices holds the rows once.

Registers the scenarios
- `breast_cancer_train` — the training split of breast cancer over `BREAST_CANCER_SHARDS` shards:
  collections `examples` {"x": {feature: value}, "y": label} and `features` {feature: value} of the same
  rows (for a `feature_stats` query first);
- `breast_cancer_patient` — the same training split, one row per device (a patient's own record: device i
  holds training row i mod the split's size), the same two collections; a fleet of `breast_cancer_train_size()`
  devices holds every row once. One row per device is what lets distributed DP work at this data set's size
  (README, "Training");
- `digits` — the training split of digits over `DIGITS_SHARDS` shards: collection `examples`, x as a list
  of 64 pixels / 16;
- `breast_cancer` — all 569 breast-cancer rows over `BREAST_CANCER_SHARDS` shards, collection `features`
  as {feature_name: value} dicts. About 3 % of the rows get one value spoiled — "NaN", "Infinity", null
  or the key removed (the local store holds JSON, which has no float NaN/inf) — to show they count as
  missing.

The fixed test splits (`breast_cancer_split`, `digits_split`) are what evaluation uses;
`breast_cancer_pooled` and `feature_matrix` give the pooled ground truth for tests and demos.
scikit-learn is imported lazily (the `sim` extra: simulations and tests only).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleet_sim.scenarios.registry import Rows, generate, scenario

BREAST_CANCER_SHARDS = 50
DIGITS_SHARDS = 100
SPLIT_SEED = 0
SPOIL_RATE = 0.03
"""Fraction of `breast_cancer` rows with one value spoiled (non-finite, null or missing)."""


@dataclass(frozen=True)
class Split:
    """A fixed train/test split and its label-skewed shards of the training rows."""

    feature_names: list[str]
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    shards: list[np.ndarray]


def _sklearn() -> Any:
    try:
        import sklearn.datasets
        import sklearn.model_selection
    except ImportError as exc:  # pragma: no cover - the sim extra
        raise RuntimeError("scenario needs scikit-learn (install the project's sim extra)") from exc
    return sklearn


def _label_skewed(y: np.ndarray, n: int) -> list[np.ndarray]:
    """Sort by label with a little jitter, cut into n contiguous shards: most shards hold one label."""
    rng = np.random.default_rng(SPLIT_SEED)
    return np.array_split(np.argsort(y + rng.uniform(0, 0.8, size=len(y)), kind="stable"), n)


@functools.lru_cache(maxsize=1)
def breast_cancer_split() -> Split:
    """70/30 stratified split (random_state 0) of sklearn's breast cancer; raw (unscaled) features."""
    sk = _sklearn()
    data = sk.datasets.load_breast_cancer()
    names = [str(n).replace(" ", "_") for n in data.feature_names]
    Xtr, Xte, ytr, yte = sk.model_selection.train_test_split(
        data.data, data.target, test_size=0.3, random_state=SPLIT_SEED, stratify=data.target)
    return Split(names, Xtr, ytr, Xte, yte, _label_skewed(ytr.astype(np.float64), BREAST_CANCER_SHARDS))


def breast_cancer_feature_bounds() -> dict[str, tuple[float, float]]:
    """Public clipping bounds per feature for feature_stats: [0, max rounded up to 2 significant digits]."""
    split = breast_cancer_split()
    top = np.vstack([split.X_train, split.X_test]).max(axis=0)
    out = {}
    for name, m in zip(split.feature_names, top):
        step = 10.0 ** (math.floor(math.log10(m)) - 1)
        out[name] = (0.0, math.ceil(m / step + 1) * step)
    return out


@functools.lru_cache(maxsize=1)
def digits_split() -> Split:
    """70/30 stratified split of sklearn's digits, pixels / 16 in [0, 1]."""
    sk = _sklearn()
    X, y = sk.datasets.load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = sk.model_selection.train_test_split(
        X / 16.0, y, test_size=0.3, random_state=SPLIT_SEED, stratify=y)
    return Split([f"px{i}" for i in range(64)], Xtr, ytr, Xte, yte, _label_skewed(ytr.astype(np.float64), DIGITS_SHARDS))


@scenario("breast_cancer_train", f"breast cancer training split, label-skewed over {BREAST_CANCER_SHARDS} shards: "
          "collections examples {x: {feature: value}, y} and features {feature: value}")
def _breast_cancer_train(rng: np.random.Generator, i: int) -> Rows:
    split = breast_cancer_split()
    rows = [dict(zip(split.feature_names, map(float, split.X_train[j]))) for j in split.shards[i % BREAST_CANCER_SHARDS]]
    ys = [int(split.y_train[j]) for j in split.shards[i % BREAST_CANCER_SHARDS]]
    return {"examples": [{"x": x, "y": y} for x, y in zip(rows, ys)], "features": rows}


def breast_cancer_train_size() -> int:
    """Rows in breast cancer's training split (devices of a `breast_cancer_patient` fleet that holds each once)."""
    return len(breast_cancer_split().y_train)


@scenario("breast_cancer_patient", "breast cancer training split, one row per device (device i holds row i mod the "
          "split's 398 rows): collections examples {x: {feature: value}, y} and features {feature: value}")
def _breast_cancer_patient(rng: np.random.Generator, i: int) -> Rows:
    split = breast_cancer_split()
    j = i % len(split.y_train)
    row = dict(zip(split.feature_names, map(float, split.X_train[j])))
    return {"examples": [{"x": row, "y": int(split.y_train[j])}], "features": [row]}


@scenario("digits", f"digits training split, label-skewed over {DIGITS_SHARDS} shards: collection examples "
          "{x: [64 pixels / 16], y}")
def _digits(rng: np.random.Generator, i: int) -> Rows:
    split = digits_split()
    idx = split.shards[i % DIGITS_SHARDS]
    return {"examples": [{"x": split.X_train[j].tolist(), "y": int(split.y_train[j])} for j in idx]}


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
