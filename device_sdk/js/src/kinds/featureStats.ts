/** `feature_stats` (queries/feature_stats.py): per feature the count of present values and fixed-point first
 * moments, then second moments about the global mean and histogram bins; with the bound chosen from the data, a
 * first one-hot round over a grid of rows held; with `clip_at`, a round of per-feature hierarchical histograms
 * (quantiles.ts `treeVector`) before the moments. Entries are in units of 2^K per example; fractions are rounded
 * stochastically (unbiased) with the kind's random source. */

import { Bits, Ranged, Statement, relation } from "../validity/statement.js";
import { DeviceKind, QueryKindError, checkBounds, stochasticRound } from "./kind.js";
import { checkTree, treeSensitivity, treeStatement, treeVector } from "./quantiles.js";
import { capRows, numericColumn } from "./rows.js";
import type { FeatureSpec, FeatureStatsTask } from "./taskTypes.generated.js";

/** The rules across fields of queries/feature_stats.py's task models (RowCountsTask `_increasing`, FeatureSpec
 * `_ordered`, SecondMomentsTask `_per_feature`, ClipQuantilesTask `_fits`), naming the same fields as Python. */
function checkRules(t: FeatureStatsTask): void {
  if (t.stage === "row_counts") {
    if (t.grid.some((g, i) => i > 0 && g <= t.grid[i - 1])) throw new QueryKindError("task.grid: bounds must be increasing");
    return;
  }
  if (t.stage === "clip_quantiles") return checkTree(t);
  checkBounds(t.features);
  if (t.stage === "second_moments" && (t.means.length !== t.features.length || t.second_scales.length !== t.features.length)) {
    throw new QueryKindError(`task.means: means and second_scales must have one entry per feature (${t.features.length})`);
  }
}

/** The feature's present values (rows.ts `numericColumn`), clipped to [lower, upper]. */
function column(rows: unknown[], f: FeatureSpec): number[] {
  return numericColumn(rows, f.name).map((v) => Math.min(Math.max(v, f.lower), f.upper));
}

function searchLeft(grid: number[], x: number): number {
  let i = 0;
  while (i < grid.length && grid[i] < x) i++;
  return i;
}

export const featureStats: DeviceKind<FeatureStatsTask> = {
  name: "feature_stats",
  supportsProofs: true,
  checkRules,
  async contribute(t, rows, rng) {
    if (t.stage === "clip_quantiles") return treeVector(t, rows, rng);
    if (t.stage === "row_counts") {
      const vec = new Array<number>(t.grid.length + 1).fill(0);
      if (rows.length) vec[searchLeft(t.grid, rows.length)] = 1;
      return vec;
    }
    const specs = t.features;
    const k = t.scale_exp;
    const kept = await capRows(rows, t.max_examples, rng);
    const unit = 2 ** k;
    const columns = specs.map((f) => column(kept, f));
    if (t.stage === "first_moments") {
      const counts: number[] = [];
      const firsts: number[] = [];
      for (let j = 0; j < specs.length; j++) {
        const f = specs[j];
        counts.push(columns[j].length * unit);
        let s = 0;
        // centred: Σ (2·(x − lower)/range − 1), in [−count, count] (queries/feature_stats.py)
        for (const x of columns[j]) s += await stochasticRound(((2 * (x - f.lower)) / (f.upper - f.lower) - 1) * unit, rng);
        firsts.push(s);
      }
      return [...counts, ...firsts];
    }
    const bins = t.bins;
    const seconds: number[] = [];
    const hists: number[] = [];
    for (let j = 0; j < specs.length; j++) {
      const f = specs[j];
      const r = f.upper - f.lower;
      const x = columns[j];
      if (bins) {
        const h = new Array<number>(bins).fill(0);
        for (const v of x) h[Math.min(Math.trunc(((v - f.lower) / r) * bins), bins - 1)] += 1;
        hists.push(...h.map((c) => c * unit));
      }
      const mean = t.means[j];
      const b = t.second_scales[j];
      if (mean === null || b === null || !b || b <= 0) {
        seconds.push(0);
        continue;
      }
      let s = 0;
      for (const v of x) {
        const d = (v - mean) / r;
        s += await stochasticRound(Math.min((d * d) / b, 1.0) * unit, rng);
      }
      seconds.push(s);
    }
    return [...seconds, ...hists];
  },
  taskSensitivity(t) {
    if (t.stage === "row_counts") return [1, 1];
    if (t.stage === "clip_quantiles") return treeSensitivity(t);
    const perExample = t.stage === "second_moments" && !t.bins ? 1 : 2;
    const f = t.features.length;
    const unit = t.max_examples * 2 ** t.scale_exp;
    return [unit * perExample * f, unit * Math.sqrt(perExample) * Math.sqrt(f)];
  },
  validity(t) {
    if (t.stage === "row_counts") return new Statement([Bits(t.grid.length + 1, 1)]);
    if (t.stage === "clip_quantiles") return treeStatement(t);
    const f = t.features.length;
    const top = BigInt(t.max_examples) << BigInt(t.scale_exp);
    // per feature as the examples link them (queries/feature_stats.py `validity`): a centred first moment at
    // most its count in size; with bins, the bins adding up to at most the bound and the second moment at most
    // their sum
    const ranged = (n: number) => Ranged(n, 0n, top);
    if (t.stage === "first_moments") {
      const relations = Array.from({ length: f }, (_, j) =>
        [-1, 1].map((sign) => relation([[j, 1], [f + j, sign]], 0n, 2n * top)),
      ).flat();
      return new Statement([ranged(f), Ranged(f, -top, top)], 1n, 0n, relations);
    }
    if (!t.bins) return new Statement([ranged(f)]);
    const relations = Array.from({ length: f }, (_, j) => {
      const bins: [number, number][] = Array.from({ length: t.bins }, (_, b) => [f + j * t.bins + b, 1]);
      return [relation(bins, 0n, top), relation([...bins, [j, -1]], 0n, top)];
    }).flat();
    return new Statement([ranged(f), ranged(f * t.bins)], 1n, 0n, relations);
  },
};
