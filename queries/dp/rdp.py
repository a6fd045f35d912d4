"""Rényi-DP curves on one grid of integer orders: the Gaussian reference (dp_accounting) and the bounds
for the distributed discrete Gaussian and the Skellam mechanism, plus general Poisson-subsampling.

All curves are evaluated at the integer orders `ORDERS`; every bound used here is stated for integer
α > 1, and dp_accounting's RDP→(ε, δ) conversion takes the best order of the grid.

- Gaussian reference: dp_accounting's RdpAccountant with GaussianDpEvent(z), or
  PoissonSampledDpEvent(q, GaussianDpEvent(z)) (Mironov, Talwar, Zhang 2019, tight for the Gaussian).
- Distributed discrete Gaussian (Kairouz, Liu, Steinke, ICML 2021, "The Distributed Discrete Gaussian
  Mechanism for Federated Learning with Secure Aggregation", Proposition 14): the sum of n independent
  N_Z(0, σ_dev²) per coordinate, with a = Δ2/(√n σ_dev), b = Δ1/(√n σ_dev),
  τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ_dev²·k/(k+1)) and d coordinates, has RDP at order α at most
      min( α/2·a² + τd,  α/2·(a² + 2bτ + τ²d),  α/2·(a + √d·τ)² ).
  τ is the ε-slack of sums of discrete Gaussians (0 for n = 1, where this is CKS's ½a²-zCDP). d may be
  replaced by the number of coordinates where the contribution can be non-zero: coordinates with Δ_i = 0
  contribute nothing to the divergence of a product distribution, and an integer vector of L1 norm Δ1
  has at most ⌊Δ1⌋ non-zero coordinates — so d = min(dim, ⌊Δ1⌋).
- Skellam (Agarwal, Kairouz, Liu, NeurIPS 2021, "The Skellam Mechanism for Differentially Private
  Federated Learning", Theorem 3.5/Corollary 3.6) with μ the variance per coordinate (Poisson(μ/2) −
  Poisson(μ/2); in terms of the per-Poisson rate λ = μ/2 the same bound reads αΔ2²/(4λ) + …):
      α·Δ2²/(2μ) + min( ((2α − 1)·Δ2² + 6·Δ1)/(4μ²),  3·Δ1/(2μ) ).
- Poisson subsampling of an arbitrary mechanism from its RDP curve at integer orders (Zhu, Wang, ICML
  2019, "Poisson Subsampled Rényi Differential Privacy", Theorem 6, general upper bound):
      ε_q(α) ≤ 1/(α−1) · log( (1−q)^{α−1}(αq − q + 1) + C(α,2) q² (1−q)^{α−2} e^{ε(2)}
                               + 3 Σ_{l=3}^{α} C(α,l) (1−q)^{α−l} q^l e^{(l−1)ε(l)} ).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import dp_accounting
import numpy as np
from dp_accounting import rdp as dp_rdp
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

ORDERS: tuple[int, ...] = tuple(range(2, 65)) + (72, 80, 96, 112, 128, 160, 192, 256, 320, 384, 512, 768, 1024)
"""Integer Rényi orders shared by every curve and by the accountant."""

_ORDERS_ARR = np.array(ORDERS, dtype=np.float64)
_ALL_INTS = np.arange(2, ORDERS[-1] + 1, dtype=np.float64)
"""Every integer order up to the largest one (the subsampling bound needs ε(l) for l = 2..α)."""
_LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, ORDERS[-1] + 1, dtype=np.float64)))])
"""log(k!) for k = 0..max order (scipy is not a runtime dependency)."""


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + math.log(float(np.exp(x - m).sum())) if math.isfinite(m) else m


def gaussian_event(noise_multiplier: float, sample_rate: float = 1.0) -> dp_accounting.DpEvent:
    """dp_accounting's event for one round of the Gaussian reference mechanism."""
    event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sample_rate < 1.0:
        event = dp_accounting.PoissonSampledDpEvent(sample_rate, event)
    return event


def accountant() -> dp_rdp.RdpAccountant:
    """A fresh RDP accountant on the shared order grid (add/remove-one neighbouring relation)."""
    return dp_rdp.RdpAccountant(orders=list(ORDERS))


def event_curve(event: dp_accounting.DpEvent) -> np.ndarray:
    """The RDP curve of a dp_accounting event on `ORDERS`."""
    acc = accountant()
    acc.compose(event)
    rdp: np.ndarray = acc.rdp
    return rdp


def gaussian_curve(noise_multiplier: float, sample_rate: float = 1.0) -> np.ndarray:
    """RDP of one round of the (optionally Poisson-subsampled) Gaussian with multiplier z, via dp_accounting."""
    return event_curve(gaussian_event(noise_multiplier, sample_rate))


def reference_curve(noise_multiplier: float, sample_rate: float = 1.0) -> np.ndarray:
    """Per-round RDP budget of a query with multiplier z: what every round's noise must stay below.

    Without sampling it is the Gaussian's curve α/(2z²), computed by dp_accounting. With Poisson sampling
    (q < 1) it is the Zhu–Wang general bound applied to α/(2z²): a discrete mechanism whose own curve is
    ≤ α/(2z²) at every integer order then has a subsampled curve ≤ this one (the bound is monotone in
    ε(l)), which is what makes the accounting valid for discrete noise. It is looser than dp_accounting's
    tight subsampled-Gaussian curve (which only holds for Gaussian noise), so z comes out larger.
    """
    if sample_rate >= 1.0:
        return gaussian_curve(noise_multiplier)
    return subsampled_curve(lambda o: o / (2.0 * noise_multiplier**2), sample_rate)


def all_integer_orders() -> np.ndarray:
    """2, 3, …, max(ORDERS): where a round's own (unsampled) curve is compared with α/(2z²)."""
    return _ALL_INTS.copy()


def epsilon_of_curve(curve: np.ndarray, delta: float) -> float:
    """(ε at δ) of an RDP curve on `ORDERS`, with dp_accounting's conversion."""
    return float(compute_epsilon(list(ORDERS), list(curve), delta)[0])


def ddg_rdp(orders: np.ndarray, l1: float, l2: float, sigma_dev: float, n: int, dim: int | None) -> np.ndarray:
    """Kairouz–Liu–Steinke Prop. 14 bound for the sum of n N_Z(0, σ_dev²) shares (see module docstring)."""
    a = l2 / (math.sqrt(n) * sigma_dev)
    b = l1 / (math.sqrt(n) * sigma_dev)
    tau = ddg_tau(sigma_dev, n)
    d = float(math.floor(l1 + 1e-9))
    if dim is not None:
        d = min(d, float(dim))
    d = max(d, 1.0)
    t1 = orders / 2 * a * a + tau * d
    t2 = orders / 2 * (a * a + 2 * b * tau + tau * tau * d)
    t3 = orders / 2 * (a + math.sqrt(d) * tau) ** 2
    return np.minimum(np.minimum(t1, t2), t3)


def ddg_tau(sigma_dev: float, n: int) -> float:
    """τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1)) (0 for a single device)."""
    if n <= 1:
        return 0.0
    k = np.arange(1, n, dtype=np.float64)
    variance = sigma_dev * sigma_dev  # inf, not OverflowError, beyond 1e154 (τ is then 0)
    return float(10.0 * np.exp(-2.0 * math.pi**2 * variance * k / (k + 1)).sum())


def skellam_rdp(orders: np.ndarray, l1: float, l2: float, mu: float) -> np.ndarray:
    """Agarwal–Kairouz–Liu bound for Skellam noise of variance μ per coordinate (see module docstring)."""
    lead = orders * l2 * l2 / (2 * mu)
    extra = np.minimum(((2 * orders - 1) * l2 * l2 + 6 * l1) / (4 * mu * mu), 3 * l1 / (2 * mu))
    return lead + extra


def subsampled_curve(curve_fn: Callable[[np.ndarray], np.ndarray], q: float) -> np.ndarray:
    """Zhu–Wang general upper bound for Poisson subsampling with rate q, on `ORDERS` (min with unsampled)."""
    base = curve_fn(_ORDERS_ARR)
    if q >= 1.0:
        return base
    eps_all = curve_fn(_ALL_INTS)  # ε(l) for l = 2..max order
    log_q, log_1q = math.log(q), math.log1p(-q)
    out = np.empty(len(ORDERS))
    for i, alpha in enumerate(ORDERS):
        l = np.arange(3, alpha + 1, dtype=np.float64)
        li = l.astype(np.int64)
        log_comb = _LOG_FACT[alpha] - _LOG_FACT[li] - _LOG_FACT[alpha - li]
        terms = [
            (alpha - 1) * log_1q + math.log(alpha * q - q + 1),
            math.log(alpha * (alpha - 1) / 2) + 2 * log_q + (alpha - 2) * log_1q + eps_all[0],
        ]
        rest = math.log(3) + log_comb + (alpha - l) * log_1q + l * log_q + (l - 1) * eps_all[li - 2]
        total = _logsumexp(np.concatenate([np.array(terms), rest]))
        out[i] = min(total / (alpha - 1), base[i])
    return out
