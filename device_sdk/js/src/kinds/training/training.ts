/** `training` on the device (queries/training/client.py and encoding.py) for registered black-box scoring functions:
 * sign votes of −gradient (Rprop, the Firefox study) or clipped fixed-point updates, and evaluation rounds (losses,
 * accuracy and metrics). White-box models (logistic regression, MLPs) are the Python SDK's; a JS device refuses their
 * tasks as invalid. Rows are held out for evaluation by a hash of their canonical JSON (as in Python). */

import { pyJsonDumps } from "../../pyjson.js";
import { RandomSource, randbelow, random } from "../../randomness.js";
import { sha256 } from "../../webcrypto.js";
import { utf8 } from "../../bytes.js";
import { npMean } from "../../pyjson.js";
import { Ranged, Signs, Statement } from "../../validity/statement.js";
import { DeviceKind, QueryKindError, stochasticRound } from "../kind.js";
import type { TrainingTask } from "../taskTypes.generated.js";
import { BlackBoxObjective, getScoringFunction } from "./blackbox.js";
import "./frecency.js";

const NORM_OCTAVES = 8;
export const NORM_BUCKETS = 2 * NORM_OCTAVES + 2;

export async function isHoldout(row: unknown, fraction: number): Promise<boolean> {
  if (fraction <= 0) return false;
  const digest = await sha256(utf8(pyJsonDumps(row)));
  const head = new DataView(digest.buffer).getBigUint64(0, false);
  return Number(head) / 2 ** 64 < fraction;
}

async function splitRows(rows: unknown[], fraction: number): Promise<[unknown[], unknown[]]> {
  if (fraction <= 0) return [[...rows], [...rows]];
  const train: unknown[] = [];
  const held: unknown[] = [];
  for (const row of rows) ((await isHoldout(row, fraction)) ? held : train).push(row);
  return [train, held];
}

async function capRows(rows: unknown[], cap: number, rng: RandomSource): Promise<unknown[]> {
  if (rows.length <= cap) return rows;
  const pool = rows.map((_, i) => i);
  for (let i = 0; i < cap; i++) {
    const j = i + Number(await randbelow(rng, BigInt(pool.length - i)));
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, cap).sort((a, b) => a - b).map((i) => rows[i]);
}

async function permutation(n: number, rng: RandomSource): Promise<number[]> {
  const p = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Number(await randbelow(rng, BigInt(i + 1)));
    [p[i], p[j]] = [p[j], p[i]];
  }
  return p;
}

async function localUpdate(obj: BlackBoxObjective, theta0: number[], epochs: number, batchSize: number, lr: number, rng: RandomSource): Promise<number[]> {
  const theta = [...theta0];
  if (obj.n === 0) return theta.map(() => 0);
  for (let e = 0; e < epochs; e++) {
    if (batchSize <= 0 || batchSize >= obj.n) {
      obj.lossGrad(theta, null)[1].forEach((g, i) => (theta[i] -= lr * g));
      continue;
    }
    const order = await permutation(obj.n, rng);
    for (let start = 0; start < obj.n; start += batchSize) {
      obj.lossGrad(theta, order.slice(start, start + batchSize))[1].forEach((g, i) => (theta[i] -= lr * g));
    }
  }
  return theta.map((t, i) => t - theta0[i]);
}

const norm2 = (v: number[]): number => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
const unit = (pb: number): number => 2 ** pb;
const weightUnit = (pb: number, share: number): number => Math.max(1, Math.round(unit(pb) * share));
const countUnit = (pb: number, share: number): number => Math.max(1, Math.round(unit(pb) * share));

/** clip to [−clip, clip], scale, round stochastically (secagg.encoding.FixedPoint). */
async function fixedPoint(values: number[], clip: number, scale: number, rng: RandomSource): Promise<number[]> {
  const out: number[] = [];
  for (const v of values) out.push(await stochasticRound(Math.min(Math.max(v, -clip), clip) * scale, rng));
  return out;
}

function normBucket(norm: number, clipNorm: number): number {
  for (let k = 0; k <= 2 * NORM_OCTAVES; k++) if (norm <= clipNorm * 2 ** (k - NORM_OCTAVES)) return k;
  return NORM_BUCKETS - 1;
}

const cappedMean = (losses: number[], cap: number): number =>
  npMean(losses.map((l) => (Number.isNaN(l) || l === Infinity ? cap : Math.min(Math.max(l, 0), cap))));
const weightOf = (n: number, cap: number): number => Math.min(n, cap) / cap;

/** The rules across fields of queries/training/task.py's models that the schema cannot state (Scaler
 * `_per_feature`; TrainTask's `clip_entries` is an `enum` in the schema). */
function checkRules(t: TrainingTask): void {
  const s = t.scaling;
  if (s && (s.mean_.length !== s.feature_names_in_.length || s.scale_.length !== s.feature_names_in_.length)) {
    throw new QueryKindError(`task.scaling: mean_ and scale_ must have one entry per feature (${s.feature_names_in_.length})`);
  }
}

/** (L1, L2) of the phase's layout (queries/training/encoding.py), from the task alone. */
function bounds(t: TrainingTask): [number, number] {
  const pb = t.precision_bits;
  const u = unit(pb);
  if (t.phase === "label_counts") return [u + t.n_classes, u + Math.sqrt(t.n_classes)];
  if (t.phase === "train") {
    const d = t.weights.length;
    if (t.votes === "sign") return [d, Math.sqrt(d)];
    const w = t.weighting === "examples" ? weightUnit(pb, t.weight_share) : 0;
    const b = t.clip_entries ? countUnit(pb, t.count_share) : 0;
    return [Math.sqrt(d) * u + d + w + b, Math.sqrt((u + Math.sqrt(d)) ** 2 + w * w + b * b)];
  }
  const k = 5 + t.metrics.length;
  return [k * u, Math.sqrt(k) * u];
}

export const training: DeviceKind<TrainingTask> = {
  name: "training",
  supportsProofs: true,
  checkRules,
  async contribute(t, rows, rng) {
    const fn = getScoringFunction(t.model.name);
    const pb = t.precision_bits;
    const cap = t.client.max_examples;
    const [trainRows, evalRows] = await splitRows(rows, t.holdout_fraction);
    const u = unit(pb);
    if (t.phase === "label_counts") return new Array<number>(t.n_classes).fill(0);
    const theta = t.weights;
    if (theta.length !== fn.paramNames.length) throw new QueryKindError(`task.weights: ${fn.name} has ${fn.paramNames.length} weights, got ${theta.length}`);
    if (t.phase === "train") {
      const c = t.clip_norm;
      const obj = new BlackBoxObjective(fn, await capRows(trainRows, cap, rng));
      let delta: number[];
      try {
        delta = await localUpdate(obj, theta, t.client.epochs, t.client.batch_size, t.client.lr, rng);
      } catch {
        delta = theta.map(() => Infinity);
      }
      const overflowed = !delta.every(Number.isFinite);
      const norm = overflowed ? Infinity : norm2(delta);
      if (overflowed) delta = delta.map(() => 0);
      if (t.votes === "sign") return delta.map((d) => (d > 0 ? 1 : d < 0 ? -1 : 0));
      const weighted = t.weighting === "examples";
      const omega = overflowed ? 0 : weighted ? weightOf(obj.n, cap) : obj.n ? 1 : 0;
      const clipped = norm > c ? delta.map((d) => d * (c / norm)) : delta;
      const out = await fixedPoint(clipped.map((d) => omega * d), c, u / c, rng);
      if (weighted) out.push(...(await fixedPoint([omega], 1.0, weightUnit(pb, t.weight_share), rng)));
      const entries = t.clip_entries;
      if (entries) {
        const clip = new Array<number>(entries).fill(0);
        const slot = entries === 1 ? 0 : normBucket(norm, c);
        if (entries > 1 || norm <= c) clip[slot] = countUnit(pb, t.count_share);
        out.push(...clip);
      }
      return out;
    }
    const lossCap = t.loss_cap;
    const names = t.metrics;
    const tr = new BlackBoxObjective(fn, await capRows(trainRows, cap, rng));
    const ev = new BlackBoxObjective(fn, await capRows(evalRows, cap, rng));
    const [wt, we] = t.weighting === "uniform" ? [tr.n > 0 ? 1 : 0, ev.n > 0 ? 1 : 0] : [weightOf(tr.n, cap), weightOf(ev.n, cap)];
    const ltr = tr.n ? cappedMean(tr.perExampleLoss(theta), lossCap) / lossCap : 0;
    const lev = ev.n ? cappedMean(ev.perExampleLoss(theta), lossCap) / lossCap : 0;
    const cor = ev.n ? ev.correct(theta) : [];
    const acc = cor.length ? npMean(cor) : 0;
    const mets = ev.n ? ev.metrics(theta) : {};
    const vals = [wt * ltr, we * lev, we * acc, ...names.map((m) => (m in mets ? we * npMean(mets[m]) : 0)), wt, we];
    if (!vals.every(Number.isFinite)) return vals.map(() => 0);
    return fixedPoint(vals, 1.0, u, rng);
  },
  taskSensitivity: bounds,
  validity(t) {
    // queries/training/kind.py's validity: sign votes in {−1, 0, +1}; a clipped update's entries in [−U, U], its
    // weight in [0, W], its clip entries in [0, B]; evaluation entries and label shares in [0, U]
    const u = unit(t.precision_bits);
    if (t.phase === "label_counts") return new Statement([Ranged(t.n_classes, 0, u)]);
    if (t.phase === "eval") return new Statement([Ranged(5 + t.metrics.length, 0, u)]);
    if (t.votes === "sign") return new Statement([Signs(t.weights.length)]);
    const segments = [Ranged(t.weights.length, -u, u)];
    if (t.weighting === "examples") segments.push(Ranged(1, 0, weightUnit(t.precision_bits, t.weight_share)));
    if (t.clip_entries) segments.push(Ranged(t.clip_entries, 0, countUnit(t.precision_bits, t.count_share)));
    return new Statement(segments);
  },
};
