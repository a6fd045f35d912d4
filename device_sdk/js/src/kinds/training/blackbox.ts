/** Black-box ranking functions trained on the device by finite differences (queries/training/blackbox.py and
 * finite_diff.py): a registered scoring function `score(weights, prepared items) → one score per item`, rows of
 * URL-bar style interactions, the pointwise SVM ranking loss of Hartmann et al. ("Federated Learning for Ranking
 * Browser History Suggestions", 2019, §5.2), and the selected item's rank and the characters typed as metrics. */

import { QueryKindError } from "../kind.js";
import { npMean } from "../../pyjson.js";

export interface ScoringFunction<P = unknown> {
  name: string;
  paramNames: string[];
  initialWeights: number[];
  score: (weights: number[], items: P) => number[];
  prepareItems: (items: unknown[]) => P;
  margin: number;
  display: number;
  maxQueryLength: number;
  maxRank: number;
  fdStep: number;
}

export interface RankingBatch<P = unknown> {
  items: P;
  rowOfItem: number[];
  selected: boolean[];
  nRows: number;
  matchChars: number[];
  queryLength: number[];
  rawRows: unknown[];
}

const REGISTRY = new Map<string, ScoringFunction<any>>();

/** Register a scoring function by name (the name the analyst's `model.name` refers to). */
export function registerScoringFunction<P>(
  name: string, score: (weights: number[], items: P) => number[], paramNames: string[], initialWeights: number[],
  opts: { prepareItems?: (items: unknown[]) => P; margin?: number; display?: number; maxQueryLength?: number; maxRank?: number; fdStep?: number; replace?: boolean } = {},
): ScoringFunction<P> {
  if (paramNames.length !== initialWeights.length) throw new Error(`${name}: ${paramNames.length} param names but ${initialWeights.length} initial weights`);
  if (REGISTRY.has(name) && !opts.replace) throw new Error(`black-box model ${name} registered twice`);
  const fn: ScoringFunction<P> = {
    name, score, paramNames: [...paramNames], initialWeights: [...initialWeights],
    prepareItems: opts.prepareItems ?? ((items) => items as P), margin: opts.margin ?? 1, display: opts.display ?? 5,
    maxQueryLength: opts.maxQueryLength ?? 30, maxRank: opts.maxRank ?? 50, fdStep: opts.fdStep ?? 1e-3,
  };
  REGISTRY.set(name, fn);
  return fn;
}

export function getScoringFunction(name: unknown): ScoringFunction {
  const fn = typeof name === "string" ? REGISTRY.get(name) : undefined;
  if (!fn) {
    throw new QueryKindError(`model.name: ${JSON.stringify(name)} is not a registered scoring function on this device (the JS SDK trains `
      + `registered black-box scoring functions: ${[...REGISTRY.keys()].sort().join(", ") || "none"})`);
  }
  return fn;
}

const isNum = (v: unknown): v is number | boolean => (typeof v === "number" && Number.isFinite(v)) || typeof v === "boolean";

export function rankingBatch<P>(rows: unknown[], prepareItems: (items: unknown[]) => P): RankingBatch<P> {
  const items: unknown[] = [];
  const owner: number[] = [];
  const sel: boolean[] = [];
  const match: number[] = [];
  const qlen: number[] = [];
  const kept: unknown[] = [];
  for (const row of rows) {
    if (typeof row !== "object" || row === null || Array.isArray(row)) continue;
    const r = row as Record<string, unknown>;
    const its = r.items;
    let s = r.selected;
    if (typeof s === "boolean") s = Number(s);
    if (!Array.isArray(its) || its.length < 2 || typeof s !== "number" || !Number.isInteger(s) || s < 0 || s >= its.length) continue;
    let L = r.query_length ?? 1;
    L = isNum(L) && Number(L) >= 1 ? Number(L) : 1;
    const mcRaw = r.match_chars;
    const mc = Array.isArray(mcRaw) && mcRaw.length === its.length ? mcRaw.map(Number) : its.map(() => L as number);
    mc[s] = L as number;
    const idx = kept.length;
    kept.push(row);
    qlen.push(L as number);
    its.forEach((it, j) => {
      items.push(it);
      owner.push(idx);
      sel.push(j === s);
      match.push(mc[j]);
    });
  }
  return { items: prepareItems(items), rowOfItem: owner, selected: sel, nRows: kept.length, matchChars: match, queryLength: qlen, rawRows: kept };
}

function selectedScores(scores: number[], b: RankingBatch): number[] {
  const out = new Array<number>(b.nRows).fill(0);
  scores.forEach((s, i) => {
    if (b.selected[i]) out[b.rowOfItem[i]] = s;
  });
  return out;
}

export function svmRankLoss(scores: number[], b: RankingBatch, margin: number): number[] {
  const sel = selectedScores(scores, b);
  const out = new Array<number>(b.nRows).fill(0);
  scores.forEach((s, i) => {
    out[b.rowOfItem[i]] += b.selected[i] ? 0 : Math.max(0, s + margin - sel[b.rowOfItem[i]]);
  });
  return out;
}

export function selectedRank(scores: number[], b: RankingBatch, among?: boolean[]): number[] {
  const sel = selectedScores(scores, b);
  const above = new Array<number>(b.nRows).fill(0);
  const ties = new Array<number>(b.nRows).fill(0);
  scores.forEach((s, i) => {
    const other = !b.selected[i] && (among === undefined || among[i]);
    const r = b.rowOfItem[i];
    above[r] += other && s > sel[r] ? 1 : 0;
    ties[r] += other && s === sel[r] ? 1 : 0;
  });
  return above.map((a, r) => 1.0 + a + 0.5 * ties[r]);
}

export function charsTyped(scores: number[], b: RankingBatch, display: number): number[] {
  const out = [...b.queryLength];
  const done = new Array<boolean>(b.nRows).fill(false);
  const maxL = Math.trunc(Math.max(1, ...b.queryLength));
  for (let c = 1; c <= maxL; c++) {
    const rank = selectedRank(scores, b, b.matchChars.map((m) => m >= c));
    for (let r = 0; r < b.nRows; r++) {
      if (!done[r] && rank[r] <= display && c <= b.queryLength[r]) {
        out[r] = c;
        done[r] = true;
      }
    }
    if (done.every(Boolean)) break;
  }
  return out;
}

/** ∂f/∂θ_i ≈ (f(θ⁺ᵢ) − f(θ⁻ᵢ)) / (θ⁺ᵢ − θ⁻ᵢ), h_i = step·max(|θ_i|, 1) (central differences over representable points). */
export function centralGradient(f: (theta: number[]) => number, theta: number[], step: number): number[] {
  if (!(Number.isFinite(step) && step > 0)) throw new QueryKindError(`step: must be a positive finite number, got ${step}`);
  const probe = [...theta];
  return theta.map((t, i) => {
    const h = step * Math.max(Math.abs(t), 1.0);
    const up = t + h;
    const down = t - h;
    probe[i] = up;
    const fUp = f(probe);
    probe[i] = down;
    const fDown = f(probe);
    probe[i] = t;
    if (!(Number.isFinite(fUp) && Number.isFinite(fDown))) throw new QueryKindError(`function value is not finite near weight ${i}`);
    return (fUp - fDown) / (up - down);
  });
}

/** A device's loss over its interactions under given weights. */
export class BlackBoxObjective {
  readonly batch: RankingBatch;
  readonly n: number;
  constructor(readonly fn: ScoringFunction, readonly rows: unknown[]) {
    this.batch = rankingBatch(rows, fn.prepareItems);
    this.n = this.batch.nRows;
  }

  private scores(w: number[], b: RankingBatch): number[] {
    const s = this.fn.score(w, b.items);
    if (s.length !== b.selected.length) throw new QueryKindError(`${this.fn.name}: scoring function returned ${s.length} scores for ${b.selected.length} items`);
    return s;
  }

  private sub(idx: number[] | null): RankingBatch {
    return idx === null ? this.batch : rankingBatch(idx.map((i) => this.batch.rawRows[i]), this.fn.prepareItems);
  }

  lossGrad(theta: number[], idx: number[] | null): [number, number[]] {
    const b = this.sub(idx);
    const meanLoss = (w: number[]): number => npMean(svmRankLoss(this.scores(w, b), b, this.fn.margin));
    return [meanLoss(theta), centralGradient(meanLoss, theta, this.fn.fdStep)];
  }

  perExampleLoss(theta: number[]): number[] {
    return svmRankLoss(this.scores(theta, this.batch), this.batch, this.fn.margin);
  }

  correct(theta: number[]): number[] {
    return selectedRank(this.scores(theta, this.batch), this.batch).map((r) => (r === 1.0 ? 1.0 : 0.0));
  }

  /** Per metric, its per-row values clipped to [0, bound] and divided by the bound. */
  metrics(theta: number[]): Record<string, number[]> {
    const s = this.scores(theta, this.batch);
    const clip = (v: number[], bound: number) => v.map((x) => Math.min(Math.max(x, 0), bound) / bound);
    return {
      mean_rank: clip(selectedRank(s, this.batch), this.fn.maxRank),
      chars_typed: clip(charsTyped(s, this.batch, this.fn.display), this.fn.maxQueryLength),
    };
  }
}
