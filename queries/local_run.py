"""Runs a query kind in process over simulated devices, without HTTP or masking.

Secure aggregation returns the exact sum of the contributors' vectors, so summing the integer vectors in
the clear is equivalent for testing and evaluating a kind's math; every other step (plan, contribute,
distributed noise, decode, finalize) is the code the server and SDK run. One generator (`rng`) drives the
device sampling and every device's `contribute`, so a seeded generator reproduces a run.

With a `privacy` block, the run is calibrated and noised exactly as the server does it
(`queries.dp.calibrate_query` over the kind's `rounds_upper_bound` with t_min, `queries.dp.plan_noise` per
round with its weight and encoding scale, and the round's devices as one cohort whose shares are sized for its
t_c, `queries.dp.cohort_noise`): each device multiplies its vector by the encoding scale and adds
its own noise share drawn from `noise_source` (the device SDK's `add_noise`), the sum is unscaled, and the
kind decodes with the round's `AggregateNoise` — so thresholds, noise stds and intervals are the server's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from queries import dp  # lazy: the accountant loads only when a noisy run calibrates
from queries.kind import QueryKind, Release
from queries.spec import DEFAULT_DROPOUT_ALLOWANCE, PrivacySpec
from secagg.randomness import ByteSource, OsRandom

if TYPE_CHECKING:
    from queries.dp import PlannedNoise, QueryCalibration

NoiseFn = Callable[[int], np.ndarray]
"""Given a vector length, one device's integer noise share."""


@dataclass(frozen=True)
class LocalRun:
    """A finished in-process query."""

    release: Release
    contributors: list[int]
    calibration: QueryCalibration | None = None
    noises: list[PlannedNoise | None] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        return self.release.result


def run_query(
    kind: QueryKind[Any, Any],
    raw_params: dict[str, Any],
    devices: Sequence[list[Any]],
    privacy: PrivacySpec | dict[str, Any] | None = None,
    t_min: int | None = None,
    rng: np.random.Generator | None = None,
    noise_source: ByteSource | None = None,
    noise: NoiseFn | None = None,
    max_rounds: int = 1000,
    dropout_allowance: float = DEFAULT_DROPOUT_ALLOWANCE,
) -> LocalRun:
    """Run the query over `devices` (one list of rows each). `privacy`: calibrate and add distributed noise
    as the server would, with t_min (default: every device) as the minimum number of contributors and each round's
    devices as one cohort (shares sized for `queries.dp.cohort_threshold` of them with `dropout_allowance`).
    `noise` (without `privacy`): add this share to every vector while the kind decodes as if exact."""
    spec = PrivacySpec.model_validate(privacy) if isinstance(privacy, dict) else privacy
    if spec is not None:
        raw_params = kind.bind_privacy(raw_params, spec)
    params = kind.parse_params(raw_params)
    state = kind.initial_state(params)
    rng = rng or np.random.default_rng()
    cal = None
    if spec is not None and spec.mechanism != "none":
        assert spec.epsilon is not None and spec.delta is not None  # PrivacySpec requires both with a noisy mechanism
        cal = dp.calibrate_query(spec.mechanism, spec.epsilon, spec.delta, rounds=kind.rounds_upper_bound(params),
                                 t_min=t_min or len(devices))
    source = noise_source or OsRandom()
    contributors: list[int] = []
    noises: list[Any] = []
    for r in range(max_rounds):
        plan = kind.plan_round(params, state, r)
        if plan is None:
            break
        chosen = [rows for rows in devices if plan.sample_rate >= 1.0 or rng.random() < plan.sample_rate]
        planned = None
        if cal is not None:
            planned = dp.plan_noise(cal, plan, dp.cohort_threshold(cal.t_min, len(devices), dropout_allowance))
            t_c = dp.cohort_threshold(cal.t_min, len(chosen), dropout_allowance)
            planned = dp.cohort_noise(cal, plan, planned, t_c)
        total = np.zeros(plan.dim, dtype=np.int64)
        count = 0
        for rows in chosen:
            vec = kind.contribute(plan.typed_task(kind), rows, rng)
            if planned is not None:
                share = dp.sample_noise(planned.noise.mechanism, planned.noise.per_device_scale, plan.dim, source)
                vec = vec * planned.scale + np.asarray(share, dtype=np.int64)
            elif noise is not None:
                vec = vec + noise(plan.dim)
            total += vec
            count += 1
        contributors.append(count)
        noises.append(planned)
        if planned is not None:
            state = kind.decode_round(params, state, plan, planned.unscale(total), count, planned.aggregate_noise(count))
        else:
            state = kind.decode_round(params, state, plan, total, count)
    else:
        raise RuntimeError(f"query did not finish within {max_rounds} rounds")
    return LocalRun(kind.finalize(params, state), contributors, cal, noises)


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
    run = run_query(kind, raw_params, devices, rng=rng, noise=noise, max_rounds=max_rounds)
    return run.result, run.contributors
