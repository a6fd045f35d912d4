/** The kinds this device can contribute to (queries/registry.py's device side), and the one parser of a round's task:
 * `parseTask` checks it against the kind's JSON Schema, fills in the defaults and applies the kind's rules across
 * fields, and returns it typed (the generated `TaskTypes`), tagged with its kind. The client parses an assignment's
 * task once, when it admits it; the policy, the kind and the validity proof take the parsed task. */

import { featureStats } from "./featureStats.js";
import { heavyHitters } from "./heavyHitters.js";
import { histogram } from "./histogram.js";
import { DeviceKind, QueryKindError } from "./kind.js";
import { quantiles } from "./quantiles.js";
import { checkSchema } from "./taskSchema.js";
import type { TaskTypes } from "./taskTypes.generated.js";
import { training } from "./training/training.js";

export type KindName = keyof TaskTypes;

/** A parsed task: the kind's name and its task, typed (a union discriminated by `kind`). */
export type TypedTask<K extends KindName = KindName> = { [P in K]: { readonly kind: P; readonly task: TaskTypes[P] } }[K];

const KINDS: { readonly [K in KindName]: DeviceKind<TaskTypes[K]> } = {
  histogram, heavy_hitters: heavyHitters, feature_stats: featureStats, training, quantiles,
};

function isKindName(name: string): name is KindName {
  return Object.prototype.hasOwnProperty.call(KINDS, name);
}

export function getKind<K extends KindName>(name: K): DeviceKind<TaskTypes[K]>;
export function getKind(name: string): DeviceKind<TaskTypes[KindName]>;
export function getKind(name: string): DeviceKind<TaskTypes[KindName]> {
  if (!isKindName(name)) throw new QueryKindError(`kind: unknown query kind ${JSON.stringify(name)} (known: ${knownKinds().join(", ")})`);
  return KINDS[name];
}

export function knownKinds(): string[] {
  return Object.keys(KINDS).sort();
}

/** The round's task for kind `kind`: checked against the kind's schema (a copy, defaults filled in), then by the
 * kind's rules across fields; QueryKindError naming the field (or the kind, when this device does not know it). */
export function parseTask<K extends KindName>(kind: K, task: unknown): TypedTask<K>;
export function parseTask(kind: string, task: unknown): TypedTask;
export function parseTask(kind: string, task: unknown): TypedTask {
  const k = getKind(kind);
  const typed = checkSchema(kind as KindName, task);
  k.checkRules(typed);
  return { kind, task: typed } as TypedTask;
}

/** The kind of a parsed task, typed for it. */
export function kindOf<K extends KindName>(t: TypedTask<K>): DeviceKind<TaskTypes[K]> {
  return KINDS[t.kind];
}
