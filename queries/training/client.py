"""Device side of the `training` kind: local rows → local objective → one round's int64 vector.

Rows. White-box models take `{"x": [floats] | {feature: value}, "y": int | float}`; dict rows are put in
`features` order, and when the task carries a scaler (from a feature_stats result) every row is
standardised by name with `queries.feature_stats.StandardScaling` (missing values become the mean).
Malformed rows (no y, wrong length, non-finite values, a label outside the classes) are skipped. A local
update or evaluation that is not finite (a diverging run) is sent as an all-zero vector — the device still
takes part, so whether it participates never depends on its data.
Black-box models take whatever their registered loss takes (see `queries.training.blackbox`).

Split. A row is held out for evaluation when a hash of its canonical JSON falls below
`holdout_fraction`, so a row is always on the same side in every round; training never sees it.

All randomness here (which rows when over the cap, mini-batch order, stochastic rounding) comes from the
numpy Generator the device passes to `contribute`. The vector layouts are `queries.training.encoding`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from queries.feature_stats import StandardScaling
from queries.training import encoding
from queries.training.task import LabelCountsTask, PhaseTask, TrainTask
from queries.training.blackbox import BlackBoxModel, known_blackbox, get_blackbox
from queries.training.finite_diff import central_gradient
from queries.training.models import Model, build_model
from secagg.encoding import FixedPoint


def model_from_spec(spec: dict[str, Any]) -> Model | BlackBoxModel:
    name = spec.get("name")
    if isinstance(name, str) and name in known_blackbox():
        return get_blackbox(name)
    return build_model(spec)


def is_holdout(row: Any, fraction: float) -> bool:
    if fraction <= 0:
        return False
    digest = hashlib.sha256(json.dumps(row, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < fraction


def split_rows(rows: list[Any], fraction: float) -> tuple[list[Any], list[Any]]:
    """(training rows, evaluation rows); with fraction 0 both are all rows."""
    if fraction <= 0:
        return list(rows), list(rows)
    train: list[Any] = []
    held: list[Any] = []
    for row in rows:
        (held if is_holdout(row, fraction) else train).append(row)
    return train, held


def cap_rows(rows: list[Any], cap: int, rng: np.random.Generator) -> list[Any]:
    if len(rows) <= cap:
        return rows
    return [rows[i] for i in sorted(rng.choice(len(rows), size=cap, replace=False))]


class LocalObjective(ABC):
    """A device's loss over its rows under given weights."""

    n: int

    @abstractmethod
    def loss_grad(self, theta: np.ndarray, idx: np.ndarray | None) -> tuple[float, np.ndarray]:
        """Mean loss over the rows `idx` (all when None) and its gradient (exact or estimated)."""

    @abstractmethod
    def per_example_loss(self, theta: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def correct(self, theta: np.ndarray) -> np.ndarray | None: ...

    def metrics(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        return {}


def _finite(value: Any) -> float | None:
    """A number as a finite float; None for bools, non-numbers, NaN, ±inf and ints beyond the float range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def parse_xy(rows: list[Any], n_features: int, features: list[str] | None, scaler: StandardScaling | None) -> tuple[np.ndarray, np.ndarray]:
    xs: list[np.ndarray] = []
    ys: list[float] = []
    for row in rows:
        if not isinstance(row, dict):
            continue
        y, x = _finite(row.get("y")), row.get("x")
        if y is None:
            continue
        if isinstance(x, dict):
            if features is None:
                continue
            vec = np.array([_finite(x.get(f)) for f in features], dtype=np.float64)  # None → NaN
            if scaler is None and np.isnan(vec).any():
                continue
        elif isinstance(x, list) and len(x) == n_features:
            try:
                vec = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError, OverflowError):
                continue
            if not np.all(np.isfinite(vec)):
                continue
        else:
            continue
        if len(vec) != n_features:
            continue
        xs.append(vec)
        ys.append(y)
    X = np.vstack(xs) if xs else np.empty((0, n_features))
    if scaler is not None and len(X):
        X = np.where(np.isnan(X), 0.0, scaler.transform(X))
    return X, np.asarray(ys)


class WhiteBoxObjective(LocalObjective):
    """The rows prepared as the task says (`features` order, `scaling`, `class_weights`; None: rows as given)."""

    def __init__(self, model: Model, rows: list[Any], task: PhaseTask | None = None) -> None:
        self.model = model
        scaling = task.scaling if task is not None else None
        scaler = StandardScaling({"scaler": scaling.model_dump()}) if scaling is not None else None
        n_features = int(getattr(model, "n_features"))
        X, y = parse_xy(rows, n_features, task.features if task is not None else None, scaler)
        if model.n_classes is not None and len(y):
            ok = (y == np.round(y)) & (y >= 0) & (y < model.n_classes)
            X, y = X[ok], y[ok]
        self.X, self.y, self.n = X, y, len(y)
        cw = task.class_weights if task is not None else None
        self.sample_weight = np.asarray(cw, dtype=np.float64)[y.astype(np.int64)] if cw and self.n else None

    def loss_grad(self, theta, idx):  # type: ignore[no-untyped-def]
        if idx is None:
            return self.model.loss_grad(theta, self.X, self.y, self.sample_weight)
        sw = None if self.sample_weight is None else self.sample_weight[idx]
        return self.model.loss_grad(theta, self.X[idx], self.y[idx], sw)

    def per_example_loss(self, theta):  # type: ignore[no-untyped-def]
        return self.model.per_example_loss(theta, self.X, self.y)

    def correct(self, theta):  # type: ignore[no-untyped-def]
        if self.model.n_classes is None:
            return None
        return (self.model.predict(theta, self.X) == self.y).astype(np.float64)


class BlackBoxObjective(LocalObjective):
    def __init__(self, model: BlackBoxModel, rows: list[Any]) -> None:
        self.model = model
        self.rows = rows
        self.batch = model.prepare(rows)
        self.n = int(model.size(self.batch))

    def _batch(self, idx: np.ndarray | None) -> Any:
        if idx is None:
            return self.batch
        if self.model.subset is not None:
            return self.model.subset(self.batch, idx)
        return self.model.prepare([self.rows[i] for i in idx])

    def loss_grad(self, theta, idx):  # type: ignore[no-untyped-def]
        batch = self._batch(idx)

        def mean_loss(w: np.ndarray) -> float:
            return float(np.mean(self.model.loss(w, batch)))

        return mean_loss(theta), central_gradient(mean_loss, theta, self.model.fd_step)

    def per_example_loss(self, theta):  # type: ignore[no-untyped-def]
        return np.asarray(self.model.loss(theta, self.batch), dtype=np.float64)

    def correct(self, theta):  # type: ignore[no-untyped-def]
        return None if self.model.correct is None else np.asarray(self.model.correct(theta, self.batch), dtype=np.float64)

    def metrics(self, theta):  # type: ignore[no-untyped-def]
        return {name: np.clip(m.fn(theta, self.batch), 0.0, m.bound) / m.bound for name, m in self.model.metrics.items()}


def objective(model: Model | BlackBoxModel, rows: list[Any], task: PhaseTask | None = None) -> LocalObjective:
    if isinstance(model, BlackBoxModel):
        return BlackBoxObjective(model, rows)
    return WhiteBoxObjective(model, rows, task)


def local_update(obj: LocalObjective, theta0: np.ndarray, epochs: int, batch_size: int, lr: float, rng: np.random.Generator) -> np.ndarray:
    """θ_E − θ_0 after E epochs of mini-batch SGD (batch_size 0 = full batch)."""
    theta = theta0.copy()
    if obj.n == 0:
        return np.zeros_like(theta)
    for _ in range(epochs):
        if batch_size <= 0 or batch_size >= obj.n:
            theta -= lr * obj.loss_grad(theta, None)[1]
            continue
        order = rng.permutation(obj.n)
        for start in range(0, obj.n, batch_size):
            theta -= lr * obj.loss_grad(theta, order[start : start + batch_size])[1]
    delta: np.ndarray = theta - theta0
    return delta


def clip_l2(v: np.ndarray, c: float) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v * (c / norm) if norm > c else v


def _capped_mean(losses: np.ndarray, cap: float) -> float:
    """Mean per-example loss with each loss in [0, cap] (an overflowed, NaN loss counts as the cap; a negative one as
    0: the evaluation round's entries are in [0, 1], which its validity statement proves)."""
    arr = np.nan_to_num(np.asarray(losses, dtype=np.float64), nan=cap, posinf=cap, neginf=0.0)
    return float(np.mean(np.clip(arr, 0.0, cap)))


def _weight(n: int, cap: int) -> float:
    return min(n, cap) / cap


def contribute(task: PhaseTask, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
    """The whole device side of one round, from the parsed task (`TrainingKind.parse_task`; see the layouts in
    `queries.training.encoding`)."""
    model = model_from_spec(task.model.model_dump())
    pb, cap = task.precision_bits, task.client.max_examples
    train_rows, eval_rows = split_rows(list(rows), task.holdout_fraction)
    u = encoding.unit(pb)

    if isinstance(task, LabelCountsTask):
        k = task.n_classes
        labels = encoding.label_layout(k)
        obj = objective(model, cap_rows(train_rows, cap, rng), task)
        if not isinstance(obj, WhiteBoxObjective) or obj.n == 0:
            return labels.pack(shares=np.zeros(k, dtype=np.int64))
        frac = np.bincount(obj.y.astype(np.int64), minlength=k)[:k] / obj.n
        return labels.pack(shares=FixedPoint(1.0, u).encode(_weight(obj.n, cap) * frac, rng))

    theta = np.asarray(task.weights, dtype=np.float64)
    if isinstance(task, TrainTask):
        c = task.clip_norm
        obj = objective(model, cap_rows(train_rows, cap, rng), task)
        client = task.client
        with np.errstate(all="ignore"):  # a diverging local run overflows: caught just below
            delta = local_update(obj, theta, client.epochs, client.batch_size, client.lr, rng)
        overflowed = not np.all(np.isfinite(delta))
        norm = math.inf if overflowed else float(np.linalg.norm(delta))
        if overflowed:  # take part with an all-zero update of weight 0: refusing would make participation
            # depend on the local data
            delta = np.zeros_like(delta)
        if task.votes == "sign":
            return encoding.vote_layout(len(delta)).pack(votes=np.sign(delta).astype(np.int64))
        weighted = task.weighting == "examples"
        omega = 0.0 if overflowed else _weight(obj.n, cap) if weighted else (1.0 if obj.n else 0.0)
        upd = FixedPoint(c, u / c).encode(omega * clip_l2(delta, c), rng)
        clip_entries = task.clip_entries
        parts: dict[str, Any] = {"update": upd}
        if weighted:
            parts["weight"] = FixedPoint(1.0, encoding.weight_unit(pb, task.weight_share)).encode(np.array(omega), rng)
        if clip_entries:  # adaptive clipping: whether the update passed unclipped, or its norm's bucket
            clip = np.zeros(clip_entries, dtype=np.int64)
            slot = 0 if clip_entries == 1 else encoding.norm_bucket(norm, c)
            if clip_entries > 1 or norm <= c:
                clip[slot] = encoding.count_unit(pb, task.count_share)
            parts["clip"] = clip
        return encoding.update_layout(len(delta), weighted, clip_entries).pack(**parts)

    # eval
    loss_cap = task.loss_cap
    metric_names = task.metrics
    tr = objective(model, cap_rows(train_rows, cap, rng), task)
    ev = objective(model, cap_rows(eval_rows, cap, rng), task)
    if task.weighting == "uniform":  # every device with rows counts once, as in training
        wt, we = float(tr.n > 0), float(ev.n > 0)
    else:
        wt, we = _weight(tr.n, cap), _weight(ev.n, cap)
    with np.errstate(all="ignore"):
        ltr = _capped_mean(tr.per_example_loss(theta), loss_cap) / loss_cap if tr.n else 0.0
        lev = _capped_mean(ev.per_example_loss(theta), loss_cap) / loss_cap if ev.n else 0.0
        cor = ev.correct(theta) if ev.n else None
        acc = float(np.mean(cor)) if cor is not None and len(cor) else 0.0
        mets = ev.metrics(theta) if ev.n else {}
    vals = encoding.eval_layout(len(metric_names)).pack(
        train_loss=wt * ltr,
        eval_loss=we * lev,
        accuracy=we * acc,
        metrics=np.array([we * float(np.mean(mets[m])) if m in mets else 0.0 for m in metric_names], dtype=np.float64),
        train_weight=float(wt),
        eval_weight=float(we),
    )
    if not np.all(np.isfinite(vals)):
        return np.zeros(len(vals), dtype=np.int64)  # as in training: take part, contribute nothing
    return FixedPoint(1.0, u).encode(vals, rng)
