"""Bit widths, tail bounds, release thresholds, the budget ledger math, the policy and the privacy block."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queries import dp
from queries.dp.tails import log_tail_bound, noise_quantile
from secagg.encoding import bits_for
from secagg.randomness import SeededRandom


def noise_for(mechanism: str, epsilon: float = 1.0, t_min: int = 50, l: float = 1.0) -> dp.RoundNoise:
    return dp.round_noise(dp.calibrate_query(mechanism, epsilon, 1e-6, 1, t_min), l, l)


NOISES = {m: noise_for(m) for m in ("skellam", "discrete_gaussian")}


@given(st.integers(1, 10**6), st.integers(0, 10**6))
@settings(max_examples=60, deadline=None)
def test_without_noise_bits_match_secagg(n, max_abs):
    assert dp.choose_bits(n, max_abs, None, dim=10) == bits_for(n, max_abs)


@given(st.sampled_from(sorted(NOISES)), st.integers(1, 100_000), st.integers(0, 1000), st.integers(1, 10**6),
       st.sampled_from([1e-3, 1e-9, 1e-15]))
@settings(max_examples=80, deadline=None)
def test_bits_are_the_smallest_that_cover_signal_and_noise_tail(mech, n, max_abs, dim, fail):
    noise = NOISES[mech]
    bits = dp.choose_bits(n, max_abs, noise, fail, dim=dim)
    x = noise_quantile(noise, n, math.log(fail / (2 * dim)))
    assert 2 * dim * _tail(noise, n, x) <= fail * (1 + 1e-9)
    assert n * max_abs + x < 2 ** (bits - 1)
    assert bits == 1 or n * max_abs + x >= 2 ** (bits - 2)
    # more coordinates, more clients or a smaller failure probability never need fewer bits
    assert dp.choose_bits(n, max_abs, noise, fail / 1000, dim=dim) >= bits
    assert dp.choose_bits(2 * n, max_abs, noise, fail, dim=dim) >= bits


def _tail(noise, n: int, x: int) -> float:
    """P(N ≥ x) for the noise summed over n devices: exact for Skellam (Poisson additivity), else the bound."""
    if noise.mechanism == "skellam":
        from scipy.stats import skellam

        v = n * noise.per_device_scale
        return float(skellam(v / 2, v / 2).sf(x - 1))
    return math.exp(log_tail_bound(noise, n, x))


def test_skellam_quantiles_are_exact_and_below_the_chernoff_bound() -> None:
    """The Skellam quantile is the smallest x whose exact tail is under the target (the Chernoff bound's x is
    larger by about half a standard deviation at 10⁻⁵), and it never exceeds the bound's."""
    from scipy.stats import skellam

    noise = NOISES["skellam"]
    for n, p in ((50, 1e-3), (500, 1e-5), (5000, 1e-9)):
        x = noise_quantile(noise, n, math.log(p))
        v = n * noise.per_device_scale
        law = skellam(v / 2, v / 2)
        assert law.sf(x - 1) <= p and law.sf(x - 2) > p * 0.99
        chernoff = x
        while log_tail_bound(noise, n, chernoff) > math.log(p):
            chernoff += 1
        assert x <= chernoff
        if p <= 1e-5:
            assert chernoff - x >= 0.3 * noise.std(n)


@pytest.mark.parametrize("mech", sorted(NOISES))
def test_tail_bound_holds_empirically(mech):
    noise, n = NOISES[mech], 50
    rng = SeededRandom(b"tail-bound/" + mech.encode())
    total = np.zeros(200_000, dtype=np.int64)
    for _ in range(n):
        total += dp.sample_noise(mech, noise.per_device_scale, total.size, rng)
    for k in (1.0, 2.0, 3.0):
        x = k * noise.std(n)
        empirical = (total >= x).mean()
        assert empirical <= math.exp(log_tail_bound(noise, n, x)) + 3 * math.sqrt(empirical / total.size) + 1e-5


def test_impossible_specs_are_refused_naming_what_to_change():
    with pytest.raises(dp.PrivacyError, match="cohort.max_clients") as info:
        dp.choose_bits(10**9, 10**10, NOISES["skellam"], dim=100)
    assert "epsilon" in str(info.value) and "62" in str(info.value)
    with pytest.raises(dp.PrivacyError, match="dim"):
        dp.choose_bits(10, 1, None, dim=0)
    with pytest.raises(dp.PrivacyError, match="fail_prob"):
        dp.choose_bits(10, 1, None, 0.0, dim=1)
    with pytest.raises(dp.PrivacyError, match="max_abs"):
        dp.choose_bits(10, -1, None, dim=1)


def test_release_threshold_controls_false_releases():
    noise, n, dim, p = NOISES["discrete_gaussian"], 50, 2000, 0.05
    tau = dp.release_threshold(noise, n, dim, p)
    assert tau > 0 and tau == int(tau)
    assert dp.release_threshold(noise, n, 20 * dim, p) >= tau
    assert dp.release_threshold(noise, n, dim, p, floor=10 * tau) == 10 * tau
    assert dp.release_threshold(None, n, dim, p, floor=3) == 3
    # zero buckets: noise only; over 100 trials of 2000 buckets any release should happen in ≤ ~5 % of trials
    rng = SeededRandom(b"release-threshold")
    trials = 100
    zero = np.zeros((trials, dim), dtype=np.int64)
    for _ in range(n):
        zero += dp.sample_noise("discrete_gaussian", noise.per_device_scale, trials * dim, rng).reshape(trials, dim)
    assert (zero >= tau).any(axis=1).mean() <= p + 3 * math.sqrt(p / trials)
    # and a threshold one below the bound's quantile is not wildly conservative: one σ lower releases often
    assert (zero >= tau - noise.std(n)).any(axis=1).mean() > p


def test_confidence_halfwidth_covers_999_permille():
    noise, n = NOISES["skellam"], 50
    h = dp.confidence_halfwidth(noise, n, 0.999)
    rng = SeededRandom(b"confidence-halfwidth")
    total = dp.sample_noise("skellam", noise.per_device_scale * n, 500_000, rng)  # Skellam sums exactly
    assert (np.abs(total) >= h).mean() <= 0.001
    assert h > 3 * noise.std(n)


def test_apply_count_threshold_lists_suppressed_in_order():
    released, suppressed = dp.apply_count_threshold({"a": 12, "b": 3, "c": -2, "d": 40}, 10)
    assert released == {"a": 12, "d": 40} and suppressed == ["b", "c"]
    released, suppressed = dp.apply_count_threshold([("x", 10.0), ("y", 9.9)], 10)
    assert released == {"x": 10} and suppressed == ["y"]


def test_min_contributors():
    dp.check_min_contributors(100, 100)
    with pytest.raises(dp.InsufficientContributors, match="t_min=100"):
        dp.check_min_contributors(99, 100)


def test_budget_check_and_refusal_message():
    budget = dp.Budget(3.0, 1e-5)
    left = budget.check([(1.0, 1e-6), dp.PrivacyCost(0.5, 1e-6)], (1.0, 1e-6))
    assert left.epsilon == pytest.approx(0.5) and left.delta == pytest.approx(7e-6)
    assert budget.check((2.0, 0.0), (1.0, 1e-5)).epsilon == pytest.approx(0.0)  # exactly fits
    with pytest.raises(dp.BudgetExceeded, match=r"privacy\.epsilon.*remaining") as info:
        budget.check([(2.5, 1e-6)], (1.0, 1e-6))
    assert info.value.remaining_epsilon == pytest.approx(0.5)
    assert "epsilon=0.5" in str(info.value)
    with pytest.raises(dp.BudgetExceeded, match=r"privacy\.delta"):
        budget.check([(0.1, 9e-6)], (0.1, 2e-6))
    with pytest.raises(dp.PrivacyError, match="budget.epsilon"):
        dp.Budget(-1.0, 1e-6)
    assert dp.compose_costs([]) == dp.PrivacyCost(0.0, 0.0)


def test_policy():
    dp.PrivacyPolicy().check("none", None, None)  # demo profile: everything allowed
    strict = dp.PrivacyPolicy(require_noise=True, max_epsilon=2.0, max_delta=1e-6)
    strict.check("skellam", 2.0, 1e-6)
    with pytest.raises(dp.PrivacyError, match="privacy.mechanism"):
        strict.check("none", None, None)
    with pytest.raises(dp.PrivacyError, match="privacy.epsilon"):
        strict.check("skellam", 2.5, 1e-7)
    with pytest.raises(dp.PrivacyError, match="privacy.delta"):
        strict.check("discrete_gaussian", 1.0, 1e-5)


def test_privacy_block():
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, 3, 100)
    noise = dp.round_noise(cal, 1.0, 1.0)
    block = dp.privacy_block(cal, [noise, noise], [120, 150], {"release_threshold": 17.0}, bits=[14, 14])
    assert block["mechanism"] == "skellam" and block["epsilon"] == 1.0 and block["delta"] == 1e-6
    assert block["mu"] == noise.total_scale and block["sensitivity"] == {"l1": 1.0, "l2": 1.0}
    assert block["t_min"] == 100 and block["contributors"] == [120, 150]
    assert block["thresholds"] == {"release_threshold": 17.0} and block["bits"] == [14, 14]
    assert block["epsilon_spent"] == pytest.approx(dp.epsilon_spent(cal, 2)) and block["epsilon_spent"] < 1.0
    assert block["noise"][1]["noise_std"] == pytest.approx(noise.std(150))
    none = dp.privacy_block(None, [None], [40])
    assert none["mechanism"] == "none" and none["epsilon"] is None and none["epsilon_spent"] is None
