/** Task parsing against tests/vectors/task_parsing.json and task_schemas.json: the TS kinds accept and refuse exactly
 * the tasks the Python `parse_task` does (True, 3.7 or "3" for an integer, unknown keys, empty or mistyped lists),
 * naming the same field, and the embedded schemas are those the Python models write. The cases with a `rule` are the
 * Python models' rules across fields: each one the schema lets through is refused by the TS kind's `checkRules`. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { QueryKindError } from "../src/kinds/kind.js";
import { KindName, kindOf, parseTask } from "../src/kinds/registry.js";
import { checkSchema } from "../src/kinds/taskSchema.js";
import { TASK_SCHEMAS } from "../src/kinds/taskSchemas.generated.js";
import { ROOT } from "./helpers.js";

type Case<I, O> = { input: I; output: O };
const read = <T>(name: string): T => JSON.parse(readFileSync(join(ROOT, "tests", "vectors", name), "utf8")) as T;
const PARSING = read<{ cases: Case<{ kind: string; task: unknown; rule?: string }, { accepted: boolean; field: string | null }>[] }>("task_parsing.json");
const SCHEMAS = read<{ cases: Case<{ kind: string }, { schema: unknown }>[] }>("task_schemas.json");

/** The field a QueryKindError names (`task.<field>…: …`). */
const fieldOf = (exc: unknown): string => {
  assert.ok(exc instanceof QueryKindError, String(exc));
  return exc.message.split(":")[0].split(".")[1];
};

test("task schemas: the embedded copy is the one in the vectors", () => {
  assert.ok(SCHEMAS.cases.length >= 1);
  assert.deepEqual(Object.keys(TASK_SCHEMAS).sort(), SCHEMAS.cases.map((c) => c.input.kind).sort());
  for (const { input, output } of SCHEMAS.cases) assert.deepEqual(TASK_SCHEMAS[input.kind], output.schema, input.kind);
});

test("task parsing vectors: accepted and refused tasks, naming the field", () => {
  assert.ok(PARSING.cases.some((c) => c.output.accepted) && PARSING.cases.some((c) => !c.output.accepted));
  for (const { input, output } of PARSING.cases) {
    const label = `${input.kind} ${JSON.stringify(input.task).slice(0, 300)}`;
    if (output.accepted) {
      const parsed = parseTask(input.kind, input.task);
      assert.equal(parsed.kind, input.kind);
      assert.ok(kindOf(parsed).taskSensitivity(parsed.task), label);
    } else {
      assert.throws(() => parseTask(input.kind, input.task), (exc: unknown) => {
        assert.equal(fieldOf(exc), output.field, label);
        return true;
      }, label);
    }
  }
});

test("task parsing vectors: each rule across fields is refused by the TS kind's own check, or by the schema that states it", () => {
  const ruled = PARSING.cases.filter((c) => c.input.rule !== undefined);
  assert.ok(ruled.length >= 18, `${ruled.length} rule cases`);
  let byHand = 0;
  for (const { input, output } of ruled) {
    const label = `${input.rule} (${input.kind})`;
    assert.equal(output.accepted, false, label);
    let typed;
    try {
      typed = checkSchema(input.kind as KindName, input.task);
    } catch (exc) {
      assert.equal(fieldOf(exc), output.field, `${label}: the schema states the rule`);
      continue;
    }
    byHand++;
    const parsed = { kind: input.kind, task: typed } as Parameters<typeof kindOf>[0];
    assert.throws(() => kindOf(parsed).checkRules(parsed.task), (exc: unknown) => {
      assert.equal(fieldOf(exc), output.field, label);
      return true;
    }, label);
  }
  assert.ok(byHand >= 17, `${byHand} rules checked by hand`);
});
