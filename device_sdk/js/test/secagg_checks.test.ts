/** The client's checks of protocol 3 at the session level (secagg/client.py's): the members list (its own leaf, every
 * peer's and member's entry against its leaf, the graph drawn from the members root, which then joins the binding),
 * every peer's signature over its keys before any share is encrypted, every share sender's share opened under the
 * channel key bound to session, task and members root (a share that does not open is `TaskMismatchError` naming its
 * sender) and every member entry's signature bound to them before its masked input is computed, distinct identities toward
 * `minVerified` (counted again among the survivors), the consistency round (`InconsistentSurvivorsError`) and the
 * safety floor (`UnsafeParametersError`); any failure aborts the session. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { concat, equalBytes, utf8 } from "../src/bytes.js";
import { SeededRandom } from "../src/randomness.js";
import { ClientSession, Phase } from "../src/secagg/client.js";
import { SecAggConfig } from "../src/secagg/config.js";
import * as c from "../src/secagg/crypto.js";
import { ModVector } from "../src/secagg/encoding.js";
import {
  CohortUnverifiedError, ConfigError, DecryptionError, DuplicateKeyError, InconsistentSetsError, InconsistentSurvivorsError, SignatureError, TaskMismatchError, WrongPhaseError,
} from "../src/secagg/errors.js";
import { Assumptions, UnsafeParametersError } from "../src/secagg/floor.js";
import { NeighbourGraph } from "../src/secagg/graph.js";
import { MemberEntry, Message, MsgType, PeerEntry, decode, encode, encodeBitmap } from "../src/secagg/messages.js";
import { Ed25519Key, X25519Key, ed25519Verify } from "../src/webcrypto.js";

const SID = "0123456789abcdef0123456789abcdef";
const DIGEST = new Uint8Array(32).fill(0xd1);
type ShareKeys = Extract<Message, { type: MsgType.ShareKeys }>;
type Advert = Extract<Message, { type: MsgType.AdvertiseKeys }>;

/** Every party's PeerKeys entry as the server fixes it when phase 0 closes, and the members list over them. */
async function membersOf(n: number, entries: Map<number, PeerEntry>): Promise<{ leaves: Uint8Array; root: Uint8Array }> {
  const leaves = new Uint8Array(n * c.MEMBER_LEAF_BYTES);
  for (const [v, e] of entries) leaves.set(await c.memberLeaf(v, e.identity, e.cPk, e.sPk), (v - 1) * c.MEMBER_LEAF_BYTES);
  return { leaves, root: await c.membersRoot(leaves) };
}

interface Setup {
  cfg: SecAggConfig;
  ids: Map<number, Ed25519Key>;
  sessions: Map<number, ClientSession>;
  entries: Map<number, PeerEntry>;
  leaves: Uint8Array;
  graph: NeighbourGraph;
  shares: Map<number, ShareKeys>;
  closed: (p: number) => number[];
  /** Session ‖ task digest ‖ members root. */
  bind: Uint8Array;
  /** PeerKeys for party u: its neighbours' entries (or `peers`) and the leaves (or `leaves`). */
  peerKeys: (u: number, o?: { peers?: PeerEntry[]; leaves?: Uint8Array }) => Uint8Array;
  /** RoutedShares for party v: its neighbours' shares (sender → ciphertext in `shares` instead of the genuine one),
   * and `members` as given. */
  routed: (v: number, o?: { shares?: Map<number, Uint8Array>; members?: MemberEntry[] }) => Uint8Array;
  /** An honest member entry for party w (as the server builds it from w's share keys). */
  member: (w: number) => MemberEntry;
}

/** n sessions run to the point where each has sent its ShareKeys (`upTo: "adverts"`: only started); `digestOf(p)` is
 * the task party p was shown. The server's binding is the honest one (DIGEST). */
async function setup(n: number, secagg: Record<string, unknown> = {}, o: { minVerified?: (p: number) => number | undefined; digestOf?: (p: number) => Uint8Array; upTo?: "adverts"; verifyPeers?: (p: number) => boolean } = {}): Promise<Setup> {
  const cfg = SecAggConfig.fromDict({ session_id: SID, n, dim: 2, bits: 16, ...secagg });
  const ids = new Map<number, Ed25519Key>();
  for (let p = 1; p <= n; p++) ids.set(p, await Ed25519Key.fromSeed(new Uint8Array(32).fill(p)));
  const sessions = new Map<number, ClientSession>();
  const entries = new Map<number, PeerEntry>();
  for (let p = 1; p <= n; p++) {
    const s = new ClientSession(cfg, p, ModVector.fromUnsigned([BigInt(p), 1n], 16), {
      randomness: new SeededRandom(utf8(`party ${p}`)), identityKey: ids.get(p), taskDigest: o.digestOf?.(p) ?? DIGEST, minVerified: o.minVerified?.(p),
      verifyPeers: o.verifyPeers?.(p) ?? true,
    });
    sessions.set(p, s);
    const ad = decode(await s.start()) as Advert;
    assert.ok(await ed25519Verify((ids.get(p) as Ed25519Key).publicBytes, ad.signature as Uint8Array, c.keysPayload(ad.cPk, ad.sPk)), "AdvertiseKeys carries the signature over the keys");
    entries.set(p, { party: p, identity: (ids.get(p) as Ed25519Key).publicBytes, cPk: ad.cPk, sPk: ad.sPk, signature: ad.signature });
  }
  const { leaves, root } = await membersOf(n, entries);
  const honest = c.binding(cfg.sessionId, DIGEST);
  const graph = await cfg.neighbourGraph(await c.graphSeed(honest, root));
  const bind = c.roundBinding(honest, root);
  const peerKeys = (u: number, k: { peers?: PeerEntry[]; leaves?: Uint8Array } = {}) =>
    encode({ type: MsgType.PeerKeys, sessionId: cfg.sessionId, party: u, peers: k.peers ?? graph.closed(u).map((v) => entries.get(v) as PeerEntry), leaves: k.leaves ?? leaves });
  const shares = new Map<number, ShareKeys>();
  if (o.upTo !== "adverts") {
    for (let p = 1; p <= n; p++) shares.set(p, decode((await (sessions.get(p) as ClientSession).receive(peerKeys(p))) as Uint8Array) as ShareKeys);
  }
  const member = (w: number): MemberEntry => {
    const e = entries.get(w) as PeerEntry;
    return { party: w, identity: e.identity, cPk: e.cPk, sPk: e.sPk, signature: (shares.get(w) as ShareKeys).signature };
  };
  const routed = (v: number, r: { shares?: Map<number, Uint8Array>; members?: MemberEntry[] } = {}) => {
    const senders = graph.closed(v).filter((u) => u !== v);
    const cts = senders.map((u) => [u, r.shares?.get(u) ?? (shares.get(u) as ShareKeys).ciphertexts.find(([x]) => x === v)![1]] as [number, Uint8Array]);
    return encode({ type: MsgType.RoutedShares, sessionId: cfg.sessionId, party: v, ciphertexts: cts, members: r.members ?? [] });
  };
  return { cfg, ids, sessions, entries, leaves, graph, shares, closed: (p) => graph.closed(p), bind, peerKeys, routed, member };
}

test("ShareKeys carries the party's signature over its keys bound to session, task and members root, and members_wanted", async () => {
  const s = await setup(3);
  for (const [p, m] of s.shares) {
    const e = s.entries.get(p) as PeerEntry;
    const ok = await ed25519Verify(e.identity, m.signature, c.advertisePayload(s.bind, p, e.cPk, e.sPk));
    assert.ok(ok, `party ${p}`);
    assert.ok(!(await ed25519Verify(e.identity, m.signature, c.advertisePayload(s.bind.subarray(0, 48), p, e.cPk, e.sPk))), "not without the members root");
    assert.equal(m.membersWanted, 0);
  }
  // SecAgg+ (8 parties, degree 2: neighbourhood 3, semi-honest threshold 2): min(n, minVerified) − t members beyond
  const sparse = await setup(8, { graph: "sparse", degree: 2 }, { minVerified: (p) => (p === 1 ? 5 : p === 2 ? 20 : undefined) });
  assert.deepEqual([1, 2, 3].map((p) => (sparse.shares.get(p) as ShareKeys).membersWanted), [3, 6, 0]);
  // the complete graph: every member is a neighbour, none to ask for
  const complete = await setup(3, {}, { minVerified: () => 3 });
  assert.equal((complete.shares.get(1) as ShareKeys).membersWanted, 0);
});

test("the graph is drawn from the members root: another members list, another ring; the party refuses peers outside its own neighbourhood", async () => {
  const s = await setup(8, { graph: "sparse", degree: 2 }, { upTo: "adverts" });
  // the server's graph is the one every party draws from the same leaves
  const other = new Map(s.entries);
  other.set(8, { ...(other.get(8) as PeerEntry), cPk: new Uint8Array(32).fill(0x42) });
  const moved = await s.cfg.neighbourGraph(await c.graphSeed(c.binding(s.cfg.sessionId, DIGEST), (await membersOf(8, other)).root));
  assert.notDeepEqual(moved.ringOrder(), s.graph.ringOrder(), "one leaf changed: another ring order");
  // PeerKeys naming a party outside party 1's neighbourhood (by the graph of these leaves)
  const outside = [1, 2, 3, 4, 5, 6, 7, 8].find((w) => !s.closed(1).includes(w)) as number;
  const peers = [...s.closed(1), outside].map((v) => s.entries.get(v) as PeerEntry);
  const c1 = s.sessions.get(1) as ClientSession;
  await assert.rejects(c1.receive(s.peerKeys(1, { peers })), (e: Error) => e instanceof InconsistentSetsError && e.message === `peer keys: parties [${outside}] are not neighbours`);
  assert.equal(c1.phase, Phase.Aborted);
  // the honest PeerKeys is answered
  const c2 = s.sessions.get(2) as ClientSession;
  assert.equal(decode((await c2.receive(s.peerKeys(2))) as Uint8Array).type, MsgType.ShareKeys);
});

test("the members list: its size, this party's own leaf, every peer entry against its leaf, one identity per peer", async () => {
  const bad: [string, (s: Setup) => Uint8Array, (e: Error) => boolean][] = [
    ["one leaf short", (s) => s.peerKeys(1, { leaves: s.leaves.subarray(16) }), (e) => e instanceof InconsistentSetsError && e.message === "members list: 2 leaves for a cohort of 3"],
    ["no leaves", (s) => s.peerKeys(1, { leaves: new Uint8Array(0) }), (e) => e instanceof InconsistentSetsError && e.message === "members list: 0 leaves for a cohort of 3"],
    ["its own leaf altered", (s) => s.peerKeys(1, { leaves: concat(c.ABSENT_LEAF, s.leaves.subarray(16)) }), (e) => e instanceof InconsistentSetsError && e.message === "members list: this party's keys are missing or altered"],
    ["a peer's entry with other keys than its leaf", (s) => s.peerKeys(1, { peers: [1, 2, 3].map((v) => (v === 3 ? { ...(s.entries.get(3) as PeerEntry), sPk: new Uint8Array(32).fill(9) } : s.entries.get(v) as PeerEntry)) }),
      (e) => e instanceof InconsistentSetsError && e.message === "peer keys: party 3's entry is not the one in the members list"],
    ["a peer's entry with another identity than its leaf", (s) => s.peerKeys(1, { peers: [1, 2, 3].map((v) => (v === 2 ? { ...(s.entries.get(2) as PeerEntry), identity: new Uint8Array(32).fill(7) } : s.entries.get(v) as PeerEntry)) }),
      (e) => e instanceof InconsistentSetsError && e.message === "peer keys: party 2's entry is not the one in the members list"],
    ["two peers with one identity", (s) => s.peerKeys(1, { peers: [1, 2, 3].map((v) => (v === 2 ? { ...(s.entries.get(2) as PeerEntry), identity: (s.ids.get(3) as Ed25519Key).publicBytes } : s.entries.get(v) as PeerEntry)) }),
      (e) => e instanceof DuplicateKeyError && e.message === "peer keys: the same identity key is listed for two parties"],
    ["its own identity altered", (s) => s.peerKeys(1, { peers: [1, 2, 3].map((v) => (v === 1 ? { ...(s.entries.get(1) as PeerEntry), identity: new Uint8Array(32) } : s.entries.get(v) as PeerEntry)) }),
      (e) => e instanceof InconsistentSetsError && e.message === "peer keys: this party's own keys are missing or altered"],
  ];
  for (const [what, message, check] of bad) {
    const s = await setup(3, {}, { upTo: "adverts" });
    const c1 = s.sessions.get(1) as ClientSession;
    await assert.rejects(c1.receive(message(s)), check, what);
    assert.equal(c1.phase, Phase.Aborted, what);
  }
  // one identity for two peers, consistently in the leaves too: still refused
  const s = await setup(3, {}, { upTo: "adverts" });
  const twin = new Map(s.entries);
  twin.set(3, { ...(twin.get(3) as PeerEntry), identity: (s.ids.get(2) as Ed25519Key).publicBytes });
  const { leaves } = await membersOf(3, twin);
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.peerKeys(1, { peers: [...twin.values()], leaves })), DuplicateKeyError);
});

test("honest routed shares: every share opens, the masked input follows, verifiedMembers counts distinct identities", async () => {
  const s = await setup(3);
  const c1 = s.sessions.get(1) as ClientSession;
  const reply = decode((await c1.receive(s.routed(1))) as Uint8Array);
  assert.equal(reply.type, MsgType.MaskedInput);
  assert.equal(c1.verifiedMembers, 3);
});

/** The share party `from` would have sent party `to` bound to `bind` (another task, another members list): its genuine
 * plaintext, sealed under the channel key agreed from its own channel key (drawn first from its seeded source) and
 * `to`'s, derived and authenticated with `bind` — what an honest `from` shown that binding sends. */
async function sealedUnder(s: Setup, from: number, to: number, bind: Uint8Array): Promise<Uint8Array> {
  const own = await X25519Key.fromPrivate((await new SeededRandom(utf8(`party ${from}`)).bytes(64)).subarray(0, 32));
  assert.ok(equalBytes(own.publicBytes, (s.entries.get(from) as PeerEntry).cPk));
  const shared = await own.agree((s.entries.get(to) as PeerEntry).cPk);
  const genuine = (s.shares.get(from) as ShareKeys).ciphertexts.find(([r]) => r === to)![1];
  const pt = await c.openShare(await c.channelKey(shared, s.bind, from, to), s.bind, from, to, genuine);
  return c.sealShare(await c.channelKey(shared, bind, from, to), bind, from, to, pt);
}

const shareOf = (s: Setup, from: number, to: number): Uint8Array => (s.shares.get(from) as ShareKeys).ciphertexts.find(([r]) => r === to)![1];

test("a share that does not open under the channel key bound to session, task and members root: TaskMismatchError naming its sender, the session is abandoned", async () => {
  // the channel key is the sender's (its key signature verified at the peer keys) and bound to this party's session,
  // task and members root, as is the share's associated data: a share that opens is the sender's word that it agreed
  // to them — the channel binding, which stands in for a signature of the sender over them
  const cases: [string, number, (s: Setup) => Promise<Map<number, Uint8Array>>][] = [
    ["tampered", 3, async (s) => new Map([[3, shareOf(s, 3, 1).map((b, i) => (i === 20 ? b ^ 1 : b))]])],
    ["another receiver's", 2, async (s) => new Map([[2, shareOf(s, 2, 3)]])],
    ["relabelled as another sender's", 3, async (s) => new Map([[3, shareOf(s, 2, 1)]])],
    ["its own share reflected", 2, async (s) => new Map([[2, shareOf(s, 1, 2)]])],
    ["sealed for another task", 3, async (s) => new Map([[3, await sealedUnder(s, 3, 1, concat(s.bind.subarray(0, 16), new Uint8Array(32).fill(0xee), s.bind.subarray(48)))]])],
    ["sealed for another members list", 3, async (s) => new Map([[3, await sealedUnder(s, 3, 1, concat(s.bind.subarray(0, 48), new Uint8Array(32).fill(0x4d)))]])],
    ["sealed without the members root", 3, async (s) => new Map([[3, await sealedUnder(s, 3, 1, s.bind.subarray(0, 48))]])],
  ];
  for (const [what, sender, replace] of cases) {
    const s = await setup(3);
    const c1 = s.sessions.get(1) as ClientSession;
    const shown = s.routed(1, { shares: await replace(s) });
    await assert.rejects(c1.receive(shown), (e: Error) => e instanceof TaskMismatchError && e instanceof SignatureError && (e as TaskMismatchError).party === sender &&
      e.message === `party ${sender}'s share does not open under the channel key bound to this session, task and members list: it was shown another task or its keys were altered`, what);
    assert.equal(c1.phase, Phase.Aborted, what);
    assert.equal(c1.verifiedMembers, null, `${what}: nothing counted`);
    await assert.rejects(c1.receive(s.routed(1)), WrongPhaseError, "no second chance after a fatal check");
    // a party that does not verify refuses the same share as a plain DecryptionError
    const t = await setup(3, {}, { verifyPeers: (p) => p !== 1 });
    await assert.rejects((t.sessions.get(1) as ClientSession).receive(t.routed(1, { shares: await replace(t) })), (e: Error) =>
      e instanceof DecryptionError && !(e instanceof TaskMismatchError) && e.message.includes(`party ${sender}`), what);
  }
  // the controls: the genuine shares, and one sealed under this very binding by the helper, open
  const s = await setup(3);
  const resealed = new Map([[3, await sealedUnder(s, 3, 1, s.bind)]]);
  assert.equal(decode((await (s.sessions.get(1) as ClientSession).receive(s.routed(1, { shares: resealed }))) as Uint8Array).type, MsgType.MaskedInput);
});

test("a peer that was shown another task: its share does not open for anyone else, nor theirs for it", async () => {
  const other = new Uint8Array(32).fill(0xee);
  const s = await setup(3, {}, { digestOf: (p) => (p === 3 ? other : DIGEST) });
  const opens = /^party \d's share does not open under the channel key bound to this session, task and members list/;
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1)), (e: Error) => e instanceof TaskMismatchError && (e as TaskMismatchError).party === 3 && opens.test(e.message));
  await assert.rejects((s.sessions.get(3) as ClientSession).receive(s.routed(3)), (e: Error) => e instanceof TaskMismatchError && (e as TaskMismatchError).party === 1 && opens.test(e.message));
});

test("member entries: non-neighbours in 1..n, once each, as in the members list, signed with their own key; distinct identities toward minVerified", async () => {
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
  // bad member lists (the sessions are seeded: every fresh setup has the same keys and graph): a neighbour, a repeat,
  // outside 1..n
  const neighbour = s.closed(1).find((v) => v !== 1) as number;
  for (const members of [[s.member(neighbour)], [s.member(w1), s.member(w1)], [{ ...s.member(w1), party: 0 }], [{ ...s.member(w1), party: 9 }]]) {
    s = await fresh();
    await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members })), (e: Error) => e instanceof InconsistentSetsError && /^members: party \d+ is a neighbour, repeated or outside the cohort$/.test(e.message));
  }
  // a forged signature
  s = await fresh();
  const forged = { ...s.member(w1), signature: Uint8Array.from(s.member(w1).signature).map((b, i) => (i === 0 ? b ^ 1 : b)) };
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members: [forged] })), (e: Error) => e instanceof TaskMismatchError && /\(member list\)$/.test(e.message));
  // keys or an identity that are not the member's entry in the members list (a Sybil signing for others)
  s = await fresh();
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members: [{ ...s.member(w1), sPk: s.member(w2).sPk }] })),
    (e: Error) => e instanceof InconsistentSetsError && e.message === `members: party ${w1}'s entry is not the one in the members list`);
  s = await fresh();
  const sybilKey = s.ids.get(w1) as Ed25519Key;
  const sybils = await Promise.all([w1, w2, w3].map(async (w) => {
    const m = s.member(w);
    return { ...m, identity: sybilKey.publicBytes, signature: await sybilKey.sign(c.advertisePayload(s.bind, w, m.cPk, m.sPk)) };
  }));
  await assert.rejects((s.sessions.get(1) as ClientSession).receive(s.routed(1, { members: sybils })), (e: Error) => e instanceof InconsistentSetsError && e.message === `members: party ${w2}'s entry is not the one in the members list`);
});

test("minVerified is counted again among the parties the survivor set lists, before the party signs or reveals anything", async () => {
  // a sparse cohort (semi-honest threshold 2 of 3): the survivor set leaves out two of the three members counted beyond
  // the neighbourhood
  const sp = await setup(8, { graph: "sparse", degree: 2 }, { minVerified: () => 5 });
  const outside = [1, 2, 3, 4, 5, 6, 7, 8].filter((w) => !sp.closed(1).includes(w));
  const p1 = sp.sessions.get(1) as ClientSession;
  await p1.receive(sp.routed(1, { members: outside.slice(0, 3).map((w) => sp.member(w)) }));
  assert.equal(p1.verifiedMembers, 6);
  const unmask = (members: number[]) => encode({ type: MsgType.UnmaskRequest, sessionId: sp.cfg.sessionId, party: 1, survivors: encodeBitmap(members, 8), signatures: [] });
  await assert.rejects(p1.receive(unmask([...sp.closed(1), outside[0]])), (e: Error) => e instanceof CohortUnverifiedError && (e as CohortUnverifiedError).verified === 4 && (e as CohortUnverifiedError).minimum === 5);
  assert.equal(p1.phase, Phase.Aborted);
});

test("the consistency round: another set than the one signed, repeated or non-surviving signers, a bad signature, fewer than t signers → InconsistentSurvivorsError", async () => {
  // 4 parties, active threshold 3 of 4 (the floor's)
  const run = async () => {
    const s = await setup(4, { threat_model: "active" });
    assert.equal(s.cfg.shareThreshold, 3);
    const all = encodeBitmap([1, 2, 3, 4], 4);
    const sigs = new Map<number, Uint8Array>();
    for (let p = 1; p <= 4; p++) {
      const session = s.sessions.get(p) as ClientSession;
      await session.receive(s.routed(p));
      const reply = decode((await session.receive(encode({ type: MsgType.ConsistencyRequest, sessionId: s.cfg.sessionId, party: p, survivors: all }))) as Uint8Array);
      assert.ok(reply.type === MsgType.ConsistencySignature);
      sigs.set(p, reply.signature);
    }
    const unmask = (survivors: Uint8Array, signatures: [number, Uint8Array][]) => encode({ type: MsgType.UnmaskRequest, sessionId: s.cfg.sessionId, party: 1, survivors, signatures });
    return { s, all, sigs, unmask, c1: s.sessions.get(1) as ClientSession };
  };
  const cases: [string, (r: Awaited<ReturnType<typeof run>>) => Uint8Array, string][] = [
    ["another set", (r) => r.unmask(encodeBitmap([1, 2, 3], 4), [1, 2, 3].map((p) => [p, r.sigs.get(p) as Uint8Array])), "survivors: differ from the set this party signed"],
    ["a repeated signer", (r) => r.unmask(r.all, [[2, r.sigs.get(2) as Uint8Array], [2, r.sigs.get(2) as Uint8Array], [3, r.sigs.get(3) as Uint8Array]]), "consistency: signatures from repeated or non-surviving parties"],
    ["a bad signature", (r) => r.unmask(r.all, [[2, r.sigs.get(2) as Uint8Array], [3, r.sigs.get(4) as Uint8Array], [4, r.sigs.get(4) as Uint8Array]]), "invalid signature on party 3's consistency check"],
    ["a bad signature among the first t, valid ones after it", (r) => r.unmask(r.all, [[4, r.sigs.get(4) as Uint8Array], [2, r.sigs.get(1) as Uint8Array], [3, r.sigs.get(3) as Uint8Array], [1, r.sigs.get(1) as Uint8Array]]), "invalid signature on party 2's consistency check"],
    ["two signers", (r) => r.unmask(r.all, [[1, r.sigs.get(1) as Uint8Array], [2, r.sigs.get(2) as Uint8Array]]), "consistency: 2 neighbours signed this survivor set, below the threshold 3: the others may have been shown another set"],
  ];
  for (const [what, message, detail] of cases) {
    const r = await run();
    await assert.rejects(r.c1.receive(message(r)), (e: Error) => e instanceof InconsistentSurvivorsError && e instanceof InconsistentSetsError && e.message === detail, what);
    assert.equal(r.c1.phase, Phase.Aborted, what);
  }
  // the honest request: three signers of the set it signed
  const r = await run();
  const shares = decode((await r.c1.receive(r.unmask(r.all, [1, 2, 3].map((p) => [p, r.sigs.get(p) as Uint8Array])))) as Uint8Array);
  assert.equal(shares.type, MsgType.UnmaskShares);
  // t valid ones are the proof: the party verifies the first t and reads no further (a bad fourth signature is not read)
  const late = await run();
  const bad = Uint8Array.from(late.sigs.get(4) as Uint8Array).map((b, i) => (i === 9 ? b ^ 1 : b));
  const withLate = late.unmask(late.all, [...[1, 2, 3].map((p) => [p, late.sigs.get(p) as Uint8Array] as [number, Uint8Array]), [4, bad]]);
  assert.equal(decode((await late.c1.receive(withLate)) as Uint8Array).type, MsgType.UnmaskShares);
});

test("pinned peer identity keys: an identity in the peer keys other than the pinned one is refused; configuration errors are typed", async () => {
  const s = await setup(3, {}, { upTo: "adverts" });
  const pinnedWrong = new Map([[2, (s.ids.get(2) as Ed25519Key).publicBytes], [3, new Uint8Array(32).fill(7)]]);
  const fresh = new ClientSession(s.cfg, 1, ModVector.fromUnsigned([1n, 1n], 16), { randomness: new SeededRandom(utf8("party 1")), identityKey: s.ids.get(1), taskDigest: DIGEST, peerIdentityKeys: pinnedWrong });
  await fresh.start();
  await assert.rejects(fresh.receive(s.peerKeys(1)), (e: Error) => e instanceof SignatureError && e.message === "peer keys: party 3's identity key is not the one expected");
  const pinned = new Map([2, 3].map((p) => [p, (s.ids.get(p) as Ed25519Key).publicBytes]));
  const ok = new ClientSession(s.cfg, 1, ModVector.fromUnsigned([1n, 1n], 16), { randomness: new SeededRandom(utf8("party 1")), identityKey: s.ids.get(1), taskDigest: DIGEST, peerIdentityKeys: pinned });
  await ok.start();
  assert.equal(decode((await ok.receive(s.peerKeys(1))) as Uint8Array).type, MsgType.ShareKeys);

  const cfg = s.cfg;
  const me = s.ids.get(1) as Ed25519Key;
  const vec = ModVector.fromUnsigned([1n, 2n], 16);
  const opts = { randomness: new SeededRandom(utf8("b")) };
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, taskDigest: new Uint8Array(31) }), (e: Error) => e instanceof ConfigError && /task_digest: must be 32 bytes/.test(e.message));
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, minVerified: 2 }), /min_verified: needs identity_key and verify_peers$/);
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, identityKey: me, verifyPeers: false, minVerified: 2 }), /min_verified: needs/);
  assert.throws(() => new ClientSession(cfg, 1, vec, { ...opts, identityKey: me, minVerified: 0 }), /min_verified: must be a positive integer/);
  const active = SecAggConfig.fromDict({ session_id: SID, n: 3, dim: 2, bits: 16, threat_model: "active" });
  assert.throws(() => new ClientSession(active, 1, vec, opts), /identity_key is required in the active threat model/);
});

test("the safety floor at construction: a semi-honest config, or a threshold or degree below the floor → UnsafeParametersError", async () => {
  const me = await Ed25519Key.fromSeed(new Uint8Array(32).fill(1));
  const vec = ModVector.fromUnsigned([1n, 2n], 16);
  const floorAssumptions = new Assumptions();
  const make = (secagg: Record<string, unknown>) => new ClientSession(SecAggConfig.fromDict({ session_id: SID, n: 3, dim: 2, bits: 16, ...secagg }), 1, vec, { randomness: new SeededRandom(utf8("f")), identityKey: me, floorAssumptions });
  assert.throws(() => make({}), (e: Error) => e instanceof UnsafeParametersError && e instanceof ConfigError &&
    e.message === "threat model: semi_honest has no consistency round: the server could show two survivor sets; this device requires the active model");
  assert.throws(() => make({ threat_model: "active", threshold: 2 }), (e: Error) => e instanceof UnsafeParametersError && /^threshold: 2 of a neighbourhood of 3/.test(e.message));
  assert.equal(make({ threat_model: "active" }).phase, Phase.AdvertiseKeys, "the floor's own threshold (3 of 3) is taken");
});
