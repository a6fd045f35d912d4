"""Calibration: a query's (ε, δ, rounds, t_min, sampling) → a noise multiplier z, and per round the noise
(σ or μ) whose Rényi-DP curve is at most that of the Gaussian with multiplier z.

`calibrate_query` finds the smallest z (bisection, relative precision 1e-9) such that `rounds` times the
per-round reference curve `rdp.reference_curve(z, q)` is (ε, δ)-DP with dp_accounting's RDP→(ε, δ)
conversion on the integer orders of `queries.dp.rdp.ORDERS`. Without sampling the reference is the
Gaussian mechanism with multiplier z, computed by dp_accounting (GaussianDpEvent); with Poisson sampling
rate q < 1 it is the Zhu–Wang subsampling bound of that Gaussian curve (valid for any mechanism whose
own curve is below α/(2z²), unlike the tight subsampled-Gaussian curve).

`round_noise` then finds, for the round's own sensitivities (Δ1, Δ2), the smallest total noise such that
the round's own RDP bound (distributed discrete Gaussian: Kairouz–Liu–Steinke Prop. 14 for the sum of
t_min shares, including the τ slack; Skellam: Agarwal–Kairouz–Liu) is ≤ α/(2z²) at every integer order
2…1024 — hence its (subsampled) curve is ≤ the reference curve. RDP composes by addition, so any
sequence of rounds with different sensitivities stays within the calibrated (ε, δ). The discrete
mechanisms' extra cost shows as a total noise slightly above z·Δ2 (`RoundNoise.inflation`), never as an
unreported ε. More than t_min contributors only add independent noise: by post-processing the
divergence cannot grow, so the bound for t_min holds for any larger sum.

Round weights. Without sampling the reference curve α/(2z²) is linear in 1/z², so a round may spend a
`weight` w of "unit rounds": its target is w·α/(2z²), i.e. the Gaussian with multiplier z/√w. A query whose
rounds' weights sum to at most `rounds` stays within the calibrated (ε, δ) — this is how a kind gives a cheap
first step (e.g. choosing a contribution bound) a small share of the budget and the main rounds the rest.
Weights other than 1 need sample_rate 1 (the subsampled curve is not linear in 1/z²).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from queries.dp import rdp
from queries.dp.errors import PrivacyError
from queries.dp.noise import MECHANISMS, NOISY_MECHANISMS, per_device_std

MAX_NOISE_MULTIPLIER = 1e6
MIN_DEVICE_SIGMA = 0.5
"""Kairouz–Liu–Steinke's bound assumes every share has σ_dev ≥ 1/2."""


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value) or value <= 0:
        raise PrivacyError(f"{name}: must be a positive finite number, got {value!r}")
    return float(value)


def _count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise PrivacyError(f"{name}: must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


def _mechanism(mechanism: Any, allow_none: bool = False) -> str:
    allowed = MECHANISMS if allow_none else NOISY_MECHANISMS
    if mechanism not in allowed:
        if mechanism == "none":
            raise PrivacyError("privacy.mechanism: 'none' adds no noise, so there is nothing to calibrate")
        raise PrivacyError(f"privacy.mechanism: must be one of {', '.join(allowed)}, got {mechanism!r}")
    return str(mechanism)


@dataclass(frozen=True)
class QueryCalibration:
    """The per-query result of calibration; stored with the query so every round's noise is reproducible."""

    mechanism: str
    epsilon: float
    delta: float
    rounds: int
    t_min: int
    sample_rate: float
    noise_multiplier: float

    def round_curve(self) -> np.ndarray:
        """RDP curve (on `rdp.ORDERS`) that bounds every round of this query."""
        return rdp.reference_curve(self.noise_multiplier, self.sample_rate)

    def rdp_curve(self, rounds: float | None = None) -> np.ndarray:
        """RDP curve of `rounds` unit rounds (default: all calibrated rounds), for ledgers that compose RDP."""
        return (self.rounds if rounds is None else rounds) * self.round_curve()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> QueryCalibration:
        """The calibration `to_dict` stored; PrivacyError naming the field when missing or malformed."""
        if not isinstance(data, dict):
            raise PrivacyError(f"calibration: must be an object, got {type(data).__name__}")
        try:
            cal = cls(**{f.name: data[f.name] for f in fields(cls)})
        except KeyError as exc:
            raise PrivacyError(f"calibration.{exc.args[0]}: missing") from None
        _mechanism(cal.mechanism)
        for name in ("epsilon", "delta", "sample_rate", "noise_multiplier"):
            _positive(f"calibration.{name}", getattr(cal, name))
        _count("calibration.rounds", cal.rounds)
        _count("calibration.t_min", cal.t_min)
        return cal


def _epsilon_for(z: float, rounds: int, sample_rate: float, delta: float) -> float:
    return rdp.epsilon_of_curve(rounds * rdp.reference_curve(z, sample_rate), delta)


def calibrate_query(
    mechanism: str, epsilon: float, delta: float, rounds: int, t_min: int, sample_rate: float = 1.0
) -> QueryCalibration:
    """Smallest noise multiplier z with `rounds` rounds of Gaussian(z) (sampled at `sample_rate`) ≤ (ε, δ)."""
    mechanism = _mechanism(mechanism)
    epsilon = _positive("privacy.epsilon", epsilon)
    delta = _positive("privacy.delta", delta)
    if delta >= 1:
        raise PrivacyError(f"privacy.delta: must be below 1, got {delta!r}")
    rounds = _count("rounds", rounds)
    t_min = _count("t_min (cohort.min_clients)", t_min)
    sample_rate = _positive("sample_rate", sample_rate)
    if sample_rate > 1:
        raise PrivacyError(f"sample_rate: must be in (0, 1], got {sample_rate!r}")

    lo, hi = 1e-2, 1.0
    while _epsilon_for(hi, rounds, sample_rate, delta) > epsilon:
        lo, hi = hi, hi * 2
        if hi > MAX_NOISE_MULTIPLIER:
            raise PrivacyError(
                f"privacy.epsilon: {epsilon:g} over {rounds} rounds at delta={delta:g} needs a noise multiplier above "
                f"{MAX_NOISE_MULTIPLIER:g}; raise epsilon or delta, or use fewer rounds"
            )
    while lo > 1e-6 and _epsilon_for(lo, rounds, sample_rate, delta) <= epsilon:
        lo, hi = lo / 2, lo
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if _epsilon_for(mid, rounds, sample_rate, delta) > epsilon:
            lo = mid
        else:
            hi = mid
    return QueryCalibration(mechanism, epsilon, delta, rounds, t_min, sample_rate, hi)


@dataclass(frozen=True)
class RoundNoise:
    """The noise of one round: totals at t_min contributors and what each device adds."""

    mechanism: str
    total_scale: float
    """σ (discrete Gaussian) or μ = variance (Skellam) of the noise in a sum over t_min devices."""
    per_device_scale: float
    """What `sample_noise` takes: σ/√t_min or μ/t_min."""
    per_device_std: float
    """Standard deviation of one device's share (exact; below σ/√t_min for small discrete-Gaussian σ)."""
    l1: float
    l2: float
    t_min: int
    noise_multiplier: float
    inflation: float
    """Noise std at t_min over the Gaussian reference's z·Δ2 (≥ 1; the discrete mechanisms' overhead)."""
    weight: float = 1.0
    """Unit rounds of the query's budget this round spends (its reference multiplier is z/√weight)."""

    def std(self, contributors: int) -> float:
        """Standard deviation of the summed noise over `contributors` devices."""
        return self.per_device_std * math.sqrt(max(int(contributors), 0))

    def task_block(self) -> dict[str, Any]:
        """The `noise` block of a device task: mechanism, per-device scale and std."""
        return {"mechanism": self.mechanism, "scale": self.per_device_scale, "std": self.per_device_std}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundNoise:
        optional = {"weight"}  # stored before round weights existed: 1
        try:
            noise = cls(**{f.name: data[f.name] for f in fields(cls) if f.name not in optional or f.name in data})
        except KeyError as exc:
            raise PrivacyError(f"noise.{exc.args[0]}: missing") from None
        _mechanism(noise.mechanism)
        return noise


def _smallest_passing(passes: Any, lo: float, hi: float) -> float:
    """Smallest x in [lo, ∞) with passes(x) (monotone), to relative precision 1e-7."""
    if passes(lo):
        return lo
    while not passes(hi):
        lo, hi = hi, hi * 2
        if hi > 1e30:
            raise PrivacyError("noise: no finite noise level meets the Gaussian reference (report this)")
    while hi - lo > 1e-7 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi


def check_weight(cal: QueryCalibration, weight: float) -> float:
    """A round's weight: positive, at most the calibrated rounds, and exactly 1 under sampling."""
    weight = _positive("privacy_weight", weight)
    if weight > cal.rounds * (1 + 1e-9):
        raise PrivacyError(f"privacy_weight: {weight:g} exceeds the {cal.rounds} rounds the query was calibrated for")
    if weight != 1.0 and cal.sample_rate < 1.0:
        raise PrivacyError("privacy_weight: rounds of a sampled query must all have weight 1")
    return weight


def round_noise(cal: QueryCalibration, l1: float, l2: float, dim: int | None = None, weight: float = 1.0) -> RoundNoise:
    """Noise for a round with L1/L2 sensitivities (l1, l2) whose RDP is ≤ `weight` × the calibrated
    Gaussian's (the Gaussian with multiplier z/√weight).

    `dim` (optional) caps the number of coordinates a contribution touches in the discrete-Gaussian
    bound; without it ⌊l1⌋ is used, which is always valid for integer contributions.
    """
    l1 = _positive("l1_sensitivity", l1)
    l2 = _positive("l2_sensitivity", l2)
    if l2 > l1 * (1 + 1e-9):
        raise PrivacyError(f"l2_sensitivity: {l2:g} exceeds l1_sensitivity {l1:g}, impossible for integer vectors")
    if dim is not None:
        dim = _count("dim", dim)
    weight = check_weight(cal, weight)
    z, t = cal.noise_multiplier / math.sqrt(weight), cal.t_min
    orders = rdp.all_integer_orders()
    target = orders / (2.0 * z * z) * (1 + 1e-12)
    gauss_sigma = z * l2

    if cal.mechanism == "discrete_gaussian":
        def curve(sigma: float) -> np.ndarray:
            return rdp.ddg_rdp(orders, l1, l2, sigma / math.sqrt(t), t, dim)

        lo = max(0.5 * gauss_sigma, MIN_DEVICE_SIGMA * math.sqrt(t))
        sigma = _smallest_passing(lambda s: bool(np.all(curve(s) <= target)), lo, 1.01 * max(lo, gauss_sigma))
        dev_scale = sigma / math.sqrt(t)
        total_std = per_device_std("discrete_gaussian", dev_scale) * math.sqrt(t)
        total = sigma
    else:
        def curve_mu(mu: float) -> np.ndarray:
            return rdp.skellam_rdp(orders, l1, l2, mu)

        lo = 0.25 * gauss_sigma**2
        total = _smallest_passing(lambda m: bool(np.all(curve_mu(m) <= target)), lo, 1.02 * gauss_sigma**2)
        dev_scale = total / t
        total_std = math.sqrt(total)
    return RoundNoise(
        mechanism=cal.mechanism,
        total_scale=total,
        per_device_scale=dev_scale,
        per_device_std=per_device_std(cal.mechanism, dev_scale),
        l1=l1,
        l2=l2,
        t_min=t,
        noise_multiplier=z,
        inflation=total_std / gauss_sigma,
        weight=weight,
    )


def epsilon_spent(cal: QueryCalibration, rounds_run: float, delta: float | None = None) -> float:
    """ε (at δ, default the query's) of the rounds that actually ran, via dp_accounting's RDP accountant.
    `rounds_run` counts unit rounds: the sum of the weights of the rounds that ran (an integer under sampling)."""
    if isinstance(rounds_run, bool) or not isinstance(rounds_run, (int, float, np.integer, np.floating)) or not rounds_run >= 0:
        raise PrivacyError(f"rounds_run: must be a number ≥ 0, got {rounds_run!r}")
    if cal.sample_rate < 1.0:
        rounds_run = _count("rounds_run", rounds_run, minimum=0)
    if rounds_run > cal.rounds * (1 + 1e-9):
        raise PrivacyError(f"rounds_run: {rounds_run} exceeds the {cal.rounds} rounds the noise was calibrated for")
    if rounds_run == 0:
        return 0.0
    delta = cal.delta if delta is None else _positive("delta", delta)
    return rdp.epsilon_of_curve(cal.rdp_curve(rounds_run), delta)


def suggest_scale(
    cal: QueryCalibration, l1: float, l2: float, max_inflation: float = 1.02, max_scale: int = 1 << 16, weight: float = 1.0
) -> int:
    """Smallest power-of-two integer factor s such that contributions multiplied by s (sensitivities s·l1,
    s·l2; decode divides by s) need noise at most `max_inflation` × the Gaussian reference's.

    The discrete Gaussian's slack τ is large when each share's σ/√t_min is below ≈ 0.8, which happens for
    large t_min; scaling the integer encoding up moves σ_dev out of that regime at the cost of log2(s) bits.
    Skellam needs no scaling beyond its small-μ terms. Returns max_scale if nothing smaller suffices."""
    s = 1
    while s < max_scale and round_noise(cal, s * l1, s * l2, weight=weight).inflation > max_inflation:
        s *= 2
    return s


def fixed_calibration(
    mechanism: str, epsilon: float, delta: float, noise_multiplier: float, rounds: int, t_min: int,
    sample_rate: float = 1.0,
) -> QueryCalibration:
    """A calibration with the analyst's own noise multiplier z instead of one fitted to `rounds`.

    The query then runs until the accountant says the next round would exceed ε (`rounds_affordable`);
    refused if not even one round fits."""
    mechanism = _mechanism(mechanism)
    z = _positive("privacy.noise_multiplier", noise_multiplier)
    if z > MAX_NOISE_MULTIPLIER:
        raise PrivacyError(f"privacy.noise_multiplier: at most {MAX_NOISE_MULTIPLIER:g}, got {z!r}")
    epsilon = _positive("privacy.epsilon", epsilon)
    delta = _positive("privacy.delta", delta)
    if delta >= 1:
        raise PrivacyError(f"privacy.delta: must be below 1, got {delta!r}")
    cal = QueryCalibration(mechanism, epsilon, delta, _count("rounds", rounds), _count("t_min (cohort.min_clients)", t_min),
                           _positive("sample_rate", sample_rate), z)
    if rounds_affordable(cal) < 1:
        raise PrivacyError(
            f"privacy.noise_multiplier: {z:g} is too small for even one round within epsilon={epsilon:g} at "
            f"delta={delta:g} (one round costs {epsilon_spent(cal, 1):.3g})")
    return cal


def rounds_affordable(cal: QueryCalibration) -> int:
    """Largest k ≤ cal.rounds such that k rounds of this calibration spend at most cal.epsilon."""
    lo, hi = 0, cal.rounds  # epsilon_spent grows with k: bisect for the last k within budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if epsilon_spent(cal, mid) <= cal.epsilon * (1 + 1e-12):
            lo = mid
        else:
            hi = mid - 1
    return lo
