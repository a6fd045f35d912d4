/** One set of task parsing rules in both SDKs: a round's task is checked against the JSON Schema of the kind's
 * `Task` model (queries/kind.py), which the Python vector generator writes to taskSchemas.generated.ts and to
 * tests/vectors/task_schemas.json. The checker below knows exactly the keywords pydantic writes for a task model
 * (type, properties, required, additionalProperties (false or a schema), maxProperties, propertyNames, items, min/maxItems, min/maxLength, minimum/maximum, anyOf,
 * enum, const, $ref/$defs, default, and a tagged union: oneOf with a discriminator {propertyName, mapping}) and refuses a schema with any other keyword, so a rule can never be silently ignored.
 * A task that passes comes back as a copy with the schema's defaults filled in (as pydantic fills them), typed as the
 * kind's generated task type (taskTypes.generated.ts, from the same schemas); the kind's rules across fields come
 * after (registry.ts `parseTask`). It is interpreted, not compiled (no `new Function`: fine under a strict
 * Content-Security-Policy; ~2 kB). */

import { QueryKindError } from "./kind.js";
import { TASK_SCHEMAS } from "./taskSchemas.generated.js";
import type { TaskTypes } from "./taskTypes.generated.js";

export type JsonSchema = { [keyword: string]: unknown };

const KNOWN = new Set([
  "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength",
  "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "enum", "const", "$ref", "$defs",
  "oneOf", "discriminator", "maxProperties", "propertyNames",
  "title", "description", "default", "examples",
]);

class Refused extends Error {
  constructor(readonly path: (string | number)[], message: string) {
    super(message);
  }
}

function typeOk(type: string, v: unknown): boolean {
  switch (type) {
    case "object": return typeof v === "object" && v !== null && !Array.isArray(v);
    case "array": return Array.isArray(v);
    case "string": return typeof v === "string";
    case "integer": return typeof v === "number" && Number.isSafeInteger(v);
    case "number": return typeof v === "number" && Number.isFinite(v);
    case "boolean": return typeof v === "boolean";
    case "null": return v === null;
    default: throw new Error(`task schema: unknown type ${JSON.stringify(type)}`);
  }
}

/** A default to fill in once the whole task passed: the object, the key and the schema's default. */
type Fill = [Record<string, unknown>, string, unknown];

function check(schema: JsonSchema, v: unknown, path: (string | number)[], root: JsonSchema, fills: Fill[]): void {
  for (const k of Object.keys(schema)) if (!KNOWN.has(k)) throw new Error(`task schema: unsupported keyword ${k}`);
  if (typeof schema.$ref === "string") {
    const name = schema.$ref.replace(/^#\/\$defs\//, "");
    const target = (root.$defs as Record<string, JsonSchema> | undefined)?.[name];
    if (!target) throw new Error(`task schema: unresolved ${schema.$ref}`);
    check(target, v, path, root, fills);
  }
  if (schema.oneOf !== undefined || schema.discriminator !== undefined) {
    // only the tagged union pydantic writes: the tag's value picks the one alternative (as Python, which names the tag)
    const disc = schema.discriminator as { propertyName?: unknown; mapping?: Record<string, string> } | undefined;
    if (!Array.isArray(schema.oneOf) || typeof disc?.propertyName !== "string" || typeof disc.mapping !== "object") {
      throw new Error("task schema: oneOf is supported only with a discriminator {propertyName, mapping}");
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) throw new Refused(path, "must be an object");
    const tag = (v as Record<string, unknown>)[disc.propertyName];
    const ref = typeof tag === "string" && Object.prototype.hasOwnProperty.call(disc.mapping, tag) ? disc.mapping[tag] : undefined;
    if (ref === undefined) {
      throw new Refused([...path, disc.propertyName], `must be one of ${JSON.stringify(Object.keys(disc.mapping))}`);
    }
    check({ $ref: ref }, v, path, root, fills);
  }
  if (Array.isArray(schema.anyOf)) {
    const errors: Refused[] = [];
    for (const alt of schema.anyOf as JsonSchema[]) {
      const filled = fills.length;
      try {
        check(alt, v, path, root, fills);
        break;
      } catch (exc) {
        if (!(exc instanceof Refused)) throw exc;
        fills.length = filled; // the defaults of an alternative that did not match are not filled in
        errors.push(exc);
      }
    }
    if (errors.length === (schema.anyOf as unknown[]).length) throw errors[0];
  }
  if (typeof schema.type === "string" && !typeOk(schema.type, v)) throw new Refused(path, `must be of type ${schema.type}`);
  if ("const" in schema && v !== schema.const) throw new Refused(path, `must be ${JSON.stringify(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.includes(v)) throw new Refused(path, `must be one of ${JSON.stringify(schema.enum)}`);
  if (typeof v === "number") {
    if (typeof schema.minimum === "number" && v < schema.minimum) throw new Refused(path, `must be ≥ ${schema.minimum}`);
    if (typeof schema.maximum === "number" && v > schema.maximum) throw new Refused(path, `must be ≤ ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === "number" && v <= schema.exclusiveMinimum) throw new Refused(path, `must be > ${schema.exclusiveMinimum}`);
    if (typeof schema.exclusiveMaximum === "number" && v >= schema.exclusiveMaximum) throw new Refused(path, `must be < ${schema.exclusiveMaximum}`);
  }
  if (typeof v === "string") {
    const n = [...v].length; // code points, as Python counts
    if (typeof schema.minLength === "number" && n < schema.minLength) throw new Refused(path, `must have at least ${schema.minLength} characters`);
    if (typeof schema.maxLength === "number" && n > schema.maxLength) throw new Refused(path, `must have at most ${schema.maxLength} characters`);
  }
  if (Array.isArray(v)) {
    if (typeof schema.minItems === "number" && v.length < schema.minItems) throw new Refused(path, `must have at least ${schema.minItems} items`);
    if (typeof schema.maxItems === "number" && v.length > schema.maxItems) throw new Refused(path, `must have at most ${schema.maxItems} items`);
    if (schema.items && typeof schema.items === "object") v.forEach((item, i) => check(schema.items as JsonSchema, item, [...path, i], root, fills));
  }
  if (typeof v === "object" && v !== null && !Array.isArray(v)) {
    const obj = v as Record<string, unknown>;
    const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
    for (const key of (schema.required ?? []) as string[]) if (!(key in obj)) throw new Refused([...path, key], "is required");
    const entries = Object.entries(obj);
    if (typeof schema.maxProperties === "number" && entries.length > schema.maxProperties) {
      throw new Refused(path, `must have at most ${schema.maxProperties} keys`);
    }
    for (const [key, value] of entries) {
      if (schema.propertyNames && typeof schema.propertyNames === "object") check(schema.propertyNames as JsonSchema, key, [...path, key], root, fills);
      if (Object.prototype.hasOwnProperty.call(props, key)) check(props[key], value, [...path, key], root, fills);
      else if (schema.additionalProperties === false) throw new Refused([...path, key], "is not allowed (unknown key)");
      else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
        check(schema.additionalProperties as JsonSchema, value, [...path, key], root, fills);
      }
    }
    for (const [key, prop] of Object.entries(props)) if (!Object.prototype.hasOwnProperty.call(obj, key) && "default" in prop) fills.push([obj, key, prop.default]);
  }
}

/** The task checked against the schema of `kind` (a kind with a generated task type): a copy with the schema's
 * defaults filled in; QueryKindError naming the field (`task.max_contributions: …`). */
export function checkSchema<K extends keyof TaskTypes>(kind: K, task: unknown): TaskTypes[K] {
  const schema = TASK_SCHEMAS[kind] as JsonSchema | undefined;
  if (!schema) throw new QueryKindError(`kind: no task schema for ${JSON.stringify(kind)}`);
  return checkTask(schema, task) as TaskTypes[K];
}

/** `task` checked against `schema` (a task model's JSON Schema): a copy of it with the schema's defaults filled in;
 * QueryKindError naming the field when it is refused; an Error when the schema uses a keyword (or a `oneOf` without a
 * discriminator) this checker does not know. */
export function checkTask(schema: JsonSchema, task: unknown): unknown {
  const copy: unknown = structuredClone(task);
  const fills: Fill[] = [];
  try {
    check(schema, copy, [], schema, fills);
  } catch (exc) {
    if (!(exc instanceof Refused)) throw exc;
    throw new QueryKindError(`${["task", ...exc.path].join(".")}: ${exc.message}`);
  }
  for (const [obj, key, value] of fills) obj[key] = structuredClone(value);
  return copy;
}
