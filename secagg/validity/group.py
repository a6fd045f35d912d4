"""The prime-order group of the validity proofs: the Ed25519 subgroup of order ℓ, through libsodium.

Every curve operation is a libsodium call (PyNaCl's `nacl.bindings`); nothing here does curve arithmetic by
hand. Points are 32-byte canonical compressed encodings; scalars are Python integers modulo ℓ (exact
integer arithmetic, the same results as `crypto_core_ed25519_scalar_*`), passed to libsodium as 32 bytes
little-endian.

Generators: the blinding generator is Ed25519's standard base point B (libsodium multiplies it from a
precomputed table, five times faster than another point); the value generators G_i (one per vector entry)
are hashed to the group with `crypto_core_ed25519_from_uniform` (Elligator 2 with the cofactor cleared) from
SHA-512(GENERATOR_DOMAIN ‖ "G" ‖ i as 8 bytes big-endian), first 32 bytes, and so are the bit-vector proof's
g_k, h_k ("g", "h") and its polynomial generator ("t"). Nobody knows a discrete-log relation among them, which
is what makes the commitments binding.

`decode_point` checks every point received from outside with `crypto_core_ed25519_is_valid_point`
(canonical, on the curve, in the prime-order subgroup, not of small order) and `decode_scalar` refuses
non-canonical scalars (≥ ℓ), so no proof has two encodings.
"""

from __future__ import annotations

import functools
import hashlib

from nacl import bindings as _na
from nacl.exceptions import RuntimeError as _NaclError

from secagg.randomness import RandomSource

ORDER = 2**252 + 27742317777372353535851937790883648493
"""ℓ, the order of the prime-order subgroup."""
POINT_BYTES = 32
SCALAR_BYTES = 32
GENERATOR_DOMAIN = b"fa-validity/v1/generator/"
IDENTITY = bytes([1]) + bytes(31)
"""The encoding of the neutral element (libsodium's add/sub produce and accept it; it is never a valid
point to receive)."""


class GroupError(ValueError):
    """A point or scalar that is not a valid encoding."""


def scalar_bytes(x: int) -> bytes:
    return (x % ORDER).to_bytes(SCALAR_BYTES, "little")


def decode_scalar(data: bytes, what: str) -> int:
    value = int.from_bytes(data, "little")
    if len(data) != SCALAR_BYTES or value >= ORDER:
        raise GroupError(f"{what}: not a canonical scalar")
    return value


def decode_point(data: bytes, what: str) -> bytes:
    """A received point, checked to be a canonical element of the prime-order subgroup (not the identity)."""
    if len(data) != POINT_BYTES or not _na.crypto_core_ed25519_is_valid_point(bytes(data)):
        raise GroupError(f"{what}: not a point of the prime-order subgroup")
    return bytes(data)


def hash_to_scalar(data: bytes) -> int:
    """SHA-512 of `data` reduced modulo ℓ (bias below 2^-259)."""
    return int.from_bytes(hashlib.sha512(data).digest(), "little") % ORDER


def add(p: bytes, q: bytes) -> bytes:
    return _na.crypto_core_ed25519_add(p, q)


def sub(p: bytes, q: bytes) -> bytes:
    return _na.crypto_core_ed25519_sub(p, q)


def mul(x: int, p: bytes) -> bytes:
    """x·P; the identity when x ≡ 0 (libsodium refuses to return it, so it is handled here)."""
    x %= ORDER
    if x == 0 or p == IDENTITY:
        return IDENTITY
    if x == 1:
        return p
    try:
        return _na.crypto_scalarmult_ed25519_noclamp(scalar_bytes(x), p)
    except _NaclError:  # only when x·P is the identity, i.e. ℓ | x for a point of order ℓ
        return IDENTITY


def mul_base(x: int) -> bytes:
    """x·B from libsodium's precomputed table of the base point."""
    x %= ORDER
    if x == 0:
        return IDENTITY
    return _na.crypto_scalarmult_ed25519_base_noclamp(scalar_bytes(x))


def neg(p: bytes) -> bytes:
    return sub(IDENTITY, p)


def total(points: list[bytes]) -> bytes:
    """The sum of `points` (the identity for none)."""
    acc = IDENTITY
    for p in points:
        acc = p if acc == IDENTITY else add(acc, p)
    return acc


@functools.lru_cache(maxsize=None)
def _generator(index: int) -> bytes:
    seed = hashlib.sha512(GENERATOR_DOMAIN + b"G" + index.to_bytes(8, "big")).digest()[:32]
    return _na.crypto_core_ed25519_from_uniform(seed)


def generator(index: int) -> bytes:
    """G_index, the value generator of vector entry `index`."""
    if index < 0:
        raise ValueError(f"generator index must be ≥ 0, got {index}")
    return _generator(index)


def generators(count: int) -> list[bytes]:
    return [_generator(i) for i in range(count)]


def _hashed(label: bytes) -> bytes:
    return _na.crypto_core_ed25519_from_uniform(hashlib.sha512(GENERATOR_DOMAIN + label).digest()[:32])


@functools.lru_cache(maxsize=None)
def _bit_generator(label: bytes, index: int) -> bytes:
    return _hashed(label + index.to_bytes(8, "big"))


def bit_generators(count: int) -> tuple[list[bytes], list[bytes]]:
    """(g_0…g_(count−1), h_0…h_(count−1)): the generators of a bit-vector proof's bits and their complements,
    SHA-512(domain ‖ "g" or "h" ‖ k as 8 bytes big-endian), first 32 bytes, through `from_uniform`."""
    return [_bit_generator(b"g", k) for k in range(count)], [_bit_generator(b"h", k) for k in range(count)]


@functools.lru_cache(maxsize=None)
def inner_product_generator() -> bytes:
    """The generator the bit-vector proof commits its polynomial's coefficients under (SHA-512(domain ‖ "t"))."""
    return _hashed(b"t")


def random_scalar(source: RandomSource) -> int:
    """A uniform scalar in [1, ℓ) from the injected randomness source."""
    return 1 + source.randbelow(ORDER - 1)
