"""Tail bounds of the summed noise and what is built on them: the secure-aggregation bit width, release
thresholds on noisy counts, confidence intervals, and the minimum-contributor rule.

Rigorous (not normal-approximation) one-sided tails of the noise N summed over n devices (quantiles of Skellam
noise come from its exact law, `skellam_quantile`, when that is below the bound):
- discrete Gaussian: N_Z(0, σ²) is σ²-subgaussian (Canonne–Kamath–Steinke 2020), so a sum of n shares of
  σ_dev is nσ_dev²-subgaussian: P(N ≥ x) ≤ exp(−x²/(2nσ_dev²));
- Skellam of variance V = n·μ_dev: E[e^{sN}] = exp(V(cosh s − 1)); Chernoff at s = asinh(x/V) gives
  P(N ≥ x) ≤ exp(V(√(1 + (x/V)²) − 1) − x·asinh(x/V)) (heavier than Gaussian far out, as it must be).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from queries.dp.calibrate import RoundNoise
from queries.dp.errors import InsufficientContributors, PrivacyError
from secagg.config import MAX_BITS


def log_tail_bound(noise: RoundNoise, contributors: int, x: float) -> float:
    """log of an upper bound on P(N ≥ x) for the noise summed over `contributors` devices (x ≥ 0)."""
    n = max(int(contributors), 1)
    if x <= 0:
        return 0.0
    if noise.mechanism == "discrete_gaussian":
        var = n * noise.per_device_scale**2
        return -x * x / (2 * var)
    if noise.mechanism == "skellam":
        return _skellam_log_tail(n * noise.per_device_scale, x)
    return -math.inf  # no noise: N = 0 < x


def noise_quantile(noise: RoundNoise | None, contributors: int, log_prob: float) -> int:
    """Smallest integer x ≥ 0 with P(N ≥ x) ≤ e^{log_prob} (0 without noise): by the tail bound, or for Skellam
    by the exact law when that gives less (`skellam_quantile`)."""
    if noise is None or noise.mechanism == "none" or log_prob >= 0:
        return 0
    lo, hi = 0, max(1, math.ceil(noise.std(max(contributors, 1))))
    while log_tail_bound(noise, contributors, hi) > log_prob:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if log_tail_bound(noise, contributors, mid) <= log_prob else (mid, hi)
    if noise.mechanism == "skellam":
        return min(hi, skellam_quantile(max(int(contributors), 1) * noise.per_device_scale, log_prob, hi))
    return hi


EXACT_SKELLAM_MAX_STD = 5e4
"""Above this noise std `skellam_quantile` keeps the Chernoff quantile (its window would hold > 3·10⁵ terms)."""


def skellam_quantile(variance: float, log_prob: float, upper: int) -> int:
    """An integer x ≤ `upper` with P(N ≥ x) ≤ e^{log_prob} for N ~ Skellam(V/2, V/2) of variance V — the law of n
    devices' Skellam(μ/2, μ/2) shares summed (Poisson additivity) — the smallest such x within 3σ below `upper`, the
    Chernoff quantile, which overshoots by about √(2·ln(1/p)) − Φ⁻¹(1 − p) standard deviations (≈ 0.5σ at
    p = 10⁻⁵). Rigorous: P(N ≥ x) ≤ Σ_{x ≤ k < t} e^{−V}·I_k(V) + P(N ≥ t) with t = `upper` + 3σ, the sum exact
    (scipy's exponentially scaled Bessel function `ive`), the last term by the Chernoff bound. Shares redrawn beyond ±B
    (validity proofs) follow that law conditioned on |share| ≤ B, which raises a tail probability by at most the
    factor 1/(1 − P(any share redrawn)), a δ-sized excess (docs/validation.md, "The tail bound B"): the search
    asks for 1 % less. Beyond `EXACT_SKELLAM_MAX_STD`, or if the sum is not finite, `upper`."""
    std = math.sqrt(variance)
    if std > EXACT_SKELLAM_MAX_STD:
        return upper
    from scipy.special import ive  # server side only: devices never compute thresholds

    lo, top = max(0, upper - math.ceil(3 * std) - 1), upper + math.ceil(3 * std) + 1
    beyond = math.exp(_skellam_log_tail(variance, top))  # ≪ e^{log_prob}: 3σ past the bound's quantile
    pmf = ive(np.arange(lo, top, dtype=np.float64), variance)  # P(N = k) = e^{−V}·I_k(V) for Skellam(V/2, V/2)
    tails = np.cumsum(pmf[::-1])[::-1] + beyond  # tails[i] ≥ P(N ≥ lo + i)
    if not np.all(np.isfinite(tails)):
        return upper
    ok = np.flatnonzero(tails <= math.exp(log_prob) * 0.99)
    return int(lo + ok[0]) if ok.size else upper


def _skellam_log_tail(variance: float, x: float) -> float:
    """The Chernoff bound on log P(N ≥ x) for Skellam noise of variance V (see `log_tail_bound`)."""
    if x <= 0:
        return 0.0
    r = x / variance
    return variance * (math.sqrt(1 + r * r) - 1) - x * math.asinh(r)


def _prob(name: str, p: float) -> float:
    if not (isinstance(p, (int, float)) and 0 < p < 1):
        raise PrivacyError(f"{name}: must be in (0, 1), got {p!r}")
    return float(p)


def _at_least(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise PrivacyError(f"{name}: must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


def choose_bits(
    max_clients: int, max_abs: int, noise: RoundNoise | None, fail_prob: float = 1e-9, *, dim: int
) -> int:
    """Smallest bits ≤ 62 so that |sum of max_clients signals + their noise| < 2^(bits−1) on every one of
    `dim` coordinates except with probability < fail_prob (per-coordinate tail × dim, union bound)."""
    max_clients = _at_least("cohort.max_clients", max_clients, 1)
    max_abs = _at_least("max_abs", max_abs, 0)
    dim = _at_least("dim", dim, 1)
    fail_prob = _prob("fail_prob", fail_prob)
    signal = max_clients * max_abs
    # |N| ≥ x has probability ≤ 2·P(N ≥ x) by symmetry; spread fail_prob over dim coordinates.
    x = noise_quantile(noise, max_clients, math.log(fail_prob / (2 * dim)))
    bound = signal + x  # with |N| < x (and x ≥ 1 when noisy), |S + N| ≤ signal + x − 1 < 2^(bits−1)
    bits = max(1, bound.bit_length() + 1)
    if bits > MAX_BITS:
        std = 0.0 if noise is None else noise.std(max_clients)
        raise PrivacyError(
            f"bits: {max_clients} contributions bounded by {max_abs} plus noise of std {std:.3g} need {bits} bits, "
            f"more than {MAX_BITS}; lower cohort.max_clients or the contribution bound (e.g. the encoding scale), "
            "or raise privacy.epsilon"
        )
    return bits


def release_threshold(
    noise: RoundNoise | None, contributors: int, dim: int, false_release_prob: float, floor: float = 0.0
) -> float:
    """Count threshold τ ≥ floor such that a true-zero bucket's noisy count reaches τ with probability
    < false_release_prob/dim, so any of the `dim` zero buckets is released with probability < false_release_prob."""
    dim = _at_least("dim", dim, 1)
    p = _prob("false_release_prob", false_release_prob)
    if noise is None or noise.mechanism == "none":
        return float(floor)
    return float(max(floor, noise_quantile(noise, contributors, math.log(p / dim))))


def confidence_halfwidth(noise: RoundNoise | None, contributors: int, confidence: float = 0.999) -> int:
    """h with P(|noise summed over contributors| ≥ h) ≤ 1 − confidence (the released count's noise interval)."""
    c = _prob("confidence", confidence)
    return noise_quantile(noise, contributors, math.log((1 - c) / 2))


def apply_count_threshold(
    counts: Mapping[str, float] | Iterable[tuple[str, float]], threshold: float
) -> tuple[dict[str, int], list[str]]:
    """(released counts ≥ threshold, names of suppressed buckets), both in the input order."""
    items = counts.items() if isinstance(counts, Mapping) else counts
    released: dict[str, int] = {}
    suppressed: list[str] = []
    for name, value in items:
        if value >= threshold:
            released[name] = int(value)
        else:
            suppressed.append(name)
    return released, suppressed


def check_min_contributors(contributors: int, t_min: int) -> None:
    """Refuse a release whose sum has fewer contributors than the t_min its noise was calibrated for."""
    if contributors < t_min:
        raise InsufficientContributors(
            f"contributors: {contributors} devices contributed, fewer than t_min={t_min} (cohort.min_clients); "
            "the summed noise would be below target, so nothing is released"
        )
