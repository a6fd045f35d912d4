"""The safety floor a device computes for itself: the least neighbourhood degree and share threshold that keep its
masks safe in a cohort of n, whatever the server chose.

Model (docs/secagg.md, "The safety floor"). A cohort of n parties, at most ⌊γ·n⌋ of them corrupt (colluding with the
server — the server's own invented identities count), in the active model (the consistency round: a party unmasks
only for a survivor set that t of its closed neighbourhood of m = k + 1 signed). Bell, Bonawitz, Gascón, Lepoint and
Raykova ("Secure Single-Server Aggregation with (Poly)Logarithmic Overhead", CCS 2020) give what the graph and the
threshold must satisfy for an honest party v:

- *security*: the server can gather t shares of both of v's secrets only by showing part of v's neighbourhood one
  survivor set and the rest another; each needs t signers, honest parties sign one set, so it takes
  C_v ≥ 2t − m corrupt neighbours (C_v < t follows, since t ≤ m). Required: C_v < 2t − m for every honest v;
- *connectivity*: the honest parties that survive stay connected, so the server learns one sum, not sums of parts.
  On the ring graph (`secagg.graph`) that fails only where k/2 ring-consecutive parties are all corrupt or dropped.

On the complete graph C_v ≤ ⌊γ·n⌋ for sure: t ≥ ⌊(m + ⌊γ·n⌋)/2⌋ + 1 is exact. On the sparse graph, with the ring order
drawn from a seed the server cannot steer (`secagg.graph`), v's k neighbours are a uniform sample without replacement
of the n − 1 others, so C_v is hypergeometric; its tail is bounded by the Chernoff–Hoeffding bound
P[X ≥ a·k] ≤ exp(−k·D(a ‖ p)) (Hoeffding, "Probability Inequalities for Sums of Bounded Random Variables", JASA 1963,
Theorem 1 and §6 for sampling without replacement), and a run of k/2 bad parties by (γ + δ)^(k/2); a union bound over
the n parties (and the n ring positions) must stay under 2^−(σ + g): σ the stated failure exponent (40), g the
grinding allowance — a server that tries 2^g graphs (`secagg.graph.members_root`: each try is a new member set or key
list, within phase 0) still succeeds with probability at most 2^−σ.

The floor is on security and connectivity only; whether a threshold also survives the cohort's dropouts (correctness)
is the server's concern (`plan`): a round that cannot finish aborts and reveals nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from secagg.errors import ConfigError

DEFAULT_CORRUPT_FRACTION = 1 / 3
DEFAULT_DROPOUT_FRACTION = 0.15
"""The share of a cohort that may drop out (the server's default `cohort.dropout_allowance`)."""
SECURITY_BITS = 40
GRINDING_BITS = 40
CORRECTNESS_BITS = 20
"""The server plans its threshold so that a cohort aborts for lack of survivors with probability ≤ 2^−20 when
parties drop independently at its dropout allowance."""


class UnsafeParametersError(ConfigError):
    """A cohort's threat model, graph, degree or threshold is below the floor this party computed for itself."""


@dataclass(frozen=True)
class Assumptions:
    """What a device assumes about its cohort: γ (corrupt fraction, the server's own identities counted), δ (the
    fraction that may drop out), σ (failure exponent) and g (grinding allowance)."""

    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION
    dropout_fraction: float = DEFAULT_DROPOUT_FRACTION
    security_bits: int = SECURITY_BITS
    grinding_bits: int = GRINDING_BITS

    def __post_init__(self) -> None:
        for name in ("corrupt_fraction", "dropout_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1 or value != value:
                raise ConfigError(f"{name}: must be a number in [0, 1), got {value!r}")
        if self.corrupt_fraction + self.dropout_fraction >= 1:
            raise ConfigError("corrupt_fraction + dropout_fraction: must be below 1")
        for name in ("security_bits", "grinding_bits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 256:
                raise ConfigError(f"{name}: must be an integer in [0, 256], got {value!r}")
        if self.security_bits < 1:
            raise ConfigError("security_bits: must be at least 1")

    @property
    def bits(self) -> int:
        return self.security_bits + self.grinding_bits


@dataclass(frozen=True)
class Floor:
    """The least degree (n − 1: the complete graph) and the least share threshold at that degree."""

    n: int
    degree: int
    threshold: int

    @property
    def complete(self) -> bool:
        return self.degree >= self.n - 1


def _kl(a: float, p: float) -> float:
    """D(a ‖ p) in nats for Bernoulli parameters, a > p."""
    if p <= 0:
        return math.inf
    if a >= 1:
        return -math.log(p)
    return a * math.log(a / p) + (1 - a) * math.log((1 - a) / (1 - p))


def log2_tail(k: int, s: int, p: float) -> float:
    """log2 of the Chernoff–Hoeffding bound on P[X ≥ s], X a sum of k draws (with or without replacement) of mean p:
    0 (bound 1) when s ≤ p·k, −inf when s > k."""
    if s > k:
        return -math.inf
    if s <= p * k:
        return 0.0
    return -k * _kl(s / k, p) / math.log(2)


def corrupt_count(n: int, a: Assumptions) -> int:
    return math.floor(a.corrupt_fraction * n + 1e-9)


def _checked(n: int, degree: int | None = None) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ConfigError(f"n: must be an integer ≥ 2, got {n!r}")
    if degree is not None and (isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= n - 1):
        raise ConfigError(f"degree: must be an integer in [1, n − 1], got {degree!r}")


@lru_cache(maxsize=4096)
def threshold_floor(n: int, degree: int, a: Assumptions = Assumptions()) -> int | None:
    """The least share threshold t per closed neighbourhood (m = degree + 1) with which no honest party has
    2t − m corrupt neighbours (complete graph: for sure; sparse: with probability ≥ 1 − 2^−(σ+g)); None when no
    t ≤ m is safe."""
    _checked(n, degree)
    m = degree + 1
    corrupt = corrupt_count(n, a)
    if degree >= n - 1:
        t = (m + corrupt) // 2 + 1
        return t if t <= m else None
    p = min(1.0, corrupt / (n - 1))
    budget = -a.bits - math.log2(n)
    lo, hi = m // 2 + 1, m  # t = m is always safe on a sparse graph: 2t − m = k + 1 > k
    while lo < hi:
        mid = (lo + hi) // 2
        if log2_tail(degree, 2 * mid - m, p) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo


def connected(n: int, degree: int, a: Assumptions = Assumptions()) -> bool:
    """Whether the honest survivors of a ring graph of this degree stay connected with probability ≥ 1 − 2^−(σ+g):
    no run of degree/2 ring-consecutive parties that are all corrupt or dropped (union over the n positions)."""
    _checked(n, degree)
    if degree >= n - 1:
        return True
    bad = a.corrupt_fraction + a.dropout_fraction
    return math.log2(n) + (degree // 2) * math.log2(bad) <= -a.bits if bad > 0 else True


@lru_cache(maxsize=4096)
def safety_floor(n: int, a: Assumptions = Assumptions()) -> Floor:
    """The least even degree whose ring graph is `connected` (else the complete graph, n − 1) and the least
    threshold at that degree."""
    _checked(n)
    bad = a.corrupt_fraction + a.dropout_fraction
    degree = n - 1
    if bad > 0:
        half = math.ceil((a.bits + math.log2(n)) / -math.log2(bad))
        if 2 * half < n - 1:
            degree = max(2, 2 * half)
    else:
        degree = min(2, n - 1)
    t = threshold_floor(n, degree, a)
    assert t is not None, "the floor's own degree has a safe threshold"
    return Floor(n, degree, t)


def check(n: int, degree: int, threshold: int, a: Assumptions = Assumptions(), *, untrusted: int = 0) -> Floor:
    """Refuse (`UnsafeParametersError`, naming what is short) a cohort below the floor; returns the floor.

    `untrusted`: neighbours this party knows are not vouched for (no valid issuer token when it pins issuer keys):
    they are certainly corrupt, so they alone must stay below 2t − m, and on the complete graph they count as the
    corrupt parties when there are more of them than ⌊γ·n⌋."""
    _checked(n, degree)
    floor = safety_floor(n, a)
    complete = degree >= n - 1
    if not complete and degree < floor.degree:
        raise UnsafeParametersError(
            f"degree: {degree} neighbours in a cohort of {n}, below this device's floor of {floor.degree} "
            f"(γ={a.corrupt_fraction:.3g}, dropout {a.dropout_fraction:.3g}, 2^-{a.security_bits} with "
            f"{a.grinding_bits} bits of grinding)")
    m = degree + 1
    least = threshold_floor(n, degree, a)
    if complete and untrusted > corrupt_count(n, a):
        least = (m + untrusted) // 2 + 1
    if least is None or least > m:
        raise UnsafeParametersError(f"threshold: no threshold is safe for a neighbourhood of {m} in a cohort of {n}")
    if threshold < least:
        raise UnsafeParametersError(
            f"threshold: {threshold} of a neighbourhood of {m} (cohort of {n}), below this device's floor of {least}: "
            f"a server with {2 * threshold - m} corrupt neighbours could show two survivor sets")
    if untrusted >= 2 * threshold - m:
        raise UnsafeParametersError(
            f"threshold: {untrusted} neighbours hold no valid issuer token, at least 2t − m = {2 * threshold - m}: "
            "they alone could sign two survivor sets")
    return floor


def live_threshold(n: int, degree: int, dropout: float, bits: int = CORRECTNESS_BITS) -> int:
    """The largest threshold every neighbourhood still reaches when parties drop independently at `dropout`, with
    probability ≥ 1 − 2^−bits (the complete graph: the survivors of ⌈dropout·n⌉ drops)."""
    _checked(n, degree)
    m = degree + 1
    if degree >= n - 1:
        return n - math.ceil(dropout * n - 1e-9)
    budget = -bits - math.log2(n)
    t = m
    while t > 1 and log2_tail(degree, m - t + 1, dropout) > budget:
        t -= 1
    return t


@lru_cache(maxsize=1024)
def plan(n: int, dropout: float = DEFAULT_DROPOUT_FRACTION, a: Assumptions = Assumptions(),
         correctness_bits: int = CORRECTNESS_BITS) -> Floor:
    """The server's choice: the least even degree at or above the device floor whose safe threshold the cohort still
    reaches at `dropout` (else the complete graph), with that safe threshold."""
    floor = safety_floor(n, a)
    for degree in range(floor.degree, n - 1, 2):
        t = threshold_floor(n, degree, a)
        if t is not None and t <= live_threshold(n, degree, dropout, correctness_bits):
            return Floor(n, degree, t)
    t = threshold_floor(n, n - 1, a)
    if t is None:
        raise ConfigError(f"no safe threshold for a complete cohort of {n} at γ={a.corrupt_fraction:.3g}")
    return Floor(n, n - 1, t)


__all__ = ["Assumptions", "Floor", "UnsafeParametersError", "check", "connected", "live_threshold", "plan",
           "safety_floor", "threshold_floor"]
