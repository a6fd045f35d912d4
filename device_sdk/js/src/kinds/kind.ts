/** The device side of a query kind (queries/kind.py): turn the parsed task and the local rows into a bounded integer
 * vector, bound its norms from the task alone, and state what it satisfies for validity proofs. Every method takes the
 * task as `parseTask` (registry.ts) returned it — checked and typed once per assignment, never parsed again. */

import { RandomSource, random } from "../randomness.js";
import { Statement } from "../validity/statement.js";

export class QueryKindError extends Error {}

/** One kind over its task type `T` (taskTypes.generated.ts, generated from the kind's JSON Schema). */
export interface DeviceKind<T> {
  readonly name: string;
  /** Whether devices can prove contributions valid (a policy with requireProofs refuses such kinds without proofs). */
  readonly supportsProofs: boolean;
  /** The task model's rules across fields that its JSON Schema cannot state (the Python models' `model_validator`s),
   * on a task that passed the schema; QueryKindError naming the field, as Python does. Each rule has a refused case
   * (`rule`) in tests/vectors/task_parsing.json. */
  checkRules(task: T): void;
  /** The local rows → a vector of safe integers (`rng`: row subsampling, shuffles, stochastic rounding only). */
  contribute(task: T, rows: unknown[], rng: RandomSource): Promise<number[]>;
  /** (L1, L2) bounds of any vector `contribute` returns for this task, or null when the kind cannot bound it. */
  taskSensitivity(task: T): [number, number] | null;
  validity(task: T): Statement | null;
}

/** floor(x) + Bernoulli(x − floor(x)): unbiased stochastic rounding. */
export async function stochasticRound(x: number, rng: RandomSource): Promise<number> {
  const low = Math.floor(x);
  return low + ((await random(rng)) < x - low ? 1 : 0);
}

/** A feature's bounds must leave a finite, positive range (feature_stats' FeatureSpec and quantiles' QuantileFeature
 * `_ordered`), the error naming `task.features.<i>`. */
export function checkBounds(features: readonly { lower: number; upper: number }[]): void {
  features.forEach((f, i) => {
    if (!(f.lower < f.upper) || !Number.isFinite(f.upper - f.lower)) {
      throw new QueryKindError(`task.features.${i}: lower (${f.lower}) must be below upper (${f.upper})`);
    }
  });
}
