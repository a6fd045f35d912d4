/** The generated task types (src/kinds/taskTypes.generated.ts) are what scripts/gen-task-types.mjs makes of
 * tests/vectors/task_schemas.json now: regenerated in memory, compared with the committed file. A stale file means the
 * Python task models changed: run `node scripts/gen-task-types.mjs` (after `python -m tests.support.vectors`). */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

import { TASK_SCHEMAS } from "../src/kinds/taskSchemas.generated.js";
import { NORM_BUCKETS } from "../src/kinds/training/training.js";
import { ROOT } from "./helpers.js";

const JS = join(ROOT, "device_sdk", "js");

interface Generator {
  SCHEMAS: string;
  OUTPUT: string;
  renderTaskTypes(vectorText: string): Promise<string>;
}

test("task types: the committed generated file is what the generator makes of the schemas now", async () => {
  const gen = (await import(pathToFileURL(join(JS, "scripts", "gen-task-types.mjs")).href)) as Generator;
  assert.equal(gen.OUTPUT, join(JS, "src", "kinds", "taskTypes.generated.ts"));
  const fresh = await gen.renderTaskTypes(readFileSync(gen.SCHEMAS, "utf8"));
  assert.equal(readFileSync(gen.OUTPUT, "utf8"), fresh, "stale: run node scripts/gen-task-types.mjs");
  for (const title of ["HistogramTask", "FeatureStatsTask", "HeavyHittersTask", "TrainingTask", "QuantilesTask"]) {
    assert.match(fresh, new RegExp(`export (interface|type) ${title}\\b`));
  }
  // one task type per kind with a schema, by kind name
  const block = /export interface TaskTypes \{([^}]*)\}/.exec(fresh)?.[1] ?? "";
  assert.deepEqual([...block.matchAll(/^\s*(\w+):/gm)].map((m) => m[1]).sort(), Object.keys(TASK_SCHEMAS).sort());
});

test("task types: the generator refuses two different models under one name", async () => {
  const gen = (await import(pathToFileURL(join(JS, "scripts", "gen-task-types.mjs")).href)) as Generator;
  const kind = (name: string, lower: string) => ({
    input: { kind: name },
    output: { schema: { title: `${name}Task`, type: "object", properties: { f: { $ref: "#/$defs/F" } }, required: ["f"],
                        $defs: { F: { type: "object", properties: { [lower]: { type: "number" } } } } } },
  });
  await assert.rejects(gen.renderTaskTypes(JSON.stringify({ cases: [kind("a", "x"), kind("b", "y")] })), /two different models named F/);
});

test("task types: the training kind's clip entries are the schema's enum", () => {
  const train = (TASK_SCHEMAS.training.$defs as Record<string, { properties: Record<string, { enum?: number[] }> }>).TrainTask;
  assert.deepEqual(train.properties.clip_entries.enum, [0, 1, NORM_BUCKETS]);
});
