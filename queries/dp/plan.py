"""A round's planned noise: the calibrated `RoundNoise` of the scaled encoding and its encoding scale.

One implementation for the server (which stores it with the round, `to_dict`) and the in-process runner
(`queries.local_run`). The discrete mechanisms pay an overhead when each device's share is tiny (large
t_min), so every noisy round gets an integer factor s = `suggest_scale`: devices multiply the kind's vector
by s before adding their share; noise and bit width are computed for s·Δ1, s·Δ2, s·max_abs; the aggregate is
divided by s (rounding half up, post-processing) before the kind decodes, and the noise is reported in the
kind's units (divided by s).
"""

from __future__ import annotations

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


def plan_noise(cal: QueryCalibration, plan: RoundPlan) -> PlannedNoise:
    """The noise of a round planned by a kind, with its weight and the encoding scale that keeps the discrete
    mechanism's overhead small."""
    s = suggest_scale(cal, plan.l1_sensitivity, plan.l2_sensitivity, weight=plan.privacy_weight)
    noise = round_noise(cal, s * plan.l1_sensitivity, s * plan.l2_sensitivity, dim=plan.dim, weight=plan.privacy_weight)
    return PlannedNoise(noise, s)
