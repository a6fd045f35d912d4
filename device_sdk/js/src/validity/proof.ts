/** Proving (and verifying) that one device's contribution satisfies its round's Statement: the port of
 * secagg/validity/proof.py and transcript.py, byte for byte.
 *
 * The statement is a bit vector a ∈ {0,1}^n with a public linear map to the committed entries and public linear
 * constraints (layout.ts: c_i = s·x_i + e_i = Σ_k M_ik·a_k + o_i, Σ_k W_jk·a_k = v_j). The proof is the range-proof
 * argument of Bulletproofs (Bünz et al., IEEE S&P 2018, §4.1–4.2) without the inner-product argument (l and r are
 * sent), generalised to a vector commitment:
 * - K = Σ c_i·G_i + ρ·B, A = α·B + Σ_k (a_k·g_k + (a_k − 1)·h_k), S = ρ_S·B + Σ_k (sL_k·g_k + sR_k·h_k),
 *   S2 = σ·B + Σ_i (M·sL)_i·G_i; challenges y, z, w (Fiat–Shamir over context, statement, K, A, S, S2);
 * - T1 = t1·g_t + τ1·B, T2 = t2·g_t + τ2·B; challenge x;
 * - l = a − z·1 + x·sL, r = y^n∘(a − 1 + z·1 + x·sR) + Σ_j z^(2+j)·W_j, τ_x = τ1·x + τ2·x², μ = α + wρ + x·(ρ_S + wσ).
 * Wire form: K, A, S, S2, T1, T2 (32 bytes each), τ_x, μ, l_0…l_(n−1), r_0…r_(n−1) (32 bytes each, little-endian).
 * Every blinding is `randbelow(ℓ − 1) + 1` from the injected source, in the Python prover's order (ρ, α, ρ_S, σ,
 * sL_0…sL_(n−1), sR_0…sR_(n−1), τ1, τ2), so a seeded prover reproduces the vectors' proofs byte for byte. The
 * soundness and zero-knowledge arguments are in docs/validation.md. */

import { invert } from "@noble/curves/abstract/modular.js";

import { bigFromLE, concat, u16be, u32be, u64be, utf8 } from "../bytes.js";
import { ByteSource, OsRandom } from "../randomness.js";
import { sha512 } from "../webcrypto.js";
import * as g from "./group.js";
import { Point } from "./group.js";
import { Layout, layout, witness } from "./layout.js";
import { Statement } from "./statement.js";

export const TRANSCRIPT_DOMAIN = utf8("fa-validity/v3/transcript");
const ORDER = g.ORDER;
/** K, A, S, S2, T1, T2. */
const POINTS = 6;

export class InvalidProof extends Error {}

/** What a proof is bound to: the query, round, cohort session id, party and the device's own task digest (a proof
 * made for another task does not verify). */
export interface ProofContext {
  sessionId: Uint8Array;
  queryId: string;
  round: number;
  party: number;
  /** The device's digest of its task (taskDigest.ts); 32 zero bytes when absent. */
  taskDigest?: Uint8Array;
}

const NO_TASK = new Uint8Array(32);

/** u16 len ‖ session id ‖ u16 len ‖ query id ‖ u64 round ‖ u32 party ‖ u16 len ‖ task digest (big-endian). */
export function encodeContext(c: ProofContext): Uint8Array {
  const q = utf8(c.queryId);
  const digest = c.taskDigest ?? NO_TASK;
  return concat(u16be(c.sessionId.length), c.sessionId, u16be(q.length), q, u64be(BigInt(c.round)), u32be(c.party), u16be(digest.length), digest);
}

/** SHA-512 over length-prefixed, labelled fields; a challenge hashes everything appended so far, reduced mod ℓ. */
class Transcript {
  private chunks: Uint8Array[] = [];
  constructor(context: ProofContext, statement: Uint8Array) {
    this.append("domain", TRANSCRIPT_DOMAIN);
    this.append("context", encodeContext(context));
    this.append("statement", statement);
  }
  append(label: string, data: Uint8Array): void {
    const l = utf8(label);
    this.chunks.push(u16be(l.length), l, u32be(data.length), data);
  }
  async challenge(): Promise<bigint> {
    return bigFromLE(await sha512(concat(...this.chunks))) % ORDER;
  }
}

async function challenges(t: Transcript, labels: string): Promise<bigint[]> {
  const out: bigint[] = [];
  for (const label of labels) {
    t.append("challenge", utf8(label));
    const c = await t.challenge();
    if (c === 0n) throw new InvalidProof("proof: a zero challenge"); // probability 2^-252
    out.push(c);
  }
  return out;
}

/** The transcript over K, A, S, S2 and the challenges y, z, w. */
async function start(st: Statement, context: ProofContext, points: Uint8Array[]): Promise<[Transcript, bigint[]]> {
  const t = new Transcript(context, st.encode());
  ["K", "A", "S", "S2"].forEach((label, i) => t.append(label, points[i]));
  return [t, await challenges(t, "yzw")];
}

export const proofSize = (st: Statement): number => 32 * POINTS + 32 * (2 + 2 * layout(st).n);

const smod = g.smod;

/** Per bit, Σ_j z^(2+j)·W_jk. */
function constraintTerms(lay: Layout, z: bigint): bigint[] {
  const out = new Array<bigint>(lay.n).fill(0n);
  let zj = (z * z) % ORDER;
  for (const [terms] of lay.constraints) {
    for (const [k, w] of terms) out[k] = smod(out[k] + zj * w);
    zj = (zj * z) % ORDER;
  }
  return out;
}

/** t(0) of a valid witness: (z − z²)·⟨1, y^n⟩ − Σ_j z^(3+j)·⟨1, W_j⟩ + Σ_j z^(2+j)·v_j. */
function t0(lay: Layout, y: bigint, z: bigint): bigint {
  let ysum = 0n;
  let yk = 1n;
  for (let k = 0; k < lay.n; k++) {
    ysum += yk;
    yk = (yk * y) % ORDER;
  }
  let out = (z - z * z) * ysum;
  let zj = (z * z) % ORDER;
  for (const [terms, v] of lay.constraints) {
    out += zj * (v - z * terms.reduce((a, [, w]) => a + w, 0n));
    zj = (zj * z) % ORDER;
  }
  return smod(out);
}

function powers(base: bigint, n: number): bigint[] {
  const out: bigint[] = [];
  let acc = 1n;
  for (let k = 0; k < n; k++) {
    out.push(acc);
    acc = (acc * base) % ORDER;
  }
  return out;
}

/** (M·vector)_i per entry. */
function entrySums(lay: Layout, dim: number, vector: bigint[]): bigint[] {
  const out = new Array<bigint>(dim).fill(0n);
  for (let k = 0; k < lay.n; k++) {
    const i = lay.entry[k];
    if (i >= 0) out[i] += lay.coef[k] * vector[k];
  }
  return out.map(smod);
}

/** What `weightedBits` and `bitCommitment` need of a point (a noble point; the tests pass a tracing stand-in to show
 * that the operations do not depend on the bits). */
export interface GroupElement<T> {
  add(other: T): T;
  multiply(scalar: bigint): T;
}

/** digit·P: P or the identity for a bit (an addition's worth of work either way), a multiplication for anything
 * else (only `proveBits` with a non-binary vector has other digits). */
function scaled<T extends GroupElement<T>>(digit: bigint, p: T, zero: T): T {
  if (digit === 0n || digit === 1n) return [zero, p][Number(digit)];
  return smod(digit) === 0n ? zero : p.multiply(smod(digit));
}

/** Σ_k bits_k·M_k·G_entry(k), without a variable-time multi-scalar multiplication over the device's data: the bits are
 * grouped by coefficient (public), one addition per bit (a 0 bit adds the identity, noble's complete addition formula
 * either way) and one constant-time `multiply` per distinct coefficient — even when a group's sum is the identity —
 * so the curve operations do not depend on the bits (at the algorithmic level, as noble's own constant-time claims:
 * BigInt arithmetic itself is not constant-time). */
export function weightedBits<T extends GroupElement<T>>(lay: Layout, bits: bigint[], gens: T[], zero: T): T {
  const groups = new Map<bigint, T>();
  for (let k = 0; k < lay.n; k++) {
    const i = lay.entry[k];
    if (i < 0) continue;
    const m = lay.coef[k];
    groups.set(m, (groups.get(m) ?? zero).add(scaled(bits[k], gens[i], zero)));
  }
  let out = zero;
  for (const [m, p] of groups) out = out.add(p.multiply(smod(m)));
  return out;
}

/** Σ_k (a_k·g_k + (a_k − 1)·h_k): g_k or −h_k per bit, one addition each whatever the bit. */
export function bitCommitment<T extends GroupElement<T>>(a: bigint[], gv: T[], negHv: T[], zero: T): T {
  let out = zero;
  for (let k = 0; k < a.length; k++) {
    const d = a[k];
    out = out.add(d === 0n || d === 1n ? [negHv[k], gv[k]][Number(d)] : scaled(d, gv[k], zero).add(scaled(1n - d, negHv[k], zero)));
  }
  return out;
}

/** Σ o_i·G_i (public: the statement's offsets), one multiplication per distinct offset. */
function offsetPoint(lay: Layout, gens: Point[]): Point {
  const groups = new Map<bigint, Point>();
  lay.offsets.forEach((o, i) => {
    if (smod(o) !== 0n) groups.set(o, (groups.get(o) ?? g.IDENTITY).add(gens[i]));
  });
  return g.total([...groups].map(([o, p]) => g.mul(o, p)));
}

/** The proof that `values` (x) and `noise` (e) satisfy `statement`, and the blinding ρ of K = Σ (s·x_i + e_i)·G_i + ρ·B
 * that the device adds to its masked vector. Throws when the inputs do not satisfy the statement. */
export async function prove(st: Statement, context: ProofContext, values: bigint[], noise: bigint[] | null, source: ByteSource): Promise<[Uint8Array, bigint]> {
  const why = st.check(values);
  if (why) throw new Error(`contribution: does not satisfy its statement: ${why}`);
  if (st.noiseBound) {
    if (!noise || noise.length !== st.dim) throw new Error("noise: a vector of the statement's length is required");
    if (noise.some((e) => e > st.noiseBound || -e > st.noiseBound)) throw new Error(`noise: an entry exceeds the bound ${st.noiseBound}`);
  } else if (noise && noise.some((e) => e !== 0n)) throw new Error("noise: the statement allows none");
  return proveBits(st, context, witness(st, values, noise), source);
}

/** The proof for bits `a` in `layout(statement)` order, with no check that they are bits or meet the constraints
 * (`prove` checks the contribution; the tests use this directly to show that a false statement does not verify). */
export async function proveBits(st: Statement, context: ProofContext, a: bigint[], source: ByteSource): Promise<[Uint8Array, bigint]> {
  const lay = layout(st);
  const n = lay.n;
  if (a.length !== n) throw new Error(`bits: ${a.length}, expected ${n}`);
  const gens = await g.generators(st.dim);
  const [gv, hv] = await g.bitGenerators(n);
  const gt = await g.innerProductGenerator();
  const rnd = (): Promise<bigint> => g.randomScalar(source);
  const rho = await rnd();
  const alpha = await rnd();
  const rhoS = await rnd();
  const sigma = await rnd();
  const sL: bigint[] = [];
  for (let k = 0; k < n; k++) sL.push(await rnd());
  const sR: bigint[] = [];
  for (let k = 0; k < n; k++) sR.push(await rnd());
  const tau1 = await rnd();
  const tau2 = await rnd();
  const kPoint = weightedBits(lay, a, gens, g.IDENTITY).add(offsetPoint(lay, gens)).add(g.mulBase(rho));
  const aPoint = g.mulBase(alpha).add(bitCommitment(a, gv, hv.map((h) => h.negate()), g.IDENTITY));
  // S and S2: multi-scalar multiplications by the random sL, sR with noble's Pippenger, the device's main cost. Their
  // timing depends only on sL and sR, never on the device's bits or values. Once the proof is out, sL is no longer
  // independent of the bits (l = a − z·1 + x·sL), so the method must not leak much of sL either: noble's Pippenger runs
  // the same point operations whatever the scalars (only its bucket indices follow them), where a wNAF method
  // (mulAddUnsafe, multiplyUnsafe) skips zero digits and would tell the digit count of sL, hence something of the bits.
  const sPoint = g.mulBase(rhoS).add(g.msm([...gv, ...hv], [...sL, ...sR]));
  const s2Point = g.mulBase(sigma).add(g.msm(gens, entrySums(lay, st.dim, sL)));
  const head = [kPoint, aPoint, sPoint, s2Point].map((p) => p.toBytes());
  const [t, [y, z, w]] = await start(st, context, head);
  const yp = powers(y, n);
  const cz = constraintTerms(lay, z);
  const l0 = a.map((ak) => smod(ak - z));
  const r0 = a.map((ak, k) => smod(yp[k] * (ak - 1n + z) + cz[k]));
  const r1 = sR.map((x, k) => (yp[k] * x) % ORDER);
  let t1 = 0n;
  let t2 = 0n;
  for (let k = 0; k < n; k++) {
    t1 += l0[k] * r1[k] + sL[k] * r0[k];
    t2 += sL[k] * r1[k];
  }
  t1 %= ORDER;
  t2 %= ORDER;
  const t1Point = g.mul(t1, gt).add(g.mulBase(tau1)).toBytes();
  const t2Point = g.mul(t2, gt).add(g.mulBase(tau2)).toBytes();
  t.append("T1", t1Point);
  t.append("T2", t2Point);
  const [x] = await challenges(t, "x");
  const lVec = l0.map((v, k) => (v + x * sL[k]) % ORDER);
  const rVec = r0.map((v, k) => (v + x * r1[k]) % ORDER);
  const tauX = (tau1 * x + tau2 * x * x) % ORDER;
  const mu = (alpha + w * rho + x * (rhoS + w * sigma)) % ORDER;
  const wire = concat(...head, t1Point, t2Point, ...[tauX, mu, ...lVec, ...rVec].map(g.scalarBytes));
  if (wire.length !== proofSize(st)) throw new Error("proof: internal size mismatch");
  return [wire, rho];
}

/** K, the device's commitment to s·x + e, when `proof` proves `statement` in `context`; InvalidProof otherwise. The
 * two verification equations are checked as one multi-scalar multiplication, the polynomial one weighted by a random
 * scalar from `source` (the OS by default). Public data only, so the variable-time Pippenger is fine here. */
export async function verify(st: Statement, context: ProofContext, proof: Uint8Array, source: ByteSource = new OsRandom()): Promise<Point> {
  const lay = layout(st);
  const n = lay.n;
  const size = proofSize(st);
  if (proof.length !== size) throw new InvalidProof(`proof: ${proof.length} bytes, expected ${size} for this round's statement`);
  const names = ["K", "A", "S", "S2", "T1", "T2"];
  const pts = names.map((name, i) => {
    try {
      return g.decodePoint(proof.subarray(32 * i, 32 * i + 32), `proof ${name}`);
    } catch (exc) {
      throw new InvalidProof((exc as Error).message);
    }
  });
  const [kPoint, aPoint, sPoint, s2Point, t1Point, t2Point] = pts;
  const scalars: bigint[] = [];
  for (let at = 32 * POINTS; at < size; at += 32) {
    const v = bigFromLE(proof.subarray(at, at + 32));
    if (v >= ORDER) throw new InvalidProof("proof scalar: not a canonical scalar");
    scalars.push(v);
  }
  const [tauX, mu] = scalars;
  const lVec = scalars.slice(2, 2 + n);
  const rVec = scalars.slice(2 + n);
  const [t, [y, z, w]] = await start(st, context, [0, 1, 2, 3].map((i) => proof.subarray(32 * i, 32 * i + 32)));
  t.append("T1", proof.subarray(128, 160));
  t.append("T2", proof.subarray(160, 192));
  const [x] = await challenges(t, "x");
  const beta = await g.randomScalar(source);
  let tHat = 0n;
  for (let k = 0; k < n; k++) tHat += lVec[k] * rVec[k];
  const cz = constraintTerms(lay, z);
  const yinv = invert(y, ORDER);
  const gCoef = lVec.map((lk) => smod(-(lk + z)));
  const hCoef: bigint[] = [];
  let yk = 1n;
  for (let k = 0; k < n; k++) {
    hCoef.push(smod(z + yk * (cz[k] - rVec[k])));
    yk = (yk * yinv) % ORDER;
  }
  const entry = entrySums(lay, st.dim, lVec.map((lk) => lk + z));
  const eCoef = entry.map((v, i) => smod(-w * (v + lay.offsets[i])));
  const gens = await g.generators(st.dim);
  const [gv, hv] = await g.bitGenerators(n);
  const gt = await g.innerProductGenerator();
  const sum = g.msm(
    [aPoint, kPoint, sPoint, s2Point, t1Point, t2Point, g.BASE, gt, ...gv, ...hv, ...gens],
    [1n, w, x, x * w, -beta * x, -beta * x * x, beta * tauX - mu, beta * (tHat - t0(lay, y, z)), ...gCoef, ...hCoef, ...eCoef],
  );
  if (!sum.is0()) {
    throw new InvalidProof("proof: the bit-vector proof does not verify (forged, altered, made for another session, round, party or statement, or of an invalid vector)");
  }
  return kPoint;
}

/** K = Σ (s·x_i + e_i)·G_i + ρ·B from the openings. */
export async function commitmentOf(st: Statement, values: bigint[], noise: bigint[] | null, blind: bigint): Promise<Point> {
  const gens = await g.generators(st.dim);
  return g.total([...values.map((v, i) => g.mul(st.encodingScale * v + (noise ? noise[i] : 0n), gens[i])), g.mulBase(blind)]);
}
