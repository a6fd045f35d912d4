/** `histogram` (queries/histogram.py): a 1 in the slots of the device's `max_contributions` most frequent values
 * among the buckets (ties by bucket order), values outside them counted in `other_bucket` when it is set. */

import { pyNumber } from "../pyjson.js";
import { Bits, Statement } from "../validity/statement.js";
import { DeviceKind, Task } from "./kind.js";
import { parseTask } from "./taskSchema.js";

/** The text a row counts as: strings as they are, numbers as Python prints them, booleans true/false, objects by
 * their "value"; anything else is ignored. */
export function valueText(row: unknown): string | null {
  if (typeof row === "object" && row !== null && !Array.isArray(row)) row = (row as Record<string, unknown>).value;
  if (typeof row === "boolean") return row ? "true" : "false";
  if (typeof row === "string") return row;
  if (typeof row === "number" && Number.isFinite(row)) return pyNumber(row);
  return null;
}

/** The task as queries/histogram.py's HistogramTask (checked against its generated schema). */
interface HistogramTask {
  buckets: string[];
  other_bucket?: string | null;
  max_contributions: number;
}

function parse(task: Task): { buckets: string[]; other: boolean; k: number } {
  const t = parseTask<HistogramTask>("histogram", task);
  return { buckets: t.buckets, other: t.other_bucket != null, k: t.max_contributions };
}

export const histogram: DeviceKind = {
  name: "histogram",
  supportsProofs: true,
  async contribute(task, rows) {
    const { buckets, other, k } = parse(task);
    const index = new Map(buckets.map((b, i) => [b, i]));
    const otherSlot = other ? buckets.length : null;
    const counts = new Map<number, number>();
    for (const row of rows) {
      const text = valueText(row);
      if (text === null) continue;
      const slot = index.get(text) ?? otherSlot;
      if (slot !== null && slot !== undefined) counts.set(slot, (counts.get(slot) ?? 0) + 1);
    }
    const vec = new Array<number>(buckets.length + (other ? 1 : 0)).fill(0);
    [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, k).forEach(([slot]) => (vec[slot] = 1));
    return vec;
  },
  parseTask(task) {
    parse(task);
  },
  taskSensitivity(task) {
    const { k } = parse(task);
    return [k, Math.sqrt(k)];
  },
  validity(task) {
    const { buckets, other, k } = parse(task);
    return new Statement([Bits(buckets.length + (other ? 1 : 0), k)]);
  },
};
