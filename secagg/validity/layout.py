"""A statement as a linear map from one bit vector: what the bit-vector proof (`secagg.validity.proof`) proves.

Every constraint a `Statement` states is a range or a count, so a valid contribution is exactly a vector of bits
a ∈ {0, 1}^n with
- the device's committed entries c_i = s·x_i + e_i = Σ_k M_ik·a_k + o_i (each bit feeds at most one entry), and
- linear constraints Σ_k W_jk·a_k = v_j with public right-hand sides.

Bits, in this order (`range_weights(w)` decomposes [0, w] exactly):
- per segment, in order: `Bits(size, m)`: one bit per entry (M = s); when m < size, the slack m − Σ x_i in
  `range_weights(m)` and the constraint Σ x_i + slack = m. `Signs(size)`: two bits p, q per entry, x = p − q
  (M = s, −s). `Ranged(size, low, high)`: per entry the bits of x − low in `range_weights(high − low)`
  (M = s·w), o_i += s·low;
- the noise (B > 0): per entry the bits of e + B in `range_weights(2B)` (M = w), o_i −= B;
- per `Relation(terms, low, high)`: the slack T − low in `range_weights(high − low)` and the constraint
  Σ_terms coef·(x_i − low_i) − slack = low − Σ_terms coef·low_i (x_i − low_i is the entry's range bits).

Constraints are numbered: the count constraints of `Bits` segments in segment order, then the relations.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from secagg.validity.group import ORDER
from secagg.validity.statement import Bits, Ranged, Signs, Statement, decompose, range_weights


@dataclass(frozen=True)
class Layout:
    n: int
    entry: tuple[int, ...]
    """Per bit, the entry it feeds (−1: a slack bit, no entry)."""
    coef: tuple[int, ...]
    """Per bit, M_ik for its entry (0 for slack bits)."""
    offsets: tuple[int, ...]
    """o_i per entry."""
    constraints: tuple[tuple[tuple[tuple[int, int], ...], int], ...]
    """Per constraint j: ((bit, W_jk), …) and v_j."""


@functools.lru_cache(maxsize=64)
def layout(statement: Statement) -> Layout:
    s = statement.encoding_scale
    entry: list[int] = []
    coef: list[int] = []
    offsets = [0] * statement.dim
    constraints: list[tuple[tuple[tuple[int, int], ...], int]] = []
    value_bits: dict[int, list[tuple[int, int]]] = {}  # ranged entry → its (bit, weight)

    def add(i: int, m: int) -> int:
        entry.append(i)
        coef.append(m)
        return len(entry) - 1

    for seg, at in zip(statement.segments, statement.offsets()):
        if isinstance(seg, Bits):
            bits = [add(at + i, s) for i in range(seg.size)]
            if seg.max_ones < seg.size:
                slack = [(add(-1, 0), w) for w in range_weights(seg.max_ones)]
                constraints.append((tuple((k, 1) for k in bits) + tuple(slack), seg.max_ones))
        elif isinstance(seg, Signs):
            for i in range(seg.size):
                add(at + i, s)
                add(at + i, -s)
        else:
            for i in range(seg.size):
                value_bits[at + i] = [(add(at + i, s * w), w) for w in range_weights(seg.high - seg.low)]
                offsets[at + i] += s * seg.low
    if statement.noise_bound:
        for i in range(statement.dim):
            for w in range_weights(2 * statement.noise_bound):
                add(i, w)
            offsets[i] -= statement.noise_bound
    lows = {at + i: seg.low for seg, at in zip(statement.segments, statement.offsets()) if isinstance(seg, Ranged)
            for i in range(seg.size)}
    for rel in statement.relations:
        terms = [(k, c * w) for i, c in rel.terms for k, w in value_bits[i]]
        slack = [(add(-1, 0), -w) for w in range_weights(rel.high - rel.low)]
        constraints.append((tuple(terms + slack), rel.low - sum(c * lows[i] for i, c in rel.terms)))
    return Layout(len(entry), tuple(entry), tuple(coef), tuple(offsets), tuple(constraints))


def _digits(value: int, width: int) -> list[int]:
    """`decompose(value, width)`; for a value outside [0, width] the same low bits and a last digit that makes
    Σ w_j·digit_j ≡ value (mod ℓ) — not a bit, so the proof of such a vector does not verify while K still commits
    to the value itself."""
    if 0 <= value <= width:
        return decompose(value, width)
    weights = range_weights(width)
    if not weights:
        return []
    low = value % (1 << (len(weights) - 1))
    return [(low >> j) & 1 for j in range(len(weights) - 1)] + [(value - low) * pow(weights[-1], -1, ORDER) % ORDER]


def witness(statement: Statement, values: Sequence[int], noise: Sequence[int] | None) -> list[int]:
    """The bits of a contribution (x, e), in `layout` order: every one 0 or 1 exactly when (x, e) satisfies
    `statement`; the map of `layout` gives back s·x + e whatever x and e are."""
    x = [int(v) for v in values]
    bits: list[int] = []
    for seg, at in zip(statement.segments, statement.offsets()):
        part = x[at : at + seg.size]
        if isinstance(seg, Bits):
            bits += part
            if seg.max_ones < seg.size:
                bits += _digits(seg.max_ones - sum(part), seg.max_ones)
        elif isinstance(seg, Signs):
            for v in part:
                bits += [0, 1] if v == -1 else [v % ORDER, 0]
        else:
            for v in part:
                bits += _digits(v - seg.low, seg.high - seg.low)
    if statement.noise_bound:
        assert noise is not None
        for e in noise:
            bits += _digits(int(e) + statement.noise_bound, 2 * statement.noise_bound)
    for rel in statement.relations:
        bits += _digits(rel.value(x) - rel.low, rel.high - rel.low)
    return bits
