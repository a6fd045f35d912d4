/** The prime-order group of the validity proofs: the Ed25519 subgroup of order ℓ (secagg/validity/group.py).
 *
 * Curve arithmetic is @noble/curves' (audited); scalars are BigInts modulo ℓ. The one thing ported here is the
 * mapping libsodium's `crypto_core_ed25519_from_uniform` applies to 32 bytes (Elligator 2 on Curve25519, the
 * birational map to Ed25519 with the x sign taken from the top input bit, and the cofactor cleared), so that the value
 * generators G_i hash to the same points as on the Python side — checked against tests/vectors/validity.json. Its
 * field operations are modular BigInt arithmetic modulo p = 2^255 − 19, nothing more. */

import { mod, pow } from "@noble/curves/abstract/modular.js";
import { ed25519 } from "@noble/curves/ed25519.js";

import { bigFromLE, bigToLE, concat, u64be, utf8 } from "../bytes.js";
import { ByteSource, randbelow } from "../randomness.js";
import { sha512 } from "../webcrypto.js";
import { ORDER } from "./statement.js";

export { ORDER };
export type Point = InstanceType<typeof ed25519.Point>;
const P = ed25519.Point;
export const IDENTITY: Point = P.ZERO;
export const BASE: Point = P.BASE;
export const GENERATOR_DOMAIN = utf8("fa-validity/v1/generator/");

const FP = (1n << 255n) - 19n;
const A = 486662n;
const fmod = (a: bigint): bigint => mod(a, FP);
const fpow = (b: bigint, e: bigint): bigint => pow(b, e, FP);

const finv = (a: bigint): bigint => fpow(a, FP - 2n); // 0 ↦ 0, as libsodium's fe25519_invert
const SQRTM1 = fpow(2n, (FP - 1n) / 4n);

/** libsodium's fe25519_unchecked_sqrt: x^((p+3)/8), or that times √−1 when it squares to −x. */
function uncheckedSqrt(x2: bigint): bigint {
  const pRoot = fpow(x2, (FP + 3n) / 8n);
  const mRoot = fmod(pRoot * SQRTM1);
  return fmod(x2 - mRoot * mRoot) === 0n ? mRoot : pRoot;
}

const SQRT_AM2 = uncheckedSqrt(fmod(-A - 2n));

/** `crypto_core_ed25519_from_uniform(r)` as a point. */
export function fromUniform(r: Uint8Array): Point {
  if (r.length !== 32) throw new Error("from_uniform: expected 32 bytes");
  const s = Uint8Array.from(r);
  const xSign = s[31] >> 7;
  s[31] &= 0x7f;
  const rfe = fmod(bigFromLE(s));
  let x = fmod(-A * finv(fmod(2n * rfe * rfe + 1n)));
  const gx1 = fmod(x * x * x + A * x * x + x);
  if (fpow(gx1, (FP - 1n) / 2n) === FP - 1n) x = fmod(-x - A);
  const y = uncheckedSqrt(fmod(x * x * x + A * x * x + x));
  const xPlusOneYInv = finv(fmod((x + 1n) * y));
  let xed = fmod(x * SQRT_AM2 * xPlusOneYInv * (x + 1n));
  const yed = xPlusOneYInv === 0n ? 1n : fmod(xPlusOneYInv * y * (x - 1n));
  if (Number(xed & 1n) !== xSign) xed = fmod(-xed);
  return P.fromAffine({ x: xed, y: yed }).clearCofactor();
}

export const smod = (x: bigint): bigint => ((x % ORDER) + ORDER) % ORDER;

export function scalarBytes(x: bigint): Uint8Array {
  return bigToLE(smod(x), 32);
}

export function mul(x: bigint, p: Point): Point {
  x = smod(x);
  if (x === 0n || p.is0()) return IDENTITY;
  return p.multiply(x);
}

export function mulBase(x: bigint): Point {
  x = smod(x);
  return x === 0n ? IDENTITY : BASE.multiply(x);
}

export function total(points: Point[]): Point {
  return points.reduce((acc, p) => acc.add(p), IDENTITY);
}

/** value·G + blind·B. The prover only commits to values in {−1, 0, 1} (bits, one-hot flags, sign votes): for those the
 * same curve operations run whatever the value (one base-point multiplication, one negation, one addition), so proving
 * time does not tell a device's bits or its −1 votes apart (a 1 or a −1 used to cost a full multiplication). */
export function commit(value: bigint, blind: bigint, generator: Point): Point {
  if (value === 0n || value === 1n || value === -1n) {
    const choices = [IDENTITY, generator, generator.negate()];
    return mulBase(blind).add(choices[value === -1n ? 2 : Number(value)]);
  }
  const base = mulBase(blind);
  return smod(value) === 0n ? base : mul(value, generator).add(base);
}

// G_i by index, each derived once; the promise is stored before any await, so concurrent proofs (several devices in
// one page or process) never derive an index twice or out of order
const gens: Promise<Point>[] = [];

export function generators(count: number): Promise<Point[]> {
  for (let i = gens.length; i < count; i++) {
    gens.push(sha512(concat(GENERATOR_DOMAIN, utf8("G"), u64be(BigInt(i)))).then((h) => fromUniform(h.subarray(0, 32))));
  }
  return Promise.all(gens.slice(0, count));
}

let sumGen: Point | null = null;

export async function sumGenerator(): Promise<Point> {
  sumGen ??= fromUniform((await sha512(concat(GENERATOR_DOMAIN, utf8("S")))).subarray(0, 32));
  return sumGen;
}

const relationGens = new Map<number, Promise<Point>>();

/** H_k, the generator of a statement's relation k (SHA-512(domain ‖ "R" ‖ k as u64 BE), first 32 bytes). */
export function relationGenerator(k: number): Promise<Point> {
  let h = relationGens.get(k);
  if (!h) {
    h = sha512(concat(GENERATOR_DOMAIN, utf8("R"), u64be(BigInt(k)))).then((d) => fromUniform(d.subarray(0, 32)));
    relationGens.set(k, h);
  }
  return h;
}

export async function randomScalar(source: ByteSource): Promise<bigint> {
  return 1n + (await randbelow(source, ORDER - 1n));
}

/** A received point: canonical, on the curve, in the prime-order subgroup, not the identity. */
export function decodePoint(data: Uint8Array, what: string): Point {
  let p: Point;
  try {
    p = P.fromBytes(data);
  } catch {
    throw new Error(`${what}: not a point of the prime-order subgroup`);
  }
  const canonical = p.toBytes();
  if (p.is0() || !p.isTorsionFree() || p.isSmallOrder() || canonical.some((b, i) => b !== data[i])) {
    throw new Error(`${what}: not a point of the prime-order subgroup`);
  }
  return p;
}
