/** `training` on the device (queries/training/client.py and encoding.py) for registered black-box scoring functions:
 * sign votes of −gradient (Rprop, the Firefox study) or clipped fixed-point updates, and evaluation rounds (losses,
 * accuracy and metrics). White-box models (logistic regression, MLPs) are the Python SDK's; a JS device refuses their
 * tasks as invalid. Rows are held out for evaluation by a hash of their canonical JSON (as in Python). */

import { pyJsonDumps } from "../../pyjson.js";
import { RandomSource, randbelow, random } from "../../randomness.js";
import { sha256 } from "../../webcrypto.js";
import { utf8 } from "../../bytes.js";
import { npMean } from "../../pyjson.js";
import { Signs, Statement } from "../../validity/statement.js";
import { DeviceKind, QueryKindError, Task, int, list, stochasticRound } from "../kind.js";
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

const cappedMean = (losses: number[], cap: number): number => npMean(losses.map((l) => (Number.isNaN(l) || l === Infinity ? cap : Math.min(l, cap))));
const weightOf = (n: number, cap: number): number => Math.min(n, cap) / cap;

/** (L1, L2) of the phase's layout (queries/training/encoding.py), from the task alone. */
function bounds(task: Task): [number, number] {
  const phase = task.phase;
  const pb = task.precision_bits;
  if (typeof pb !== "number" || !Number.isInteger(pb)) throw new QueryKindError(`task: malformed training task (precision_bits must be an integer, got ${JSON.stringify(pb)})`);
  const u = unit(pb);
  if (phase === "label_counts") {
    const k = int(task.n_classes, "n_classes");
    return [u + k, u + Math.sqrt(k)];
  }
  if (phase === "train") {
    const d = list(task.weights, "weights").length;
    if (task.votes === "sign") return [d, Math.sqrt(d)];
    const weighted = task.weighting === "examples";
    const entries = task.clip_entries ? int(task.clip_entries, "clip_entries") : 0;
    if (![0, 1, NORM_BUCKETS].includes(entries)) throw new QueryKindError(`task: malformed training task (clip_entries must be 0, 1 or ${NORM_BUCKETS}, got ${entries})`);
    const w = weighted ? weightUnit(pb, Number(task.weight_share)) : 0;
    const b = entries ? countUnit(pb, Number(task.count_share ?? 0)) : 0;
    return [Math.sqrt(d) * u + d + w + b, Math.sqrt((u + Math.sqrt(d)) ** 2 + w * w + b * b)];
  }
  if (phase === "eval") {
    const k = 5 + list(task.metrics, "metrics").length;
    return [k * u, Math.sqrt(k) * u];
  }
  throw new QueryKindError(`task: malformed training task (unknown phase ${JSON.stringify(phase)})`);
}

export const training: DeviceKind = {
  name: "training",
  supportsProofs: false,
  async contribute(task, rows, rng) {
    const phase = task.phase;
    const model = task.model as Record<string, unknown> | undefined;
    const fn = getScoringFunction(model?.name);
    const pb = int(task.precision_bits, "precision_bits");
    const client = (task.client ?? {}) as Record<string, unknown>;
    const cap = int(client.max_examples, "client.max_examples");
    const holdout = Number(task.holdout_fraction);
    const [trainRows, evalRows] = await splitRows(rows, holdout);
    const u = unit(pb);
    if (phase === "label_counts") return new Array<number>(int(task.n_classes, "n_classes")).fill(0);
    const theta = list(task.weights, "weights").map(Number);
    if (theta.length !== fn.paramNames.length) throw new QueryKindError(`task.weights: ${fn.name} has ${fn.paramNames.length} weights, got ${theta.length}`);
    if (phase === "train") {
      const c = Number(task.clip_norm);
      const obj = new BlackBoxObjective(fn, await capRows(trainRows, cap, rng));
      let delta: number[];
      try {
        delta = await localUpdate(obj, theta, int(client.epochs, "client.epochs"), int(client.batch_size, "client.batch_size"), Number(client.lr), rng);
      } catch {
        delta = theta.map(() => Infinity);
      }
      const overflowed = !delta.every(Number.isFinite);
      const norm = overflowed ? Infinity : norm2(delta);
      if (overflowed) delta = delta.map(() => 0);
      if (task.votes === "sign") return delta.map((d) => (d > 0 ? 1 : d < 0 ? -1 : 0));
      const weighted = task.weighting === "examples";
      const omega = overflowed ? 0 : weighted ? weightOf(obj.n, cap) : obj.n ? 1 : 0;
      const clipped = norm > c ? delta.map((d) => d * (c / norm)) : delta;
      const out = await fixedPoint(clipped.map((d) => omega * d), c, u / c, rng);
      if (weighted) out.push(...(await fixedPoint([omega], 1.0, weightUnit(pb, Number(task.weight_share)), rng)));
      const entries = task.clip_entries ? int(task.clip_entries, "clip_entries") : 0;
      if (entries) {
        const clip = new Array<number>(entries).fill(0);
        const slot = entries === 1 ? 0 : normBucket(norm, c);
        if (entries > 1 || norm <= c) clip[slot] = countUnit(pb, Number(task.count_share));
        out.push(...clip);
      }
      return out;
    }
    if (phase === "eval") {
      const lossCap = Number(task.loss_cap);
      const names = list(task.metrics, "metrics").map(String);
      const tr = new BlackBoxObjective(fn, await capRows(trainRows, cap, rng));
      const ev = new BlackBoxObjective(fn, await capRows(evalRows, cap, rng));
      const [wt, we] = task.weighting === "uniform" ? [tr.n > 0 ? 1 : 0, ev.n > 0 ? 1 : 0] : [weightOf(tr.n, cap), weightOf(ev.n, cap)];
      const ltr = tr.n ? cappedMean(tr.perExampleLoss(theta), lossCap) / lossCap : 0;
      const lev = ev.n ? cappedMean(ev.perExampleLoss(theta), lossCap) / lossCap : 0;
      const cor = ev.n ? ev.correct(theta) : [];
      const acc = cor.length ? npMean(cor) : 0;
      const mets = ev.n ? ev.metrics(theta) : {};
      const vals = [wt * ltr, we * lev, we * acc, ...names.map((m) => (m in mets ? we * npMean(mets[m]) : 0)), wt, we];
      if (!vals.every(Number.isFinite)) return vals.map(() => 0);
      return fixedPoint(vals, 1.0, u, rng);
    }
    throw new QueryKindError(`task: unknown training phase ${JSON.stringify(phase)}`);
  },
  taskSensitivity(task) {
    return bounds(task);
  },
  validity(task) {
    if (task.phase !== "train" || task.votes !== "sign") return null;
    return new Statement([Signs(list(task.weights, "weights").length)]);
  },
};

