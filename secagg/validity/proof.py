"""Proving and verifying that one device's contribution satisfies its round's `Statement`, batch verification
of a cohort's proofs, and the opening check that binds the proofs to the securely aggregated sum.

The statement is a bit vector a ∈ {0,1}^n with a public linear map to the committed entries and public linear
constraints (`secagg.validity.layout`: c_i = s·x_i + e_i = Σ_k M_ik·a_k + o_i, Σ_k W_jk·a_k = v_j). The proof is
the range-proof argument of Bulletproofs (Bünz, Bootle, Boneh, Poelstra, Wuille, Maxwell, "Bulletproofs: Short
Proofs for Confidential Transactions and More", IEEE S&P 2018, §4.1–4.2) with the inner-product argument left out
(the two vectors l, r are sent, so the verifier's work on the fixed generators folds into one sum per cohort),
generalised from one value to a vector commitment:

- K = Σ c_i·G_i + ρ·B (the device's commitment, opened by the unmasked sum), A = α·B + Σ_k (a_k·g_k + (a_k − 1)·h_k),
  S = ρ_S·B + Σ_k (sL_k·g_k + sR_k·h_k), S2 = σ·B + Σ_i (M·sL)_i·G_i;
- challenges y, z, w (Fiat–Shamir over context, statement, K, A, S, S2); with g'_k = g_k + w·Ĝ_k
  (Ĝ_k = M_ik·G_i, the generator bit k feeds through), A + w·(K − O) = (α + wρ)·B + ⟨a, g'⟩ + ⟨a − 1, h⟩ and
  S + w·S2 commits sL under g' too (O = Σ o_i·G_i);
- l(X) = a − z·1 + sL·X, r(X) = y^n∘(a − 1 + z·1 + sR·X) + Σ_j z^(2+j)·W_j, t(X) = ⟨l(X), r(X)⟩ = t0 + t1·X + t2·X²
  with t0 = (z − z²)·⟨1, y^n⟩ − Σ_j z^(3+j)·⟨1, W_j⟩ + Σ_j z^(2+j)·v_j exactly when a is binary and meets every
  constraint; T1 = t1·g_t + τ1·B, T2 = t2·g_t + τ2·B; challenge x;
- the prover sends l = l(x), r = r(x), τ_x = τ1·x + τ2·x², μ = α + wρ + x·(ρ_S + wσ). The verifier checks
  (i)  (⟨l, r⟩ − t0)·g_t + τ_x·B − x·T1 − x²·T2 = 0, and
  (ii) A + w·K + x·S + xw·S2 − μ·B − Σ_k (l_k + z)·g_k + Σ_k (z + y^(−k)·(Σ_j z^(2+j)·W_jk − r_k))·h_k
       − w·Σ_i ((M·(l + z·1))_i + o_i)·G_i = 0.

Wire form: K, A, S, S2, T1, T2 (32 bytes each), τ_x, μ, l_0…l_(n−1), r_0…r_(n−1) (32 bytes each, little-endian
below ℓ). After unmasking, `opening_holds` checks Σ_u K_u = Σ_i Y_i·G_i + R·B for the contributors' summed vector Y
and summed blinding R (from the limbs). docs/validation.md has the soundness and zero-knowledge arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from secagg.randomness import OsRandom, RandomSource
from secagg.validity import group as g
from secagg.validity.layout import Layout, layout, witness
from secagg.validity.statement import Statement
from secagg.validity.transcript import ProofContext, Transcript

ORDER = g.ORDER
POINTS = 6
"""K, A, S, S2, T1, T2."""


class InvalidProof(ValueError):
    """A validity proof that does not verify (or does not decode); the message says which part."""


def proof_size(statement: Statement) -> int:
    return g.POINT_BYTES * POINTS + g.SCALAR_BYTES * (2 + 2 * layout(statement).n)


def _challenges(t: Transcript, labels: bytes) -> list[int]:
    out = []
    for label in labels:
        t.append(b"challenge", bytes([label]))
        c = t.challenge()
        if c == 0:  # probability 2^-252; no valid proof uses a zero challenge
            raise InvalidProof("proof: a zero challenge")
        out.append(c)
    return out


def _start(statement: Statement, context: ProofContext, points: Sequence[bytes]) -> tuple[Transcript, list[int]]:
    """The transcript over K, A, S, S2 and the challenges y, z, w."""
    t = Transcript(context, statement.encode())
    for label, p in zip((b"K", b"A", b"S", b"S2"), points):
        t.append(label, p)
    return t, _challenges(t, b"yzw")


def _constraint_terms(lay: Layout, z: int) -> list[int]:
    """Per bit, Σ_j z^(2+j)·W_jk."""
    out = [0] * lay.n
    zj = z * z % ORDER
    for terms, _ in lay.constraints:
        for k, w in terms:
            out[k] = (out[k] + zj * w) % ORDER
        zj = zj * z % ORDER
    return out


def _t0(lay: Layout, y: int, z: int) -> int:
    """t(0) of a valid witness: (z − z²)·⟨1, y^n⟩ − Σ_j z^(3+j)·⟨1, W_j⟩ + Σ_j z^(2+j)·v_j."""
    ysum, yk = 0, 1
    for _ in range(lay.n):
        ysum += yk
        yk = yk * y % ORDER
    out = (z - z * z) * ysum
    zj = z * z % ORDER
    for terms, v in lay.constraints:
        out += zj * (v - z * sum(w for _, w in terms))
        zj = zj * z % ORDER
    return out % ORDER


def _powers(base: int, n: int) -> list[int]:
    out, acc = [], 1
    for _ in range(n):
        out.append(acc)
        acc = acc * base % ORDER
    return out


def _entry_sums(lay: Layout, dim: int, vector: Sequence[int]) -> list[int]:
    """(M·vector)_i per entry."""
    out = [0] * dim
    for k, (i, m) in enumerate(zip(lay.entry, lay.coef)):
        if i >= 0:
            out[i] += m * vector[k]
    return [v % ORDER for v in out]


def _scaled(digit: int, p: bytes) -> bytes:
    """digit·P: an addition's worth of work for a bit (P or the identity), a multiplication for anything else
    (only a prover with its checks off has other digits)."""
    return (g.IDENTITY, p)[digit] if digit in (0, 1) else g.mul(digit, p)


def _weighted_bits(lay: Layout, bits: Sequence[int], gens: Sequence[bytes]) -> tuple[bytes, bytes]:
    """Σ_k bits_k·M_k·G_entry(k) as (W, C) with the sum W − C: grouped by coefficient m, P_m = g_t + Σ bits_k·G_entry(k)
    (one addition per bit, of G or of the identity), W = Σ m·P_m and C = (Σ m)·g_t. The same libsodium calls whatever
    the bits: no partial sum is the identity (which libsodium and `group.total` would short-cut), and the
    coefficients are public."""
    start = g.inner_product_generator()
    groups: dict[int, bytes] = {}
    for k, (i, m) in enumerate(zip(lay.entry, lay.coef)):
        if i >= 0:
            groups[m] = g.add(groups.get(m, start), _scaled(bits[k], gens[i]))
    return g.total([g.mul(m, p) for m, p in groups.items()]), g.mul(sum(groups), start)


def prove(statement: Statement, context: ProofContext, values: Sequence[int], noise: Sequence[int] | None,
          source: RandomSource) -> tuple[bytes, int]:
    """The proof that `values` (x) and `noise` (e) satisfy `statement`, and the blinding ρ of
    K = Σ (s·x_i + e_i)·G_i + ρ·B that the device adds to its masked vector (`blind_limbs`).
    ValueError when the inputs do not satisfy the statement (an honest device never proves a false one).
    Randomness, in this order: ρ, α, ρ_S, σ, sL_0…sL_(n−1), sR_0…sR_(n−1), τ1, τ2 (each `random_scalar`)."""
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
    return _prove_bits(statement, context, witness(statement, values, noise), source)


def _prove_bits(statement: Statement, context: ProofContext, a: Sequence[int], source: RandomSource) -> tuple[bytes, int]:
    """The proof for bits `a` in `layout(statement)` order (no check that they are bits or meet the constraints:
    `prove` checks the contribution; the tests use this directly to show a false statement does not verify)."""
    lay = layout(statement)
    n, dim = lay.n, statement.dim
    gens = g.generators(dim)
    gv, hv = g.bit_generators(n)
    rho, alpha, rho_s, sigma = (g.random_scalar(source) for _ in range(4))
    s_l = [g.random_scalar(source) for _ in range(n)]
    s_r = [g.random_scalar(source) for _ in range(n)]
    tau1, tau2 = g.random_scalar(source), g.random_scalar(source)
    offsets = [g.mul(o, gens[i]) for i, o in enumerate(lay.offsets) if o % ORDER]
    weighted, correction = _weighted_bits(lay, a, gens)
    k_point = g.total([g.mul_base(rho), weighted, *offsets, g.neg(correction)])  # ρ·B first: never the identity
    a_point = g.total([g.mul_base(alpha)] + [(g.neg(hv[k]), gv[k])[a[k]] if a[k] in (0, 1)
                                             else g.add(g.mul(a[k], gv[k]), g.mul(a[k] - 1, hv[k])) for k in range(n)])
    s_point = g.total([g.mul_base(rho_s)] + [g.mul(x, p) for x, p in zip(s_l, gv)] + [g.mul(x, p) for x, p in zip(s_r, hv)])
    ms_l = _entry_sums(lay, dim, s_l)
    s2_point = g.total([g.mul_base(sigma)] + [g.mul(v, gens[i]) for i, v in enumerate(ms_l) if v])
    t, (y, z, w) = _start(statement, context, (k_point, a_point, s_point, s2_point))
    yp = _powers(y, n)
    cz = _constraint_terms(lay, z)
    l0 = [(ak - z) % ORDER for ak in a]
    r0 = [(yp[k] * (a[k] - 1 + z) + cz[k]) % ORDER for k in range(n)]
    r1 = [yp[k] * s_r[k] % ORDER for k in range(n)]
    t1 = sum(l0[k] * r1[k] + s_l[k] * r0[k] for k in range(n)) % ORDER
    t2 = sum(s_l[k] * r1[k] for k in range(n)) % ORDER
    gt = g.inner_product_generator()
    t1_point = g.add(g.mul(t1, gt), g.mul_base(tau1)) if t1 else g.mul_base(tau1)
    t2_point = g.add(g.mul(t2, gt), g.mul_base(tau2)) if t2 else g.mul_base(tau2)
    t.append(b"T1", t1_point)
    t.append(b"T2", t2_point)
    (x,) = _challenges(t, b"x")
    l_vec = [(l0[k] + x * s_l[k]) % ORDER for k in range(n)]
    r_vec = [(r0[k] + x * r1[k]) % ORDER for k in range(n)]
    tau_x = (tau1 * x + tau2 * x * x) % ORDER
    mu = (alpha + w * rho + x * (rho_s + w * sigma)) % ORDER
    wire = b"".join([k_point, a_point, s_point, s2_point, t1_point, t2_point]
                    + [g.scalar_bytes(v) for v in [tau_x, mu, *l_vec, *r_vec]])
    assert len(wire) == proof_size(statement)
    return wire, rho


def commitment_of(statement: Statement, values: Sequence[int], noise: Sequence[int] | None, blind: int) -> bytes:
    """K = Σ (s·x_i + e_i)·G_i + ρ·B computed from the openings (tests and known-answer vectors)."""
    s = statement.encoding_scale
    gens = g.generators(statement.dim)
    terms = [g.mul(s * int(v) + (int(noise[i]) if noise is not None else 0), gens[i]) for i, v in enumerate(values)]
    return g.total(terms + [g.mul_base(blind)])


# -- verifying -----------------------------------------------------------------------------------------


@dataclass
class _Terms:
    """One proof's share of the batch equation, already weighted by its random factors."""

    k_point: bytes
    points: list[tuple[int, bytes]]
    g_coef: list[int]
    h_coef: list[int]
    entry_coef: list[int]
    base: int
    gt: int


def _decode(statement: Statement, proof: bytes) -> tuple[list[bytes], list[int]]:
    size = proof_size(statement)
    if len(proof) != size:
        raise InvalidProof(f"proof: {len(proof)} bytes, expected {size} for this round's statement")
    names = ("K", "A", "S", "S2", "T1", "T2")
    try:
        points = [g.decode_point(proof[32 * i : 32 * i + 32], f"proof {names[i]}") for i in range(POINTS)]
        at = 32 * POINTS
        scalars = [g.decode_scalar(proof[at + 32 * j : at + 32 * j + 32], "proof scalar")
                   for j in range((size - at) // 32)]
    except g.GroupError as exc:
        raise InvalidProof(str(exc)) from None
    return points, scalars


def _terms(statement: Statement, context: ProofContext, proof: bytes, source: RandomSource) -> _Terms:
    lay = layout(statement)
    n = lay.n
    (k_point, a_point, s_point, s2_point, t1_point, t2_point), scalars = _decode(statement, proof)
    tau_x, mu = scalars[0], scalars[1]
    l_vec, r_vec = scalars[2 : 2 + n], scalars[2 + n :]
    t, (y, z, w) = _start(statement, context, (k_point, a_point, s_point, s2_point))
    t.append(b"T1", t1_point)
    t.append(b"T2", t2_point)
    (x,) = _challenges(t, b"x")
    beta, beta2 = g.random_scalar(source), g.random_scalar(source)
    t_hat = sum(lk * rk for lk, rk in zip(l_vec, r_vec)) % ORDER
    cz = _constraint_terms(lay, z)
    yinv = pow(y, -1, ORDER)
    g_coef = [-beta * (lk + z) % ORDER for lk in l_vec]
    h_coef, yk = [], 1
    for k in range(n):
        h_coef.append(beta * (z + yk * (cz[k] - r_vec[k])) % ORDER)
        yk = yk * yinv % ORDER
    lz = [(lk + z) % ORDER for lk in l_vec]
    entry = _entry_sums(lay, statement.dim, lz)
    bw = beta * w % ORDER
    entry_coef = [-bw * (entry[i] + lay.offsets[i]) % ORDER for i in range(statement.dim)]
    points = [(beta, a_point), (bw, k_point), (beta * x, s_point), (bw * x, s2_point),
              (-beta2 * x, t1_point), (-beta2 * x * x, t2_point)]
    return _Terms(k_point, points, g_coef, h_coef, entry_coef, (beta2 * tau_x - beta * mu) % ORDER,
                  beta2 * (t_hat - _t0(lay, y, z)) % ORDER)


def _holds(batch: Sequence[_Terms]) -> bool:
    """Whether the batch's weighted equations sum to the identity: one multiplication per proof point and one per
    fixed generator the batch uses (the g_k, h_k, G_i, g_t; B from libsodium's table)."""
    n = max((len(b.g_coef) for b in batch), default=0)
    dim = max((len(b.entry_coef) for b in batch), default=0)
    gc, hc, ec = [0] * n, [0] * n, [0] * dim
    base = gt = 0
    terms: list[bytes] = []
    for b in batch:
        for k, v in enumerate(b.g_coef):
            gc[k] += v
        for k, v in enumerate(b.h_coef):
            hc[k] += v
        for i, v in enumerate(b.entry_coef):
            ec[i] += v
        base += b.base
        gt += b.gt
        terms += [g.mul(c, p) for c, p in b.points]
    gv, hv = g.bit_generators(n)
    gens = g.generators(dim)
    terms += [g.mul(c, p) for c, p in zip(gc, gv)] + [g.mul(c, p) for c, p in zip(hc, hv)]
    terms += [g.mul(c, p) for c, p in zip(ec, gens)]
    terms += [g.mul_base(base), g.mul(gt, g.inner_product_generator())]
    return g.total(terms) == g.IDENTITY


def verify_batch(items: Sequence[tuple[Statement, ProofContext, bytes]],
                 source: RandomSource | None = None) -> list[bytes | InvalidProof]:
    """Per item, K (the device's commitment) when its proof verifies, else the InvalidProof saying why. The proofs
    are checked together (each equation weighted by fresh random scalars from `source`, the OS by default, so a
    batch with an invalid proof sums to the identity with probability 2^-252); a failing batch is halved until the
    invalid proofs are found."""
    rng = source or OsRandom()
    out: list[bytes | InvalidProof] = []
    ready: list[tuple[int, _Terms]] = []
    for at, (statement, context, proof) in enumerate(items):
        try:
            terms = _terms(statement, context, bytes(proof), rng)
        except InvalidProof as exc:
            out.append(exc)
            continue
        out.append(terms.k_point)
        ready.append((at, terms))

    def search(part: list[tuple[int, _Terms]], known_bad: bool) -> None:
        if not part:
            return
        if not known_bad and _holds([t for _, t in part]):
            return
        if len(part) == 1:
            out[part[0][0]] = InvalidProof("proof: the bit-vector proof does not verify (forged, altered, made for "
                                           "another session, round, party or statement, or of an invalid vector)")
            return
        half = len(part) // 2
        first, second = part[:half], part[half:]
        first_holds = _holds([t for _, t in first])
        if not first_holds:
            search(first, True)
        search(second, first_holds)

    search(ready, False)
    return out


def verify(statement: Statement, context: ProofContext, proof: bytes, source: RandomSource | None = None) -> bytes:
    """K, the device's commitment to s·x + e, when `proof` proves `statement` in `context`; InvalidProof
    otherwise."""
    (result,) = verify_batch([(statement, context, proof)], source)
    if isinstance(result, InvalidProof):
        raise result
    return result


def opening_holds(commitments: Sequence[bytes], summed: Sequence[int], summed_blind: int) -> bool:
    """Σ K_u = Σ_i Y_i·G_i + R·B: the contributors' commitments open to the unmasked sum Y (signed integers)
    with the summed blinding R."""
    gens = g.generators(len(summed))
    lhs = g.total(list(commitments))
    rhs = g.total([g.mul(int(y), gen) for y, gen in zip(summed, gens) if int(y) % g.ORDER] + [g.mul_base(summed_blind)])
    return lhs == rhs
