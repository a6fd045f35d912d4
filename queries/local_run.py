"""Runs a query kind in process over simulated devices, without HTTP or masking.

Secure aggregation returns the exact sum of the contributors' vectors, so summing the integer vectors in
the clear is equivalent for testing and evaluating a kind's math; every other step (plan, contribute,
optional per-device noise, decode, finalize) is the code the server and SDK run. One generator (`rng`)
drives the device sampling and every device's `contribute`, so a seeded generator reproduces a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from queries.kind import QueryKind

NoiseFn = Callable[[int], np.ndarray]
"""Given a vector length, one device's integer noise share."""


def run_locally(
    kind: QueryKind[Any, Any],
    raw_params: dict[str, Any],
    devices: Sequence[list[Any]],
    noise: NoiseFn | None = None,
    rng: np.random.Generator | None = None,
    max_rounds: int = 1000,
) -> tuple[dict[str, Any], list[int]]:
    """Returns (the released result, contributors per round). With `noise` the kind decodes without a noise
    argument (it does not know the shares' distribution), so release thresholds stay at their floors."""
    params = kind.parse_params(raw_params)
    state = kind.initial_state(params)
    rng = rng or np.random.default_rng()
    contributors: list[int] = []
    for r in range(max_rounds):
        plan = kind.plan_round(params, state, r)
        if plan is None:
            break
        total = np.zeros(plan.dim, dtype=np.int64)
        count = 0
        for rows in devices:
            if plan.sample_rate < 1.0 and rng.random() >= plan.sample_rate:
                continue
            vec = kind.contribute(plan.task, rows, rng)
            if noise is not None:
                vec = vec + noise(plan.dim)
            total += vec
            count += 1
        contributors.append(count)
        state = kind.decode_round(params, state, plan, total, count)
    else:
        raise RuntimeError(f"query did not finish within {max_rounds} rounds")
    return kind.finalize(params, state).result, contributors
