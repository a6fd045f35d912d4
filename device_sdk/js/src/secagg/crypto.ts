/** Key derivation, share transport and the mask PRG (secagg/crypto.py) on WebCrypto. */

import { concat, u32be, utf8 } from "../bytes.js";
import { AuthenticationError, aesKey, ctrKeystream, gcmOpen, gcmSeal, hkdf } from "../webcrypto.js";
import { DecryptionError } from "./errors.js";
import { DOMAIN } from "./graph.js";
import { ModVector } from "./encoding.js";

export { DOMAIN };

function pairInfo(purpose: string, sessionId: Uint8Array, u: number, v: number): Uint8Array {
  const [lo, hi] = u < v ? [u, v] : [v, u];
  return concat(DOMAIN, utf8(purpose + "/"), sessionId, u32be(lo), u32be(hi));
}

export const channelKey = (shared: Uint8Array, sid: Uint8Array, u: number, v: number): Promise<Uint8Array> =>
  hkdf(shared, pairInfo("channel", sid, u, v));
export const pairMaskKey = (shared: Uint8Array, sid: Uint8Array, u: number, v: number): Promise<Uint8Array> =>
  hkdf(shared, pairInfo("pairmask", sid, u, v));
export const selfMaskKey = (seed: Uint8Array, sid: Uint8Array, u: number): Promise<Uint8Array> =>
  hkdf(seed, concat(DOMAIN, utf8("selfmask/"), sid, u32be(u)));

export const shareAad = (sid: Uint8Array, sender: number, receiver: number): Uint8Array =>
  concat(DOMAIN, utf8("share/"), sid, u32be(sender), u32be(receiver));

/** 'shr0' ‖ sender ‖ 4 zero bytes: each channel key carries one message per direction. */
export const shareNonce = (sender: number): Uint8Array => concat(utf8("shr0"), u32be(sender), new Uint8Array(4));

export const sealShare = (key: Uint8Array, sid: Uint8Array, s: number, r: number, pt: Uint8Array): Promise<Uint8Array> =>
  gcmSeal(key, shareNonce(s), pt, shareAad(sid, s, r));

export async function openShare(key: Uint8Array, sid: Uint8Array, s: number, r: number, ct: Uint8Array): Promise<Uint8Array> {
  try {
    return await gcmOpen(key, shareNonce(s), ct, shareAad(sid, s, r));
  } catch (exc) {
    if (exc instanceof AuthenticationError) throw new DecryptionError(`share ciphertext from party ${s} failed authentication`);
    throw exc;
  }
}

export const advertisePayload = (sid: Uint8Array, party: number, cPk: Uint8Array, sPk: Uint8Array): Uint8Array =>
  concat(DOMAIN, utf8("advertise/"), sid, u32be(party), cPk, sPk);
export const consistencyPayload = (sid: Uint8Array, bitmap: Uint8Array): Uint8Array => concat(DOMAIN, utf8("consistency/"), sid, bitmap);

/** The mask for `key`: AES-256-CTR keystream (zero IV) as little-endian uint32 (bits ≤ 32) or uint64 words. */
export async function expandMask(key: Uint8Array, dim: number, bits: number): Promise<ModVector> {
  const width = bits <= 32 ? 4 : 8;
  const ks = await ctrKeystream(await aesKey(key, "AES-CTR"), 0n, dim * width);
  return ModVector.fromKeystream(ks, dim, bits);
}
