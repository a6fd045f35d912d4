/** Whole cohorts (tests/vectors/transcript.json): the client, fed the server's messages, produces every client
 * message byte for byte — keys, shares, masks and signatures bound to the case's task digest and members root (the
 * graph drawn from it), identities in every threat model — and its checks refuse what an honest server never sends. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { hex, unhex } from "../src/bytes.js";
import { SeededRandom } from "../src/randomness.js";
import { ClientSession, Phase } from "../src/secagg/client.js";
import { SecAggConfig } from "../src/secagg/config.js";
import { ModVector } from "../src/secagg/encoding.js";
import { DoubleRevealError, InconsistentSetsError, TaskMismatchError, TooFewSurvivorsError } from "../src/secagg/errors.js";
import { ABSENT_LEAF, binding, graphSeed, memberLeaf, membersRoot } from "../src/secagg/crypto.js";
import { MsgType, decode, encode, encodeBitmap } from "../src/secagg/messages.js";
import { Ed25519Key } from "../src/webcrypto.js";
import { vectors } from "./helpers.js";

async function clients(input: any, output: any, minSurvivors?: number): Promise<{ cfg: SecAggConfig; out: Map<number, ClientSession> }> {
  const cfg = SecAggConfig.fromDict(output.config);
  const root = new SeededRandom(unhex(input.seed));
  const parties = Array.from({ length: cfg.n }, (_, i) => i + 1);
  const ids = new Map<number, Ed25519Key>();
  for (const p of parties) ids.set(p, await Ed25519Key.fromSeed(await root.child(`identity/${p}`).bytes(32)));
  const publics = new Map([...ids].map(([p, k]) => [p, k.publicBytes]));
  for (const p of parties) assert.equal(hex(publics.get(p) as Uint8Array), output.party_secrets[String(p)].identity_public);
  const out = new Map<number, ClientSession>();
  for (const p of parties) {
    const input_ = ModVector.fromUnsigned(input.inputs[String(p)].map(BigInt), cfg.bits);
    out.set(p, new ClientSession(cfg, p, input_, {
      randomness: root.child(`party/${p}`), identityKey: ids.get(p), peerIdentityKeys: publics, minSurvivors, taskDigest: unhex(input.task_digest),
    }));
  }
  return { cfg, out };
}

test("transcript: a client port reproduces every client message of whole cohorts", async () => {
  const cases = vectors("transcript").cases;
  assert.ok(cases.some((c) => c.input.degree !== null && c.input.degree < c.input.n - 1), "a sparse cohort among the cases");
  assert.ok(cases.some((c) => c.input.drop_before_advertise_keys.length), "a party absent from the members list among the cases");
  for (const { input, output } of cases) {
    const { cfg, out } = await clients(input, output);
    assert.equal(cfg.shareThreshold, output.share_threshold, input.name);
    const sent: string[] = [];
    const expected: string[] = [];
    for (const p of out.keys()) if (!input.drop_before_advertise_keys.includes(p)) sent.push(hex(await (out.get(p) as ClientSession).start()));
    for (const m of output.messages) {
      if (m.from === "client") expected.push(m.bytes);
      else {
        const c = out.get(m.party) as ClientSession;
        if (m.phase === "masked_input" && input.drop_before_masked_input.includes(m.party)) continue;
        const reply = await c.receive(unhex(m.bytes));
        if (reply) sent.push(hex(reply));
        assert.equal(hex((await c.receive(unhex(m.bytes))) ?? new Uint8Array()), hex(reply ?? new Uint8Array()), "a repeated message gets the same reply");
      }
    }
    assert.deepEqual(sent.sort(), expected.sort(), input.name);
    // the members list the server fixed: its root, and the graph every party draws from it
    const peerKeys = decode(unhex(output.messages.find((m: any) => m.type === "PeerKeys").bytes));
    assert.ok(peerKeys.type === MsgType.PeerKeys);
    const root = await membersRoot(peerKeys.leaves);
    assert.equal(hex(root), output.members_root, input.name);
    for (const p of input.drop_before_advertise_keys) assert.equal(hex(peerKeys.leaves.subarray(16 * (p - 1), 16 * p)), hex(ABSENT_LEAF), "an absent party's leaf");
    const graph = await cfg.neighbourGraph(await graphSeed(binding(cfg.sessionId, unhex(input.task_digest)), root));
    for (const p of out.keys()) assert.deepEqual(graph.closed(p), output.closed_neighbourhoods[String(p)], `${input.name}: party ${p}`);
    // each party verified its own signature and its senders': the neighbours that shared keys
    const shared = new Set(output.messages.filter((m: any) => m.from === "client" && m.type === "ShareKeys").map((m: any) => m.party as number));
    for (const [p, c] of out) {
      if (input.drop_before_masked_input.includes(p) || input.drop_before_advertise_keys.includes(p)) continue;
      assert.equal(c.verifiedMembers, graph.closed(p).filter((v) => shared.has(v)).length, `${input.name}: party ${p}`);
    }
  }
});

test("transcript: a party shown another task refuses its peers' routed shares (TaskMismatchError) before masking", async () => {
  const { input, output } = vectors("transcript").cases[0];
  const { out } = await clients({ ...input, task_digest: "00".repeat(32) }, output);
  for (const c of out.values()) await c.start();
  const c1 = out.get(1) as ClientSession;
  const server = output.messages.filter((m: any) => m.from === "server" && m.party === 1);
  await c1.receive(unhex(server[0].bytes));  // PeerKeys: nothing signed yet
  await assert.rejects(c1.receive(unhex(server[1].bytes)), TaskMismatchError);
  assert.equal(c1.phase, Phase.Aborted);
});

test("transcript: the client's own survivor floor and the set checks refuse a lying server", async () => {
  const { input, output } = vectors("transcript").cases[0];
  const server = output.messages.filter((m: any) => m.from === "server" && m.party === 1 && m.phase !== "unmasking");
  const atMaskedInput = async (minSurvivors?: number) => {
    const { cfg, out } = await clients(input, output, minSurvivors);
    for (const c of out.values()) await c.start();
    const c1 = out.get(1) as ClientSession;
    for (const m of server) await c1.receive(unhex(m.bytes));
    assert.equal(c1.phase, Phase.MaskedInput);
    const unmask = (members: number[]) => encode({ type: MsgType.UnmaskRequest, sessionId: cfg.sessionId, party: 1, survivors: encodeBitmap(members, 3), signatures: [] });
    return { c1, unmask };
  };
  let { c1, unmask } = await atMaskedInput(3);
  await assert.rejects(c1.receive(unmask([1, 2])), TooFewSurvivorsError, "the device's own floor");
  ({ c1, unmask } = await atMaskedInput());
  await assert.rejects(c1.receive(unmask([2, 3])), InconsistentSetsError, "a survivor set without this party");
  ({ c1, unmask } = await atMaskedInput());
  const first = (await c1.receive(unmask([1, 2, 3]))) as Uint8Array;
  assert.equal(decode(first).type, MsgType.UnmaskShares);
  await assert.rejects(c1.receive(unmask([1, 2])), DoubleRevealError, "never both shares of one peer");
});

test("transcript: a peer's keys the server substituted in PeerKeys are refused (TaskMismatchError) before any share is encrypted", async () => {
  const { input, output } = vectors("transcript").cases[0];
  const { out } = await clients(input, output);
  for (const c of out.values()) await c.start();
  const c1 = out.get(1) as ClientSession;
  const peerKeys = decode(unhex(output.messages.find((m: any) => m.from === "server" && m.party === 1).bytes));
  assert.ok(peerKeys.type === MsgType.PeerKeys);
  assert.ok(peerKeys.peers.every((p) => p.signature?.length === 64), "the server relays every party's key signature");
  const swapped = peerKeys.peers.map((p) => (p.party === 2 ? { ...p, sPk: peerKeys.peers.find((q) => q.party === 3)!.cPk.map((b) => b ^ 0x5a) } : p));
  // the entry alone: it is not the one in the members list
  await assert.rejects(c1.receive(encode({ ...peerKeys, peers: swapped })), (exc: unknown) => exc instanceof InconsistentSetsError && exc.message === "peer keys: party 2's entry is not the one in the members list");
  assert.equal(c1.phase, Phase.Aborted);
  // the entry and its leaf (a server that lists its own keys for party 2 to this party): the keys are not signed by
  // party 2's identity
  const { out: again } = await clients(input, output);
  for (const c of again.values()) await c.start();
  const leaves = Uint8Array.from(peerKeys.leaves);
  for (const p of swapped) leaves.set(await memberLeaf(p.party, p.identity, p.cPk, p.sPk), (p.party - 1) * 16);
  const fresh = again.get(1) as ClientSession;
  await assert.rejects(fresh.receive(encode({ ...peerKeys, peers: swapped, leaves })), (exc: unknown) => exc instanceof TaskMismatchError && exc.party === 2 && /not signed by its identity key/.test(exc.message));
  assert.equal(fresh.phase, Phase.Aborted);
});
