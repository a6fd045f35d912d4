"""Samplers against their exact pmfs (chi-square) and the variance of summed device shares.

False-alarm rate: each chi-square test rejects at p < 1e-4 with a fixed seed, so a correct sampler fails a
given case with probability 1e-4 per seed choice (and, the seeds being fixed, deterministically never
once it has passed); a wrong pmf (e.g. σ off by 2 %) is rejected at these sample sizes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from queries import dp
from queries.dp.noise import discrete_gaussian_log_pmf

N = 200_000
ALPHA = 1e-4


def chi_square_p(samples: np.ndarray, pmf) -> float:
    """p-value of integer samples vs pmf: one cell per k in the central range where the expected count is
    ≥ 5, plus the two tails (k below / above that range) each pooled into its neighbouring cell."""
    half = int(np.abs(samples).max()) + 50
    support = np.arange(-half, half + 1)
    probs = pmf(support)
    probs = probs / probs.sum()
    inside = np.flatnonzero(probs * samples.size >= 5)
    a, b = support[inside[0]], support[inside[-1]]
    ks = np.arange(a, b + 1)
    exp = probs[inside[0] : inside[-1] + 1] * samples.size
    counts = np.bincount(samples - a, minlength=b - a + 1)[: b - a + 1] if samples.min() >= a else None
    obs = np.array([(samples == k).sum() for k in ks], dtype=float) if counts is None else counts.astype(float)
    obs[0] += (samples < a).sum()
    exp[0] += probs[: inside[0]].sum() * samples.size
    obs[-1] += (samples > b).sum()
    exp[-1] += probs[inside[-1] + 1 :].sum() * samples.size
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("sigma", [0.3, 0.8, 1.0, 2.5, 7.3, 40.0])
def test_discrete_gaussian_matches_pmf(sigma):
    x = dp.sample_discrete_gaussian(sigma, N, np.random.default_rng(int(sigma * 1000)))
    assert x.dtype == np.int64 and x.shape == (N,)
    p = chi_square_p(x, lambda k: np.exp(discrete_gaussian_log_pmf(k, sigma)))
    assert p > ALPHA


def test_discrete_gaussian_chi_square_rejects_a_wrong_sigma():
    """The test has power: samples of σ = 2.5 do not pass as σ = 2.6."""
    x = dp.sample_discrete_gaussian(2.5, N, np.random.default_rng(1))
    assert chi_square_p(x, lambda k: np.exp(discrete_gaussian_log_pmf(k, 2.6))) < ALPHA


@pytest.mark.parametrize("mu", [0.4, 3.0, 50.0])
def test_skellam_matches_pmf_with_variance_mu(mu):
    x = dp.sample_skellam(mu, N, np.random.default_rng(int(mu * 100)))
    assert x.dtype == np.int64
    # Sk(μ) = Poisson(μ/2) − Poisson(μ/2): variance μ
    assert chi_square_p(x, lambda k: stats.skellam.pmf(k, mu / 2, mu / 2)) > ALPHA
    assert x.var() == pytest.approx(mu, rel=0.03)


def test_large_sigma_moments():
    sigma = 1e6
    x = dp.sample_discrete_gaussian(sigma, 100_000, np.random.default_rng(3))
    assert abs(x.mean()) < 5 * sigma / math.sqrt(x.size)
    assert x.std() == pytest.approx(sigma, rel=0.01)
    # quartiles of N(0, σ²): ±0.6745σ
    q1, q3 = np.quantile(x, [0.25, 0.75])
    assert q3 == pytest.approx(0.6745 * sigma, rel=0.02) and q1 == pytest.approx(-0.6745 * sigma, rel=0.02)


def test_discrete_gaussian_variance_is_exact():
    assert dp.discrete_gaussian_variance(0.3) < 0.3**2  # much below σ² for small σ
    for sigma in (0.3, 1.0, 5.0):
        k = np.arange(-400, 401)
        w = np.exp(discrete_gaussian_log_pmf(k, sigma))
        assert dp.discrete_gaussian_variance(sigma) == pytest.approx(float((w * k * k).sum()), rel=1e-9)
    assert dp.discrete_gaussian_variance(20.0) == pytest.approx(400.0, rel=1e-12)


@pytest.mark.parametrize("mechanism", ["discrete_gaussian", "skellam"])
def test_sum_of_t_min_device_shares_has_target_variance(mechanism):
    t_min, reps = 40, 25_000
    cal = dp.calibrate_query(mechanism, 1.0, 1e-6, 1, t_min)
    noise = dp.round_noise(cal, 1.0, 1.0)
    rng = np.random.default_rng(11)
    total = np.zeros(reps, dtype=np.int64)
    for _ in range(t_min):  # every device adds its own share to each of `reps` coordinates
        total += dp.sample_noise(mechanism, noise.per_device_scale, reps, rng)
    target = noise.std(t_min) ** 2
    if mechanism == "skellam":
        assert target == pytest.approx(noise.total_scale)  # μ is the variance of the sum
    else:
        assert target <= noise.total_scale**2 * (1 + 1e-9)
    # sample variance of 25k draws: relative std error ≈ √(2/25000) ≈ 0.9 %
    assert total.var() == pytest.approx(target, rel=0.045)
    assert noise.inflation >= 1.0


def test_sample_noise_dispatch_and_errors():
    rng = np.random.default_rng(0)
    assert np.array_equal(dp.sample_noise("none", 5.0, 4, rng), np.zeros(4, dtype=np.int64))
    assert dp.sample_noise("skellam", 0.0, 3, rng).tolist() == [0, 0, 0]
    assert dp.sample_noise("discrete_gaussian", 2.0, 0, rng).shape == (0,)
    with pytest.raises(dp.PrivacyError, match="mechanism"):
        dp.sample_noise("laplace", 1.0, 3, rng)
    with pytest.raises(dp.PrivacyError, match="sigma"):
        dp.sample_discrete_gaussian(-1.0, 3, rng)
    with pytest.raises(dp.PrivacyError, match="mu"):
        dp.sample_skellam(float("nan"), 3, rng)
    with pytest.raises(dp.PrivacyError, match="size"):
        dp.sample_noise("skellam", 1.0, -2, rng)


def test_device_rng_is_fresh_per_call():
    a, b = dp.device_rng(), dp.device_rng()
    assert not np.array_equal(a.integers(0, 2**62, 8), b.integers(0, 2**62, 8))
