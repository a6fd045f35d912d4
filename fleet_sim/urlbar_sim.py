"""Simulated URL-bar interactions for the frecency example, in the style of the simulations of Hartmann et
al., "Federated Learning for Ranking Browser History Suggestions", 2019, §6.1, and of Hartmann, "Federated
Learning", MSc thesis, FU Berlin 2018, §7.3.

Each device has its own history: pages whose visit counts follow an exponential distribution (mean 7),
visit ages over the past 180 days skewed towards recent ones, visit types link 60 %, typed 20 %,
bookmark 20 %. An interaction: the user types a query of L characters; a random set of the device's
pages matches the first character (about 10), each non-selected page keeps matching for a random
number of characters, and the page the user picks is the one with the highest *true* preference plus
Gaussian noise. The true preference is frecency under hidden `TRUE_WEIGHTS`, which value recent and
typed visits more than the handcrafted weights — so training from the handcrafted weights has
something to find. Pure numpy-Generator code (simulation data only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from queries.training.blackbox import chars_typed, ranking_batch, selected_rank, svm_rank_loss
from queries.training.frecency import MARGIN, frecency_scores, prepare_items

TRUE_WEIGHTS = (130.0, 60.0, 30.0, 12.0, 4.0, 1.0, 3.0, 1.3, 0.0)
"""Hidden preference of the simulated users (recency 4d…older, types link, typed, bookmark, other)."""


def make_history(rng: np.random.Generator, n_pages: int) -> list[dict[str, Any]]:
    pages = []
    for _ in range(n_pages):
        count = 1 + int(rng.exponential(7.0))
        shown = min(count, 10)
        ages = np.sort(180.0 * rng.beta(0.7, 1.6, size=shown))
        types = rng.choice(3, size=shown, p=[0.6, 0.2, 0.2])
        pages.append({"visits": [[round(float(a), 2), int(t)] for a, t in zip(ages, types)], "visit_count": count})
    return pages


def make_device_rows(
    rng: np.random.Generator,
    n_interactions: int = 20,
    n_pages: int = 60,
    true_weights: tuple[float, ...] = TRUE_WEIGHTS,
    noise_sd: float = 20.0,
    mean_candidates: float = 10.0,
) -> list[dict[str, Any]]:
    """One device's URL-bar interactions: `{"items", "selected", "match_chars", "query_length"}` rows."""
    pages = make_history(rng, n_pages)
    true_scores = frecency_scores(np.asarray(true_weights), prepare_items(pages))
    rows = []
    for _ in range(n_interactions):
        k = int(np.clip(round(rng.normal(mean_candidates, 3.0)), 2, n_pages))
        idx = rng.choice(n_pages, size=k, replace=False)
        noisy = true_scores[idx] + rng.normal(0.0, noise_sd, size=k)
        sel = int(np.argmax(noisy))
        length = int(rng.integers(4, 13))
        match = rng.integers(1, length + 1, size=k)
        match[sel] = length
        rows.append({
            "items": [pages[i] for i in idx],
            "selected": sel,
            "match_chars": [int(m) for m in match],
            "query_length": length,
        })
    return rows


def make_population(rng: np.random.Generator, n_devices: int, **kwargs: Any) -> list[list[dict[str, Any]]]:
    return [make_device_rows(rng, **kwargs) for _ in range(n_devices)]


def evaluate(weights: np.ndarray | Sequence[float], rows: list[dict[str, Any]], display: int = 1) -> dict[str, float]:
    """Central metrics over rows: mean SVM loss, mean rank of the selected item, mean characters typed."""
    b = ranking_batch(rows, prepare_items)
    s = frecency_scores(np.asarray(weights, dtype=np.float64), b.items)
    rank = selected_rank(s, b)
    return {
        "loss": float(np.mean(svm_rank_loss(s, b, MARGIN))),
        "mean_rank": float(np.mean(rank)),
        "top1": float(np.mean(rank == 1.0)),
        "chars_typed": float(np.mean(chars_typed(s, b, display))),
    }
