/** Key derivation, share transport, signed payloads and the mask PRG (secagg/crypto.py) on WebCrypto.
 *
 * The *binding* is the 16-byte session id followed by the 32-byte task digest (taskDigest.ts: what the device was
 * asked to compute, hashed by the device itself). It replaces the bare session id in every derived key (channel,
 * pairwise mask, self mask), in the shares' associated data and in every signed payload, so two devices shown
 * different tasks derive keys that do not match and sign payloads that do not verify for each other. From the share
 * keys on it also carries the *members root* (`membersRoot`: every member's party, identity and advertised keys, as the
 * server fixed them when it closed phase 0), which also seeds the neighbour graph (`graphSeed`): devices shown
 * different member lists derive different keys, and the graph follows from keys the server could not know in
 * advance. */

import { concat, u32be, utf8 } from "../bytes.js";
import { AuthenticationError, aesKey, ctrKeystream, gcmOpen, gcmSeal, hkdf, sha256 } from "../webcrypto.js";
import { DecryptionError } from "./errors.js";
import { DOMAIN, graphSeed } from "./graph.js";
import { ModVector } from "./encoding.js";

export { DOMAIN, graphSeed };

export const TASK_DIGEST_BYTES = 32;
/** The task digest of a session that binds no task (protocol tests and benchmarks outside the service). */
export const NO_TASK = new Uint8Array(TASK_DIGEST_BYTES);

/** What every derived key, associated data and signature of a session is bound to: session id ‖ task digest. */
export function binding(sessionId: Uint8Array, taskDigest: Uint8Array = NO_TASK): Uint8Array {
  if (taskDigest.length !== TASK_DIGEST_BYTES) throw new RangeError(`task_digest: must be ${TASK_DIGEST_BYTES} bytes, got ${taskDigest.length}`);
  return concat(sessionId, taskDigest);
}

/** A member leaf is SHA-256 truncated to 128 bits: a server would need a second preimage of an honest member's leaf to
 * show another entry in its place. */
export const MEMBER_LEAF_BYTES = 16;
/** The leaf of a party that did not advertise keys in phase 0. */
export const ABSENT_LEAF = new Uint8Array(MEMBER_LEAF_BYTES);
/** The identity key in member leaves and peer entries of a session without identities. */
export const NO_IDENTITY = new Uint8Array(32);

/** One member of the members list: SHA-256(DOMAIN ‖ "member/" ‖ u32 party ‖ identity ‖ c_pk ‖ s_pk), first 16 bytes. */
export async function memberLeaf(party: number, identity: Uint8Array, cPk: Uint8Array, sPk: Uint8Array): Promise<Uint8Array> {
  return (await sha256(concat(DOMAIN, utf8("member/"), u32be(party), identity, cPk, sPk))).slice(0, MEMBER_LEAF_BYTES);
}

/** The members root over the leaves of parties 1..n, in order: SHA-256(DOMAIN ‖ "members/" ‖ u32 count ‖ leaves). */
export async function membersRoot(leaves: Uint8Array): Promise<Uint8Array> {
  if (leaves.length % MEMBER_LEAF_BYTES) throw new RangeError(`leaves: a multiple of ${MEMBER_LEAF_BYTES} bytes, got ${leaves.length}`);
  return sha256(concat(DOMAIN, utf8("members/"), u32be(leaves.length / MEMBER_LEAF_BYTES), leaves));
}

/** The binding of everything after phase 0: session id ‖ task digest ‖ members root. */
export function roundBinding(bind: Uint8Array, root: Uint8Array): Uint8Array {
  if (root.length !== 32) throw new RangeError(`root: must be 32 bytes, got ${root.length}`);
  return concat(bind, root);
}

function pairInfo(purpose: string, bind: Uint8Array, u: number, v: number): Uint8Array {
  const [lo, hi] = u < v ? [u, v] : [v, u];
  return concat(DOMAIN, utf8(purpose + "/"), bind, u32be(lo), u32be(hi));
}

export const channelKey = (shared: Uint8Array, bind: Uint8Array, u: number, v: number): Promise<Uint8Array> =>
  hkdf(shared, pairInfo("channel", bind, u, v));
export const pairMaskKey = (shared: Uint8Array, bind: Uint8Array, u: number, v: number): Promise<Uint8Array> =>
  hkdf(shared, pairInfo("pairmask", bind, u, v));
export const selfMaskKey = (seed: Uint8Array, bind: Uint8Array, u: number): Promise<Uint8Array> =>
  hkdf(seed, concat(DOMAIN, utf8("selfmask/"), bind, u32be(u)));

export const shareAad = (bind: Uint8Array, sender: number, receiver: number): Uint8Array =>
  concat(DOMAIN, utf8("share/"), bind, u32be(sender), u32be(receiver));

/** 'shr0' ‖ sender ‖ 4 zero bytes: each channel key carries one message per direction. */
export const shareNonce = (sender: number): Uint8Array => concat(utf8("shr0"), u32be(sender), new Uint8Array(4));

export const sealShare = (key: Uint8Array, bind: Uint8Array, s: number, r: number, pt: Uint8Array): Promise<Uint8Array> =>
  gcmSeal(key, shareNonce(s), pt, shareAad(bind, s, r));

export async function openShare(key: Uint8Array, bind: Uint8Array, s: number, r: number, ct: Uint8Array): Promise<Uint8Array> {
  try {
    return await gcmOpen(key, shareNonce(s), ct, shareAad(bind, s, r));
  } catch (exc) {
    if (exc instanceof AuthenticationError) throw new DecryptionError(`share ciphertext from party ${s} failed authentication`);
    throw exc;
  }
}

/** What a party signs when it advertises its fresh keys (with its check-in or in phase 0): that they are its own.
 * Session-free, so it can be made before the party is seated; a peer checks it before encrypting any share to the
 * keys (the server cannot slip keys of its own into a neighbourhood). */
export const keysPayload = (cPk: Uint8Array, sPk: Uint8Array): Uint8Array => concat(DOMAIN, utf8("keys/"), cPk, sPk);

/** What a party signs with its identity key: (session, task digest, party, its two public keys). */
export const advertisePayload = (bind: Uint8Array, party: number, cPk: Uint8Array, sPk: Uint8Array): Uint8Array =>
  concat(DOMAIN, utf8("advertise/"), bind, u32be(party), cPk, sPk);
/** What a party signs in the active model's consistency check: (session, task digest, the survivor bitmap). */
export const consistencyPayload = (bind: Uint8Array, bitmap: Uint8Array): Uint8Array => concat(DOMAIN, utf8("consistency/"), bind, bitmap);

/** The mask for `key`: AES-256-CTR keystream (zero IV) as little-endian uint32 (bits ≤ 32) or uint64 words. */
export async function expandMask(key: Uint8Array, dim: number, bits: number): Promise<ModVector> {
  const width = bits <= 32 ? 4 : 8;
  const ks = await ctrKeystream(await aesKey(key, "AES-CTR"), 0n, dim * width);
  return ModVector.fromKeystream(ks, dim, bits);
}
