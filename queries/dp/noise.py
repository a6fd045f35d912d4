"""Integer noise samplers for distributed DP: discrete Gaussian (Canonne–Kamath–Steinke 2020) and Skellam.

Every draw takes its randomness from an injected byte source (`secagg.randomness`: OS entropy on devices,
a seeded AES-CTR stream in tests), never from numpy's generators. Bytes become uint64 words read
little-endian, 8 bytes each; a word w gives the uniform U = (⌊w / 2¹²⌋ + ½)·2⁻⁵² in the open interval
(0, 1), so log U is always finite. The order in which words are consumed is part of the known-answer
vectors (docs/vectors.md) and stated below.

Discrete Gaussian N_Z(0, σ²) (pmf ∝ exp(−k²/2σ²) on the integers), CKS 2020 ("The Discrete Gaussian for
Differential Privacy", Algorithms 2 and 3), vectorised. Proposal: the discrete Laplace with scale
t = ⌊σ⌋ + 1 as in their Algorithm 2 — a sign bit and a geometric magnitude |Y| = ⌊−t·ln U⌋
(P(|Y| ≥ g) = e^{−g/t}) with the pair (negative, 0) rejected so zero is not counted twice. Acceptance with
probability exp(−(|Y| − σ²/t)²/(2σ²)) (their Algorithm 3). Candidate i reads words 2i (sign from bit 0,
U from bits 12..63) and 2i+1 (the acceptance uniform); the output is the accepted candidates in order.
Candidates are drawn in batches; how many surplus candidates the last batch reads does not change the
output (the noise source serves nothing else), so the vectors pin values, not bytes read. CKS give
the exact version with rational arithmetic and Bernoulli(exp(−γ)) built from Bernoulli(p) coins; here
the acceptance probability and the geometric inversion use float64. This is the documented variant:
- no leak: the noise does not depend on the data, is an integer, and is added to the integer contribution
  exactly, so there is no floating-point output whose representation could reveal the data (the failure
  Mironov 2012 showed for float Laplace noise);
- the sampled pmf differs from the ideal one by a relative error of a few float64 ulps (≈1e-15) per
  point, and the proposal cannot reach |Y| beyond ≈ 36.7·t (U ≥ 2⁻⁵³; tail mass < 2⁻⁵³), which costs at
  most ≈ 1e-15 in ε and an additive δ far below 1e-15 — negligible against any δ we accept (≥ 1e-12).

Skellam Sk(μ) = Poisson(μ/2) − Poisson(μ/2): mean 0, variance μ (the parameterisation of Agarwal, Kairouz,
Liu 2021, "The Skellam Mechanism for Differentially Private Federated Learning", where μ is the
variance). Sums of independent Skellams are Skellam with the summed μ, so t devices each adding Sk(μ/t)
give exactly Sk(μ). `size` draws take 2·size Poisson(μ/2) variables; the first `size` minus the last.
Poisson(λ) from uniforms, two algorithms (the split of numpy's own sampler, which they replace):
- λ < POISSON_INVERSION_MAX (10): inversion. The pmf on 0..POISSON_TABLE_K (127; the mass beyond is below
  1e-80 for λ < 10) is tabulated, its cumulative sum normalised, and one word per draw is inverted
  (k = first point whose cdf exceeds U; indexed search from a guide table). Each point's probability is
  reproduced within ~2⁻⁵¹ absolute (the grid of U and the rounding of the cdf).
- λ ≥ 10: PTRS, the transformed rejection with squeeze of Hörmann 1993 ("The transformed rejection method
  for generating Poisson random variables", Insurance: Mathematics and Economics 12, §3; the algorithm
  numpy uses for λ ≥ 10). Try i reads words 2i (U) and 2i+1 (V); the output is the accepted tries in
  order (batched as for the discrete Gaussian). The final test compares with log p(k) computed as
  (k − λ) − k·log1p((k − λ)/λ) − ½ln(2πk) − S(k) (Stirling with its series S to k⁻⁵, exact ln k! below
  16), which avoids the cancellation of −λ + k ln λ − ln k! at large λ; float64 errors are then relative
  (≈1e-15 per point and a tail beyond 2⁻⁵³ of the hat's mass cut off), as for the discrete Gaussian.
Both use float64 in the same data-independent way as the discrete Gaussian.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from queries.dp.errors import PrivacyError
from secagg.randomness import ByteSource, uint64s

MECHANISMS = ("discrete_gaussian", "skellam", "none")
NOISY_MECHANISMS = ("discrete_gaussian", "skellam")
MAX_SIGMA = 1e9
"""Largest σ the discrete-Gaussian sampler accepts (proposal values stay far inside int64)."""
MIN_SIGMA = 0.01
"""Below this σ the sampler returns zeros without reading bytes: P(N_Z(0, σ²) ≠ 0) < 2e^{−5000}, which is
0 in float64 anyway (and σ² would underflow for the smallest σ)."""
MAX_MU = 1e15
POISSON_INVERSION_MAX = 10.0
"""Poisson rates below this are sampled by table inversion, the others by PTRS."""
POISSON_TABLE_K = 127
"""Last point of the inversion table (128 points, a power of two; the mass beyond is below 1e-80 for λ < 10)."""
_LOG_FACTORIAL = np.array([math.lgamma(k + 1) for k in range(16)])


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise PrivacyError(f"size: must be a non-negative integer, got {size!r}")
    return int(size)


def _uniforms(words: np.ndarray) -> np.ndarray:
    """Uniforms (⌊w/2¹²⌋ + ½)·2⁻⁵² ∈ [2⁻⁵³, 1 − 2⁻⁵³] from uint64 words: every value is exact in float64,
    so U is never 0 or 1 (with 53 bits, (2⁵³ − ½)·2⁻⁵³ would round to 1)."""
    return ((words >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52


def _batch(need: int, rate: float) -> int:
    """Candidates to draw so that `need` survive a `rate` acceptance with overwhelming probability."""
    mean = need / rate
    return int(mean + 4.0 * math.sqrt(mean) + 16)


def _discrete_laplace_candidates(t: int, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of CKS Algorithm 2 proposals: sign from bit 0, magnitude ⌊−t·ln U⌋, (−, 0) invalid."""
    negative = (words & np.uint64(1)).astype(bool)
    magnitude = np.floor(-float(t) * np.log(_uniforms(words))).astype(np.int64)
    return np.where(negative, -magnitude, magnitude), ~(negative & (magnitude == 0))


def sample_discrete_laplace(t: int, size: int, source: ByteSource) -> np.ndarray:
    """Discrete Laplace with scale t (pmf ∝ exp(−|k|/t)): CKS 2020 Algorithm 2, one word per candidate."""
    size = _check_size(size)
    rate = 1.0 - 0.5 * -math.expm1(-1.0 / t)  # P(the candidate is not the rejected (−, 0))
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        y, valid = _discrete_laplace_candidates(t, uint64s(source, _batch(need, rate)))
        kept = y[valid][:need]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out


@functools.lru_cache(maxsize=64)
def _dg_acceptance(sigma: float) -> float:
    """Probability that one proposal is kept (sizes the batches; affects speed, never the law)."""
    t = math.floor(sigma) + 1
    zero_ok = 1.0 - 0.5 * -math.expm1(-1.0 / t)
    if t > 64:
        return 0.75 * zero_ok  # → e^{−1/2}·√(π/2) ≈ 0.760 as σ grows
    y = np.arange(-40 * t, 40 * t + 1, dtype=np.float64)
    dl = np.exp(-np.abs(y) / t)
    accept = np.exp(-((np.abs(y) - sigma * sigma / t) ** 2) / (2.0 * sigma * sigma))
    return float((dl * accept).sum() / dl.sum()) * zero_ok


def sample_discrete_gaussian(sigma: float, size: int, source: ByteSource) -> np.ndarray:
    """`size` independent draws of N_Z(0, σ²) as int64 (σ < MIN_SIGMA gives zeros and reads no bytes)."""
    size = _check_size(size)
    if not (isinstance(sigma, (int, float, np.floating)) and math.isfinite(sigma) and 0 <= sigma <= MAX_SIGMA):
        raise PrivacyError(f"sigma: must be a finite number in [0, {MAX_SIGMA:g}], got {sigma!r}")
    sigma = float(sigma)
    if sigma < MIN_SIGMA or size == 0:
        return np.zeros(size, dtype=np.int64)
    t = math.floor(sigma) + 1
    s2 = sigma * sigma
    rate = _dg_acceptance(sigma)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        m = _batch(need, rate)
        words = uint64s(source, 2 * m)
        y, valid = _discrete_laplace_candidates(t, words[0::2])
        gamma = (np.abs(y) - s2 / t) ** 2 / (2.0 * s2)
        kept = y[valid & (_uniforms(words[1::2]) < np.exp(-gamma))][:need]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out


@functools.lru_cache(maxsize=64)
def _poisson_table(lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(cdf, guide): cdf[k] = P(X ≤ k | X ≤ POISSON_TABLE_K) with cdf[-1] = 1 exactly, and the guide
    table guide[j] = first k with cdf[k] > j/m (m = len(cdf)) that starts each search."""
    ks = np.arange(1, POISSON_TABLE_K + 1, dtype=np.float64)
    log_p = np.concatenate(([0.0], np.cumsum(math.log(lam) - np.log(ks))))  # log p(k) − log p(0)
    cdf = np.cumsum(np.exp(log_p - log_p.max()))
    cdf /= cdf[-1]
    cdf[-1] = 1.0
    guide = np.searchsorted(cdf, np.arange(cdf.size) / cdf.size, side="right")
    cdf.flags.writeable = guide.flags.writeable = False
    return cdf, guide


def poisson_log_pmf(k: np.ndarray, lam: float) -> np.ndarray:
    """log P(Poisson(λ) = k) without the cancellation of −λ + k ln λ − ln k! at large λ (k ≥ 0 integers)."""
    k = np.asarray(k, dtype=np.float64)
    small = k < _LOG_FACTORIAL.size
    exact = -lam + k * math.log(lam) - _LOG_FACTORIAL[np.where(small, k, 0).astype(np.int64)]
    kk = np.maximum(k, float(_LOG_FACTORIAL.size))
    inv, inv2 = 1.0 / kk, 1.0 / (kk * kk)
    series = inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 / 1260))
    d = kk - lam
    stirling = d - kk * np.log1p(d / lam) - 0.5 * np.log(2.0 * math.pi * kk) - series
    logp: np.ndarray = np.where(small, exact, stirling)
    return logp


def _poisson_inversion(lam: float, size: int, source: ByteSource) -> np.ndarray:
    """Inversion k = first i with cdf[i] > U, one word per draw; the search starts at the guide
    table's entry for ⌊U·m⌋ (indexed search, Chen and Asau 1974, "On generating random variates from an
    empirical distribution", AIIE Transactions 6) and steps up while cdf[i] ≤ U."""
    cdf, guide = _poisson_table(lam)
    u = _uniforms(uint64s(source, size))
    idx = guide[(u * cdf.size).astype(np.int64)]  # m = 128 is a power of two: U·m is exact and below m
    todo = np.flatnonzero(cdf[idx] <= u)
    for _ in range(3):
        idx[todo] += 1
        todo = todo[cdf[idx[todo]] <= u[todo]]
    idx[todo] = np.searchsorted(cdf, u[todo], side="right")  # the few in wide tail cells: binary search
    return idx.astype(np.int64)


def _poisson_ptrs(lam: float, size: int, source: ByteSource) -> np.ndarray:
    slam = math.sqrt(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_invalpha = math.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2.0)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        m = _batch(need, 0.85)
        words = uint64s(source, 2 * m)
        uv = _uniforms(words)
        u, v = uv[0::2] - 0.5, uv[1::2]
        us = 0.5 - np.abs(u)
        kf = np.floor((2.0 * a / us + b) * u + (lam + 0.43))
        in_range = (kf >= 0) & (kf < 2.0**62)
        k = np.clip(kf, 0.0, 2.0**62).astype(np.int64)
        quick = (us >= 0.07) & (v <= vr)
        slow = ~quick & in_range & ~((us < 0.013) & (v > us))
        idx = np.flatnonzero(slow)
        if idx.size:
            lhs = np.log(v[idx]) + log_invalpha - np.log(a / (us[idx] * us[idx]) + b)
            slow[idx] = lhs <= poisson_log_pmf(k[idx], lam)
        kept = k[quick | slow][:need]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out


def sample_poisson(lam: float, size: int, source: ByteSource) -> np.ndarray:
    """`size` independent Poisson(λ) draws as int64: table inversion below λ = 10, PTRS from there."""
    size = _check_size(size)
    if lam == 0 or size == 0:
        return np.zeros(size, dtype=np.int64)
    if lam < POISSON_INVERSION_MAX:
        return _poisson_inversion(float(lam), size, source)
    return _poisson_ptrs(float(lam), size, source)


def sample_skellam(mu: float, size: int, source: ByteSource) -> np.ndarray:
    """`size` independent draws of Sk(μ) = Poisson(μ/2) − Poisson(μ/2) (variance μ) as int64."""
    size = _check_size(size)
    if not (isinstance(mu, (int, float, np.floating)) and math.isfinite(mu) and 0 <= mu <= MAX_MU):
        raise PrivacyError(f"mu: must be a finite number in [0, {MAX_MU:g}], got {mu!r}")
    if mu == 0 or size == 0:
        return np.zeros(size, dtype=np.int64)
    both = sample_poisson(float(mu) / 2.0, 2 * size, source)
    diff: np.ndarray = both[:size] - both[size:]
    return diff


def sample_noise(mechanism: str, scale: float, size: int, source: ByteSource) -> np.ndarray:
    """One device's noise share: σ for "discrete_gaussian", μ (variance) for "skellam", zeros for "none"."""
    if mechanism == "discrete_gaussian":
        return sample_discrete_gaussian(scale, size, source)
    if mechanism == "skellam":
        return sample_skellam(scale, size, source)
    if mechanism == "none":
        return np.zeros(_check_size(size), dtype=np.int64)
    raise PrivacyError(f"mechanism: must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")


MAX_REDRAWS = 64
"""Rounds of redrawing `sample_noise_bounded` allows before it refuses the bound as too tight."""


def sample_noise_bounded(mechanism: str, scale: float, size: int, source: ByteSource, bound: int) -> np.ndarray:
    """`sample_noise` truncated to [−bound, bound]: entries beyond it are drawn again (from the same source),
    so each entry follows the mechanism's law conditioned on |e| ≤ bound (validity proofs, docs/validation.md).
    PrivacyError when the bound is so tight that redrawing does not end."""
    if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or bound < 0:
        raise PrivacyError(f"bound: must be a non-negative integer, got {bound!r}")
    out = sample_noise(mechanism, scale, size, source)
    for _ in range(MAX_REDRAWS):
        beyond = np.flatnonzero(np.abs(out) > bound)
        if beyond.size == 0:
            return out
        out[beyond] = sample_noise(mechanism, scale, int(beyond.size), source)
    raise PrivacyError(f"bound: {bound} is too tight for {mechanism} noise of scale {scale:g} (redrawing does not end)")


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
