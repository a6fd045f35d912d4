/** Known-answer vectors of device protocol 3's new parts (tests/vectors, docs/vectors.md): the members list — leaves,
 * root, graph seed, neighbourhoods and round binding (`members`) — and the safety floor a device computes and the
 * server's plan (`safety_floor`: corrupt count, floor, threshold floor, connectivity, the check's verdict, plan). The
 * floor's floating-point formulas are secagg/floor.py's (Math.log, Math.log2); every case keeps clear of a tie, so the
 * platforms' logarithms give the same verdicts. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { concat, hex, u32be, unhex, utf8 } from "../src/bytes.js";
import { SecAggConfig } from "../src/secagg/config.js";
import * as sc from "../src/secagg/crypto.js";
import * as floor from "../src/secagg/floor.js";
import { NeighbourGraph } from "../src/secagg/graph.js";
import { vectors } from "./helpers.js";

test("members: the leaves (16 bytes of SHA-256 over party, identity and keys; zeros for the absent), the root, the graph it seeds and the round binding", async () => {
  const cases = vectors("members").cases;
  assert.ok(cases.length >= 5);
  for (const { input, output } of cases) {
    const n = input.n as number;
    const leaves = new Uint8Array(n * sc.MEMBER_LEAF_BYTES);
    for (const e of input.entries) {
      const [identity, cPk, sPk] = [unhex(e.identity), unhex(e.c_pk), unhex(e.s_pk)];
      const leaf = await sc.memberLeaf(e.party, identity, cPk, sPk);
      leaves.set(leaf, (e.party - 1) * sc.MEMBER_LEAF_BYTES);
      if (String(e.party) in output.leaf_inputs) {
        assert.equal(hex(concat(sc.DOMAIN, utf8("member/"), u32be(e.party), identity, cPk, sPk)), output.leaf_inputs[String(e.party)], `${input.name}: leaf input ${e.party}`);
      }
    }
    assert.deepEqual(Array.from({ length: n }, (_, i) => hex(leaves.subarray(16 * i, 16 * i + 16))), output.leaves, input.name);
    for (let i = 0; i < n; i++) {
      if (!input.entries.some((e: { party: number }) => e.party === i + 1)) assert.equal(output.leaves[i], hex(sc.ABSENT_LEAF), "an absent party's leaf is zeros");
    }
    const root = await sc.membersRoot(leaves);
    assert.equal(hex(root), output.members_root, input.name);
    const bind = sc.binding(unhex(input.session_id), unhex(input.task_digest));
    assert.equal(hex(bind), output.binding);
    const seed = await sc.graphSeed(bind, root);
    assert.equal(hex(seed), output.graph_seed, input.name);
    const graph = await NeighbourGraph.create(n, input.degree, seed);
    for (const p of input.parties) assert.deepEqual(graph.closed(p), output.closed_neighbourhoods[String(p)], `${input.name}: party ${p}`);
    assert.equal(hex(sc.roundBinding(bind, root)), output.round_binding);
  }
  await assert.rejects(sc.membersRoot(new Uint8Array(17)), /leaves: a multiple of 16 bytes, got 17/);
  // one changed entry: another root, another ring
  const [twelve, altered] = ["twelve", "twelve:altered"].map((name) => cases.find((c) => c.input.name === name));
  assert.ok(twelve && altered);
  assert.notEqual(twelve.output.members_root, altered.output.members_root);
  assert.notDeepEqual(twelve.output.closed_neighbourhoods, altered.output.closed_neighbourhoods);
});

test("safety floor: corrupt count, floor, threshold floor, connectivity, the check's verdict and the plan, for every case", () => {
  const cases = vectors("safety_floor").cases;
  assert.ok(cases.length > 900);
  const verdicts = new Set<string>();
  for (const { input, output } of cases) {
    const a = new floor.Assumptions({ corruptFraction: input.corrupt_fraction, dropoutFraction: input.dropout_fraction, securityBits: input.security_bits, grindingBits: input.grinding_bits });
    const what = JSON.stringify(input);
    const { n, degree } = input;
    assert.equal(floor.corruptCount(n, a), output.corrupt_count, what);
    const f = floor.safetyFloor(n, a);
    assert.deepEqual({ degree: f.degree, threshold: f.threshold }, output.safety_floor, what);
    assert.equal(floor.thresholdFloor(n, degree, a), output.threshold_floor, what);
    assert.equal(floor.connected(n, degree, a), output.connected, what);
    let verdict = "ok";
    try {
      floor.check(n, degree, input.threshold, a, input.untrusted);
    } catch (exc) {
      assert.ok(exc instanceof floor.UnsafeParametersError, what);
      verdict = exc.message.split(":", 1)[0];
    }
    assert.equal(verdict, output.check, what);
    verdicts.add(verdict);
    const p = floor.plan(n, a.dropoutFraction, a);
    assert.deepEqual({ degree: p.degree, threshold: p.threshold }, output.plan, what);
  }
  assert.deepEqual([...verdicts].sort(), ["degree", "ok", "threshold"], "every verdict is exercised");
});

test("safety floor: a config's defaults are the default plan's degree and its safe threshold in the active model", () => {
  for (const { input, output } of vectors("safety_floor").cases) {
    const defaults = input.corrupt_fraction === floor.DEFAULT_CORRUPT_FRACTION && input.dropout_fraction === floor.DEFAULT_DROPOUT_FRACTION &&
      input.security_bits === floor.SECURITY_BITS && input.grinding_bits === floor.GRINDING_BITS;
    if (!defaults) continue;
    const cfg = SecAggConfig.fromDict({ session_id: "00".repeat(16), n: input.n, dim: 1, bits: 8, threat_model: "active" });
    assert.deepEqual([cfg.resolvedDegree, cfg.shareThreshold, cfg.usesCompleteGraph], [output.plan.degree, output.plan.threshold, output.plan.degree >= input.n - 1], `n=${input.n}`);
  }
});
