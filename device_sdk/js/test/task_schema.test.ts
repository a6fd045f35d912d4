/** The task schema checker (src/kinds/taskSchema.ts) on the constructs the typed feature_stats and training tasks use:
 * a union tagged by one field (oneOf + discriminator), additionalProperties as a schema, maxProperties and
 * propertyNames; and it stays strict (an unknown keyword, or a oneOf without a discriminator, is an error). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { QueryKindError } from "../src/kinds/kind.js";
import { kindOf, parseTask } from "../src/kinds/registry.js";
import { JsonSchema, checkTask } from "../src/kinds/taskSchema.js";

const TAGGED: JsonSchema = {
  $defs: {
    A: { type: "object", properties: { stage: { const: "a", type: "string" }, n: { type: "integer", minimum: 0 } },
         required: ["stage", "n"], additionalProperties: false },
    B: { type: "object", properties: { stage: { const: "b", type: "string" },
                                       w: { type: "object", additionalProperties: { type: "number" }, maxProperties: 2,
                                            propertyNames: { minLength: 1 } } },
         required: ["stage", "w"], additionalProperties: false },
  },
  oneOf: [{ $ref: "#/$defs/A" }, { $ref: "#/$defs/B" }],
  discriminator: { propertyName: "stage", mapping: { a: "#/$defs/A", b: "#/$defs/B" } },
};

const refused = (task: unknown, field: string): void => {
  assert.throws(() => checkTask(TAGGED, task), (exc: unknown) => {
    assert.ok(exc instanceof QueryKindError);
    assert.equal(exc.message.split(":")[0], field, exc.message);
    return true;
  }, JSON.stringify(task));
};

test("task schema: a tagged union picks its variant by the tag and names the tag when it is missing or unknown", () => {
  assert.doesNotThrow(() => checkTask(TAGGED, { stage: "a", n: 3 }));
  assert.doesNotThrow(() => checkTask(TAGGED, { stage: "b", w: { x: 1.5 } }));
  refused({ stage: "c", n: 3 }, "task.stage");
  refused({ n: 3 }, "task.stage");
  refused({ stage: 1, n: 3 }, "task.stage");
  refused([], "task");
  refused({ stage: "a", n: "3" }, "task.n");
  refused({ stage: "a", n: 3, w: {} }, "task.w"); // B's field is not A's
  refused({ stage: "b", w: { x: "1" } }, "task.w.x");
  refused({ stage: "b", w: { x: 1, y: 2, z: 3 } }, "task.w");
  refused({ stage: "b", w: { "": 1 } }, "task.w.");
});

test("task schema: stays strict about what it does not know", () => {
  assert.throws(() => checkTask({ oneOf: [{ type: "integer" }] }, 1), /oneOf is supported only with a discriminator/);
  assert.throws(() => checkTask({ type: "object", patternProperties: {} }, {}), /unsupported keyword patternProperties/);
});

test("task schema: the feature_stats and training kinds refuse a string for an integer, as in Python", () => {
  const first = { stage: "first_moments", first_moment: "centred", features: [{ name: "age", lower: 18, upper: 90 }], scale_exp: 16, max_examples: 3 };
  const parsed = parseTask("feature_stats", first);
  assert.deepEqual(kindOf(parsed).taskSensitivity(parsed.task), [3 * 2 ** 16 * 2, 3 * 2 ** 16 * Math.SQRT2]);
  assert.throws(() => parseTask("feature_stats", { ...first, scale_exp: "16" }), /^QueryKindError: task\.scale_exp:|task\.scale_exp:/);
  assert.throws(() => parseTask("feature_stats", { ...first, features: [{ name: "age", lower: 90, upper: 18 }] }), /task\.features\.0:/);
  assert.throws(() => parseTask("feature_stats", { stage: "row_counts", grid: [1, 3, 2] }), /task\.grid: bounds must be increasing/);
  const evalTask = {
    model: { name: "frecency" }, client: { epochs: 1, batch_size: 0, lr: 0.1, max_examples: 100 }, precision_bits: 20,
    holdout_fraction: 0.2, features: null, scaling: null, class_weights: null, phase: "eval", weights: [0, 0],
    loss_cap: 10, metrics: [], weighting: "uniform",
  };
  assert.ok(kindOf(parseTask("training", evalTask)).taskSensitivity(parseTask("training", evalTask).task));
  assert.throws(() => parseTask("training", { ...evalTask, precision_bits: "20" }), /task\.precision_bits:/);
  assert.throws(() => parseTask("training", { ...evalTask, phase: "finetune" }), /task\.phase:/);
  assert.throws(() => parseTask("nope", {}), /^QueryKindError: kind: unknown query kind "nope"|kind: unknown query kind/);
});

test("task schema: a parsed task is a typed copy with the schema's defaults filled in, the received one untouched", () => {
  const received = { mode: "secagg", depth: 0, frontier: [""], alphabet: "abc", max_length: 4, max_words: 2 };
  const parsed = parseTask("heavy_hitters", received);
  assert.equal(parsed.kind, "heavy_hitters");
  assert.equal(parsed.task.casefold, true, "casefold defaults to true, as in Python");
  assert.ok(!("casefold" in received), "the assignment's own task (what its digest covers) is not changed");
  assert.notEqual(parsed.task.frontier, received.frontier);
  const training = parseTask("training", {
    model: { name: "frecency" }, client: {}, precision_bits: 20, holdout_fraction: 0.2, features: null, scaling: null,
    class_weights: null, phase: "eval", weights: [0, 0], loss_cap: 10, metrics: [], weighting: "uniform",
  });
  assert.equal(training.kind, "training");
  // ClientSpec's defaults (queries/training/params.py) and ModelSpec's: filled in, as pydantic does
  assert.deepEqual(training.task.client, { epochs: 1, batch_size: 0, lr: 0.1, max_examples: 1000 });
  assert.equal(training.task.model.n_features, null);
  // an alternative of anyOf that does not match leaves none of its defaults behind
  const schema: JsonSchema = {
    anyOf: [{ type: "object", properties: { a: { type: "integer" }, d: { type: "integer", default: 1 } }, required: ["a"], additionalProperties: false },
            { type: "object", properties: { b: { type: "integer" }, e: { type: "integer", default: 2 } }, required: ["b"], additionalProperties: false }],
  };
  assert.deepEqual(checkTask(schema, { b: 5 }), { b: 5, e: 2 });
});
