"""Samplers against their exact pmfs (chi-square) and the variance of summed device shares.

False-alarm rate: each chi-square test rejects at p < 1e-4 with a fixed seed, so a correct sampler fails a
given case with probability 1e-4 per seed choice (and, the seeds being fixed, deterministically never
once it has passed); a wrong pmf (e.g. σ off by 2 %) is rejected at these sample sizes. Every sampler
reads its bits from a `secagg.randomness` source; the tests pass a SeededRandom.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from hypothesis import given, settings
from hypothesis import strategies as st

from queries import dp
from queries.dp import noise as noise_mod
from queries.dp.noise import discrete_gaussian_log_pmf
from secagg.randomness import OsRandom, SeededRandom, keyed_stream

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
    x = dp.sample_discrete_gaussian(sigma, N, SeededRandom(b"dg/%d" % int(sigma * 1000)))
    assert x.dtype == np.int64 and x.shape == (N,)
    p = chi_square_p(x, lambda k: np.exp(discrete_gaussian_log_pmf(k, sigma)))
    assert p > ALPHA


def test_discrete_gaussian_chi_square_rejects_a_wrong_sigma():
    """The test has power: samples of σ = 2.5 do not pass as σ = 2.6."""
    x = dp.sample_discrete_gaussian(2.5, N, SeededRandom(b"dg/wrong"))
    assert chi_square_p(x, lambda k: np.exp(discrete_gaussian_log_pmf(k, 2.6))) < ALPHA


@pytest.mark.parametrize("mu", [0.4, 3.0, 50.0])
def test_skellam_matches_pmf_with_variance_mu(mu):
    x = dp.sample_skellam(mu, N, SeededRandom(b"sk/%d" % int(mu * 100)))
    assert x.dtype == np.int64
    # Sk(μ) = Poisson(μ/2) − Poisson(μ/2): variance μ
    assert chi_square_p(x, lambda k: stats.skellam.pmf(k, mu / 2, mu / 2)) > ALPHA
    assert x.var() == pytest.approx(mu, rel=0.03)


def test_large_sigma_moments():
    sigma = 1e6
    x = dp.sample_discrete_gaussian(sigma, 100_000, SeededRandom(b"dg/large"))
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
    rng = SeededRandom(b"sum-of-shares/" + mechanism.encode())
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
    rng = SeededRandom(b"dispatch")
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


@pytest.mark.parametrize("lam", [0.02, 0.2, 4.0, 9.9])
def test_poisson_inversion_matches_pmf(lam):
    x = noise_mod._poisson_inversion(lam, N, SeededRandom(b"poisson-inv/%d" % int(lam * 100)))
    assert chi_square_p(x, lambda k: stats.poisson.pmf(k, lam)) > ALPHA


@pytest.mark.parametrize("lam", [10.0, 30.0, 5000.0, 2e6])
def test_poisson_ptrs_matches_pmf(lam):
    x = noise_mod._poisson_ptrs(lam, N, SeededRandom(b"poisson-ptrs/%d" % int(lam)))
    assert chi_square_p(x, lambda k: stats.poisson.pmf(k, lam)) > ALPHA


def test_poisson_chi_square_rejects_a_wrong_rate():
    x = noise_mod._poisson_ptrs(30.0, N, SeededRandom(b"poisson-wrong"))
    assert chi_square_p(x, lambda k: stats.poisson.pmf(k, 30.6)) < ALPHA
    y = noise_mod._poisson_inversion(4.0, N, SeededRandom(b"poisson-wrong"))
    assert chi_square_p(y, lambda k: stats.poisson.pmf(k, 4.1)) < ALPHA


def test_skellam_at_large_mu_has_variance_mu():
    mu = 4e5
    x = dp.sample_skellam(mu, N, SeededRandom(b"sk/large"))
    assert chi_square_p(x, lambda k: stats.skellam.pmf(k, mu / 2, mu / 2)) > ALPHA
    assert x.var() == pytest.approx(mu, rel=0.03)
    huge = dp.sample_skellam(1e14, 100_000, SeededRandom(b"sk/huge"))
    assert abs(huge.mean()) < 5 * math.sqrt(1e14 / huge.size) and huge.std() == pytest.approx(1e7, rel=0.01)


@pytest.mark.parametrize("lam", [1e-3, 0.5, 7.0, 9.999])
def test_poisson_inversion_table_is_exact_to_float_precision(lam):
    """The table stops at POISSON_TABLE_K (mass beyond < 1e-80); each point is within 2⁻⁵¹ of its pmf."""
    cdf, _ = noise_mod._poisson_table(lam)
    assert cdf.size == noise_mod.POISSON_TABLE_K + 1 and cdf[-1] == 1.0 and np.all(np.diff(cdf) >= 0)
    assert stats.poisson.sf(noise_mod.POISSON_TABLE_K, lam) < 1e-80
    pmf = stats.poisson.pmf(np.arange(cdf.size), lam)
    assert np.max(np.abs(np.diff(cdf, prepend=0.0) - pmf)) < 2.0**-51


def test_poisson_log_pmf_is_accurate_at_large_rates():
    """Against 50-digit arithmetic (scipy's logpmf itself loses whole units to cancellation at λ = 5e14)."""
    mpmath.mp.dps = 50
    for lam in (12.0, 3e3, 2e6, 5e14):
        k = np.unique(np.clip(np.round(lam + np.linspace(-12, 12, 49) * math.sqrt(lam)), 0, None)).astype(np.int64)
        k = np.concatenate([k, np.arange(16)])
        L = mpmath.mpf(lam)
        want = np.array([float(-L + int(x) * mpmath.log(L) - mpmath.loggamma(int(x) + 1)) for x in k])
        got = noise_mod.poisson_log_pmf(k, lam)
        assert np.allclose(got, want, rtol=1e-12, atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.binary(max_size=16),
    mechanism=st.sampled_from(["discrete_gaussian", "skellam"]),
    scale=st.floats(min_value=0.0, max_value=1e12, allow_nan=False),
    size=st.integers(min_value=0, max_value=300),
)
def test_samplers_are_a_function_of_the_source_bytes(seed, mechanism, scale, size):
    """Same bytes in, same noise out (no hidden entropy); int64 of the asked length; a fresh source differs."""
    scale = min(scale, dp.noise.MAX_SIGMA) if mechanism == "discrete_gaussian" else scale
    a = dp.sample_noise(mechanism, scale, size, SeededRandom(seed))
    b = dp.sample_noise(mechanism, scale, size, SeededRandom(seed))
    assert a.dtype == np.int64 and a.shape == (size,) and np.array_equal(a, b)
    if size >= 100 and scale >= 10:
        assert not np.array_equal(a, dp.sample_noise(mechanism, scale, size, SeededRandom(seed + b"'")))


def test_os_and_keyed_sources_give_fresh_noise_per_call():
    for src in (OsRandom, lambda: keyed_stream(OsRandom())):
        a, b = (dp.sample_noise("discrete_gaussian", 50.0, 64, src()) for _ in range(2))
        assert not np.array_equal(a, b)


@pytest.mark.parametrize(("mechanism", "scale"), [("discrete_gaussian", 0.8), ("discrete_gaussian", 40.0),
                                                  ("skellam", 3.0), ("skellam", 50.0), ("skellam", 1e9)])
def test_values_do_not_depend_on_the_batch_sizes(monkeypatch, mechanism, scale):
    """Candidates consume words in a fixed order; batching only changes how many surplus words are read."""
    want = dp.sample_noise(mechanism, scale, 500, SeededRandom(b"batches"))
    for tiny in (1, 7):
        monkeypatch.setattr(noise_mod, "_batch", lambda need, rate, tiny=tiny: tiny)
        assert np.array_equal(dp.sample_noise(mechanism, scale, 500, SeededRandom(b"batches")), want)
