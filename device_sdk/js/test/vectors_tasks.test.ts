/** Task parsing against tests/vectors/task_parsing.json and task_schemas.json: the TS kinds accept and refuse exactly
 * the tasks the Python `parse_task` does (True, 3.7 or "3" for an integer, unknown keys, empty or mistyped lists),
 * naming the same field, and the embedded schemas are those the Python models write. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { QueryKindError } from "../src/kinds/kind.js";
import { getKind } from "../src/kinds/registry.js";
import { TASK_SCHEMAS } from "../src/kinds/taskSchemas.generated.js";
import { ROOT } from "./helpers.js";

type Case<I, O> = { input: I; output: O };
const read = <T>(name: string): T => JSON.parse(readFileSync(join(ROOT, "tests", "vectors", name), "utf8")) as T;
const PARSING = read<{ cases: Case<{ kind: string; task: unknown }, { accepted: boolean; field: string | null }>[] }>("task_parsing.json");
const SCHEMAS = read<{ cases: Case<{ kind: string }, { schema: unknown }>[] }>("task_schemas.json");

test("task schemas: the embedded copy is the one in the vectors", () => {
  assert.ok(SCHEMAS.cases.length >= 1);
  assert.deepEqual(Object.keys(TASK_SCHEMAS).sort(), SCHEMAS.cases.map((c) => c.input.kind).sort());
  for (const { input, output } of SCHEMAS.cases) assert.deepEqual(TASK_SCHEMAS[input.kind], output.schema, input.kind);
});

test("task parsing vectors: accepted and refused tasks, naming the field", () => {
  assert.ok(PARSING.cases.some((c) => c.output.accepted) && PARSING.cases.some((c) => !c.output.accepted));
  for (const { input, output } of PARSING.cases) {
    const label = `${input.kind} ${JSON.stringify(input.task)}`;
    const kind = getKind(input.kind);
    assert.ok(kind.parseTask, `${input.kind} has a typed task in Python, so its TS kind must parse it`);
    if (output.accepted) {
      assert.doesNotThrow(() => kind.parseTask?.(input.task as Record<string, unknown>), label);
      assert.ok(getKind(input.kind).taskSensitivity(input.task as Record<string, unknown>), label);
    } else {
      assert.throws(() => kind.parseTask?.(input.task as Record<string, unknown>), (exc: unknown) => {
        assert.ok(exc instanceof QueryKindError, label);
        assert.equal(exc.message.split(":")[0].split(".")[1], output.field, label);
        return true;
      }, label);
      assert.throws(() => getKind(input.kind).taskSensitivity(input.task as Record<string, unknown>), QueryKindError, label);
    }
  }
});
