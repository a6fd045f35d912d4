/** A device's numeric rows as the kinds read them (queries/rows.py): one feature's values, and the cap on how many
 * rows a device uses. Rows are JSON objects {feature name: value}; a value that is absent, null, boolean, text or
 * not a finite number is missing, never zero. Shared by feature_stats and quantiles. */

import { RandomSource, randbelow } from "../randomness.js";

/** The feature's present values over the rows (finite numbers, not booleans), in row order: Python's
 * `numeric_column` with its NaNs (the missing values) dropped. */
export function numericColumn(rows: unknown[], name: string): number[] {
  const out: number[] = [];
  for (const row of rows) {
    const v = typeof row === "object" && row !== null && !Array.isArray(row) ? (row as Record<string, unknown>)[name] : undefined;
    if (typeof v === "number" && Number.isFinite(v)) out.push(v);
  }
  return out;
}

/** At most `m` of the rows: all of them, or a uniform sample of `m` (kept in their order). */
export async function capRows<T>(rows: T[], m: number, rng: RandomSource): Promise<T[]> {
  if (rows.length <= m) return rows;
  const pool = rows.map((_, i) => i);
  for (let i = 0; i < m; i++) {
    const j = i + Number(await randbelow(rng, BigInt(pool.length - i)));
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, m).sort((a, b) => a - b).map((i) => rows[i]);
}
