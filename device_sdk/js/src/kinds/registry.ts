/** The kinds this device can contribute to (queries/registry.py's device side). */

import { featureStats } from "./featureStats.js";
import { heavyHitters } from "./heavyHitters.js";
import { histogram } from "./histogram.js";
import { DeviceKind, QueryKindError } from "./kind.js";
import { quantiles } from "./quantiles.js";
import { training } from "./training/training.js";

const KINDS = new Map<string, DeviceKind>([histogram, heavyHitters, featureStats, training, quantiles].map((k) => [k.name, k]));

export function getKind(name: string): DeviceKind {
  const k = KINDS.get(name);
  if (!k) throw new QueryKindError(`kind: unknown query kind ${JSON.stringify(name)} (known: ${[...KINDS.keys()].sort().join(", ")})`);
  return k;
}

export function knownKinds(): string[] {
  return [...KINDS.keys()].sort();
}
