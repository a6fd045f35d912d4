"""Intervals of values released because they reached a threshold (`queries.selective`): at every true count —
far below, at and above the threshold — at least 90 % (aiming at 95 %) of the released values' intervals cover it,
with the product's own Skellam noise; the plain value ± 1.96·σ does not near the threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import skellam

from queries.selective import selective_interval
from queries.uncertainty import Z95

MU = 40.0
"""Skellam variance of the summed noise (σ ≈ 6.3), the scale of a noisy histogram at ε ≈ 1."""
TAU = 26
"""A release threshold ≈ 4σ, as `queries.release.release_threshold` gives for a few buckets."""
DRAWS = 600


def _released(c: int, rng: np.random.Generator) -> np.ndarray:
    """DRAWS noisy counts c + N, N ~ Skellam(μ/2, μ/2), conditioned on reaching TAU (inverse-CDF sampling of the
    truncated law, so even true counts far below the threshold get their releases)."""
    noise = skellam(MU / 2, MU / 2)
    floor = noise.cdf(TAU - 1 - c)  # P(Y < TAU)
    u = floor + (1 - floor) * rng.random(DRAWS)
    u = np.minimum(u, np.nextafter(1.0, 0.0))
    return c + noise.ppf(u)


@pytest.mark.parametrize("c", [0, 5, 10, 15, 20, 24, 26, 28, 32, 38, 45, 60])
def test_coverage_at_every_true_count(c: int) -> None:
    rng = np.random.default_rng(1000 + c)
    sigma = math.sqrt(MU)
    ys = _released(c, rng)
    covered = naive = 0
    for y in ys:
        lo, hi = selective_interval(float(y), sigma, TAU, lower=0.0)
        covered += lo <= c <= hi
        naive += y - Z95 * sigma <= c <= y + Z95 * sigma
    assert covered / DRAWS >= 0.90, (c, covered / DRAWS)
    if c <= 15:  # what the audit saw: intervals that ignore the selection miss the truth below the threshold
        assert naive / DRAWS < 0.6, (c, naive / DRAWS)


@given(y=st.floats(TAU, TAU + 200), sigma=st.floats(0.5, 50))
def test_interval_contains_the_selection_adjusted_estimate_and_tends_to_the_plain_one(y: float, sigma: float) -> None:
    lo, hi = selective_interval(y, sigma, TAU, lower=0.0)
    assert 0.0 <= lo <= hi
    assert lo <= y <= hi  # an integer count at the threshold too (the ends are the two one-sided tests of Y = y)
    # selection only pulls down: never above the plain interval's upper end, widened by the ½ of integer counts
    assert hi <= y + 0.5 + Z95 * sigma + 1e-6 * sigma
    if y - TAU > 8 * sigma:  # far above the threshold the selection hardly matters
        assert lo == pytest.approx(max(0.0, y - 0.5 - Z95 * sigma), abs=1e-3 * sigma)
        assert hi == pytest.approx(y + 0.5 + Z95 * sigma, abs=1e-3 * sigma)


def test_an_observation_at_the_threshold_with_wide_noise_keeps_an_interval_around_it() -> None:
    """Released at τ = 1 with σ = 17.3: P(Y = 1 | released) is small for every c, so a continuous test without the
    integer correction put the whole interval below 0 ([0, 0], excluding the value); the discrete ends keep it."""
    lo, hi = selective_interval(1.0, 17.32, 1.0, lower=0.0)
    assert lo == 0.0 and 1.0 < hi < 1.0 + Z95 * 17.32


def test_refuses_an_observation_below_its_threshold() -> None:
    with pytest.raises(ValueError, match="not released"):
        selective_interval(3.0, 2.0, 5.0)
    assert selective_interval(7.0, 0.0, 5.0) == (7.0, 7.0)
