/** Peers' identity tokens (docs/identities.md "Wire", "Who can cheat"): each PeerKeys entry carries the neighbour's
 * token as a blob (empty or TOKEN_BYTES), RoutedShares' optional token section one token per member entry (absent
 * without any), wrong counts or lengths are format errors; a device that pins issuerKeys counts toward its
 * neighbourhood's share threshold (`unsafe_parameters` below it, before any share is encrypted) and toward minCohort
 * (`cohort_unverified`) only peers whose token verifies for them — whole cohorts of JS devices against the fake
 * server. */

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
type PeerKeys = Extract<Message, { type: MsgType.PeerKeys }>;

const fill = (n: number, v: number) => new Uint8Array(n).fill(v);

function routed(memberTokens: Routed["memberTokens"]): Routed {
  return {
    type: MsgType.RoutedShares, sessionId: fill(16, 1), party: 3,
    ciphertexts: [[1, fill(90, 2)], [2, fill(90, 3)]],
    members: [{ party: 7, identity: fill(32, 6), cPk: fill(32, 7), sPk: fill(32, 8), signature: fill(64, 9) }],
    ...(memberTokens === undefined ? {} : { memberTokens }),
  };
}

test("RoutedShares round trips with and without the token section; the section is exactly the documented bytes", () => {
  const plain = encode(routed(undefined));
  assert.deepEqual(decode(plain), routed(undefined), "no section: parsed as before, no tokens");
  assert.deepEqual(encode(routed(null)), plain);
  assert.deepEqual(encode(routed([])), plain, "no member tokens: no section");
  const tokens = [fill(TOKEN_BYTES, 0xb1)];
  const withTokens = encode(routed(tokens));
  assert.deepEqual(withTokens, concat(plain, u32be(1), u32be(TOKEN_BYTES), tokens[0]), "u32 n ‖ n × (u32 len ‖ token), one per member entry");
  assert.deepEqual(decode(withTokens), routed(tokens));
});

test("a token section with another count or token length is a message-format error", () => {
  const plain = encode(routed(undefined));
  const t = fill(TOKEN_BYTES, 0xcc);
  const entry = (len = TOKEN_BYTES) => concat(u32be(len), len === TOKEN_BYTES ? t : fill(len, 0xcc));
  const bad: [string, Uint8Array][] = [
    ["two tokens for one member", concat(u32be(2), entry(), entry())],
    ["no member tokens for one member", u32be(0)],
    ["a short token", concat(u32be(1), entry(TOKEN_BYTES - 1), Uint8Array.of(0))],
    ["trailing bytes", concat(u32be(1), entry(), Uint8Array.of(0))],
    ["a stray byte", Uint8Array.of(0)],
    ["the old sender section", concat(u32be(2), entry(), entry(), u32be(1), entry())],
  ];
  for (const [what, section] of bad) assert.throws(() => decode(concat(plain, section)), MessageFormatError, what);
  assert.throws(() => encode(routed([t, t])), /member tokens: 2 for 1 member entries/);
  assert.throws(() => encode(routed([t.subarray(1)])), /member token: expected 354 bytes, got 353/);
});

test("PeerKeys entries carry each neighbour's identity and token blob (empty or TOKEN_BYTES), then the members list", () => {
  const entry = (party: number, token: Uint8Array) => ({ party, identity: fill(32, 0x10 + party), cPk: fill(32, 0x20 + party), sPk: fill(32, 0x30 + party), signature: fill(64, 0x40 + party), token });
  const msg: PeerKeys = { type: MsgType.PeerKeys, sessionId: fill(16, 1), party: 1, peers: [entry(1, fill(TOKEN_BYTES, 0xa1)), entry(2, new Uint8Array(0))], leaves: fill(32, 0x55) };
  const bytes = encode(msg);
  const body = (e: ReturnType<typeof entry>) => concat(u32be(e.party), e.identity, e.cPk, e.sPk, u32be(64), e.signature, u32be(e.token.length), e.token);
  assert.deepEqual(bytes.subarray(24), concat(u32be(2), body(msg.peers[0] as ReturnType<typeof entry>), body(msg.peers[1] as ReturnType<typeof entry>), u32be(2), msg.leaves));
  assert.deepEqual(decode(bytes), msg);
  const short = concat(bytes.subarray(0, 24), u32be(1), u32be(1), fill(96, 0), u32be(0), u32be(TOKEN_BYTES - 1), fill(TOKEN_BYTES - 1, 0), u32be(0));
  assert.throws(() => decode(short), /token: must be empty or 354 bytes/);
  assert.throws(() => encode({ ...msg, peers: [{ ...msg.peers[0], token: fill(10, 0) }] }), /token: must be empty or 354 bytes/);
  assert.throws(() => encode({ ...msg, leaves: fill(17, 0) }), /leaves: a multiple of 16 bytes, got 17/);
  assert.throws(() => decode(concat(bytes.subarray(0, bytes.length - 36), u32be(3), fill(32, 0))), /leaves: count 3 exceeds the message length/);
});

const COLORS = ["red", "blue", "green"];

/** A cohort of JS devices (device p is party p); `enrolled` parties get a token from the issuer at registration. */
async function run(issuer: FakeIssuer, opts: CohortOptions, enrolled: number[], policy: (party: number) => DevicePolicyOptions, before?: (identities: Uint8Array[]) => Promise<void>): Promise<{ cohort: FakeCohort; outs: Outcome[]; devices: DeviceClient[] }> {
  const cohort = new FakeCohort(opts);
  const devices: DeviceClient[] = [];
  for (let p = 1; p <= opts.devices; p++) {
    issuer.quota.set(`install-${p}`, 1);
    const store = new LocalStore();
    await store.add("colors", COLORS[(p - 1) % 3]);
    const enrolment = enrolled.includes(p) ? { issuerUrl: "http://issuer.test", credential: `install-${p}` } : undefined;
    devices.push(new DeviceClient("http://fa.test", store, { policy: new DevicePolicy(policy(p)), enrolment, log: () => {}, network: { fetch: withIssuer(cohort.fetch, issuer), checkinWaitS: 1 } }));
  }
  const identities: Uint8Array[] = [];
  for (const d of devices) {
    const { key, deviceId } = await d.identity();
    cohort.seat(deviceId);
    identities.push(key.publicBytes);
  }
  await before?.(identities);
  return { cohort, outs: await Promise.all(devices.map((d) => d.runOnce())), devices };
}

test("pinned issuerKeys: only peers whose token verifies for them count toward minCohort (tokens for 2 of 3 senders → 3 with itself)", async () => {
  const issuer = await FakeIssuer.create({});
  const pinned = { issuerKeys: [issuer.spkiB64] };
  // party 4 holds no token: the server shows party 2's for it (a token vouches for one identity only); the
  // neighbourhood still has 3 token holders, the threshold
  const tokens = (p: number, c: FakeCohort) => c.registeredToken(p) ?? (c.registeredToken(2) as Uint8Array);
  const policy = (minCohort: number) => (p: number) => (p === 1 ? { ...pinned, minCohort } : p <= 3 ? pinned : {});
  const refused = await run(issuer, { devices: 4, tokens }, [1, 2, 3], policy(4));
  assert.equal(refused.outs[0].reason, "cohort_unverified", JSON.stringify(refused.outs[0]));
  assert.match(refused.outs[0].detail, /^cohort: 3 distinct members \(this one included\) signed their keys for this session and task and hold an identity token from a pinned issuer, below this party's minimum of 4/);
  assert.equal(refused.cohort.requests(1).includes("POST /phases/1"), true, "the threshold was met: shares were encrypted");
  assert.equal(refused.cohort.requests(1).includes("POST /phases/2"), false, "nothing masked was sent");
  // devices with pinned keys but no minimum (2, 3) and without pinned keys (4) go on, at the threshold of 3
  assert.deepEqual(refused.outs.slice(1).map((o) => o.status), ["finished", "finished", "finished"], JSON.stringify(refused.outs));
  const ok = await run(issuer, { devices: 4, tokens }, [1, 2, 3], policy(3));
  assert.deepEqual(ok.outs.map((o) => o.status), Array(4).fill("finished"), JSON.stringify(ok.outs));
});

test("pinned issuerKeys: neighbours the server invented (signed keys, no token) short of the threshold: unsafe_parameters before any share is encrypted", async () => {
  const issuer = await FakeIssuer.create({});
  const pinned = { issuerKeys: [issuer.spkiB64] };
  const tokens = (p: number, c: FakeCohort) => c.registeredToken(p) as Uint8Array;
  // two enrolled devices and two members the server made up: a cohort of 4, threshold 3, 2 token holders
  const res = await run(issuer, { devices: 2, invented: 2, tokens }, [1, 2], () => pinned);
  for (const p of [1, 2]) {
    const out = res.outs[p - 1];
    assert.deepEqual([out.status, out.reason], ["refused", "unsafe_parameters"], JSON.stringify(out));
    assert.equal(out.detail, "threshold: 2 of this party's 4 neighbours (itself included) hold a valid issuer token, below the share threshold 3");
    assert.deepEqual(res.cohort.requests(p), ["POST /phases/0", "GET /phases/0/next", "POST /refusal"], "no ShareKeys: nothing encrypted to the invented keys");
    assert.equal(res.cohort.refusals.get(p)?.reason, "unsafe_parameters");
    const [record] = await res.devices[p - 1].transparencyLog();
    assert.deepEqual([record.status, record.epsilon, record.sent_at], ["refused", null, null]);
    assert.equal(record.detail, `unsafe_parameters: ${out.detail}`);
  }
  // the invented members passed every signature check: without pinned keys the devices cannot tell them apart
  const blind = await run(issuer, { devices: 2, invented: 2 }, [], () => ({}));
  for (const p of [1, 2]) assert.ok(blind.cohort.requests(p).includes("POST /phases/1"), "shares encrypted to the invented members");
});

test("pinned issuerKeys: a cohort whose members all hold tokens passes; a session without tokens leaves the device alone, below the threshold", async () => {
  const issuer = await FakeIssuer.create({});
  const pinned = { issuerKeys: [issuer.spkiB64], minCohort: 3 };
  const tokens = (p: number, c: FakeCohort) => c.registeredToken(p) as Uint8Array;
  const all = await run(issuer, { devices: 3, tokens }, [1, 2, 3], () => pinned);
  assert.deepEqual(all.outs.map((o) => o.status), ["finished", "finished", "finished"], JSON.stringify(all.outs));
  assert.deepEqual(all.cohort.sum, [1n, 1n, 1n]);
  // without tokens only the device itself holds one: below the share threshold, refused at the peer keys
  const without = await run(issuer, { devices: 3 }, [1, 2, 3], () => pinned);
  assert.deepEqual(without.outs.map((o) => o.reason), Array(3).fill("unsafe_parameters"));
  assert.match(without.outs[0].detail, /^threshold: 1 of this party's 3 neighbours \(itself included\) hold a valid issuer token, below the share threshold 3$/);
  // the same cohort without pinned keys counts signatures alone, as before
  const unpinned = await run(issuer, { devices: 3 }, [], () => ({ minCohort: 3 }));
  assert.deepEqual(unpinned.outs.map((o) => o.status), ["finished", "finished", "finished"]);
});

test("a server that pads a sparse cohort with a member holding a token it minted under its own key: cohort_unverified", async () => {
  const issuer = await FakeIssuer.create({});
  const own = await FakeIssuer.create({});  // the server's own "issuer": not one the devices pin
  const minted = new Map<number, Uint8Array>();
  const tokens = (p: number, c: FakeCohort) => c.registeredToken(p) ?? (minted.get(p) as Uint8Array);
  // 6 parties, degree 4 (a neighbourhood of 5, threshold 4: the one party outside it is listed as a member), devices
  // that assume an honest cohort (the only sparse floor a handful of devices reaches); 5 hold tokens of the pinned
  // issuer, so every neighbourhood has at least 4 token holders whatever the graph
  const sparse = { graph: "sparse", degree: 4, threshold: 4 };
  const honest = { corruptFraction: 0, dropoutFraction: 0 };
  const policy = (p: number) => (p <= 3 ? { issuerKeys: [issuer.spkiB64], minCohort: 6, ...honest } : p <= 5 ? { issuerKeys: [issuer.spkiB64], ...honest } : honest);
  const res = await run(issuer, { devices: 6, secagg: sparse, tokens }, [1, 2, 3, 4, 5], policy, async (identities) => {
    minted.set(6, await own.minted(identities[5]));
  });
  for (let p = 1; p <= 3; p++) {
    assert.equal(res.outs[p - 1].reason, "cohort_unverified", JSON.stringify(res.outs[p - 1]));
    const r = res.cohort.routed.get(p) as Routed;
    assert.equal(r.ciphertexts.length + r.members.length, 5, "the device saw five other signed members");
    assert.equal(r.members.length, 1);
    assert.equal(r.memberTokens?.length, r.members.length);
    assert.match(res.outs[p - 1].detail, /^cohort: 5 distinct members/, "itself and the four other parties with tokens from the pinned issuer");
  }
});
