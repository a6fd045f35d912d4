/** `quantiles` (queries/quantiles.py): per feature a hierarchical histogram over its public domain [lower, upper],
 * cut into L = b^D equal leaves under a complete b-ary tree of D levels. Each of the device's examples (at most
 * `max_examples`, a uniform sample when it holds more) adds 1 to the root, 1 to the node on its leaf's path at every
 * level, and 1 to `below` or `above` when it lay outside the bounds (it is clipped into the edge leaf and counted).
 * A feature's vector is [root, level 1 (b), …, level D (b^D), below, above]. Deterministic past the row cap. */

import { Ranged, Relation, Segment, Statement, relation } from "../validity/statement.js";
import type { RandomSource } from "../randomness.js";
import { DeviceKind, QueryKindError, checkBounds } from "./kind.js";
import { capRows, numericColumn } from "./rows.js";
import type { ClipQuantilesTask, QuantilesTask } from "./taskTypes.generated.js";

/** Finest resolution of a feature's tree (queries/quantiles.py MAX_LEAVES). */
const MAX_LEAVES = 2 ** 16;
/** Most entries of a round's vector over all features (queries/quantiles.py MAX_DIM). */
const MAX_DIM = 2 ** 19;

/** Entries of one feature's vector: the root, the D levels and below/above. */
function featureDim(b: number, d: number): number {
  let n = 1;
  for (let level = 1; level <= d; level++) n += b ** level;
  return n + 2;
}

/** A value's leaf index in [0, leaves): clipped to [lower, upper], with Python's float arithmetic
 * ((clip(x) − lower) / (upper − lower) · leaves, truncated). */
export function leafOf(x: number, lower: number, upper: number, leaves: number): number {
  const pos = ((Math.min(Math.max(x, lower), upper) - lower) / (upper - lower)) * leaves;
  return Math.min(Math.trunc(pos), leaves - 1);
}

/** What a tree round's task gives the device: the quantiles kind's task, feature_stats' clip round. */
export type TreeTask = QuantilesTask | ClipQuantilesTask;

/** The rules across fields of a tree task (queries/quantiles.py QuantileFeature `_ordered`, and `check_tree_size` of
 * QuantilesTask and feature_stats' ClipQuantilesTask `_fits`). */
export function checkTree(t: TreeTask): void {
  checkBounds(t.features);
  if (t.branching ** t.levels > MAX_LEAVES) {
    throw new QueryKindError(`task.levels: ${t.branching}^${t.levels} leaves is more than ${MAX_LEAVES}`);
  }
  if (t.features.length * featureDim(t.branching, t.levels) > MAX_DIM) {
    throw new QueryKindError(`task.features: the vector would have more than ${MAX_DIM} entries`);
  }
}

/** A device's vector for a tree task (queries/quantiles.py `tree_vector`): per feature [root, level 1 … level D,
 * below, above] over at most `max_examples` of its rows. */
export async function treeVector(t: TreeTask, rows: unknown[], rng: RandomSource): Promise<number[]> {
  const b = t.branching;
  const d = t.levels;
  const leaves = b ** d;
  const kept = await capRows(rows, t.max_examples, rng);
  const out: number[] = [];
  for (const f of t.features) {
    const x = numericColumn(kept, f.name);
    const vec = new Array<number>(featureDim(b, d)).fill(0);
    vec[0] = x.length;
    let offset = 1;
    const leafs = x.map((v) => leafOf(v, f.lower, f.upper, leaves));
    for (let level = 1; level <= d; level++) {
      const width = b ** (d - level);
      for (const leaf of leafs) vec[offset + Math.floor(leaf / width)] += 1;
      offset += b ** level;
    }
    vec[offset] = x.filter((v) => v < f.lower).length;
    vec[offset + 1] = x.filter((v) => v > f.upper).length;
    out.push(...vec);
  }
  return out;
}

/** Per example and feature at most D + 2 entries get 1 (root, one node per level, below or above). */
export function treeSensitivity(t: TreeTask): [number, number] {
  const per = t.features.length * (t.levels + 2);
  return [t.max_examples * per, t.max_examples * Math.sqrt(per)];
}

/** Per feature (queries/quantiles.py `tree_statement`): every entry in [0, m]; each level adding up to the root;
 * below + above at most the root. */
export function treeStatement(t: TreeTask): Statement {
  const b = t.branching;
  const d = t.levels;
  const m = BigInt(t.max_examples);
  const segments: Segment[] = [];
  const relations: Relation[] = [];
  let base = 0;
  for (let j = 0; j < t.features.length; j++) {
    segments.push(Ranged(1, 0n, m));
    let offset = base + 1;
    for (let level = 1; level <= d; level++) {
      const size = b ** level;
      segments.push(Ranged(size, 0n, m));
      const terms: [number, number][] = Array.from({ length: size }, (_, i) => [offset + i, 1]);
      relations.push(relation([...terms, [base, -1]], 0n, 0n));
      offset += size;
    }
    segments.push(Ranged(2, 0n, m));
    relations.push(relation([[offset, 1], [offset + 1, 1], [base, -1]], -m, 0n));
    base = offset + 2;
  }
  return new Statement(segments, 1n, 0n, relations);
}

export const quantiles: DeviceKind<QuantilesTask> = {
  name: "quantiles",
  supportsProofs: true,
  checkRules: checkTree,
  contribute: treeVector,
  taskSensitivity: treeSensitivity,
  validity: treeStatement,
};
