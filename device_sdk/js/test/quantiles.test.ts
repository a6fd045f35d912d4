/** The quantiles kind (src/kinds/quantiles.ts): out-of-bounds values counted and clipped into the edge leaves,
 * missing values skipped, every level adding up to the root, Python's leaf arithmetic, the task's cross-field rules,
 * and a statement that refuses a level not adding up to the root. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { utf8 } from "../src/bytes.js";
import { QueryKindError } from "../src/kinds/kind.js";
import { getKind, parseTask } from "../src/kinds/registry.js";
import { numericColumn } from "../src/kinds/rows.js";
import { SeededRandom } from "../src/randomness.js";

const kind = getKind("quantiles");
const rng = () => new SeededRandom(utf8("quantiles/test"));
// b = 2, D = 3: 8 leaves of width 12.5 over [0, 100]; vector [root, 2, 4, 8, below, above] (17 entries)
const task = { features: [{ name: "x", lower: 0, upper: 100 }], branching: 2, levels: 3, max_examples: 10 };

/** The levels of one feature's vector (b = 2, D = 3). */
function split(vec: number[]) {
  return { root: vec[0], levels: [vec.slice(1, 3), vec.slice(3, 7), vec.slice(7, 15)], below: vec[15], above: vec[16] };
}

test("quantiles: values outside the bounds are counted and clipped into the edge leaves; missing values skipped", async () => {
  const rows = [{ x: -5 }, { x: 250 }, { x: 50 }, { x: null }, {}, { x: "7" }, { x: true }, "text", { x: NaN }, { x: Infinity }, [3]];
  const vec = await kind.contribute(task, rows, rng());
  // what queries.quantiles.QuantilesKind().contribute(task, rows, rng) gives for these rows
  assert.deepEqual(vec, [3, 1, 2, 1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 1, 1]);
  const { root, levels, below, above } = split(vec);
  assert.equal(root, 3, "three present values");
  assert.equal(below, 1);
  assert.equal(above, 1);
  assert.equal(levels[2][0], 1, "−5 in the first leaf");
  assert.equal(levels[2][7], 1, "250 in the last leaf");
  for (const level of levels) assert.equal(level.reduce((a, v) => a + v, 0), root, "each level adds up to the root");
  assert.equal(kind.validity(task)?.check(vec.map(BigInt)), null);
  assert.deepEqual(numericColumn(rows, "x"), [-5, 250, 50]);
});

test("quantiles: leaves as Python computes them ((clip(x) − lower) / (upper − lower) · L, truncated)", async () => {
  // b = 10, D = 2 over [0.1, 0.7]: queries.quantiles.leaf_of gives leaves 17, 31, 9 (the float order matters: (x −
  // lower) · L / range gives 16 for the first and 32 for the second); an upper bound value goes to the last leaf
  const t = { features: [{ name: "t", lower: 0.1, upper: 0.7 }], branching: 10, levels: 2, max_examples: 5 };
  const vec = await kind.contribute(t, [{ t: 0.20199999999999999 }, { t: 0.292 }, { t: 0.154 }, { t: 0.7 }], rng());
  assert.equal(vec.length, 1 + 10 + 100 + 2);
  const nonzero = vec.flatMap((v, i) => (v ? [[i, v]] : []));
  assert.deepEqual(nonzero, [[0, 4], [1, 1], [2, 1], [4, 1], [10, 1], [11 + 9, 1], [11 + 17, 1], [11 + 31, 1], [11 + 99, 1]]);
});

test("quantiles: the statement refuses a level that does not add up to the root, and below + above beyond it", async () => {
  const st = kind.validity(task);
  assert.ok(st);
  const vec = (await kind.contribute(task, [{ x: 10 }, { x: 90 }], rng())).map(BigInt);
  assert.equal(st.check(vec), null);
  const spoiled = [...vec];
  spoiled[4] += 1n; // level 2 adds up to 3, the root is 2 (every entry still within [0, m])
  assert.match(st.check(spoiled) ?? "", /^relation 1: 1 is outside \[0, 0\]/);
  const outside = [...vec];
  outside[15] = 2n;
  outside[16] = 1n; // below + above = 3 > root
  assert.match(st.check(outside) ?? "", /^relation 3: 1 is outside \[-10, 0\]/);
});

test("quantiles: the task's cross-field rules, naming the field as Python does", () => {
  const refused = (t: Record<string, unknown>, field: string) =>
    assert.throws(() => parseTask("quantiles", t), (exc: unknown) => exc instanceof QueryKindError && exc.message.startsWith(`task.${field}:`));
  refused({ ...task, features: [{ name: "x", lower: 1, upper: 1 }] }, "features.0");
  refused({ ...task, features: [{ name: "x", lower: -1e308, upper: 1e308 }] }, "features.0");
  refused({ ...task, branching: 64, levels: 16 }, "levels");
  refused({ ...task, features: Array.from({ length: 9 }, (_, i) => ({ name: `x${i}`, lower: 0, upper: 1 })), branching: 2, levels: 16 }, "features");
  assert.doesNotThrow(() => parseTask("quantiles", { ...task, branching: 2, levels: 16 }));
  assert.deepEqual(kind.taskSensitivity(task), [10 * 5, 10 * Math.sqrt(5)]);
});
