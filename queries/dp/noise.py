"""Integer noise samplers for distributed DP: discrete Gaussian (Canonne–Kamath–Steinke 2020) and Skellam.

Every device draws its share with `device_rng()` (a fresh generator seeded from 32 bytes of
`os.urandom` per contribution) and adds it to its integer vector before secure-aggregation masking.

Discrete Gaussian N_Z(0, σ²) (pmf ∝ exp(−k²/2σ²) on the integers), CKS 2020 Algorithm 3, vectorised:
propose Y from the discrete Laplace with scale t = ⌊σ⌋ + 1 (difference of two geometric variables,
exact in law), accept with probability exp(−(|Y| − σ²/t)²/(2σ²)); rejected slots are redrawn. CKS give
the exact version with rational arithmetic and Bernoulli(exp(−γ)) built from Bernoulli(p) coins; here the
acceptance probability and the geometric inversion use float64. This is the documented vectorised variant:
- no leak: the noise does not depend on the data, is an integer, and is added to the integer contribution
  exactly, so there is no floating-point output whose representation could reveal the data (the failure
  Mironov 2012 showed for float Laplace noise);
- the sampled pmf differs from the ideal one by a relative error of a few float64 ulps (≈1e-15) per
  point, and the proposal cannot reach |Y| beyond ≈ 37·t per geometric (tail mass < 2^-52), which costs at
  most ≈ 1e-15 in ε and an additive δ far below 1e-15 — negligible against any δ we accept (≥ 1e-12).

Skellam Sk(μ) = Poisson(μ/2) − Poisson(μ/2): mean 0, variance μ (the parameterisation of Agarwal, Kairouz,
Liu 2021, where μ is the variance). Sums of independent Skellams are Skellam with the summed μ, so t
devices each adding Sk(μ/t) give exactly Sk(μ). numpy's Poisson sampler (PTRS for large rates) uses
float64 in the same data-independent way.
"""

from __future__ import annotations

import math
import os

import numpy as np

from queries.dp.errors import PrivacyError

MECHANISMS = ("discrete_gaussian", "skellam", "none")
NOISY_MECHANISMS = ("discrete_gaussian", "skellam")
MAX_SIGMA = 1e9
"""Largest σ the discrete-Gaussian sampler accepts (proposal values stay far inside int64)."""


def device_rng() -> np.random.Generator:
    """A fresh generator for one contribution's noise, seeded from 256 bits of os.urandom."""
    seed = np.random.SeedSequence(int.from_bytes(os.urandom(32), "big"))
    return np.random.Generator(np.random.PCG64DXSM(seed))


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise PrivacyError(f"size: must be a non-negative integer, got {size!r}")
    return int(size)


def sample_discrete_laplace(t: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Discrete Laplace with scale t (pmf ∝ exp(−|k|/t)) as the difference of two geometric variables."""
    p = -math.expm1(-1.0 / t)  # success probability: P(G = g) = (1−p)^g · p on g ≥ 0
    g1 = rng.geometric(p, size).astype(np.int64) - 1
    g2 = rng.geometric(p, size).astype(np.int64) - 1
    return g1 - g2


def sample_discrete_gaussian(sigma: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` independent draws of N_Z(0, σ²) as int64 (σ = 0 gives zeros)."""
    size = _check_size(size)
    if not (isinstance(sigma, (int, float, np.floating)) and math.isfinite(sigma) and 0 <= sigma <= MAX_SIGMA):
        raise PrivacyError(f"sigma: must be a finite number in [0, {MAX_SIGMA:g}], got {sigma!r}")
    sigma = float(sigma)
    if sigma == 0.0 or size == 0:
        return np.zeros(size, dtype=np.int64)
    t = math.floor(sigma) + 1
    s2 = sigma * sigma
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        batch = max(64, int(need * 1.6) + 16)  # acceptance rate is ≥ ~0.6 for every σ
        y = sample_discrete_laplace(t, batch, rng)
        gamma = (np.abs(y) - s2 / t) ** 2 / (2.0 * s2)
        kept = y[rng.random(batch) < np.exp(-gamma)][:need]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out


def sample_skellam(mu: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` independent draws of Sk(μ) = Poisson(μ/2) − Poisson(μ/2) (variance μ) as int64."""
    size = _check_size(size)
    if not (isinstance(mu, (int, float, np.floating)) and math.isfinite(mu) and 0 <= mu <= 1e15):
        raise PrivacyError(f"mu: must be a finite number in [0, 1e15], got {mu!r}")
    if mu == 0 or size == 0:
        return np.zeros(size, dtype=np.int64)
    half = float(mu) / 2.0
    return rng.poisson(half, size).astype(np.int64) - rng.poisson(half, size).astype(np.int64)


def sample_noise(mechanism: str, scale: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """One device's noise share: σ for "discrete_gaussian", μ (variance) for "skellam", zeros for "none"."""
    if mechanism == "discrete_gaussian":
        return sample_discrete_gaussian(scale, size, rng)
    if mechanism == "skellam":
        return sample_skellam(scale, size, rng)
    if mechanism == "none":
        return np.zeros(_check_size(size), dtype=np.int64)
    raise PrivacyError(f"mechanism: must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")


def discrete_gaussian_log_pmf(k: np.ndarray, sigma: float) -> np.ndarray:
    """log P(N_Z(0, σ²) = k), normalised by summing the series (used by tests and the variance)."""
    k = np.asarray(k, dtype=np.float64)
    half = int(math.ceil(40 * sigma)) + 2
    support = np.arange(-half, half + 1, dtype=np.float64)
    log_terms = -(support**2) / (2 * sigma * sigma)
    log_norm = float(np.log(np.exp(log_terms - log_terms.max()).sum()) + log_terms.max())
    return -(k**2) / (2 * sigma * sigma) - log_norm


def discrete_gaussian_variance(sigma: float) -> float:
    """Exact variance of N_Z(0, σ²); below σ² for small σ, equal to σ² to float precision for σ ≥ 8."""
    if sigma <= 0:
        return 0.0
    if sigma >= 8:
        return sigma * sigma  # Poisson summation: relative gap ≤ ~4π²σ²·e^{−2π²σ²}, far below 1e-300
    half = int(math.ceil(40 * sigma)) + 2
    k = np.arange(-half, half + 1, dtype=np.float64)
    w = np.exp(-(k**2) / (2 * sigma * sigma))
    return float((w * k * k).sum() / w.sum())


def per_device_std(mechanism: str, scale: float) -> float:
    """Standard deviation of one device's share for a `sample_noise` scale."""
    if mechanism == "discrete_gaussian":
        return math.sqrt(discrete_gaussian_variance(scale))
    if mechanism == "skellam":
        return math.sqrt(scale)
    if mechanism == "none":
        return 0.0
    raise PrivacyError(f"mechanism: must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
