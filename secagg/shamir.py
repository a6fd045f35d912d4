"""Shamir secret sharing of 256-bit secrets over the prime field GF(2^256 + 297).

Shares are evaluated at the receivers' party ids (1..n), so x-coordinates are small integers and the
Lagrange coefficients at 0 are computed from exact small-integer products with one modular inverse per set.
Splitting evaluates the polynomial at every holder: O(k·t) steps, the largest part of a device's work in a cohort at
the safety floor (k ≈ 800, t ≈ 600 at n = 1,000). With FLINT installed (python-flint, in the `device` extra) that is
one multipoint evaluation (O(k log² k)), about seven times faster there; without it, exact-integer Horner. Both give
the same shares.
Reconstruction is batched: secrets whose available share holders are the same set reuse one set of
coefficients (for the complete graph that is every secret of the cohort).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import cast

from secagg.errors import AbortError
from secagg.randomness import OsRandom, RandomSource

try:  # an accelerator: the same shares, faster (the `device` extra installs it)
    import flint
except ImportError:  # pragma: no cover - exercised where python-flint is not installed
    flint = None  # type: ignore[assignment]

PRIME = 2**256 + 297
"""The smallest prime above 2^256 (checked by Miller–Rabin in the tests)."""
SHARE_BYTES = 33
FLINT_MIN_STEPS = 4096
"""Below this many Horner steps (holders × threshold) plain integers are as fast as a call into FLINT."""
_POLYS = flint.fmpz_mod_poly_ctx(PRIME) if flint is not None else None


def split(secret: int, xs: Sequence[int], threshold: int, source: RandomSource | None = None) -> dict[int, int]:
    """Shares of `secret` at each x in `xs`; any `threshold` of them reconstruct it.

    The polynomial's coefficients of degree 1..threshold−1 are `source.randbelow(PRIME)`, in that order.
    """
    if not 0 <= secret < PRIME:
        raise ValueError("secret out of field range")
    source = source or OsRandom()
    coeffs = [secret] + [source.randbelow(PRIME) for _ in range(threshold - 1)]
    if _POLYS is not None and len(xs) * threshold >= FLINT_MIN_STEPS:
        poly = _POLYS(cast("list[int | flint.fmpz | flint.fmpz_mod]", coeffs))
        return dict(zip(xs, map(int, poly.multipoint_evaluate(list(xs)))))
    top = coeffs[::-1]
    shares = {}
    for x in xs:  # Horner's rule in exact integers, reduced once (x is a small party id: the value grows by
        acc = 0  # log2(x) bits a step, cheaper than reducing at each of the `threshold` steps)
        for c in top:
            acc = acc * x + c
        shares[x] = acc % PRIME
    return shares


def lagrange_at_zero(xs: Sequence[int]) -> list[int]:
    """Coefficients λ_i with f(0) = Σ λ_i f(x_i) for distinct nonzero x_i: λ_i = Π_{j≠i} x_j / (x_j − x_i).

    The denominators are exact products of small integers; all of them are inverted with one modular
    inversion (Montgomery's batch-inversion trick) instead of one each."""
    total = math.prod(xs)
    dens = [math.prod([xj - xi for xj in xs if xj != xi]) % PRIME for xi in xs]
    inverses = batch_inverse(dens)
    return [(total // xi) % PRIME * inv % PRIME for xi, inv in zip(xs, inverses)]


def batch_inverse(values: Sequence[int]) -> list[int]:
    """Modular inverses of nonzero field elements with one `pow(·, -1, PRIME)` and 3(n−1) multiplications."""
    prefix = [1] * (len(values) + 1)
    for i, v in enumerate(values):
        prefix[i + 1] = prefix[i] * v % PRIME
    inv = pow(prefix[-1], -1, PRIME)
    out = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        out[i] = prefix[i] * inv % PRIME
        inv = inv * values[i] % PRIME
    return out


class BatchReconstructor:
    """Reconstructs many secrets, caching Lagrange coefficients per set of x-coordinates used."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._coeffs: dict[tuple[int, ...], list[int]] = {}

    def reconstruct(self, shares: Mapping[int, int] | Mapping[int, bytes], what: str, phase: str) -> int:
        """The secret from any `threshold` of `shares` (x → share, as an int or its `to_bytes` encoding: only
        the shares used are converted)."""
        if len(shares) < self.threshold:
            raise AbortError(phase, self.threshold, len(shares), f"too few shares to reconstruct {what}")
        xs = tuple(sorted(shares)[: self.threshold])
        coeffs = self._coeffs.get(xs)
        if coeffs is None:
            coeffs = self._coeffs[xs] = lagrange_at_zero(xs)
        raw = [shares[x] for x in xs]
        values = [from_bytes(v) if isinstance(v, bytes) else v for v in raw]
        return sum(c * y for c, y in zip(coeffs, values)) % PRIME


def to_bytes(value: int) -> bytes:
    return value.to_bytes(SHARE_BYTES, "big")


def from_bytes(data: bytes) -> int:
    return int.from_bytes(data, "big")


def ints_from_secret(secret: bytes) -> int:
    return int.from_bytes(secret, "big")


def secret_from_int(value: int, length: int = 32) -> bytes:
    if value >= 1 << (8 * length):
        raise ValueError("reconstructed value does not fit the secret length")
    return value.to_bytes(length, "big")
