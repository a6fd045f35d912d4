/** Proving (and verifying) that one device's contribution satisfies its round's Statement (the port of
 * secagg/validity/proof.py, sigma.py and transcript.py): Pedersen commitments, OR proofs (Cramer, Damgård,
 * Schoenmakers, "Proofs of Partial Knowledge and Simplified Design of Witness Hiding Protocols", CRYPTO 1994) and a
 * linear Schnorr proof, made non-interactive with one Fiat–Shamir challenge (SHA-512 over length-prefixed, labelled
 * fields). Every blinding and nonce is `randbelow(ℓ − 1) + 1` from the injected source, in the Python prover's
 * order, so a seeded prover reproduces the vectors' proofs byte for byte. */

import { bigFromLE, concat, u16be, u32be, u64be, utf8 } from "../bytes.js";
import { ByteSource } from "../randomness.js";
import { sha512 } from "../webcrypto.js";
import * as g from "./group.js";
import { Point } from "./group.js";
import { Segment, Statement, decompose, rangeWeights, relationValue } from "./statement.js";

export const TRANSCRIPT_DOMAIN = utf8("fa-validity/v2/transcript");

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
    return bigFromLE(await sha512(concat(...this.chunks))) % g.ORDER;
  }
}

type Offset = Point | null;

class OrProver {
  private constructor(readonly trueBranch: number, readonly witness: bigint, readonly nonce: bigint, readonly cs: bigint[], readonly zs: bigint[], readonly announcements: Point[]) {}

  static async start(point: Point, offsets: Offset[], trueBranch: number, witness: bigint, source: ByteSource): Promise<OrProver> {
    const n = offsets.length;
    const cs = new Array<bigint>(n).fill(0n);
    const zs = new Array<bigint>(n).fill(0n);
    const ann = new Array<Point>(n);
    const nonce = await g.randomScalar(source);
    for (let j = 0; j < n; j++) {
      const shifted = offsets[j] === null ? point : point.subtract(offsets[j] as Point);
      if (j === trueBranch) ann[j] = g.mulBase(nonce);
      else {
        cs[j] = await g.randomScalar(source);
        zs[j] = await g.randomScalar(source);
        ann[j] = g.mulBase(zs[j]).subtract(g.mul(cs[j], shifted));
      }
    }
    return new OrProver(trueBranch, witness, nonce, cs, zs, ann);
  }

  finish(challenge: bigint): bigint[] {
    const t = this.trueBranch;
    const others = this.cs.reduce((a, c, j) => (j === t ? a : a + c), 0n);
    this.cs[t] = g.smod(challenge - others);
    this.zs[t] = g.smod(this.nonce + this.cs[t] * this.witness);
    return [...this.cs.slice(0, -1), ...this.zs];
  }
}

class LinearProver {
  private constructor(readonly values: bigint[], readonly blind: bigint, readonly nonces: bigint[], readonly blindNonce: bigint, readonly announcement: Point) {}

  static async start(gens: Point[], values: bigint[], blind: bigint, source: ByteSource): Promise<LinearProver> {
    const nonces: bigint[] = [];
    for (let i = 0; i < values.length; i++) nonces.push(await g.randomScalar(source));
    const blindNonce = await g.randomScalar(source);
    const ann = g.total([...nonces.map((a, i) => g.mul(a, gens[i])), g.mulBase(blindNonce)]);
    return new LinearProver(values, blind, nonces, blindNonce, ann);
  }

  finish(challenge: bigint): bigint[] {
    return [...this.nonces.map((a, i) => g.smod(a + challenge * this.values[i])), g.smod(this.blindNonce + challenge * this.blind)];
  }
}

type Bits = Extract<Segment, { kind: "bits" }>;
const bitsMode = (s: Bits): "one_hot" | "bits" | "counted" => (s.maxOnes === 1 ? "one_hot" : s.maxOnes >= s.size ? "bits" : "counted");
const orScalars = (branches: number): number => 2 * branches - 1;

export function proofShape(st: Statement): [number, number] {
  let points = 0;
  let scalars = 0;
  for (const s of st.segments) {
    if (s.kind === "bits") {
      const mode = bitsMode(s);
      if (mode === "one_hot") {
        points += 1;
        scalars += orScalars(s.size + 1);
      } else {
        points += s.size;
        scalars += s.size * orScalars(2);
        if (mode === "counted") {
          const k = rangeWeights(BigInt(s.maxOnes)).length;
          points += k;
          scalars += k * orScalars(2) + s.size + 1;
        }
      }
    } else if (s.kind === "signs") {
      points += s.size;
      scalars += s.size * orScalars(3);
    }
  }
  for (const s of st.segments) {
    if (s.kind !== "ranged") continue;
    const k = rangeWeights(s.high - s.low).length;
    points += s.size * k;
    scalars += s.size * k * orScalars(2);
  }
  if (st.noiseBound) {
    const k = rangeWeights(2n * st.noiseBound).length;
    points += st.dim * k;
    scalars += st.dim * k * orScalars(2);
  }
  for (const r of st.relations) {
    const k = rangeWeights(r.high - r.low).length;
    points += k;
    scalars += k * orScalars(2);
  }
  if (st.relations.length) scalars += st.rangedIndices().length + 1;
  return [points, scalars];
}

export const proofSize = (st: Statement): number => {
  const [points, scalars] = proofShape(st);
  return 32 + 32 * points + 32 * scalars;
};

interface Builder {
  points: Point[];
  provers: (OrProver | LinearProver)[];
  valuePoints: Point[];
}

function weightedTotal(columns: Point[][], weights: bigint[]): Point {
  return g.total(weights.map((w, j) => g.mul(w, g.total(columns[j]))));
}

/** Per entry, the base its bits are committed under: G_i, plus Σ_k coef_ki·H_k for the relations naming it. */
async function relationBases(st: Statement, gens: Point[]): Promise<Point[]> {
  const bases = [...gens];
  for (let k = 0; k < st.relations.length; k++) {
    const h = await g.relationGenerator(k);
    for (const [i, c] of st.relations[k].terms) bases[i] = bases[i].add(g.mul(c, h));
  }
  return bases;
}

async function proveRanged(b: Builder, gens: Point[], values: bigint[], low: bigint, high: bigint, source: ByteSource): Promise<[Point, bigint]> {
  const weights = rangeWeights(high - low);
  const columns: Point[][] = weights.map(() => []);
  let blind = 0n;
  for (let i = 0; i < gens.length; i++) {
    const bits = decompose(values[i] - low, high - low);
    for (let j = 0; j < weights.length; j++) {
      const q = await g.randomScalar(source);
      const d = g.commit(bits[j], q, gens[i]);
      b.points.push(d);
      b.provers.push(await OrProver.start(d, [null, gens[i]], Number(bits[j]), q, source));
      columns[j].push(d);
      blind += weights[j] * q;
    }
  }
  const shift = low ? [g.mul(low, g.total(gens))] : [];
  return [g.total([weightedTotal(columns, weights), ...shift]), g.smod(blind)];
}

/** The proof that `values` (x) and `noise` (e) satisfy `statement`, and the blinding ρ of K = Σ (s·x_i + e_i)·G_i + ρ·B. */
export async function prove(st: Statement, context: ProofContext, values: bigint[], noise: bigint[] | null, source: ByteSource): Promise<[Uint8Array, bigint]> {
  const why = st.check(values);
  if (why) throw new Error(`contribution: does not satisfy its statement: ${why}`);
  if (st.noiseBound) {
    if (!noise || noise.length !== st.dim) throw new Error("noise: a vector of the statement's length is required");
    if (noise.some((e) => e > st.noiseBound || -e > st.noiseBound)) throw new Error(`noise: an entry exceeds the bound ${st.noiseBound}`);
  } else if (noise && noise.some((e) => e !== 0n)) throw new Error("noise: the statement allows none");
  const gens = await g.generators(st.dim);
  const b: Builder = { points: [], provers: [], valuePoints: [] };
  let valueBlind = 0n;
  const rangedLater: [Extract<Segment, { kind: "ranged" }>, number][] = [];
  const offsets = st.offsets();
  for (let n = 0; n < st.segments.length; n++) {
    const seg = st.segments[n];
    const at = offsets[n];
    const sg = gens.slice(at, at + seg.size);
    const sv = values.slice(at, at + seg.size);
    if (seg.kind === "bits") {
      const mode = bitsMode(seg);
      if (mode === "one_hot") {
        const r = await g.randomScalar(source);
        const hot = sv.findIndex((v) => v !== 0n);
        const v = g.commit(hot >= 0 ? 1n : 0n, r, hot >= 0 ? sg[hot] : gens[0]);
        b.points.push(v);
        b.provers.push(await OrProver.start(v, [null, ...sg], hot >= 0 ? hot + 1 : 0, r, source));
        b.valuePoints.push(v);
        valueBlind += r;
        continue;
      }
      const sigma = mode === "counted" ? await g.sumGenerator() : null;
      const segPoints: Point[] = [];
      let segBlind = 0n;
      for (let i = 0; i < sg.length; i++) {
        const base = sigma ? sg[i].add(sigma) : sg[i];
        const r = await g.randomScalar(source);
        const c = g.commit(sv[i], r, base);
        b.points.push(c);
        b.provers.push(await OrProver.start(c, [null, base], Number(sv[i]), r, source));
        segPoints.push(c);
        segBlind += r;
      }
      if (mode === "counted" && sigma) {
        const weights = rangeWeights(BigInt(seg.maxOnes));
        const bits = decompose(sv.reduce((a, v) => a + v, 0n), BigInt(seg.maxOnes));
        for (let j = 0; j < weights.length; j++) {
          const q = await g.randomScalar(source);
          const e = g.commit(bits[j], q, sigma);
          b.points.push(e);
          b.provers.push(await OrProver.start(e, [null, sigma], Number(bits[j]), q, source));
          segPoints.push(g.mul(weights[j], e).negate());
          segBlind -= weights[j] * q;
        }
        const vSeg = g.total(segPoints);
        b.provers.push(await LinearProver.start(sg, sv, g.smod(segBlind), source));
        b.valuePoints.push(vSeg);
      } else b.valuePoints.push(...segPoints);
      valueBlind += segBlind;
    } else if (seg.kind === "signs") {
      for (let i = 0; i < sg.length; i++) {
        const r = await g.randomScalar(source);
        const c = g.commit(sv[i], r, sg[i]);
        b.points.push(c);
        b.provers.push(await OrProver.start(c, [null, sg[i], sg[i].negate()], sv[i] === 0n ? 0 : sv[i] === 1n ? 1 : 2, r, source));
        b.valuePoints.push(c);
        valueBlind += r;
      }
    } else rangedLater.push([seg, at]);
  }
  const bases = st.relations.length ? await relationBases(st, gens) : gens;
  const rangedPoints: Point[] = [];
  let rangedBlind = 0n;
  for (const [seg, at] of rangedLater) {
    const [point, blind] = await proveRanged(b, bases.slice(at, at + seg.size), values.slice(at, at + seg.size), seg.low, seg.high, source);
    rangedPoints.push(point);
    rangedBlind += blind;
  }
  let noiseBlind = 0n;
  if (st.noiseBound) [, noiseBlind] = await proveRanged(b, gens, noise as bigint[], -st.noiseBound, st.noiseBound, source);
  for (let k = 0; k < st.relations.length; k++) {
    const r = st.relations[k];
    const [point, blind] = await proveRanged(b, [await g.relationGenerator(k)], [relationValue(r, values)], r.low, r.high, source);
    rangedPoints.push(point.negate());
    rangedBlind -= blind;
  }
  if (rangedLater.length) {
    const vRanged = g.total(rangedPoints);
    if (st.relations.length) {
      const indices = st.rangedIndices();
      b.provers.push(await LinearProver.start(indices.map((i) => gens[i]), indices.map((i) => values[i]), g.smod(rangedBlind), source));
    }
    b.valuePoints.push(vRanged);
    valueBlind += rangedBlind;
  }
  const t = new Transcript(context, st.encode());
  for (const p of b.points) t.append("C", p.toBytes());
  for (const pr of b.provers) for (const a of pr instanceof OrProver ? pr.announcements : [pr.announcement]) t.append("A", a.toBytes());
  const c = await t.challenge();
  const scalars = b.provers.flatMap((pr) => pr.finish(c));
  const rho = g.smod(st.encodingScale * valueBlind + noiseBlind);
  const wire = concat(g.scalarBytes(c), ...b.points.map((p) => p.toBytes()), ...scalars.map(g.scalarBytes));
  if (wire.length !== proofSize(st)) throw new Error("proof: internal size mismatch");
  return [wire, rho];
}

/** K, the device's commitment to s·x + e, when `proof` proves `statement` in `context`; InvalidProof otherwise. */
export async function verify(st: Statement, context: ProofContext, proof: Uint8Array): Promise<Point> {
  if (proof.length !== proofSize(st)) throw new InvalidProof(`proof: ${proof.length} bytes, expected ${proofSize(st)} for this round's statement`);
  const [nPoints] = proofShape(st);
  const scalarAt = (pos: number, what: string): bigint => {
    const v = bigFromLE(proof.subarray(pos, pos + 32));
    if (v >= g.ORDER) throw new InvalidProof(`${what}: not a canonical scalar`);
    return v;
  };
  const c = scalarAt(0, "challenge");
  let pAt = 32;
  let sAt = 32 + 32 * nPoints;
  const point = (what: string): Point => {
    try {
      return g.decodePoint(proof.subarray(pAt, (pAt += 32)), what);
    } catch (exc) {
      throw new InvalidProof((exc as Error).message);
    }
  };
  const scalars = (n: number, what: string): bigint[] => Array.from({ length: n }, () => scalarAt((sAt += 32) - 32, what));
  const gens = await g.generators(st.dim);
  const checks: ({ kind: "or"; point: Point; offsets: Offset[] } | { kind: "linear"; point: Point; gens: Point[] })[] = [];
  const valuePoints: Point[] = [];
  const readRanged = (gs: Point[], low: bigint, high: bigint, what: string): Point => {
    const weights = rangeWeights(high - low);
    const columns: Point[][] = weights.map(() => []);
    for (let i = 0; i < gs.length; i++) {
      for (let j = 0; j < weights.length; j++) {
        const d = point(`${what} entry ${i} bit commitment`);
        checks.push({ kind: "or", point: d, offsets: [null, gs[i]] });
        columns[j].push(d);
      }
    }
    return g.total([weightedTotal(columns, weights), ...(low ? [g.mul(low, g.total(gs))] : [])]);
  };
  const offsets = st.offsets();
  const rangedLater: [Extract<Segment, { kind: "ranged" }>, number][] = [];
  for (let n = 0; n < st.segments.length; n++) {
    const seg = st.segments[n];
    const sg = gens.slice(offsets[n], offsets[n] + seg.size);
    if (seg.kind === "bits") {
      const mode = bitsMode(seg);
      if (mode === "one_hot") {
        const v = point(`segment ${n} commitment`);
        checks.push({ kind: "or", point: v, offsets: [null, ...sg] });
        valuePoints.push(v);
        continue;
      }
      const sigma = mode === "counted" ? await g.sumGenerator() : null;
      const segPoints: Point[] = [];
      sg.forEach((gen, i) => {
        const cpt = point(`segment ${n} entry ${i} commitment`);
        checks.push({ kind: "or", point: cpt, offsets: [null, sigma ? gen.add(sigma) : gen] });
        segPoints.push(cpt);
      });
      if (sigma) {
        for (const w of rangeWeights(BigInt(seg.maxOnes))) {
          const e = point(`segment ${n} count bit commitment`);
          checks.push({ kind: "or", point: e, offsets: [null, sigma] });
          segPoints.push(g.mul(w, e).negate());
        }
        const vSeg = g.total(segPoints);
        checks.push({ kind: "linear", point: vSeg, gens: sg });
        valuePoints.push(vSeg);
      } else valuePoints.push(...segPoints);
    } else if (seg.kind === "signs") {
      sg.forEach((gen, i) => {
        const cpt = point(`segment ${n} entry ${i} commitment`);
        checks.push({ kind: "or", point: cpt, offsets: [null, gen, gen.negate()] });
        valuePoints.push(cpt);
      });
    } else rangedLater.push([seg, offsets[n]]);
  }
  const bases = st.relations.length ? await relationBases(st, gens) : gens;
  const rangedPoints = rangedLater.map(([seg, at]) => readRanged(bases.slice(at, at + seg.size), seg.low, seg.high, `range segment at ${at}`));
  const noisePoint = st.noiseBound ? readRanged(gens, -st.noiseBound, st.noiseBound, "noise") : g.IDENTITY;
  for (let k = 0; k < st.relations.length; k++) {
    const r = st.relations[k];
    rangedPoints.push(readRanged([await g.relationGenerator(k)], r.low, r.high, `relation ${k}`).negate());
  }
  if (rangedLater.length) {
    const vRanged = g.total(rangedPoints);
    if (st.relations.length) checks.push({ kind: "linear", point: vRanged, gens: st.rangedIndices().map((i) => gens[i]) });
    valuePoints.push(vRanged);
  }
  const t = new Transcript(context, st.encode());
  for (let i = 0; i < nPoints; i++) t.append("C", proof.subarray(32 + 32 * i, 64 + 32 * i));
  for (const chk of checks) {
    if (chk.kind === "or") {
      const nb = chk.offsets.length;
      const cs = scalars(nb - 1, "branch challenge");
      const zs = scalars(nb, "response");
      cs.push(g.smod(c - cs.reduce((a, x) => a + x, 0n)));
      chk.offsets.forEach((o, j) => t.append("A", g.mulBase(zs[j]).subtract(g.mul(cs[j], o === null ? chk.point : chk.point.subtract(o))).toBytes()));
    } else {
      const zs = scalars(chk.gens.length, "linear response");
      const [s] = scalars(1, "linear blinding response");
      t.append("A", g.total([...zs.map((z, i) => g.mul(z, chk.gens[i])), g.mulBase(s)]).subtract(g.mul(c, chk.point)).toBytes());
    }
  }
  if ((await t.challenge()) !== c) {
    throw new InvalidProof("proof: the challenge does not match the transcript (forged, altered, or made for another session, round, party or statement)");
  }
  return g.total([g.mul(st.encodingScale, g.total(valuePoints)), noisePoint]);
}

/** K = Σ (s·x_i + e_i)·G_i + ρ·B from the openings. */
export async function commitmentOf(st: Statement, values: bigint[], noise: bigint[] | null, blind: bigint): Promise<Point> {
  const gens = await g.generators(st.dim);
  return g.total([...values.map((v, i) => g.mul(st.encodingScale * v + (noise ? noise[i] : 0n), gens[i])), g.mulBase(blind)]);
}
