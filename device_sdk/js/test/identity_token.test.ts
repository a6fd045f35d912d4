/** Identity tokens (src/identityToken.ts, docs/identities.md): RFC 9474's RSABSSA-SHA384-PSS-Deterministic known
 * answers through the suite the SDK uses, Python-made tokens verified (and refused with Python's own messages) in JS,
 * and the issuance round trip. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { b64decode, bigToBE, hex, unhex } from "../src/bytes.js";
import {
  TOKEN_BYTES, TokenError, challengeDigest, decodeToken, encodeToken, importIssuerKey, requestToken, suite, trustedKeys, verifySignature, verifyToken,
} from "../src/identityToken.js";
import { SeededRandom } from "../src/randomness.js";
import { FakeIssuer, blindSign } from "./fakeIssuer.js";
import { ROOT, vectors } from "./helpers.js";

const RFC = JSON.parse(readFileSync(join(ROOT, "tests", "secagg", "data", "rfc9474_vectors.json"), "utf8")) as Record<string, string>[];

const big = (h: string): bigint => BigInt(h.startsWith("0x") ? h : `0x${h}`);
const b64u = (v: bigint): string => Buffer.from(bigToBE(v, Math.ceil(v.toString(16).length / 2))).toString("base64url");

function modInverse(a: bigint, m: bigint): bigint {
  let [r0, r1, s0, s1] = [a % m, m, 1n, 0n];
  while (r1 !== 0n) {
    const q = r0 / r1;
    [r0, r1] = [r1, r0 - q * r1];
    [s0, s1] = [s1, s0 - q * s1];
  }
  return ((s0 % m) + m) % m;
}

/** The vector's key pair as WebCrypto RSA-PSS/SHA-384 keys (the private key from p, q, d by JWK). */
async function vectorKeys(v: Record<string, string>): Promise<{ privateKey: CryptoKey; publicKey: CryptoKey; spki: Uint8Array }> {
  const [p, q, d, e] = [big(v.p), big(v.q), big(v.d), big(v.e)];
  const jwk = { kty: "RSA", n: b64u(p * q), e: b64u(e) };
  const priv = { ...jwk, d: b64u(d), p: b64u(p), q: b64u(q), dp: b64u(d % (p - 1n)), dq: b64u(d % (q - 1n)), qi: b64u(modInverse(q, p)) };
  const alg = { name: "RSA-PSS", hash: "SHA-384" };
  const privateKey = await crypto.subtle.importKey("jwk", priv, alg, true, ["sign"]);
  const publicKey = await crypto.subtle.importKey("jwk", jwk, alg, true, ["verify"]);
  return { privateKey, publicKey, spki: new Uint8Array(await crypto.subtle.exportKey("spki", publicKey)) };
}

/** Run `work` with crypto.getRandomValues answering the given byte strings in turn (the library draws the PSS salt,
 * then the blind r). */
async function withRandom<T>(draws: Uint8Array[], work: () => Promise<T>): Promise<T> {
  const original = crypto.getRandomValues;
  const queue = [...draws];
  crypto.getRandomValues = (<A extends ArrayBufferView | null>(arr: A): A => {
    const next = queue.shift();
    if (!next || !(arr instanceof Uint8Array) || next.length !== arr.length) throw new Error(`unexpected draw of ${(arr as Uint8Array | null)?.length} bytes`);
    arr.set(next);
    return arr;
  }) as typeof crypto.getRandomValues;
  try {
    return await work();
  } finally {
    crypto.getRandomValues = original;
  }
}

test("RFC 9474 RSABSSA-SHA384-PSS-Deterministic known answers through the SDK's suite and verification", async () => {
  const v = RFC.find((x) => x.name === "RSABSSA-SHA384-PSS-Deterministic") as Record<string, string>;
  assert.equal(suite.toString(), "RSABSSA-SHA384-PSS-Deterministic");
  const { privateKey, publicKey, spki } = await vectorKeys(v);
  const n = big(v.n);
  const kLen = 512;
  const r = modInverse(big(v.inv), n);
  const msg = unhex(v.input_msg);
  assert.equal(hex(suite.prepare(msg)), v.input_msg, "the deterministic suite prefixes nothing");
  const blinded = await withRandom([unhex(v.salt), bigToBE(r, kLen)], () => suite.blind(publicKey, msg));
  assert.equal(hex(blinded.blindedMsg), v.blinded_msg);
  assert.equal(big(hex(blinded.inv)), big(v.inv));
  const blindSig = await blindSign(privateKey, blinded.blindedMsg);
  assert.equal(hex(blindSig), v.blind_sig);
  const sig = await suite.finalize(publicKey, msg, blindSig, blinded.inv);
  assert.equal(hex(sig), v.sig);
  const issuer = await importIssuerKey(spki);
  assert.equal(await verifySignature(issuer, msg, sig), true);
  assert.equal(await verifySignature(issuer, Uint8Array.of(...msg, 0), sig), false);
  assert.equal(await verifySignature(issuer, msg, sig.subarray(1)), false);
});

test("Python's tokens verify in JS, and the refused ones are refused with Python's message", async () => {
  // tests/vectors/identity_tokens.json, written by tests/support/vectors.py from secagg/identity_token.py
  const cases = vectors("identity_tokens").cases;
  assert.ok(cases.some((c) => c.output.error === null) && cases.some((c) => c.output.error !== null));
  for (const { output } of cases) {
    const trusted = await trustedKeys([unhex(output.issuer_spki as string)]);
    assert.deepEqual([...trusted.keys()], [output.token_key_id]);
    const identity = unhex(output.verified_identity as string);
    const raw = unhex(output.verified_token as string);
    if (output.error === null) {
      const t = await verifyToken(raw, identity, trusted);
      assert.deepEqual(encodeToken(t), raw, "decode ∘ encode is the identity");
    } else {
      await assert.rejects(verifyToken(raw, identity, trusted),
        (exc: unknown) => exc instanceof TokenError && exc.message === output.error, `${output.error}`);
    }
  }
});

test("a token requested, blind-signed and finalized verifies for its identity only, under its issuer only", async () => {
  const issuer = await FakeIssuer.create();
  const other = await FakeIssuer.create();
  const identity = new Uint8Array(32).fill(7);
  const pending = await requestToken(issuer.key.spki, identity, new SeededRandom(Uint8Array.of(1)));
  assert.equal(pending.blindedMsg.length, 256);
  assert.deepEqual(pending.tokenKeyId, issuer.key.keyId);
  const raw = await pending.finalize(await issuer.blindSign(pending.blindedMsg));
  assert.equal(raw.length, TOKEN_BYTES);
  const t = decodeToken(raw);
  assert.deepEqual(t.challenge, await challengeDigest(identity));
  const trusted = await trustedKeys([issuer.key.spki]);
  await verifyToken(raw, identity, trusted);
  await assert.rejects(verifyToken(raw, new Uint8Array(32).fill(8), trusted), /the token vouches for another identity key/);
  await assert.rejects(verifyToken(raw, identity, await trustedKeys([other.key.spki])), /signed by an issuer key this party does not trust/);
  // the issuer sees a fresh value each time it is asked for the same identity (nothing it can match to the token)
  const again = await requestToken(issuer.key.spki, identity, new SeededRandom(Uint8Array.of(1)));
  assert.notDeepEqual(again.blindedMsg, pending.blindedMsg);
  // the issuer's signature over another request does not finalize into a token, nor does a wrong-sized answer
  await assert.rejects(pending.finalize(await issuer.blindSign(again.blindedMsg)), (e: unknown) => e instanceof TokenError && /^the issuer's answer is not a valid token: /.test((e as Error).message));
  await assert.rejects(pending.finalize(new Uint8Array(10)), TokenError);
});

test("malformed tokens and keys are refused with the reason", async () => {
  const issuer = await FakeIssuer.create();
  const identity = new Uint8Array(32).fill(1);
  const raw = await issuer.minted(identity);
  const trusted = await trustedKeys([issuer.key.spki]);
  const flipped = Uint8Array.from(raw);
  flipped[TOKEN_BYTES - 1] ^= 1;
  await assert.rejects(verifyToken(flipped, identity, trusted), /^TokenError: the token's signature does not verify$/);
  await assert.rejects(verifyToken(raw.subarray(1), identity, trusted), /an identity token is 354 bytes, got 353/);
  await assert.rejects(verifyToken(Uint8Array.of(0, 1, ...raw.subarray(2)), identity, trusted), /token_type must be 2, got 1/);
  await assert.rejects(verifyToken(raw, new Uint8Array(31), trusted), /an identity key is 32 bytes \(Ed25519\), got 31/);
  await assert.rejects(importIssuerKey(new Uint8Array(40)), /not an RSA SubjectPublicKeyInfo DER/);
  const small = await crypto.subtle.generateKey({ name: "RSA-PSS", hash: "SHA-384", modulusLength: 1024, publicExponent: Uint8Array.of(1, 0, 1) }, true, ["sign", "verify"]);
  await assert.rejects(importIssuerKey(new Uint8Array(await crypto.subtle.exportKey("spki", small.publicKey))), /1024 bits; at least 2048/);
});
