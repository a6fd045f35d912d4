/** Peers' identity tokens with the routed shares (docs/identities.md "Wire", "Who can cheat"): RoutedShares' optional
 * token section round trips (and is absent in older messages), wrong counts or lengths are format errors, and a
 * device that pins issuerKeys counts toward minCohort only peers whose signature and token both verify — whole
 * cohorts of JS devices against the fake server. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { concat, u32be } from "../src/bytes.js";
import { DeviceClient, Outcome } from "../src/client.js";
import { DevicePolicy, DevicePolicyOptions } from "../src/policy.js";
import { MessageFormatError } from "../src/secagg/errors.js";
import { Message, MsgType, TOKEN_BYTES, decode, encode } from "../src/secagg/messages.js";
import { LocalStore } from "../src/store.js";
import { FakeIssuer, withIssuer } from "./fakeIssuer.js";
import { CohortOptions, FakeCohort } from "./fakeServer.js";

type Routed = Extract<Message, { type: MsgType.RoutedShares }>;

const fill = (n: number, v: number) => new Uint8Array(n).fill(v);

function routed(tokens: Routed["tokens"]): Routed {
  return {
    type: MsgType.RoutedShares, sessionId: fill(16, 1), party: 3,
    ciphertexts: [[1, fill(90, 2)], [2, fill(90, 3)]], signatures: [fill(64, 4), fill(64, 5)],
    members: [{ party: 7, identity: fill(32, 6), cPk: fill(32, 7), sPk: fill(32, 8), signature: fill(64, 9) }],
    ...(tokens === undefined ? {} : { tokens }),
  };
}

test("RoutedShares round trips with and without the token section; the section is exactly the documented bytes", () => {
  const plain = encode(routed(undefined));
  assert.deepEqual(decode(plain), routed(undefined), "no section: parsed as before, no tokens");
  assert.deepEqual(encode(routed(null)), plain);
  const tokens = { senders: [fill(TOKEN_BYTES, 0xa1), fill(TOKEN_BYTES, 0xa2)], members: [fill(TOKEN_BYTES, 0xb1)] };
  const withTokens = encode(routed(tokens));
  const section = concat(u32be(2), u32be(TOKEN_BYTES), tokens.senders[0], u32be(TOKEN_BYTES), tokens.senders[1], u32be(1), u32be(TOKEN_BYTES), tokens.members[0]);
  assert.deepEqual(withTokens, concat(plain, section), "u32 n ‖ n × (u32 len ‖ token), then the same for the members");
  assert.deepEqual(decode(withTokens), routed(tokens));
  const none = { type: MsgType.RoutedShares, sessionId: fill(16, 1), party: 3, ciphertexts: [], signatures: [], members: [], tokens: { senders: [], members: [] } } as Routed;
  assert.deepEqual(decode(encode(none)), none, "an empty section still says the session carries tokens");
});

test("a token section with another count or token length is a message-format error", () => {
  const plain = encode(routed(undefined));
  const t = fill(TOKEN_BYTES, 0xcc);
  const entry = (len = TOKEN_BYTES) => concat(u32be(len), len === TOKEN_BYTES ? t : fill(len, 0xcc));
  const bad: [string, Uint8Array][] = [
    ["one sender token for two senders", concat(u32be(1), entry(), u32be(1), entry())],
    ["three sender tokens", concat(u32be(3), entry(), entry(), entry(), u32be(1), entry())],
    ["no member tokens for one member", concat(u32be(2), entry(), entry(), u32be(0))],
    ["member section missing", concat(u32be(2), entry(), entry())],
    ["a short token", concat(u32be(2), entry(), entry(TOKEN_BYTES - 1), u32be(1), entry())],
    ["trailing bytes", concat(u32be(2), entry(), entry(), u32be(1), entry(), Uint8Array.of(0))],
    ["a stray byte", Uint8Array.of(0)],
  ];
  for (const [what, section] of bad) assert.throws(() => decode(concat(plain, section)), MessageFormatError, what);
  assert.throws(() => encode(routed({ senders: [t], members: [t] })), /sender tokens: 1 for 2 ciphertexts/);
  assert.throws(() => encode(routed({ senders: [t, t], members: [] })), /member tokens: 0 for 1 member entries/);
  assert.throws(() => encode(routed({ senders: [t, t.subarray(1)], members: [t] })), /sender token: expected 354 bytes, got 353/);
});

const COLORS = ["red", "blue", "green"];

/** A cohort of JS devices (device p is party p); `enrolled` parties get a token from the issuer at registration. */
async function run(issuer: FakeIssuer, opts: CohortOptions, enrolled: number[], policy: (party: number) => DevicePolicyOptions, before?: (identities: Uint8Array[]) => Promise<void>): Promise<{ cohort: FakeCohort; outs: Outcome[] }> {
  const cohort = new FakeCohort(opts);
  const devices: DeviceClient[] = [];
  for (let p = 1; p <= opts.devices; p++) {
    issuer.quota.set(`install-${p}`, 1);
    const store = new LocalStore();
    await store.add("colors", COLORS[(p - 1) % 3]);
    const enrolment = enrolled.includes(p) ? { issuerUrl: "http://issuer.test", credential: `install-${p}` } : undefined;
    devices.push(new DeviceClient("http://fa.test", store, { fetch: withIssuer(cohort.fetch, issuer), policy: new DevicePolicy(policy(p)), enrolment, log: () => {}, checkinWaitS: 1 }));
  }
  const identities: Uint8Array[] = [];
  for (const d of devices) {
    const { key, deviceId } = await d.identity();
    cohort.seat(deviceId);
    identities.push(key.publicBytes);
  }
  await before?.(identities);
  return { cohort, outs: await Promise.all(devices.map((d) => d.runOnce())) };
}

test("pinned issuerKeys: only peers whose token verifies for them count toward minCohort (tokens for 2 of 4 senders → 3 with itself)", async () => {
  const issuer = await FakeIssuer.create({});
  const pinned = { issuerKeys: [issuer.spkiB64] };
  // parties 4 and 5 hold no token: the server shows party 2's for them (a token vouches for one identity only)
  const tokens = (p: number, c: FakeCohort) => c.registeredToken(p) ?? (c.registeredToken(2) as Uint8Array);
  const policy = (minCohort: number) => (p: number) => (p === 1 ? { ...pinned, minCohort } : p <= 3 ? pinned : {});
  const refused = await run(issuer, { devices: 5, tokens }, [1, 2, 3], policy(4));
  assert.equal(refused.outs[0].reason, "cohort_unverified", JSON.stringify(refused.outs[0]));
  assert.match(refused.outs[0].detail, /^cohort: 3 distinct members \(this one included\) signed their keys for this session and task and hold an identity token from a pinned issuer, below this party's minimum of 4/);
  assert.equal(refused.cohort.routed.get(1)?.tokens?.senders.length, 4);
  assert.equal(refused.cohort.requests(1).includes("POST /phases/2"), false, "nothing masked was sent");
  // devices without pinned keys (4, 5) and with pinned keys but no minimum (2, 3) go on
  assert.deepEqual(refused.outs.slice(1).map((o) => o.status), ["finished", "finished", "finished", "finished"], JSON.stringify(refused.outs));
  const ok = await run(issuer, { devices: 5, tokens }, [1, 2, 3], policy(3));
  assert.deepEqual(ok.outs.map((o) => o.status), Array(5).fill("finished"), JSON.stringify(ok.outs));
});

test("pinned issuerKeys: a cohort whose members all hold tokens passes; a session without tokens counts the device alone", async () => {
  const issuer = await FakeIssuer.create({});
  const pinned = { issuerKeys: [issuer.spkiB64], minCohort: 3 };
  const tokens = (p: number, c: FakeCohort) => c.registeredToken(p) as Uint8Array;
  const all = await run(issuer, { devices: 3, tokens, threatModel: "active" }, [1, 2, 3], () => pinned);
  assert.deepEqual(all.outs.map((o) => o.status), ["finished", "finished", "finished"], JSON.stringify(all.outs));
  assert.deepEqual(all.cohort.sum, [1n, 1n, 1n]);
  const without = await run(issuer, { devices: 3 }, [1, 2, 3], () => pinned);
  assert.deepEqual(without.outs.map((o) => o.reason), Array(3).fill("cohort_unverified"));
  assert.match(without.outs[0].detail, /^cohort: 1 distinct members/);
  // the same cohort without pinned keys counts signatures alone, as before
  const unpinned = await run(issuer, { devices: 3 }, [], () => ({ minCohort: 3 }));
  assert.deepEqual(unpinned.outs.map((o) => o.status), ["finished", "finished", "finished"]);
});

test("a server that pads a sparse cohort with members holding tokens it minted under its own key: cohort_unverified", async () => {
  const issuer = await FakeIssuer.create({});
  const own = await FakeIssuer.create({});  // the server's own "issuer": not one the devices pin
  const minted = new Map<number, Uint8Array>();
  const tokens = (p: number, c: FakeCohort) => c.registeredToken(p) ?? (minted.get(p) as Uint8Array);
  const sparse = { graph: "sparse", degree: 2 };  // neighbourhood 3, threshold 2: members beyond it are listed
  const policy = (p: number) => (p <= 3 ? { issuerKeys: [issuer.spkiB64], minCohort: 5 } : {});
  const res = await run(issuer, { devices: 6, secagg: sparse, tokens }, [1, 2, 3], policy, async (identities) => {
    for (let p = 4; p <= 6; p++) minted.set(p, await own.minted(identities[p - 1]));
  });
  for (let p = 1; p <= 3; p++) {
    assert.equal(res.outs[p - 1].reason, "cohort_unverified", JSON.stringify(res.outs[p - 1]));
    const r = res.cohort.routed.get(p) as Routed;
    assert.equal(r.ciphertexts.length + r.members.length, 5, "the device saw five other signed members");
    assert.equal(r.tokens?.members.length, r.members.length);
    assert.match(res.outs[p - 1].detail, /^cohort: 3 distinct members/, "itself and the two other parties with tokens from the pinned issuer");
  }
});
