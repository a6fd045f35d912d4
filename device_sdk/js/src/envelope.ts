/** The device ↔ server envelope (queries/envelope.py): protocol version, request signing and the assignment's shape,
 * validated field by field (unknown fields are refused, as the server's pydantic models do). */

import { b64decode, concat, hex, utf8 } from "./bytes.js";
import { unsafeIntegerLiterals } from "./taskDigest.js";
import { sha256 } from "./webcrypto.js";

export const PROTOCOL_VERSION = 3;
export const SIGNING_DOMAIN = "fa-device-request/v1";
export const MAX_LONG_POLL_S = 60;
export const HDR_PROTOCOL = "X-FA-Protocol";
export const HDR_DEVICE = "X-FA-Device";
export const HDR_TIMESTAMP = "X-FA-Timestamp";
export const HDR_NONCE = "X-FA-Nonce";
export const HDR_SIGNATURE = "X-FA-Signature";
export const HDR_PHASE = "X-FA-Phase";

export const REFUSAL_REASONS = [
  "source_not_allowed", "kind_not_allowed", "opted_out", "noise_required", "proofs_required", "epsilon_per_query",
  "delta_per_query", "epsilon_per_day", "participation_cap", "cohort_too_small", "survivors_below_minimum",
  "noise_below_floor", "privacy_unverifiable", "contribution_exceeds_bound", "not_eligible",
  "invalid_assignment", "task_mismatch", "cohort_unverified", "not_logged", "unsafe_parameters", "inconsistent_survivors",
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** The exact bytes a device signs: domain, METHOD, path?query, timestamp, nonce, hex(sha256(body)), newline-joined. */
export async function signingPayload(method: string, pathQs: string, timestamp: string, nonce: string, body: Uint8Array): Promise<Uint8Array> {
  const lines = [SIGNING_DOMAIN, method.toUpperCase(), pathQs, timestamp, nonce, hex(await sha256(body))];
  return utf8(lines.join("\n"));
}

/** sha256("fa-device-id/v1" ‖ public key), first 32 hex characters. */
export async function deviceIdFor(publicKey: Uint8Array): Promise<string> {
  return hex(await sha256(concat(utf8("fa-device-id/v1"), publicKey))).slice(0, 32);
}

export type Mechanism = "discrete_gaussian" | "skellam" | "none";

export interface NoiseBlock {
  mechanism: Mechanism;
  scale: number;
  std: number | null;
  encoding_scale: number;
}

export interface ValidationBlock {
  mode: "proofs";
  noise_bound: number;
  limbs: number;
  limb_bits: number;
}

export interface AssignmentPrivacy {
  mechanism: Mechanism;
  epsilon: number | null;
  delta: number | null;
  rounds: number;
  t_min: number | null;
  l1_sensitivity: number;
  l2_sensitivity: number;
  weight: number;
  validation: "proofs" | "none";
}

export interface Assignment {
  query_id: string;
  round: number;
  cohort_id: string;
  party_id: number;
  kind: string;
  source: string;
  task: Record<string, unknown>;
  secagg: Record<string, unknown>;
  /** Always `active` from this server (the consistency round); a device refuses anything else (`unsafe_parameters`). */
  threat_model: "semi_honest" | "active";
  first_phase: number;
  phase_timeout_s: number;
  noise: NoiseBlock | null;
  validation: ValidationBlock | null;
  privacy: AssignmentPrivacy | null;
  /** The query's spec as stored and shown to analysts: part of the task digest every device computes. */
  spec?: Record<string, unknown> | null;
  server_url: string | null;
}

const RAW = new WeakMap<Assignment, { object: Record<string, unknown>; unsafeIntegers: ReadonlySet<number> | null }>();

/** The JSON object an assignment was parsed from, as received (what its task digest is computed from); for an
 * assignment built by hand rather than by `parseAssignment`, the assignment itself. */
export function rawAssignment(a: Assignment): Record<string, unknown> {
  return RAW.get(a)?.object ?? (a as unknown as Record<string, unknown>);
}

/** The integer literals beyond ±(2^53 − 1) of the JSON text the assignment came in (taskDigest.ts
 * `unsafeIntegerLiterals`), or null when the text is unknown. */
export function assignmentUnsafeIntegers(a: Assignment): ReadonlySet<number> | null {
  return RAW.get(a)?.unsafeIntegers ?? null;
}

/** A server phase message carried in the check-in's answer: what `GET …/phases/{p}/next` would answer. */
export interface PhaseMessage {
  /** The phase the device's reply belongs to (the X-FA-Phase header's value). */
  phase: number;
  body: Uint8Array;
}

/** The longest `next.body` accepted, in base64 characters (queries/envelope.py's PhaseMessage). */
export const MAX_PHASE_MESSAGE_B64 = 1 << 24;

export interface CheckinResponse {
  assignment: Assignment | null;
  retry_after: number | null;
  queries_running: number;
  /** With an assignment answered to a check-in that sent `secagg_keys`: whether the server took them as this party's
   * advertise-keys message (docs/protocol.md, "Keys with the check-in"); null when the answer does not say. */
  advertised: boolean | null;
  /** With `advertised` true: the server's message after the advertise-keys phase, when it was ready in time. */
  next: PhaseMessage | null;
  /** With an assignment: the proof that its task is in the public transparency log (translog.ts `TaskProofJson`),
   * as received; the device checks it (`checkTaskProof`) before it reads any data. Null when absent. */
  log: unknown;
}

export class EnvelopeError extends Error {}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const MECHANISMS: Mechanism[] = ["discrete_gaussian", "skellam", "none"];

function fields(v: unknown, where: string, known: string[], required: string[]): Obj {
  if (!isObj(v)) throw new EnvelopeError(`${where}: expected an object`);
  for (const k of Object.keys(v)) if (!known.includes(k)) throw new EnvelopeError(`${where}.${k}: unexpected field`);
  for (const k of required) if (!(k in v)) throw new EnvelopeError(`${where}.${k}: missing`);
  return v;
}

function num(v: unknown, where: string, opts: { int?: boolean; min?: number; max?: number; gt?: number; lt?: number; nullable?: boolean } = {}): number | null {
  if (v === null || v === undefined) {
    if (opts.nullable) return null;
    throw new EnvelopeError(`${where}: missing`);
  }
  if (typeof v !== "number" || !Number.isFinite(v) || (opts.int && !Number.isInteger(v))) throw new EnvelopeError(`${where}: expected ${opts.int ? "an integer" : "a number"}`);
  if ((opts.min !== undefined && v < opts.min) || (opts.max !== undefined && v > opts.max) || (opts.gt !== undefined && v <= opts.gt) || (opts.lt !== undefined && v >= opts.lt)) {
    throw new EnvelopeError(`${where}: ${v} is out of range`);
  }
  return v;
}

function str(v: unknown, where: string): string {
  if (typeof v !== "string") throw new EnvelopeError(`${where}: expected a string`);
  return v;
}

function mechanism(v: unknown, where: string): Mechanism {
  if (!MECHANISMS.includes(v as Mechanism)) throw new EnvelopeError(`${where}: unknown mechanism ${String(v)}`);
  return v as Mechanism;
}

/** `unsafeIntegers`: the integer literals beyond ±(2^53 − 1) of the JSON text `v` was parsed from, when known. */
export function parseAssignment(v: unknown, unsafeIntegers: ReadonlySet<number> | null = null): Assignment {
  const a = fields(v, "assignment", ["query_id", "round", "cohort_id", "party_id", "kind", "source", "task", "secagg", "threat_model",
    "first_phase", "phase_timeout_s", "noise", "validation", "privacy", "spec", "server_url"],
  ["query_id", "round", "cohort_id", "party_id", "kind", "source", "task", "secagg", "threat_model", "phase_timeout_s"]);
  if (!isObj(a.task)) throw new EnvelopeError("assignment.task: expected an object");
  if (!isObj(a.secagg)) throw new EnvelopeError("assignment.secagg: expected an object");
  if (a.threat_model !== "semi_honest" && a.threat_model !== "active") throw new EnvelopeError("assignment.threat_model: unknown");
  let noise: NoiseBlock | null = null;
  if (a.noise != null) {
    const n = fields(a.noise, "assignment.noise", ["mechanism", "scale", "std", "encoding_scale"], ["mechanism", "scale"]);
    noise = {
      mechanism: mechanism(n.mechanism, "noise.mechanism"),
      scale: num(n.scale, "noise.scale", { min: 0 }) as number,
      std: num(n.std, "noise.std", { min: 0, nullable: true }),
      encoding_scale: (num(n.encoding_scale ?? 1, "noise.encoding_scale", { int: true, min: 1, max: 1 << 16 }) as number),
    };
  }
  let validation: ValidationBlock | null = null;
  if (a.validation != null) {
    const x = fields(a.validation, "assignment.validation", ["mode", "noise_bound", "limbs", "limb_bits"], ["mode", "noise_bound", "limbs", "limb_bits"]);
    if (x.mode !== "proofs") throw new EnvelopeError("validation.mode: unknown");
    validation = {
      mode: "proofs",
      noise_bound: num(x.noise_bound, "validation.noise_bound", { int: true, min: 0, max: 2 ** 60 }) as number,
      limbs: num(x.limbs, "validation.limbs", { int: true, min: 1, max: 64 }) as number,
      limb_bits: num(x.limb_bits, "validation.limb_bits", { int: true, min: 1, max: 32 }) as number,
    };
  }
  let privacy: AssignmentPrivacy | null = null;
  if (a.privacy != null) {
    const p = fields(a.privacy, "assignment.privacy", ["mechanism", "epsilon", "delta", "rounds", "t_min", "l1_sensitivity", "l2_sensitivity", "validation", "weight"], ["mechanism"]);
    const validationMode = p.validation ?? "none";
    if (validationMode !== "proofs" && validationMode !== "none") throw new EnvelopeError("privacy.validation: unknown");
    privacy = {
      mechanism: mechanism(p.mechanism, "privacy.mechanism"),
      epsilon: num(p.epsilon, "privacy.epsilon", { gt: 0, nullable: true }),
      delta: num(p.delta, "privacy.delta", { gt: 0, lt: 1, nullable: true }),
      rounds: num(p.rounds ?? 1, "privacy.rounds", { int: true, min: 1, max: 1_000_000 }) as number,
      t_min: num(p.t_min, "privacy.t_min", { int: true, min: 1, nullable: true }),
      l1_sensitivity: num(p.l1_sensitivity ?? 0, "privacy.l1_sensitivity", { min: 0 }) as number,
      l2_sensitivity: num(p.l2_sensitivity ?? 0, "privacy.l2_sensitivity", { min: 0 }) as number,
      weight: num(p.weight ?? 1, "privacy.weight", { gt: 0, max: 1_000_000 }) as number,
      validation: validationMode,
    };
  }
  if (a.spec != null && !isObj(a.spec)) throw new EnvelopeError("assignment.spec: expected an object");
  const serverUrl = a.server_url == null ? null : str(a.server_url, "assignment.server_url");
  if (serverUrl !== null && serverUrl.length > 2048) throw new EnvelopeError("assignment.server_url: too long");
  const parsed: Assignment = {
    query_id: str(a.query_id, "assignment.query_id"),
    round: num(a.round, "assignment.round", { int: true }) as number,
    cohort_id: str(a.cohort_id, "assignment.cohort_id"),
    party_id: num(a.party_id, "assignment.party_id", { int: true }) as number,
    kind: str(a.kind, "assignment.kind"),
    source: str(a.source, "assignment.source"),
    task: a.task,
    secagg: a.secagg,
    threat_model: a.threat_model,
    first_phase: num(a.first_phase ?? 0, "assignment.first_phase", { int: true }) as number,
    phase_timeout_s: num(a.phase_timeout_s, "assignment.phase_timeout_s") as number,
    noise,
    validation,
    privacy,
    spec: (a.spec ?? null) as Record<string, unknown> | null,
    server_url: serverUrl,
  };
  RAW.set(parsed, { object: a, unsafeIntegers });
  return parsed;
}

function phaseMessage(v: unknown): PhaseMessage {
  const m = fields(v, "next", ["phase", "body"], ["phase", "body"]);
  const phase = num(m.phase, "next.phase", { int: true, min: 0, max: 15 }) as number;
  const body = str(m.body, "next.body");
  if (body.length > MAX_PHASE_MESSAGE_B64) throw new EnvelopeError(`next.body: longer than ${MAX_PHASE_MESSAGE_B64} characters`);
  let bytes: Uint8Array;
  try {
    bytes = b64decode(body, "next.body");
  } catch (exc) {
    throw new EnvelopeError((exc as Error).message);
  }
  return { phase, body: bytes };
}

/** A check-in answer; `text`, the JSON text it was parsed from, lets the task digest tell integers from doubles. */
export function parseCheckin(v: unknown, text: string | null = null): CheckinResponse {
  const r = fields(v, "check-in answer", ["assignment", "retry_after", "queries_running", "advertised", "next", "log"], []);
  const assignment = r.assignment == null ? null : parseAssignment(r.assignment, text === null ? null : unsafeIntegerLiterals(text));
  const advertised = r.advertised ?? null;
  if (advertised !== null && typeof advertised !== "boolean") throw new EnvelopeError("advertised: expected true or false");
  if (advertised !== null && assignment === null) throw new EnvelopeError("advertised: only with an assignment");
  const next = r.next == null ? null : phaseMessage(r.next);
  if (next !== null && advertised !== true) throw new EnvelopeError("next: only with advertised true");
  // `log` is checked by the device (a malformed proof is a not_logged refusal, reported), not here
  return {
    assignment,
    retry_after: num(r.retry_after, "retry_after", { nullable: true }),
    queries_running: (num(r.queries_running ?? 0, "queries_running", { int: true }) as number),
    advertised,
    next,
    log: r.log ?? null,
  };
}
