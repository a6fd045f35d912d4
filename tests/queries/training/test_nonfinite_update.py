"""A device whose local update (or evaluation) is not finite takes part with an all-zero vector instead of
refusing the task: participation must not depend on the data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from queries.registry import get_kind

KIND = get_kind("training")
ROWS = [{"x": [1e3, -1e3], "y": 1e3}, {"x": [-1e3, 1e3], "y": -1e3}]


def _task(optimizer: dict[str, Any], weighting: str = "examples", phase: str = "train",
          model: str = "linear") -> tuple[dict[str, Any], int]:
    params = KIND.parse_params({
        "model": {"name": model, "n_features": 2}, "rounds": 3, "eval_every": 0 if phase == "train" else 1,
        "client": {"epochs": 100, "lr": 1e6}, "server_optimizer": optimizer, "weighting": weighting,
        "holdout_fraction": 0.0,
    })
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    assert plan is not None and plan.task["phase"] == phase
    return plan.task, plan.dim


@pytest.mark.parametrize("optimizer, weighting", [
    ({"name": "fedavg"}, "examples"),
    ({"name": "fedavg"}, "uniform"),
    ({"name": "rprop", "votes": "sign"}, "examples"),
])
def test_diverging_local_update_sends_zeros(optimizer: dict[str, Any], weighting: str) -> None:
    task, dim = _task(optimizer, weighting)
    vec = KIND.contribute(KIND.parse_task(task), ROWS, np.random.default_rng(0))
    assert vec.dtype == np.int64 and vec.shape == (dim,)
    assert not vec.any()


def test_non_finite_evaluation_takes_part_at_the_loss_cap() -> None:
    task, dim = _task({"name": "fedavg"}, phase="eval", model="logistic")
    task = {**task, "weights": [1e308, 1e308, 0.0]}  # z = +inf: log(1 + e^z) − y·z = inf − inf is NaN
    vec = KIND.contribute(KIND.parse_task(task), [{"x": [1e3, 1e3], "y": 1}], np.random.default_rng(0))
    capped = KIND.contribute(KIND.parse_task({**task, "weights": [0.0, 0.0, 0.0], "loss_cap": 1e-300}),
                             [{"x": [1e3, 1e3], "y": 1}], np.random.default_rng(0))
    # a NaN loss counts as the cap (not a refusal: participation must not depend on the data)
    assert vec.shape == (dim,) and vec.dtype == np.int64 and vec[0] == capped[0] and vec[1] == capped[1]


def test_finite_update_is_unchanged() -> None:
    task, dim = _task({"name": "fedavg"})
    task = {**task, "client": {**task["client"], "lr": 1e-3, "epochs": 1}}
    vec = KIND.contribute(KIND.parse_task(task), ROWS, np.random.default_rng(0))
    assert vec.shape == (dim,) and vec.any()
