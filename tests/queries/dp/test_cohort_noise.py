"""Noise sized for the cohort that contributes (`queries.dp.cohort_threshold`, `cohort_noise`, `combined_noise`).

A cohort of n devices sizes every share for t_c = max(t_min, n − ⌈a·n⌉) contributors; its devices unmask only for
at least t_c survivors. These tests fail if shares are again sized for t_min while more devices contribute: the
std of a sum over the survivors must stay within 1.1× what those contributors need (the calibrated Gaussian
reference z·Δ2), measured on real draws, and every cohort's shares must still carry the round's full noise."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queries import dp
from queries.registry import get_kind
from queries.kind import RoundPlan
from queries.local_run import run_query
from secagg.randomness import SeededRandom

EPS, DELTA = 1.0, 1e-6
REALIZED_CAP = 1.1
"""The realized std over the survivors, at most this many times what their count needs (issue target)."""


def _plan(dim: int = 8) -> RoundPlan:
    return RoundPlan(round=0, task={}, dim=dim, l1_sensitivity=1.0, l2_sensitivity=1.0, max_abs=1)


@settings(deadline=None)
@given(t_min=st.integers(1, 5000), n=st.integers(1, 20000), a=st.floats(0, 0.5))
def test_threshold_is_n_less_the_allowance_and_never_below_t_min(t_min: int, n: int, a: float) -> None:
    t = dp.cohort_threshold(t_min, n, a)
    assert t >= t_min
    if n >= t_min:
        assert t <= n and (n - t >= a * n or t == t_min) and (n - t - 1 < a * n)


def test_threshold_refuses_a_bad_allowance() -> None:
    for a in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="dropout_allowance"):
            dp.cohort_threshold(10, 100, a)


@settings(max_examples=40, deadline=None)
@given(mechanism=st.sampled_from(["skellam", "discrete_gaussian"]), t_min=st.integers(2, 400),
       growth=st.floats(1.0, 10.0), a=st.sampled_from([0.0, 0.1, 0.15, 0.2]), dropped=st.floats(0, 1))
def test_any_survivor_count_gets_at_most_the_allowed_excess(
    mechanism: str, t_min: int, growth: float, a: float, dropped: float
) -> None:
    """For a cohort of n ≥ t_min and any survivor count c in [t_c, n]: the summed noise is at least the round's
    target (the sum of t_c shares is calibrated for it) and its std at most 1/√(1 − a) times the target, times the
    discrete mechanism's own slack."""
    cal = dp.calibrate_query(mechanism, EPS, DELTA, 1, t_min)
    plan = _plan()
    n = max(t_min, int(t_min * growth))
    t = dp.cohort_threshold(t_min, n, a)
    planned = dp.plan_noise(cal, plan, dp.cohort_threshold(t_min, n, a))
    own = dp.cohort_noise(cal, plan, planned, t)
    c = t + int(dropped * (n - t))
    target = cal.noise_multiplier * planned.scale  # the Gaussian reference z·Δ2 of the scaled encoding
    assert own.noise.std(t) >= target * (1 - 1e-9)
    assert own.noise.std(c) <= target * own.noise.inflation * math.sqrt(n / t) * (1 + 1e-9)
    assert t == t_min or n - t < a * n + 1  # ⌈a·n⌉ rounds up by less than one device
    assert own.scale == planned.scale


def test_shares_sized_for_t_min_would_break_the_cap() -> None:
    """The failure this module guards against: t_min = 100 and 400 contributors, shares sized for t_min, is 2× the
    noise the contributors need; sized for the cohort it is within the cap."""
    cal = dp.calibrate_query("skellam", EPS, DELTA, 1, 100)
    plan = _plan()
    planned = dp.plan_noise(cal, plan, dp.cohort_threshold(100, 400, 0.15))
    target = cal.noise_multiplier * planned.scale
    assert planned.noise.std(400) / target > 1.9
    own = dp.cohort_noise(cal, plan, planned, dp.cohort_threshold(100, 400, 0.15))
    assert own.noise.std(400) / target < REALIZED_CAP


@pytest.mark.parametrize("mechanism", ["skellam", "discrete_gaussian"])
def test_realized_noise_of_drawn_shares(mechanism: str) -> None:
    """Real shares drawn by 400 devices of a cohort with t_min = 100, summed per entry over 2,000 entries: the
    empirical std matches the prediction, and is within the cap (plus sampling error) of the noise a mechanism
    sized for exactly those 400 contributors has — with shares sized for t_min it would be ≈ 2×."""
    t_min, n, dim = 100, 400, 2000
    cal = dp.calibrate_query(mechanism, EPS, DELTA, 1, t_min)
    plan = _plan(dim)
    t = dp.cohort_threshold(t_min, n, 0.15)
    planned = dp.plan_noise(cal, plan, t)
    own = dp.cohort_noise(cal, plan, planned, t)
    needed = dp.cohort_noise(cal, plan, planned, n).std_released(n)
    assert own.std_released(n) / needed < REALIZED_CAP
    rng = SeededRandom(b"cohort-noise-" + mechanism.encode())
    total = np.zeros(dim, dtype=np.int64)
    for _ in range(n):
        total += np.asarray(dp.sample_noise(mechanism, own.noise.per_device_scale, dim, rng), dtype=np.int64)
    empirical = float(np.std(total)) / own.scale
    assert empirical == pytest.approx(own.std_released(n), rel=0.05)  # 2,000 entries: ±1.6 % sampling error
    assert empirical / needed < REALIZED_CAP + 0.05
    assert planned.std_released(n) / needed > 1.9  # what t_min-sized shares would have released


def test_combined_noise_adds_the_cohorts_variances() -> None:
    cal = dp.calibrate_query("skellam", EPS, DELTA, 1, 50)
    plan = _plan()
    planned = dp.plan_noise(cal, plan, 200)
    small, large = dp.cohort_noise(cal, plan, planned, 50), dp.cohort_noise(cal, plan, planned, 170)
    got = dp.combined_noise([(small, 50), (large, 190)])
    want = math.sqrt(small.noise.per_device_std ** 2 * 50 + large.noise.per_device_std ** 2 * 190) / planned.scale
    assert got.std == pytest.approx(want)
    assert got.round_noise == small.noise  # tails from the widest shares: an over-estimate, never an under-estimate
    with pytest.raises(ValueError, match="encoding scale"):
        dp.combined_noise([(small, 1), (dp.PlannedNoise(large.noise, planned.scale * 2), 1)])


def test_local_run_sizes_the_shares_for_its_cohort() -> None:
    """The in-process runner plans a round's devices as one cohort, as the server does."""
    devices = [[f"w{i % 4}"] for i in range(400)]
    run = run_query(get_kind("histogram"), {"buckets": ["w0", "w1", "w2", "w3"]}, devices,
                    privacy={"mechanism": "skellam", "epsilon": EPS, "delta": DELTA}, t_min=100,
                    rng=np.random.default_rng(0), noise_source=SeededRandom(b"local"))
    (planned,) = run.noises
    assert planned is not None and run.calibration is not None
    assert planned.noise.t_min == dp.cohort_threshold(100, 400, 0.15) == 340  # 400 − ⌈60⌉
    assert planned.std_released(400) / run.calibration.noise_multiplier < REALIZED_CAP
