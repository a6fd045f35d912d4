/** A stand-in for fa-issuer (docs/identities.md) as a `fetch` function: `POST /v1/issuer/token` checks the credential
 * against the ones it knows, charges each credential's quota and signs the blinded token request with its RSA key
 * (RFC 9474 BlindSign, by @cloudflare/blindrsa-ts); errors as the issuer sends them ({"error"}, Retry-After on 429).
 * Every request is recorded. `minted` is a helper for tests that need tokens without a device. */

import { b64decode, b64encode, bigFromBE, bigToBE, hex } from "../src/bytes.js";
import { IssuerKey, importIssuerKey, requestToken, suite } from "../src/identityToken.js";
import { OsRandom } from "../src/randomness.js";
import { json } from "./fakeServer.js";

export function modPow(base: bigint, exp: bigint, mod: bigint): bigint {
  let result = 1n;
  let b = base % mod;
  for (let e = exp; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % mod;
    b = (b * b) % mod;
  }
  return result;
}

const fromB64u = (s: string): bigint => bigFromBE(new Uint8Array(Buffer.from(s, "base64url")));

/** RFC 9474 §4.3 BlindSign with BigInt CRT (as secagg/blind_rsa.py; the library's sjcl arithmetic takes seconds): the
 * issuer's step, which no device runs. */
export async function blindSign(privateKey: CryptoKey, blindedMsg: Uint8Array): Promise<Uint8Array> {
  const k = await crypto.subtle.exportKey("jwk", privateKey);
  const [n, e, p, q, dp, dq, qi] = [k.n, k.e, k.p, k.q, k.dp, k.dq, k.qi].map((x) => fromB64u(x as string));
  const kLen = Math.ceil(n.toString(16).length / 2);
  const m = bigFromBE(blindedMsg);
  if (blindedMsg.length !== kLen || m >= n) throw new Error("blinded_msg: wrong size or not below the modulus");
  const s1 = modPow(m, dp, p);
  const s2 = modPow(m, dq, q);
  const s = s2 + q * ((((qi * (s1 - s2)) % p) + p) % p);
  if (modPow(s, e, n) !== m) throw new Error("signing failure");
  return bigToBE(s, kLen);
}

export interface IssuerRequest {
  url: string;
  headers: Headers;
  body: any;
}

export class FakeIssuer {
  readonly requests: IssuerRequest[] = [];
  /** Tokens each credential may still get. */
  readonly quota = new Map<string, number>();
  private constructor(readonly privateKey: CryptoKey, readonly key: IssuerKey) {}

  /** An issuer with a fresh RSA-2048 key; `credentials`: credential → tokens it may get. */
  static async create(credentials: Record<string, number> = { "install-1": 1 }): Promise<FakeIssuer> {
    const pair = await suite.generateKey({ modulusLength: 2048, publicExponent: Uint8Array.of(1, 0, 1) });
    const spki = new Uint8Array(await crypto.subtle.exportKey("spki", pair.publicKey));
    const issuer = new FakeIssuer(pair.privateKey, await importIssuerKey(spki));
    for (const [c, n] of Object.entries(credentials)) issuer.quota.set(c, n);
    return issuer;
  }

  /** The key as the app pins it (`policy.issuerKeys`). */
  get spkiB64(): string {
    return b64encode(this.key.spki);
  }

  blindSign(blindedMsg: Uint8Array): Promise<Uint8Array> {
    return blindSign(this.privateKey, blindedMsg);
  }

  /** A token for `identity` as a device would get it (no credential charged). */
  async minted(identity: Uint8Array): Promise<Uint8Array> {
    const pending = await requestToken(this.key, identity, new OsRandom());
    return pending.finalize(await this.blindSign(pending.blindedMsg));
  }

  async handle(url: string, init: RequestInit = {}): Promise<Response> {
    const body = JSON.parse(new TextDecoder().decode(init.body as Uint8Array));
    this.requests.push({ url, headers: new Headers(init.headers), body });
    if (init.method !== "POST" || new URL(url).pathname !== "/v1/issuer/token") return json(404, { error: `no route ${init.method} ${url}` });
    const left = this.quota.get(body.credential);
    if (left === undefined) return json(403, { error: "credential refused: unknown app" });
    let kid: Uint8Array;
    let blinded: Uint8Array;
    try {
      kid = b64decode(body.token_key_id, "token_key_id", 32);
      blinded = b64decode(body.blinded_msg, "blinded_msg", 256);
    } catch (exc) {
      return json(422, { error: (exc as Error).message });
    }
    if (hex(kid) !== hex(this.key.keyId)) return json(404, { error: "token_key_id: not a key this issuer signs with" });
    if (left <= 0) return json(429, { error: "quota spent: 1 token per install per day" }, { "Retry-After": "86400" });
    this.quota.set(body.credential, left - 1);
    return json(200, { blind_sig: b64encode(await this.blindSign(blinded)), remaining: left - 1 });
  }
}

/** One fetch for a device that talks to a server and an issuer: requests to `issuerHost` go to the issuer. */
export function withIssuer(server: typeof fetch, issuer: FakeIssuer, issuerHost = "issuer.test"): typeof fetch {
  return (async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = String(input);
    if (new URL(url).host === issuerHost) return issuer.handle(url, init);
    return server(input, init);
  }) as typeof fetch;
}
