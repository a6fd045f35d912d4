"""Release thresholds on noisy counts, shared by the kinds that release counts (histogram, heavy hitters).

A count is released only when its noisy value reaches the threshold. Without noise the threshold is the
kind's floor; with noise it keeps the chance of releasing *any* true-zero slot of a round below
`false_release_rate` (union bound over the round's slots), never below the floor.

One rule, two inputs: when the server attached its round noise (`plan.meta["round_noise"]`, stored
`queries.dp.RoundNoise` fields plus `encoding_scale`), the threshold is `queries.dp.release_threshold`'s
rigorous tail bound of the actual mechanism, converted to the kind's units (the server divided the
aggregate by s, rounding half up). With only a standard deviation (`plan.meta["noise_std"]`, or a
`noise` object in the task — in-process tools and unit tests), the Gaussian tail quantile is used.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from queries.kind import RoundPlan


def noise_std(plan: RoundPlan, contributors: int) -> float:
    """Standard deviation of the noise in the round's aggregate, as the server recorded it.

    The server sets `plan.meta["noise_std"]` (total over the contributors) when it attaches noise; a
    `noise` object in the task (`{"mechanism", "scale"}` per device) is used otherwise. No noise → 0.
    """
    if "noise_std" in plan.meta:
        return float(plan.meta["noise_std"])
    noise = plan.task.get("noise")
    if not isinstance(noise, dict) or noise.get("mechanism", "none") == "none":
        return 0.0
    if "std" in noise:
        per_device_std = float(noise["std"])
    elif noise["mechanism"] == "discrete_gaussian":
        per_device_std = float(noise["scale"])  # σ of the device's share
    else:
        raise ValueError(f"noise: mechanism {noise['mechanism']!r} needs a per-device 'std' in the task")
    return per_device_std * math.sqrt(max(contributors, 1))


def count_threshold(std: float, slots: int, false_release_rate: float, floor: float) -> float:
    """Smallest threshold τ ≥ floor with P(any of `slots` zero-count noisy slots ≥ τ) ≤ false_release_rate
    (Gaussian tail with standard deviation `std`)."""
    if std <= 0:
        return float(floor)
    z = NormalDist().inv_cdf(1.0 - false_release_rate / max(slots, 1))
    return float(max(floor, math.ceil(z * std)))


def plan_threshold(plan: RoundPlan, contributors: int, false_release_rate: float, floor: float) -> float:
    """The round's release threshold: rigorous (`queries.dp.release_threshold`) when the server attached its
    round noise to the plan, else `count_threshold` on the recorded standard deviation."""
    stored = plan.meta.get("round_noise")
    if isinstance(stored, dict):
        from queries import dp

        s = int(stored.get("encoding_scale", 1))
        x = dp.release_threshold(dp.RoundNoise.from_dict(stored), contributors, plan.dim, false_release_rate)
        # released value ⌊(N + s/2)/s⌋ ≥ τ implies N ≥ s(τ − ½); τ ≥ x/s + ½ keeps that below the bound.
        tau = x if s == 1 else math.ceil(x / s + 0.5)
        return float(max(floor, tau))
    return count_threshold(noise_std(plan, contributors), plan.dim, false_release_rate, floor)
