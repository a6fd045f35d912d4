"""The device's own lower bound on the noise it adds: recomputed from the public (ε, δ, rounds, t_min,
sensitivity), never taken from the server. Pure Python (`math` only), so it runs on the device without the
accountant behind `queries.dp.calibrate` (tests/test_import_set.py).

Why it is a valid floor. Balle and Wang ("Improving the Gaussian Mechanism for Differential Privacy:
Analytical Calibration and Optimal Denoising", ICML 2018, Theorem 8) give the exact privacy profile of the
Gaussian mechanism: noise N(0, σ²) on a query of L2 sensitivity Δ is (ε, δ)-DP if and only if

    Φ(Δ/(2σ) − εσ/Δ) − e^ε · Φ(−Δ/(2σ) − εσ/Δ) ≤ δ.

`rounds` such mechanisms with multiplier z = σ/Δ compose — adaptively too (Dong, Roth, Su, "Gaussian
Differential Privacy", JRSS B 2022, Corollary 2) — to exactly one Gaussian mechanism with multiplier z/√rounds.
So no accountant can certify (ε, δ) over `rounds` rounds with a multiplier below
`gaussian_floor(ε, δ, rounds)` = √rounds · z₁(ε, δ), z₁ the smallest multiplier meeting the inequality.
The server's calibration (`queries.dp.calibrate`) is such an accountant (RDP, converted by dp_accounting),
and every round's discrete noise it plans has a total σ ≥ z·Δ2 (discrete Gaussian; variance μ ≥ (z·Δ2)²
for Skellam), because each bound it compares with α/(2z²) has α·Δ2²/(2σ²) as its leading term. Hence an
honest server's per-device scale is never below the floor, and a server that shrinks the noise below what
any accounting of (ε, δ) allows is caught. What the floor cannot catch: noise between the floor and the
server's own calibration (the RDP conversion's slack, 4–12 % of σ over the grid of `scripts/bench_device.py`)
— the device accepts it.

Poisson sampling is not credited: the server calibrates every query at sampling rate 1, and a device that
credited amplification would have to trust the server's claim that it samples.
"""

from __future__ import annotations

import math
from functools import lru_cache

from queries.dp.errors import PrivacyError

_MIN_Z, _MAX_Z = 1e-6, 1e9
_SQRT2 = math.sqrt(2.0)


def _phi(x: float) -> float:
    """Standard normal cdf (erfc keeps the lower tail accurate down to ~1e-300)."""
    return 0.5 * math.erfc(-x / _SQRT2)


def gaussian_delta(epsilon: float, z: float) -> float:
    """Exact δ at ε of the Gaussian mechanism with noise multiplier z = σ/Δ (Balle–Wang, Theorem 8)."""
    a = 1.0 / (2.0 * z)
    b = epsilon * z
    tail = _phi(-a - b)
    second = 0.0 if tail == 0.0 else math.exp(epsilon + math.log(tail))
    return max(0.0, _phi(a - b) - second)


@lru_cache(maxsize=256)
def gaussian_floor(epsilon: float, delta: float, rounds: int = 1) -> float:
    """Smallest noise multiplier z with which `rounds` Gaussian rounds can be (ε, δ)-DP under any accounting."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise PrivacyError(f"epsilon: must be a positive finite number, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise PrivacyError(f"delta: must be in (0, 1), got {delta!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise PrivacyError(f"rounds: must be an integer ≥ 1, got {rounds!r}")
    lo, hi = _MIN_Z, 1.0
    while gaussian_delta(epsilon, hi) > delta:  # δ falls as z grows
        lo, hi = hi, hi * 2.0
        if hi > _MAX_Z:
            return _MAX_Z * math.sqrt(rounds)
    if gaussian_delta(epsilon, lo) <= delta:
        return lo * math.sqrt(rounds)
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if gaussian_delta(epsilon, mid) > delta:
            lo = mid
        else:
            hi = mid
    return lo * math.sqrt(rounds)  # the lower end: a floor errs towards accepting


def per_device_floor(
    mechanism: str, epsilon: float, delta: float, rounds: int, t_min: int, l2_sensitivity: float,
    encoding_scale: int = 1, weight: float = 1.0,
) -> float:
    """Smallest per-device scale (what `queries.dp.sample_noise` takes: σ for the discrete Gaussian, the
    variance μ for Skellam) that t_min devices' shares may sum to for a round of L2 sensitivity
    `l2_sensitivity` in the kind's units, with contributions multiplied by `encoding_scale`, when the round
    spends `weight` unit rounds: multiplier gaussian_floor(ε, δ, rounds)/√weight (rounds of multipliers z_i
    compose to one Gaussian of 1/√(Σ 1/z_i²), so rounds whose weights sum to at most `rounds` stay within
    (ε, δ); the device checks that sum over the rounds it contributes to)."""
    if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight > 0):
        raise PrivacyError(f"weight: must be a positive finite number, got {weight!r}")
    if isinstance(t_min, bool) or not isinstance(t_min, int) or t_min < 1:
        raise PrivacyError(f"t_min: must be an integer ≥ 1, got {t_min!r}")
    if not (math.isfinite(l2_sensitivity) and l2_sensitivity >= 0):
        raise PrivacyError(f"l2_sensitivity: must be a finite number ≥ 0, got {l2_sensitivity!r}")
    total_sigma = gaussian_floor(float(epsilon), float(delta), int(rounds)) / math.sqrt(weight) * encoding_scale * l2_sensitivity
    if mechanism == "discrete_gaussian":
        return total_sigma / math.sqrt(t_min)
    if mechanism == "skellam":
        return total_sigma * total_sigma / t_min
    raise PrivacyError(f"mechanism: no noise floor for {mechanism!r}")


__all__ = ["gaussian_delta", "gaussian_floor", "per_device_floor"]
