/** The task digest (taskDigest.ts, queries/task_digest.py): the view of the assignment it covers, RFC 8785 bytes,
 * the digest of the object as received, typed refusals naming the member, and the device's refusal of an assignment
 * whose digest it cannot compute. Byte-for-byte agreement with Python over many cases: vectors_digest.test.ts. */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";

import { hex } from "../src/bytes.js";
import { DeviceClient } from "../src/client.js";
import { parseAssignment, rawAssignment } from "../src/envelope.js";
import { DIGEST_FIELDS, TaskDigestError, canonicalJson, digestView, taskDigest, wellFormed } from "../src/taskDigest.js";
import * as index from "../src/index.js";
import { LocalStore } from "../src/store.js";
import { bodyJson, fakeServer, json } from "./fakeServer.js";

// every member, the per-device ones and null ones included, and the JSON text's own escapes and number forms
const RAW_TEXT = String.raw`{"query_id": "q1", "round": 2, "cohort_id": "cc", "party_id": 4, "kind": "histogram", "source": "words",
 "task": {"buckets": ["b", "a", "\u00e9"], "z": 1.5, "a": null, "small": 1e-7, "neg": -0.0, "big": 9007199254740991},
 "secagg": {"n": 3, "session_id": "ab"}, "threat_model": "active", "first_phase": 0, "phase_timeout_s": 5.5,
 "noise": null, "validation": null, "privacy": {"epsilon": 1.0, "delta": 1e-06},
 "peer_identity_keys": {"1": "AAAA"}, "server_url": "http://x", "spec": {"\u20ac": 1, "a": "\u2028\n\ud83d\ude00"}}`;
/** queries.task_digest on RAW_TEXT (json.loads), frozen from Python: its canonical view and digest. */
const PYTHON_JCS = '{"kind":"histogram","privacy":{"delta":0.000001,"epsilon":1},"query_id":"q1","round":2,"secagg":{"n":3,"session_id":"ab"},"source":"words","spec":{"a":"\u2028\\n\u{1f600}","€":1},"task":{"a":null,"big":9007199254740991,"buckets":["b","a","é"],"neg":0,"small":1e-7,"z":1.5},"threat_model":"active"}';
const PYTHON_DIGEST = "decb945d281238c35f022a8b6676c7301a4abbb29ef3cd09426a6b9928cbae89";

test("the view: the digest fields present and not null, nothing per device", () => {
  const raw = JSON.parse(RAW_TEXT);
  const view = digestView(raw);
  assert.deepEqual(Object.keys(view).sort(), ["kind", "privacy", "query_id", "round", "secagg", "source", "spec", "task", "threat_model"]);
  assert.deepEqual([...DIGEST_FIELDS], ["spec", "query_id", "round", "kind", "source", "task", "secagg", "threat_model", "noise", "validation", "privacy"]);
  for (const k of ["cohort_id", "party_id", "first_phase", "phase_timeout_s", "peer_identity_keys", "server_url", "noise", "validation"]) assert.ok(!(k in view), k);
  assert.equal(view.task, raw.task, "the members as received, not copies");
});

test("RFC 8785 bytes and the digest agree with Python's for the same JSON text", async () => {
  const raw = JSON.parse(RAW_TEXT);
  const text = new TextDecoder().decode(canonicalJson(digestView(raw)));
  assert.equal(text, PYTHON_JCS);
  const expected = createHash("sha256").update("fa-task-digest/v1\n").update(PYTHON_JCS, "utf8").digest("hex");
  assert.equal(expected, PYTHON_DIGEST);
  assert.equal(hex(await taskDigest(raw)), PYTHON_DIGEST);
  // the per-device fields and member order change nothing; any digest field does
  const other = { ...raw, party_id: 9, peer_identity_keys: { "9": "BBBB" }, server_url: "http://y", phase_timeout_s: 1, first_phase: 1, cohort_id: "dd" };
  assert.equal(hex(await taskDigest(Object.fromEntries(Object.entries(other).reverse()))), PYTHON_DIGEST);
  for (const [k, v] of [["round", 3], ["kind", "heavy_hitters"], ["noise", { mechanism: "none", scale: 0 }], ["spec", {}]] as const) {
    assert.notEqual(hex(await taskDigest({ ...raw, [k]: v })), PYTHON_DIGEST, k);
  }
  assert.equal(hex(await taskDigest({ ...raw, noise: null })), PYTHON_DIGEST, "null is absent");
});

test("numbers and values two languages could read differently are refused, naming the member", async () => {
  const unsafe: [Record<string, unknown>, RegExp][] = [
    [{ task: { x: [1, 2 ** 53] } }, /^task: an integer is beyond ±\(2\^53 − 1\) \(9007199254740992 at task\.x\[1\]\)$/],
    [{ round: -(2 ** 53) }, /^round: an integer is beyond/],
    [{ spec: { params: { upper: 1e21 } } }, /^spec: an integer is beyond .*spec\.params\.upper/],
    [{ secagg: { n: Infinity } }, /^secagg: not canonical JSON: Infinity at secagg\.n is not a finite number$/],
    [{ task: { f: () => 1 } }, /^task: not canonical JSON: task\.f is not a JSON value \(function\)$/],
    [{ task: [undefined] }, /^task: not canonical JSON: task\[0\] is not a JSON value \(undefined\)$/],
    [{ task: { d: new Date(0) } }, /^task: not canonical JSON: task\.d is not a JSON value \(not a plain object\)$/],
    [{ task: { b: 1n } }, /not a JSON value \(bigint\)/],
    [{ spec: { s: "\ud800" } }, /^assignment: not canonical JSON: Lone surrogate/],
  ];
  for (const [a, msg] of unsafe) await assert.rejects(taskDigest(a), (e: Error) => e instanceof TaskDigestError && msg.test(e.message), JSON.stringify(Object.keys(a)));
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  await assert.rejects(taskDigest({ task: cyclic }), /task: not canonical JSON: task\.self refers to itself/);
  // 2^53 − 1 is the largest integer taken; a value shared by two members is no cycle
  const shared = { a: 1 };
  await taskDigest({ round: 2 ** 53 - 1, task: { x: shared, y: shared }, spec: { z: shared } });
  await assert.rejects(taskDigest([] as never), /assignment: not a JSON object/);
});

test("the device digests the assignment as received: parseAssignment keeps the raw object", async () => {
  const raw = JSON.parse(RAW_TEXT);
  raw.noise = { mechanism: "none", scale: 0 };  // the parsed form fills in std and encoding_scale
  raw.threat_model = "semi_honest";
  delete raw.peer_identity_keys;  // no longer a member of the assignment: refused below
  raw.privacy = { mechanism: "none" };
  const a = parseAssignment(raw);
  assert.equal(rawAssignment(a), raw);
  assert.deepEqual(a.noise, { mechanism: "none", scale: 0, std: null, encoding_scale: 1 });
  assert.notEqual(hex(await taskDigest(a as never)), hex(await taskDigest(raw)), "a re-serialised copy would differ");
  assert.deepEqual(a.spec, raw.spec);
  assert.throws(() => parseAssignment({ ...raw, spec: [1] }), /assignment\.spec: expected an object/);
  // the server stopped sending the peers' identity keys (they come with the peer keys): the field is unknown, as in
  // Python's model (extra fields forbidden)
  assert.throws(() => parseAssignment({ ...raw, peer_identity_keys: { "1": "AAAA" } }), /assignment\.peer_identity_keys: unexpected field/);
  assert.equal(typeof index.taskDigest, "function", "exported from the package's main module");
  assert.equal(index.TaskDigestError, TaskDigestError);
});

test("an assignment whose digest cannot be computed is refused as invalid_assignment and reported; nothing is logged", async () => {
  const reported: any[] = [];
  const server = fakeServer((req) => {
    if (req.path.endsWith("/refusal")) reported.push(bodyJson(req));
    return json(200, {});
  });
  const store = new LocalStore();
  await store.add("colors", "red");
  const client = new DeviceClient("http://fa.test", store, { log: () => {}, network: { fetch: server.fetch } });
  const a = parseAssignment({
    query_id: "q".repeat(32), round: 0, cohort_id: "c".repeat(32), party_id: 1, kind: "histogram", source: "colors",
    task: { buckets: ["red", "blue"], other_bucket: null, max_contributions: 1 },
    secagg: { session_id: "14215981eb0a6d5f17137db942e2ae07", n: 3, dim: 2, bits: 16, threat_model: "active" }, threat_model: "active", phase_timeout_s: 5,
    // a valid task (it is parsed when the assignment is admitted, before the digest), a spec the digest cannot hash
    spec: { kind: "histogram", params: { buckets: ["red", "blue"], salt: 12345678901234567890 } },
  });
  const out = await client.runAssignment(a);
  assert.deepEqual([out.status, out.reason], ["refused", "invalid_assignment"]);
  assert.match(out.detail, /^task digest: spec\.params\.salt: an integer is beyond ±\(2\^53 − 1\)|^task digest: spec: an integer is beyond ±\(2\^53 − 1\)/);
  assert.deepEqual(reported.map((r) => r.reason), ["invalid_assignment"]);
  assert.deepEqual(await client.transparencyLog(), []);
  assert.equal(server.seen.filter((r) => r.path.includes("/phases/")).length, 0, "no phase message was sent");
});

test("the isWellFormed stand-in (runtimes before ES2024) agrees with the built-in", () => {
  for (const t of ["", "abc", "\u{1f600}", "\ud83d", "\ude00", "a\ud83d\ude00b", "\ude00\ud83d", "\ud83d\ud83d\ude00", "x\udc00"]) {
    assert.equal(wellFormed(t), (t as unknown as { isWellFormed(): boolean }).isWellFormed(), JSON.stringify(t));
  }
});
