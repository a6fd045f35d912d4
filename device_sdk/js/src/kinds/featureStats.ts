/** `feature_stats` (queries/feature_stats.py): per feature the count of present values and fixed-point first
 * moments, then second moments about the global mean and histogram bins; with the bound chosen from the data, a
 * first one-hot round over a grid of rows held. Entries are in units of 2^K per example; fractions are rounded
 * stochastically (unbiased) with the kind's random source. */

import { RandomSource, randbelow } from "../randomness.js";
import { Bits, Ranged, Statement } from "../validity/statement.js";
import { DeviceKind, QueryKindError, Task, int, list, stochasticRound } from "./kind.js";

interface Feature {
  name: string;
  lower: number;
  upper: number;
}

function features(task: Task): Feature[] {
  return list(task.features, "features").map((f, i) => {
    const o = f as Record<string, unknown>;
    const lower = Number(o?.lower);
    const upper = Number(o?.upper);
    if (typeof o?.name !== "string" || !Number.isFinite(lower) || !Number.isFinite(upper) || !(lower < upper)) {
      throw new QueryKindError(`task.features[${i}]: needs a name and finite lower < upper`);
    }
    return { name: o.name, lower, upper };
  });
}

/** The feature's present values (finite numbers, not booleans), clipped to [lower, upper]. */
function column(rows: unknown[], f: Feature): number[] {
  const out: number[] = [];
  for (const row of rows) {
    const v = typeof row === "object" && row !== null && !Array.isArray(row) ? (row as Record<string, unknown>)[f.name] : undefined;
    if (typeof v === "number" && Number.isFinite(v)) out.push(Math.min(Math.max(v, f.lower), f.upper));
  }
  return out;
}

/** A uniform sample of `m` of the rows (in their order) when there are more. */
async function capRows<T>(rows: T[], m: number, rng: RandomSource): Promise<T[]> {
  if (rows.length <= m) return rows;
  const pool = rows.map((_, i) => i);
  for (let i = 0; i < m; i++) {
    const j = i + Number(await randbelow(rng, BigInt(pool.length - i)));
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, m).sort((a, b) => a - b).map((i) => rows[i]);
}

function searchLeft(grid: number[], x: number): number {
  let i = 0;
  while (i < grid.length && grid[i] < x) i++;
  return i;
}

export const featureStats: DeviceKind = {
  name: "feature_stats",
  supportsProofs: true,
  async contribute(task, rows, rng) {
    const stage = task.stage;
    if (stage === "row_counts") {
      const grid = list(task.grid, "grid").map((g, i) => int(g, `grid[${i}]`));
      if (!grid.length || grid.length > 10_000 || grid.some((g, i) => i > 0 && g <= grid[i - 1])) {
        throw new QueryKindError("task.grid: must be a non-empty increasing list of at most 10,000 bounds");
      }
      const vec = new Array<number>(grid.length + 1).fill(0);
      if (rows.length) vec[searchLeft(grid, rows.length)] = 1;
      return vec;
    }
    const specs = features(task);
    const k = int(task.scale_exp, "scale_exp");
    const m = int(task.max_examples, "max_examples");
    if (k < 0 || k > 52 || m < 1) throw new QueryKindError("task: scale_exp or max_examples out of range");
    const kept = await capRows(rows, m, rng);
    const unit = 2 ** k;
    const columns = specs.map((f) => column(kept, f));
    if (stage === "first_moments") {
      const counts: number[] = [];
      const firsts: number[] = [];
      for (let j = 0; j < specs.length; j++) {
        const f = specs[j];
        counts.push(columns[j].length * unit);
        let s = 0;
        for (const x of columns[j]) s += await stochasticRound(((x - f.lower) / (f.upper - f.lower)) * unit, rng);
        firsts.push(s);
      }
      return [...counts, ...firsts];
    }
    if (stage === "second_moments") {
      const means = list(task.means, "means");
      const scales = list(task.second_scales, "second_scales");
      const bins = task.bins == null ? 0 : int(task.bins, "bins");
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
        const mean = means[j];
        const b = scales[j];
        if (mean == null || typeof b !== "number" || !b || b <= 0) {
          seconds.push(0);
          continue;
        }
        let s = 0;
        for (const v of x) {
          const d = (v - Number(mean)) / r;
          s += await stochasticRound(Math.min((d * d) / b, 1.0) * unit, rng);
        }
        seconds.push(s);
      }
      return [...seconds, ...hists];
    }
    throw new QueryKindError(`task: unknown feature_stats stage ${JSON.stringify(stage)}`);
  },
  taskSensitivity(task) {
    const stage = task.stage;
    if (stage === "row_counts") return [1, 1];
    const f = list(task.features, "features").length;
    const k = task.scale_exp;
    const m = task.max_examples;
    for (const [name, v] of [["scale_exp", k], ["max_examples", m]] as const) {
      if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new QueryKindError(`task.${name}: must be an integer ≥ 0, got ${JSON.stringify(v)}`);
    }
    let perExample: number;
    if (stage === "first_moments") perExample = 2;
    else if (stage === "second_moments") {
      const bins = task.bins ?? 0;
      if (typeof bins !== "number" || !Number.isInteger(bins) || bins < 0) throw new QueryKindError(`task.bins: must be an integer ≥ 0, got ${JSON.stringify(bins)}`);
      perExample = bins ? 2 : 1;
    } else throw new QueryKindError(`task.stage: unknown feature_stats stage ${JSON.stringify(stage)}`);
    const unit = (m as number) * 2 ** (k as number);
    return [unit * perExample * f, unit * Math.sqrt(perExample) * Math.sqrt(f)];
  },
  validity(task) {
    if (task.stage === "row_counts") return new Statement([Bits(list(task.grid, "grid").length + 1, 1)]);
    const f = list(task.features, "features").length;
    const top = BigInt(int(task.max_examples, "max_examples")) << BigInt(int(task.scale_exp, "scale_exp"));
    if (task.stage === "first_moments") return new Statement([Ranged(f, 0n, top), Ranged(f, 0n, top)]);
    const bins = task.bins == null ? 0 : int(task.bins, "bins");
    return new Statement([f, f * bins].filter((n) => n > 0).map((n) => Ranged(n, 0n, top)));
  },
};
