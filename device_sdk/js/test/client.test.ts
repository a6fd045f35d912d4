/** DeviceClient against a fake server: the checks the Python client makes, where the JavaScript port had to add them
 * (atomic admission under daily limits, one resend after a network failure, no second check-in beside start()). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { DeviceClient } from "../src/client.js";
import { parseAssignment } from "../src/envelope.js";
import { DevicePolicy } from "../src/policy.js";
import { LocalStore } from "../src/store.js";
import { fakeServer, idle, json } from "./fakeServer.js";

const assignment = (cohort: string) => parseAssignment({
  query_id: "q".repeat(32), round: 0, cohort_id: cohort, party_id: 1, kind: "histogram", source: "colors",
  task: { buckets: ["red", "blue", "green"], other_bucket: null, max_contributions: 1 },
  secagg: { session_id: "14215981eb0a6d5f17137db942e2ae07", n: 3, dim: 3, bits: 16, graph: "auto", threat_model: "active" },
  threat_model: "active", phase_timeout_s: 5,
});

test("two cohorts admitted at once cannot both pass maxContributionsPerDay (one store transaction)", async () => {
  const store = new LocalStore();
  await store.addMany("colors", ["red", "blue"]);
  const refusals: string[] = [];
  const server = fakeServer((req) => {
    if (req.path.endsWith("/refusal")) {
      refusals.push(JSON.parse(new TextDecoder().decode(req.body)).reason);
      return json(200, {});
    }
    return json(410, { error: "cohort over" });
  });
  const client = new DeviceClient("http://device.test", store, { policy: new DevicePolicy({ maxContributionsPerDay: 1, requireLog: false }), log: () => {}, network: { fetch: server.fetch } });
  const outs = await Promise.all([client.runAssignment(assignment("a".repeat(32))), client.runAssignment(assignment("b".repeat(32)))]);
  assert.deepEqual(outs.map((o) => o.status).sort(), ["aborted", "refused"]);
  assert.equal(outs.find((o) => o.status === "refused")?.reason, "participation_cap");
  assert.deepEqual(refusals, ["participation_cap"]);
  assert.deepEqual(await client.transparencyLog(), [], "nothing was sent: both reservations are released");
});

test("a request that meets a network failure is sent once more, with a fresh nonce; a second failure is raised", async () => {
  let failures = 1;
  const server = fakeServer(() => idle());
  const flaky = (async (input: RequestInfo | URL, init?: RequestInit) => {
    if (String(input).endsWith("/checkin") && failures-- > 0) {
      server.seen.push({ method: "POST", path: "/v1/device/checkin", headers: new Headers(init?.headers), body: new Uint8Array() });
      throw new TypeError("fetch failed");
    }
    return server.fetch(input, init);
  }) as typeof fetch;
  const client = new DeviceClient("http://device.test", new LocalStore(), { log: () => {}, network: { fetch: flaky } });
  assert.equal((await client.runOnce()).status, "idle");
  const tries = server.seen.filter((r) => r.path === "/v1/device/checkin");
  assert.equal(tries.length, 2);
  assert.notEqual(tries[0].headers.get("X-FA-Nonce"), tries[1].headers.get("X-FA-Nonce"));

  failures = 2;
  await assert.rejects(client.runOnce(), TypeError);
  assert.equal(server.seen.filter((r) => r.path === "/v1/device/checkin").length, 4);
});

test("runOnce is refused while start() runs the device; a non-function eligible is refused at construction", async () => {
  const server = fakeServer(() => idle(5));
  const client = new DeviceClient("http://device.test", new LocalStore(), { log: () => {}, network: { fetch: server.fetch } });
  client.start();
  try {
    await assert.rejects(client.runOnce(), /stop\(\) it before calling runOnce/);
  } finally {
    await client.stop();
  }
  assert.equal((await client.runOnce()).status, "idle");
  assert.throws(() => new DeviceClient("http://device.test", new LocalStore(), { eligible: true as never }), /eligible: must be a function/);
});
