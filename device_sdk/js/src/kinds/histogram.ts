/** `histogram` (queries/histogram.py): a 1 in the slots of the device's `max_contributions` most frequent values
 * among the buckets (ties by bucket order), values outside them counted in `other_bucket` when it is set. */

import { pyNumber } from "../pyjson.js";
import { Bits, Statement } from "../validity/statement.js";
import { DeviceKind } from "./kind.js";
import type { HistogramTask } from "./taskTypes.generated.js";

/** The text a row counts as: strings as they are, numbers as Python prints them, booleans true/false, objects by
 * their "value"; anything else is ignored. */
export function valueText(row: unknown): string | null {
  if (typeof row === "object" && row !== null && !Array.isArray(row)) row = (row as Record<string, unknown>).value;
  if (typeof row === "boolean") return row ? "true" : "false";
  if (typeof row === "string") return row;
  if (typeof row === "number" && Number.isFinite(row)) return pyNumber(row);
  return null;
}

/** The buckets, and the catch-all one when the task has it. */
const dim = (t: HistogramTask): number => t.buckets.length + (t.other_bucket !== null ? 1 : 0);

export const histogram: DeviceKind<HistogramTask> = {
  name: "histogram",
  supportsProofs: true,
  checkRules() {}, // none beyond its schema
  async contribute(task, rows) {
    const buckets = task.buckets;
    const index = new Map(buckets.map((b, i) => [b, i]));
    const otherSlot = task.other_bucket !== null ? buckets.length : null;
    const counts = new Map<number, number>();
    for (const row of rows) {
      const text = valueText(row);
      if (text === null) continue;
      const slot = index.get(text) ?? otherSlot;
      if (slot !== null && slot !== undefined) counts.set(slot, (counts.get(slot) ?? 0) + 1);
    }
    const vec = new Array<number>(dim(task)).fill(0);
    [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, task.max_contributions).forEach(([slot]) => (vec[slot] = 1));
    return vec;
  },
  taskSensitivity(task) {
    const k = task.max_contributions;
    return [k, Math.sqrt(k)];
  },
  validity(task) {
    return new Statement([Bits(dim(task), task.max_contributions)]);
  },
};
