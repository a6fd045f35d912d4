"""The injectable randomness: determinism and independence of seeded streams, the helpers' laws, OS freshness.

Statistical checks use fixed seeds and reject at p < 1e-6, so they are deterministic once passed and a
biased helper (e.g. modulo reduction instead of rejection) fails them at these sample sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from secagg.randomness import (
    ByteSource,
    KeyedRandom,
    OsRandom,
    RandomSource,
    SeededRandom,
    keyed_stream,
    uint64s,
    uniforms,
)
from secagg.shamir import PRIME

ALPHA = 1e-6


def test_seeded_stream_is_deterministic_and_independent_of_read_sizes():
    a, b = SeededRandom(b"seed"), SeededRandom(b"seed")
    whole = a.bytes(1000)
    parts = b"".join(b.bytes(n) for n in (1, 15, 16, 17, 0, 951))
    assert whole == parts and len(whole) == 1000
    assert SeededRandom(b"seed2").bytes(32) != SeededRandom(b"seed").bytes(32)
    assert SeededRandom(b"").bytes(16) != SeededRandom(b"\x00").bytes(16)


def test_children_are_labelled_deterministic_and_do_not_depend_on_the_parents_position():
    parent = SeededRandom(b"root")
    first = parent.child("a").bytes(64)
    parent.bytes(1000)
    assert parent.child("a").bytes(64) == first
    assert SeededRandom(b"root").child("a").bytes(64) == first
    outputs = {
        parent.child("b").bytes(64),
        parent.child("a").child("a").bytes(64),
        SeededRandom(b"root").bytes(64),
        SeededRandom(b"other").child("a").bytes(64),
        first,
    }
    assert len(outputs) == 5


def test_children_streams_are_uncorrelated():
    """The XOR of two sibling streams (and of a child and its parent) is uniform byte by byte."""
    root = SeededRandom(b"independence")
    x = np.frombuffer(root.child("x").bytes(1 << 20), dtype=np.uint8)
    y = np.frombuffer(root.child("y").bytes(1 << 20), dtype=np.uint8)
    z = np.frombuffer(root.bytes(1 << 20), dtype=np.uint8)
    for a, b in ((x, y), (x, z)):
        counts = np.bincount(a ^ b, minlength=256)
        assert stats.chisquare(counts).pvalue > ALPHA
        assert abs(np.corrcoef(a.astype(float), b.astype(float))[0, 1]) < 0.01


@pytest.mark.parametrize("n", [2, 3, 7, 10, 255, 256, 257, 1000])
def test_randbelow_is_uniform(n):
    src = SeededRandom(b"randbelow/%d" % n)
    draws = np.array([src.randbelow(n) for _ in range(40 * n + 20_000)])
    assert draws.min() >= 0 and draws.max() < n
    assert stats.chisquare(np.bincount(draws, minlength=n)).pvalue > ALPHA


def test_randbelow_of_the_shamir_prime_rejects_about_half_and_is_uniform_in_its_top_bits():
    """2^256 + 297 needs 257 bits, so about half the 33-byte candidates are rejected (none with a modulo)."""

    class Counting:
        def __init__(self) -> None:
            self.inner, self.read = SeededRandom(b"randbelow/prime"), 0

        def bytes(self, n: int) -> bytes:
            self.read += n
            return self.inner.bytes(n)

    counting = Counting()
    src = SeededRandom(b"unused")
    src.bytes = counting.bytes  # type: ignore[method-assign]
    draws = [src.randbelow(PRIME) for _ in range(20_000)]
    assert all(0 <= d < PRIME for d in draws)
    assert 1.9 < counting.read / (33 * len(draws)) < 2.1
    top = np.array([d * 16 // PRIME for d in draws])
    assert stats.chisquare(np.bincount(top, minlength=16)).pvalue > ALPHA


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=1, max_value=1 << 300), seed=st.binary(max_size=8))
def test_randbelow_stays_in_range(n, seed):
    assert 0 <= SeededRandom(seed).randbelow(n) < n


def test_randbelow_reads_the_documented_bytes():
    """k = bit_length(n − 1) bits from ⌈k/8⌉ big-endian bytes, masked, retried until below n."""
    src, ref = SeededRandom(b"layout"), SeededRandom(b"layout")
    for n in (1, 2, 255, 256, 1000, PRIME):
        k = (n - 1).bit_length()
        want = 0
        if k:
            while True:
                want = int.from_bytes(ref.bytes((k + 7) // 8), "big") & ((1 << k) - 1)
                if want < n:
                    break
        assert src.randbelow(n) == want
    with pytest.raises(ValueError):
        src.randbelow(0)


def test_random_and_sample():
    src = SeededRandom(b"helpers")
    xs = np.array([src.random() for _ in range(20_000)])
    assert xs.min() >= 0.0 and xs.max() < 1.0
    assert stats.kstest(xs, "uniform").pvalue > ALPHA
    firsts = []
    for _ in range(20_000):
        s = src.sample(range(10), 4)
        assert len(set(s)) == 4 and set(s) <= set(range(10))
        firsts.append(s[0])
    assert stats.chisquare(np.bincount(firsts, minlength=10)).pvalue > ALPHA
    assert src.sample([], 0) == [] and sorted(src.sample("abc", 3)) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        src.sample([1, 2], 3)


def test_uniforms_are_the_top_53_bits_of_each_word():
    words = uint64s(SeededRandom(b"u"), 64)
    u = uniforms(SeededRandom(b"u"), 64)
    assert np.array_equal(u, (words >> np.uint64(11)).astype(np.float64) / 2.0**53)
    assert u.min() >= 0.0 and u.max() < 1.0


def test_os_source_differs_per_call_and_per_child():
    src = OsRandom()
    assert len({src.bytes(16) for _ in range(100)}) == 100
    assert src.child("x").bytes(16) != src.child("x").bytes(16)
    assert isinstance(src.child("x"), OsRandom)
    assert src.randbelow(1 << 128) != src.randbelow(1 << 128)
    assert not np.array_equal(uniforms(src, 4), uniforms(src, 4))
    assert keyed_stream(src).bytes(32) != keyed_stream(src).bytes(32)


def test_keyed_stream_is_aes_ctr_under_its_key():
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = bytes(range(32))
    want = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(100))
    assert KeyedRandom(key).bytes(100) == want
    assert keyed_stream(SeededRandom(b"k")).bytes(8) == KeyedRandom(SeededRandom(b"k").bytes(32)).bytes(8)
    with pytest.raises(ValueError):
        KeyedRandom(b"short")
    with pytest.raises(TypeError):
        SeededRandom("text")  # type: ignore[arg-type]


def test_every_source_satisfies_the_protocols_and_uint64s_is_little_endian():
    for src in (OsRandom(), SeededRandom(b"p"), KeyedRandom(bytes(32))):
        assert isinstance(src, RandomSource) and isinstance(src, ByteSource)
    raw = SeededRandom(b"words").bytes(16)
    words = uint64s(SeededRandom(b"words"), 2)
    assert words.dtype == np.uint64 and [int(w) for w in words] == [
        int.from_bytes(raw[:8], "little"),
        int.from_bytes(raw[8:], "little"),
    ]
