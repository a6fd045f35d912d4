/** What one device's contribution to a round must satisfy (secagg/validity/statement.py): segments of the vector
 * (`Bits`, `Signs`, `Ranged`), the encoding scale s and the noise bound B, and their canonical bytes. */

import { bitLength, concat, i64be, u32be, u64be } from "../bytes.js";

export const ORDER = (1n << 252n) + 27742317777372353535851937790883648493n;
export const LIMB_BITS = 16;
export const LIMBS = Math.ceil(bitLength(ORDER) / LIMB_BITS);
export const MAX_RANGE_BITS = 62;

export class StatementError extends Error {}

export type Segment =
  | { tag: 1; kind: "bits"; size: number; maxOnes: number }
  | { tag: 2; kind: "signs"; size: number }
  | { tag: 3; kind: "ranged"; size: number; low: bigint; high: bigint };

export const Bits = (size: number, maxOnes = 1): Segment => ({ tag: 1, kind: "bits", size, maxOnes });
export const Signs = (size: number): Segment => ({ tag: 2, kind: "signs", size });
export const Ranged = (size: number, low: bigint | number, high: bigint | number): Segment => ({ tag: 3, kind: "ranged", size, low: BigInt(low), high: BigInt(high) });

function segmentParams(s: Segment): bigint[] {
  if (s.kind === "bits") return [BigInt(s.maxOnes)];
  if (s.kind === "ranged") return [s.low, s.high];
  return [];
}

function segmentCheck(s: Segment, values: bigint[]): string | null {
  if (s.kind === "bits") {
    if (values.some((v) => v !== 0n && v !== 1n)) return "an entry is not 0 or 1";
    const ones = values.filter((v) => v === 1n).length;
    return ones > s.maxOnes ? `${ones} entries are 1, more than ${s.maxOnes}` : null;
  }
  if (s.kind === "signs") return values.every((v) => v >= -1n && v <= 1n) ? null : "an entry is not −1, 0 or +1";
  const bad = values.find((v) => v < s.low || v > s.high);
  return bad === undefined ? null : `an entry (${bad}) is outside [${s.low}, ${s.high}]`;
}

export const MAX_RELATION_COEF = 1n << 16n;

/** low ≤ Σ coef·x[index] ≤ high over entries of `Ranged` segments (secagg/validity/statement.py `Relation`). */
export interface Relation {
  terms: [number, bigint][];
  low: bigint;
  high: bigint;
}

export const relation = (terms: [number, bigint | number][], low: bigint | number, high: bigint | number): Relation => ({
  terms: terms.map(([i, c]) => [i, BigInt(c)]),
  low: BigInt(low),
  high: BigInt(high),
});

export const relationValue = (r: Relation, values: bigint[]): bigint => r.terms.reduce((a, [i, c]) => a + c * values[i], 0n);

/** Weights of a k-bit decomposition that reaches exactly [0, width]. */
export function rangeWeights(width: bigint): bigint[] {
  if (width <= 0n) return [];
  const k = bitLength(width);
  const out: bigint[] = [];
  for (let j = 0; j < k - 1; j++) out.push(1n << BigInt(j));
  out.push(width - (1n << BigInt(k - 1)) + 1n);
  return out;
}

export function decompose(value: bigint, width: bigint): bigint[] {
  const w = rangeWeights(width);
  if (!w.length) return [];
  const k = w.length;
  const top = value >= 1n << BigInt(k - 1) ? 1n : 0n;
  const low = value - top * w[k - 1];
  const out: bigint[] = [];
  for (let j = 0; j < k - 1; j++) out.push((low >> BigInt(j)) & 1n);
  out.push(top);
  return out;
}

export class Statement {
  constructor(readonly segments: Segment[], readonly encodingScale: bigint = 1n, readonly noiseBound: bigint = 0n, readonly relations: Relation[] = []) {
    if (!segments.length) throw new StatementError("statement: no segments");
    for (const s of segments) {
      if (s.size < 1) throw new StatementError("statement: a segment has no entries");
      if (s.kind === "bits" && s.maxOnes < 1) throw new StatementError("statement: Bits.max_ones must be ≥ 1");
      if (s.kind === "ranged") {
        const absMax = s.low < 0n ? -s.low : s.low;
        const absHigh = s.high < 0n ? -s.high : s.high;
        if (s.high < s.low || bitLength(s.high - s.low) > MAX_RANGE_BITS || bitLength(absMax > absHigh ? absMax : absHigh) > MAX_RANGE_BITS) {
          throw new StatementError(`statement: range [${s.low}, ${s.high}] is empty or too wide`);
        }
      }
    }
    if (encodingScale < 1n || encodingScale >= 1n << 32n) throw new StatementError(`statement: encoding scale ${encodingScale} out of range`);
    if (noiseBound < 0n || bitLength(2n * noiseBound) > MAX_RANGE_BITS) throw new StatementError(`statement: noise bound ${noiseBound} out of range`);
    const ranged = new Set(this.rangedIndices());
    const abs = (v: bigint): bigint => (v < 0n ? -v : v);
    relations.forEach((r, k) => {
      const indices = r.terms.map(([i]) => i);
      if (!indices.length || new Set(indices).size !== indices.length) throw new StatementError(`statement: relation ${k} has no terms or repeats an entry`);
      if (indices.some((i) => !ranged.has(i))) throw new StatementError(`statement: relation ${k} names an entry outside the ranged segments`);
      if (r.terms.some(([, c]) => c === 0n || abs(c) >= MAX_RELATION_COEF)) throw new StatementError(`statement: relation ${k} has a coefficient 0 or beyond ±2^16`);
      if (r.high < r.low || bitLength(r.high - r.low) > MAX_RANGE_BITS || bitLength(abs(r.low) > abs(r.high) ? abs(r.low) : abs(r.high)) > MAX_RANGE_BITS) {
        throw new StatementError(`statement: relation ${k}'s range [${r.low}, ${r.high}] is empty or too wide`);
      }
    });
  }

  /** The entries of the `Ranged` segments, in order (the entries a relation may name). */
  rangedIndices(): number[] {
    const offs = this.offsets();
    return this.segments.flatMap((s, n) => (s.kind === "ranged" ? Array.from({ length: s.size }, (_, i) => offs[n] + i) : []));
  }

  get dim(): number {
    return this.segments.reduce((a, s) => a + s.size, 0);
  }

  withNoise(encodingScale: bigint, noiseBound: bigint): Statement {
    return new Statement(this.segments, encodingScale, noiseBound, this.relations);
  }

  offsets(): number[] {
    let at = 0;
    return this.segments.map((s) => {
      const o = at;
      at += s.size;
      return o;
    });
  }

  check(values: bigint[]): string | null {
    if (values.length !== this.dim) return `length ${values.length}, expected ${this.dim}`;
    const offs = this.offsets();
    for (let i = 0; i < this.segments.length; i++) {
      const s = this.segments[i];
      const why = segmentCheck(s, values.slice(offs[i], offs[i] + s.size));
      if (why) return `entries ${offs[i]}..${offs[i] + s.size - 1}: ${why}`;
    }
    for (let k = 0; k < this.relations.length; k++) {
      const r = this.relations[k];
      const v = relationValue(r, values);
      if (v < r.low || v > r.high) return `relation ${k}: ${v} is outside [${r.low}, ${r.high}]`;
    }
    return null;
  }

  encode(): Uint8Array {
    const parts = [u32be(this.segments.length), u32be(this.dim), u64be(this.encodingScale), u64be(this.noiseBound)];
    for (const s of this.segments) {
      const params = segmentParams(s);
      parts.push(Uint8Array.of(s.tag), u32be(s.size), u32be(params.length), ...params.map(i64be));
    }
    for (const r of this.relations) {
      parts.push(Uint8Array.of(4), u32be(r.terms.length), u32be(2), ...r.terms.flatMap(([i, c]) => [u32be(i), i64be(c)]), i64be(r.low), i64be(r.high));
    }
    return concat(...parts);
  }
}

/** ρ < ℓ as LIMBS little-endian limbs of LIMB_BITS bits. */
export function blindLimbs(blind: bigint): number[] {
  if (blind < 0n || blind >= ORDER) throw new StatementError("blind: must be a scalar in [0, ℓ)");
  const mask = (1n << BigInt(LIMB_BITS)) - 1n;
  return Array.from({ length: LIMBS }, (_, k) => Number((blind >> BigInt(LIMB_BITS * k)) & mask));
}

/** A statement in the JSON form of secagg/validity/statement.py's `Statement.to_json` (the test vectors', the
 * benchmark's): segments ["bits", size, maxOnes] | ["signs", size] | ["ranged", size, low, high]; relations
 * [[[index, coef], …], low, high]. */
export function statementFromJson(spec: { segments: unknown[][]; encoding_scale?: number | string; noise_bound?: number | string; relations?: [[number, number | string][], number | string, number | string][] }): Statement {
  const segs: Segment[] = spec.segments.map((s) => {
    if (s[0] === "bits") return Bits(Number(s[1]), Number(s[2] ?? 1));
    if (s[0] === "signs") return Signs(Number(s[1]));
    if (s[0] === "ranged") return Ranged(Number(s[1]), BigInt(s[2] as number), BigInt(s[3] as number));
    throw new StatementError(`statement: unknown segment ${JSON.stringify(s[0])}`);
  });
  const relations = (spec.relations ?? []).map(([terms, low, high]) => relation(terms.map(([i, c]) => [i, BigInt(c)]), BigInt(low), BigInt(high)));
  return new Statement(segs, BigInt(spec.encoding_scale ?? 1), BigInt(spec.noise_bound ?? 0), relations);
}
