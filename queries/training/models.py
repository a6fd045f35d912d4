"""Differentiable numpy models for the `training` kind and the registry that names them.

A model works on one flat float64 parameter vector θ (what the server stores, sends and updates) and
knows how to unflatten it. Gradients are written by hand. Built in: `logistic` (binary logistic
regression), `softmax` (multinomial logistic regression), `mlp` (one hidden layer, tanh or relu,
softmax output) and `linear` (least squares). An application adds its own with `register_model(name,
factory)`, where `factory(spec: dict) -> Model`; black-box models (loss only, gradients by finite
differences) live in `queries.training.blackbox`.

Losses are means over the examples, optionally weighted per example (class weighting), plus
`l2/2 · ‖W‖²` on the non-bias weights.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from queries.kind import QueryKindError
from queries.training.limits import MAX_CLASSES, MAX_FEATURES, MAX_HIDDEN, MAX_MODEL_PARAMS


class Model(ABC):
    """A model over a flat parameter vector, with per-example loss and hand-written gradient."""

    name: str = ""
    n_classes: int | None = None
    """Number of classes for classifiers (labels are ints in [0, n_classes)); None for regression."""

    @property
    @abstractmethod
    def n_params(self) -> int: ...

    @abstractmethod
    def initial_weights(self, rng: np.random.Generator) -> np.ndarray: ...

    @abstractmethod
    def per_example_loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def loss_grad(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None
    ) -> tuple[float, np.ndarray]:
        """Mean (weighted) loss over the batch plus the L2 penalty, and its gradient w.r.t. θ."""

    @abstractmethod
    def predict(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class index per row for classifiers, the prediction for regression."""

    def scores(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Probability of class 1 (logistic), class probabilities (softmax/mlp) or the prediction."""
        return self.predict(theta, X)

    def check_labels(self, y: np.ndarray) -> None:
        if self.n_classes is None:
            return
        bad = (y != np.round(y)) | (y < 0) | (y >= self.n_classes)
        if np.any(bad):
            raise QueryKindError(f"rows: label {y[bad][0]!r} is not a class index in [0, {self.n_classes})")


def _weights(sample_weight: np.ndarray | None, n: int) -> np.ndarray:
    if sample_weight is None:
        return np.full(n, 1.0 / max(n, 1))
    total = float(np.sum(sample_weight))
    return np.asarray(sample_weight, dtype=np.float64) / (total if total > 0 else 1.0)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    logp: np.ndarray = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return logp


@dataclass
class Logistic(Model):
    n_features: int
    l2: float = 0.0
    name: str = "logistic"
    n_classes: int | None = 2

    @property
    def n_params(self) -> int:
        return self.n_features + 1

    def initial_weights(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(self.n_params)

    def _logits(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        logits: np.ndarray = X @ theta[:-1] + theta[-1]
        return logits

    def per_example_loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        z = self._logits(theta, X)
        loss: np.ndarray = np.logaddexp(0.0, z) - y * z  # −[y log σ(z) + (1−y) log(1−σ(z))], stable
        return loss

    def loss_grad(self, theta, X, y, sample_weight=None):  # type: ignore[no-untyped-def]
        w = _weights(sample_weight, len(y))
        z = self._logits(theta, X)
        loss = float(w @ (np.logaddexp(0.0, z) - y * z)) + 0.5 * self.l2 * float(theta[:-1] @ theta[:-1])
        r = w * (_sigmoid(z) - y)
        grad = np.empty_like(theta)
        grad[:-1] = X.T @ r + self.l2 * theta[:-1]
        grad[-1] = r.sum()
        return loss, grad

    def scores(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        return _sigmoid(self._logits(theta, X))

    def predict(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        return (self._logits(theta, X) > 0).astype(np.int64)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """1/(1 + e^−z) without overflow for large |z| (diverged weights)."""
    sig: np.ndarray = np.exp(-np.logaddexp(0.0, -z))
    return sig


@dataclass
class Softmax(Model):
    n_features: int
    n_classes: int | None = 2
    l2: float = 0.0
    name: str = "softmax"

    @property
    def k(self) -> int:
        assert self.n_classes is not None
        return self.n_classes

    @property
    def n_params(self) -> int:
        return (self.n_features + 1) * self.k

    def initial_weights(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(self.n_params)

    def _unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        W = theta[: self.n_features * self.k].reshape(self.n_features, self.k)
        return W, theta[self.n_features * self.k :]

    def per_example_loss(self, theta, X, y):  # type: ignore[no-untyped-def]
        W, b = self._unpack(theta)
        logp = _log_softmax(X @ W + b)
        return -logp[np.arange(len(y)), y.astype(np.int64)]

    def loss_grad(self, theta, X, y, sample_weight=None):  # type: ignore[no-untyped-def]
        w = _weights(sample_weight, len(y))
        W, b = self._unpack(theta)
        logp = _log_softmax(X @ W + b)
        yi = y.astype(np.int64)
        loss = float(-(w * logp[np.arange(len(y)), yi]).sum()) + 0.5 * self.l2 * float((W * W).sum())
        d = np.exp(logp)
        d[np.arange(len(y)), yi] -= 1.0
        d *= w[:, None]
        return loss, np.concatenate([(X.T @ d + self.l2 * W).ravel(), d.sum(axis=0)])

    def scores(self, theta, X):  # type: ignore[no-untyped-def]
        W, b = self._unpack(theta)
        return np.exp(_log_softmax(X @ W + b))

    def predict(self, theta, X):  # type: ignore[no-untyped-def]
        W, b = self._unpack(theta)
        return np.argmax(X @ W + b, axis=1)


@dataclass
class MLP(Model):
    """x → act(x W1 + b1) → softmax(h W2 + b2). Glorot-uniform initial weights from the spec's seed."""

    n_features: int
    hidden: int
    n_classes: int | None = 2
    activation: str = "tanh"
    l2: float = 0.0
    name: str = "mlp"

    @property
    def k(self) -> int:
        assert self.n_classes is not None
        return self.n_classes

    @property
    def n_params(self) -> int:
        return self.n_features * self.hidden + self.hidden + self.hidden * self.k + self.k

    def _unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        f, h, k = self.n_features, self.hidden, self.k
        i = 0
        W1 = theta[i : i + f * h].reshape(f, h)
        i += f * h
        b1 = theta[i : i + h]
        i += h
        W2 = theta[i : i + h * k].reshape(h, k)
        i += h * k
        return W1, b1, W2, theta[i : i + k]

    def initial_weights(self, rng: np.random.Generator) -> np.ndarray:
        f, h, k = self.n_features, self.hidden, self.k
        a1, a2 = np.sqrt(6.0 / (f + h)), np.sqrt(6.0 / (h + k))
        return np.concatenate([rng.uniform(-a1, a1, f * h), np.zeros(h), rng.uniform(-a2, a2, h * k), np.zeros(k)])

    def _forward(self, theta: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        W1, b1, W2, b2 = self._unpack(theta)
        pre = X @ W1 + b1
        hid = np.tanh(pre) if self.activation == "tanh" else np.maximum(pre, 0.0)
        return pre, hid, _log_softmax(hid @ W2 + b2)

    def per_example_loss(self, theta, X, y):  # type: ignore[no-untyped-def]
        _, _, logp = self._forward(theta, X)
        return -logp[np.arange(len(y)), y.astype(np.int64)]

    def loss_grad(self, theta, X, y, sample_weight=None):  # type: ignore[no-untyped-def]
        w = _weights(sample_weight, len(y))
        W1, _, W2, _ = self._unpack(theta)
        pre, hid, logp = self._forward(theta, X)
        yi = y.astype(np.int64)
        loss = float(-(w * logp[np.arange(len(y)), yi]).sum())
        loss += 0.5 * self.l2 * float((W1 * W1).sum() + (W2 * W2).sum())
        d2 = np.exp(logp)
        d2[np.arange(len(y)), yi] -= 1.0
        d2 *= w[:, None]
        gW2 = hid.T @ d2 + self.l2 * W2
        dh = d2 @ W2.T
        d1 = dh * (1.0 - hid * hid) if self.activation == "tanh" else dh * (pre > 0)
        gW1 = X.T @ d1 + self.l2 * W1
        return loss, np.concatenate([gW1.ravel(), d1.sum(axis=0), gW2.ravel(), d2.sum(axis=0)])

    def scores(self, theta, X):  # type: ignore[no-untyped-def]
        return np.exp(self._forward(theta, X)[2])

    def predict(self, theta, X):  # type: ignore[no-untyped-def]
        return np.argmax(self._forward(theta, X)[2], axis=1)


@dataclass
class Linear(Model):
    """Least squares: loss ½(x·w + b − y)²."""

    n_features: int
    l2: float = 0.0
    name: str = "linear"
    n_classes: int | None = None

    @property
    def n_params(self) -> int:
        return self.n_features + 1

    def initial_weights(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(self.n_params)

    def per_example_loss(self, theta, X, y):  # type: ignore[no-untyped-def]
        return 0.5 * (X @ theta[:-1] + theta[-1] - y) ** 2

    def loss_grad(self, theta, X, y, sample_weight=None):  # type: ignore[no-untyped-def]
        w = _weights(sample_weight, len(y))
        r = X @ theta[:-1] + theta[-1] - y
        loss = float(0.5 * (w * r * r).sum()) + 0.5 * self.l2 * float(theta[:-1] @ theta[:-1])
        g = np.empty_like(theta)
        g[:-1] = X.T @ (w * r) + self.l2 * theta[:-1]
        g[-1] = (w * r).sum()
        return loss, g

    def predict(self, theta, X):  # type: ignore[no-untyped-def]
        return X @ theta[:-1] + theta[-1]


ModelFactory = Callable[[dict[str, Any]], Model]
_MODELS: dict[str, ModelFactory] = {}


def register_model(name: str, factory: ModelFactory) -> None:
    """Adds a model kind: `factory(spec)` gets the query's `params.model` dict and returns a Model."""
    if not name or name in _MODELS:
        raise ValueError(f"model {name!r} is empty or registered twice")
    _MODELS[name] = factory


def known_models() -> list[str]:
    return sorted(_MODELS)


def _int(spec: dict[str, Any], key: str, low: int, default: int | None = None, high: int = MAX_MODEL_PARAMS) -> int:
    value = spec.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        shown = value if not isinstance(value, int) or abs(value) < 10**30 else f"an integer of {len(str(value))} digits"
        raise QueryKindError(f"model.{key}: must be an integer in [{low}, {high}], got {shown!r}")
    return value


def _float(spec: dict[str, Any], key: str, default: float) -> float:
    value = spec.get(key, default)
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer too large for a float
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise QueryKindError(f"model.{key}: must be a non-negative finite number, got {str(value)[:40]}")
    return number


def build_model(spec: dict[str, Any]) -> Model:
    """`params.model` → Model; raises QueryKindError naming the bad field."""
    name = spec.get("name")
    if not isinstance(name, str) or name not in _MODELS:
        raise QueryKindError(f"model.name: unknown model {name!r} (known: {', '.join(known_models())})")
    model = _MODELS[name](spec)
    check_size(model)
    return model


def check_size(model: Model) -> None:
    """Refuse a model with more than `MAX_MODEL_PARAMS` weights (computed from its dimensions, nothing allocated)."""
    n = model.n_params
    if n > MAX_MODEL_PARAMS:
        dims = ", ".join(f"{k}={getattr(model, k)}" for k in ("n_features", "hidden", "n_classes") if getattr(model, k, None))
        raise QueryKindError(
            f"model: {model.name} with {dims} has {n:,} parameters, more than the limit of {MAX_MODEL_PARAMS:,}; "
            "lower model.n_features, model.hidden or model.n_classes"
        )


def _activation(spec: dict[str, Any]) -> str:
    act = spec.get("activation", "tanh")
    if act not in ("tanh", "relu"):
        raise QueryKindError(f"model.activation: must be 'tanh' or 'relu', got {act!r}")
    return str(act)


def _features(spec: dict[str, Any]) -> int:
    return _int(spec, "n_features", 1, high=MAX_FEATURES)


def _classes(spec: dict[str, Any]) -> int:
    return _int(spec, "n_classes", 2, high=MAX_CLASSES)


register_model("logistic", lambda s: Logistic(_features(s), _float(s, "l2", 0.0)))
register_model("linear", lambda s: Linear(_features(s), _float(s, "l2", 0.0)))
register_model("softmax", lambda s: Softmax(_features(s), _classes(s), _float(s, "l2", 0.0)))
register_model(
    "mlp",
    lambda s: MLP(_features(s), _int(s, "hidden", 1, 32, high=MAX_HIDDEN), _classes(s), _activation(s), _float(s, "l2", 0.0)),
)
