/** Integer noise samplers for distributed DP (the port of queries/dp/noise.py), drawing every word from an injected
 * byte source exactly as the Python samplers do, so seeded draws match the known-answer vectors.
 *
 * A word w (8 bytes, little-endian) gives U = (⌊w / 2^12⌋ + ½)·2^−52 ∈ [2^−53, 1 − 2^−53], exact in binary64.
 * - discrete Laplace (scale t): negative if bit 0 of w is set; magnitude ⌊−t·ln U⌋; (negative, 0) rejected;
 * - discrete Gaussian N_Z(0, σ²) (Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy",
 *   Algorithms 2 and 3): candidate i reads words 2i (the discrete-Laplace proposal with t = ⌊σ⌋ + 1) and 2i + 1 (V);
 *   kept when the proposal is valid and V < exp(−(|Y| − σ²/t)²/(2σ²));
 * - Poisson(λ): λ < 10 by inversion of the tabulated cdf on 0..127 (one word per draw), λ ≥ 10 by Hörmann's PTRS
 *   ("The transformed rejection method for generating Poisson random variables", 1993), try i reading U from word
 *   2i and V from word 2i + 1;
 * - Skellam Sk(μ) = Poisson(μ/2) − Poisson(μ/2) (variance μ): 2·size Poisson draws, value i = P_i − P_{size+i}.
 * Candidates are drawn in the same batches as the Python samplers (surplus words do not change the values). The
 * comparisons use binary64 `Math.log`, `Math.exp` and `Math.log1p`; see docs/vectors.md on last-place differences. */

import { ByteSource } from "../randomness.js";

export class PrivacyError extends Error {}

export const MECHANISMS = ["discrete_gaussian", "skellam", "none"] as const;
export const MAX_SIGMA = 1e9;
export const MIN_SIGMA = 0.01;
export const MAX_MU = 1e15;
const POISSON_INVERSION_MAX = 10.0;
const POISSON_TABLE_K = 127;
/** ln k! for k < 16 as Python's math.lgamma(k + 1) computes them (the reference's constants, bit for bit). */
const LOG_FACTORIAL = [0.0, 0.0, 0.693147180559945, 1.7917594692280554, 3.178053830347945, 4.787491742782047, 6.579251212010102,
  8.525161361065415, 10.604602902745249, 12.801827480081467, 15.104412573075514, 17.502307845873887, 19.987214495661885,
  22.55216385312342, 25.191221182738683, 27.89927138384089];

/** uint64 words as (lo, hi) 32-bit halves. */
interface Words {
  lo: Uint32Array;
  hi: Uint32Array;
  count: number;
}

async function words(source: ByteSource, count: number): Promise<Words> {
  const b = await source.bytes(8 * count);
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const lo = new Uint32Array(count);
  const hi = new Uint32Array(count);
  for (let i = 0; i < count; i++) {
    lo[i] = view.getUint32(8 * i, true);
    hi[i] = view.getUint32(8 * i + 4, true);
  }
  return { lo, hi, count };
}

/** (⌊w/2^12⌋ + ½)·2^−52 for word i. */
const uniform = (w: Words, i: number): number => (w.hi[i] * 1048576 + (w.lo[i] >>> 12) + 0.5) * 2 ** -52;

function checkSize(size: number): number {
  if (!Number.isInteger(size) || size < 0) throw new PrivacyError(`size: must be a non-negative integer, got ${size}`);
  return size;
}

function batch(need: number, rate: number): number {
  const mean = need / rate;
  return Math.trunc(mean + 4.0 * Math.sqrt(mean) + 16);
}

export async function sampleUniforms(size: number, source: ByteSource): Promise<number[]> {
  const w = await words(source, size);
  return Array.from({ length: size }, (_, i) => uniform(w, i));
}

function laplaceCandidate(t: number, w: Words, i: number): [number, boolean] {
  const negative = (w.lo[i] & 1) === 1;
  const magnitude = Math.floor(-t * Math.log(uniform(w, i)));
  return [negative ? -magnitude : magnitude, !(negative && magnitude === 0)];
}

export async function sampleDiscreteLaplace(t: number, size: number, source: ByteSource): Promise<number[]> {
  checkSize(size);
  const rate = 1.0 - 0.5 * -Math.expm1(-1.0 / t);
  const out: number[] = [];
  while (out.length < size) {
    const need = size - out.length;
    const m = batch(need, rate);
    const w = await words(source, m);
    for (let i = 0; i < m && out.length < size; i++) {
      const [y, ok] = laplaceCandidate(t, w, i);
      if (ok) out.push(y);
    }
  }
  return out;
}

const dgAcceptanceCache = new Map<number, number>();

/** Probability that one proposal is kept (sizes the batches, as in the Python sampler). */
function dgAcceptance(sigma: number): number {
  const hit = dgAcceptanceCache.get(sigma);
  if (hit !== undefined) return hit;
  const t = Math.floor(sigma) + 1;
  const zeroOk = 1.0 - 0.5 * -Math.expm1(-1.0 / t);
  let rate: number;
  if (t > 64) rate = 0.75 * zeroOk;
  else {
    let num = 0;
    let den = 0;
    for (let y = -40 * t; y <= 40 * t; y++) {
      const dl = Math.exp(-Math.abs(y) / t);
      const d = Math.abs(y) - (sigma * sigma) / t;
      num += dl * Math.exp(-(d * d) / (2.0 * sigma * sigma));
      den += dl;
    }
    rate = (num / den) * zeroOk;
  }
  dgAcceptanceCache.set(sigma, rate);
  return rate;
}

export async function sampleDiscreteGaussian(sigma: number, size: number, source: ByteSource): Promise<number[]> {
  checkSize(size);
  if (!(typeof sigma === "number" && Number.isFinite(sigma) && sigma >= 0 && sigma <= MAX_SIGMA)) {
    throw new PrivacyError(`sigma: must be a finite number in [0, ${MAX_SIGMA}], got ${sigma}`);
  }
  if (sigma < MIN_SIGMA || size === 0) return new Array<number>(size).fill(0);
  const t = Math.floor(sigma) + 1;
  const s2 = sigma * sigma;
  const rate = dgAcceptance(sigma);
  const out: number[] = [];
  while (out.length < size) {
    const m = batch(size - out.length, rate);
    const w = await words(source, 2 * m);
    for (let i = 0; i < m && out.length < size; i++) {
      const [y, ok] = laplaceCandidate(t, w, 2 * i);
      const d = Math.abs(y) - s2 / t;
      const gamma = (d * d) / (2.0 * s2);
      if (ok && uniform(w, 2 * i + 1) < Math.exp(-gamma)) out.push(y);
    }
  }
  return out;
}

const tableCache = new Map<number, Float64Array>();

/** cdf[k] = P(X ≤ k | X ≤ 127), computed as the Python sampler does (cumulative sums, normalised, last entry 1). */
function poissonTable(lam: number): Float64Array {
  const hit = tableCache.get(lam);
  if (hit) return hit;
  const n = POISSON_TABLE_K + 1;
  const logP = new Float64Array(n);
  const ll = Math.log(lam);
  for (let k = 1; k < n; k++) logP[k] = logP[k - 1] + (ll - Math.log(k));
  let max = -Infinity;
  for (const v of logP) max = Math.max(max, v);
  const cdf = new Float64Array(n);
  let acc = 0;
  for (let k = 0; k < n; k++) {
    acc += Math.exp(logP[k] - max);
    cdf[k] = acc;
  }
  const last = cdf[n - 1];
  for (let k = 0; k < n; k++) cdf[k] /= last;
  cdf[n - 1] = 1.0;
  tableCache.set(lam, cdf);
  return cdf;
}

async function poissonInversion(lam: number, size: number, source: ByteSource): Promise<number[]> {
  const cdf = poissonTable(lam);
  const w = await words(source, size);
  const out = new Array<number>(size);
  for (let i = 0; i < size; i++) {
    const u = uniform(w, i);
    let lo = 0;
    let hi = cdf.length - 1; // first k with cdf[k] > u (cdf[last] = 1 > u)
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    out[i] = lo;
  }
  return out;
}

/** log P(Poisson(λ) = k) without the cancellation of −λ + k ln λ − ln k! at large λ. */
export function poissonLogPmf(k: number, lam: number): number {
  if (k < LOG_FACTORIAL.length) return -lam + k * Math.log(lam) - LOG_FACTORIAL[k];
  const inv = 1.0 / k;
  const inv2 = 1.0 / (k * k);
  const series = inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 / 1260));
  const d = k - lam;
  return d - k * Math.log1p(d / lam) - 0.5 * Math.log(2.0 * Math.PI * k) - series;
}

async function poissonPtrs(lam: number, size: number, source: ByteSource): Promise<number[]> {
  const slam = Math.sqrt(lam);
  const b = 0.931 + 2.53 * slam;
  const a = -0.059 + 0.02483 * b;
  const logInvAlpha = Math.log(1.1239 + 1.1328 / (b - 3.4));
  const vr = 0.9277 - 3.6224 / (b - 2.0);
  const out: number[] = [];
  while (out.length < size) {
    const m = batch(size - out.length, 0.85);
    const w = await words(source, 2 * m);
    for (let i = 0; i < m && out.length < size; i++) {
      const u = uniform(w, 2 * i) - 0.5;
      const v = uniform(w, 2 * i + 1);
      const us = 0.5 - Math.abs(u);
      const kf = Math.floor(((2.0 * a) / us + b) * u + (lam + 0.43));
      const inRange = kf >= 0 && kf < 2 ** 62;
      const k = Math.min(Math.max(kf, 0), 2 ** 62);
      const quick = us >= 0.07 && v <= vr;
      let slow = !quick && inRange && !(us < 0.013 && v > us);
      if (slow) slow = Math.log(v) + logInvAlpha - Math.log(a / (us * us) + b) <= poissonLogPmf(k, lam);
      if (quick || slow) out.push(k);
    }
  }
  return out;
}

export async function samplePoisson(lam: number, size: number, source: ByteSource): Promise<number[]> {
  checkSize(size);
  if (lam === 0 || size === 0) return new Array<number>(size).fill(0);
  return lam < POISSON_INVERSION_MAX ? poissonInversion(lam, size, source) : poissonPtrs(lam, size, source);
}

export async function sampleSkellam(mu: number, size: number, source: ByteSource): Promise<number[]> {
  checkSize(size);
  if (!(typeof mu === "number" && Number.isFinite(mu) && mu >= 0 && mu <= MAX_MU)) throw new PrivacyError(`mu: must be a finite number in [0, ${MAX_MU}], got ${mu}`);
  if (mu === 0 || size === 0) return new Array<number>(size).fill(0);
  const both = await samplePoisson(mu / 2.0, 2 * size, source);
  return Array.from({ length: size }, (_, i) => both[i] - both[size + i]);
}

/** One device's noise share: σ for "discrete_gaussian", μ (variance) for "skellam", zeros for "none". */
export function sampleNoise(mechanism: string, scale: number, size: number, source: ByteSource): Promise<number[]> {
  if (mechanism === "discrete_gaussian") return sampleDiscreteGaussian(scale, size, source);
  if (mechanism === "skellam") return sampleSkellam(scale, size, source);
  if (mechanism === "none") return Promise.resolve(new Array<number>(checkSize(size)).fill(0));
  return Promise.reject(new PrivacyError(`mechanism: must be one of ${MECHANISMS.join(", ")}, got ${mechanism}`));
}

const MAX_REDRAWS = 64;

/** `sampleNoise` truncated to [−bound, bound]: entries beyond it are drawn again from the same source. */
export async function sampleNoiseBounded(mechanism: string, scale: number, size: number, source: ByteSource, bound: number): Promise<number[]> {
  if (!Number.isInteger(bound) || bound < 0) throw new PrivacyError(`bound: must be a non-negative integer, got ${bound}`);
  const out = await sampleNoise(mechanism, scale, size, source);
  for (let r = 0; r < MAX_REDRAWS; r++) {
    const beyond = out.flatMap((e, i) => (Math.abs(e) > bound ? [i] : []));
    if (!beyond.length) return out;
    const again = await sampleNoise(mechanism, scale, beyond.length, source);
    beyond.forEach((idx, j) => (out[idx] = again[j]));
  }
  throw new PrivacyError(`bound: ${bound} is too tight for ${mechanism} noise of scale ${scale} (redrawing does not end)`);
}

export function discreteGaussianVariance(sigma: number): number {
  if (sigma <= 0) return 0;
  if (sigma >= 8) return sigma * sigma;
  const half = Math.ceil(40 * sigma) + 2;
  let num = 0;
  let den = 0;
  for (let k = -half; k <= half; k++) {
    const w = Math.exp(-(k * k) / (2 * sigma * sigma));
    num += w * k * k;
    den += w;
  }
  return num / den;
}

export function perDeviceStd(mechanism: string, scale: number): number {
  if (mechanism === "discrete_gaussian") return Math.sqrt(discreteGaussianVariance(scale));
  if (mechanism === "skellam") return Math.sqrt(scale);
  if (mechanism === "none") return 0;
  throw new PrivacyError(`mechanism: must be one of ${MECHANISMS.join(", ")}, got ${mechanism}`);
}
