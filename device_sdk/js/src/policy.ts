/** The device's own privacy policy (device_sdk/policy.py): what the app allows, checked on the device before any
 * local data is read, which the server cannot change. The noise floor is recomputed from the query's public
 * (ε, δ, rounds, t_min) and the kind's own sensitivity bound (dp/floor.ts); the device then refuses to unmask for
 * fewer than t_min survivors. Field names mirror the Python SDK's in camelCase.
 *
 * `verifyCohort` (on by default) checks the cohort, not the server's word: before its masked input leaves, the device
 * verifies that every peer it exchanges shares with signed its keys and agreed to this session and to the task digest
 * the device computed itself — its share opens under the channel key bound to them (a peer shown another task, cohort
 * size or model makes it refuse with `task_mismatch`) — and counts toward `minCohort` only distinct members it
 * verified (`cohort_unverified` below it). Off: the device
 * signs but verifies nothing, and `minCohort` compares with the cohort size the server announces (docs/secagg.md,
 * "Devices that check the server").
 *
 * `issuerKeys` pins the identity-token issuer's keys (base64 SubjectPublicKeyInfo DER, as `GET /v1/issuer/keys` lists
 * them; docs/identities.md): the device then asks the first of them for its own token at enrolment, and with
 * `verifyCohort` counts toward `minCohort` only members whose token verifies under a pinned key as well as their
 * signature.
 *
 * The public transparency log (docs/transparency.md): `logKeys` pins the log's Ed25519 keys (base64, raw 32 bytes);
 * empty, the device pins the key `GET /v1/log/key` names on first use and keeps it in its store. `requireLog` (on by
 * default) refuses, with `not_logged`, an assignment that comes without a log proof; one whose proof does not check is
 * refused whatever it says. `witnessKeys` pins witnesses: the proof must then carry a head cosigned by
 * `witnessQuorum` distinct pinned witnesses within `witnessMaxAgeS` seconds, which the log's head extends.
 *
 * The safety floor (secagg/floor.ts; docs/secagg.md, "The safety floor"): the device refuses (`unsafe_parameters`) any
 * cohort without the consistency round (the active model) or whose neighbourhood degree or share threshold is below
 * the floor it computes for the cohort's n from its own `corruptFraction` (γ, default ⅓: at most γ·n members collude
 * with the server, its own invented identities counted) and `dropoutFraction` (default 0.15), at 2^-40 with 40 bits of
 * grinding; no server setting lowers it. The secagg session checks it again once the members list arrives, counting
 * neighbours without a valid issuer token as corrupt when issuer keys are pinned. */

import { b64decode } from "./bytes.js";
import { TrustedKeys, trustedKeys } from "./identityToken.js";
import { perDeviceFloor } from "./dp/floor.js";
import { Assignment, RefusalReason } from "./envelope.js";
import { TypedTask, kindOf } from "./kinds/registry.js";
import { QueryHistory, DAY_S } from "./ledger.js";
import { SecAggConfig } from "./secagg/config.js";
import * as safety from "./secagg/floor.js";

export const DEFAULT_MAX_DELTA = 1e-5;
const FLOOR_TOLERANCE = 1e-9;

export class PolicyError extends Error {}

export interface DevicePolicyOptions {
  /** Collections the server may query (null: any); an object {collection: [kinds] | null} also limits the kinds. */
  allowedSources?: string[] | Record<string, string[] | null> | null;
  requireNoise?: boolean;
  maxEpsilonPerQuery?: number | null;
  maxEpsilonPerDay?: number | null;
  minCohort?: number | null;
  minSurvivors?: number | null;
  maxDeltaPerQuery?: number | null;
  requireProofs?: boolean;
  maxContributionsPerDay?: number | null;
  /** Verify the cohort's signatures over its keys for this session and task before sending (default true). */
  verifyCohort?: boolean;
  /** The identity-token issuer keys the app pins (base64 SubjectPublicKeyInfo DER; null: tokens are not checked). */
  issuerKeys?: string[] | null;
  /** The transparency log's Ed25519 public keys the app pins (base64, 32 bytes; empty: pinned on first use). */
  logKeys?: string[];
  /** Refuse (`not_logged`) an assignment that comes without a log proof (default true). */
  requireLog?: boolean;
  /** Witnesses' Ed25519 public keys (base64, 32 bytes): a log head they cosigned is required (empty: none). */
  witnessKeys?: string[];
  /** Distinct pinned witnesses whose fresh cosignatures are required (default 1). */
  witnessQuorum?: number;
  /** The oldest cosignature that counts, in seconds (default 3600). */
  witnessMaxAgeS?: number;
  /** γ: the share of any cohort the device assumes may collude with the server (its invented identities counted), in
   * [0, 1) (default ⅓); raising it raises the safety floor. */
  corruptFraction?: number;
  /** The share of any cohort the device assumes may drop out, in [0, 1) (default 0.15); γ + it must stay below 1. */
  dropoutFraction?: number;
}

/** At most this many pinned log or witness keys. */
export const MAX_PINNED_LOG_KEYS = 16;

const KNOWN = ["allowedSources", "requireNoise", "maxEpsilonPerQuery", "maxEpsilonPerDay", "minCohort", "minSurvivors", "maxDeltaPerQuery", "requireProofs", "maxContributionsPerDay", "verifyCohort", "issuerKeys", "logKeys", "requireLog", "witnessKeys", "witnessQuorum", "witnessMaxAgeS", "corruptFraction", "dropoutFraction"];

/** Base64 Ed25519 public keys (32 bytes each), validated: PolicyError naming the field and the index. */
function ed25519Keys(v: unknown, name: string): Uint8Array[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw new PolicyError(`${name}: a list of base64 Ed25519 public keys (32 bytes), got ${JSON.stringify(v)}`);
  if (v.length > MAX_PINNED_LOG_KEYS) throw new PolicyError(`${name}: at most ${MAX_PINNED_LOG_KEYS} keys, got ${v.length}`);
  return v.map((k, i) => {
    try {
      return b64decode(k as string, `${name}[${i}]`, 32);
    } catch (exc) {
      throw new PolicyError(`${(exc as Error).message} (a base64 Ed25519 public key of 32 bytes)`);
    }
  });
}

export class DevicePolicy {
  readonly allowedSources: string[] | Record<string, string[] | null> | null;
  readonly requireNoise: boolean;
  readonly maxEpsilonPerQuery: number | null;
  readonly maxEpsilonPerDay: number | null;
  readonly minCohort: number | null;
  readonly minSurvivors: number | null;
  readonly maxDeltaPerQuery: number | null;
  readonly requireProofs: boolean;
  readonly maxContributionsPerDay: number | null;
  readonly verifyCohort: boolean;
  readonly issuerKeys: string[] | null;
  readonly logKeys: string[];
  readonly requireLog: boolean;
  readonly witnessKeys: string[];
  readonly witnessQuorum: number;
  readonly witnessMaxAgeS: number;
  readonly corruptFraction: number;
  readonly dropoutFraction: number;
  private readonly assumptions: safety.Assumptions;
  private readonly logKeyRaw: Uint8Array[];
  private readonly witnessKeyRaw: Uint8Array[];
  private readonly issuerSpkis: Uint8Array[] | null;
  private trusted: Promise<TrustedKeys> | null = null;
  private readonly sources: Map<string, Set<string> | null> | null;

  constructor(o: DevicePolicyOptions = {}) {
    for (const k of Object.keys(o)) if (!KNOWN.includes(k)) throw new PolicyError(`${k}: not a DevicePolicy field (known: ${KNOWN.join(", ")})`);
    try {
      this.assumptions = new safety.Assumptions({ corruptFraction: o.corruptFraction, dropoutFraction: o.dropoutFraction });
    } catch (exc) {
      throw new PolicyError((exc as Error).message);
    }
    this.corruptFraction = this.assumptions.corruptFraction;
    this.dropoutFraction = this.assumptions.dropoutFraction;
    this.allowedSources = o.allowedSources ?? null;
    this.sources = normaliseSources(this.allowedSources);
    for (const name of ["requireNoise", "requireProofs", "verifyCohort", "requireLog"] as const) {
      if (o[name] !== undefined && typeof o[name] !== "boolean") throw new PolicyError(`${name}: must be true or false, got ${JSON.stringify(o[name])}`);
    }
    this.requireNoise = o.requireNoise ?? false;
    this.requireProofs = o.requireProofs ?? false;
    this.verifyCohort = o.verifyCohort ?? true;
    this.requireLog = o.requireLog ?? true;
    this.logKeyRaw = ed25519Keys(o.logKeys, "logKeys");
    this.witnessKeyRaw = ed25519Keys(o.witnessKeys, "witnessKeys");
    this.logKeys = o.logKeys === undefined ? [] : [...o.logKeys];
    this.witnessKeys = o.witnessKeys === undefined ? [] : [...o.witnessKeys];
    const q = o.witnessQuorum ?? 1;
    if (!(typeof q === "number" && Number.isInteger(q) && q >= 1)) throw new PolicyError(`witnessQuorum: must be a positive integer, got ${JSON.stringify(o.witnessQuorum)}`);
    const distinct = new Set(this.witnessKeys).size;
    if (distinct && q > distinct) throw new PolicyError(`witnessQuorum: ${q} is more than the ${distinct} distinct witnessKeys pinned`);
    this.witnessQuorum = q;
    const age = o.witnessMaxAgeS ?? 3600;
    if (!(typeof age === "number" && Number.isFinite(age) && age > 0)) throw new PolicyError(`witnessMaxAgeS: must be a positive finite number of seconds, got ${JSON.stringify(o.witnessMaxAgeS)}`);
    this.witnessMaxAgeS = age;
    for (const name of ["maxEpsilonPerQuery", "maxEpsilonPerDay", "maxDeltaPerQuery"] as const) {
      const v = o[name];
      if (v != null && !(typeof v === "number" && Number.isFinite(v) && v > 0)) throw new PolicyError(`${name}: must be a positive finite number or null, got ${JSON.stringify(v)}`);
    }
    if (o.maxDeltaPerQuery != null && o.maxDeltaPerQuery >= 1) throw new PolicyError(`maxDeltaPerQuery: must be below 1, got ${o.maxDeltaPerQuery}`);
    for (const name of ["minCohort", "minSurvivors", "maxContributionsPerDay"] as const) {
      const v = o[name];
      if (v != null && !(typeof v === "number" && Number.isInteger(v) && v >= 1)) throw new PolicyError(`${name}: must be a positive integer or null, got ${JSON.stringify(v)}`);
    }
    this.maxEpsilonPerQuery = o.maxEpsilonPerQuery ?? null;
    this.maxEpsilonPerDay = o.maxEpsilonPerDay ?? null;
    this.maxDeltaPerQuery = o.maxDeltaPerQuery ?? null;
    this.minCohort = o.minCohort ?? null;
    this.minSurvivors = o.minSurvivors ?? null;
    this.maxContributionsPerDay = o.maxContributionsPerDay ?? null;
    const ik = o.issuerKeys ?? null;
    if (ik !== null && !(Array.isArray(ik) && ik.length > 0)) throw new PolicyError(`issuerKeys: a non-empty list of base64 SubjectPublicKeyInfo DER keys or null, got ${JSON.stringify(ik)}`);
    this.issuerSpkis = ik === null ? null : ik.map((k, i) => {
      try {
        return b64decode(k, `issuerKeys[${i}]`);
      } catch (exc) {
        throw new PolicyError((exc as Error).message);
      }
    });
    this.issuerKeys = ik === null ? null : [...ik];
  }

  /** The pinned log keys' raw 32 bytes (empty: pinned on first use). */
  get logKeyBytes(): Uint8Array[] {
    return this.logKeyRaw.map((k) => Uint8Array.from(k));
  }

  /** The pinned witness keys' raw 32 bytes (empty: witnesses are not required). */
  get witnessKeyBytes(): Uint8Array[] {
    return this.witnessKeyRaw.map((k) => Uint8Array.from(k));
  }

  /** The pinned issuer keys' SubjectPublicKeyInfo DER, in the app's order (null: none pinned). */
  get issuerKeySpkis(): Uint8Array[] | null {
    return this.issuerSpkis === null ? null : this.issuerSpkis.map((k) => Uint8Array.from(k));
  }

  /** The pinned issuer keys, imported once (null: none pinned); a key that is not an RSA-2048+ SubjectPublicKeyInfo
   * raises PolicyError naming it. */
  async trustedIssuerKeys(): Promise<TrustedKeys | null> {
    const spkis = this.issuerSpkis;
    if (spkis === null) return null;
    this.trusted ??= Promise.all(spkis.map(async (k, i) => {
      try {
        return await trustedKeys([k]);
      } catch (exc) {
        throw new PolicyError(`issuerKeys[${i}]: ${(exc as Error).message}`);
      }
    })).then((maps) => new Map(maps.flatMap((m) => [...m])));
    return this.trusted;
  }

  get capsEpsilon(): boolean {
    return this.maxEpsilonPerQuery !== null || this.maxEpsilonPerDay !== null;
  }

  get deltaCap(): number | null {
    return this.maxDeltaPerQuery ?? (this.capsEpsilon ? DEFAULT_MAX_DELTA : null);
  }

  /** Distinct members (this device included) whose signatures for the session and task the device must verify before
   * it sends its masked input: `minCohort` when `verifyCohort` is on. */
  get minVerified(): number | null {
    return this.verifyCohort ? this.minCohort : null;
  }

  /** What the device assumes when it computes its safety floor (secagg/floor.ts). */
  get floorAssumptions(): safety.Assumptions {
    return this.assumptions;
  }

  get survivorFloor(): number | null {
    return this.minSurvivors ?? this.minCohort;
  }

  allowsSource(source: string): boolean {
    return this.sources === null || this.sources.has(source);
  }

  allowsKind(source: string, kind: string): boolean {
    if (this.sources === null) return true;
    const kinds = this.sources.get(source);
    return kinds == null || kinds.has(kind);
  }
}

function normaliseSources(raw: unknown): Map<string, Set<string> | null> | null {
  if (raw == null) return null;
  if (typeof raw === "string") throw new PolicyError(`allowedSources: a list of names or an object, not the string ${JSON.stringify(raw)} (use [${JSON.stringify(raw)}])`);
  if (Array.isArray(raw)) {
    if (!raw.every((n) => typeof n === "string" && n)) throw new PolicyError(`allowedSources: collection names must be non-empty strings, got ${JSON.stringify(raw)}`);
    return new Map(raw.map((n) => [n as string, null]));
  }
  if (typeof raw === "object") {
    const out = new Map<string, Set<string> | null>();
    for (const [source, kinds] of Object.entries(raw as Record<string, unknown>)) {
      if (!source) throw new PolicyError("allowedSources: collection names must be non-empty strings");
      if (kinds !== null && !(Array.isArray(kinds) && kinds.every((k) => typeof k === "string"))) {
        throw new PolicyError(`allowedSources[${JSON.stringify(source)}]: a list of kind names or null, got ${JSON.stringify(kinds)}`);
      }
      out.set(source, kinds === null ? null : new Set(kinds as string[]));
    }
    return out;
  }
  throw new PolicyError(`allowedSources: a list of names or an object, got ${JSON.stringify(raw)}`);
}

export interface Refusal {
  reason: RefusalReason;
  detail: string;
  queryId: string;
  cohortId: string;
  kind: string;
  source: string;
}

export interface Decision {
  epsilonCharge: number | null;
  deltaCharge: number | null;
  minSurvivors: number | null;
  declaredBounds: [number, number] | null;
  noiseFloor: number | null;
  proofs: boolean;
}

export function refuse(a: Assignment, reason: RefusalReason, detail: string): Refusal {
  return { reason, detail, queryId: a.query_id, cohortId: a.cohort_id, kind: a.kind, source: a.source };
}

export const isRefusal = (d: Refusal | Decision): d is Refusal => "reason" in d;

/** Seconds to wait before checking in again when a daily limit is reached (null: go ahead). */
export function checkinPause(policy: DevicePolicy, spentEpsilon: number, contributions: number, oldestContribution: number | null, oldestCharge: number | null, at: number): number | null {
  let wait: number | null = null;
  if (policy.maxContributionsPerDay !== null && contributions >= policy.maxContributionsPerDay) wait = (oldestContribution ?? at) + DAY_S - at;
  if (policy.maxEpsilonPerDay !== null && spentEpsilon >= policy.maxEpsilonPerDay * (1 - 1e-12)) {
    const until = (oldestCharge ?? at) + DAY_S - at;
    wait = wait === null ? until : Math.max(wait, until);
  }
  return wait === null ? null : Math.max(wait, 1);
}

function sortedJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(sortedJson).join(",")}]`;
  if (v && typeof v === "object") return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${sortedJson((v as Record<string, unknown>)[k])}`).join(",")}}`;
  return JSON.stringify(v);
}

/** Check an assignment against the policy, the kind's own bounds (from `task`, the assignment's task as parsed when it
 * was admitted) and the ledger, before any data is read. */
export function decide(policy: DevicePolicy, a: Assignment, task: TypedTask, history: QueryHistory, spentToday: number, contributionsToday: number, optedOut: boolean): Refusal | Decision {
  const kind = kindOf(task);
  if (optedOut) return refuse(a, "opted_out", `the user opted out of collection ${JSON.stringify(a.source)}`);
  if (!policy.allowsSource(a.source)) return refuse(a, "source_not_allowed", `collection ${JSON.stringify(a.source)} is not in this device's allowedSources`);
  if (!policy.allowsKind(a.source, a.kind)) return refuse(a, "kind_not_allowed", `kind ${JSON.stringify(a.kind)} is not allowed on collection ${JSON.stringify(a.source)}`);
  let cfg: SecAggConfig;
  try {
    cfg = SecAggConfig.fromDict(a.secagg);
  } catch (exc) {
    return refuse(a, "invalid_assignment", `secagg: ${(exc as Error).message}`);
  }
  if (a.threat_model !== "active" || cfg.threatModel !== "active") {
    const model = cfg.threatModel !== "active" ? cfg.threatModel : a.threat_model;
    return refuse(a, "unsafe_parameters", `threat model ${model}: no consistency round, so the server could show parts of the cohort different survivor sets; this device requires the active model`);
  }
  try {
    safety.check(cfg.n, cfg.resolvedDegree, cfg.shareThreshold, policy.floorAssumptions);
  } catch (exc) {
    if (exc instanceof safety.UnsafeParametersError) return refuse(a, "unsafe_parameters", exc.message);
    throw exc;
  }
  const p = a.privacy;
  const mechanism = a.noise ? a.noise.mechanism : "none";
  if (p && p.mechanism !== mechanism) return refuse(a, "privacy_unverifiable", `the noise block says ${mechanism} but the query's privacy says ${p.mechanism}`);
  if (policy.requireNoise && mechanism === "none") return refuse(a, "noise_required", "the assignment adds no noise (mechanism none) and this device requires it");
  const proofs = p !== null && p.validation === "proofs";
  if (policy.requireProofs && kind.supportsProofs && !proofs) return refuse(a, "proofs_required", `kind ${a.kind} supports validity proofs and this device requires them`);
  if (policy.minCohort !== null && cfg.n < policy.minCohort) return refuse(a, "cohort_too_small", `cohort of ${cfg.n} devices, below this device's minimum of ${policy.minCohort}`);
  if (policy.maxContributionsPerDay !== null && contributionsToday >= policy.maxContributionsPerDay) {
    return refuse(a, "participation_cap", `${contributionsToday} contributions in the last 24 h (maxContributionsPerDay ${policy.maxContributionsPerDay})`);
  }
  let survivors = policy.survivorFloor;
  if (mechanism === "none") {
    if (policy.maxEpsilonPerQuery !== null) return refuse(a, "epsilon_per_query", "no noise: the query's ε is unbounded (maxEpsilonPerQuery is set)");
    if (policy.maxEpsilonPerDay !== null) return refuse(a, "epsilon_per_day", "no noise: the query's ε is unbounded (maxEpsilonPerDay is set)");
    return { epsilonCharge: null, deltaCharge: null, minSurvivors: survivors, declaredBounds: null, noiseFloor: null, proofs };
  }
  const noise = a.noise as NonNullable<Assignment["noise"]>;
  if (!p || p.epsilon === null || p.delta === null || p.t_min === null) return refuse(a, "privacy_unverifiable", "noise without the query's (ε, δ, t_min): the noise cannot be checked");
  if (cfg.n < p.t_min) return refuse(a, "cohort_too_small", `cohort of ${cfg.n} devices, below the t_min ${p.t_min} the noise is calibrated for`);
  if (a.round >= p.rounds) return refuse(a, "privacy_unverifiable", `round ${a.round} is beyond the ${p.rounds} rounds the query's ε covers`);
  const spent = [...history.weights.values()].reduce((x, y) => x + y, 0) + (history.weights.has(a.round) ? 0 : p.weight);
  if (spent > p.rounds * (1 + 1e-9)) {
    return refuse(a, "privacy_unverifiable", `round ${a.round} (weight ${p.weight}) would bring the rounds this device contributed to to ${spent} unit rounds, beyond the ${p.rounds} the query's ε covers`);
  }
  // the query's, not the round's or the cohort's: t_min is the cohort's t_c (its shares' size, checked below)
  const { l1_sensitivity: _l1, l2_sensitivity: _l2, weight: _w, t_min: _t, ...publicParams } = p;
  if (history.privacy !== null) {
    const { weight: _fw, t_min: _ft, ...first } = history.privacy;
    if (sortedJson(first) !== sortedJson(publicParams)) return refuse(a, "privacy_unverifiable", "the query's privacy parameters changed since this device's first contribution");
  }
  const own = kind.taskSensitivity(task.task);
  const bounds: [number, number] | null = own === null ? [p.l1_sensitivity, p.l2_sensitivity] : null;
  const l2 = own === null ? p.l2_sensitivity : own[1];
  let floor: number;
  try {
    floor = perDeviceFloor(mechanism, p.epsilon, p.delta, p.rounds, p.t_min, l2, noise.encoding_scale, p.weight);
  } catch (exc) {
    return refuse(a, "privacy_unverifiable", `noise floor: ${(exc as Error).message}`);
  }
  if (noise.scale < floor * (1 - FLOOR_TOLERANCE)) {
    const what = mechanism === "discrete_gaussian" ? "σ" : "μ";
    return refuse(a, "noise_below_floor", `per-device noise ${what} ${noise.scale.toPrecision(6)} is below ${floor.toPrecision(6)}, the least that (ε=${p.epsilon}, δ=${p.delta}) over ${p.rounds} rounds at t_min=${p.t_min} allows for sensitivity ${l2}`);
  }
  const deltaCap = policy.deltaCap;
  if (deltaCap !== null && p.delta > deltaCap * (1 + 1e-12)) return refuse(a, "delta_per_query", `δ=${p.delta} exceeds this device's ${deltaCap}`);
  if (policy.maxEpsilonPerQuery !== null && p.epsilon > policy.maxEpsilonPerQuery * (1 + 1e-12)) {
    return refuse(a, "epsilon_per_query", `ε=${p.epsilon} exceeds this device's maxEpsilonPerQuery ${policy.maxEpsilonPerQuery}`);
  }
  const layersNeeded = (history.perRound.get(a.round) ?? 0) + 1;
  const newLayers = Math.max(0, layersNeeded - history.layersCharged);
  const charge = p.epsilon * newLayers;
  if (policy.maxEpsilonPerDay !== null && spentToday + charge > policy.maxEpsilonPerDay * (1 + 1e-12)) {
    return refuse(a, "epsilon_per_day", `ε=${charge} more would bring the last 24 h to ${spentToday + charge}, above maxEpsilonPerDay ${policy.maxEpsilonPerDay}`);
  }
  survivors = Math.max(survivors ?? 0, p.t_min);
  return { epsilonCharge: charge, deltaCharge: p.delta * newLayers, minSurvivors: survivors, declaredBounds: bounds, noiseFloor: floor, proofs };
}
