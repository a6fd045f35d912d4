"""TrieHH privacy calibration: the vote threshold θ and the per-round sampling rate from (ε, δ, L, n).

Zhu, Kairouz, McMahan, Sun, Li, "Federated Heavy Hitters Discovery with Differential Privacy"
(AISTATS 2020), Theorem 1 and Corollary 1. Each of the L rounds samples m = γ·√n of the n devices
uniformly; a character extension is kept when it has at least θ votes. Then TrieHH is (ε, δ)-DP with

    ε = L · ln(1 + 1 / (√n / (γ·θ) − 1))        δ = (θ − 2) / ((θ − 3) · θ!)

provided 4 ≤ θ ≤ √n and γ ≤ √n / (θ + 1). With q = m / n the per-device sampling rate, γ·θ/√n = q·θ and
the first formula is simply ε = −L · ln(1 − q·θ): ε does not depend on n, only on the rate.

Corollary 1 picks, for a target (ε, δ): θ the smallest integer (≥ 4) with ((θ − 3)/(θ − 2))·θ! ≥ 1/δ
and θ ≥ e^{ε/L} − 1, and γ = √n·(e^{ε/L} − 1)/(θ·e^{ε/L}), i.e. q = (1 − e^{−ε/L}) / θ. The
paper's Table 1 (ε = 2, L = 10) lists θ and γ = m/√n truncated to two decimals; `tests/queries/
test_heavy_hitters.py` reproduces it.

One device holding w > 1 strings is a group of w "users" of the paper's analysis; by group privacy
(Dwork & Roth, Thm 2.2 for (ε, δ)) a mechanism that is (ε', δ')-DP per string is
(w·ε', w·e^{(w−1)ε'}·δ')-DP per device, so `calibrate_triehh` calibrates for ε' = ε/w and
δ' = δ / (w·e^{(w−1)ε'}) to keep the per-device guarantee at (ε, δ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_THETA = 4
"""Theorem 1 needs θ ≥ 4 (δ's formula has θ − 3 in the denominator)."""
MAX_CALIBRATED_THETA = 100_000
"""Largest θ a calibration may need: Theorem 1 needs θ ≤ √n, and no population exceeds 10^10 devices. A larger ε per
round (θ ≥ e^{ε/L} − 1) is refused naming `epsilon` — θ! of a larger θ would take the checker minutes."""
EXACT_DELTA_THETA = 200
"""Above this θ, δ = (θ − 2)/((θ − 3)·θ!) < 10^-370 is 0 as a float: `triehh_delta` returns 0.0 without the factorial."""


class CalibrationError(ValueError):
    """TrieHH parameters outside the theorem's conditions; the message names the parameter."""


@dataclass(frozen=True)
class TrieHHCalibration:
    """θ and the sampling rate for a target guarantee, plus what they imply for a population of n."""

    theta: int
    sample_rate: float
    """q = m/n: each device takes part in a round with this probability."""
    rounds: int
    epsilon: float
    """Per-device ε achieved (after group privacy over max_words_per_device)."""
    delta: float
    """Per-device δ achieved."""
    max_words_per_device: int = 1
    population_size: int | None = None

    @property
    def expected_sample(self) -> float | None:
        """m = q·n, the expected number of devices per round."""
        return None if self.population_size is None else self.sample_rate * self.population_size

    @property
    def gamma(self) -> float | None:
        """The paper's γ = m/√n (the column of its Table 1)."""
        if self.population_size is None:
            return None
        return self.sample_rate * self.population_size / math.sqrt(self.population_size)


def triehh_delta(theta: int) -> float:
    """δ of Theorem 1 for threshold θ: (θ − 2) / ((θ − 3)·θ!)."""
    if theta < MIN_THETA:
        raise CalibrationError(f"theta: must be at least {MIN_THETA} for Theorem 1, got {theta}")
    if theta > EXACT_DELTA_THETA:
        return 0.0
    return (theta - 2) / ((theta - 3) * math.factorial(theta))


def triehh_epsilon(theta: int, sample_rate: float, rounds: int) -> float:
    """ε of Theorem 1 for threshold θ, per-device sampling rate q and L rounds: −L·ln(1 − q·θ)."""
    if theta < MIN_THETA:
        raise CalibrationError(f"theta: must be at least {MIN_THETA} for Theorem 1, got {theta}")
    if not 0.0 < sample_rate <= 1.0:
        raise CalibrationError(f"sample_rate: must be in (0, 1], got {sample_rate}")
    if sample_rate > 1.0 / (theta + 1):
        raise CalibrationError(
            f"sample_rate: Theorem 1 needs sample_rate ≤ 1/(theta+1) = {1.0 / (theta + 1):.6g}, got {sample_rate:.6g}"
        )
    if rounds < 1:
        raise CalibrationError(f"rounds: must be at least 1, got {rounds}")
    return -rounds * math.log1p(-sample_rate * theta)


def triehh_theta(delta: float, epsilon: float, rounds: int) -> int:
    """Smallest θ ≥ 4 with ((θ − 3)/(θ − 2))·θ! ≥ 1/δ and θ ≥ e^{ε/L} − 1 (Corollary 1)."""
    if not 0.0 < delta < 1.0:
        raise CalibrationError(f"delta: must be in (0, 1), got {delta}")
    theta = MIN_THETA
    # Compare in log space so that tiny δ (1e-300) does not overflow the factorial's float.
    log_inv_delta = -math.log(delta)
    while math.log((theta - 3) / (theta - 2)) + math.lgamma(theta + 1) < log_inv_delta:
        theta += 1
    return max(theta, math.ceil(math.expm1(epsilon / rounds)))


def calibrate_triehh(
    epsilon: float,
    delta: float,
    rounds: int,
    population_size: int | None = None,
    max_words_per_device: int = 1,
) -> TrieHHCalibration:
    """θ and sampling rate so that TrieHH over `rounds` rounds is (ε, δ)-DP per device.

    With `population_size` given, also checks the theorem's conditions that involve n (θ ≤ √n) and
    that a round's expected sample m = q·n reaches θ, so something can be released at all.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise CalibrationError(f"epsilon: must be a positive finite number, got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise CalibrationError(f"delta: must be in (0, 1), got {delta}")
    if rounds < 1:
        raise CalibrationError(f"rounds: must be at least 1, got {rounds}")
    w = max_words_per_device
    if w < 1:
        raise CalibrationError(f"max_words_per_device: must be at least 1, got {w}")
    eps_word = epsilon / w
    delta_word = delta / (w * math.exp((w - 1) * eps_word))
    theta = triehh_theta(delta_word, eps_word, rounds)
    if theta > MAX_CALIBRATED_THETA:
        raise CalibrationError(
            f"epsilon: {epsilon:g} over {rounds} rounds needs theta ≥ e^(epsilon/rounds) − 1 = {theta:.3g}, more than "
            f"√n for any population (theta ≤ {MAX_CALIBRATED_THETA:,}); lower epsilon or raise max_length"
        )
    q = -math.expm1(-eps_word / rounds) / theta
    achieved_word = triehh_epsilon(theta, q, rounds)
    cal = TrieHHCalibration(
        theta=theta,
        sample_rate=q,
        rounds=rounds,
        epsilon=w * achieved_word,
        delta=w * math.exp((w - 1) * achieved_word) * triehh_delta(theta),
        max_words_per_device=w,
        population_size=population_size,
    )
    if population_size is not None:
        check_population(cal, population_size)
    return cal


def check_population(cal: TrieHHCalibration, population_size: int) -> None:
    """Theorem 1's n-dependent condition θ ≤ √n, and m = q·n ≥ θ (else no extension can ever pass)."""
    n = population_size
    if n < 1:
        raise CalibrationError(f"population_size: must be at least 1, got {n}")
    if cal.theta > math.sqrt(n):
        raise CalibrationError(
            f"population_size: Theorem 1 needs theta ≤ √n, but theta={cal.theta} and √n={math.sqrt(n):.1f};"
            " a larger population, a larger delta or fewer words per device are needed"
        )
    m = cal.sample_rate * n
    if m < cal.theta:
        raise CalibrationError(
            f"population_size: a round samples m = {m:.1f} devices on average, fewer than theta={cal.theta};"
            " nothing could be released — use a larger population, epsilon or delta"
        )


def privacy_of_explicit(theta: int, sample_rate: float, rounds: int, max_words_per_device: int = 1) -> tuple[float, float] | None:
    """(ε, δ) per device for hand-set θ and rate, or None when outside Theorem 1's conditions or when group privacy
    over the device's words leaves no guarantee (δ_w = w·e^{(w−1)ε}·δ ≥ 1, computed in log space: e^{(w−1)ε}
    overflows a float for (w − 1)·ε > 709)."""
    try:
        eps = triehh_epsilon(theta, sample_rate, rounds)
        delta = triehh_delta(theta)
    except CalibrationError:
        return None
    w = max_words_per_device
    if delta == 0.0:
        return w * eps, 0.0
    log_delta_w = math.log(w) + (w - 1) * eps + math.log(delta)
    if log_delta_w >= 0.0:
        return None
    growth = (w - 1) * eps
    return w * eps, (w * math.exp(growth) * delta if growth < 700 else math.exp(log_delta_w))
