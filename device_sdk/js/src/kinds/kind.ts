/** The device side of a query kind (queries/kind.py): turn the task and the local rows into a bounded integer vector,
 * bound its norms from the task alone, and state what it satisfies for validity proofs. */

import { RandomSource, random } from "../randomness.js";
import { Statement } from "../validity/statement.js";

export class QueryKindError extends Error {}

export type Task = Record<string, unknown>;

export interface DeviceKind {
  readonly name: string;
  /** Whether devices can prove contributions valid (a policy with requireProofs refuses such kinds without proofs). */
  readonly supportsProofs: boolean;
  /** Checks the round's task as the Python kind's `parse_task` does (the kind's generated task schema, then its
   * checks across fields); QueryKindError naming the field. Kinds without a typed task have none. */
  parseTask?(task: Task): void;
  /** The local rows → a vector of safe integers (`rng`: row subsampling, shuffles, stochastic rounding only). */
  contribute(task: Task, rows: unknown[], rng: RandomSource): Promise<number[]>;
  /** (L1, L2) bounds of any vector `contribute` returns for this task, or null when the kind cannot bound it. */
  taskSensitivity(task: Task): [number, number] | null;
  validity(task: Task): Statement | null;
}

/** floor(x) + Bernoulli(x − floor(x)): unbiased stochastic rounding. */
export async function stochasticRound(x: number, rng: RandomSource): Promise<number> {
  const low = Math.floor(x);
  return low + ((await random(rng)) < x - low ? 1 : 0);
}

export function list(v: unknown, where: string): unknown[] {
  if (!Array.isArray(v)) throw new QueryKindError(`task.${where}: must be a list`);
  return v;
}
