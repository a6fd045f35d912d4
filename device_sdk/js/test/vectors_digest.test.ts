/** The task digest against tests/vectors/task_digest.json, byte for byte: the RFC 8785 text of each assignment's
 * digest view and its SHA-256 — the round-0 assignment of every example spec as the server builds it, and the edge
 * cases (number forms, strings, member order, nulls, per-device members). The file is read as text and parsed as a
 * device parses its check-in answer, so integral doubles written as floats (`1e+21`, `9007199254740992.0`) are told
 * from JSON integers, as the reference tells them. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { hex } from "../src/bytes.js";
import { assignmentUnsafeIntegers, parseCheckin, rawAssignment } from "../src/envelope.js";
import { TASK_DIGEST_DOMAIN, TaskDigestError, canonicalJson, digestView, taskDigest, unsafeIntegerLiterals } from "../src/taskDigest.js";
import { ROOT } from "./helpers.js";

const TEXT = readFileSync(join(ROOT, "tests", "vectors", "task_digest.json"), "utf8");
const FILE = JSON.parse(TEXT) as { versions: Record<string, string>; cases: { input: { name: string; assignment: Record<string, unknown> }; output: { canonical: string; digest: string } }[] };
const UNSAFE = unsafeIntegerLiterals(TEXT);

test("task digest vectors: canonical text and digest of every case", async () => {
  assert.equal(FILE.versions.task_digest_domain, new TextDecoder().decode(TASK_DIGEST_DOMAIN));
  assert.ok(FILE.cases.length >= 10);
  for (const { input, output } of FILE.cases) {
    const canonical = new TextDecoder().decode(canonicalJson(digestView(input.assignment), "assignment", { unsafeIntegers: UNSAFE }));
    assert.equal(canonical, output.canonical, input.name);
    assert.equal(hex(await taskDigest(input.assignment, { unsafeIntegers: UNSAFE })), output.digest, input.name);
  }
});

test("task digest vectors: the example assignments parse as a device's check-in answer and digest the same", async () => {
  for (const { input, output } of FILE.cases.filter((c) => c.input.name.startsWith("examples/"))) {
    const text = JSON.stringify({ assignment: input.assignment, queries_running: 1 });
    const a = parseCheckin(JSON.parse(text), text).assignment;
    assert.ok(a, "the server's assignment is one the device accepts");
    assert.equal(hex(await taskDigest(rawAssignment(a), { unsafeIntegers: assignmentUnsafeIntegers(a) })), output.digest, input.name);
  }
});

test("integral doubles beyond 2^53: taken when the text shows a float, refused as integers without the text", async () => {
  const doubles = FILE.cases.find((c) => c.input.name.startsWith("integral doubles"));
  assert.ok(doubles, "the vectors have the case");
  await assert.rejects(taskDigest(doubles.input.assignment), (e: Error) => e instanceof TaskDigestError && /^task: an integer is beyond/.test(e.message),
    "without the text the conservative reading refuses them");
  const text = '{"a": "9007199254740993", "b": 9007199254740993, "c": 1e21, "d": 0.123456789012345678901, "e": -12345678901234567890, "f": 9007199254740991, "g": 1.0e+17}';
  assert.deepEqual([...unsafeIntegerLiterals(text)].sort(), [-12345678901234567000, 9007199254740992].sort());
  const parsed = JSON.parse(text);
  const unsafeIntegers = unsafeIntegerLiterals(text);
  await assert.rejects(taskDigest({ task: { b: parsed.b } }, { unsafeIntegers }), /task: an integer is beyond ±\(2\^53 − 1\) \(9007199254740992 at task\.b\)/);
  await assert.rejects(taskDigest({ spec: { e: parsed.e } }, { unsafeIntegers }), /spec: an integer is beyond/);
  await taskDigest({ task: { c: parsed.c, f: parsed.f, g: parsed.g } }, { unsafeIntegers });
  // the check-in parser records the text's integer literals for the digest
  const answer = '{"assignment": {"query_id": "q", "round": 0, "cohort_id": "c", "party_id": 1, "kind": "histogram", "source": "s", "task": {"x": 1e21, "y": 18014398509481984}, "secagg": {}, "threat_model": "semi_honest", "phase_timeout_s": 1}}';
  const a = parseCheckin(JSON.parse(answer), answer).assignment;
  assert.ok(a);
  assert.deepEqual([...(assignmentUnsafeIntegers(a) ?? [])], [18014398509481984]);
  await assert.rejects(taskDigest(rawAssignment(a), { unsafeIntegers: assignmentUnsafeIntegers(a) }), /task\.y/);
});
