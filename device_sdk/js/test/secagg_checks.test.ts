/** The client's checks of protocol 2 at the session level (secagg/client.py's): before computing its masked input a
 * party verifies every share sender's signature over its advertised keys bound to session and task, and every member
 * entry the server adds (non-neighbours in 1..n, once each, signed with their own identity key), and counts distinct
 * identities toward `minVerified`; any failure aborts the session. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { utf8 } from "../src/bytes.js";
import { SeededRandom } from "../src/randomness.js";
import { ClientSession, Phase } from "../src/secagg/client.js";
import { SecAggConfig } from "../src/secagg/config.js";
import * as c from "../src/secagg/crypto.js";
import { ModVector } from "../src/secagg/encoding.js";
import { CohortUnverifiedError, ConfigError, InconsistentSetsError, SignatureError, TaskMismatchError, WrongPhaseError } from "../src/secagg/errors.js";
import { MemberEntry, Message, MsgType, decode, encode } from "../src/secagg/messages.js";
import { Ed25519Key, ed25519Verify } from "../src/webcrypto.js";

const SID = "0123456789abcdef0123456789abcdef";
const DIGEST = new Uint8Array(32).fill(0xd1);
type ShareKeys = Extract<Message, { type: MsgType.ShareKeys }>;

interface Setup {
  cfg: SecAggConfig;
  ids: Map<number, Ed25519Key>;
  sessions: Map<number, ClientSession>;
  keys: Map<number, { cPk: Uint8Array; sPk: Uint8Array; signature?: Uint8Array }>;
  shares: Map<number, ShareKeys>;
  closed: (p: number) => number[];
  bind: Uint8Array;
  /** RoutedShares for party v: its neighbours' shares and signatures, and `members` as given. */
  routed: (v: number, o?: { signatures?: Uint8Array[]; members?: MemberEntry[] }) => Uint8Array;
  /** An honest member entry for party w (as the server builds it from w's share keys). */
  member: (w: number) => MemberEntry;
}

/** n sessions run to the point where each has sent its ShareKeys; `digestOf(p)` is the task party p was shown. */
async function setup(n: number, secagg: Record<string, unknown> = {}, o: { minVerified?: (p: number) => number | undefined; digestOf?: (p: number) => Uint8Array } = {}): Promise<Setup> {
  const cfg = SecAggConfig.fromDict({ session_id: SID, n, dim: 2, bits: 16, ...secagg });
  const graph = await cfg.neighbourGraph();
  const ids = new Map<number, Ed25519Key>();
  for (let p = 1; p <= n; p++) ids.set(p, await Ed25519Key.fromSeed(new Uint8Array(32).fill(p)));
  const publics = new Map([...ids].map(([p, k]) => [p, k.publicBytes]));
  const sessions = new Map<number, ClientSession>();
  const keys = new Map<number, { cPk: Uint8Array; sPk: Uint8Array; signature?: Uint8Array }>();
  for (let p = 1; p <= n; p++) {
    const s = new ClientSession(cfg, p, ModVector.fromUnsigned([BigInt(p), 1n], 16), {
      randomness: new SeededRandom(utf8(`party ${p}`)), identityKey: ids.get(p), peerIdentityKeys: publics,
      taskDigest: o.digestOf?.(p) ?? DIGEST, minVerified: o.minVerified?.(p),
    });
    sessions.set(p, s);
    const ad = decode(await s.start());
    assert.ok(ad.type === MsgType.AdvertiseKeys);
    assert.ok(await ed25519Verify((ids.get(p) as Ed25519Key).publicBytes, ad.signature as Uint8Array, c.keysPayload(ad.cPk, ad.sPk)), "AdvertiseKeys carries the signature over the keys");
    keys.set(p, { cPk: ad.cPk, sPk: ad.sPk, signature: ad.signature });
  }
  const shares = new Map<number, ShareKeys>();
  for (let p = 1; p <= n; p++) {
    const peers = graph.closed(p).map((v) => ({ party: v, ...(keys.get(v) as { cPk: Uint8Array; sPk: Uint8Array }) }));
    shares.set(p, decode((await (sessions.get(p) as ClientSession).receive(encode({ type: MsgType.PeerKeys, sessionId: cfg.sessionId, party: p, peers }))) as Uint8Array) as ShareKeys);
  }
  const bind = c.binding(cfg.sessionId, DIGEST);
  const member = (w: number): MemberEntry => {
    const k = keys.get(w) as { cPk: Uint8Array; sPk: Uint8Array };
    return { party: w, identity: (ids.get(w) as Ed25519Key).publicBytes, cPk: k.cPk, sPk: k.sPk, signature: (shares.get(w) as ShareKeys).signature };
  };
  const routed = (v: number, r: { signatures?: Uint8Array[]; members?: MemberEntry[] } = {}) => {
    const senders = graph.closed(v).filter((u) => u !== v);
    const cts = senders.map((u) => [u, (shares.get(u) as ShareKeys).ciphertexts.find(([x]) => x === v)![1]] as [number, Uint8Array]);
    return encode({ type: MsgType.RoutedShares, sessionId: cfg.sessionId, party: v, ciphertexts: cts, signatures: r.signatures ?? senders.map((u) => (shares.get(u) as ShareKeys).signature), members: r.members ?? [] });
  };
  return { cfg, ids, sessions, keys, shares, closed: (p) => graph.closed(p), bind, routed, member };
}

test("ShareKeys carries the party's signature over its keys bound to session and task, and members_wanted", async () => {
  const s = await setup(3);
  for (const [p, m] of s.shares) {
    const k = s.keys.get(p) as { cPk: Uint8Array; sPk: Uint8Array };
    const ok = await ed25519Verify((s.ids.get(p) as Ed25519Key).publicBytes, m.signature, c.advertisePayload(s.bind, p, k.cPk, k.sPk));
    assert.ok(ok, `party ${p}`);
    assert.equal(m.membersWanted, 0);
  }
  // SecAgg+ (8 parties, degree 2: neighbourhood 3, threshold 2): min(n, minVerified) − t members beyond the neighbourhood
  const sparse = await setup(8, { graph: "sparse", degree: 2 }, { minVerified: (p) => (p === 1 ? 5 : p === 2 ? 20 : undefined) });
  assert.deepEqual([1, 2, 3].map((p) => (sparse.shares.get(p) as ShareKeys).membersWanted), [3, 6, 0]);
  // the complete graph: every member is a neighbour, none to ask for
  const complete = await setup(3, {}, { minVerified: () => 3 });
  assert.equal((complete.shares.get(1) as ShareKeys).membersWanted, 0);
});

test("honest routed shares: signatures verify, the masked input follows, verifiedMembers counts distinct identities", async () => {
  const s = await setup(3);
  const c1 = s.sessions.get(1) as ClientSession;
  const reply = decode((await c1.receive(s.routed(1))) as Uint8Array);
  assert.equal(reply.type, MsgType.MaskedInput);
  assert.equal(c1.verifiedMembers, 3);
});

test("a sender's signature that does not verify for this session and task: TaskMismatchError, the session is abandoned", async () => {
  const s = await setup(3);
  const c1 = s.sessions.get(1) as ClientSession;
  const swapped = [(s.shares.get(3) as ShareKeys).signature, (s.shares.get(2) as ShareKeys).signature];
  await assert.rejects(c1.receive(s.routed(1, { signatures: swapped })), (e: Error) => e instanceof TaskMismatchError && e instanceof SignatureError && (e as TaskMismatchError).party === 2 &&
    e.message === "party 2's signature over its keys for this session and task does not verify: it was shown another task or its keys were altered");
  assert.equal(c1.phase, Phase.Aborted);
  await assert.rejects(c1.receive(s.routed(1)), WrongPhaseError, "no second chance after a fatal check");
  const c2 = s.sessions.get(2) as ClientSession;
  await assert.rejects(c2.receive(s.routed(2, { signatures: [] })), /\(signatures missing\)$/);
});

test("a peer that was shown another task: its signature fails for everyone else, and theirs for it", async () => {
  const other = new Uint8Array(32).fill(0xee);
  const s = await setup(3, {}, { digestOf: (p) => (p === 3 ? other : DIGEST) });
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1)), (e: Error) => e instanceof TaskMismatchError && (e as TaskMismatchError).party === 3);
  await assert.rejects((s.sessions.get(3) as ClientSession).receive(s.routed(3)), (e: Error) => e instanceof TaskMismatchError && (e as TaskMismatchError).party === 1);
});

test("member entries: non-neighbours in 1..n, once each, signed with their own key; distinct identities toward minVerified", async () => {
  const opts = { minVerified: () => 5 };
  const sparse = { graph: "sparse", degree: 2 };
  const fresh = () => setup(8, sparse, opts);
  let s = await fresh();
  const outside = (p: number) => [1, 2, 3, 4, 5, 6, 7, 8].filter((w) => !s.closed(p).includes(w));
  const [w1, w2, w3] = outside(1);
  // honest: 1 + 2 senders + 3 members = 6 ≥ 5
  const c1 = s.sessions.get(1) as ClientSession;
  assert.equal(decode((await c1.receive(s.routed(1, { members: [s.member(w1), s.member(w2), s.member(w3)] }))) as Uint8Array).type, MsgType.MaskedInput);
  assert.equal(c1.verifiedMembers, 6);
  // too few: 1 + 2 + 1 = 4 < 5
  await assert.rejects((s.sessions.get(2) as ClientSession).receive(s.routed(2, { members: [s.member(outside(2)[0])] })), (e: Error) =>
    e instanceof CohortUnverifiedError && e instanceof InconsistentSetsError && (e as CohortUnverifiedError).verified === 4 && (e as CohortUnverifiedError).minimum === 5);
  assert.equal((s.sessions.get(2) as ClientSession).phase, Phase.Aborted);
  // bad member lists (the sessions are seeded: every fresh setup has the same keys): a neighbour, a repeat, outside 1..n
  const neighbour = s.closed(1).find((v) => v !== 1) as number;
  for (const members of [[s.member(neighbour)], [s.member(w1), s.member(w1)], [{ ...s.member(w1), party: 0 }], [{ ...s.member(w1), party: 9 }]]) {
    s = await fresh();
    await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members })), (e: Error) => e instanceof InconsistentSetsError && /^members: party \d+ is a neighbour, repeated or outside the cohort$/.test(e.message));
  }
  // a forged signature, or keys that are not the ones it signed
  s = await fresh();
  const forged = { ...s.member(w1), signature: Uint8Array.from(s.member(w1).signature).map((b, i) => (i === 0 ? b ^ 1 : b)) };
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members: [forged] })), (e: Error) => e instanceof TaskMismatchError && /\(member list\)$/.test(e.message));
  s = await fresh();
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members: [{ ...s.member(w1), sPk: s.member(w2).sPk }] })), TaskMismatchError);
  // Sybil entries: three members signed with one identity key count once (1 + 2 + 1 = 4 < 5)
  s = await fresh();
  const sybilKey = s.ids.get(w1) as Ed25519Key;
  const sybils = await Promise.all([w1, w2, w3].map(async (w) => {
    const m = s.member(w);
    return { ...m, identity: sybilKey.publicBytes, signature: await sybilKey.sign(c.advertisePayload(s.bind, w, m.cPk, m.sPk)) };
  }));
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members: sybils })), (e: Error) => e instanceof CohortUnverifiedError && (e as CohortUnverifiedError).verified === 4);
});

test("PeerKeys: a verifying party needs every peer's identity key; configuration errors are typed", async () => {
  const cfg = SecAggConfig.fromDict({ session_id: SID, n: 3, dim: 2, bits: 16 });
  const me = await Ed25519Key.fromSeed(new Uint8Array(32).fill(1));
  const vec = ModVector.fromUnsigned([1n, 2n], 16);
  const peerKeys = async (s: ClientSession) => {
    const own = decode(await s.start());
    assert.ok(own.type === MsgType.AdvertiseKeys);
    const other = (b: number) => ({ cPk: new Uint8Array(32).fill(b), sPk: new Uint8Array(32).fill(b + 1) });
    return encode({ type: MsgType.PeerKeys, sessionId: cfg.sessionId, party: 1, peers: [{ party: 1, cPk: own.cPk, sPk: own.sPk }, { party: 2, ...other(9) }, { party: 3, ...other(11) }] });
  };
  const partial = new Map([[2, new Uint8Array(32)]]);
  const verifying = new ClientSession(cfg, 1, vec, { randomness: new SeededRandom(utf8("a")), identityKey: me, peerIdentityKeys: partial });
  await assert.rejects(verifying.receive(await peerKeys(verifying)), (e: Error) => e instanceof SignatureError && /no identity key for parties 3/.test(e.message));
  const trusting = new ClientSession(cfg, 1, vec, { randomness: new SeededRandom(utf8("a")), identityKey: me, peerIdentityKeys: partial, verifyPeers: false });
  assert.equal(decode((await trusting.receive(await peerKeys(trusting))) as Uint8Array).type, MsgType.ShareKeys);

  const opts = { randomness: new SeededRandom(utf8("b")) };
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, taskDigest: new Uint8Array(31) }), (e: Error) => e instanceof ConfigError && /task_digest: must be 32 bytes/.test(e.message));
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, minVerified: 2 }), /min_verified: needs identity_key, peer_identity_keys and verify_peers/);
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, identityKey: me, peerIdentityKeys: partial, verifyPeers: false, minVerified: 2 }), /min_verified: needs/);
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, identityKey: me, peerIdentityKeys: partial, minVerified: 0 }), /min_verified: must be a positive integer/);
});

test("PeerKeys: every peer's keys must carry its identity key's signature over them, checked before any share is encrypted", async () => {
  const cfg = SecAggConfig.fromDict({ session_id: SID, n: 3, dim: 2, bits: 16 });
  const ids = new Map<number, Ed25519Key>();
  for (let p = 1; p <= 3; p++) ids.set(p, await Ed25519Key.fromSeed(new Uint8Array(32).fill(p)));
  const publics = new Map([...ids].map(([p, k]) => [p, k.publicBytes]));
  const adverts = new Map<number, Extract<Message, { type: MsgType.AdvertiseKeys }>>();
  const sessions = new Map<number, ClientSession>();
  for (let p = 1; p <= 3; p++) {
    const session = new ClientSession(cfg, p, ModVector.fromUnsigned([1n, 2n], 16), { randomness: new SeededRandom(utf8(`k${p}`)), identityKey: ids.get(p), peerIdentityKeys: publics, taskDigest: DIGEST });
    sessions.set(p, session);
    adverts.set(p, decode(await session.start()) as Extract<Message, { type: MsgType.AdvertiseKeys }>);
  }
  const entry = (p: number) => ({ party: p, cPk: adverts.get(p)!.cPk, sPk: adverts.get(p)!.sPk, signature: adverts.get(p)!.signature });
  const peerKeys = (peers: ReturnType<typeof entry>[]) => encode({ type: MsgType.PeerKeys, sessionId: cfg.sessionId, party: 1, peers });
  const c1 = sessions.get(1) as ClientSession;
  // the server's own keys in place of party 3's, under party 3's signature; then unsigned keys; then a signature by another identity
  const forged = new Uint8Array(32).fill(0x77);
  const cases = [
    [entry(1), entry(2), { ...entry(3), sPk: forged }],
    [entry(1), entry(2), { ...entry(3), signature: new Uint8Array(0) }],
    [entry(1), entry(2), { ...entry(3), signature: adverts.get(2)!.signature }],
  ];
  for (const peers of cases) {
    const fresh = new ClientSession(cfg, 1, ModVector.fromUnsigned([1n, 2n], 16), { randomness: new SeededRandom(utf8("k1")), identityKey: ids.get(1), peerIdentityKeys: publics, taskDigest: DIGEST });
    await fresh.start();
    await assert.rejects(fresh.receive(peerKeys(peers)), (e: Error) => e instanceof TaskMismatchError && (e as TaskMismatchError).party === 3 && /its advertised keys are not signed by its identity key/.test(e.message));
    assert.equal(fresh.phase, Phase.Aborted);
  }
  // this party's own entry is not checked (its keys are compared); the honest list is answered
  assert.equal(decode((await c1.receive(peerKeys([{ ...entry(1), signature: new Uint8Array(0) }, entry(2), entry(3)]))) as Uint8Array).type, MsgType.ShareKeys);
  // without identities: no signature in AdvertiseKeys, none checked
  const plain = new ClientSession(cfg, 1, ModVector.fromUnsigned([1n, 2n], 16), { randomness: new SeededRandom(utf8("k1")) });
  const ad = decode(await plain.start());
  assert.ok(ad.type === MsgType.AdvertiseKeys && ad.signature?.length === 0);
});
