/** Frecency, the Firefox URL-bar ranking function (queries/training/frecency.py; Hartmann, "Federated Learning",
 * MSc thesis, FU Berlin 2018, §7.1), registered as the scoring function "frecency":
 * visit(v) = recency[bucket(age)] · type[visit type]; frecency(x) = |S_x|/|T_x| · Σ_{v ∈ T_x} visit(v) over the 10
 * most recent visits, buckets cut at 4, 14, 31 and 90 days. */

import { registerScoringFunction } from "./blackbox.js";

export const BUCKET_DAYS = [4, 14, 31, 90];
export const VISIT_TYPES = ["link", "typed", "bookmark", "other"];
const RECENT_VISITS = 10;
export const PARAM_NAMES = ["recency_4d", "recency_14d", "recency_31d", "recency_90d", "recency_older", "type_link", "type_typed", "type_bookmark", "type_other"];
export const HANDCRAFTED = [100.0, 70.0, 50.0, 30.0, 10.0, 1.2, 2.0, 1.4, 0.0];

export interface Prepared {
  counts: Float64Array[]; // per item, 5 × 4 counts (bucket-major)
  factor: number[];
}

const bucketOf = (age: number): number => BUCKET_DAYS.filter((d) => d < age).length;

function typeCode(t: unknown): number {
  if (typeof t === "string") return VISIT_TYPES.includes(t) ? VISIT_TYPES.indexOf(t) : 3;
  if (typeof t === "number" || typeof t === "boolean") {
    const v = Math.trunc(Number(t));
    return Number.isFinite(Number(t)) && v >= 0 && v < 4 ? v : 3;
  }
  return 3;
}

function visits(item: unknown): [number, number][] {
  const vs = typeof item === "object" && item !== null ? (item as Record<string, unknown>).visits : undefined;
  if (!Array.isArray(vs)) return [];
  return vs
    .filter((v) => Array.isArray(v) && v.length === 2 && (typeof v[0] === "boolean" || (typeof v[0] === "number" && Number.isFinite(v[0]))))
    .map((v) => [Math.max(Number(v[0]), 0.0), typeCode(v[1])] as [number, number]);
}

export function prepareItems(items: unknown[]): Prepared {
  const counts: Float64Array[] = [];
  const factor: number[] = [];
  for (const item of items) {
    const vs = visits(item).map((v, i) => [...v, i] as const).sort((a, b) => a[0] - b[0] || a[2] - b[2]);
    const c = new Float64Array(20);
    vs.slice(0, RECENT_VISITS).forEach(([age, type]) => (c[bucketOf(age) * 4 + type] += 1));
    counts.push(c);
    const recent = Math.min(vs.length, RECENT_VISITS);
    const declared = (item as Record<string, unknown>)?.visit_count;
    const d = typeof declared === "number" && Number.isFinite(declared) ? declared : 0;
    const total = Math.max(d, vs.length);
    factor.push(recent > 0 ? total / recent : 0);
  }
  return { counts, factor };
}

export function frecencyScores(weights: number[], p: Prepared): number[] {
  return p.counts.map((c, i) => {
    let acc = 0;
    for (let b = 0; b < 5; b++) for (let t = 0; t < 4; t++) acc += c[b * 4 + t] * weights[b] * weights[5 + t];
    return p.factor[i] * acc;
  });
}

export const FRECENCY = registerScoringFunction("frecency", frecencyScores, PARAM_NAMES, HANDCRAFTED, {
  prepareItems, margin: 10.0, display: 1, maxQueryLength: 30.0, maxRank: 50.0, fdStep: 1e-3,
});
