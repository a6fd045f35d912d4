"""Integers and floats in and out of the ring Z/2^bits, and the wire packing of vectors.

Signed values use two's complement modulo 2^bits. `check_no_wrap` and `bits_for` refuse or size a
modulus so that the sum of n contributions bounded by `max_abs` cannot wrap. Floats go through fixed
point with clipping and unbiased stochastic rounding. `pack`/`unpack` put exactly `bits` bits per
entry on the wire.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from secagg.config import MAX_BITS
from secagg.errors import ConfigError, MessageFormatError
from secagg.randomness import OsRandom, uniforms


def check_no_wrap(n: int, max_abs: int, bits: int, signed: bool = True) -> None:
    """Raise ConfigError unless the sum of n values with |v| ≤ max_abs fits modulo 2^bits."""
    if not 1 <= bits <= MAX_BITS:
        raise ConfigError(f"bits: must be between 1 and {MAX_BITS}, got {bits}")
    limit = 1 << (bits - 1) if signed else 1 << bits
    total = n * max_abs
    if total >= limit:
        raise ConfigError(
            f"bits: sums of {n} values bounded by {max_abs} need {bits_needed(n, max_abs, signed)} bits, "
            f"{bits} given (lower the cohort size or the value bound, or raise bits)"
        )


def bits_needed(n: int, max_abs: int, signed: bool = True) -> int:
    return (n * max_abs).bit_length() + (1 if signed else 0)


def bits_for(n: int, max_abs: int, signed: bool = True) -> int:
    """Smallest bit width whose ring holds the sum of n values bounded by max_abs."""
    bits = max(1, bits_needed(n, max_abs, signed))
    if bits > MAX_BITS:
        raise ConfigError(
            f"bits: {n} contributions bounded by {max_abs} need {bits} bits, more than {MAX_BITS}; "
            "lower the cohort size or the value bound"
        )
    return bits


def to_modular(values: np.ndarray, bits: int) -> np.ndarray:
    """Signed integers (|v| < 2^(bits-1)) → uint64 representatives in [0, 2^bits)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise ConfigError(f"values: must be integers, got dtype {arr.dtype}")
    half = 1 << (bits - 1)
    if arr.size and (int(arr.max()) >= half or int(arr.min()) < -half):
        raise ConfigError(f"values: entries must lie in [-2^{bits - 1}, 2^{bits - 1}) for bits={bits}")
    arr = arr.astype(np.int64, copy=False)
    return arr.view(np.uint64) & np.uint64((1 << bits) - 1)


def from_modular(values: np.ndarray, bits: int) -> np.ndarray:
    """uint64 ring elements → signed int64 (two's complement modulo 2^bits)."""
    arr = np.asarray(values, dtype=np.uint64) & np.uint64((1 << bits) - 1)
    signed = arr.astype(np.int64)
    signed[arr >= np.uint64(1 << (bits - 1))] -= np.int64(1 << bits)
    return signed


class UniformDraws(Protocol):
    """What stochastic rounding needs: uniform floats in [0, 1) of a given shape (a numpy Generator has it)."""

    def random(self, size: Any) -> np.ndarray: ...


class FixedPoint:
    """Floats ↔ integers: clip to [-clip, clip], scale by `scale`, round stochastically (unbiased)."""

    def __init__(self, clip: float, scale: float) -> None:
        if not (np.isfinite(clip) and clip > 0):
            raise ConfigError(f"clip: must be a positive finite number, got {clip}")
        if not (np.isfinite(scale) and scale > 0):
            raise ConfigError(f"scale: must be a positive finite number, got {scale}")
        self.clip = float(clip)
        self.scale = float(scale)

    @property
    def max_abs(self) -> int:
        return int(np.ceil(self.clip * self.scale))

    def encode(self, x: np.ndarray, rng: UniformDraws | None = None) -> np.ndarray:
        """Clip, scale and round stochastically (uniforms from `rng`, a numpy Generator on the device's
        kind stream, or OS entropy by default)."""
        arr = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise ConfigError("values: must be finite to encode")
        scaled = np.clip(arr, -self.clip, self.clip) * self.scale
        low = np.floor(scaled)
        u = uniforms(OsRandom(), arr.size).reshape(arr.shape) if rng is None else rng.random(arr.shape)
        up = u < (scaled - low)
        return (low + up).astype(np.int64)

    def decode(self, total: np.ndarray) -> np.ndarray:
        return np.asarray(total, dtype=np.float64) / self.scale


_NATIVE: dict[int, np.dtype[Any]] = {8: np.dtype("<u1"), 16: np.dtype("<u2"), 32: np.dtype("<u4")}


def pack(values: np.ndarray, bits: int) -> bytes:
    """Exactly `bits` bits per entry, little-endian bit order; entries must be < 2^bits."""
    if bits in _NATIVE:
        return np.asarray(values).astype(_NATIVE[bits], copy=False).tobytes()
    arr = np.ascontiguousarray(values, dtype=np.uint64)
    if bits % 8 == 0:
        return arr.view(np.uint8).reshape(-1, 8)[:, : bits // 8].tobytes()
    bitmat = np.unpackbits(arr.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")[:, :bits]
    return np.packbits(bitmat.reshape(-1), bitorder="little").tobytes()


def packed_size(dim: int, bits: int) -> int:
    return (dim * bits + 7) // 8


def unpack(data: bytes, dim: int, bits: int, dtype: np.dtype = np.dtype(np.uint64)) -> np.ndarray:
    """Inverse of `pack`; raises MessageFormatError when the length does not match dim·bits."""
    if len(data) != packed_size(dim, bits):
        raise MessageFormatError(f"vector: expected {packed_size(dim, bits)} bytes, got {len(data)}")
    if bits in _NATIVE:
        return np.frombuffer(data, dtype=_NATIVE[bits]).astype(dtype)
    raw = np.frombuffer(data, dtype=np.uint8)
    if bits % 8 == 0:
        full = np.zeros((dim, 8), dtype=np.uint8)
        full[:, : bits // 8] = raw.reshape(dim, bits // 8)
    else:
        bitmat = np.zeros((dim, 64), dtype=np.uint8)
        bitmat[:, :bits] = np.unpackbits(raw, bitorder="little")[: dim * bits].reshape(dim, bits)
        full = np.packbits(bitmat, axis=1, bitorder="little")
    return full.view(np.uint64).reshape(dim).astype(dtype, copy=False)
