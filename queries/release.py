"""Release thresholds on noisy counts, shared by the kinds that release counts (histogram, heavy hitters).

A count is released only when its noisy value reaches the threshold. Without noise the threshold is the
kind's floor; with noise it keeps the chance of releasing *any* true-zero slot of a round below
`false_release_rate` (union bound over the round's slots), never below the floor.

One rule, two inputs (the `AggregateNoise` the kind's `decode_round` receives): when it carries the
server's calibrated round noise, the threshold is `queries.dp.release_threshold`'s rigorous tail bound of
the actual mechanism, converted to the kind's units (the server divided the aggregate by the encoding
scale s, rounding half up). With only a standard deviation (in-process tools and unit tests), the
Gaussian tail quantile is used.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from queries.kind import AggregateNoise


def count_threshold(std: float, slots: int, false_release_rate: float, floor: float) -> float:
    """Smallest threshold τ ≥ floor with P(any of `slots` zero-count noisy slots ≥ τ) ≤ false_release_rate
    (Gaussian tail with standard deviation `std`)."""
    if std <= 0:
        return float(floor)
    z = NormalDist().inv_cdf(1.0 - false_release_rate / max(slots, 1))
    return float(max(floor, math.ceil(z * std)))


def release_threshold(
    noise: AggregateNoise | None, contributors: int, slots: int, false_release_rate: float, floor: float
) -> float:
    """The round's release threshold over `slots` counts: rigorous (`queries.dp.release_threshold`) when
    the server's round noise is known, else `count_threshold` on the standard deviation; `floor` without
    noise."""
    if noise is None:
        return float(floor)
    if noise.round_noise is not None:
        from queries import dp  # server side only: the device never decodes

        s = noise.encoding_scale
        x = dp.release_threshold(noise.round_noise, contributors, slots, false_release_rate)
        # released value ⌊(N + s/2)/s⌋ ≥ τ implies N ≥ s(τ − ½); τ ≥ x/s + ½ keeps that below the bound.
        tau = x if s == 1 else math.ceil(x / s + 0.5)
        return float(max(floor, tau))
    return count_threshold(noise.std, slots, false_release_rate, floor)
