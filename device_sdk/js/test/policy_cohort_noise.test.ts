/** Cohort-sized noise (docs/privacy.md): each cohort of a query sizes its shares for its own t_c, so a later round's
 * cohort of another size shows another `privacy.t_min`. That is no change of the query's parameters (the device does
 * not refuse it), and the device holds that cohort to its own t_c — as the Python SDK does (tests/device_sdk/test_policy.py). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Assignment } from "../src/envelope.js";
import { parseTask } from "../src/kinds/registry.js";
import { QueryHistory } from "../src/ledger.js";
import { decide, DevicePolicy } from "../src/policy.js";

function assignment(round: number, n: number, tC: number): Assignment {
  return {
    query_id: "q1", round, cohort_id: "c0".repeat(16), party_id: 1, kind: "histogram", source: "words",
    task: { buckets: ["a", "b", "c"], other_bucket: null, max_contributions: 1 },
    secagg: { session_id: "7f".repeat(16), n, dim: 3, bits: 40, graph: "auto", threat_model: "active" },
    threat_model: "active", first_phase: 0, phase_timeout_s: 5,
    noise: { mechanism: "skellam", scale: 1e6, std: 1e3, encoding_scale: 1 },  // far above any floor
    validation: null,
    privacy: { mechanism: "skellam", epsilon: 1, delta: 1e-6, rounds: 3, t_min: tC, l1_sensitivity: 1, l2_sensitivity: 1,
               weight: 1, validation: "none" },
    server_url: null,
  };
}

test("a later round's cohort of another size (another t_min) is accepted and held to its own t_c", () => {
  const first = assignment(0, 8, 6);
  const { l1_sensitivity: _l1, l2_sensitivity: _l2, weight: _w, ...seen } = first.privacy!;
  const history: QueryHistory = { privacy: { ...seen, weight: 1 }, perRound: new Map([[0, 1]]), layersCharged: 1, weights: new Map([[0, 1]]) };
  const next = assignment(1, 40, 34);
  const later = decide(new DevicePolicy(), next, parseTask(next.kind, next.task), history, 0, 0, false);
  assert.ok(!("reason" in later), JSON.stringify(later));
  assert.equal(later.minSurvivors, 34);
  assert.equal(later.epsilonCharge, 0);
  // a change of the query's own parameters is still refused
  const changed = assignment(1, 40, 34);
  changed.privacy = { ...changed.privacy!, epsilon: 2 };
  const refused = decide(new DevicePolicy(), changed, parseTask(changed.kind, changed.task), history, 0, 0, false);
  assert.ok("reason" in refused && refused.reason === "privacy_unverifiable", JSON.stringify(refused));
});
