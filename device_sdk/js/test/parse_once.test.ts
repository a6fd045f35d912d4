/** Parse once (issue 47): a device parses an assignment's task once, when it admits it, and the policy (the kind's own
 * sensitivity), the kind's contribution and the validity statement all take that parsed task — counted over a whole
 * cohort of real DeviceClients against the fake server. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { DeviceClient } from "../src/client.js";
import { perDeviceFloor } from "../src/dp/floor.js";
import { getKind } from "../src/kinds/registry.js";
import { DevicePolicy } from "../src/policy.js";
import { LocalStore } from "../src/store.js";
import { FakeCohort } from "./fakeServer.js";

test("one parse of the task per assignment: the policy and the kind take the task parsed at admission", async () => {
  const kind = getKind("histogram");
  const original = { checkRules: kind.checkRules, taskSensitivity: kind.taskSensitivity, contribute: kind.contribute };
  const parsed: object[] = [];
  const used: [string, object][] = [];
  kind.checkRules = (t) => {
    parsed.push(t);
    original.checkRules.call(kind, t);
  };
  kind.taskSensitivity = (t) => {
    used.push(["taskSensitivity", t]);
    return original.taskSensitivity.call(kind, t);
  };
  kind.contribute = (t, rows, rng) => {
    used.push(["contribute", t]);
    return original.contribute.call(kind, t, rows, rng);
  };
  try {
    // a noised round: the policy bounds the kind's sensitivity from the task before it charges ε
    const cohort = new FakeCohort({ devices: 3, assignment: {
      noise: { mechanism: "discrete_gaussian", scale: 1.01 * perDeviceFloor("discrete_gaussian", 1, 1e-6, 1, 3, 1), encoding_scale: 1 },
      privacy: { mechanism: "discrete_gaussian", epsilon: 1, delta: 1e-6, rounds: 1, t_min: 3, l1_sensitivity: 1, l2_sensitivity: 1, weight: 1, validation: "none" },
    } });
    const devices: DeviceClient[] = [];
    for (const color of ["red", "blue", "green"]) {
      const store = new LocalStore();
      await store.add("colors", color);
      devices.push(new DeviceClient("http://fa.test", store, { policy: new DevicePolicy(), network: { fetch: cohort.fetch, checkinWaitS: 1 }, log: () => {} }));
    }
    for (const d of devices) cohort.seat((await d.identity()).deviceId);
    const outs = await Promise.all(devices.map((d) => d.runOnce()));
    assert.deepEqual(outs.map((o) => o.status), ["finished", "finished", "finished"], JSON.stringify(outs));
    assert.equal(parsed.length, 3, "one parse per device and assignment");
    assert.equal(new Set(parsed).size, 3);
    assert.equal(used.length, 6);
    for (const [what, task] of used) assert.ok(parsed.includes(task), `${what} took the task parsed at admission`);
    for (const task of parsed) assert.deepEqual(used.filter(([, t]) => t === task).map(([w]) => w), ["taskSensitivity", "contribute"]);
    assert.ok(parsed.every((t) => t !== cohort.base.task), "a parsed copy, never the received object");
  } finally {
    Object.assign(kind, original);
  }
});
