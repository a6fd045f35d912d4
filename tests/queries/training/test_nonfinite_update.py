"""A device whose local update (or evaluation) is not finite takes part with an all-zero vector instead of
refusing the task: participation must not depend on the data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from queries.kind import get_kind

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
    vec = KIND.contribute(task, ROWS)
    assert vec.dtype == np.int64 and vec.shape == (dim,)
    assert not vec.any()


def test_non_finite_evaluation_sends_zeros() -> None:
    task, dim = _task({"name": "fedavg"}, phase="eval", model="logistic")
    task = {**task, "weights": [1e308, 1e308, 0.0]}  # z = +inf: log(1 + e^z) − y·z = inf − inf is NaN
    vec = KIND.contribute(task, [{"x": [1e3, 1e3], "y": 1}])
    assert vec.shape == (dim,) and not vec.any()


def test_finite_update_is_unchanged() -> None:
    task, dim = _task({"name": "fedavg"})
    task = {**task, "client": {**task["client"], "lr": 1e-3, "epochs": 1}}
    vec = KIND.contribute(task, ROWS)
    assert vec.shape == (dim,) and vec.any()
