/** Known-answer vectors, byte for byte: randomness, key agreement, PRG, neighbour graph, share encryption, Shamir,
 * messages, request signing, signed payloads, the members list (tests/vectors, docs/vectors.md; device protocol 3: the
 * graph seeded by the members root, every key, associated data and signature after phase 0 bound to session id ‖ task
 * digest ‖ members root). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { b64encode, bigFromBE, concat, hex, u32be, unhex, utf8 } from "../src/bytes.js";
import { deviceIdFor, HDR_NONCE, HDR_PROTOCOL, HDR_SIGNATURE, HDR_TIMESTAMP, PROTOCOL_VERSION, signingPayload } from "../src/envelope.js";
import { RandomSource, SeededRandom, keyedStream, random, randbelow, sample, uint64s } from "../src/randomness.js";
import * as sc from "../src/secagg/crypto.js";
import { ModVector, pack } from "../src/secagg/encoding.js";
import { NeighbourGraph, graphSeed, prgUint64 } from "../src/secagg/graph.js";
import { Message, MsgType, TOKEN_BYTES, VERSION, decode, encode, encodeBitmap } from "../src/secagg/messages.js";
import * as shamir from "../src/secagg/shamir.js";
import { Ed25519Key, X25519Key, ed25519Verify } from "../src/webcrypto.js";
import { vectors } from "./helpers.js";

test("randomness: SeededRandom, children and the helpers' byte consumption", async () => {
  for (const { input, output } of vectors("randomness").cases) {
    let src: RandomSource = new SeededRandom(unhex(input.seed));
    for (const label of input.child_path) src = src.child(label);
    const results: unknown[] = [];
    for (const [op, ...args] of input.draws) {
      if (op === "bytes") results.push(hex(await src.bytes(args[0])));
      else if (op === "randbelow") results.push(String(await randbelow(src, BigInt(args[0]))));
      else if (op === "random") results.push(await random(src));
      else if (op === "sample") results.push(await sample(src, Array.from({ length: args[0] }, (_, i) => i), args[1]));
      else if (op === "uint64s") results.push((await uint64s(src, args[0])).map(String));
      else if (op === "keyed_stream_bytes") results.push(hex(await keyedStream(src).bytes(args[0])));
      else throw new Error(op);
    }
    assert.deepEqual(results, output.results);
  }
});

test("randomness: reads split differently give the same stream", async () => {
  const a = new SeededRandom(utf8("split"));
  const b = new SeededRandom(utf8("split"));
  const whole = await a.bytes(5000);
  const parts = concat(await b.bytes(1), await b.bytes(4095), await b.bytes(3), await b.bytes(901));
  assert.equal(hex(parts), hex(whole));
});

test("the vectors are pinned to device protocol 3: the secagg wire version and the HKDF domain", () => {
  assert.equal(VERSION, 3);
  assert.equal(PROTOCOL_VERSION, 3);
  for (const topic of ["key_agreement", "messages", "transcript", "signed_payloads", "members", "neighbour_graph", "safety_floor"]) {
    const v = vectors(topic).versions as Record<string, unknown>;
    assert.equal(v.secagg_wire, VERSION, topic);
    assert.equal(v.secagg_hkdf_domain, new TextDecoder().decode(sc.DOMAIN), topic);
  }
});

test("key agreement and key derivation", async () => {
  for (const { input, output } of vectors("key_agreement").cases) {
    const a = await X25519Key.fromPrivate(unhex(input.a_private));
    const b = await X25519Key.fromPrivate(unhex(input.b_private));
    assert.equal(hex(a.publicBytes), output.a_public);
    assert.equal(hex(b.publicBytes), output.b_public);
    const shared = await a.agree(b.publicBytes);
    assert.equal(hex(shared), output.shared_secret);
    assert.equal(hex(await b.agree(a.publicBytes)), output.shared_secret);
    const sid = unhex(input.session_id);
    const bind = sc.binding(sid, unhex(input.task_digest));
    assert.equal(hex(bind), output.binding);
    const root = unhex(input.members_root);
    const rbind = sc.roundBinding(bind, root);
    assert.equal(hex(rbind), output.round_binding);
    assert.equal(hex(concat(sc.DOMAIN, utf8("graph/"), bind)), output.graph_seed_info);
    assert.equal(hex(await graphSeed(bind, root)), output.graph_seed, "the graph seed: the binding and the members root");
    const [u, v] = [input.a_party, input.b_party];
    const [lo, hi] = u < v ? [u, v] : [v, u];
    assert.equal(hex(concat(sc.DOMAIN, utf8("channel/"), rbind, u32be(lo), u32be(hi))), output.channel_info);
    assert.equal(hex(concat(sc.DOMAIN, utf8("pairmask/"), rbind, u32be(lo), u32be(hi))), output.pairmask_info);
    assert.equal(hex(await sc.channelKey(shared, rbind, u, v)), output.channel_key);
    assert.equal(hex(await sc.pairMaskKey(shared, rbind, u, v)), output.pairmask_key);
    assert.equal(hex(await sc.pairMaskKey(shared, rbind, v, u)), output.pairmask_key);
    assert.equal(hex(await sc.selfMaskKey(unhex(input.self_mask_seed), rbind, u)), output.selfmask_key);
    assert.equal(hex(concat(sc.DOMAIN, utf8("selfmask/"), rbind, u32be(u))), output.selfmask_info);
    assert.throws(() => sc.roundBinding(bind, root.subarray(1)), /root: must be 32 bytes, got 31/);
  }
});

test("a low-order peer key is refused", async () => {
  const a = await X25519Key.fromPrivate(new Uint8Array(32).fill(7));
  await assert.rejects(a.agree(new Uint8Array(32)), /unusable peer public key/);
});

test("mask PRG: keystream, words and their reduction", async () => {
  for (const { input, output } of vectors("prg").cases) {
    const { dim, bits } = input;
    const words = await sc.expandMask(unhex(input.key), dim, bits);
    const expectWords = output.words.map((w: string | number) => BigInt(w));
    assert.deepEqual(Array.from({ length: dim }, (_, i) => words.get(i)), expectWords, `key ${input.key} bits ${bits}`);
    words.mask();
    assert.deepEqual(Array.from({ length: dim }, (_, i) => words.get(i)), output.mask_mod_2_bits.map((w: string | number) => BigInt(w)));
    assert.equal(output.work_type, bits <= 32 ? "uint32" : "uint64");
  }
});

test("neighbour graph: seed, words, ring order and neighbourhoods", async () => {
  for (const { input, output } of vectors("neighbour_graph").cases) {
    const bind = sc.binding(unhex(input.session_id), unhex(input.task_digest));
    assert.equal(hex(bind), output.binding);
    const seed = await graphSeed(bind, unhex(input.members_root));
    assert.equal(hex(seed), output.graph_seed);
    assert.deepEqual((await prgUint64(seed, input.n)).map(String), output.prg_uint64);
    const g = await NeighbourGraph.create(input.n, input.degree, seed);
    assert.deepEqual(g.ringOrder(), output.ring_order);
    for (const p of input.parties) assert.deepEqual(g.closed(p), output.closed_neighbourhoods[String(p)]);
  }
});

test("share encryption: nonce, associated data and AES-GCM ciphertext", async () => {
  for (const { input, output } of vectors("share_encryption").cases) {
    const sid = unhex(input.session_id);
    const bind = sc.roundBinding(sc.binding(sid, unhex(input.task_digest)), unhex(input.members_root));
    assert.equal(hex(sc.shareNonce(input.sender)), output.nonce);
    assert.equal(hex(sc.shareAad(bind, input.sender, input.receiver)), output.associated_data);
    const ct = await sc.sealShare(unhex(input.key), bind, input.sender, input.receiver, unhex(input.plaintext));
    assert.equal(hex(ct), output.ciphertext);
    assert.equal(hex(await sc.openShare(unhex(input.key), bind, input.sender, input.receiver, ct)), input.plaintext);
    const bad = Uint8Array.from(ct);
    bad[0] ^= 1;
    await assert.rejects(sc.openShare(unhex(input.key), bind, input.sender, input.receiver, bad), /failed authentication/);
    const otherTask = sc.roundBinding(sc.binding(sid, new Uint8Array(32).fill(0xaa)), unhex(input.members_root));
    await assert.rejects(sc.openShare(unhex(input.key), otherTask, input.sender, input.receiver, ct), /failed authentication/, "bound to the task");
    const otherRoot = sc.roundBinding(sc.binding(sid, unhex(input.task_digest)), new Uint8Array(32).fill(0xbb));
    await assert.rejects(sc.openShare(unhex(input.key), otherRoot, input.sender, input.receiver, ct), /failed authentication/, "bound to the members root");
  }
});

test("Shamir: coefficients, shares, Lagrange coefficients and reconstruction", async () => {
  for (const { input, output } of vectors("shamir").cases) {
    assert.equal(String(shamir.PRIME), output.prime);
    const coeffSrc = new SeededRandom(unhex(input.seed));
    const coeffs = [];
    for (let i = 0; i < input.threshold - 1; i++) coeffs.push(hex(shamir.toBytes(await randbelow(coeffSrc, shamir.PRIME))));
    assert.deepEqual(coeffs, output.coefficients);
    const shares = await shamir.split(bigFromBE(unhex(input.secret)), input.xs, input.threshold, new SeededRandom(unhex(input.seed)));
    const got: Record<string, string> = {};
    for (const [x, s] of shares) got[String(x)] = hex(shamir.toBytes(s));
    assert.deepEqual(got, output.shares);
    assert.deepEqual(shamir.lagrangeAtZero(input.reconstruct_from).map(String), output.lagrange_at_zero);
    const subset = new Map(input.reconstruct_from.map((x: number) => [x, shares.get(x) as bigint]));
    assert.equal(hex(shamir.toBytes(shamir.reconstruct(subset as Map<number, bigint>)).subarray(1)), output.reconstructed);
  }
});

const cts = (pairs: [number, string][]): [number, Uint8Array][] => pairs.map(([v, ct]) => [v, unhex(ct)]);

function build(input: any): Message {
  const h = { sessionId: unhex(input.session_id), party: input.party };
  const f = input.fields;
  const vec = (values: (number | string)[], bits: number) => {
    const v = new ModVector(values.length, bits);
    values.forEach((x, i) => {
      const b = BigInt(x);
      v.lo[i] = Number(b & 0xffffffffn);
      v.hi[i] = Number(b >> 32n);
    });
    return pack(v);
  };
  switch (input.type) {
    case "AdvertiseKeys":
      return { ...h, type: MsgType.AdvertiseKeys, cPk: unhex(f.c_pk), sPk: unhex(f.s_pk), signature: unhex(f.signature ?? "") };
    case "PeerKeys":
      return {
        ...h, type: MsgType.PeerKeys,
        peers: f.peers.map((p: any) => ({ party: p.party, identity: unhex(p.identity), cPk: unhex(p.c_pk), sPk: unhex(p.s_pk), signature: unhex(p.signature ?? ""), token: unhex(p.token ?? "") })),
        leaves: concat(...(f.leaves as string[]).map((leaf) => unhex(leaf))),
      };
    case "ShareKeys":
      return { ...h, type: MsgType.ShareKeys, ciphertexts: cts(f.ciphertexts), signature: unhex(f.signature), membersWanted: f.members_wanted };
    case "RoutedShares":
      return {
        ...h, type: MsgType.RoutedShares, ciphertexts: cts(f.ciphertexts),
        members: f.members.map((e: any) => ({ party: e.party, identity: unhex(e.identity), cPk: unhex(e.c_pk), sPk: unhex(e.s_pk), signature: unhex(e.signature) })),
        // the optional identity-token section (docs/identities.md), when the vector has one
        ...(f.member_tokens != null ? { memberTokens: f.member_tokens.map((x: string) => unhex(x)) } : {}),
      };
    case "MaskedInput":
      return { ...h, type: MsgType.MaskedInput, bits: f.bits, dim: f.values.length, packed: vec(f.values, f.bits) };
    case "MaskedInputProved":
      return { ...h, type: MsgType.MaskedInputProved, bits: f.bits, dim: f.values.length, packed: vec(f.values, f.bits), proof: unhex(f.proof) };
    case "ConsistencyRequest":
      return { ...h, type: MsgType.ConsistencyRequest, survivors: encodeBitmap(f.survivors.members, f.survivors.n) };
    case "ConsistencySignature":
      return { ...h, type: MsgType.ConsistencySignature, signature: unhex(f.signature) };
    case "UnmaskRequest":
      return { ...h, type: MsgType.UnmaskRequest, survivors: encodeBitmap(f.survivors.members, f.survivors.n), signatures: f.signatures.map(([p, s]: [number, string]) => [p, unhex(s)]) };
    case "UnmaskShares":
      return { ...h, type: MsgType.UnmaskShares, shares: f.shares.map(([v, k, s]: [number, number, string]) => [v, k, unhex(s)]) };
  }
  throw new Error(input.type);
}

test("messages: every wire message byte for byte, and decoding round-trips", async () => {
  for (const { input, output } of vectors("messages").cases) {
    const msg = build(input);
    const bytes = encode(msg);
    assert.equal(hex(bytes), output.bytes, input.type);
    assert.equal(bytes[3], output.type_code);
    assert.equal(hex(bytes.subarray(0, 24)), output.header);
    if ("packed" in output) assert.equal(hex((msg as { packed: Uint8Array }).packed), output.packed);
    assert.equal(hex(encode(decode(bytes))), output.bytes);
    if (input.type !== "MaskedInput") {
      assert.throws(() => decode(concat(bytes, Uint8Array.of(0))), /trailing bytes|truncated/);
      assert.throws(() => decode(bytes.subarray(0, bytes.length - 1)));
    }
  }
});

test("request signing: payload, signature, device id and headers", async () => {
  for (const { input, output } of vectors("request_signing").cases) {
    const key = await Ed25519Key.fromSeed(unhex(input.private_key));
    assert.equal(hex(key.publicBytes), output.public_key);
    assert.equal(b64encode(key.publicBytes), output.public_key_base64);
    assert.equal(await deviceIdFor(key.publicBytes), output.device_id);
    const payload = await signingPayload(input.method, input.path_qs, input.timestamp, input.nonce, unhex(input.body));
    assert.equal(hex(payload), output.payload);
    assert.equal(new TextDecoder().decode(payload), output.payload_text);
    const sig = await key.sign(payload);
    assert.equal(hex(sig), output.signature);
    assert.deepEqual(
      { [HDR_PROTOCOL]: String(PROTOCOL_VERSION), [HDR_TIMESTAMP]: input.timestamp, [HDR_NONCE]: input.nonce, [HDR_SIGNATURE]: b64encode(sig) },
      output.headers,
    );
  }
});

test("messages: protocol 3's length checks (members_wanted, fixed entries, tokens, leaves, no senders' signatures)", () => {
  const sid = unhex("c0c1c2c3c4c5c6c7c8c9cacbcccdcecf");
  const ct = new Uint8Array(90);
  const routed = encode({ type: MsgType.RoutedShares, sessionId: sid, party: 2, ciphertexts: [[1, ct], [3, ct]], members: [] });
  assert.equal(decode(routed).type, MsgType.RoutedShares);
  // the unreleased layout that carried the senders' signatures (a count and a blob per ciphertext before the member
  // entries) is refused, not misparsed: 68 bytes per signature cannot hold 164-byte member entries
  for (let senders = 1; senders <= 8; senders++) {
    const pairs = Array.from({ length: senders }, (_, i) => [i + 2, ct] as [number, Uint8Array]);
    const bare = encode({ type: MsgType.RoutedShares, sessionId: sid, party: 1, ciphertexts: pairs, members: [] });
    const old = concat(bare.subarray(0, bare.length - 4), u32be(senders), ...pairs.flatMap(() => [u32be(64), new Uint8Array(64)]), u32be(0));
    assert.throws(() => decode(old), /members: count \d+ exceeds the message length/);
  }
  // a signature blob that is neither empty nor 64 bytes
  const odd = encode({ type: MsgType.ShareKeys, sessionId: sid, party: 1, ciphertexts: [], signature: new Uint8Array(63), membersWanted: 0 });
  assert.throws(() => decode(odd), /signature: must be empty or 64 bytes/);
  const many = encode({ type: MsgType.ShareKeys, sessionId: sid, party: 1, ciphertexts: [], signature: new Uint8Array(), membersWanted: 0 });
  many.set(u32be((1 << 20) + 1), 24 + 4);
  assert.throws(() => decode(many), /members_wanted: 1048577 exceeds 1048576/);
  assert.throws(() => encode({ type: MsgType.AdvertiseKeys, sessionId: sid, party: 1, cPk: new Uint8Array(31), sPk: new Uint8Array(32) }), /c_pk: expected 32 bytes/);
  // key signatures (AdvertiseKeys, PeerKeys entries): empty or 64 bytes, anything else a format error
  const k = (b: number) => new Uint8Array(32).fill(b);
  const advert = encode({ type: MsgType.AdvertiseKeys, sessionId: sid, party: 1, cPk: k(1), sPk: k(2), signature: new Uint8Array(64) });
  assert.equal(advert.length, 24 + 64 + 4 + 64);
  const oddAdvert = concat(advert.subarray(0, 24 + 64), u32be(63), new Uint8Array(63));
  assert.throws(() => decode(oddAdvert), /signature: must be empty or 64 bytes/);
  const peerHead = encode({ type: MsgType.PeerKeys, sessionId: sid, party: 1, peers: [], leaves: new Uint8Array(0) }).subarray(0, 24);
  // an entry: u32 party ‖ identity ‖ c_pk ‖ s_pk ‖ u32 signature length ‖ signature ‖ u32 token length ‖ token; then
  // u32 leaf count ‖ leaves
  const peerKeys = (sigs: number[], tokens: number[] = sigs.map(() => 0), leaves = 0) => concat(peerHead, u32be(sigs.length),
    ...sigs.flatMap((n, i) => [u32be(i + 1), k(3 * i + 3), k(3 * i + 1), k(3 * i + 2), u32be(n), new Uint8Array(n), u32be(tokens[i]), new Uint8Array(tokens[i])]),
    u32be(leaves), new Uint8Array(16 * leaves));
  const mixed = decode(peerKeys([64, 0], [TOKEN_BYTES, 0], 2));
  assert.ok(mixed.type === MsgType.PeerKeys && mixed.peers[0].signature?.length === 64 && mixed.peers[1].signature?.length === 0);
  assert.ok(mixed.peers[0].token?.length === TOKEN_BYTES && mixed.peers[1].token?.length === 0 && mixed.leaves.length === 32);
  assert.deepEqual(mixed.peers[1].identity, k(6));
  assert.throws(() => decode(peerKeys([64, 32])), /signature: must be empty or 64 bytes/);
  assert.throws(() => decode(peerKeys([65])), /signature: must be empty or 64 bytes/);
  assert.throws(() => decode(peerKeys([64], [TOKEN_BYTES - 1])), /token: must be empty or 354 bytes/);
  assert.throws(() => decode(peerKeys([64]).subarray(0, 24 + 4 + 104 + 64 + 4)), /leaves: truncated message/);
  assert.throws(() => encode({ type: MsgType.PeerKeys, sessionId: sid, party: 1, peers: [{ party: 1, identity: k(3), cPk: k(1), sPk: k(2), signature: new Uint8Array(10) }], leaves: new Uint8Array(0) }), /signature: must be empty or 64 bytes/);
  assert.throws(() => encode({ type: MsgType.PeerKeys, sessionId: sid, party: 1, peers: [{ party: 1, identity: k(3).subarray(1), cPk: k(1), sPk: k(2) }], leaves: new Uint8Array(0) }), /identity: expected 32 bytes/);
  // a member count beyond the bytes present
  const head = encode({ type: MsgType.RoutedShares, sessionId: sid, party: 2, ciphertexts: [], members: [] });
  head.set(u32be(1), head.length - 4);
  assert.throws(() => decode(head), /members: count 1 exceeds the message length/);
});

test("signed payloads: the keys, advertise and consistency payloads, their deterministic signatures, refused under another binding", async () => {
  for (const { input, output } of vectors("signed_payloads").cases) {
    const key = await Ed25519Key.fromSeed(unhex(input.identity_private));
    assert.equal(hex(key.publicBytes), output.public_key);
    const plain = sc.binding(unhex(input.session_id), unhex(input.task_digest));
    assert.equal(hex(plain), output.binding);
    const bind = sc.roundBinding(plain, unhex(input.members_root));
    assert.equal(hex(bind), output.round_binding);
    const keys = sc.keysPayload(unhex(input.c_pk), unhex(input.s_pk));
    assert.equal(hex(keys), output.keys_payload);
    assert.equal(hex(await key.sign(keys)), output.keys_signature);
    assert.ok(await ed25519Verify(key.publicBytes, unhex(output.keys_signature), keys));
    const otherKeys = unhex(input.s_pk);
    otherKeys[0] ^= 1;
    assert.ok(!(await ed25519Verify(key.publicBytes, unhex(output.keys_signature), sc.keysPayload(unhex(input.c_pk), otherKeys))), "other keys");
    const advert = sc.advertisePayload(bind, input.party, unhex(input.c_pk), unhex(input.s_pk));
    assert.equal(hex(advert), output.advertise_payload);
    assert.equal(hex(await key.sign(advert)), output.advertise_signature);
    const bitmap = encodeBitmap(input.survivors.members, input.survivors.n);
    assert.equal(hex(bitmap), output.survivors_bitmap);
    const consistency = sc.consistencyPayload(bind, bitmap);
    assert.equal(hex(consistency), output.consistency_payload);
    assert.equal(hex(await key.sign(consistency)), output.consistency_signature);
    assert.ok(await ed25519Verify(key.publicBytes, unhex(output.advertise_signature), advert));
    assert.ok(await ed25519Verify(key.publicBytes, unhex(output.consistency_signature), consistency));
    const digest = unhex(input.task_digest);
    digest[31] ^= 1;
    const other = sc.roundBinding(sc.binding(unhex(input.session_id), digest), unhex(input.members_root));
    assert.ok(!(await ed25519Verify(key.publicBytes, unhex(output.advertise_signature), sc.advertisePayload(other, input.party, unhex(input.c_pk), unhex(input.s_pk)))), "another task");
    assert.ok(!(await ed25519Verify(key.publicBytes, unhex(output.consistency_signature), sc.consistencyPayload(other, bitmap))), "another task");
    assert.ok(!(await ed25519Verify(key.publicBytes, unhex(output.advertise_signature), sc.advertisePayload(plain, input.party, unhex(input.c_pk), unhex(input.s_pk)))), "without the members root");
  }
});
