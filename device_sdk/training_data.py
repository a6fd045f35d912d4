"""Simulated-device data for the `training` kind: scikit-learn's breast-cancer and digits data split
non-IID (label-skewed) over a fixed number of shards, and the frecency URL-bar simulator per device.

Registers the scenarios `breast_cancer_train` (collections `examples` {"x": {feature: value}, "y": label}
and `features` {feature: value} of the same training rows, for a `feature_stats` query first),
`digits` (collection `examples`, x as a list of 64 pixels / 16) and `frecency` (collection `urlbar`).
Device i holds shard i mod N_SHARDS, so a fleet of exactly N_SHARDS devices holds the whole training
split once. The fixed test splits (`breast_cancer_split`, `digits_split`) are what evaluation uses.
scikit-learn is imported lazily (a dev dependency: simulations and tests only).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from device_sdk.scenarios import Rows, scenario

BREAST_CANCER_SHARDS = 50
DIGITS_SHARDS = 100
SPLIT_SEED = 0


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
    except ImportError as exc:  # pragma: no cover - dev dependency
        raise RuntimeError("scenario needs scikit-learn (install the project's dev extras)") from exc
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


@scenario("digits", f"digits training split, label-skewed over {DIGITS_SHARDS} shards: collection examples "
          "{x: [64 pixels / 16], y}")
def _digits(rng: np.random.Generator, i: int) -> Rows:
    split = digits_split()
    idx = split.shards[i % DIGITS_SHARDS]
    return {"examples": [{"x": split.X_train[j].tolist(), "y": int(split.y_train[j])} for j in idx]}


@scenario("frecency", "URL-bar interactions of one simulated browser history (queries.training.urlbar_sim): "
          "collection urlbar")
def _frecency(rng: np.random.Generator, i: int) -> Rows:
    from queries.training import urlbar_sim

    return {"urlbar": urlbar_sim.make_device_rows(rng, n_interactions=10)}
