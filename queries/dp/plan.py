"""A round's planned noise: the calibrated `RoundNoise` of the scaled encoding and its encoding scale.

One implementation for the server (which stores it with the round, `to_dict`) and the in-process runner
(`queries.local_run`). The discrete mechanisms pay an overhead when each device's share is tiny (large
t_min), so every noisy round gets an integer factor s = `suggest_scale`: devices multiply the kind's vector
by s before adding their share; noise and bit width are computed for s·Δ1, s·Δ2, s·max_abs; the aggregate is
divided by s (rounding half up, post-processing) before the kind decodes, and the noise is reported in the
kind's units (divided by s).

Noise sized for the cohort that contributes (`cohort_threshold`, `cohort_noise`): a cohort of n devices sizes
every share for t_c = max(t_min, n − ⌈a·n⌉) contributors (a the spec's `cohort.dropout_allowance`), and its devices
unmask only when at least t_c of them survive. Shares sized for t_min alone would make the noise of a sum over n
devices √(n / t_min) times what the target needs; sized for t_c it is at most √(n / t_c) times (≈ 1/√(1 − a) for
large n; rounding up leaves at least one device of slack in any cohort when a > 0). The
encoding scale s is chosen for the largest t_c a round's cohorts can have (the smallest shares), so every cohort of
a round uses the same s and their sums add up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from queries.dp.calibrate import QueryCalibration, RoundNoise, round_noise, suggest_scale
from queries.kind import AggregateNoise, RoundPlan


@dataclass(frozen=True)
class PlannedNoise:
    noise: RoundNoise
    """The noise of the scaled encoding (sensitivities s·Δ1, s·Δ2)."""
    scale: int
    """s: the factor devices multiply their vector by."""

    def to_dict(self) -> dict[str, Any]:
        """The stored form: `RoundNoise` fields plus `encoding_scale`."""
        return {**self.noise.to_dict(), "encoding_scale": self.scale}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlannedNoise:
        return cls(RoundNoise.from_dict(data), int(data.get("encoding_scale", 1)))

    def unscale(self, aggregate: np.ndarray) -> np.ndarray:
        """The aggregate in the kind's units: ⌊(a + s/2) / s⌋ (round half up; identity for s = 1)."""
        agg = np.asarray(aggregate, dtype=np.int64)
        return agg if self.scale == 1 else (agg + self.scale // 2) // self.scale

    def aggregate_noise(self, contributors: int) -> AggregateNoise:
        """The noise argument of the kind's `decode_round` for a sum over `contributors` devices."""
        return AggregateNoise.of_round(self.noise, contributors, self.scale)

    def std_released(self, contributors: int) -> float:
        """Standard deviation of each entry's noise over `contributors` devices, in the kind's units."""
        return self.noise.std(contributors) / self.scale


def cohort_threshold(t_min: int, n: int, allowance: float) -> int:
    """t_c: the contributors a cohort of `n` devices sizes its noise shares for, and the fewest survivors it
    unmasks for — n less the dropout allowance, never below the query's t_min."""
    if not 0 <= allowance < 1:
        raise ValueError(f"cohort.dropout_allowance: must be in [0, 1), got {allowance!r}")
    return max(int(t_min), int(n) - math.ceil(allowance * int(n)))


def plan_noise(cal: QueryCalibration, plan: RoundPlan, largest_t: int | None = None) -> PlannedNoise:
    """The noise of a round planned by a kind, with shares sized for t_min, its weight and the encoding scale that
    keeps the discrete mechanism's overhead small for every cohort up to `largest_t` contributors (default t_min)."""
    widest = dataclasses.replace(cal, t_min=max(cal.t_min, largest_t or cal.t_min))
    s = suggest_scale(widest, plan.l1_sensitivity, plan.l2_sensitivity, weight=plan.privacy_weight)
    noise = round_noise(cal, s * plan.l1_sensitivity, s * plan.l2_sensitivity, dim=plan.dim, weight=plan.privacy_weight)
    return PlannedNoise(noise, s)


def cohort_noise(cal: QueryCalibration, plan: RoundPlan, planned: PlannedNoise, t: int) -> PlannedNoise:
    """The round's noise with every share sized for `t` ≥ t_min contributors (same encoding scale as `planned`)."""
    if t == planned.noise.t_min:
        return planned
    if t < cal.t_min:
        raise ValueError(f"a cohort's noise threshold {t} is below the query's t_min {cal.t_min}")
    s = planned.scale
    noise = round_noise(dataclasses.replace(cal, t_min=t), s * plan.l1_sensitivity, s * plan.l2_sensitivity,
                        dim=plan.dim, weight=plan.privacy_weight)
    return PlannedNoise(noise, s)


def combined_noise(parts: Sequence[tuple[PlannedNoise, int]]) -> AggregateNoise:
    """The noise of a round's aggregate summed over cohorts, each (its noise, its contributors): the exact std,
    and for tail bounds the part with the widest shares applied to every contributor (an over-estimate when the
    cohorts' shares differ)."""
    live = [(p, c) for p, c in parts if c > 0] or list(parts[:1])
    if not live:
        raise ValueError("combined_noise: no cohort")
    scale = live[0][0].scale
    if any(p.scale != scale for p, _ in live):
        raise ValueError("combined_noise: the cohorts of one round must share an encoding scale")
    variance = sum(p.noise.per_device_std ** 2 * c for p, c in live)
    widest = max(live, key=lambda pc: pc[0].noise.per_device_std)[0]
    return AggregateNoise(math.sqrt(variance) / scale, widest.noise, scale)
