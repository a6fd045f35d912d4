/** Keys with the check-in (docs/protocol.md): the device sends fresh secagg public keys with each check-in, drawn from
 * the randomness child "checkin-keys" exactly as the Python SDK draws them; when the server took them (`advertised`)
 * the session uses them, sends nothing for phase 0 and answers `next` (or long-polls phase 0's next message);
 * otherwise it runs phase 0 itself; a server that refuses the field with a 422 gets check-ins without it. The keys
 * carry the device's session-free signature over them (`keysPayload`), the same one its AdvertiseKeys carries, so the
 * server builds the very bytes the device would have sent (bound to session, task and members root the device signs
 * its keys again with its shares). The cohort here runs at threshold 2 of 3, which the devices accept because their
 * policy assumes no corrupt member (`corruptFraction: 0`): the test server can then open the device's shares with its
 * two peers' keys. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { b64decode, b64encode, bigToBE, concat, hex, unhex, utf8 } from "../src/bytes.js";
import { DeviceClient } from "../src/client.js";
import { DevicePolicy } from "../src/policy.js";
import { EnvelopeError, parseCheckin } from "../src/envelope.js";
import { DeviceRandomness, SeededRandom } from "../src/randomness.js";
import { ClientSession, KeyPairs } from "../src/secagg/client.js";
import { ModVector } from "../src/secagg/encoding.js";
import { taskDigest } from "../src/taskDigest.js";
import { SecAggConfig } from "../src/secagg/config.js";
import * as c from "../src/secagg/crypto.js";
import { MsgType, decode, encode } from "../src/secagg/messages.js";
import * as shamir from "../src/secagg/shamir.js";
import { LocalStore } from "../src/store.js";
import { Ed25519Key, X25519Key, ed25519Verify } from "../src/webcrypto.js";
import { Seen, bodyJson, fakeServer, idle, json, phaseMessage } from "./fakeServer.js";

const COHORT = "c".repeat(32);
const SECAGG = { session_id: "14215981eb0a6d5f17137db942e2ae07", n: 3, dim: 3, bits: 16, graph: "auto", threat_model: "active", threshold: 2 };
/** The identity keys of parties 2 and 3. */
const PEER_IDS = [await Ed25519Key.fromSeed(new Uint8Array(32).fill(2)), await Ed25519Key.fromSeed(new Uint8Array(32).fill(3))];
const assignmentFor = (threatModel: string) => ({
  query_id: "q".repeat(32), round: 0, cohort_id: COHORT, party_id: 1, kind: "histogram", source: "colors",
  task: { buckets: ["red", "blue", "green"], other_bucket: null, max_contributions: 1 },
  secagg: { ...SECAGG, threat_model: threatModel }, threat_model: threatModel, phase_timeout_s: 5,
});
const ASSIGNMENT = assignmentFor("active");
/** The devices' policy: a cohort assumed honest (the floor then allows threshold 2 of 3). */
const POLICY = { corruptFraction: 0 };
const PHASES = `/v1/device/cohorts/${COHORT}/phases`;
const SEED = utf8("fa-checkin-keys");

test("checkinKeys() is the Python SDK's stream: KeyPairs.draw gives its keys for a seeded root (frozen from Python)", async () => {
  // device_sdk.randomness.DeviceRandomness(SeededRandom(b"fa-checkin-keys")).checkin_keys(), KeyPairs.draw twice
  const python = [
    ["1154be2f2d3d49b08e2850ccb320b74e42b0c25ca79852e4ff5d39ce22505671", "afdacb730991573c44e793335c33c470eb292a4325246bd09bdcdb249051484a"],
    ["ea32008abfa9ab819e9671e6b2fd13884fc24026c5144dc83acc5ae95456b326", "f314f27017a178e45bd9a1706903749f19791a65049c6f971b8b0f2d3b1c5816"],
  ];
  const stream = new DeviceRandomness(new SeededRandom(SEED)).checkinKeys();
  for (const [cPk, sPk] of python) {
    const k = await KeyPairs.draw(stream);
    assert.deepEqual([hex(k.c.publicBytes), hex(k.s.publicBytes)], [cPk, sPk]);
  }
});

interface Cohort {
  server: ReturnType<typeof fakeServer>;
  checkins: any[];
  /** The device's ShareKeys message, once it sent one. */
  shareKeys: () => Uint8Array | undefined;
  /** PeerKeys for the device (party 1) with these keys, and parties 2 and 3 with `peers`' keys; with the members list. */
  peerKeys: (cPk: Uint8Array, sPk: Uint8Array) => Promise<Uint8Array>;
  /** The members root of the last PeerKeys built. */
  root: () => Uint8Array;
}

/** A fake server for a 3-party cohort the device is party 1 of: `checkin` answers each check-in (its parsed body);
 * `…/phases/0/next` answers PeerKeys for the keys the device advertised, in its check-in or by POST. */
async function cohort(checkin: (body: any, cohort: Cohort) => Response | Promise<Response>): Promise<Cohort & { peers: KeyPairs[] }> {
  const peers = [await KeyPairs.draw(new SeededRandom(utf8("party 2"))), await KeyPairs.draw(new SeededRandom(utf8("party 3")))];
  const sid = SecAggConfig.fromDict(SECAGG).sessionId;
  const checkins: any[] = [];
  let advertised: { cPk: Uint8Array; sPk: Uint8Array; signature: Uint8Array } | null = null;
  let shareKeys: Uint8Array | undefined;
  const peerSigs = await Promise.all(peers.map((k, i) => PEER_IDS[i].sign(c.keysPayload(k.c.publicBytes, k.s.publicBytes))));
  const identity = () => [...state.server.identities.values()][0];
  /** The device's keys must carry its registration key's signature over them (as the server requires). */
  const signed = async (k: { cPk: Uint8Array; sPk: Uint8Array; signature: Uint8Array }) => {
    assert.ok(await ed25519Verify(identity(), k.signature, c.keysPayload(k.cPk, k.sPk)), "the device's keys are signed by its identity key");
    return k;
  };
  let root: Uint8Array = new Uint8Array(32);
  const peerKeys = async (cPk: Uint8Array, sPk: Uint8Array) => {
    const entries = [{ party: 1, identity: identity(), cPk, sPk, signature: advertised?.signature }, ...peers.map((k, i) => ({ party: i + 2, identity: PEER_IDS[i].publicBytes, cPk: k.c.publicBytes, sPk: k.s.publicBytes, signature: peerSigs[i] }))];
    const leaves = concat(...(await Promise.all(entries.map((e) => c.memberLeaf(e.party, e.identity, e.cPk, e.sPk)))));
    root = await c.membersRoot(leaves);
    return encode({ type: MsgType.PeerKeys, sessionId: sid, party: 1, peers: entries, leaves });
  };
  const state: Cohort & { peers: KeyPairs[] } = { server: undefined as never, checkins, shareKeys: () => shareKeys, peerKeys, root: () => root, peers };
  state.server = fakeServer(async (req: Seen) => {
    if (req.path === "/v1/device/checkin") {
      const body = bodyJson(req);
      checkins.push(body);
      const k = body.secagg_keys;
      if (k) advertised = await signed({ cPk: b64decode(k.c_pk, "c_pk", 32), sPk: b64decode(k.s_pk, "s_pk", 32), signature: b64decode(k.signature, "signature", 64) });
      return checkin(body, state);
    }
    if (req.method === "POST" && req.path.startsWith(`${PHASES}/0?`)) {
      const m = decode(req.body);
      assert.equal(m.type, MsgType.AdvertiseKeys);
      if (m.type === MsgType.AdvertiseKeys) advertised = await signed({ cPk: m.cPk, sPk: m.sPk, signature: m.signature as Uint8Array });
      return json(202, { accepted: true });
    }
    if (req.method === "GET" && req.path.startsWith(`${PHASES}/0/next?`)) {
      assert.ok(advertised, "phase 0's next message asked for before any keys were advertised");
      return phaseMessage(await peerKeys(advertised.cPk, advertised.sPk), 1);
    }
    if (req.method === "POST" && req.path.startsWith(`${PHASES}/1?`)) {
      shareKeys = req.body;
      return json(200, { status: "finished", contributed: false });
    }
    return json(404, { error: `unexpected ${req.method} ${req.path}` });
  });
  return state;
}

const assigned = (extra: Record<string, unknown> = {}, assignment: Record<string, unknown> = ASSIGNMENT) => json(200, { assignment, queries_running: 1, ...extra });

async function device(server: ReturnType<typeof fakeServer>, opts: { keysWithCheckin?: boolean; dropout?: () => number | null } = {}) {
  const store = new LocalStore();
  await store.addMany("colors", ["red", "blue"]);
  return new DeviceClient("http://device.test", store, {
    randomness: new SeededRandom(SEED), policy: new DevicePolicy(POLICY), log: () => {}, keysWithCheckin: opts.keysWithCheckin,
    network: { fetch: server.fetch }, hooks: { dropout: opts.dropout },
  });
}

const phaseRequests = (seen: Seen[]) => seen.filter((r) => r.path.startsWith(PHASES)).map((r) => `${r.method} ${r.path.replace(PHASES, "").split("?")[0]}`);

/** The device's shares for parties 2 and 3, opened with their channel keys bound to the session, the assignment's
 * task digest and the members root: its self-mask seed b and mask key s_sk; and its signature over its keys, checked
 * with its registration key (`identity`) when given. */
async function openShares(shareKeys: Uint8Array, deviceCPk: Uint8Array, peers: KeyPairs[], root: Uint8Array, identity?: Uint8Array, assignment: Record<string, unknown> = ASSIGNMENT): Promise<{ b: Uint8Array; sSk: Uint8Array }> {
  const bind = c.roundBinding(c.binding(SecAggConfig.fromDict(SECAGG).sessionId, await taskDigest(assignment)), root);
  const m = decode(shareKeys);
  if (m.type !== MsgType.ShareKeys) throw new assert.AssertionError({ message: `expected ShareKeys, got ${MsgType[m.type]}` });
  assert.equal(m.membersWanted, 0, "the complete graph: no members beyond the neighbourhood to ask for");
  const bs = new Map<number, bigint>();
  const ss = new Map<number, bigint>();
  for (const [v, ct] of m.ciphertexts) {
    const key = await c.channelKey(await peers[v - 2].c.agree(deviceCPk), bind, 1, v);
    const pt = await c.openShare(key, bind, 1, v, ct);  // fails unless the device's channel key is the one it sent
    bs.set(v, shamir.fromBytes(pt.subarray(8, 41)));
    ss.set(v, shamir.fromBytes(pt.subarray(41, 74)));
  }
  const sSk = bigToBE(shamir.reconstruct(ss), 32);
  if (identity) {
    const sPk = (await X25519Key.fromPrivate(sSk)).publicBytes;
    assert.ok(await ed25519Verify(identity, m.signature, c.advertisePayload(bind, 1, deviceCPk, sPk)), "ShareKeys carries the device's signature over its keys for this session and task");
  }
  return { b: bigToBE(shamir.reconstruct(bs), 32), sSk };
}

test("keys sent with the check-in and taken: no phase-0 request, `next` answered with those keys", async () => {
  const fake = await cohort(async (body, s) => {
    if (!body.secagg_keys) return idle();
    const k = body.secagg_keys;
    const next = await s.peerKeys(b64decode(k.c_pk, "c_pk", 32), b64decode(k.s_pk, "s_pk", 32));
    return assigned({ advertised: true, next: { phase: 1, body: b64encode(next) } });
  });
  const client = await device(fake.server);
  const out = await client.runOnce();
  assert.equal(out.status, "finished", out.detail);
  assert.deepEqual(phaseRequests(fake.server.seen), ["POST /1"], "nothing for phase 0, no long-poll: `next` was answered");
  const expected = await KeyPairs.draw(new DeviceRandomness(new SeededRandom(SEED)).checkinKeys());
  const sent = fake.checkins[0].secagg_keys;
  const identity = await Ed25519Key.fromSeed(await new DeviceRandomness(new SeededRandom(SEED)).identityKey());
  const keySig = await identity.sign(c.keysPayload(expected.c.publicBytes, expected.s.publicBytes));
  assert.deepEqual(sent, { c_pk: b64encode(expected.c.publicBytes), s_pk: b64encode(expected.s.publicBytes), signature: b64encode(keySig) });
  // the AdvertiseKeys the server builds from the check-in is the one a session with those keys sends, byte for byte
  const cfg = SecAggConfig.fromDict(SECAGG);
  const built = encode({ type: MsgType.AdvertiseKeys, sessionId: cfg.sessionId, party: 1, cPk: b64decode(sent.c_pk, "c_pk", 32), sPk: b64decode(sent.s_pk, "s_pk", 32), signature: b64decode(sent.signature, "signature", 64) });
  const session = new ClientSession(cfg, 1, ModVector.fromUnsigned([0n, 0n, 0n], 16), { randomness: new SeededRandom(utf8("unused")), keys: expected, identityKey: identity, taskDigest: await taskDigest(ASSIGNMENT) });
  assert.equal(hex(await session.start()), hex(built));
  // the phase-1 reply is computed from the keys sent: shares sealed under the sent channel key, of the sent mask key
  const { b, sSk } = await openShares(fake.shareKeys() as Uint8Array, expected.c.publicBytes, fake.peers, fake.root(), [...fake.server.identities.values()][0]);
  assert.equal(hex((await X25519Key.fromPrivate(sSk)).publicBytes), hex(expected.s.publicBytes));
  // and start() drew nothing from the contribution's secagg stream: its first 32 bytes are the self-mask seed
  const secagg = new DeviceRandomness(new SeededRandom(SEED)).forContribution(COHORT).secagg;
  assert.equal(hex(b), hex(await secagg.bytes(32)));
});

test("a semi-honest assignment whose keys the server took from the check-in: refused (unsafe_parameters) before any phase request", async () => {
  const semi = assignmentFor("semi_honest");
  const fake = await cohort(async (body, s) => {
    if (!body.secagg_keys) return idle();
    const k = body.secagg_keys;
    const next = await s.peerKeys(b64decode(k.c_pk, "c_pk", 32), b64decode(k.s_pk, "s_pk", 32));
    return assigned({ advertised: true, next: { phase: 1, body: b64encode(next) } }, semi);
  });
  const client = await device(fake.server);
  const out = await client.runOnce();
  assert.deepEqual([out.status, out.reason], ["refused", "unsafe_parameters"]);
  assert.match(out.detail, /^threat model semi_honest: no consistency round/);
  assert.deepEqual(phaseRequests(fake.server.seen), [], "nothing sent for the cohort");
  assert.equal(fake.shareKeys(), undefined);
  const [record] = await client.transparencyLog();
  assert.deepEqual([record.status, record.epsilon, record.sent_at], ["refused", null, null]);
  assert.match(record.detail, /^unsafe_parameters: threat model semi_honest/);
});

test("keys taken without `next`: the device long-polls phase 0's next message, and sends nothing for phase 0", async () => {
  const fake = await cohort((body) => (body.secagg_keys ? assigned({ advertised: true }) : idle()));
  const client = await device(fake.server);
  assert.equal((await client.runOnce()).status, "finished");
  assert.deepEqual(phaseRequests(fake.server.seen), ["GET /0/next", "POST /1"]);
  await openShares(fake.shareKeys() as Uint8Array, b64decode(fake.checkins[0].secagg_keys.c_pk, "c_pk", 32), fake.peers, fake.root());
});

test("keys not taken (advertised false, or absent): the device runs phase 0 itself with the contribution's keys", async () => {
  for (const extra of [{ advertised: false }, {}]) {
    const fake = await cohort(() => assigned(extra));
    const client = await device(fake.server);
    assert.equal((await client.runOnce()).status, "finished");
    assert.deepEqual(phaseRequests(fake.server.seen), ["POST /0", "GET /0/next", "POST /1"]);
    const advert = decode(fake.server.seen.find((r) => r.path.startsWith(`${PHASES}/0?`))!.body);
    const own = await KeyPairs.draw(new DeviceRandomness(new SeededRandom(SEED)).forContribution(COHORT).secagg);
    assert.ok(advert.type === MsgType.AdvertiseKeys && hex(advert.cPk) === hex(own.c.publicBytes), "phase 0 with the secagg stream's keys");
    assert.notEqual(hex(advert.cPk), hex(b64decode(fake.checkins[0].secagg_keys.c_pk, "c_pk", 32)), "not the keys sent with the check-in");
  }
});

test("a server that refuses secagg_keys with a 422: the device checks in again without them, and stays without", async () => {
  const fake = await cohort((body) => {
    if (body.secagg_keys) return json(422, { error: "secagg_keys: extra fields not permitted" });
    return idle();
  });
  const client = await device(fake.server);
  assert.equal((await client.runOnce()).status, "idle");
  assert.equal((await client.runOnce()).status, "idle");
  assert.deepEqual(fake.checkins.map((b) => "secagg_keys" in b), [true, false, false]);
  // a 422 about anything else is the server's answer, not a reason to stop sending keys
  const other = await cohort(() => json(422, { error: "wait_s: must be at most 60" }));
  await assert.rejects((await device(other.server)).runOnce(), /HTTP 422: wait_s/);
  assert.deepEqual(other.checkins.map((b) => "secagg_keys" in b), [true]);
});

test("keysWithCheckin: false sends no keys and ignores an `advertised` it did not ask for; dropout still applies before phase 0", async () => {
  const fake = await cohort(() => assigned({ advertised: true }));
  const client = await device(fake.server, { keysWithCheckin: false });
  assert.equal((await client.runOnce()).status, "finished");
  assert.equal("secagg_keys" in fake.checkins[0], false);
  assert.deepEqual(phaseRequests(fake.server.seen), ["POST /0", "GET /0/next", "POST /1"]);

  const dropping = await cohort(() => assigned({ advertised: true }));
  const out = await (await device(dropping.server, { dropout: () => 0 })).runOnce();
  assert.equal(out.status, "dropped");
  assert.deepEqual(phaseRequests(dropping.server.seen), []);
});

test("the check-in answer's advertised and next are parsed strictly (typed errors, bounded body)", async () => {
  const ok = parseCheckin({ assignment: ASSIGNMENT, advertised: true, next: { phase: 1, body: b64encode(unhex("0102")) } });
  assert.equal(ok.advertised, true);
  assert.deepEqual([ok.next?.phase, hex(ok.next?.body as Uint8Array)], [1, "0102"]);
  assert.equal(parseCheckin({ assignment: ASSIGNMENT }).advertised, null);
  const bad: [unknown, RegExp][] = [
    [{ assignment: ASSIGNMENT, advertised: "yes" }, /advertised: expected true or false/],
    [{ assignment: null, retry_after: 1, advertised: true }, /advertised: only with an assignment/],
    [{ assignment: ASSIGNMENT, advertised: false, next: { phase: 1, body: "" } }, /next: only with advertised true/],
    [{ assignment: ASSIGNMENT, next: { phase: 1, body: "" } }, /next: only with advertised true/],
    [{ assignment: ASSIGNMENT, advertised: true, next: { phase: 16, body: "" } }, /next.phase: 16 is out of range/],
    [{ assignment: ASSIGNMENT, advertised: true, next: { phase: 1.5, body: "" } }, /next.phase: expected an integer/],
    [{ assignment: ASSIGNMENT, advertised: true, next: { phase: 1 } }, /next.body: missing/],
    [{ assignment: ASSIGNMENT, advertised: true, next: { phase: 1, body: "AQ=" } }, /next.body: not valid base64/],
    [{ assignment: ASSIGNMENT, advertised: true, next: { phase: 1, body: "AAAA", x: 1 } }, /next.x: unexpected field/],
    [{ assignment: ASSIGNMENT, advertised: true, next: { phase: 1, body: "A".repeat((1 << 24) + 4) } }, /next.body: longer than/],
  ];
  for (const [v, msg] of bad) assert.throws(() => parseCheckin(v), (e: Error) => e instanceof EnvelopeError && msg.test(e.message), JSON.stringify(v).slice(0, 120));
  // the client turns a malformed answer into a ServerError and sends nothing for the cohort
  const fake = await cohort(() => assigned({ advertised: true, next: { phase: 99, body: "" } }));
  await assert.rejects((await device(fake.server)).runOnce(), /malformed check-in answer: next.phase/);
  assert.deepEqual(phaseRequests(fake.server.seen), []);
});
