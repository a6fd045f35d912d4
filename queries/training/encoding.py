"""Vector layouts of the three round types (`queries.layout.Layout`s, used by the device encoder in
`client` and the server decoder in `kind`) and their true per-device bounds (what DP and secagg use).

Fixed point: a value v in [−c, c] becomes round(v·U/c) with U = 2^precision_bits, rounded
stochastically (unbiased, `secagg.encoding.FixedPoint`). Rounding moves each entry by less than 1, so for
d entries whose real vector x has ‖x‖₂ ≤ U: max |q_i| ≤ U, ‖q‖₂ ≤ U + √d, ‖q‖₁ ≤ √d·U + d.

- train, clipped updates (`update_layout`): [update: ω·clip_C(Δ) at scale U/C (d entries) | weight: ω at
  scale W = U·weight_share] with ω = min(n, max_examples)/max_examples (weighting "examples"); with
  weighting "uniform" ω = 1 and the weight entry is left out (the server divides by the exact contributor
  count).
- train, sign votes (`vote_layout`): [votes: sign(Δ_i) ∈ {−1, 0, +1}] — max_abs 1, L1 ≤ d, L2 ≤ √d; the
  secagg ring then needs only bits_for(n, 1) bits per entry.
- eval (`eval_layout`): k = 5 + #metrics entries in [0, 1] at scale U: train_loss ω_t·L_train/cap,
  eval_loss ω_e·L_eval/cap, accuracy ω_e·accuracy, metrics ω_e·metric_j/bound_j…, train_weight ω_t,
  eval_weight ω_e — L1 ≤ k·U, L2 ≤ √k·U.
- label counts (`label_layout`): [shares: ω·n_k/n] at scale U (sum ≤ 1) — L1 ≤ U + K, L2 ≤ U + √K.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from queries.layout import Layout


@dataclass(frozen=True)
class Bounds:
    dim: int
    max_abs: int
    l1: float
    l2: float


def unit(precision_bits: int) -> int:
    return 1 << precision_bits


def weight_unit(precision_bits: int, weight_share: float) -> int:
    return max(1, round(unit(precision_bits) * weight_share))


def update_layout(d: int, weighted: bool) -> Layout:
    return Layout.of(update=d, weight=()) if weighted else Layout.of(update=d)


def vote_layout(d: int) -> Layout:
    return Layout.of(votes=d)


def eval_layout(n_metrics: int) -> Layout:
    return Layout.of(train_loss=(), eval_loss=(), accuracy=(), metrics=n_metrics, train_weight=(), eval_weight=())


def label_layout(n_classes: int) -> Layout:
    return Layout.of(shares=n_classes)


def train_bounds(d: int, votes: bool, weighted: bool, precision_bits: int, weight_share: float) -> Bounds:
    if votes:
        return Bounds(vote_layout(d).dim, 1, float(d), math.sqrt(d))
    u = unit(precision_bits)
    w = weight_unit(precision_bits, weight_share) if weighted else 0
    return Bounds(
        dim=update_layout(d, weighted).dim,
        max_abs=u,
        l1=math.sqrt(d) * u + d + w,
        l2=math.sqrt((u + math.sqrt(d)) ** 2 + w * w),
    )


def eval_bounds(n_metrics: int, precision_bits: int) -> Bounds:
    u = unit(precision_bits)
    k = eval_layout(n_metrics).dim
    return Bounds(k, u, float(k * u), math.sqrt(k) * u)


def label_bounds(n_classes: int, precision_bits: int) -> Bounds:
    u = unit(precision_bits)
    return Bounds(label_layout(n_classes).dim, u, float(u + n_classes), u + math.sqrt(n_classes))
