/** A statement as a linear map from one bit vector: what the bit-vector proof (proof.ts) proves (the port of
 * secagg/validity/layout.py; same bit order, coefficients, offsets and constraints).
 *
 * Every constraint a Statement states is a range or a count, so a valid contribution is exactly a vector of bits
 * a ∈ {0, 1}^n with
 * - the device's committed entries c_i = s·x_i + e_i = Σ_k M_ik·a_k + o_i (each bit feeds at most one entry), and
 * - linear constraints Σ_k W_jk·a_k = v_j with public right-hand sides.
 *
 * Bits, in this order (`rangeWeights(w)` decomposes [0, w] exactly):
 * - per segment, in order: Bits(size, m): one bit per entry (M = s); when m < size, the slack m − Σ x_i in
 *   `rangeWeights(m)` and the constraint Σ x_i + slack = m. Signs(size): two bits p, q per entry, x = p − q
 *   (M = s, −s). Ranged(size, low, high): per entry the bits of x − low in `rangeWeights(high − low)` (M = s·w),
 *   o_i += s·low;
 * - the noise (B > 0): per entry the bits of e + B in `rangeWeights(2B)` (M = w), o_i −= B;
 * - per relation (terms, low, high): the slack T − low in `rangeWeights(high − low)` and the constraint
 *   Σ_terms coef·(x_i − low_i) − slack = low − Σ_terms coef·low_i (x_i − low_i is the entry's range bits).
 *
 * Constraints are numbered: the count constraints of Bits segments in segment order, then the relations. */

import { invert } from "@noble/curves/abstract/modular.js";

import { ORDER, Statement, decompose, rangeWeights, relationValue } from "./statement.js";

export interface Layout {
  n: number;
  /** Per bit, the entry it feeds (−1: a slack bit, no entry). */
  entry: number[];
  /** Per bit, M_ik for its entry (0 for slack bits). */
  coef: bigint[];
  /** o_i per entry. */
  offsets: bigint[];
  /** Per constraint j: [[bit, W_jk], …] and v_j. */
  constraints: [[number, bigint][], bigint][];
}

const cache = new WeakMap<Statement, Layout>();

export function layout(st: Statement): Layout {
  const hit = cache.get(st);
  if (hit) return hit;
  const s = st.encodingScale;
  const entry: number[] = [];
  const coef: bigint[] = [];
  const offsets = new Array<bigint>(st.dim).fill(0n);
  const constraints: [[number, bigint][], bigint][] = [];
  const valueBits = new Map<number, [number, bigint][]>(); // ranged entry → its (bit, weight)
  const lows = new Map<number, bigint>();
  const add = (i: number, m: bigint): number => {
    entry.push(i);
    coef.push(m);
    return entry.length - 1;
  };
  const segOffsets = st.offsets();
  st.segments.forEach((seg, n) => {
    const at = segOffsets[n];
    if (seg.kind === "bits") {
      const bits = Array.from({ length: seg.size }, (_, i) => add(at + i, s));
      if (seg.maxOnes < seg.size) {
        const slack = rangeWeights(BigInt(seg.maxOnes)).map((w): [number, bigint] => [add(-1, 0n), w]);
        constraints.push([[...bits.map((k): [number, bigint] => [k, 1n]), ...slack], BigInt(seg.maxOnes)]);
      }
    } else if (seg.kind === "signs") {
      for (let i = 0; i < seg.size; i++) {
        add(at + i, s);
        add(at + i, -s);
      }
    } else {
      for (let i = 0; i < seg.size; i++) {
        valueBits.set(at + i, rangeWeights(seg.high - seg.low).map((w): [number, bigint] => [add(at + i, s * w), w]));
        offsets[at + i] += s * seg.low;
        lows.set(at + i, seg.low);
      }
    }
  });
  if (st.noiseBound) {
    for (let i = 0; i < st.dim; i++) {
      for (const w of rangeWeights(2n * st.noiseBound)) add(i, w);
      offsets[i] -= st.noiseBound;
    }
  }
  for (const rel of st.relations) {
    const terms = rel.terms.flatMap(([i, c]) => (valueBits.get(i) ?? []).map(([k, w]): [number, bigint] => [k, c * w]));
    const slack = rangeWeights(rel.high - rel.low).map((w): [number, bigint] => [add(-1, 0n), -w]);
    constraints.push([[...terms, ...slack], rel.low - rel.terms.reduce((a, [i, c]) => a + c * (lows.get(i) ?? 0n), 0n)]);
  }
  const out: Layout = { n: entry.length, entry, coef, offsets, constraints };
  cache.set(st, out);
  return out;
}

const pmod = (a: bigint, m: bigint): bigint => ((a % m) + m) % m;

/** `decompose(value, width)`; for a value outside [0, width] the same low bits and a last digit that makes
 * Σ w_j·digit_j ≡ value (mod ℓ) — not a bit, so the proof of such a vector does not verify. */
function digits(value: bigint, width: bigint): bigint[] {
  if (value >= 0n && value <= width) return decompose(value, width);
  const weights = rangeWeights(width);
  if (!weights.length) return [];
  const k = BigInt(weights.length - 1);
  const low = pmod(value, 1n << k);
  const out: bigint[] = [];
  for (let j = 0n; j < k; j++) out.push((low >> j) & 1n);
  out.push(pmod((value - low) * invert(pmod(weights[weights.length - 1], ORDER), ORDER), ORDER));
  return out;
}

/** The bits of a contribution (x, e), in `layout` order: every one 0 or 1 exactly when (x, e) satisfies the
 * statement; the map of `layout` gives back s·x + e whatever x and e are. */
export function witness(st: Statement, values: bigint[], noise: bigint[] | null): bigint[] {
  const bits: bigint[] = [];
  const segOffsets = st.offsets();
  st.segments.forEach((seg, n) => {
    const part = values.slice(segOffsets[n], segOffsets[n] + seg.size);
    if (seg.kind === "bits") {
      bits.push(...part);
      if (seg.maxOnes < seg.size) bits.push(...digits(BigInt(seg.maxOnes) - part.reduce((a, v) => a + v, 0n), BigInt(seg.maxOnes)));
    } else if (seg.kind === "signs") {
      for (const v of part) bits.push(...(v === -1n ? [0n, 1n] : [pmod(v, ORDER), 0n]));
    } else {
      for (const v of part) bits.push(...digits(v - seg.low, seg.high - seg.low));
    }
  });
  if (st.noiseBound) {
    if (!noise) throw new Error("noise: a vector of the statement's length is required");
    for (const e of noise) bits.push(...digits(e + st.noiseBound, 2n * st.noiseBound));
  }
  for (const rel of st.relations) bits.push(...digits(relationValue(rel, values) - rel.low, rel.high - rel.low));
  return bits;
}
