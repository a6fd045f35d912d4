"""Proving and verifying that one device's contribution satisfies its round's `Statement`, and the opening
check that binds the proofs to the securely aggregated sum.

What a proof holds, segment by segment (G_i: entry i's generator, G_Σ: the sum generator, B: the base point):
- `Bits(size, 1)` (one vote): one commitment V = Σ x_i·G_i + r·B and a (size + 1)-branch OR proof that
  V − G_j = r·B for some entry j, or V = r·B (no vote): x is zero or one unit vector.
- `Bits(size, m ≥ size)`: per entry C_i = x_i·G_i + r_i·B with a 2-branch OR proof (offsets 0, G_i).
- `Bits(size, 1 < m < size)`: per entry C_i = x_i·(G_i + G_Σ) + r_i·B with a 2-branch OR proof; the count
  S = Σ x_i as bit commitments E_j = b_j·G_Σ + q_j·B (`range_weights(m)`, 2-branch OR each); the segment's
  commitment V = Σ C_i − Σ w_j·E_j, and a linear proof that V = Σ y_i·G_i + ρ·B for known y, ρ: V has no
  G_Σ component, so Σ x_i = S ≤ m.
- `Signs(size)`: per entry C_i with a 3-branch OR proof (offsets 0, G_i, −G_i).
- `Ranged(size, low, high)`: per entry bit commitments D_ij = b_ij·G_i + q_ij·B of x_i − low in
  `range_weights(high − low)` (2-branch OR each); entry i's commitment is Σ_j w_j·D_ij + low·G_i.
- noise (B > 0): the same as `Ranged(dim, −B, B)` over all entries, giving N = Σ e_i·G_i + ρ_e·B.
- `Relation(terms, low, high)` k (statements with relations): a ranged entry i named by relations commits its
  bits under the base G_i + Σ_k coef_ki·H_k instead of G_i (H_k: relation k's generator), so its commitment
  X_i carries x_i·coef_ki·H_k; the relation's value T_k = Σ coef_ki·x_i gets bit commitments
  F_kj = b_kj·H_k + q_kj·B of T_k − low in `range_weights(high − low)` (2-branch OR each), R_k = Σ_j w_j·F_kj +
  low·H_k; then one linear proof that V = Σ_ranged X_i − Σ_k R_k = Σ y_i·G_i + ρ·B over the ranged entries'
  generators: V has no H_k component, so every T_k is the relation's value and lies in [low, high].

The device's point is K = s·Σ_segments V + N = Σ (s·x_i + e_i)·G_i + ρ·B. Wire form: the challenge c
(32 bytes), every commitment point in the order above (32 bytes each), then the scalars of every
sub-proof in the same order (32 bytes each: an n-branch OR proof sends c_0…c_{n−2} and z_0…z_{n−1}; the
last branch challenge is c minus the others; a linear proof sends its responses then its blinding
response). The length is exact for the statement (`proof_size`).

Verification recomputes every announcement, hashes the transcript and compares with c. After unmasking,
`opening_holds` checks Σ_u K_u = Σ_i Y_i·G_i + R·B for the contributors' summed vector Y and summed
blinding R (from the limbs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from secagg.randomness import RandomSource
from secagg.validity import group as g
from secagg.validity.sigma import LinearProver, Offset, OrProver, linear_announcement, or_announcements
from secagg.validity.statement import Bits, Ranged, Signs, Statement, decompose, range_weights
from secagg.validity.transcript import ProofContext, Transcript

class InvalidProof(ValueError):
    """A validity proof that does not verify (or does not decode); the message says which part."""


# -- shape ---------------------------------------------------------------------------------------------


def _or_scalars(branches: int) -> int:
    return 2 * branches - 1


def _bits_mode(seg: Bits) -> str:
    if seg.max_ones == 1:
        return "one_hot"
    if seg.max_ones >= seg.size:
        return "bits"
    return "counted"


def proof_shape(statement: Statement) -> tuple[int, int]:
    """(points, scalars) of a proof of `statement`, besides the challenge."""
    points = scalars = 0
    ranged = [s for s in statement.segments if isinstance(s, Ranged)]
    for seg in statement.segments:
        if isinstance(seg, Bits):
            mode = _bits_mode(seg)
            if mode == "one_hot":
                points, scalars = points + 1, scalars + _or_scalars(seg.size + 1)
            else:
                points, scalars = points + seg.size, scalars + seg.size * _or_scalars(2)
                if mode == "counted":
                    k = len(range_weights(seg.max_ones))
                    points, scalars = points + k, scalars + k * _or_scalars(2) + seg.size + 1
        elif isinstance(seg, Signs):
            points, scalars = points + seg.size, scalars + seg.size * _or_scalars(3)
    for seg in ranged:
        k = len(range_weights(seg.high - seg.low))
        points, scalars = points + seg.size * k, scalars + seg.size * k * _or_scalars(2)
    if statement.noise_bound:
        k = len(range_weights(2 * statement.noise_bound))
        points, scalars = points + statement.dim * k, scalars + statement.dim * k * _or_scalars(2)
    for rel in statement.relations:
        k = len(range_weights(rel.high - rel.low))
        points, scalars = points + k, scalars + k * _or_scalars(2)
    if statement.relations:
        scalars += len(statement.ranged_indices()) + 1
    return points, scalars


def proof_size(statement: Statement) -> int:
    points, scalars = proof_shape(statement)
    return g.SCALAR_BYTES + g.POINT_BYTES * points + g.SCALAR_BYTES * scalars


# -- proving -------------------------------------------------------------------------------------------


@dataclass
class _Builder:
    points: list[bytes] = field(default_factory=list)
    provers: list[OrProver | tuple[LinearProver, list[bytes], bytes]] = field(default_factory=list)
    value_points: list[bytes] = field(default_factory=list)
    """Commitments whose sum is Σ_segments V (scaled by s later)."""
    blind: int = 0


def weighted_total(columns: list[list[bytes]], weights: list[int]) -> bytes:
    """Σ_j w_j·(Σ columns[j]): one scalar multiplication per weight, additions for the rest."""
    return g.total([g.mul(w, g.total(col)) for w, col in zip(weights, columns)])


def relation_bases(statement: Statement) -> list[bytes]:
    """Per entry, the base its bits are committed under: G_i, plus Σ_k coef_ki·H_k for the relations naming it."""
    bases = g.generators(statement.dim)
    for k, rel in enumerate(statement.relations):
        h = g.relation_generator(k)
        for i, coef in rel.terms:
            bases[i] = g.add(bases[i], g.mul(coef, h))
    return bases


def _shift_base(statement: Statement, start: int, size: int, bases: list[bytes]) -> bytes:
    """Σ of the bases of entries start…start+size−1 (what `low` multiplies)."""
    named = {i for rel in statement.relations for i, _ in rel.terms}
    if any(start <= i < start + size for i in named):
        return g.total(bases[start : start + size])
    return g.generator_sum(start, size)


def _prove_ranged(b: _Builder, bases: list[bytes], shift_base: bytes, values: Sequence[int], low: int, high: int,
                  source: RandomSource) -> tuple[bytes, int]:
    """Bit commitments and OR proofs of values ∈ [low, high] under the given per-entry bases → (the commitment
    to the values' sum vector, its blinding)."""
    weights = range_weights(high - low)
    columns: list[list[bytes]] = [[] for _ in weights]
    blind = 0
    for gen, value in zip(bases, values):
        for j, (w, bit) in enumerate(zip(weights, decompose(int(value) - low, high - low))):
            q = g.random_scalar(source)
            d = g.commit(bit, q, gen)
            b.points.append(d)
            b.provers.append(OrProver.start(d, [None, gen], bit, q, source))
            columns[j].append(d)
            blind += w * q
    shift = [g.mul(low, shift_base)] if low else []
    return g.total([weighted_total(columns, weights)] + shift), blind % g.ORDER


def prove(statement: Statement, context: ProofContext, values: Sequence[int], noise: Sequence[int] | None,
          source: RandomSource) -> tuple[bytes, int]:
    """The proof that `values` (x) and `noise` (e) satisfy `statement`, and the blinding ρ of
    K = Σ (s·x_i + e_i)·G_i + ρ·B that the device adds to its masked vector (`blind_limbs`).
    ValueError when the inputs do not satisfy the statement (an honest device never proves a false one)."""
    why = statement.check([int(v) for v in values])
    if why:
        raise ValueError(f"contribution: does not satisfy its statement: {why}")
    if statement.noise_bound:
        if noise is None or len(noise) != statement.dim:
            raise ValueError("noise: a vector of the statement's length is required")
        if any(abs(int(e)) > statement.noise_bound for e in noise):
            raise ValueError(f"noise: an entry exceeds the bound {statement.noise_bound}")
    elif noise is not None and any(int(e) for e in noise):
        raise ValueError("noise: the statement allows none")
    gens = g.generators(statement.dim)
    b = _Builder()
    value_blind = 0
    ranged_later: list[tuple[Ranged, int]] = []
    for seg, at in zip(statement.segments, statement.offsets()):
        sg, sv = gens[at : at + seg.size], [int(v) for v in values[at : at + seg.size]]
        if isinstance(seg, Bits):
            mode = _bits_mode(seg)
            if mode == "one_hot":
                r = g.random_scalar(source)
                hot = next((i for i, v in enumerate(sv) if v), None)
                v_point = g.commit(1 if hot is not None else 0, r, sg[hot] if hot is not None else gens[0])
                b.points.append(v_point)
                b.provers.append(OrProver.start(v_point, [None, *sg], 0 if hot is None else hot + 1, r, source))
                b.value_points.append(v_point)
                value_blind += r
                continue
            sigma = g.sum_generator() if mode == "counted" else None
            seg_points, seg_blind = [], 0
            for gen, v in zip(sg, sv):
                base = g.add(gen, sigma) if sigma else gen
                r = g.random_scalar(source)
                c = g.commit(v, r, base)
                b.points.append(c)
                b.provers.append(OrProver.start(c, [None, base], v, r, source))
                seg_points.append(c)
                seg_blind += r
            if mode == "counted":
                assert sigma is not None
                weights = range_weights(seg.max_ones)
                for w, bit in zip(weights, decompose(sum(sv), seg.max_ones)):
                    q = g.random_scalar(source)
                    e = g.commit(bit, q, sigma)
                    b.points.append(e)
                    b.provers.append(OrProver.start(e, [None, sigma], bit, q, source))
                    seg_points.append(g.neg(g.mul(w, e)))
                    seg_blind -= w * q
                v_seg = g.total(seg_points)
                lp = LinearProver.start(sg, sv, seg_blind % g.ORDER, source)
                b.provers.append((lp, sg, v_seg))
                b.value_points.append(v_seg)
            else:
                b.value_points.extend(seg_points)
            value_blind += seg_blind
        elif isinstance(seg, Signs):
            for gen, v in zip(sg, sv):
                r = g.random_scalar(source)
                c = g.commit(v, r, gen)
                b.points.append(c)
                b.provers.append(OrProver.start(c, [None, gen, g.neg(gen)], {0: 0, 1: 1, -1: 2}[v], r, source))
                b.value_points.append(c)
                value_blind += r
        else:
            ranged_later.append((seg, at))
    bases = relation_bases(statement) if statement.relations else gens
    ranged_points, ranged_blind = [], 0
    for seg, at in ranged_later:
        point, blind = _prove_ranged(b, bases[at : at + seg.size], _shift_base(statement, at, seg.size, bases),
                                     values[at : at + seg.size], seg.low, seg.high, source)
        ranged_points.append(point)
        ranged_blind += blind
    noise_point, noise_blind = g.IDENTITY, 0
    if statement.noise_bound:
        assert noise is not None  # checked above: a noise bound requires a noise vector
        noise_point, noise_blind = _prove_ranged(b, gens, g.generator_sum(0, statement.dim), noise,
                                                 -statement.noise_bound, statement.noise_bound, source)
    for k, rel in enumerate(statement.relations):
        h = g.relation_generator(k)
        point, blind = _prove_ranged(b, [h], h, [rel.value([int(v) for v in values])], rel.low, rel.high, source)
        ranged_points.append(g.neg(point))
        ranged_blind -= blind
    if ranged_later:
        v_ranged = g.total(ranged_points)
        if statement.relations:
            indices = statement.ranged_indices()
            lp = LinearProver.start([gens[i] for i in indices], [int(values[i]) for i in indices],
                                    ranged_blind % g.ORDER, source)
            b.provers.append((lp, [gens[i] for i in indices], v_ranged))
        b.value_points.append(v_ranged)
        value_blind += ranged_blind
    t = Transcript(context, statement.encode())
    for p in b.points:
        t.append(b"C", p)
    for pr in b.provers:
        ann = pr.announcements if isinstance(pr, OrProver) else [pr[0].announcement]
        for a in ann:
            t.append(b"A", a)
    challenge = t.challenge()
    scalars: list[int] = []
    for pr in b.provers:
        if isinstance(pr, OrProver):
            cs, zs = pr.finish(challenge)
            scalars += cs[:-1] + zs
        else:
            zs, s = pr[0].finish(challenge)
            scalars += zs + [s]
    s = statement.encoding_scale
    rho = (s * value_blind + noise_blind) % g.ORDER
    wire = g.scalar_bytes(challenge) + b"".join(b.points) + b"".join(g.scalar_bytes(x) for x in scalars)
    assert len(wire) == proof_size(statement)
    return wire, rho


def commitment_of(statement: Statement, values: Sequence[int], noise: Sequence[int] | None, blind: int) -> bytes:
    """K = Σ (s·x_i + e_i)·G_i + ρ·B computed from the openings (tests and known-answer vectors)."""
    s = statement.encoding_scale
    gens = g.generators(statement.dim)
    terms = [g.mul(s * int(v) + (int(noise[i]) if noise is not None else 0), gens[i]) for i, v in enumerate(values)]
    return g.total(terms + [g.mul_base(blind)])


# -- verifying -----------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, statement: Statement) -> None:
        if len(data) != proof_size(statement):
            raise InvalidProof(f"proof: {len(data)} bytes, expected {proof_size(statement)} for this round's statement")
        points, _ = proof_shape(statement)
        self.data = data
        self.challenge = self._scalar_at(0, "challenge")
        self.point_at = g.SCALAR_BYTES
        self.scalar_at = g.SCALAR_BYTES + g.POINT_BYTES * points

    def _scalar_at(self, pos: int, what: str) -> int:
        try:
            return g.decode_scalar(self.data[pos : pos + g.SCALAR_BYTES], what)
        except g.GroupError as exc:
            raise InvalidProof(str(exc)) from None

    def point(self, what: str) -> bytes:
        raw = self.data[self.point_at : self.point_at + g.POINT_BYTES]
        self.point_at += g.POINT_BYTES
        try:
            return g.decode_point(raw, what)
        except g.GroupError as exc:
            raise InvalidProof(str(exc)) from None

    def scalars(self, n: int, what: str) -> list[int]:
        out = [self._scalar_at(self.scalar_at + i * g.SCALAR_BYTES, what) for i in range(n)]
        self.scalar_at += n * g.SCALAR_BYTES
        return out


@dataclass
class _Check:
    """One sub-proof to verify once every point is read."""

    kind: str  # "or" | "linear"
    point: bytes
    offsets: list[Offset] = field(default_factory=list)
    generators: list[bytes] = field(default_factory=list)


def _read_ranged(r: _Reader, checks: list[_Check], bases: list[bytes], shift_base: bytes, low: int, high: int,
                 what: str) -> bytes:
    weights = range_weights(high - low)
    columns: list[list[bytes]] = [[] for _ in weights]
    for i, gen in enumerate(bases):
        for j in range(len(weights)):
            d = r.point(f"{what} entry {i} bit commitment")
            checks.append(_Check("or", d, [None, gen]))
            columns[j].append(d)
    shift = [g.mul(low, shift_base)] if low else []
    return g.total([weighted_total(columns, weights)] + shift)


def verify(statement: Statement, context: ProofContext, proof: bytes) -> bytes:
    """K, the device's commitment to s·x + e, when `proof` proves `statement` in `context`; InvalidProof
    otherwise."""
    r = _Reader(bytes(proof), statement)
    gens = g.generators(statement.dim)
    checks: list[_Check] = []
    value_points: list[bytes] = []
    ranged_later: list[tuple[Ranged, int]] = []
    for n, (seg, at) in enumerate(zip(statement.segments, statement.offsets())):
        sg = gens[at : at + seg.size]
        if isinstance(seg, Bits):
            mode = _bits_mode(seg)
            if mode == "one_hot":
                v = r.point(f"segment {n} commitment")
                checks.append(_Check("or", v, [None, *sg]))
                value_points.append(v)
                continue
            sigma = g.sum_generator() if mode == "counted" else None
            seg_points = []
            for i, gen in enumerate(sg):
                c = r.point(f"segment {n} entry {i} commitment")
                checks.append(_Check("or", c, [None, g.add(gen, sigma) if sigma else gen]))
                seg_points.append(c)
            if mode == "counted":
                for w in range_weights(seg.max_ones):
                    e = r.point(f"segment {n} count bit commitment")
                    checks.append(_Check("or", e, [None, sigma]))
                    seg_points.append(g.neg(g.mul(w, e)))
                v_seg = g.total(seg_points)
                checks.append(_Check("linear", v_seg, generators=sg))
                value_points.append(v_seg)
            else:
                value_points.extend(seg_points)
        elif isinstance(seg, Signs):
            for i, gen in enumerate(sg):
                c = r.point(f"segment {n} entry {i} commitment")
                checks.append(_Check("or", c, [None, gen, g.neg(gen)]))
                value_points.append(c)
        else:
            ranged_later.append((seg, at))
    bases = relation_bases(statement) if statement.relations else gens
    ranged_points = [_read_ranged(r, checks, bases[at : at + seg.size], _shift_base(statement, at, seg.size, bases),
                                  seg.low, seg.high, f"range segment at {at}") for seg, at in ranged_later]
    noise_point = g.IDENTITY
    if statement.noise_bound:
        B = statement.noise_bound
        noise_point = _read_ranged(r, checks, gens, g.generator_sum(0, statement.dim), -B, B, "noise")
    for k, rel in enumerate(statement.relations):
        h = g.relation_generator(k)
        ranged_points.append(g.neg(_read_ranged(r, checks, [h], h, rel.low, rel.high, f"relation {k}")))
    if ranged_later:
        v_ranged = g.total(ranged_points)
        if statement.relations:
            checks.append(_Check("linear", v_ranged, generators=[gens[i] for i in statement.ranged_indices()]))
        value_points.append(v_ranged)
    challenge = r.challenge
    t = Transcript(context, statement.encode())
    for i in range(proof_shape(statement)[0]):
        t.append(b"C", bytes(r.data[g.SCALAR_BYTES + i * g.POINT_BYTES : g.SCALAR_BYTES + (i + 1) * g.POINT_BYTES]))
    for chk in checks:
        if chk.kind == "or":
            n_br = len(chk.offsets)
            cs = r.scalars(n_br - 1, "branch challenge")
            zs = r.scalars(n_br, "response")
            cs.append((challenge - sum(cs)) % g.ORDER)
            for a in or_announcements(chk.point, chk.offsets, cs, zs):
                t.append(b"A", a)
        else:
            zs = r.scalars(len(chk.generators), "linear response")
            (s_resp,) = r.scalars(1, "linear blinding response")
            t.append(b"A", linear_announcement(chk.generators, chk.point, challenge, zs, s_resp))
    if t.challenge() != challenge:
        raise InvalidProof("proof: the challenge does not match the transcript (forged, altered, or made for another "
                           "session, round, party or statement)")
    s = statement.encoding_scale
    return g.total([g.mul(s, g.total(value_points)), noise_point])


def opening_holds(commitments: Sequence[bytes], summed: Sequence[int], summed_blind: int) -> bool:
    """Σ K_u = Σ_i Y_i·G_i + R·B: the contributors' commitments open to the unmasked sum Y (signed integers)
    with the summed blinding R."""
    gens = g.generators(len(summed))
    lhs = g.total(list(commitments))
    rhs = g.total([g.mul(int(y), gen) for y, gen in zip(summed, gens) if int(y) % g.ORDER] + [g.mul_base(summed_blind)])
    return lhs == rhs
