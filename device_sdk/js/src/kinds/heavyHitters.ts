/** `heavy_hitters` (queries/heavy_hitters): one vote per chosen string for the next character (or the end marker)
 * after its prefix on the round's frontier. Strings are normalised as the Python SDK does (NFKC, stripped,
 * case-folded), and only those of at most `max_length` characters of the alphabet are eligible. */

import { codePointCompare, pyCasefold, pyStrip } from "../pyjson.js";
import { Bits, Statement } from "../validity/statement.js";
import { DeviceKind, QueryKindError } from "./kind.js";
import type { HeavyHittersTask } from "./taskTypes.generated.js";

export function normalize(value: string, casefold = true): string {
  const s = pyStrip(value.normalize("NFKC"));
  return casefold ? pyCasefold(s) : s;
}

const chars = (s: string): string[] => [...s];

export function chooseWords(rows: unknown[], alphabet: string, maxLength: number, maxWords: number, casefold = true): string[] {
  const allowed = new Set(chars(alphabet));
  const counts = new Map<string, number>();
  for (const row of rows) {
    if (typeof row !== "string") continue;
    const s = normalize(row, casefold);
    const cs = chars(s);
    if (cs.length > 0 && cs.length <= maxLength && cs.every((c) => allowed.has(c))) counts.set(s, (counts.get(s) ?? 0) + 1);
  }
  return [...counts.entries()].sort((a, b) => b[1] - a[1] || codePointCompare(a[0], b[0])).slice(0, maxWords).map(([s]) => s);
}

export const heavyHitters: DeviceKind<HeavyHittersTask> = {
  name: "heavy_hitters",
  supportsProofs: true,
  /** queries/heavy_hitters/kind.py HeavyHittersTask `_consistent`. */
  checkRules(t) {
    const alpha = chars(t.alphabet);
    if (new Set(alpha).size !== alpha.length) throw new QueryKindError("task.alphabet: characters must be distinct");
    if (t.depth >= t.max_length) throw new QueryKindError(`task.depth: must be in [0, max_length), got ${t.depth}`);
    if (t.frontier.some((p) => chars(p).length !== t.depth) || new Set(t.frontier).size !== t.frontier.length) {
      throw new QueryKindError(`task.frontier: prefixes must be distinct and of length depth=${t.depth}`);
    }
  },
  async contribute(t, rows) {
    const alpha = chars(t.alphabet);
    const words = chooseWords(rows, t.alphabet, t.max_length, t.max_words, t.casefold);
    const width = alpha.length + 1;
    const vec = new Array<number>(t.frontier.length * width).fill(0);
    const block = new Map(t.frontier.map((p, i) => [p, i]));
    const letter = new Map(alpha.map((c, i) => [c, i]));
    for (const word of words) {
      const cs = chars(word);
      if (cs.length < t.depth) continue;
      const b = block.get(cs.slice(0, t.depth).join(""));
      if (b === undefined) continue;
      const offset = cs.length === t.depth ? alpha.length : (letter.get(cs[t.depth]) as number);
      vec[b * width + offset] = 1;
    }
    return vec;
  },
  taskSensitivity(t) {
    return [t.max_words, Math.sqrt(t.max_words)];
  },
  validity(t) {
    return new Statement([Bits(t.frontier.length * (chars(t.alphabet).length + 1), t.max_words)]);
  },
};
