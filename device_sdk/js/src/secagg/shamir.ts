/** Shamir sharing of 256-bit secrets over GF(2^256 + 297) (secagg/shamir.py), with BigInt. */

import { mod as modP, pow } from "@noble/curves/abstract/modular.js";

import { bigFromBE, bigToBE } from "../bytes.js";
import { ByteSource, randbelow } from "../randomness.js";

export const PRIME = (1n << 256n) + 297n;
export const SHARE_BYTES = 33;

const mod = (a: bigint): bigint => modP(a, PRIME);
const powMod = (b: bigint, e: bigint): bigint => pow(b, e, PRIME);

/** Shares of `secret` at each x; coefficients of degree 1..t−1 are `randbelow(PRIME)` from `source`, in order. */
export async function split(secret: bigint, xs: readonly number[], threshold: number, source: ByteSource): Promise<Map<number, bigint>> {
  if (secret < 0n || secret >= PRIME) throw new RangeError("secret out of field range");
  const coeffs = [secret];
  for (let i = 0; i < threshold - 1; i++) coeffs.push(await randbelow(source, PRIME));
  const out = new Map<number, bigint>();
  for (const x of xs) {
    let acc = 0n;
    const bx = BigInt(x);
    for (let i = coeffs.length - 1; i >= 0; i--) acc = (acc * bx + coeffs[i]) % PRIME;
    out.set(x, acc);
  }
  return out;
}

/** λ_i with f(0) = Σ λ_i f(x_i). */
export function lagrangeAtZero(xs: readonly number[]): bigint[] {
  return xs.map((xi) => {
    let num = 1n;
    let den = 1n;
    for (const xj of xs) {
      if (xj === xi) continue;
      num = (num * BigInt(xj)) % PRIME;
      den = mod(den * BigInt(xj - xi));
    }
    return (num * powMod(den, PRIME - 2n)) % PRIME;
  });
}

export function reconstruct(shares: Map<number, bigint>): bigint {
  const xs = [...shares.keys()];
  const lam = lagrangeAtZero(xs);
  return xs.reduce((acc, x, i) => (acc + lam[i] * (shares.get(x) as bigint)) % PRIME, 0n);
}

export const toBytes = (v: bigint): Uint8Array => bigToBE(v, SHARE_BYTES);
export const fromBytes = (b: Uint8Array): bigint => bigFromBE(b);
