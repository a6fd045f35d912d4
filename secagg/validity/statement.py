"""What one device's contribution to a round must satisfy: the statement its validity proof proves.

A statement is the round's vector layout as segments, each with its constraint, plus the encoding scale s
and the noise bound B of the round. The device's masked content is s·x + e, where x is the kind's vector
(length `dim`) and e its distributed-DP noise share; the proof shows

- for every segment of x: `Bits(size, max_ones)` every entry 0 or 1 and at most `max_ones` of them 1
  (votes), `Signs(size)` every entry in {−1, 0, +1}, `Ranged(size, low, high)` every entry in [low, high];
- for the noise (when B > 0): every entry of e in [−B, B];
- for every `Relation(terms, low, high)`: low ≤ Σ coef·x_index ≤ high over entries of `Ranged` segments (a
  feature's first moment at most its count, histogram bins that add up to at most the rows' bound);

and commits to s·x + e as one point K = Σ (s·x_i + e_i)·G_i + ρ·B, whose blinding ρ the device adds to the
masked vector as `LIMBS` limbs of `LIMB_BITS` bits (`blind_limbs`), so the unmasked sum opens Σ K over
the contributors (`secagg.validity.proof.opening_holds`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from secagg.validity.group import ORDER

LIMB_BITS = 16
"""Bits per limb of the blinding scalar in the masked vector."""
LIMBS = (ORDER.bit_length() + LIMB_BITS - 1) // LIMB_BITS
"""Limbs that hold a scalar below ℓ < 2^253 (16 of 16 bits)."""
MAX_RANGE_BITS = 62
"""Widest range a `Ranged` segment or the noise bound may span (values fit the 62-bit ring)."""


class StatementError(ValueError):
    """A statement that cannot be proved (bad sizes or bounds)."""


@dataclass(frozen=True)
class Bits:
    """Entries in {0, 1}, at most `max_ones` of them 1."""

    size: int
    max_ones: int = 1
    TAG = 1

    def check(self, values: list[int]) -> str | None:
        if any(v not in (0, 1) for v in values):
            return "an entry is not 0 or 1"
        if sum(values) > self.max_ones:
            return f"{sum(values)} entries are 1, more than {self.max_ones}"
        return None

    def params(self) -> tuple[int, ...]:
        return (self.max_ones,)


@dataclass(frozen=True)
class Signs:
    """Entries in {−1, 0, +1} (sign votes)."""

    size: int
    TAG = 2

    def check(self, values: list[int]) -> str | None:
        return None if all(v in (-1, 0, 1) for v in values) else "an entry is not −1, 0 or +1"

    def params(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True)
class Ranged:
    """Entries in [low, high]."""

    size: int
    low: int
    high: int
    TAG = 3

    def check(self, values: list[int]) -> str | None:
        bad = [v for v in values if not self.low <= v <= self.high]
        return f"an entry ({bad[0]}) is outside [{self.low}, {self.high}]" if bad else None

    def params(self) -> tuple[int, ...]:
        return (self.low, self.high)


Segment = Bits | Signs | Ranged

MAX_RELATION_COEF = 1 << 16
"""|coef| of a relation's term stays below this, so Σ coef·x_i over a statement's entries never reaches ℓ."""


@dataclass(frozen=True)
class Relation:
    """low ≤ Σ coef·x[index] ≤ high over (index, coef) terms; every index in a `Ranged` segment."""

    terms: tuple[tuple[int, int], ...]
    low: int
    high: int
    TAG = 4

    def value(self, values: list[int]) -> int:
        return sum(coef * int(values[i]) for i, coef in self.terms)

    def encode(self) -> bytes:
        out = [struct.pack(">BII", self.TAG, len(self.terms), 2)]
        out += [struct.pack(">Iq", i, coef) for i, coef in self.terms]
        return b"".join(out + [struct.pack(">qq", self.low, self.high)])


def range_weights(width: int) -> list[int]:
    """Weights w_j of a k-bit decomposition that reaches exactly [0, width]: 1, 2, …, 2^(k−2), then
    width − 2^(k−1) + 1 (k = bit length of width; no bits for width 0)."""
    if width <= 0:
        return []
    k = width.bit_length()
    return [1 << j for j in range(k - 1)] + [width - (1 << (k - 1)) + 1]


def decompose(value: int, width: int) -> list[int]:
    """The bits of value ∈ [0, width] in `range_weights(width)`."""
    weights = range_weights(width)
    if not weights:
        return []
    k = len(weights)
    top = 1 if value >= 1 << (k - 1) else 0
    low = value - top * weights[-1]
    return [(low >> j) & 1 for j in range(k - 1)] + [top]


@dataclass(frozen=True)
class Statement:
    segments: tuple[Segment, ...]
    encoding_scale: int = 1
    """s: the device sends s·x + e."""
    noise_bound: int = 0
    """B: every noise entry lies in [−B, B]; 0 when the round has no noise."""
    relations: tuple[Relation, ...] = ()
    """Linear constraints across entries of `Ranged` segments."""

    def __post_init__(self) -> None:
        if not self.segments:
            raise StatementError("statement: no segments")
        for seg in self.segments:
            if seg.size < 1:
                raise StatementError(f"statement: segment {seg} has no entries")
            if isinstance(seg, Bits) and seg.max_ones < 1:
                raise StatementError("statement: Bits.max_ones must be ≥ 1")
            if isinstance(seg, Ranged) and (seg.high < seg.low or (seg.high - seg.low).bit_length() > MAX_RANGE_BITS
                                            or max(abs(seg.low), abs(seg.high)).bit_length() > MAX_RANGE_BITS):
                raise StatementError(f"statement: range [{seg.low}, {seg.high}] is empty or too wide")
        if not 1 <= self.encoding_scale < 1 << 32:
            raise StatementError(f"statement: encoding scale {self.encoding_scale} out of range")
        if self.noise_bound < 0 or (2 * self.noise_bound).bit_length() > MAX_RANGE_BITS:
            raise StatementError(f"statement: noise bound {self.noise_bound} out of range")
        ranged = set(self.ranged_indices())
        for k, rel in enumerate(self.relations):
            indices = [i for i, _ in rel.terms]
            if not rel.terms or len(set(indices)) != len(indices):
                raise StatementError(f"statement: relation {k} has no terms or repeats an entry")
            if not set(indices) <= ranged:
                raise StatementError(f"statement: relation {k} names an entry outside the ranged segments")
            if any(coef == 0 or abs(coef) >= MAX_RELATION_COEF for _, coef in rel.terms):
                raise StatementError(f"statement: relation {k} has a coefficient 0 or beyond ±2^16")
            if (rel.high < rel.low or (rel.high - rel.low).bit_length() > MAX_RANGE_BITS
                    or max(abs(rel.low), abs(rel.high)).bit_length() > MAX_RANGE_BITS):
                raise StatementError(f"statement: relation {k}'s range [{rel.low}, {rel.high}] is empty or too wide")

    @property
    def dim(self) -> int:
        return sum(s.size for s in self.segments)

    def with_noise(self, encoding_scale: int, noise_bound: int) -> Statement:
        return Statement(self.segments, encoding_scale, noise_bound, self.relations)

    def ranged_indices(self) -> list[int]:
        """The entries of the `Ranged` segments, in order (the entries a relation may name)."""
        return [at + i for seg, at in zip(self.segments, self.offsets()) if isinstance(seg, Ranged)
                for i in range(seg.size)]

    def offsets(self) -> list[int]:
        out, at = [], 0
        for seg in self.segments:
            out.append(at)
            at += seg.size
        return out

    def to_json(self) -> dict[str, Any]:
        """The JSON form the test vectors and the JS benchmark use: segments as ["bits", size, max_ones],
        ["signs", size] or ["ranged", size, low, high]; relations as [[[index, coef], …], low, high]."""
        segments = [["bits", g.size, g.max_ones] if isinstance(g, Bits) else ["signs", g.size] if isinstance(g, Signs)
                    else ["ranged", g.size, g.low, g.high] for g in self.segments]
        return {"segments": segments, "encoding_scale": self.encoding_scale, "noise_bound": self.noise_bound,
                "relations": [[[list(t) for t in r.terms], r.low, r.high] for r in self.relations]}

    @staticmethod
    def from_json(spec: dict[str, Any]) -> Statement:
        """The statement of `to_json`'s form (encoding_scale, noise_bound and relations optional)."""
        kinds: dict[str, Any] = {"bits": Bits, "signs": Signs, "ranged": Ranged}
        segments = tuple(kinds[g[0]](*g[1:]) for g in spec["segments"])
        relations = tuple(Relation(tuple((int(i), int(c)) for i, c in terms), low, high)
                          for terms, low, high in spec.get("relations", []))
        return Statement(segments, spec.get("encoding_scale", 1), spec.get("noise_bound", 0), relations)

    def check(self, values: list[int]) -> str | None:
        """Why `values` (the kind's vector x) does not satisfy the statement, or None."""
        if len(values) != self.dim:
            return f"length {len(values)}, expected {self.dim}"
        for seg, at in zip(self.segments, self.offsets()):
            why = seg.check(values[at : at + seg.size])
            if why:
                return f"entries {at}..{at + seg.size - 1}: {why}"
        for k, rel in enumerate(self.relations):
            total = rel.value(values)
            if not rel.low <= total <= rel.high:
                return f"relation {k}: {total} is outside [{rel.low}, {rel.high}]"
        return None

    def max_abs(self) -> int:
        """Largest |s·x_i + e_i| a valid contribution can have."""
        most = max(max(abs(s.low), abs(s.high)) if isinstance(s, Ranged) else 1 for s in self.segments)
        return self.encoding_scale * most + self.noise_bound

    def encode(self) -> bytes:
        """Canonical bytes of the statement (bound into every proof's transcript)."""
        out = [struct.pack(">IIQQ", len(self.segments), self.dim, self.encoding_scale, self.noise_bound)]
        for seg in self.segments:
            params = seg.params()
            out.append(struct.pack(">BII", seg.TAG, seg.size, len(params)))
            out += [struct.pack(">q", p) for p in params]
        out += [rel.encode() for rel in self.relations]  # none: the bytes of a statement without relations
        return b"".join(out)


def blind_limbs(blind: int) -> list[int]:
    """ρ < ℓ as LIMBS little-endian limbs of LIMB_BITS bits (each summed over devices without wrapping)."""
    if not 0 <= blind < ORDER:
        raise StatementError("blind: must be a scalar in [0, ℓ)")
    mask = (1 << LIMB_BITS) - 1
    return [(blind >> (LIMB_BITS * k)) & mask for k in range(LIMBS)]


def limbs_value(limbs: list[int]) -> int:
    """Σ_k limbs[k]·2^(16k) modulo ℓ: the summed blinding recovered from the summed limbs."""
    return sum(int(v) << (LIMB_BITS * k) for k, v in enumerate(limbs)) % ORDER
