/** The kinds' device encodings against tests/vectors/kind_encodings.json: deterministic vectors byte for byte; those
 * that depend on the kind's random draws (stochastic rounding) within the rounding of every summed term. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { hex, utf8 } from "../src/bytes.js";
import { QueryKindError } from "../src/kinds/kind.js";
import { kindOf, parseTask } from "../src/kinds/registry.js";
import { isHoldout } from "../src/kinds/training/training.js";
import { pyFloatRepr, pyJsonDumps, npSum } from "../src/pyjson.js";
import { SeededRandom } from "../src/randomness.js";
import { vectors } from "./helpers.js";

test("kind encodings: every case of the known-answer vectors", async () => {
  let exact = 0;
  for (const { input, output } of vectors("kind_encodings").cases) {
    const parsed = parseTask(input.kind, input.task);
    const [kind, task] = [kindOf(parsed), parsed.task];
    if (input.kind === "training" && input.task.model.name !== "frecency") {
      await assert.rejects(kind.contribute(task, input.rows, new SeededRandom(utf8("k"))), QueryKindError, "white-box models are the Python SDK's");
      continue;
    }
    const vec = await kind.contribute(task, input.rows, new SeededRandom(utf8("kind/js")));
    const expected = output.vector.map(Number);
    assert.equal(vec.length, output.dim);
    assert.equal(vec.length, input.plan.dim);
    if (!output.uses_rng) {
      assert.deepEqual(vec, expected, `${input.kind} ${JSON.stringify(input.params)}`);
      exact++;
    } else {
      const terms = Math.max(1, input.rows.length);
      vec.forEach((v, i) => assert.ok(Math.abs(v - expected[i]) <= terms, `${input.kind} entry ${i}: ${v} vs ${expected[i]}`));
    }
    assert.ok(vec.every((v) => Math.abs(v) <= input.plan.max_abs), "within the plan's max_abs");
    const [l1, l2] = kind.taskSensitivity(task) as [number, number];
    assert.ok(vec.reduce((a, v) => a + Math.abs(v), 0) <= l1 * (1 + 1e-9));
    assert.ok(Math.sqrt(vec.reduce((a, v) => a + v * v, 0)) <= l2 * (1 + 1e-9));
    const st = kind.validity(task);
    assert.equal(st === null ? null : hex(st.encode()), output.statement, `${input.kind}: the statement Python derives`);
    if (st && !output.uses_rng) assert.equal(st.check(vec.map(BigInt)), null);
  }
  assert.ok(exact >= 9, `${exact} deterministic cases`);
});

test("Python-compatible text: float repr, canonical JSON, pairwise sums", () => {
  for (const [x, text] of [[1e-5, "1e-05"], [0.0001, "0.0001"], [1e16, "1e+16"], [123.5, "123.5"], [1e15 + 0.5, "1000000000000000.5"], [-2.5e-7, "-2.5e-07"], [0.1, "0.1"]] as const) {
    assert.equal(pyFloatRepr(x), text);
  }
  assert.equal(pyJsonDumps({ b: [1, 2.5, "é\n"], a: null, c: true }), '{"a": null, "b": [1, 2.5, "\\u00e9\\n"], "c": true}');
  const many = Array.from({ length: 300 }, (_, i) => 0.1 * i + 1e-9 * i * i);
  // numpy: np.sum(0.1 * i + 1e-9 * i * i for i in range(300)) (pairwise); differs from a plain loop in the last bits
  assert.equal(npSum(many), 4485.008955050001);
});

test("training hold-out split: the row hash agrees with Python's for plain rows", async () => {
  // queries.training.client.is_holdout of these rows at 0.5, computed in Python
  assert.equal(await isHoldout({ items: [{ visits: [[0.73, 0]] }], selected: 0 }, 0.5), false);
  assert.equal(await isHoldout({ x: [0.25, -1.5], y: 1 }, 0.5), true);
});
