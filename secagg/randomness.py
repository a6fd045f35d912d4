"""The one injectable source of randomness: keys, seeds, masks, noise and sampling all draw from it.

`RandomSource.bytes(n)` is the only primitive; the helpers every source gets from `BaseRandom` are built
on it and consume its bytes in a fixed, documented way (docs/vectors.md), so a seeded source makes every
draw reproducible byte for byte:

- `randbelow(n)`: rejection sampling on k = bit_length(n − 1) bits — draw ⌈k/8⌉ bytes, read them as a
  big-endian integer, keep the low k bits, retry until the value is below n;
- `random()`: a float in [0, 1) from the top 53 bits of 8 big-endian bytes;
- `sample(population, k)`: k distinct elements in random order (partial Fisher–Yates on `randbelow`);
- `generator()`: a numpy PCG64 Generator seeded from 32 bytes (big-endian integer). Only for randomness
  that protects nothing (SGD shuffles, row subsampling, stochastic rounding); never for keys, seeds,
  masks or DP noise;
- `child(label)`: an independent labelled sub-stream.

`OsRandom` reads `os.urandom` and is the default everywhere. `KeyedRandom(key)` is the AES-256-CTR
keystream (zero IV) under a 32-byte key; `keyed_stream(source)` keys one from 32 bytes of a source, for
bulk draws (noise shares) that `os.urandom` serves an order of magnitude slower. `SeededRandom(seed)` is
the KeyedRandom under SHA-256(DOMAIN ‖ seed): deterministic, for tests and known-answer vectors only.
Children of keyed streams are keyed SHA-256(CHILD_DOMAIN ‖ parent key ‖ label), so they depend on the
parent's key and the label but not on how much of the parent's stream was read.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

DOMAIN = b"fa-random/v1/seeded/"
CHILD_DOMAIN = b"fa-random/v1/child/"
_T = TypeVar("_T")


@runtime_checkable
class ByteSource(Protocol):
    """Anything that yields uniformly random bytes (all the DP samplers need)."""

    def bytes(self, n: int) -> bytes: ...


@runtime_checkable
class RandomSource(ByteSource, Protocol):
    def randbelow(self, n: int) -> int: ...

    def random(self) -> float: ...

    def sample(self, population: Sequence[_T], k: int) -> list[_T]: ...

    def child(self, label: str) -> RandomSource: ...


class BaseRandom:
    """The helpers, built on `bytes` alone; subclasses implement `bytes` and `child`."""

    def bytes(self, n: int) -> bytes:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def child(self, label: str) -> RandomSource:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def randbelow(self, n: int) -> int:
        """Uniform integer in [0, n) by rejection sampling (no modulo bias)."""
        if n <= 0:
            raise ValueError(f"randbelow: n must be positive, got {n}")
        k = (n - 1).bit_length()
        if k == 0:
            return 0
        nbytes, mask = (k + 7) // 8, (1 << k) - 1
        while True:
            value = int.from_bytes(self.bytes(nbytes), "big") & mask
            if value < n:
                return value

    def random(self) -> float:
        """Uniform float in [0, 1) with 53 random bits."""
        return (int.from_bytes(self.bytes(8), "big") >> 11) * 2.0**-53

    def sample(self, population: Sequence[_T], k: int) -> list[_T]:
        """k distinct elements of `population` in random order (every ordered k-subset equally likely)."""
        pool = list(population)
        if not 0 <= k <= len(pool):
            raise ValueError(f"sample: k must be between 0 and {len(pool)}, got {k}")
        for i in range(k):
            j = i + self.randbelow(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]


class OsRandom(BaseRandom):
    """Operating-system entropy (`os.urandom`); the default source everywhere."""

    def bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def child(self, label: str) -> RandomSource:
        """Another OS source: every draw is fresh OS entropy whatever the label."""
        return OsRandom()

    def __repr__(self) -> str:
        return "OsRandom()"


class KeyedRandom(BaseRandom):
    """The AES-256-CTR keystream (zero IV) under a 32-byte key: a fast CSPRNG when the key is secret.

    Keyed with 32 bytes of OS entropy (`keyed_stream(OsRandom())`) it is a counter-mode generator like
    CTR_DRBG (NIST SP 800-90A Rev. 1, "Recommendation for Random Number Generation Using Deterministic
    Random Bit Generators", §10.2.1) without its update step or reseeding — one key per contribution —
    and ~15× faster than `os.urandom` for bulk draws such as a noise share. Children are keyed
    SHA-256(CHILD_DOMAIN ‖ key ‖ label).
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise ValueError("key: expected 32 bytes")
        self._key = bytes(key)
        self._enc = Cipher(algorithms.AES(self._key), modes.CTR(bytes(16))).encryptor()

    def bytes(self, n: int) -> bytes:
        if n < 0:
            raise ValueError(f"bytes: n must be non-negative, got {n}")
        return self._enc.update(bytes(n))

    def child(self, label: str) -> RandomSource:
        return KeyedRandom(hashlib.sha256(CHILD_DOMAIN + self._key + label.encode("utf-8")).digest())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(…)"


class SeededRandom(KeyedRandom):
    """Deterministic stream keyed SHA-256(DOMAIN ‖ seed), for tests and known-answer vectors; never in production."""

    def __init__(self, seed: bytes) -> None:
        if not isinstance(seed, (bytes, bytearray)):
            raise TypeError(f"seed: expected bytes, got {type(seed).__name__}")
        super().__init__(hashlib.sha256(DOMAIN + bytes(seed)).digest())


def keyed_stream(source: ByteSource) -> KeyedRandom:
    """A KeyedRandom keyed by 32 bytes of `source` (fresh OS entropy for OsRandom, reproducible if seeded)."""
    return KeyedRandom(source.bytes(32))


def uint64s(source: ByteSource, count: int) -> np.ndarray:
    """`count` uniform uint64 words from 8·count bytes of `source`, each read little-endian."""
    return np.frombuffer(source.bytes(8 * count), dtype="<u8").astype(np.uint64, copy=False)


def uniforms(source: ByteSource, count: int) -> np.ndarray:
    """`count` uniform floats in [0, 1): the top 53 bits of each of `uint64s(source, count)` times 2^-53."""
    return (uint64s(source, count) >> np.uint64(11)).astype(np.float64) * 2.0**-53


__all__ = [
    "BaseRandom", "ByteSource", "KeyedRandom", "OsRandom", "RandomSource", "SeededRandom", "keyed_stream", "uint64s", "uniforms",
]
