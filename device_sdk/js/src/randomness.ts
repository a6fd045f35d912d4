/** The one injectable source of randomness (the port of secagg/randomness.py and device_sdk/randomness.py).
 *
 * `bytes(n)` is the only primitive; the helpers consume its bytes in the documented way (docs/vectors.md), so a
 * seeded source reproduces every draw byte for byte:
 * - `randbelow(src, n)`: k = bit length of n − 1; read ⌈k/8⌉ bytes big-endian, keep the low k bits, retry until < n;
 * - `random(src)`: the top 53 bits of 8 big-endian bytes times 2^−53;
 * - `sample(src, population, k)`: partial Fisher–Yates on `randbelow`;
 * - `child(label)`: an independent labelled sub-stream.
 * `OsRandom` reads `crypto.getRandomValues`; `KeyedRandom(key)` is the AES-256-CTR keystream (zero IV) under a 32-byte
 * key, children keyed SHA-256(CHILD_DOMAIN ‖ key ‖ label); `SeededRandom(seed)` is the KeyedRandom under
 * SHA-256(DOMAIN ‖ seed) — deterministic, for tests and known-answer vectors only. */

import { b64url, bigFromBE, bitLength, concat, utf8 } from "./bytes.js";
import { aesKey, ctrKeystream, osRandomBytes, sha256 } from "./webcrypto.js";

export const DOMAIN = utf8("fa-random/v1/seeded/");
export const CHILD_DOMAIN = utf8("fa-random/v1/child/");

export interface ByteSource {
  bytes(n: number): Promise<Uint8Array>;
}

export interface RandomSource extends ByteSource {
  child(label: string): RandomSource;
}

export class OsRandom implements RandomSource {
  async bytes(n: number): Promise<Uint8Array> {
    return osRandomBytes(n);
  }

  /** Another OS source: every draw is fresh entropy whatever the label. */
  child(_label: string): RandomSource {
    return new OsRandom();
  }
}

const CHUNK_BLOCKS = 256n;

/** The AES-256-CTR keystream (zero initial counter block) under a 32-byte key; reads are serialised, so the stream
 * is the same however the reads are split or interleaved. */
export class KeyedRandom implements RandomSource {
  private readonly key: Promise<Uint8Array>;
  private cipher: Promise<CryptoKey> | null = null;
  private buf: Uint8Array = new Uint8Array(0);
  private nextBlock = 0n;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(key: Uint8Array | Promise<Uint8Array>) {
    this.key = Promise.resolve(key).then((k) => {
      if (!(k instanceof Uint8Array) || k.length !== 32) throw new Error("key: expected 32 bytes");
      return Uint8Array.from(k);
    });
  }

  bytes(n: number): Promise<Uint8Array> {
    if (!Number.isInteger(n) || n < 0) return Promise.reject(new RangeError(`bytes: n must be a non-negative integer, got ${n}`));
    const run = this.queue.then(() => this.read(n));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async read(n: number): Promise<Uint8Array> {
    const out = new Uint8Array(n);
    let have = Math.min(n, this.buf.length);
    out.set(this.buf.subarray(0, have));
    this.buf = this.buf.subarray(have);
    if (have < n) {
      this.cipher ??= this.key.then((k) => aesKey(k, "AES-CTR"));
      const need = BigInt(Math.ceil((n - have) / 16));
      const blocks = need > CHUNK_BLOCKS ? need : CHUNK_BLOCKS;
      const stream = await ctrKeystream(await this.cipher, this.nextBlock, Number(blocks) * 16);
      this.nextBlock += blocks;
      out.set(stream.subarray(0, n - have), have);
      this.buf = stream.subarray(n - have);
      have = n;
    }
    return out;
  }

  child(label: string): RandomSource {
    return new KeyedRandom(this.key.then((k) => sha256(concat(CHILD_DOMAIN, k, utf8(label)))));
  }
}

export class SeededRandom extends KeyedRandom {
  constructor(seed: Uint8Array) {
    super(sha256(concat(DOMAIN, seed)));
  }
}

/** A KeyedRandom keyed by 32 bytes of `source` (bulk draws such as a noise share). */
export function keyedStream(source: ByteSource): KeyedRandom {
  return new KeyedRandom(source.bytes(32));
}

/** Uniform integer in [0, n) by rejection sampling on bit_length(n − 1) bits. */
export async function randbelow(source: ByteSource, n: bigint): Promise<bigint> {
  if (n <= 0n) throw new RangeError(`randbelow: n must be positive, got ${n}`);
  const k = bitLength(n - 1n);
  if (k === 0) return 0n;
  const nbytes = Math.ceil(k / 8);
  const mask = (1n << BigInt(k)) - 1n;
  for (;;) {
    const v = bigFromBE(await source.bytes(nbytes)) & mask;
    if (v < n) return v;
  }
}

/** Uniform float in [0, 1) with 53 random bits. */
export async function random(source: ByteSource): Promise<number> {
  const b = await source.bytes(8);
  return Number(bigFromBE(b) >> 11n) * 2 ** -53;
}

/** k distinct elements of `population` in random order. */
export async function sample<T>(source: ByteSource, population: readonly T[], k: number): Promise<T[]> {
  const pool = [...population];
  if (!(Number.isInteger(k) && k >= 0 && k <= pool.length)) throw new RangeError(`sample: k must be between 0 and ${pool.length}, got ${k}`);
  for (let i = 0; i < k; i++) {
    const j = i + Number(await randbelow(source, BigInt(pool.length - i)));
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, k);
}

/** `count` uniform uint64 words from 8·count bytes, each little-endian. */
export async function uint64s(source: ByteSource, count: number): Promise<bigint[]> {
  const b = await source.bytes(8 * count);
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return Array.from({ length: count }, (_, i) => view.getBigUint64(8 * i, true));
}

const NONCE_BYTES = 16;

/** The independent sub-sources of one contribution (device_sdk/randomness.py). */
export interface ContributionRandomness {
  secagg: RandomSource;
  noise: ByteSource;
  kind: RandomSource;
  validity: RandomSource;
}

/** The device's one source and what it derives from it: its identity key, request nonces, the secagg keys sent with
 * each check-in (child "checkin-keys", 64 bytes a check-in) and, per contribution, the secagg, noise, kind and
 * validity sub-sources under the child "contribution/<cohort id>". The kind's source
 * (row subsampling, stochastic rounding) is a keyed stream here, where the Python SDK uses a numpy generator. */
export class DeviceRandomness {
  readonly root: RandomSource;
  private readonly nonces: RandomSource;
  private readonly checkinKeysSource: RandomSource;
  private readonly tokenSource: RandomSource;

  constructor(root?: RandomSource) {
    this.root = root ?? new OsRandom();
    this.nonces = this.root.child("nonces");
    this.checkinKeysSource = this.root.child("checkin-keys");
    this.tokenSource = this.root.child("identity-token");
  }

  identityKey(): Promise<Uint8Array> {
    return this.root.child("identity").bytes(32);
  }

  /** The source identity-token nonces are drawn from (child "identity-token"). */
  identityToken(): RandomSource {
    return this.tokenSource;
  }

  async nonce(): Promise<string> {
    return b64url(await this.nonces.bytes(NONCE_BYTES));
  }

  /** The stream the key pairs sent with check-ins are drawn from (`KeyPairs.draw`, fresh pairs every check-in). */
  checkinKeys(): RandomSource {
    return this.checkinKeysSource;
  }

  forContribution(cohortId: string): ContributionRandomness {
    const base = this.root.child(`contribution/${cohortId}`);
    return {
      secagg: base.child("secagg"),
      noise: keyedStream(base.child("noise")),
      kind: keyedStream(base.child("kind")),
      validity: base.child("validity"),
    };
  }
}
