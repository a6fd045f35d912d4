/** The safety floor in the device's policy (device_sdk/policy.py, tests/device_sdk/test_policy.py): `decide` refuses
 * (`unsafe_parameters`) an assignment without the consistency round — by either threat-model field — or whose degree or
 * threshold is below the floor the device computes from its own `corruptFraction` and `dropoutFraction`, before any
 * data is read; such a refusal is kept in the device's transparency log, charging nothing. The policy's assumptions are
 * validated like Python's (errors naming the field); the floor's functions agree with secagg/floor.py. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { DeviceClient } from "../src/client.js";
import { Assignment, REFUSAL_REASONS, parseAssignment } from "../src/envelope.js";
import { parseTask } from "../src/kinds/registry.js";
import { QueryHistory } from "../src/ledger.js";
import { DevicePolicy, PolicyError, decide } from "../src/policy.js";
import { SecAggConfig } from "../src/secagg/config.js";
import * as floor from "../src/secagg/floor.js";
import { LocalStore } from "../src/store.js";
import { fakeServer, json } from "./fakeServer.js";

const NO_HISTORY: QueryHistory = { privacy: null, perRound: new Map(), layersCharged: 0, weights: new Map() };

function assignment(secagg: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Assignment {
  return parseAssignment({
    query_id: "q1", round: 0, cohort_id: "c0".repeat(16), party_id: 1, kind: "histogram", source: "words",
    task: { buckets: ["a", "b", "c"], other_bucket: null, max_contributions: 1 },
    secagg: { session_id: "7f".repeat(16), n: 8, dim: 3, bits: 40, threat_model: "active", ...secagg },
    threat_model: "active", phase_timeout_s: 5, ...extra,
  });
}

const verdict = (policy: DevicePolicy, a: Assignment) => decide(policy, a, parseTask(a.kind, a.task), NO_HISTORY, 0, 0, false);

test("a cohort below the device's own floor is refused (unsafe_parameters), whatever the server set and however consistently", () => {
  const cases: [string, Assignment, DevicePolicy, string][] = [
    ["the assignment's model", assignment({}, { threat_model: "semi_honest" }), new DevicePolicy(), "threat model semi_honest"],
    ["the config's model", assignment({ threat_model: "semi_honest" }), new DevicePolicy(), "threat model semi_honest"],
    ["a threshold below ⌊(m + ⌊γn⌋)/2⌋ + 1", assignment({ threshold: 5 }), new DevicePolicy(), "threshold: 5 of a neighbourhood of 8"],  // the floor is 6 of 8
    ["a sparse degree below the connectivity floor", assignment({ n: 300, graph: "sparse", degree: 2, threshold: 2 }), new DevicePolicy(), "degree: 2 neighbours"],
    ["a wary device's floor", assignment(), new DevicePolicy({ corruptFraction: 0.5 }), "threshold: 6 of a neighbourhood of 8"],  // its floor is 7
  ];
  for (const [what, a, policy, detail] of cases) {
    const v = verdict(policy, a);
    assert.ok("reason" in v && v.reason === "unsafe_parameters", `${what}: ${JSON.stringify(v)}`);
    assert.ok(v.detail.includes(detail), `${what}: ${v.detail}`);
  }
  assert.ok(!("reason" in verdict(new DevicePolicy(), assignment())), "the honest assignment passes the default floor");
  const d = verdict(new DevicePolicy(), assignment());
  assert.ok(!("reason" in d));
  // the floor comes before the rest of the policy: a cohort too small for minCohort and below the floor names the floor
  const both = verdict(new DevicePolicy({ minCohort: 20 }), assignment({ threshold: 5 }));
  assert.ok("reason" in both && both.reason === "unsafe_parameters");
  // an invalid config is still invalid_assignment
  const invalid = verdict(new DevicePolicy(), assignment({ threshold: 2 }));
  assert.ok("reason" in invalid && invalid.reason === "invalid_assignment", JSON.stringify(invalid));
});

test("a refusal below the floor is kept in the device's transparency log (refused, nothing charged) and reported", async () => {
  const reported: string[] = [];
  const server = fakeServer((req) => {
    if (req.path.endsWith("/refusal")) reported.push(JSON.parse(new TextDecoder().decode(req.body)).reason);
    return json(200, {});
  });
  const store = new LocalStore();
  await store.add("words", "a");
  const client = new DeviceClient("http://fa.test", store, { log: () => {}, network: { fetch: server.fetch } });
  const bad = assignment({ threshold: 5 });
  const out = await client.runAssignment(bad);
  assert.deepEqual([out.status, out.reason], ["refused", "unsafe_parameters"]);
  assert.deepEqual(reported, ["unsafe_parameters"]);
  const [record] = await client.transparencyLog();
  assert.deepEqual([record.status, record.epsilon, record.delta, record.sent_at, record.cohort_id, record.cohort_size], ["refused", null, null, null, bad.cohort_id, 8]);
  assert.equal(record.detail, `unsafe_parameters: ${out.detail}`);
  assert.deepEqual(await client.ledger.spentSince(0), [0, 0, 0]);
  assert.equal(server.seen.filter((r) => r.path.includes("/phases/")).length, 0, "no phase message was sent");
  // a refusal under the device's own policy leaves no row
  const mine = new DeviceClient("http://fa.test", store, { policy: new DevicePolicy({ allowedSources: ["other"] }), log: () => {}, network: { fetch: server.fetch } });
  assert.equal((await mine.runAssignment(assignment())).reason, "source_not_allowed");
  assert.equal((await mine.transparencyLog()).length, 1, "only the unsafe_parameters row");
});

test("the policy's floor assumptions are checked, naming the field; the defaults are Python's", () => {
  for (const [name, value] of [["corruptFraction", 1.0], ["corruptFraction", -0.1], ["dropoutFraction", NaN], ["corruptFraction", true], ["dropoutFraction", "0.1"], ["corruptFraction", null]] as const) {
    assert.throws(() => new DevicePolicy({ [name]: value } as never), (e: Error) => e instanceof PolicyError && e.message.startsWith(`${name}: must be a number in [0, 1)`), `${name}=${String(value)}`);
  }
  assert.throws(() => new DevicePolicy({ corruptFraction: 0.6, dropoutFraction: 0.5 }), (e: Error) => e instanceof PolicyError && e.message === "corruptFraction + dropoutFraction: must be below 1");
  const p = new DevicePolicy();
  assert.deepEqual([p.corruptFraction, p.dropoutFraction], [1 / 3, 0.15]);
  assert.deepEqual([p.floorAssumptions.securityBits, p.floorAssumptions.grindingBits, p.floorAssumptions.bits], [40, 40, 80]);
  assert.equal(new DevicePolicy({ corruptFraction: 0.2, dropoutFraction: 0 }).floorAssumptions.corruptFraction, 0.2);
});

test("the refusal reasons: Python's list, in Python's order", () => {
  assert.deepEqual(REFUSAL_REASONS.slice(-5), ["task_mismatch", "cohort_unverified", "not_logged", "unsafe_parameters", "inconsistent_survivors"]);
  assert.equal(REFUSAL_REASONS.length, 21);
});

test("the floor: the default degree and threshold are the plan's; the complete graph's threshold is exact; check names what is short", () => {
  // small cohorts: the connectivity floor is beyond n, the complete graph; t = ⌊(n + ⌊n/3⌋)/2⌋ + 1
  for (const [n, t] of [[3, 3], [4, 3], [5, 4], [6, 5], [8, 6], [60, 41]]) {
    const cfg = SecAggConfig.fromDict({ session_id: "00".repeat(16), n, dim: 1, bits: 8, threat_model: "active" });
    assert.deepEqual([cfg.usesCompleteGraph, cfg.resolvedDegree, cfg.shareThreshold], [true, n - 1, t], `n=${n}`);
    assert.deepEqual(floor.plan(n), { n, degree: n - 1, threshold: t, complete: true });
  }
  // the semi-honest default stays ⌊m/2⌋ + 1 (library use only: devices refuse it)
  assert.equal(SecAggConfig.fromDict({ session_id: "00".repeat(16), n: 8, dim: 1, bits: 8 }).shareThreshold, 5);
  // a large cohort gets a sparse degree at or above the floor, with a safe threshold it still reaches at 15 % dropout
  const big = floor.plan(5000);
  const f = floor.safetyFloor(5000);
  assert.ok(!big.complete && big.degree >= f.degree && big.degree % 2 === 0, JSON.stringify(big));
  assert.ok(big.threshold <= floor.liveThreshold(5000, big.degree, 0.15));
  assert.equal(floor.check(5000, big.degree, big.threshold), f);
  assert.ok(floor.connected(5000, f.degree) && !floor.connected(5000, f.degree - 2));
  assert.throws(() => floor.check(5000, f.degree - 2, big.threshold), (e: Error) => e instanceof floor.UnsafeParametersError && e.message.startsWith("degree: "));
  assert.throws(() => floor.check(5000, big.degree, big.threshold - 1), (e: Error) => e instanceof floor.UnsafeParametersError && e.message.startsWith("threshold: "));
  // untrusted neighbours (no valid issuer token): they alone must stay below 2t − m
  assert.throws(() => floor.check(8, 7, 6, new floor.Assumptions(), 4), /^UnsafeParametersError: threshold: 6 of a neighbourhood of 8 \(cohort of 8\), below this device's floor of 7/);
  assert.throws(() => floor.check(8, 7, 8, new floor.Assumptions(), 8), /threshold: no threshold is safe for a neighbourhood of 8 in a cohort of 8$/);
  const honest = new floor.Assumptions({ corruptFraction: 0, dropoutFraction: 0 });
  assert.deepEqual(floor.check(6, 2, 2, honest), { n: 6, degree: 2, threshold: 2, complete: false });
  assert.throws(() => floor.check(6, 2, 2, honest, 1), /threshold: 1 neighbours hold no valid issuer token, at least 2t − m = 1: they alone could sign two survivor sets$/);
  assert.throws(() => floor.thresholdFloor(1, 1), /^ConfigError: n: must be an integer ≥ 2, got 1$/);
  assert.throws(() => floor.thresholdFloor(5, 5), /degree: must be an integer in \[1, n − 1\], got 5/);
  assert.deepEqual(["0.333", "0.15", "0", "1e-05", "123", "1.23e+03", "0.0001"], [1 / 3, 0.15, 0, 1e-5, 123, 1234, 1e-4].map((x) => floor.formatG(x)));
});
