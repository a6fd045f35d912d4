/** The prime-order group of the validity proofs: the Ed25519 subgroup of order ℓ (secagg/validity/group.py).
 *
 * Curve arithmetic is @noble/curves' (audited); scalars are BigInts modulo ℓ. The one thing ported here is the
 * mapping libsodium's `crypto_core_ed25519_from_uniform` applies to 32 bytes (Elligator 2 on Curve25519, the
 * birational map to Ed25519 with the x sign taken from the top input bit, and the cofactor cleared), so that the
 * generators hash to the same points as on the Python side — checked against tests/vectors/validity.json: the value
 * generators G_i (SHA-512(domain ‖ "G" ‖ i as u64 BE)[:32]), the bit-vector proof's g_k, h_k ("g", "h" ‖ k) and its
 * polynomial generator g_t ("t"). Its field operations are modular BigInt arithmetic modulo p = 2^255 − 19, on public
 * inputs only. */

import { pippenger } from "@noble/curves/abstract/curve.js";
import { invert, mod, pow } from "@noble/curves/abstract/modular.js";
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

const finv = (a: bigint): bigint => (a === 0n ? 0n : invert(a, FP)); // 0 ↦ 0, as libsodium's fe25519_invert (public inputs: a generator's hash)
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

/** Σ scalars_j·points_j by noble's Pippenger (bucket) method. Its point-operation count depends only on how many
 * terms there are, but its bucket indices (memory accesses) follow the scalars: for random scalars (a prover's sL, sR)
 * and public ones (a verifier's), never for a device's bits or values. */
export function msm(points: Point[], scalars: bigint[]): Point {
  return pippenger(P, points, scalars.map(smod));
}

export function total(points: Point[]): Point {
  return points.reduce((acc, p) => acc.add(p), IDENTITY);
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

function hashed(label: Uint8Array): Promise<Point> {
  return sha512(concat(GENERATOR_DOMAIN, label)).then((h) => fromUniform(h.subarray(0, 32)));
}

// g_k and h_k by index, each derived once (promises stored before any await, as for the G_i)
const bitGens: Promise<Point>[] = [];
const complementGens: Promise<Point>[] = [];
const G_LABEL = utf8("g");
const H_LABEL = utf8("h");

/** (g_0…g_(count−1), h_0…h_(count−1)): the generators of a bit-vector proof's bits and their complements,
 * from_uniform(SHA-512(domain ‖ "g" or "h" ‖ k as u64 BE)[:32]). */
export async function bitGenerators(count: number): Promise<[Point[], Point[]]> {
  for (let k = bitGens.length; k < count; k++) {
    bitGens.push(hashed(concat(G_LABEL, u64be(BigInt(k)))));
    complementGens.push(hashed(concat(H_LABEL, u64be(BigInt(k)))));
  }
  return [await Promise.all(bitGens.slice(0, count)), await Promise.all(complementGens.slice(0, count))];
}

let innerProductGen: Promise<Point> | null = null;

/** g_t, the generator the bit-vector proof commits its polynomial's coefficients under (SHA-512(domain ‖ "t")). */
export function innerProductGenerator(): Promise<Point> {
  innerProductGen ??= hashed(utf8("t"));
  return innerProductGen;
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
