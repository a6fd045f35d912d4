"""Black-box models: a loss (or a ranking scoring function) registered by name, no gradient code.

Devices estimate the gradient of their local mean loss by central finite differences
(`queries.training.finite_diff`), so any function with tunable numeric weights can be trained — the
frecency ranking of the Firefox URL bar (Hartmann et al., "Federated Learning for Ranking Browser
History Suggestions", 2019) is the worked example (`queries.training.frecency`).

Two ways to register (the device SDK re-exports `register_scoring_function`):
- `register_blackbox(BlackBoxModel(...))`: a per-row loss `loss(weights, batch) -> array`, where `batch`
  is what `prepare(rows)` made of the device's rows, plus optional accuracy and metric functions.
- `register_scoring_function(name, score, param_names, initial_weights, …)`: a pointwise ranking score
  `score(weights, items) -> array` (one score per item, `items` as made by `prepare_items`). Rows are
  URL-bar style interactions `{"items": [...], "selected": i, "match_chars"?: [...], "query_length"?: L}`;
  the loss is the pointwise SVM ranking loss of Hartmann et al. 2019 §5.2, Σ_{j≠i} max(0, s_j + Δ − s_i),
  and the metrics are the rank of the selected item (1 = top, ties count half) and, when rows say how many
  typed characters each item keeps matching, the characters typed before the selected item shows up
  in the first `display` suggestions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from queries.kind import QueryKindError

Batch = Any
LossFn = Callable[[np.ndarray, Batch], np.ndarray]
MetricFn = Callable[[np.ndarray, Batch], np.ndarray]


@dataclass(frozen=True)
class Metric:
    fn: MetricFn
    """Per-row values of the metric under the given weights."""
    bound: float
    """Values are clipped to [0, bound] before they are summed (bounds one device's contribution)."""


@dataclass(frozen=True)
class BlackBoxModel:
    name: str
    param_names: tuple[str, ...]
    initial_weights: tuple[float, ...]
    loss: LossFn
    prepare: Callable[[list[Any]], Batch] = field(default=lambda rows: rows)
    size: Callable[[Batch], int] = field(default=len)
    subset: Callable[[Batch, np.ndarray], Batch] | None = None
    """Picks rows of a prepared batch by index (mini-batches); None → re-prepare the raw rows."""
    correct: MetricFn | None = None
    """Per-row 1.0/0.0 (reported as `accuracy`)."""
    metrics: dict[str, Metric] = field(default_factory=dict)
    fd_step: float = 1e-3

    def __post_init__(self) -> None:
        if len(self.param_names) != len(self.initial_weights):
            raise ValueError(f"{self.name}: {len(self.param_names)} param names but {len(self.initial_weights)} initial weights")
        if len(set(self.param_names)) != len(self.param_names):
            raise ValueError(f"{self.name}: duplicate parameter names")

    @property
    def n_params(self) -> int:
        return len(self.param_names)


_BLACKBOX: dict[str, BlackBoxModel] = {}


def register_blackbox(model: BlackBoxModel, replace: bool = False) -> BlackBoxModel:
    if model.name in _BLACKBOX and not replace:
        raise ValueError(f"black-box model {model.name!r} registered twice")
    _BLACKBOX[model.name] = model
    return model


def get_blackbox(name: str) -> BlackBoxModel:
    try:
        return _BLACKBOX[name]
    except KeyError:
        known = ", ".join(sorted(_BLACKBOX)) or "none"
        raise QueryKindError(f"model.name: unknown black-box model {name!r} (known: {known})") from None


def known_blackbox() -> list[str]:
    return sorted(_BLACKBOX)


# ----------------------------------------------------------------------------- ranking (scoring fns)


@dataclass(frozen=True)
class RankingBatch:
    """Interactions flattened to items: item data, owning row, selected flag, typing info."""

    items: Any
    row_of_item: np.ndarray
    selected: np.ndarray  # bool per item
    n_rows: int
    match_chars: np.ndarray  # per item; selected item = query_length
    query_length: np.ndarray  # per row
    raw_rows: list[Any]

    def __len__(self) -> int:
        return self.n_rows


def _parse_interactions(rows: list[Any]) -> tuple[list[Any], list[int], list[bool], list[float], list[float], list[Any]]:
    items: list[Any] = []
    owner: list[int] = []
    sel: list[bool] = []
    match: list[float] = []
    qlen: list[float] = []
    kept: list[Any] = []
    for row in rows:
        if not isinstance(row, dict):
            continue
        its, s = row.get("items"), row.get("selected")
        if not isinstance(its, list) or len(its) < 2 or not isinstance(s, int) or not 0 <= s < len(its):
            continue  # not a usable interaction: ignore, like any malformed local row
        L = row.get("query_length", 1)
        L = float(L) if isinstance(L, (int, float)) and L >= 1 else 1.0
        mc = row.get("match_chars")
        mc = [float(v) for v in mc] if isinstance(mc, list) and len(mc) == len(its) else [L] * len(its)
        mc[s] = L
        r = len(kept)
        kept.append(row)
        qlen.append(L)
        for j, it in enumerate(its):
            items.append(it)
            owner.append(r)
            sel.append(j == s)
            match.append(mc[j])
    return items, owner, sel, match, qlen, kept


def ranking_batch(rows: list[Any], prepare_items: Callable[[list[Any]], Any]) -> RankingBatch:
    items, owner, sel, match, qlen, kept = _parse_interactions(rows)
    return RankingBatch(
        items=prepare_items(items),
        row_of_item=np.asarray(owner, dtype=np.int64),
        selected=np.asarray(sel, dtype=bool),
        n_rows=len(kept),
        match_chars=np.asarray(match, dtype=np.float64),
        query_length=np.asarray(qlen, dtype=np.float64),
        raw_rows=kept,
    )


def _selected_scores(scores: np.ndarray, b: RankingBatch) -> np.ndarray:
    out = np.empty(b.n_rows)
    out[b.row_of_item[b.selected]] = scores[b.selected]
    return out


def svm_rank_loss(scores: np.ndarray, b: RankingBatch, margin: float) -> np.ndarray:
    """Per row Σ_{j≠i} max(0, s_j + Δ − s_i) (pointwise SVM ranking, Hartmann et al. 2019 §5.2)."""
    s_sel = _selected_scores(scores, b)[b.row_of_item]
    hinge = np.where(b.selected, 0.0, np.maximum(0.0, scores + margin - s_sel))
    return np.bincount(b.row_of_item, weights=hinge, minlength=b.n_rows)


def selected_rank(scores: np.ndarray, b: RankingBatch, among: np.ndarray | None = None) -> np.ndarray:
    """1-based rank of the selected item per row (ties with other items count half)."""
    s_sel = _selected_scores(scores, b)[b.row_of_item]
    other = ~b.selected if among is None else (~b.selected & among)
    above = np.bincount(b.row_of_item, weights=(other & (scores > s_sel)).astype(float), minlength=b.n_rows)
    ties = np.bincount(b.row_of_item, weights=(other & (scores == s_sel)).astype(float), minlength=b.n_rows)
    return 1.0 + above + 0.5 * ties


def chars_typed(scores: np.ndarray, b: RankingBatch, display: int) -> np.ndarray:
    """Characters typed until the selected item is among the first `display` matching suggestions."""
    out = b.query_length.copy()
    done = np.zeros(b.n_rows, dtype=bool)
    for c in range(1, int(b.query_length.max(initial=1)) + 1):
        rank = selected_rank(scores, b, among=b.match_chars >= c)
        hit = ~done & (rank <= display) & (c <= b.query_length)
        out[hit] = c
        done |= hit
        if done.all():
            break
    return out


def register_scoring_function(
    name: str,
    score: Callable[[np.ndarray, Any], np.ndarray],
    param_names: Sequence[str],
    initial_weights: Sequence[float],
    *,
    prepare_items: Callable[[list[Any]], Any] = lambda items: items,
    margin: float = 1.0,
    display: int = 5,
    max_query_length: float = 30.0,
    max_rank: float = 50.0,
    fd_step: float = 1e-3,
    replace: bool = False,
) -> BlackBoxModel:
    """Registers a pointwise ranking function trained with the SVM ranking loss (see module doc)."""

    def scores(w: np.ndarray, b: RankingBatch) -> np.ndarray:
        s = np.asarray(score(w, b.items), dtype=np.float64)
        if s.shape != b.selected.shape:
            raise QueryKindError(f"{name}: scoring function returned {s.shape} scores for {b.selected.shape[0]} items")
        return s

    def subset(b: RankingBatch, idx: np.ndarray) -> RankingBatch:
        return ranking_batch([b.raw_rows[i] for i in idx], prepare_items)

    model = BlackBoxModel(
        name=name,
        param_names=tuple(param_names),
        initial_weights=tuple(float(v) for v in initial_weights),
        loss=lambda w, b: svm_rank_loss(scores(w, b), b, margin),
        prepare=lambda rows: ranking_batch(rows, prepare_items),
        size=lambda b: b.n_rows,
        subset=subset,
        correct=lambda w, b: (selected_rank(scores(w, b), b) == 1.0).astype(np.float64),
        metrics={
            "mean_rank": Metric(lambda w, b: selected_rank(scores(w, b), b), max_rank),
            "chars_typed": Metric(lambda w, b: chars_typed(scores(w, b), b, display), max_query_length),
        },
        fd_step=fd_step,
    )
    return register_blackbox(model, replace=replace)
