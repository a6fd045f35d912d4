/** The safety floor a device computes for itself (secagg/floor.py): the least neighbourhood degree and share threshold
 * that keep its masks safe in a cohort of n, whatever the server chose.
 *
 * Model (docs/secagg.md, "The safety floor"). A cohort of n parties, at most ⌊γ·n⌋ of them corrupt (colluding with the
 * server — the server's own invented identities count), in the active model (the consistency round: a party unmasks
 * only for a survivor set that t of its closed neighbourhood of m = k + 1 signed). For an honest party v (Bell et al.,
 * CCS 2020):
 *
 * - security: the server can gather t shares of both of v's secrets only by showing part of v's neighbourhood one
 *   survivor set and the rest another, which takes C_v ≥ 2t − m corrupt neighbours. Required: C_v < 2t − m;
 * - connectivity: the honest survivors of the ring graph stay connected: no run of k/2 ring-consecutive parties that
 *   are all corrupt or dropped.
 *
 * On the complete graph C_v ≤ ⌊γ·n⌋ for sure; on the sparse graph (a ring order drawn from a seed the server cannot
 * steer) C_v is hypergeometric, bounded by the Chernoff–Hoeffding bound, and a union bound over the n parties must stay
 * under 2^−(σ + g) (σ the failure exponent, g the grinding allowance). Every formula is the Python one, in the same
 * floating-point operations (`Math.log`, `Math.log2`), so both SDKs compute the same floor (tests/vectors/
 * safety_floor.json). */

import { ConfigError } from "./errors.js";

export const DEFAULT_CORRUPT_FRACTION = 1 / 3;
/** The share of a cohort that may drop out (the server's default `cohort.dropout_allowance`). */
export const DEFAULT_DROPOUT_FRACTION = 0.15;
export const SECURITY_BITS = 40;
export const GRINDING_BITS = 40;
/** The server plans its threshold so that a cohort aborts for lack of survivors with probability ≤ 2^−20. */
export const CORRECTNESS_BITS = 20;

/** A cohort's threat model, graph, degree or threshold is below the floor this party computed for itself. */
export class UnsafeParametersError extends ConfigError {}

const isNumber = (v: unknown): v is number => typeof v === "number" && !Number.isNaN(v);

/** What a device assumes about its cohort: γ (corrupt fraction, the server's own identities counted), δ (the fraction
 * that may drop out), σ (failure exponent) and g (grinding allowance). ConfigError naming the field otherwise. */
export class Assumptions {
  readonly corruptFraction: number;
  readonly dropoutFraction: number;
  readonly securityBits: number;
  readonly grindingBits: number;

  constructor(o: { corruptFraction?: number; dropoutFraction?: number; securityBits?: number; grindingBits?: number } = {}) {
    const or = <T>(v: T | undefined, d: T): T => (v === undefined ? d : v);
    const corruptFraction = or(o.corruptFraction, DEFAULT_CORRUPT_FRACTION);
    const dropoutFraction = or(o.dropoutFraction, DEFAULT_DROPOUT_FRACTION);
    const securityBits = or(o.securityBits, SECURITY_BITS);
    const grindingBits = or(o.grindingBits, GRINDING_BITS);
    for (const [name, value] of [["corruptFraction", corruptFraction], ["dropoutFraction", dropoutFraction]] as const) {
      if (!isNumber(value) || !(value >= 0 && value < 1)) throw new ConfigError(`${name}: must be a number in [0, 1), got ${JSON.stringify(value) ?? String(value)}`);
    }
    if (corruptFraction + dropoutFraction >= 1) throw new ConfigError("corruptFraction + dropoutFraction: must be below 1");
    for (const [name, value] of [["securityBits", securityBits], ["grindingBits", grindingBits]] as const) {
      if (!(typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= 256)) {
        throw new ConfigError(`${name}: must be an integer in [0, 256], got ${JSON.stringify(value) ?? String(value)}`);
      }
    }
    if (securityBits < 1) throw new ConfigError("securityBits: must be at least 1");
    this.corruptFraction = corruptFraction;
    this.dropoutFraction = dropoutFraction;
    this.securityBits = securityBits;
    this.grindingBits = grindingBits;
  }

  get bits(): number {
    return this.securityBits + this.grindingBits;
  }

  /** A key for the caches (the four numbers, exactly). */
  get key(): string {
    return `${this.corruptFraction}/${this.dropoutFraction}/${this.securityBits}/${this.grindingBits}`;
  }
}

const DEFAULT = new Assumptions();

/** The least degree (n − 1: the complete graph) and the least share threshold at that degree. */
export interface Floor {
  n: number;
  degree: number;
  threshold: number;
  complete: boolean;
}

const makeFloor = (n: number, degree: number, threshold: number): Floor => ({ n, degree, threshold, complete: degree >= n - 1 });

/** D(a ‖ p) in nats for Bernoulli parameters, a > p. */
function kl(a: number, p: number): number {
  if (p <= 0) return Infinity;
  if (a >= 1) return -Math.log(p);
  return a * Math.log(a / p) + (1 - a) * Math.log((1 - a) / (1 - p));
}

/** log2 of the Chernoff–Hoeffding bound on P[X ≥ s], X a sum of k draws of mean p: 0 (bound 1) when s ≤ p·k, −∞ when
 * s > k. */
export function log2Tail(k: number, s: number, p: number): number {
  if (s > k) return -Infinity;
  if (s <= p * k) return 0;
  return (-k * kl(s / k, p)) / Math.log(2);
}

export function corruptCount(n: number, a: Assumptions = DEFAULT): number {
  return Math.floor(a.corruptFraction * n + 1e-9);
}

function checked(n: number, degree?: number): void {
  if (!(typeof n === "number" && Number.isInteger(n) && n >= 2)) throw new ConfigError(`n: must be an integer ≥ 2, got ${JSON.stringify(n) ?? String(n)}`);
  if (degree !== undefined && !(typeof degree === "number" && Number.isInteger(degree) && degree >= 1 && degree <= n - 1)) {
    throw new ConfigError(`degree: must be an integer in [1, n − 1], got ${JSON.stringify(degree) ?? String(degree)}`);
  }
}

const CACHE_MAX = 4096;

function cached<T>(cache: Map<string, T>, key: string, compute: () => T): T {
  const hit = cache.get(key);
  if (hit !== undefined) return hit;
  const value = compute();
  if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value as string);
  cache.set(key, value);
  return value;
}

const thresholds = new Map<string, number | null>();

/** The least share threshold t per closed neighbourhood (m = degree + 1) with which no honest party has 2t − m corrupt
 * neighbours (complete graph: for sure; sparse: with probability ≥ 1 − 2^−(σ+g)); null when no t ≤ m is safe. */
export function thresholdFloor(n: number, degree: number, a: Assumptions = DEFAULT): number | null {
  checked(n, degree);
  return cached(thresholds, `${n}/${degree}/${a.key}`, () => {
    const m = degree + 1;
    const corrupt = corruptCount(n, a);
    if (degree >= n - 1) {
      const t = Math.floor((m + corrupt) / 2) + 1;
      return t <= m ? t : null;
    }
    const p = Math.min(1, corrupt / (n - 1));
    const budget = -a.bits - Math.log2(n);
    let lo = Math.floor(m / 2) + 1;
    let hi = m; // t = m is always safe on a sparse graph: 2t − m = k + 1 > k
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      if (log2Tail(degree, 2 * mid - m, p) <= budget) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  });
}

/** Whether the honest survivors of a ring graph of this degree stay connected with probability ≥ 1 − 2^−(σ+g): no run
 * of degree/2 ring-consecutive parties that are all corrupt or dropped (union over the n positions). */
export function connected(n: number, degree: number, a: Assumptions = DEFAULT): boolean {
  checked(n, degree);
  if (degree >= n - 1) return true;
  const bad = a.corruptFraction + a.dropoutFraction;
  return bad > 0 ? Math.log2(n) + Math.floor(degree / 2) * Math.log2(bad) <= -a.bits : true;
}

const floors = new Map<string, Floor>();

/** The least even degree whose ring graph is `connected` (else the complete graph, n − 1) and the least threshold at
 * that degree. */
export function safetyFloor(n: number, a: Assumptions = DEFAULT): Floor {
  checked(n);
  return cached(floors, `${n}/${a.key}`, () => {
    const bad = a.corruptFraction + a.dropoutFraction;
    let degree = n - 1;
    if (bad > 0) {
      const half = Math.ceil((a.bits + Math.log2(n)) / -Math.log2(bad));
      if (2 * half < n - 1) degree = Math.max(2, 2 * half);
    } else {
      degree = Math.min(2, n - 1);
    }
    const t = thresholdFloor(n, degree, a);
    if (t === null) throw new Error("the floor's own degree has a safe threshold");
    return makeFloor(n, degree, t);
  });
}

/** Python's `format(x, ".3g")`: three significant digits, trailing zeros dropped, exponent form outside [1e-4, 1e3). */
export function formatG(x: number, precision = 3): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [mantissa, exp] = x.toExponential(precision - 1).split("e");
  const e = Number(exp);
  const strip = (s: string) => (s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s);
  if (e < -4 || e >= precision) return `${strip(mantissa)}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  return strip(x.toFixed(Math.max(0, precision - 1 - e)));
}

/** Refuse (`UnsafeParametersError`, naming what is short: the message starts with `degree:` or `threshold:`) a cohort
 * below the floor; returns the floor.
 *
 * `untrusted`: neighbours this party knows are not vouched for (no valid issuer token when it pins issuer keys): they
 * are certainly corrupt, so they alone must stay below 2t − m, and on the complete graph they count as the corrupt
 * parties when there are more of them than ⌊γ·n⌋. */
export function check(n: number, degree: number, threshold: number, a: Assumptions = DEFAULT, untrusted = 0): Floor {
  checked(n, degree);
  const floor = safetyFloor(n, a);
  const complete = degree >= n - 1;
  if (!complete && degree < floor.degree) {
    throw new UnsafeParametersError(
      `degree: ${degree} neighbours in a cohort of ${n}, below this device's floor of ${floor.degree} ` +
        `(γ=${formatG(a.corruptFraction)}, dropout ${formatG(a.dropoutFraction)}, 2^-${a.securityBits} with ` +
        `${a.grindingBits} bits of grinding)`,
    );
  }
  const m = degree + 1;
  let least = thresholdFloor(n, degree, a);
  if (complete && untrusted > corruptCount(n, a)) least = Math.floor((m + untrusted) / 2) + 1;
  if (least === null || least > m) throw new UnsafeParametersError(`threshold: no threshold is safe for a neighbourhood of ${m} in a cohort of ${n}`);
  if (threshold < least) {
    throw new UnsafeParametersError(
      `threshold: ${threshold} of a neighbourhood of ${m} (cohort of ${n}), below this device's floor of ${least}: ` +
        `a server with ${2 * threshold - m} corrupt neighbours could show two survivor sets`,
    );
  }
  if (untrusted >= 2 * threshold - m) {
    throw new UnsafeParametersError(
      `threshold: ${untrusted} neighbours hold no valid issuer token, at least 2t − m = ${2 * threshold - m}: ` +
        "they alone could sign two survivor sets",
    );
  }
  return floor;
}

/** The largest threshold every neighbourhood still reaches when parties drop independently at `dropout`, with
 * probability ≥ 1 − 2^−bits (the complete graph: the survivors of ⌈dropout·n⌉ drops). */
export function liveThreshold(n: number, degree: number, dropout: number, bits = CORRECTNESS_BITS): number {
  checked(n, degree);
  const m = degree + 1;
  if (degree >= n - 1) return n - Math.ceil(dropout * n - 1e-9);
  const budget = -bits - Math.log2(n);
  let t = m;
  while (t > 1 && log2Tail(degree, m - t + 1, dropout) > budget) t--;
  return t;
}

const plans = new Map<string, Floor>();

/** The server's choice: the least even degree at or above the device floor whose safe threshold the cohort still
 * reaches at `dropout` (else the complete graph), with that safe threshold. */
export function plan(n: number, dropout = DEFAULT_DROPOUT_FRACTION, a: Assumptions = DEFAULT, correctnessBits = CORRECTNESS_BITS): Floor {
  return cached(plans, `${n}/${dropout}/${a.key}/${correctnessBits}`, () => {
    const floor = safetyFloor(n, a);
    for (let degree = floor.degree; degree < n - 1; degree += 2) {
      const t = thresholdFloor(n, degree, a);
      if (t !== null && t <= liveThreshold(n, degree, dropout, correctnessBits)) return makeFloor(n, degree, t);
    }
    const t = thresholdFloor(n, n - 1, a);
    if (t === null) throw new ConfigError(`no safe threshold for a complete cohort of ${n} at γ=${formatG(a.corruptFraction)}`);
    return makeFloor(n, n - 1, t);
  });
}
