/** Identity tokens: an issuer's unlinkable vouching for one device identity key (docs/identities.md; the port of
 * secagg/identity_token.py, byte for byte and with the same error messages).
 *
 * A Privacy Pass token of type 2 (RFC 9577 §2.2, RFC 9578) whose challenge is the device's Ed25519 identity key:
 *
 *     token_input = token_type (u16, 0x0002) ‖ nonce (32) ‖ challenge_digest (32) ‖ token_key_id (32)
 *     challenge_digest = SHA-256("fa-identity-token/v1/" ‖ identity public key)
 *     token_key_id = SHA-256(the issuer key's SubjectPublicKeyInfo DER)
 *     token = token_input ‖ authenticator (256 bytes: RSABSSA-SHA384-PSS-Deterministic signature of token_input)
 *
 * The blind RSA steps (RFC 9474) are `@cloudflare/blindrsa-ts`'s RSABSSA-SHA384-PSS-Deterministic suite; tokens are
 * verified with WebCrypto's RSA-PSS (SHA-384, MGF1-SHA-384, 48-byte salt). The token's nonce comes from the device's
 * injectable random source; the PSS salt and the blinding factor are drawn by the library from
 * `crypto.getRandomValues` (they must be fresh OS entropy: they are what keeps the issuer from linking a token to its
 * request). */

import { RSABSSA } from "@cloudflare/blindrsa-ts";

import { concat, equalBytes, hex, u16be, utf8 } from "./bytes.js";
import { OsRandom, RandomSource } from "./randomness.js";
import { sha256 } from "./webcrypto.js";

export const TOKEN_TYPE = 0x0002;
export const CHALLENGE_DOMAIN = utf8("fa-identity-token/v1/");
export const NONCE_BYTES = 32;
export const KEY_ID_BYTES = 32;
export const MODULUS_BITS = 2048;
export const AUTHENTICATOR_BYTES = MODULUS_BITS / 8;
export const INPUT_BYTES = 2 + NONCE_BYTES + 32 + KEY_ID_BYTES;
export const TOKEN_BYTES = INPUT_BYTES + AUTHENTICATOR_BYTES;

const RSA_PSS = { name: "RSA-PSS", hash: "SHA-384" } as const;
const PSS_PARAMS = { name: "RSA-PSS", saltLength: 48 } as const;

/** A token that is malformed or does not vouch for the identity it is presented with (or an issuer key / answer that
 * cannot make one). */
export class TokenError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenError";
  }
}

/** The suite of RFC 9474 identity tokens use (one instance: it holds no state). */
export const suite = RSABSSA.SHA384.PSS.Deterministic();

const buf = (b: Uint8Array): ArrayBuffer => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;

export interface IdentityToken {
  nonce: Uint8Array;
  challenge: Uint8Array;
  tokenKeyId: Uint8Array;
  authenticator: Uint8Array;
}

/** A pinned (or issuing) RSA key: its WebCrypto key, its SubjectPublicKeyInfo DER and its token_key_id. */
export interface IssuerKey {
  key: CryptoKey;
  spki: Uint8Array;
  keyId: Uint8Array;
}

/** `verifyToken`'s keys: token_key_id (hex) → issuer key. */
export type TrustedKeys = ReadonlyMap<string, IssuerKey>;

export function tokenInput(t: Pick<IdentityToken, "nonce" | "challenge" | "tokenKeyId">): Uint8Array {
  return concat(u16be(TOKEN_TYPE), t.nonce, t.challenge, t.tokenKeyId);
}

export function encodeToken(t: IdentityToken): Uint8Array {
  return concat(tokenInput(t), t.authenticator);
}

export function decodeToken(raw: Uint8Array): IdentityToken {
  if (!(raw instanceof Uint8Array)) throw new TokenError("an identity token is bytes");
  if (raw.length !== TOKEN_BYTES) throw new TokenError(`an identity token is ${TOKEN_BYTES} bytes, got ${raw.length}`);
  const type = (raw[0] << 8) | raw[1];
  if (type !== TOKEN_TYPE) throw new TokenError(`token_type must be ${TOKEN_TYPE}, got ${type}`);
  const at = 2;
  return {
    nonce: raw.slice(at, at + NONCE_BYTES),
    challenge: raw.slice(at + NONCE_BYTES, at + NONCE_BYTES + 32),
    tokenKeyId: raw.slice(at + NONCE_BYTES + 32, INPUT_BYTES),
    authenticator: raw.slice(INPUT_BYTES),
  };
}

/** The 32-byte id tokens carry for the issuer key (SubjectPublicKeyInfo DER) that signed them. */
export function keyId(spki: Uint8Array): Promise<Uint8Array> {
  return sha256(spki);
}

export async function challengeDigest(identityKey: Uint8Array): Promise<Uint8Array> {
  if (identityKey.length !== 32) throw new TokenError(`an identity key is 32 bytes (Ed25519), got ${identityKey.length}`);
  return sha256(concat(CHALLENGE_DOMAIN, identityKey));
}

/** An issuer's RSA public key from its SubjectPublicKeyInfo DER (RSA, at least 2048 bits); else TokenError. */
export async function importIssuerKey(spki: Uint8Array): Promise<IssuerKey> {
  let key: CryptoKey;
  try {
    key = await crypto.subtle.importKey("spki", buf(spki), RSA_PSS, true, ["verify"]);
  } catch (exc) {
    throw new TokenError(`not an RSA SubjectPublicKeyInfo DER: ${(exc as Error).message}`);
  }
  const bits = (key.algorithm as RsaHashedKeyAlgorithm).modulusLength;
  if (bits < MODULUS_BITS) throw new TokenError(`the issuer key has ${bits} bits; at least ${MODULUS_BITS} are required`);
  return { key, spki: Uint8Array.from(spki), keyId: await keyId(spki) };
}

/** `verifyToken`'s key map for a list of pinned issuer keys (SubjectPublicKeyInfo DER). */
export async function trustedKeys(spkis: Uint8Array[]): Promise<TrustedKeys> {
  const keys = await Promise.all(spkis.map(importIssuerKey));
  return new Map(keys.map((k) => [hex(k.keyId), k]));
}

/** RSASSA-PSS-VERIFY with SHA-384, MGF1-SHA-384 and a 48-byte salt (WebCrypto). */
export async function verifySignature(key: IssuerKey, msg: Uint8Array, sig: Uint8Array): Promise<boolean> {
  if (sig.length !== ((key.key.algorithm as RsaHashedKeyAlgorithm).modulusLength + 7) >> 3) return false;
  return crypto.subtle.verify(PSS_PARAMS, key.key, buf(sig), buf(msg));
}

/** The decoded token if it vouches for `identityKey` under one of `trusted` (by token_key_id); else TokenError saying
 * what is wrong (secagg/identity_token.py `verify`, same order and messages). */
export async function verifyToken(raw: Uint8Array, identityKey: Uint8Array, trusted: TrustedKeys): Promise<IdentityToken> {
  const token = decodeToken(raw);
  if (!equalBytes(token.challenge, await challengeDigest(identityKey))) throw new TokenError("the token vouches for another identity key");
  const key = trusted.get(hex(token.tokenKeyId));
  if (key === undefined) throw new TokenError("the token was signed by an issuer key this party does not trust");
  if (!(await verifySignature(key, tokenInput(token), token.authenticator))) throw new TokenError("the token's signature does not verify");
  return token;
}

/** True when `raw` is a token for `identityKey` under a trusted key (`verifyToken` without the reason). */
export async function tokenVerifies(raw: Uint8Array, identityKey: Uint8Array, trusted: TrustedKeys): Promise<boolean> {
  try {
    await verifyToken(raw, identityKey, trusted);
    return true;
  } catch (exc) {
    if (exc instanceof TokenError) return false;
    throw exc;
  }
}

/** The device's side of one issuance: what it sends (`blindedMsg`, `tokenKeyId`) and, with the issuer's blind
 * signature, the token. */
export interface PendingToken {
  blindedMsg: Uint8Array;
  tokenKeyId: Uint8Array;
  /** The encoded token (354 bytes), once `blindSig` unblinds into a valid signature; else TokenError. */
  finalize(blindSig: Uint8Array): Promise<Uint8Array>;
}

/** Start the issuance of a token for `identityKey` under the issuer key `issuerKeySpki` (SubjectPublicKeyInfo DER). */
export async function requestToken(issuerKeySpki: Uint8Array | IssuerKey, identityKey: Uint8Array, randomness: RandomSource = new OsRandom()): Promise<PendingToken> {
  const issuer = issuerKeySpki instanceof Uint8Array ? await importIssuerKey(issuerKeySpki) : issuerKeySpki;
  const unsigned = { nonce: await randomness.bytes(NONCE_BYTES), challenge: await challengeDigest(identityKey), tokenKeyId: issuer.keyId };
  const msg = tokenInput(unsigned);
  const { blindedMsg, inv } = await suite.blind(issuer.key, msg);
  return {
    blindedMsg,
    tokenKeyId: Uint8Array.from(issuer.keyId),
    async finalize(blindSig: Uint8Array): Promise<Uint8Array> {
      let sig: Uint8Array;
      try {
        sig = await suite.finalize(issuer.key, msg, blindSig, inv);
      } catch (exc) {
        throw new TokenError(`the issuer's answer is not a valid token: ${(exc as Error).message}`);
      }
      return encodeToken({ ...unsigned, authenticator: sig });
    },
  };
}
