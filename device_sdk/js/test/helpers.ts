/** Test helpers: the frozen known-answer vectors of the repository (tests/vectors, docs/vectors.md). */

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

export interface VectorFile {
  topic: string;
  versions: Record<string, unknown>;
  cases: { input: any; output: any }[];
}

export function vectors(topic: string): VectorFile {
  const text = readFileSync(join(ROOT, "tests", "vectors", `${topic}.json`), "utf8");
  // integers beyond 2^53 become strings (JSON.parse would round them); the tests read them with BigInt
  return JSON.parse(text.replace(/([:[,]\s*)(-?\d{16,})(?=\s*[,\]}])/g, '$1"$2"')) as VectorFile;
}
