"""Release thresholds on noisy counts, shared by the kinds that release counts (histogram, heavy hitters).

A count is released only when its noisy value reaches the threshold. Without noise the threshold is the
kind's floor; with noise it is the Gaussian tail quantile that keeps the chance of releasing *any*
true-zero slot of a round below `false_release_rate` (union bound over the round's slots), never below
the floor. The server records the aggregate's noise standard deviation in `plan.meta["noise_std"]`.
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
    """Smallest threshold τ ≥ floor with P(any of `slots` zero-count noisy slots ≥ τ) ≤ false_release_rate."""
    if std <= 0:
        return float(floor)
    z = NormalDist().inv_cdf(1.0 - false_release_rate / max(slots, 1))
    return float(max(floor, math.ceil(z * std)))
