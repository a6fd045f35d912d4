/** Devices that check the server (device protocol 3, docs/secagg.md "Devices that check the server"): whole cohorts of
 * JS devices against a fake server that speaks the protocol like secagg/server.py. Each device hashes the assignment
 * it received into its task digest and binds it into its keys and signatures; it verifies its peers' key signatures
 * before it encrypts a share to them, opens its senders' shares under channel keys bound to its session, task and
 * members root before its masked input leaves, and refuses — `task_mismatch` when a peer was shown another task, `cohort_unverified`
 * below its `minCohort` of verified members, `unsafe_parameters` for a cohort below the safety floor it computes for
 * itself (before it reads any data), `inconsistent_survivors` when the server shows its neighbourhood two survivor sets
 * — reporting the refusal and keeping it in its transparency log, with nothing charged. `verifyCohort: false` signs but
 * verifies nothing. Cohorts run in the active model at the floor's threshold (3 of 3, 3 of 4, 5 of 6 on the complete
 * graph); the SecAgg+ cases run on a sparse graph whose devices assume an honest cohort (`HONEST`), the only way a
 * handful of devices reaches a sparse floor. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Outcome, DeviceClient } from "../src/client.js";
import { perDeviceFloor } from "../src/dp/floor.js";
import { ContributionRecord } from "../src/ledger.js";
import { DevicePolicy, DevicePolicyOptions } from "../src/policy.js";
import { LocalStore } from "../src/store.js";
import { CohortOptions, FakeCohort } from "./fakeServer.js";

const COLORS = ["red", "blue", "green"];
/** A device that assumes no member colludes with the server and none drops out: its floor is degree 2, threshold 2. */
const HONEST = { corruptFraction: 0, dropoutFraction: 0 };

/** A noised round whose ε the device would charge (the noise at the floor the device recomputes, plus 1 %). */
const NOISED = {
  noise: { mechanism: "discrete_gaussian", scale: 1.01 * perDeviceFloor("discrete_gaussian", 1, 1e-6, 1, 3, 1), encoding_scale: 1 },
  privacy: { mechanism: "discrete_gaussian", epsilon: 1, delta: 1e-6, rounds: 1, t_min: 3, l1_sensitivity: 1, l2_sensitivity: 1, weight: 1, validation: "none" },
};

interface Run {
  cohort: FakeCohort;
  devices: DeviceClient[];
  outs: Outcome[];
  contributions: ContributionRecord[][];
}

/** A cohort of `opts.devices` JS devices (device i holds the colour COLORS[i mod 3]) run to its end. */
async function run(opts: CohortOptions, policy: (party: number) => DevicePolicyOptions = () => ({})): Promise<Run> {
  const cohort = new FakeCohort(opts);
  const contributions: ContributionRecord[][] = [];
  const devices: DeviceClient[] = [];
  for (let i = 0; i < opts.devices; i++) {
    const store = new LocalStore();
    await store.add("colors", COLORS[i % 3]);
    const seen: ContributionRecord[] = [];
    contributions.push(seen);
    devices.push(new DeviceClient("http://fa.test", store, {
      policy: new DevicePolicy(policy(i + 1)), log: () => {}, network: { fetch: cohort.fetch, checkinWaitS: 1 }, callbacks: { onContribution: (r) => seen.push(r) },
    }));
  }
  for (const d of devices) cohort.seat((await d.identity()).deviceId);  // device i is party i + 1
  const outs = devices.map((d) => d.runOnce());
  return { cohort, devices, outs: await Promise.all(outs), contributions };
}

/** The histogram the devices hold: one vote per device for its colour. */
const votes = (parties: number[]): bigint[] => COLORS.map((_, j) => BigInt(parties.filter((p) => (p - 1) % 3 === j).length));

const phase2 = (cohort: FakeCohort, party: number) => cohort.requests(party).filter((r) => r === "POST /phases/2");

test("an honest cohort: each device signs its keys for the session and task, verifies its peers' and the sum unmasks", async () => {
  for (const takeCheckinKeys of [false, true]) {
    const { cohort, outs, contributions } = await run({ devices: 3, takeCheckinKeys });
    assert.deepEqual(outs.map((o) => [o.status, o.contributed]), [["finished", true], ["finished", true], ["finished", true]], JSON.stringify(outs));
    assert.deepEqual(cohort.sum, votes([1, 2, 3]));
    assert.equal(cohort.cfg.shareThreshold, 3, "the floor's threshold for a complete cohort of 3");
    for (const p of [1, 2, 3]) {
      assert.equal(cohort.shareKeys.get(p)?.signature.length, 64, "ShareKeys carries the party's signature");
      assert.equal(cohort.shareKeys.get(p)?.membersWanted, 0);
      assert.equal(cohort.routed.get(p)?.ciphertexts.length, 2, "the routed shares carry both senders' shares (and no signature)");
      assert.equal(cohort.requests(p).includes("POST /phases/0"), !takeCheckinKeys, "phase 0 ran by the check-in when the keys were taken");
      assert.equal(contributions[p - 1][0]?.status, "finished");
    }
    assert.equal(cohort.refusals.size, 0);
    assert.equal(cohort.refusedByServer.size, 0);
  }
});

test("a semi-honest assignment (either threat model field) is refused with unsafe_parameters before any data is read; kept in the transparency log", async () => {
  for (const [what, opts] of [
    ["both", { threatModel: "semi_honest" }],
    ["the secagg config only", { secagg: { threat_model: "semi_honest" } }],
    ["the assignment only", { assignment: { threat_model: "semi_honest" } }],
  ] as [string, CohortOptions | Record<string, unknown>][]) {
    const { cohort, devices, outs, contributions } = await run({ devices: 3, ...(opts as Partial<CohortOptions>) });
    assert.deepEqual(outs.map((o) => [o.status, o.reason]), Array(3).fill(["refused", "unsafe_parameters"]), `${what}: ${JSON.stringify(outs)}`);
    assert.match(outs[0].detail, /^threat model semi_honest: no consistency round, so the server could show parts of the cohort different survivor sets; this device requires the active model$/);
    for (const p of [1, 2, 3]) {
      assert.deepEqual(cohort.requests(p), ["POST /refusal"], `${what}: party ${p} sent nothing but its refusal`);
      assert.equal(cohort.refusals.get(p)?.reason, "unsafe_parameters");
      const log = await devices[p - 1].transparencyLog();
      assert.equal(log.length, 1, "the refusal is evidence: kept");
      assert.deepEqual([log[0].status, log[0].epsilon, log[0].delta, log[0].sent_at, log[0].cohort_id], ["refused", null, null, null, cohort.cohortId]);
      assert.match(log[0].detail, /^unsafe_parameters: threat model/);
      assert.deepEqual(await devices[p - 1].ledger.spentSince(0), [0, 0, 0], "nothing charged, no participation counted");
      assert.deepEqual(contributions[p - 1], []);
    }
  }
});

test("a cohort below the device's safety floor (threshold, degree, or the device's own γ) is refused with unsafe_parameters before any data is read", async () => {
  const reads: number[] = [];
  const cases: [string, CohortOptions, (p: number) => DevicePolicyOptions, RegExp][] = [
    ["threshold 2 of 3", { devices: 3, secagg: { threshold: 2 } }, () => ({}),
      /^threshold: 2 of a neighbourhood of 3 \(cohort of 3\), below this device's floor of 3: a server with 1 corrupt neighbours could show two survivor sets$/],
    ["a sparse degree for 6", { devices: 6, secagg: { graph: "sparse", degree: 2 } }, () => ({}),
      /^degree: 2 neighbours in a cohort of 6, below this device's floor of 5 \(γ=0\.333, dropout 0\.15, 2\^-40 with 40 bits of grinding\)$/],
    ["a device that assumes half the cohort corrupt", { devices: 4 }, () => ({ corruptFraction: 0.5 }),
      /^threshold: 3 of a neighbourhood of 4 \(cohort of 4\), below this device's floor of 4/],
  ];
  for (const [what, opts, policy, detail] of cases) {
    const cohort = new FakeCohort(opts);
    const devices: DeviceClient[] = [];
    let read = 0;
    for (let i = 0; i < opts.devices; i++) {
      const store = new LocalStore();
      await store.add("colors", COLORS[i % 3]);
      const rows = store.rows.bind(store);
      store.rows = (c: string) => {
        read++;
        return rows(c);
      };
      devices.push(new DeviceClient("http://fa.test", store, { policy: new DevicePolicy(policy(i + 1)), log: () => {}, network: { fetch: cohort.fetch, checkinWaitS: 1 } }));
    }
    for (const d of devices) cohort.seat((await d.identity()).deviceId);
    const outs = await Promise.all(devices.map((d) => d.runOnce()));
    assert.deepEqual(outs.map((o) => o.reason), Array(opts.devices).fill("unsafe_parameters"), `${what}: ${JSON.stringify(outs)}`);
    assert.match(outs[0].detail, detail, what);
    reads.push(read);
    for (let p = 1; p <= opts.devices; p++) {
      assert.deepEqual(cohort.requests(p), ["POST /refusal"], what);
      const [record] = await devices[p - 1].transparencyLog();
      assert.equal(record.status, "refused");
      assert.equal(record.detail, `unsafe_parameters: ${outs[p - 1].detail}`);
    }
  }
  assert.deepEqual(reads, [0, 0, 0], "no device read its data");
});

test("a server that shows one member another task (buckets, threshold, privacy block, spec): every member refuses with task_mismatch before any masked input", async () => {
  const lies: [string, (w: any) => void][] = [
    ["task buckets", (w) => (w.task.buckets = ["red", "blue", "yellow"])],
    ["secagg threshold", (w) => (w.secagg.threshold = 3)],
    ["privacy epsilon", (w) => (w.privacy.epsilon = 2)],
    ["spec", (w) => (w.spec.params.buckets = ["red", "blue", "yellow"])],
  ];
  for (const [what, lie] of lies) {
    const { cohort, devices, outs, contributions } = await run({
      devices: 3, assignment: NOISED, show: (p, w) => { if (p === 3) lie(w); return w; },
    });
    assert.deepEqual(outs.map((o) => [o.status, o.reason]), [["refused", "task_mismatch"], ["refused", "task_mismatch"], ["refused", "task_mismatch"]], `${what}: ${JSON.stringify(outs)}`);
    assert.match(outs[0].detail, /^party 3's share does not open under the channel key bound to this session, task and members list: it was shown another task/);
    assert.match(outs[2].detail, /^party 1's share does not open/, "the member shown another task refuses as well: its peers sealed their shares for the honest task");
    assert.equal(cohort.refusedByServer.size, 0, "the lying server accepted every signature (each against the task it showed)");
    for (const p of [1, 2, 3]) {
      assert.deepEqual(phase2(cohort, p), [], `${what}: party ${p} sent no masked input`);
      assert.equal(cohort.refusals.get(p)?.reason, "task_mismatch", "the refusal is reported to the server");
      const log = await devices[p - 1].transparencyLog();
      assert.equal(log.length, 1);
      assert.deepEqual([log[0].status, log[0].epsilon, log[0].delta, log[0].sent_at], ["refused", null, null, null]);
      assert.match(log[0].detail, /^task_mismatch: party \d's share does not open under the channel key/);
      assert.equal(log[0].cohort_id, cohort.cohortId);
      assert.deepEqual(await devices[p - 1].ledger.spentSince(0), [0, 0, 0], "a refused cohort charges nothing and counts for no participation");
      assert.equal((await devices[p - 1].ledger.history(cohort.queryId)).perRound.size, 0, "nor toward the query's history");
      assert.deepEqual(contributions[p - 1], [], "no contribution callback for a refusal");
    }
    assert.equal(cohort.sum, null);
  }
});

test("a member shown another cohort size refuses the members list (its n leaves); the others finish without it", async () => {
  const { cohort, outs } = await run({ devices: 4, phaseTimeoutMs: 300, show: (p, w) => { if (p === 4) w.secagg.n = 5; return w; } });
  assert.deepEqual([outs[3].status, outs[3].detail], ["rejected", "refused server message: members list: 4 leaves for a cohort of 5"]);
  assert.equal(cohort.shareKeys.has(4), false, "nothing encrypted to a cohort it cannot check");
  assert.deepEqual(outs.slice(0, 3).map((o) => o.status), ["finished", "finished", "finished"], JSON.stringify(outs));
  assert.deepEqual(cohort.sum, votes([1, 2, 3]));
});

test("minCohort above the members a device can verify: cohort_unverified before any masked input; verifyCohort false takes the server's word", async () => {
  // the server announces 6 members, 5 exist (threshold 5 of 6: the peer keys reach it): every device's policy asks for 6
  const checked = await run({ devices: 5, n: 6 }, () => ({ minCohort: 6 }));
  assert.deepEqual(checked.outs.map((o) => o.reason), Array(5).fill("cohort_unverified"));
  assert.match(checked.outs[0].detail, /^cohort: 5 distinct members \(this one included\) signed their keys for this session and task, below this party's minimum of 6/);
  for (const p of [1, 2, 3, 4, 5]) {
    assert.deepEqual(phase2(checked.cohort, p), []);
    assert.equal(checked.cohort.refusals.get(p)?.reason, "cohort_unverified");
    const [record] = await checked.devices[p - 1].transparencyLog();
    assert.equal(record.status, "refused");
    assert.match(record.detail, /^cohort_unverified: cohort: 5 distinct members/);
  }
  const trusting = await run({ devices: 5, n: 6 }, () => ({ minCohort: 6, minSurvivors: 5, verifyCohort: false }));
  assert.deepEqual(trusting.outs.map((o) => o.status), Array(5).fill("finished"), JSON.stringify(trusting.outs));
  assert.deepEqual(trusting.cohort.sum, votes([1, 2, 3, 4, 5]));
});

test("SecAgg+ (sparse graph): a device asks for signed members beyond its neighbourhood and counts them toward minCohort", async () => {
  const sparse = { graph: "sparse", degree: 2, threshold: 2 };  // neighbourhood 3, threshold 2: at the floor of HONEST
  const ok = await run({ devices: 6, secagg: sparse }, () => ({ minCohort: 5, ...HONEST }));
  assert.deepEqual(ok.outs.map((o) => o.status), Array(6).fill("finished"), JSON.stringify(ok.outs));
  assert.deepEqual(ok.cohort.sum, votes([1, 2, 3, 4, 5, 6]));
  for (let p = 1; p <= 6; p++) {
    assert.equal(ok.cohort.shareKeys.get(p)?.membersWanted, 3, "min(n, minCohort) − t = 5 − 2");
    const routed = ok.cohort.routed.get(p);
    assert.equal(routed?.members.length, 3);
    assert.equal(routed?.ciphertexts.length, 2);
  }
  const withheld = await run({ devices: 6, secagg: sparse, members: "none" }, () => ({ minCohort: 5, ...HONEST }));
  assert.deepEqual(withheld.outs.map((o) => o.reason), Array(6).fill("cohort_unverified"));
  assert.match(withheld.outs[0].detail, /^cohort: 3 distinct members/);
  const forged = await run({ devices: 6, secagg: sparse, members: "forged" }, () => ({ minCohort: 5, ...HONEST }));
  assert.deepEqual(forged.outs.map((o) => o.reason), Array(6).fill("task_mismatch"));
  assert.match(forged.outs[0].detail, /\(member list\)$/);
  for (let p = 1; p <= 6; p++) assert.deepEqual(phase2(forged.cohort, p), []);
});

test("a share altered on its way does not open: a checking device refuses (task_mismatch naming its sender), one with verifyCohort false rejects the session", async () => {
  // 4 devices, threshold 3: the server flips a byte of party 2's share for party 1; the cohort finishes without party 1
  for (const verifyCohort of [true, false]) {
    const { cohort, outs, devices } = await run({ devices: 4, tamperShare: { from: 2, to: 1 }, phaseTimeoutMs: 500 }, (p) => ({ verifyCohort: p !== 1 || verifyCohort }));
    assert.deepEqual(outs.slice(1).map((o) => [o.status, o.reason]), Array(3).fill(["finished", null]), JSON.stringify(outs));
    if (verifyCohort) {
      assert.deepEqual([outs[0].status, outs[0].reason], ["refused", "task_mismatch"], JSON.stringify(outs[0]));
      assert.equal(outs[0].detail, "party 2's share does not open under the channel key bound to this session, task and members list: it was shown another task or its keys were altered");
      assert.equal(cohort.refusals.get(1)?.reason, "task_mismatch", "the refusal is reported to the server");
      assert.equal((await devices[0].transparencyLog())[0].status, "refused");
    } else {
      assert.equal(outs[0].status, "rejected", JSON.stringify(outs[0]));
      assert.match(outs[0].detail, /share ciphertext from party 2 failed authentication$/);
    }
    assert.deepEqual(phase2(cohort, 1), [], "no masked input left party 1");
    for (const p of [2, 3, 4]) assert.equal(cohort.shareKeys.get(p)?.signature.length, 64, "every device signs its keys");
    // party 1 left after sharing keys: the server removed its pairwise masks from the survivors' inputs
    assert.deepEqual(cohort.sum, votes([2, 3, 4]));
    assert.equal((await devices[1].transparencyLog())[0].status, "finished");
  }
});

test("a lying server is caught by checking devices, not by trusting ones: mixed policies in one cohort", async () => {
  const { cohort, outs } = await run(
    { devices: 3, show: (p, w) => { if (p === 3) w.task.buckets = ["red", "blue", "yellow"]; return w; } },
    (p) => ({ verifyCohort: p === 1 }),
  );
  assert.equal(outs[0].reason, "task_mismatch");
  assert.deepEqual(phase2(cohort, 1), []);
  // the trusting devices' keys do not match across the two tasks: party 2 cannot open party 3's share (nor 3 party 2's)
  for (const o of outs.slice(1)) assert.equal(o.status, "rejected", JSON.stringify(o));
  for (const o of outs.slice(1)) assert.match(o.detail, /failed authentication/);
  for (const p of [2, 3]) assert.deepEqual(phase2(cohort, p), [], "no masked input leaves without its shares");
});

test("a server that substitutes keys of its own for one peer's in PeerKeys: the device refuses with task_mismatch before sending any ShareKeys", async () => {
  for (const takeCheckinKeys of [false, true]) {
    const { cohort, outs, devices } = await run({ devices: 3, takeCheckinKeys, substitutePeerKeys: { to: 1, peer: 2 }, phaseTimeoutMs: 1000 });
    assert.deepEqual([outs[0].status, outs[0].reason], ["refused", "task_mismatch"], JSON.stringify(outs));
    assert.match(outs[0].detail, /^party 2's signature over its keys .*\(its advertised keys are not signed by its identity key\)$/);
    assert.equal(cohort.refusedByServer.size, 0, "every advertised key signature verified at the server");
    assert.ok(!cohort.requests(1).includes("POST /phases/1"), "no ShareKeys: nothing was encrypted to the substituted keys");
    assert.equal(cohort.shareKeys.has(1), false);
    assert.equal(cohort.refusals.get(1)?.reason, "task_mismatch", "the refusal is reported to the server");
    const [record] = await devices[0].transparencyLog();
    assert.equal(record.status, "refused");
    assert.match(record.detail, /^task_mismatch: party 2's signature/);
    assert.deepEqual(await devices[0].ledger.spentSince(0), [0, 0, 0]);
    for (const p of [2, 3]) assert.equal(cohort.shareKeys.get(p)?.signature.length, 64, "the peers shown honest keys go on");
  }
});

test("a server that shows two parts of the cohort two survivor sets: every device refuses (inconsistent_survivors) before it reveals a share", async () => {
  // 4 devices, threshold 3: parties 1 and 2 sign the set of all four, 3 and 4 a set without party 1; each part gets
  // its own set back with its own part's two signatures, short of the threshold
  const { cohort, devices, outs } = await run({ devices: 4, splitSurvivors: { parties: [3, 4], drop: 1 } });
  assert.deepEqual(outs.map((o) => [o.status, o.reason]), Array(4).fill(["refused", "inconsistent_survivors"]), JSON.stringify(outs));
  assert.equal(outs[0].detail, "consistency: 2 neighbours signed this survivor set, below the threshold 3: the others may have been shown another set");
  for (let p = 1; p <= 4; p++) {
    assert.ok(cohort.requests(p).includes("POST /phases/3"), "it signed the set it was shown");
    assert.ok(!cohort.requests(p).includes("POST /phases/4"), "no share revealed");
    assert.equal(cohort.refusals.get(p)?.reason, "inconsistent_survivors", "reported");
    // the masked input had left: the row stays (abandoned, charged as sent) and keeps the reason
    const [record] = await devices[p - 1].transparencyLog();
    assert.equal(record.status, "abandoned");
    assert.notEqual(record.sent_at, null);
    assert.equal(record.detail, `inconsistent_survivors: ${outs[p - 1].detail}`);
  }
  assert.equal(cohort.sum, null);
});
