/** The primitives, all from WebCrypto (`globalThis.crypto.subtle`, Node ≥ 20 and current browsers): SHA-256/512,
 * HKDF-SHA256, AES-256-GCM, AES-256-CTR, X25519 and Ed25519. Nothing here is hand-written cryptography: this module
 * only adapts byte formats (PKCS#8 wrappers for raw private keys, JWK for public keys). */

import { b64decode, concat } from "./bytes.js";

function webcrypto(): Crypto {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (!c || !c.subtle || typeof c.getRandomValues !== "function") {
    throw new Error("WebCrypto is not available (globalThis.crypto.subtle): a secure context (https or localhost) and Node ≥ 20 are needed");
  }
  return c;
}

const subtle = (): SubtleCrypto => webcrypto().subtle;
type Bytes = Uint8Array;
const buf = (b: Bytes): ArrayBuffer => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;

/** n bytes of operating-system entropy. */
export function osRandomBytes(n: number): Bytes {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) webcrypto().getRandomValues(out.subarray(i, Math.min(n, i + 65536)));
  return out;
}

export async function sha256(data: Bytes): Promise<Bytes> {
  return new Uint8Array(await subtle().digest("SHA-256", buf(data)));
}

export async function sha512(data: Bytes): Promise<Bytes> {
  return new Uint8Array(await subtle().digest("SHA-512", buf(data)));
}

/** HKDF-SHA256, no salt, 32-byte output. */
export async function hkdf(secret: Bytes, info: Bytes): Promise<Bytes> {
  const key = await subtle().importKey("raw", buf(secret), "HKDF", false, ["deriveBits"]);
  const bits = await subtle().deriveBits({ name: "HKDF", hash: "SHA-256", salt: new ArrayBuffer(0), info: buf(info) }, key, 256);
  return new Uint8Array(bits);
}

export async function aesKey(raw: Bytes, alg: "AES-CTR" | "AES-GCM"): Promise<CryptoKey> {
  if (raw.length !== 32) throw new Error("AES key: expected 32 bytes");
  return subtle().importKey("raw", buf(raw), alg, false, ["encrypt", "decrypt"]);
}

/** `length` bytes of the AES-256-CTR keystream under `key`, starting at 16-byte block `block` of the stream whose
 * initial counter block is zero (the counter is the whole 128-bit block, big-endian). */
export async function ctrKeystream(key: CryptoKey, block: bigint, length: number): Promise<Bytes> {
  const counter = new Uint8Array(16);
  new DataView(counter.buffer).setBigUint64(0, (block >> 64n) & 0xffffffffffffffffn, false);
  new DataView(counter.buffer).setBigUint64(8, block & 0xffffffffffffffffn, false);
  const out = await subtle().encrypt({ name: "AES-CTR", counter, length: 128 }, key, new ArrayBuffer(length));
  return new Uint8Array(out);
}

export class AuthenticationError extends Error {}

export async function gcmSeal(key: Bytes, nonce: Bytes, plaintext: Bytes, aad: Bytes): Promise<Bytes> {
  const k = await aesKey(key, "AES-GCM");
  return new Uint8Array(await subtle().encrypt({ name: "AES-GCM", iv: buf(nonce), additionalData: buf(aad), tagLength: 128 }, k, buf(plaintext)));
}

export async function gcmOpen(key: Bytes, nonce: Bytes, ciphertext: Bytes, aad: Bytes): Promise<Bytes> {
  const k = await aesKey(key, "AES-GCM");
  try {
    return new Uint8Array(await subtle().decrypt({ name: "AES-GCM", iv: buf(nonce), additionalData: buf(aad), tagLength: 128 }, k, buf(ciphertext)));
  } catch {
    throw new AuthenticationError("AES-GCM authentication failed");
  }
}

// PKCS#8 wrappers of a raw 32-byte private key (RFC 8410): SEQUENCE { version 0, AlgorithmIdentifier { OID }, OCTET STRING { OCTET STRING key } }
const PKCS8_X25519 = Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20]);
const PKCS8_ED25519 = Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);

function jwkBytes(jwk: JsonWebKey, field: "x"): Bytes {
  const text = jwk[field] ?? "";
  const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
  return b64decode(b64 + "=".repeat((4 - (b64.length % 4)) % 4), `jwk.${field}`, 32);
}

/** An X25519 key pair from 32 private bytes (RFC 7748 clamps them). */
export class X25519Key {
  private constructor(readonly privateKey: CryptoKey, readonly publicBytes: Bytes, readonly privateBytes: Bytes) {}

  static async fromPrivate(raw: Bytes): Promise<X25519Key> {
    if (raw.length !== 32) throw new Error("X25519 private key: expected 32 bytes");
    const sk = await subtle().importKey("pkcs8", buf(concat(PKCS8_X25519, raw)), { name: "X25519" }, true, ["deriveBits"]);
    const jwk = await subtle().exportKey("jwk", sk);
    return new X25519Key(sk, jwkBytes(jwk, "x"), Uint8Array.from(raw));
  }

  /** The raw shared secret with `peerPublic`; throws AuthenticationError for unusable (low-order) peer keys. */
  async agree(peerPublic: Bytes): Promise<Bytes> {
    try {
      const pk = await subtle().importKey("raw", buf(peerPublic), { name: "X25519" }, false, []);
      const bits = await subtle().deriveBits({ name: "X25519", public: pk } as unknown as AlgorithmIdentifier, this.privateKey, 256);
      const out = new Uint8Array(bits);
      if (out.every((x) => x === 0)) throw new Error("all-zero shared secret");
      return out;
    } catch (exc) {
      throw new AuthenticationError(`unusable peer public key: ${(exc as Error).message}`);
    }
  }
}

/** An Ed25519 identity key from its 32-byte seed; signatures are deterministic (RFC 8032). */
export class Ed25519Key {
  private constructor(private readonly sk: CryptoKey, readonly publicBytes: Bytes, readonly seed: Bytes) {}

  static async fromSeed(seed: Bytes): Promise<Ed25519Key> {
    if (seed.length !== 32) throw new Error("Ed25519 private key: expected 32 bytes");
    const sk = await subtle().importKey("pkcs8", buf(concat(PKCS8_ED25519, seed)), { name: "Ed25519" }, true, ["sign"]);
    const jwk = await subtle().exportKey("jwk", sk);
    return new Ed25519Key(sk, jwkBytes(jwk, "x"), Uint8Array.from(seed));
  }

  async sign(message: Bytes): Promise<Bytes> {
    return new Uint8Array(await subtle().sign({ name: "Ed25519" }, this.sk, buf(message)));
  }
}

/** Whether `signature` is a valid Ed25519 signature of `message` under the raw public key. */
export async function ed25519Verify(publicKey: Bytes, signature: Bytes, message: Bytes): Promise<boolean> {
  if (publicKey.length !== 32 || signature.length !== 64) return false;
  try {
    const pk = await subtle().importKey("raw", buf(publicKey), { name: "Ed25519" }, false, ["verify"]);
    return await subtle().verify({ name: "Ed25519" }, pk, buf(signature), buf(message));
  } catch {
    return false;
  }
}
