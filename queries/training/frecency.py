"""Frecency, the Firefox URL-bar ranking function (Hartmann, "Federated Learning", MSc thesis, FU Berlin
2018, §7.1), as a registered scoring function.

visit(v)     = recency_weight[bucket(age of v)] · type_weight[type of v]
frecency(x)  = |S_x| / |T_x| · Σ_{v ∈ T_x} visit(v)

with S_x all visits to page x, T_x its (up to) 10 most recent, five recency buckets cut at 4, 14, 31 and
90 days, and visit types link (a normal visit), typed, bookmark, other. The nine weights are trained;
the bucket cut-offs and the 10 are fixed (the thesis's §7.2 keeps those two fixed too, and optimising the
integer cut-offs would need integer steps). Handcrafted weights: recency 100, 70, 50, 30, 10; types 1.2,
2.0, 1.4, 0.

An item (one candidate page) is `{"visits": [[age_days, type], …], "visit_count": |S_x|}` where type is
0 link, 1 typed, 2 bookmark, 3 other (or those names) and `visits` lists at least the recent ones.
Trained with the pointwise SVM ranking loss (margin 10 points) via `register_scoring_function`, i.e. by
central finite differences on the device — the function is treated as a black box.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from queries.training.blackbox import register_scoring_function

BUCKET_DAYS = (4, 14, 31, 90)
VISIT_TYPES = ("link", "typed", "bookmark", "other")
RECENT_VISITS = 10
RECENCY_NAMES = ("recency_4d", "recency_14d", "recency_31d", "recency_90d", "recency_older")
TYPE_NAMES = tuple(f"type_{t}" for t in VISIT_TYPES)
PARAM_NAMES = RECENCY_NAMES + TYPE_NAMES
HANDCRAFTED = (100.0, 70.0, 50.0, 30.0, 10.0, 1.2, 2.0, 1.4, 0.0)
MARGIN = 10.0

SAFEGUARDS = {
    "nonnegative": True,
    "ordered_groups": [list(RECENCY_NAMES)],
    "max_change": {**{n: 3.0 for n in RECENCY_NAMES}, **{n: 0.1 for n in TYPE_NAMES}},
}
"""The safeguards of the Firefox study (Hartmann et al. 2019 §5.6; Hartmann 2018 §7.2): weights ≥ 0, newer
buckets ≥ older, and a bounded change per round — 3 points for recency weights as in the study; 0.1 for the
type multipliers, whose scale is ~30× smaller (the study's single bound of 3 would let a multiplier of 1.2
jump to 4.2 in one round)."""

RPROP = {
    "name": "rprop",
    "initial_step": {**{n: 2.0 for n in RECENCY_NAMES}, **{n: 0.02 for n in TYPE_NAMES}},
    "increase": 2.0,
    "decrease": 0.6,
    "step_min": 1e-4,
    "step_max": {**{n: 3.0 for n in RECENCY_NAMES}, **{n: 0.1 for n in TYPE_NAMES}},
    "votes": "sign",
}
"""Rprop settings of the Firefox study (Hartmann 2018 §7.2): initial steps 2 / 0.02, α = 2, β = 0.6, max
step 3 (0.1 for the type multipliers, see SAFEGUARDS)."""


def bucket_of(age_days: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.asarray(BUCKET_DAYS, dtype=np.float64), age_days, side="left")


def _type_code(t: Any) -> int:
    if isinstance(t, str):
        return VISIT_TYPES.index(t) if t in VISIT_TYPES else 3
    return int(t) if isinstance(t, (int, float)) and 0 <= int(t) < 4 else 3


def _visits(item: Any) -> list[tuple[float, int]]:
    visits = item.get("visits") if isinstance(item, dict) else None
    if not isinstance(visits, list):
        return []
    return [
        (max(float(v[0]), 0.0), _type_code(v[1]))
        for v in visits
        if isinstance(v, (list, tuple)) and len(v) == 2 and isinstance(v[0], (int, float)) and np.isfinite(v[0])
    ]


def prepare_items(items: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Items → (counts[i, bucket, type] over the 10 most recent visits, |S|/|T| per item)."""
    n = len(items)
    counts = np.zeros((n, len(RECENCY_NAMES), len(VISIT_TYPES)))
    parsed = [_visits(item) for item in items]
    owner = np.repeat(np.arange(n), [len(p) for p in parsed])
    if not len(owner):
        return counts, np.zeros(n)
    flat = np.array([v for p in parsed for v in p], dtype=np.float64)
    ages, types = flat[:, 0], flat[:, 1].astype(np.int64)
    order = np.lexsort((ages, owner))  # by item, then most recent first
    owner, ages, types = owner[order], ages[order], types[order]
    start = np.searchsorted(owner, owner, side="left")
    keep = np.arange(len(owner)) - start < RECENT_VISITS
    np.add.at(counts, (owner[keep], bucket_of(ages[keep]), types[keep]), 1.0)
    n_recent = counts.sum(axis=(1, 2))
    n_all = np.bincount(owner, minlength=n).astype(np.float64)
    declared = np.array([
        float(it["visit_count"]) if isinstance(it, dict) and isinstance(it.get("visit_count"), (int, float))
        and not isinstance(it.get("visit_count"), bool) else 0.0
        for it in items
    ])
    total = np.maximum(declared, n_all)
    factor = np.divide(total, n_recent, out=np.zeros(n), where=n_recent > 0)
    return counts, factor


def frecency_scores(weights: np.ndarray, prepared: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    counts, factor = prepared
    w = np.asarray(weights, dtype=np.float64)
    rec, typ = w[: len(RECENCY_NAMES)], w[len(RECENCY_NAMES) :]
    scores: np.ndarray = factor * np.einsum("ibt,b,t->i", counts, rec, typ)
    return scores


def frecency(weights: np.ndarray, item: dict[str, Any]) -> float:
    """Score of one page (convenience for apps and tests)."""
    return float(frecency_scores(weights, prepare_items([item]))[0])


MODEL = register_scoring_function(
    "frecency",
    frecency_scores,
    PARAM_NAMES,
    HANDCRAFTED,
    prepare_items=prepare_items,
    margin=MARGIN,
    display=1,
    max_query_length=30.0,
    max_rank=50.0,
    fd_step=1e-3,
)


def example_params(rounds: int = 30, eval_every: int = 5, clients_per_round: int | None = None) -> dict[str, Any]:
    """The params of the worked example (what `fa submit` gets in docs/frecency.md)."""
    return {
        "model": {"name": "frecency"},
        "rounds": rounds,
        "clients_per_round": clients_per_round,
        "client": {"epochs": 1, "batch_size": 0, "lr": 1.0, "max_examples": 200},
        "server_optimizer": dict(RPROP),
        "safeguards": dict(SAFEGUARDS),
        "eval_every": eval_every,
        "holdout_fraction": 0.3,
        "loss_cap": 1000.0,
    }
