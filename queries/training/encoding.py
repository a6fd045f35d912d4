"""Vector layouts of the three round types (`queries.layout.Layout`s, used by the device encoder in
`client` and the server decoder in `kind`) and their true per-device bounds (what DP and secagg use).

Fixed point: a value v in [−c, c] becomes round(v·U/c) with U = 2^precision_bits, rounded
stochastically (unbiased, `secagg.encoding.FixedPoint`). Rounding moves each entry by less than 1, so for
d entries whose real vector x has ‖x‖₂ ≤ U: max |q_i| ≤ U, ‖q‖₂ ≤ U + √d, ‖q‖₁ ≤ √d·U + d.

- train, clipped updates (`update_layout`): [update: ω·clip_C(Δ) at scale U/C (d entries) | weight: ω at
  scale W = U·weight_share | clip: the adaptive-clipping entries at scale B = U·count_share] with
  ω = min(n, max_examples)/max_examples (weighting "examples"); with weighting "uniform" ω = 1 and the
  weight entry is left out (the server divides by the exact contributor count). The clip entries (adaptive
  clipping only) are one bit 1[‖Δ‖ ≤ C], or in the warm-start round a one-hot over `NORM_BUCKETS` buckets of
  ‖Δ‖ on the grid C·2^(k − NORM_OCTAVES), k = 0 … 2·NORM_OCTAVES (the last bucket: above the grid).
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


NORM_OCTAVES = 8
"""The warm-start histogram spans C·2^−8 … C·2^8."""
NORM_BUCKETS = 2 * NORM_OCTAVES + 2
"""Its buckets: one per grid point, plus one above the grid."""


def norm_grid(clip_norm: float) -> list[float]:
    """Upper edges of the warm-start histogram's buckets (the last bucket, above them, has none)."""
    return [clip_norm * 2.0 ** (k - NORM_OCTAVES) for k in range(2 * NORM_OCTAVES + 1)]


def norm_bucket(norm: float, clip_norm: float) -> int:
    """The bucket of an update norm: the first grid edge at or above it (NORM_BUCKETS − 1 above the grid)."""
    for k, edge in enumerate(norm_grid(clip_norm)):
        if norm <= edge:
            return k
    return NORM_BUCKETS - 1


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


def count_unit(precision_bits: int, count_share: float) -> int:
    return max(1, round(unit(precision_bits) * count_share))


def update_layout(d: int, weighted: bool, clip_entries: int = 0) -> Layout:
    """`clip_entries`: 0 (fixed clip norm), 1 (the adaptive-clipping bit) or NORM_BUCKETS (warm start)."""
    shapes: dict[str, int | tuple[int, ...]] = {"update": d}
    if weighted:
        shapes["weight"] = ()
    if clip_entries:
        shapes["clip"] = clip_entries
    return Layout.of(**shapes)


def vote_layout(d: int) -> Layout:
    return Layout.of(votes=d)


def eval_layout(n_metrics: int) -> Layout:
    return Layout.of(train_loss=(), eval_loss=(), accuracy=(), metrics=n_metrics, train_weight=(), eval_weight=())


def label_layout(n_classes: int) -> Layout:
    return Layout.of(shares=n_classes)


def train_bounds(
    d: int, votes: bool, weighted: bool, precision_bits: int, weight_share: float, clip_entries: int = 0,
    count_share: float = 0.0,
) -> Bounds:
    if votes:
        return Bounds(vote_layout(d).dim, 1, float(d), math.sqrt(d))
    u = unit(precision_bits)
    w = weight_unit(precision_bits, weight_share) if weighted else 0
    b = count_unit(precision_bits, count_share) if clip_entries else 0  # one clip entry is non-zero, at most b
    return Bounds(
        dim=update_layout(d, weighted, clip_entries).dim,
        max_abs=max(u, b),
        l1=math.sqrt(d) * u + d + w + b,
        l2=math.sqrt((u + math.sqrt(d)) ** 2 + w * w + b * b),
    )


def eval_bounds(n_metrics: int, precision_bits: int) -> Bounds:
    u = unit(precision_bits)
    k = eval_layout(n_metrics).dim
    return Bounds(k, u, float(k * u), math.sqrt(k) * u)


def label_bounds(n_classes: int, precision_bits: int) -> Bounds:
    u = unit(precision_bits)
    return Bounds(label_layout(n_classes).dim, u, float(u + n_classes), u + math.sqrt(n_classes))
