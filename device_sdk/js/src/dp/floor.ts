/** The device's own lower bound on the noise it adds (the port of queries/dp/floor.py): recomputed from the public
 * (ε, δ, rounds, t_min, sensitivity), never taken from the server. By the exact privacy profile of the Gaussian
 * mechanism (Balle and Wang, "Improving the Gaussian Mechanism for Differential Privacy", ICML 2018, Theorem 8) and
 * its composition (Dong, Roth, Su, "Gaussian Differential Privacy", 2022), no accounting of (ε, δ) over `rounds`
 * rounds allows a noise multiplier below √rounds · z₁(ε, δ). */

import { PrivacyError } from "./noise.js";

const MIN_Z = 1e-6;
const MAX_Z = 1e9;

/** erfc with relative error below 1.2e-7 is not enough here: Φ is computed from a continued-fraction / series erfc
 * accurate to ~1e-15 (W. J. Cody's rational approximations, "Rational Chebyshev approximations for the error
 * function", Math. Comp. 1969). */
function erfc(x: number): number {
  if (Number.isNaN(x)) return NaN;
  if (x < 0) return 2 - erfc(-x);
  if (x < 0.5) return 1 - erf(x);
  if (x > 27) return 0;
  // continued fraction (Lentz) for erfc, x ≥ 0.5
  const tiny = 1e-300;
  let f = x;
  let C = x;
  let D = 0;
  for (let n = 1; n < 500; n++) {
    const an = n / 2;
    D = x + an * D;
    D = D === 0 ? tiny : D;
    C = x + an / C;
    C = C === 0 ? tiny : C;
    D = 1 / D;
    const delta = C * D;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(-x * x) / (f * Math.sqrt(Math.PI));
}

function erf(x: number): number {
  // Maclaurin series, |x| < 0.5
  let term = x;
  let sum = x;
  const x2 = x * x;
  for (let n = 1; n < 60; n++) {
    term *= -x2 / n;
    const add = term / (2 * n + 1);
    sum += add;
    if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
  }
  return (2 / Math.sqrt(Math.PI)) * sum;
}

const phi = (x: number): number => 0.5 * erfc(-x / Math.SQRT2);

/** Exact δ at ε of the Gaussian mechanism with noise multiplier z = σ/Δ. */
export function gaussianDelta(epsilon: number, z: number): number {
  const a = 1.0 / (2.0 * z);
  const b = epsilon * z;
  const tail = phi(-a - b);
  const second = tail === 0 ? 0 : Math.exp(epsilon + Math.log(tail));
  return Math.max(0, phi(a - b) - second);
}

const floorCache = new Map<string, number>();

export function gaussianFloor(epsilon: number, delta: number, rounds = 1): number {
  if (!(typeof epsilon === "number" && Number.isFinite(epsilon) && epsilon > 0)) throw new PrivacyError(`epsilon: must be a positive finite number, got ${epsilon}`);
  if (!(typeof delta === "number" && delta > 0 && delta < 1)) throw new PrivacyError(`delta: must be in (0, 1), got ${delta}`);
  if (!Number.isInteger(rounds) || rounds < 1) throw new PrivacyError(`rounds: must be an integer ≥ 1, got ${rounds}`);
  const key = `${epsilon}/${delta}/${rounds}`;
  const hit = floorCache.get(key);
  if (hit !== undefined) return hit;
  let lo = MIN_Z;
  let hi = 1.0;
  let result: number | null = null;
  while (gaussianDelta(epsilon, hi) > delta) {
    lo = hi;
    hi *= 2;
    if (hi > MAX_Z) {
      result = MAX_Z * Math.sqrt(rounds);
      break;
    }
  }
  if (result === null) {
    if (gaussianDelta(epsilon, lo) <= delta) result = lo * Math.sqrt(rounds);
    else {
      while (hi - lo > 1e-12 * hi) {
        const mid = 0.5 * (lo + hi);
        if (gaussianDelta(epsilon, mid) > delta) lo = mid;
        else hi = mid;
      }
      result = lo * Math.sqrt(rounds);
    }
  }
  floorCache.set(key, result);
  return result;
}

/** Smallest per-device scale (σ for the discrete Gaussian, the variance μ for Skellam) that t_min devices' shares
 * may sum to for a round of L2 sensitivity `l2`, contributions scaled by `encodingScale`, spending `weight` unit
 * rounds. */
export function perDeviceFloor(mechanism: string, epsilon: number, delta: number, rounds: number, tMin: number, l2: number, encodingScale = 1, weight = 1): number {
  if (!(Number.isFinite(weight) && weight > 0)) throw new PrivacyError(`weight: must be a positive finite number, got ${weight}`);
  if (!Number.isInteger(tMin) || tMin < 1) throw new PrivacyError(`t_min: must be an integer ≥ 1, got ${tMin}`);
  if (!(Number.isFinite(l2) && l2 >= 0)) throw new PrivacyError(`l2_sensitivity: must be a finite number ≥ 0, got ${l2}`);
  const total = (gaussianFloor(epsilon, delta, rounds) / Math.sqrt(weight)) * encodingScale * l2;
  if (mechanism === "discrete_gaussian") return total / Math.sqrt(tMin);
  if (mechanism === "skellam") return (total * total) / tMin;
  throw new PrivacyError(`mechanism: no noise floor for ${mechanism}`);
}
