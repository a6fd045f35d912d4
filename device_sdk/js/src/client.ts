/** `DeviceClient`: registers the device, checks in, and runs its assigned secure-aggregation cohorts (the port of
 * device_sdk/client.py). One `runOnce()` = one check-in (long-polled) and, when assigned, the whole cohort: the
 * assignment is checked against the device's own policy and ledger before any data is read (a refusal is reported to
 * the server), the kind computes the contribution, the noise share is added, the vector is masked by the secagg client
 * (held to the device's survivor floor), phase messages are exchanged, and the ledger and transparency log are
 * settled. The device hashes the assignment it received (taskDigest.ts) and binds the digest into its secagg keys,
 * signatures and validity proof; unless its policy says `verifyCohort: false` it verifies its peers' signatures for
 * that session and task before its masked input leaves, and refuses (`task_mismatch`, `cohort_unverified`, kept in the
 * transparency log with nothing charged) a cohort it cannot verify. It refuses (`unsafe_parameters`, kept in the
 * transparency log) a cohort below the safety floor it computes for itself (secagg/floor.ts): without the consistency
 * round, with a degree or threshold below the floor — before it reads any data — or, once the peer keys arrive, a
 * neighbourhood whose token-holding members fall short of the threshold; and (`inconsistent_survivors`) a server
 * that shows its neighbourhood two survivor sets. `start()` / `stop()` run `runForever` in the
 * background: pace steering (`retry_after`), exponential back-off with full jitter on errors, and an immediate stop
 * even mid long-poll. Every request is signed with the device's Ed25519 key, kept in the store.
 *
 * Enrolment (docs/identities.md): with `enrolment: { issuerUrl, credential }` the device, before its first
 * registration, asks the issuer for an identity token for its key (blinded under the first of `policy.issuerKeys`, so
 * the issuer never sees the token it signs), keeps the token in the store and registers with it. Errors of the issuer
 * are `IssuerError`s (its message and Retry-After); a server that requires a token from a device without an enrolment
 * answers 403, raised as `EnrolmentRequiredError`.
 *
 * The public transparency log (docs/transparency.md, "What a device does"): each check-in says the size of the last
 * log head the device stored (`log_size`); an assignment comes with `log`, the proof that its task is a logged `task`
 * entry under a signed head that extends the stored one (translog.ts `checkTaskProof`, under `policy.logKeys`, or the
 * key pinned from `GET /v1/log/key` on first use). The device checks it right after it computes the task digest,
 * before it reads any data; a proof that does not check, or none while `policy.requireLog`, is refused with
 * `not_logged` (reported, and kept in its transparency log). Otherwise it stores the head (meta `log_head`) and keeps
 * the head's size and root and the entry's index with the contribution. */

import { b64decode, b64encode } from "./bytes.js";
import { Clock, deadline } from "./clock.js";
import { maskedContent } from "./contribution.js";
import {
  Assignment, HDR_DEVICE, HDR_NONCE, HDR_PHASE, HDR_PROTOCOL, HDR_SIGNATURE, HDR_TIMESTAMP, MAX_LONG_POLL_S, PROTOCOL_VERSION,
  PhaseMessage, assignmentUnsafeIntegers, deviceIdFor, parseCheckin, rawAssignment, signingPayload,
} from "./envelope.js";
import { TokenError, requestToken, verifyToken } from "./identityToken.js";
import { TypedTask, kindOf, parseTask } from "./kinds/registry.js";
import { QueryKindError } from "./kinds/kind.js";
import { ContributionLedger, ContributionRecord, DAY_S, NewRecord } from "./ledger.js";
import { Decision, DevicePolicy, Refusal, checkinPause, decide, isRefusal, refuse } from "./policy.js";
import { DeviceRandomness, RandomSource } from "./randomness.js";
import { ClientSession, KeyPairs, Phase } from "./secagg/client.js";
import { SecAggConfig } from "./secagg/config.js";
import { keysPayload } from "./secagg/crypto.js";
import { ModVector } from "./secagg/encoding.js";
import { CohortUnverifiedError, InconsistentSurvivorsError, SecAggError, TaskMismatchError, TooFewSurvivorsError } from "./secagg/errors.js";
import { UnsafeParametersError } from "./secagg/floor.js";
import { LocalStore } from "./store.js";
import { taskDigest } from "./taskDigest.js";
import { HeadJson, LogCheckError, SignedHead, TreeHead, checkTaskProof, headJson, keyId, keyTable, parseHead, parseTaskProof, toHeadJson } from "./translog.js";
import { Ed25519Key } from "./webcrypto.js";

const KEY_META = "device_key";
const ID_META = "device_id";
const REGISTERED_META = "registered_at";
const TOKEN_META = "identity_token";
/** The last transparency-log head the device checked a task under (JSON of translog.ts `HeadJson`). */
export const LOG_HEAD_META = "log_head";
/** The log keys pinned on first use (JSON list of base64 Ed25519 keys), when the policy pins none. */
export const LOG_KEYS_META = "log_keys";
const MAX_PREVIOUS_LOG_KEYS = 16;
/** The longest Retry-After the issuer's quota may ask for (its default quota is one token per install per day). */
const MAX_ISSUER_RETRY_S = 2 * 86400;
const FAILOVER_STATUSES = [502, 503, 504];
const RETENTION_EVERY_S = 60;
/** Refusals after the device checked its cohort: kept in its transparency log (evidence of a server that broke the
 * protocol, or of one it could not verify), unlike refusals under its own policy, which leave no row. */
export const LOGGED_REFUSALS: ReadonlySet<string> = new Set(["task_mismatch", "cohort_unverified", "not_logged", "unsafe_parameters", "inconsistent_survivors"]);

export type OutcomeStatus = "idle" | "paused" | "refused" | "finished" | "dropped" | "aborted" | "rejected";

/** What one `runOnce` did (the Python SDK's `Outcome`). */
export interface Outcome {
  status: OutcomeStatus;
  retryAfter: number;
  cohortId: string | null;
  contributed: boolean | null;
  detail: string;
  queriesRunning: number;
  reason: string | null;
}

const outcome = (status: OutcomeStatus, o: Partial<Outcome> = {}): Outcome => ({
  status, retryAfter: 0, cohortId: null, contributed: null, detail: "", queriesRunning: 0, reason: null, ...o,
});

/** An HTTP answer the device cannot act on (`retryAfter`: the server's Retry-After). */
export class ServerError extends Error {
  constructor(readonly status: number, readonly serverMessage: string, readonly retryAfter: number | null = null) {
    super(`HTTP ${status}: ${serverMessage}`);
    this.name = "ServerError";
  }
}

/** The server speaks another device protocol version: retrying cannot help, this SDK must be updated. */
export class ProtocolVersionError extends ServerError {
  constructor(status: number, message: string, readonly serverVersion: string) {
    super(status, message);
    this.name = "ProtocolVersionError";
  }
}

/** The issuer refused a token (403 credential, 404 unknown key, 422 bad field, 429 quota or rate limit): its message
 * and, for 429, its Retry-After. */
export class IssuerError extends ServerError {
  constructor(status: number, issuerMessage: string, retryAfter: number | null = null) {
    super(status, issuerMessage, retryAfter);
    this.message = `identity token issuer: HTTP ${status}: ${issuerMessage}`;
    this.name = "IssuerError";
  }
}

/** The server refused a registration without an identity token: the DeviceClient needs an `enrolment`. */
export class EnrolmentRequiredError extends ServerError {
  constructor(status: number, serverMessage: string) {
    super(status, serverMessage);
    this.message = `HTTP ${status}: ${serverMessage} — this server registers only devices with an identity token: ` +
      "give the DeviceClient an enrolment ({ issuerUrl, credential }) and pin the issuer's keys in policy.issuerKeys";
    this.name = "EnrolmentRequiredError";
  }
}

/** Where and with what the device asks for its identity token (docs/identities.md). */
export interface Enrolment {
  /** The issuer's base URL (`POST {issuerUrl}/v1/issuer/token`). */
  issuerUrl: string;
  /** The enrolment credential the app's backend gave this install. */
  credential: string;
}

export type Logger = (level: "debug" | "info" | "warn", message: string) => void;

/** How the device reaches the server (Python's `NetworkOptions`). */
export interface NetworkOptions {
  /** How long a check-in long-polls for an assignment (default 10 s). */
  checkinWaitS?: number;
  /** The timeout of one request (default 120 s). */
  requestTimeoutS?: number;
  /** Exponential back-off with full jitter after errors: base and cap (defaults 0.5 s, 30 s). */
  backoffBaseS?: number;
  backoffCapS?: number;
  /** The `fetch` requests go through (default the global one). */
  fetch?: typeof fetch;
}

/** What the app is told (Python's `Callbacks`): each runs on the client's own turn and must not block; one that throws
 * is logged, never raised. */
export interface Callbacks {
  onAssignment?: (a: Assignment) => void;
  onContribution?: (r: ContributionRecord) => void;
  onRefusal?: (r: Refusal) => void;
  onError?: (e: unknown) => void;
}

/** What a simulator or a benchmark injects (Python's `DeviceHooks`); an app leaves it out, and nothing a server sends
 * can ask for it. */
export interface DeviceHooks {
  /** The phase before which this (simulated) device stops answering, or null: how a fleet exercises dropouts. */
  dropout?: (a: Assignment) => number | null;
  /** Seconds each secagg phase's computation took on this device (the benchmark's figures). */
  onPhaseTiming?: (phase: string, seconds: number) => void;
}

/** Everything a DeviceClient takes besides its server and store, grouped as the Python SDK's `ClientOptions`
 * (docs/device_sdk.md, "ClientOptions"), in camelCase. The time is the store's clock (`LocalStore`'s `clock`). */
export interface DeviceClientOptions {
  /** The device's own limits (default `new DevicePolicy()`). */
  policy?: DevicePolicy;
  /** The app's answer to "may the device take part now?", asked before every check-in and before a cohort starts. */
  eligible?: () => boolean | Promise<boolean>;
  network?: NetworkOptions;
  callbacks?: Callbacks;
  /** Ask this issuer for an identity token before the first registration (needs `policy.issuerKeys`). */
  enrolment?: Enrolment;
  /** Send fresh secagg public keys with every check-in, so a semi-honest cohort's first phase costs no request of its
   * own (docs/protocol.md, "Keys with the check-in"); default true. */
  keysWithCheckin?: boolean;
  /** How often a paused device (opted out, not eligible) asks again (default 60 s). */
  ineligiblePollS?: number;
  /** The device's one random source (OS entropy by default; a SeededRandom only in tests). */
  randomness?: RandomSource;
  hooks?: DeviceHooks;
  /** Where the client's messages go (default: warnings to the console). */
  log?: Logger;
}

const OPTION_GROUPS: Record<string, readonly string[] | null> = {
  policy: null, eligible: null, enrolment: null, keysWithCheckin: null, ineligiblePollS: null, randomness: null, log: null,
  network: ["checkinWaitS", "requestTimeoutS", "backoffBaseS", "backoffCapS", "fetch"],
  callbacks: ["onAssignment", "onContribution", "onRefusal", "onError"],
  hooks: ["dropout", "onPhaseTiming"],
};

/** The options checked as the Python SDK checks its ClientOptions: an unknown key (a flat option of the older API
 * among them) or a wrong type is a TypeError naming the field (`options.network.checkinWaitS`). */
function checkOptions(opts: DeviceClientOptions): void {
  if (typeof opts !== "object" || opts === null) throw new TypeError("options: must be an object");
  const where = (group: string | null, key: string) => `options.${group ? `${group}.` : ""}${key}`;
  const seconds = (v: unknown, name: string) => {
    if (v !== undefined && !(typeof v === "number" && Number.isFinite(v) && v >= 0)) throw new TypeError(`${name}: must be a number of seconds ≥ 0, got ${JSON.stringify(v)}`);
  };
  const fn = (v: unknown, name: string) => {
    if (v !== undefined && typeof v !== "function") throw new TypeError(`${name}: must be a function`);
  };
  for (const [key, value] of Object.entries(opts)) {
    if (!Object.prototype.hasOwnProperty.call(OPTION_GROUPS, key)) {
      const group = Object.entries(OPTION_GROUPS).find(([, fields]) => fields?.includes(key))?.[0];
      throw new TypeError(`${where(null, key)}: unknown option${group ? ` (it is ${where(group, key)})` : ""}`);
    }
    const fields = OPTION_GROUPS[key];
    if (fields === null || value === undefined) continue;
    if (typeof value !== "object" || value === null) throw new TypeError(`${where(null, key)}: must be an object`);
    for (const field of Object.keys(value)) if (!fields.includes(field)) throw new TypeError(`${where(key, field)}: unknown option`);
  }
  if (opts.policy !== undefined && !(opts.policy instanceof DevicePolicy)) throw new TypeError("options.policy: must be a DevicePolicy");
  if (opts.eligible !== undefined && typeof opts.eligible !== "function") throw new TypeError("options.eligible: must be a function returning true or false");
  if (opts.keysWithCheckin !== undefined && typeof opts.keysWithCheckin !== "boolean") throw new TypeError("options.keysWithCheckin: must be true or false");
  seconds(opts.ineligiblePollS, "options.ineligiblePollS");
  fn(opts.log, "options.log");
  const n = opts.network ?? {};
  for (const k of ["checkinWaitS", "requestTimeoutS", "backoffBaseS", "backoffCapS"] as const) seconds(n[k], where("network", k));
  fn(n.fetch, "options.network.fetch");
  for (const [k, v] of Object.entries(opts.callbacks ?? {})) fn(v, where("callbacks", k));
  for (const [k, v] of Object.entries(opts.hooks ?? {})) fn(v, where("hooks", k));
}

/** The check-in carried the device's advertise keys and the server took them: the session uses these keys, the device
 * sends nothing for the first phase, and `next` is the server's following message when the answer already held it. */
export interface Ahead {
  keys: KeyPairs;
  next: PhaseMessage | null;
}

interface Answer {
  status: number;
  headers: Headers;
  body: Uint8Array;
}

function parseServers(serverUrl: string | string[]): string[] {
  const items = typeof serverUrl === "string" ? serverUrl.split(",") : [...serverUrl];
  const urls = items.map((u) => String(u).trim().replace(/\/+$/, "")).filter(Boolean);
  for (const u of urls) {
    let ok = false;
    try {
      const p = new URL(u);
      ok = (p.protocol === "http:" || p.protocol === "https:") && !p.search && !p.hash;
    } catch {
      ok = false;
    }
    if (!ok) throw new TypeError(`serverUrl: ${JSON.stringify(u.slice(0, 200))} is not an http(s)://host[:port] URL`);
  }
  if (!urls.length) throw new TypeError("serverUrl: no server URL given");
  return urls;
}

function errorText(body: Uint8Array): string {
  const text = new TextDecoder().decode(body.subarray(0, 2000));
  try {
    const j = JSON.parse(text) as unknown;
    if (j && typeof j === "object" && "error" in j) return String((j as { error: unknown }).error);
    return text.slice(0, 200);
  } catch {
    return text.slice(0, 200);
  }
}

function retryAfterOf(h: Headers, max = 3600): number | null {
  const v = Number(h.get("Retry-After"));
  return h.get("Retry-After") !== null && Number.isFinite(v) && v >= 0 && v <= max ? v : null;
}

function checkEnrolment(e: unknown, policy: DevicePolicy): Enrolment {
  const o = e as Partial<Enrolment> | null;
  if (!o || typeof o !== "object") throw new TypeError("enrolment: must be { issuerUrl, credential }");
  const [url] = (() => {
    try {
      return parseServers(String(o.issuerUrl ?? ""));
    } catch {
      throw new TypeError(`enrolment.issuerUrl: ${JSON.stringify(String(o.issuerUrl).slice(0, 200))} is not an http(s)://host[:port] URL`);
    }
  })();
  if (typeof o.credential !== "string" || !o.credential) throw new TypeError("enrolment.credential: must be the non-empty credential string the app's backend issued");
  if (policy.issuerKeys === null) throw new TypeError("enrolment: needs policy.issuerKeys (the issuer keys the app pins; the token is requested under the first)");
  return { issuerUrl: url, credential: o.credential };
}

/** The decision a refused assignment's kept row records: nothing charged. */
const NOTHING: Decision = { epsilonCharge: null, deltaCharge: null, minSurvivors: null, declaredBounds: null, noiseFloor: null, proofs: false };

/** The ledger row of an accepted assignment (the query's public privacy parameters, never its sensitivities). */
function ledgerFields(a: Assignment, d: Decision, now: number): NewRecord {
  const p = a.privacy;
  let queryPrivacy: Record<string, unknown> = {};
  if (p) {
    const { l1_sensitivity: _l1, l2_sensitivity: _l2, ...rest } = p;
    queryPrivacy = rest;
  }
  return {
    query_id: a.query_id, round: a.round, cohort_id: a.cohort_id, kind: a.kind, source: a.source, accepted_at: now,
    mechanism: a.noise ? a.noise.mechanism : "none", epsilon: d.epsilonCharge, delta: d.deltaCharge,
    query_epsilon: p ? p.epsilon : null, query_delta: p ? p.delta : null, query_privacy: queryPrivacy,
    noise_scale: a.noise ? a.noise.scale : null, noise_std: a.noise ? a.noise.std : null, encoding_scale: a.noise ? a.noise.encoding_scale : 1,
    proofs: d.proofs, cohort_size: Number(a.secagg.n ?? 0), min_survivors: d.minSurvivors,
  };
}

/** One accepted assignment: its task as parsed when it was admitted (the only parse), and its bookkeeping, the ledger
 * row from acceptance to the cohort's end. */
class Contribution {
  sent = false;
  constructor(readonly a: Assignment, readonly task: TypedTask, readonly decision: Decision, readonly ledger: ContributionLedger, readonly rowId: number) {}

  checkVector(vec: number[]): Refusal | null {
    const b = this.decision.declaredBounds;
    if (!b) return null;
    const l1 = vec.reduce((s, v) => s + Math.abs(v), 0);
    const l2 = Math.sqrt(vec.reduce((s, v) => s + v * v, 0));
    if (l1 > b[0] * (1 + 1e-9) || l2 > b[1] * (1 + 1e-9)) {
      return refuse(this.a, "contribution_exceeds_bound", `the contribution exceeds the declared sensitivities (L1 ${b[0]}, L2 ${b[1]})`);
    }
    return null;
  }

  async beforeSend(phase: number): Promise<void> {
    if (!this.sent && phase >= Phase.MaskedInput) {
      await this.ledger.markSent(this.rowId);
      this.sent = true;
    }
  }

  /** Settle the ledger row; the transparency-log record when something was sent, or when the device refused the cohort
   * for a reason its user should see (`refused`, one of LOGGED_REFUSALS: kept, charging nothing). */
  async end(finished: boolean, contributed: boolean | null, detail: string, refused: string | null = null): Promise<ContributionRecord | null> {
    if (!this.sent) {
      if (refused !== null && LOGGED_REFUSALS.has(refused)) {
        await this.ledger.refused(this.rowId, refused, detail);
        return this.ledger.record(this.rowId);
      }
      await this.ledger.release(this.rowId);
      return null;
    }
    // refused after the masked input left (it then revealed nothing): the reason is kept
    if (refused !== null) detail = `${refused}: ${detail}`;
    await this.ledger.finish(this.rowId, finished ? "finished" : "abandoned", contributed, detail);
    return this.ledger.record(this.rowId);
  }
}

export class DeviceClient {
  readonly servers: string[];
  readonly policy: DevicePolicy;
  readonly ledger: ContributionLedger;
  readonly randomness: DeviceRandomness;
  private current = 0;
  private key: Ed25519Key | null = null;
  private id: string | null = null;
  private abandoned = new Set<string>();
  private retentionAt = 0;
  private running: { controller: AbortController; done: Promise<void> } | null = null;
  private readonly net: Required<Omit<NetworkOptions, "fetch">>;
  private readonly ineligiblePollS: number;
  private readonly callbacks: Callbacks;
  private readonly hooks: DeviceHooks;
  private readonly clock: Clock;
  private readonly fetchFn: typeof fetch;
  private readonly log: Logger;
  private wakeUp: (() => void) | null = null;
  private keysWithCheckin: boolean;
  private readonly enrolment: Enrolment | null;
  private witnessTable: Promise<Map<string, Uint8Array>> | null = null;

  /** `options`: grouped as the Python SDK's ClientOptions (DeviceClientOptions); the clock is the store's. */
  constructor(serverUrl: string | string[], readonly store: LocalStore, private readonly opts: DeviceClientOptions = {}) {
    if (!(store instanceof LocalStore)) throw new TypeError("store: must be a LocalStore");
    checkOptions(opts);
    this.servers = parseServers(serverUrl);
    this.policy = opts.policy ?? new DevicePolicy();
    this.ledger = new ContributionLedger(store);
    this.clock = store.clock;
    this.randomness = new DeviceRandomness(opts.randomness);
    this.enrolment = opts.enrolment === undefined ? null : checkEnrolment(opts.enrolment, this.policy);
    const n = opts.network ?? {};
    this.net = { checkinWaitS: n.checkinWaitS ?? 10, requestTimeoutS: n.requestTimeoutS ?? 120, backoffBaseS: n.backoffBaseS ?? 0.5, backoffCapS: n.backoffCapS ?? 30 };
    this.ineligiblePollS = opts.ineligiblePollS ?? 60;
    this.callbacks = opts.callbacks ?? {};
    this.hooks = opts.hooks ?? {};
    this.keysWithCheckin = opts.keysWithCheckin ?? true;
    this.fetchFn = n.fetch ?? globalThis.fetch.bind(globalThis);
    this.log = opts.log ?? ((level, message) => (level === "warn" ? console.warn(`[fa-device] ${message}`) : undefined));
  }

  /** The server URL registrations and check-ins go to now. */
  get server(): string {
    return this.servers[this.current];
  }

  failOver(): void {
    if (this.servers.length > 1) this.current = (this.current + 1) % this.servers.length;
  }

  /** The device's identity (created from the randomness source and kept in the store on first use). */
  async identity(): Promise<{ key: Ed25519Key; deviceId: string }> {
    if (!this.key) {
      const raw = await this.store.getMeta(KEY_META);
      const seed = raw === null ? await this.randomness.identityKey() : b64decode(raw, KEY_META, 32);
      if (raw === null) await this.store.setMeta(KEY_META, b64encode(seed));
      this.key = await Ed25519Key.fromSeed(seed);
      this.id = await deviceIdFor(this.key.publicBytes);
    }
    return { key: this.key, deviceId: this.id as string };
  }

  get deviceId(): string | null {
    return this.id;
  }

  // -- transport --------------------------------------------------------------------------------

  /** A signed request → (status, headers, body); throws on network errors and ProtocolVersionError. */
  async request(method: string, path: string, opts: { body?: Uint8Array; contentType?: string; query?: Record<string, string | number>; register?: boolean; base?: string; signal?: AbortSignal } = {}): Promise<Answer> {
    const { key, deviceId } = await this.identity();
    const qs = opts.query ? "?" + new URLSearchParams(Object.entries(opts.query).map(([k, v]) => [k, String(v)])).toString() : "";
    const pathQs = path + qs;
    const body = opts.body ?? new Uint8Array(0);
    for (let attempt = 1; ; attempt++) {
      const ts = String(Math.floor(this.clock.now()));
      const nonce = await this.randomness.nonce();
      const headers: Record<string, string> = {
        [HDR_PROTOCOL]: String(PROTOCOL_VERSION),
        [HDR_TIMESTAMP]: ts,
        [HDR_NONCE]: nonce,
        [HDR_SIGNATURE]: b64encode(await key.sign(await signingPayload(method, pathQs, ts, nonce, body))),
      };
      if (!opts.register) headers[HDR_DEVICE] = deviceId;
      if (opts.contentType) headers["Content-Type"] = opts.contentType;
      const timeout = deadline(this.clock, this.net.requestTimeoutS, opts.signal);
      try {
        const resp = await this.fetchFn((opts.base ?? this.server) + pathQs, {
          method, headers, body: body.length ? (body as BodyInit) : undefined, signal: timeout.signal, cache: "no-store",
        });
        const answer = { status: resp.status, headers: resp.headers, body: new Uint8Array(await resp.arrayBuffer()) };
        const version = answer.headers.get(HDR_PROTOCOL);
        if (answer.status === 400 && version !== null && version !== String(PROTOCOL_VERSION)) throw new ProtocolVersionError(400, errorText(answer.body), version);
        return answer;
      } catch (exc) {
        // fetch's network failure (typically a pooled connection the server closed as it was reused): every device
        // request may be sent once more (phase messages and registration are idempotent, a check-in is a new one),
        // with a fresh nonce; never after a timeout or a stop
        if (attempt === 1 && exc instanceof TypeError && !timeout.signal.aborted) continue;
        throw exc;
      } finally {
        timeout.clear();
      }
    }
  }

  private json(payload: unknown): Uint8Array {
    return new TextEncoder().encode(JSON.stringify(payload));
  }

  /** The device's identity token (with an `enrolment`): the one kept in the store while it still verifies for this
   * identity under a pinned key, else a new one from the issuer (kept before it is returned). */
  async identityToken(signal?: AbortSignal): Promise<Uint8Array> {
    const enrolment = this.enrolment;
    if (enrolment === null) throw new TypeError("identityToken: this DeviceClient has no enrolment");
    const { key } = await this.identity();
    const trusted = await this.policy.trustedIssuerKeys();
    if (trusted === null) throw new TypeError("enrolment: needs policy.issuerKeys");
    const kept = await this.store.getMeta(TOKEN_META);
    if (kept !== null) {
      try {
        const raw = b64decode(kept, TOKEN_META);
        await verifyToken(raw, key.publicBytes, trusted);
        return raw;
      } catch (exc) {  // the issuer keys were rotated (or the store damaged): ask for a new token
        this.log("info", `the kept identity token is no longer usable (${(exc as Error).message}); asking the issuer for a new one`);
      }
    }
    const issuer = [...trusted.values()][0];  // the first pinned key (the map keeps the app's order)
    const pending = await requestToken(issuer, key.publicBytes, this.randomness.identityToken());
    const body = this.json({ credential: enrolment.credential, token_key_id: b64encode(pending.tokenKeyId), blinded_msg: b64encode(pending.blindedMsg) });
    const timeout = deadline(this.clock, this.net.requestTimeoutS, signal);
    let resp: Response;
    let answer: Uint8Array;
    try {
      // a plain request: nothing in it names the device (the issuer must not learn the identity it vouches for)
      resp = await this.fetchFn(`${enrolment.issuerUrl}/v1/issuer/token`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: body as BodyInit, cache: "no-store", signal: timeout.signal,
      });
      answer = new Uint8Array(await resp.arrayBuffer());
    } finally {
      timeout.clear();
    }
    if (resp.status !== 200) throw new IssuerError(resp.status, errorText(answer), retryAfterOf(resp.headers, MAX_ISSUER_RETRY_S));
    let blindSig: Uint8Array;
    try {
      const got = JSON.parse(new TextDecoder().decode(answer)) as { blind_sig?: unknown; remaining?: unknown };
      blindSig = b64decode(got.blind_sig as string, "blind_sig", 256);
      if (typeof got.remaining === "number") this.log("debug", `identity token issued; ${got.remaining} left in this install's quota`);
    } catch (exc) {
      throw new IssuerError(resp.status, `malformed issuer answer: ${(exc as Error).message}`);
    }
    let token: Uint8Array;
    try {
      token = await pending.finalize(blindSig);
    } catch (exc) {
      if (exc instanceof TokenError) throw new IssuerError(resp.status, exc.message);
      throw exc;
    }
    await this.store.setMeta(TOKEN_META, b64encode(token));
    return token;
  }

  async ensureRegistered(signal?: AbortSignal): Promise<string> {
    const { key, deviceId } = await this.identity();
    if ((await this.store.getMeta(`${REGISTERED_META}:${this.server}`)) !== null) return deviceId;
    const payload: Record<string, string> = { public_key: b64encode(key.publicBytes) };
    if (this.enrolment !== null) payload.identity_token = b64encode(await this.identityToken(signal));
    const r = await this.request("POST", "/v1/device/register", { body: this.json(payload), contentType: "application/json", register: true, signal });
    if (r.status === 403 && this.enrolment === null) throw new EnrolmentRequiredError(r.status, errorText(r.body));
    if (r.status !== 200 && r.status !== 201) throw new ServerError(r.status, errorText(r.body), retryAfterOf(r.headers));
    const got = JSON.parse(new TextDecoder().decode(r.body)) as { device_id?: string };
    if (got.device_id !== deviceId) throw new ServerError(r.status, `server assigned unexpected device id ${JSON.stringify(got.device_id)}`);
    await this.store.setMeta(ID_META, deviceId);
    await this.store.setMeta(`${REGISTERED_META}:${this.server}`, String(this.clock.now()));
    return deviceId;
  }

  // -- the device's own limits --------------------------------------------------------------------

  private emit<T>(fn: ((v: T) => void) | undefined, value: T): void {
    try {
      fn?.(value);
    } catch (exc) {
      this.log("warn", `a callback raised: ${(exc as Error).message}`);
    }
  }

  private async isEligible(): Promise<boolean> {
    if (!this.opts.eligible) return true;
    try {
      return Boolean(await this.opts.eligible());
    } catch (exc) {
      this.log("warn", `the eligibility callback raised (${(exc as Error).message}); treating the device as not eligible`);
      return false;
    }
  }

  private async pause(): Promise<Outcome | null> {
    if (await this.store.isOptedOut()) return outcome("paused", { retryAfter: this.ineligiblePollS, detail: "opted out" });
    if (!(await this.isEligible())) return outcome("paused", { retryAfter: this.ineligiblePollS, detail: "not eligible" });
    const now = this.clock.now();
    if (now - this.retentionAt >= RETENTION_EVERY_S) {
      this.retentionAt = now;
      await this.store.applyRetention(now);
      await this.ledger.prune(now);
    }
    const p = this.policy;
    if (p.maxContributionsPerDay === null && p.maxEpsilonPerDay === null) return null;
    const since = now - DAY_S;
    const [spent, , count] = await this.ledger.spentSince(since);
    const wait = checkinPause(p, spent, count, await this.ledger.oldestSince(since), await this.ledger.oldestSince(since, true), now);
    return wait === null ? null : outcome("paused", { retryAfter: Math.min(wait, DAY_S), detail: "daily limit reached" });
  }

  /** The assignment admitted (its task parsed, once, and the policy's verdict reserved in the ledger), or refused. */
  private async admit(a: Assignment): Promise<Contribution | Refusal> {
    let task: TypedTask;
    try {
      task = parseTask(a.kind, a.task);
    } catch (exc) {
      if (exc instanceof QueryKindError) return refuse(a, "invalid_assignment", exc.message);
      throw exc;
    }
    if (!(await this.isEligible())) return refuse(a, "not_eligible", "the device stopped being eligible while it waited for the cohort");
    const now = this.clock.now();
    const admitted = await this.ledger.admit<Decision, Refusal>(
      a.query_id, a.source, now - DAY_S,
      (history, spent, count, optedOut) => decide(this.policy, a, task, history, spent, count, optedOut),
      (v): v is Decision => !isRefusal(v),
      (verdict) => ledgerFields(a, verdict, now),
      // evidence of a server below this device's floor: kept, charging nothing
      (r) => (LOGGED_REFUSALS.has(r.reason) ? { fields: ledgerFields(a, NOTHING, now), reason: r.reason, detail: r.detail } : null),
    );
    if (!Array.isArray(admitted)) return admitted;
    const [verdict, row] = admitted;
    return new Contribution(a, task, verdict, this.ledger, row);
  }

  private async reportRefusal(a: Assignment, r: Refusal, signal?: AbortSignal): Promise<void> {
    this.log("warn", `refused query ${a.query_id.slice(0, 8)} round ${a.round} (${r.reason}): ${r.detail}`);
    this.emit(this.callbacks.onRefusal, r);
    const body = this.json({ reason: r.reason, detail: r.detail.slice(0, 500) });
    let owner = (a.server_url ?? this.server).replace(/\/+$/, "");
    try {
      let ans = await this.request("POST", `/v1/device/cohorts/${a.cohort_id}/refusal`, { body, contentType: "application/json", base: owner, signal });
      const loc = (ans.headers.get("Location") ?? "").replace(/\/+$/, "");
      if (ans.status === 421 && loc && loc !== owner) {
        owner = loc;
        ans = await this.request("POST", `/v1/device/cohorts/${a.cohort_id}/refusal`, { body, contentType: "application/json", base: owner, signal });
      }
      if (ans.status !== 200) this.log("info", `the server did not record the refusal: HTTP ${ans.status} ${errorText(ans.body)}`);
    } catch (exc) {
      this.log("info", `could not report the refusal: ${(exc as Error).message}`);
    }
  }

  /** Every contribution this device accepted, newest first: what it sent, when, with which noise and ε. */
  transparencyLog(since: number | null = null, limit = 1000): Promise<ContributionRecord[]> {
    return this.ledger.records(since, limit);
  }

  /** Delete a collection (or, with null, every collection) and never contribute from it again; a full opt-out also
   * stops the background loop. */
  async optOut(collection: string | null = null, opts: { deleteHistory?: boolean } = {}): Promise<number> {
    if (collection !== null) return this.store.optOut(collection);
    const n = await this.store.optOutAll(opts);
    this.running?.controller.abort();
    return n;
  }

  // -- one check-in -----------------------------------------------------------------------------

  /** One check-in; runs the assigned cohort to its end when there is one. Not while `start()` runs the device in the
   * background (two check-ins of one device at once would each take a cohort seat). */
  async runOnce(signal?: AbortSignal): Promise<Outcome> {
    if (this.running) throw new Error("the device runs in the background: stop() it before calling runOnce()");
    return this.checkIn(signal);
  }

  private async checkIn(signal?: AbortSignal): Promise<Outcome> {
    const paused = await this.pause();
    if (paused) return paused;
    let ans: Answer;
    let keys: KeyPairs | null = null;
    try {
      await this.ensureRegistered(signal);
      const sources = (await this.store.collections()).filter((c) => this.policy.allowsSource(c));
      const payload: Record<string, unknown> = { wait_s: this.net.checkinWaitS, sources };
      const head = await this.storedHead();
      if (head !== null) payload.log_size = head.json.size;  // the server proves its newest head consistent with it
      if (this.keysWithCheckin) {  // phase 0 sent ahead (docs/protocol.md, "Keys with the check-in")
        keys = await KeyPairs.draw(this.randomness.checkinKeys());
        const { key } = await this.identity();  // signed session-free: the server takes them as phase 0 only with it
        payload.secagg_keys = {
          c_pk: b64encode(keys.c.publicBytes), s_pk: b64encode(keys.s.publicBytes),
          signature: b64encode(await key.sign(keysPayload(keys.c.publicBytes, keys.s.publicBytes))),
        };
      }
      ans = await this.request("POST", "/v1/device/checkin", { body: this.json(payload), contentType: "application/json", signal });
    } catch (exc) {
      // (the issuer's answers say nothing about the device server)
      if (!(exc instanceof IssuerError) && (!(exc instanceof ServerError) || FAILOVER_STATUSES.includes(exc.status))) this.failOver();
      throw exc;
    }
    if (FAILOVER_STATUSES.includes(ans.status)) {
      this.failOver();
      throw new ServerError(ans.status, errorText(ans.body), retryAfterOf(ans.headers));
    }
    if (ans.status === 401 && errorText(ans.body).includes("unknown device")) {
      await this.store.deleteMeta(`${REGISTERED_META}:${this.server}`);
      throw new ServerError(401, errorText(ans.body));
    }
    if (keys && ans.status === 422 && errorText(ans.body).includes("secagg_keys")) {  // a server that predates the field
      this.log("info", "the server does not take keys with the check-in; sending them per phase");
      this.keysWithCheckin = false;
      return this.checkIn(signal);
    }
    if (ans.status !== 200) throw new ServerError(ans.status, errorText(ans.body), retryAfterOf(ans.headers));
    let resp;
    try {
      const text = new TextDecoder().decode(ans.body);
      resp = parseCheckin(JSON.parse(text), text);
    } catch (exc) {
      throw new ServerError(ans.status, `malformed check-in answer: ${(exc as Error).message}`);
    }
    const a = resp.assignment;
    if (a === null || this.abandoned.has(a.cohort_id)) return outcome("idle", { retryAfter: resp.retry_after ?? 1, queriesRunning: resp.queries_running });
    const ahead = resp.advertised === true && keys ? { keys, next: resp.next } : null;
    const out = await this.runAssignment(a, signal, ahead, resp.log);
    return { ...out, queriesRunning: resp.queries_running };
  }

  /** Admit the assignment under the device's policy (refusing it, with a report, before any data is read), run it, and
   * settle the ledger and the transparency log. `ahead`: the check-in already answered the first phase with these
   * keys. `log`: the check-in answer's proof that the task is in the public log (null: none came). */
  async runAssignment(a: Assignment, signal?: AbortSignal, ahead: Ahead | null = null, log: unknown = null): Promise<Outcome> {
    try {
      this.emit(this.callbacks.onAssignment, a);
      const contribution = await this.admit(a);
      if (!(contribution instanceof Contribution)) {
        await this.reportRefusal(a, contribution, signal);
        return outcome("refused", { cohortId: a.cohort_id, detail: contribution.detail, reason: contribution.reason });
      }
      let out: Outcome | null = null;
      try {
        out = await this.run(a, contribution, signal, ahead, log);
      } finally {
        const refused = out?.status === "refused" ? out.reason : null;
        const record = await contribution.end(out?.status === "finished", out?.contributed ?? null, out?.detail ?? "interrupted", refused);
        if (record && record.status !== "refused") this.emit(this.callbacks.onContribution, record);
      }
      if (out.status === "refused" && out.reason) await this.reportRefusal(a, refuse(a, out.reason as Refusal["reason"], out.detail), signal);
      return out;
    } finally {
      this.abandoned.add(a.cohort_id);
      if (this.abandoned.size > 1000) this.abandoned = new Set([...this.abandoned].slice(-100));
    }
  }

  private async run(a: Assignment, contribution: Contribution, signal?: AbortSignal, ahead: Ahead | null = null, log: unknown = null): Promise<Outcome> {
    let client: ClientSession;
    let message: Uint8Array | null;
    let digest: Uint8Array;
    try {
      // the assignment as received, never a re-serialised copy
      digest = await taskDigest(rawAssignment(a), { unsafeIntegers: assignmentUnsafeIntegers(a) });
    } catch (exc) {
      return outcome("refused", { cohortId: a.cohort_id, detail: `task digest: ${(exc as Error).message}`, reason: "invalid_assignment" });
    }
    // the task must be in the public log before any data is read
    const unlogged = await this.checkLog(a, digest, log, contribution, signal);
    if (unlogged !== null) return unlogged;
    try {
      const cfg = SecAggConfig.fromDict(a.secagg);
      const draws = this.randomness.forContribution(a.cohort_id);
      let raw: number[];
      try {
        const task = contribution.task;
        raw = await kindOf(task).contribute(task.task, await this.store.rows(a.source), draws.kind);
      } catch (exc) {
        if (exc instanceof QueryKindError) return outcome("refused", { cohortId: a.cohort_id, detail: exc.message, reason: "invalid_assignment" });
        throw exc;
      }
      const over = contribution.checkVector(raw);
      if (over) return outcome("refused", { cohortId: a.cohort_id, detail: over.detail, reason: over.reason });
      const [content, proof] = await maskedContent(a, contribution.task, raw, draws, digest);
      const vec = ModVector.fromSigned(content, cfg.bits);
      // the device signs its keys for this session and task with its registration key, and checks its neighbours'
      // signatures with the identity keys the peer keys list (each one fixed in the members list), and their tokens
      // under the pinned issuer keys
      client = new ClientSession(cfg, a.party_id, vec, {
        randomness: draws.secagg, identityKey: (await this.identity()).key,
        inputProof: proof, minSurvivors: contribution.decision.minSurvivors, onTiming: this.hooks.onPhaseTiming, clock: this.clock, keys: ahead?.keys,
        taskDigest: digest, verifyPeers: this.policy.verifyCohort, minVerified: this.policy.minVerified,
        issuerKeys: await this.policy.trustedIssuerKeys(), floorAssumptions: this.policy.floorAssumptions,
      });
      message = await client.start();  // with `ahead`, the bytes the server built from the check-in
    } catch (exc) {
      // below this device's own safety floor: nothing computed, nothing sent
      if (exc instanceof UnsafeParametersError) return outcome("refused", { cohortId: a.cohort_id, detail: exc.message, reason: "unsafe_parameters" });
      return outcome("rejected", { cohortId: a.cohort_id, detail: `cannot take part: ${(exc as Error).message}` });
    }
    const dropAt = this.hooks.dropout ? this.hooks.dropout(a) : null;
    try {
      return await this.exchange(a, client, message, dropAt, contribution, signal, ahead);
    } catch (exc) {
      if (exc instanceof ProtocolVersionError) throw exc;
      if (signal?.aborted) throw exc;
      return outcome("aborted", { cohortId: a.cohort_id, detail: `cohort server unreachable: ${(exc as Error).message}` });
    }
  }

  private async exchange(a: Assignment, client: ClientSession, message: Uint8Array | null, dropAt: number | null, contribution: Contribution, signal?: AbortSignal, ahead: Ahead | null = null): Promise<Outcome> {
    let phase = a.first_phase;
    const base = `/v1/device/cohorts/${a.cohort_id}/phases`;
    let owner = (a.server_url ?? this.server).replace(/\/+$/, "");
    const wait = Math.min(MAX_LONG_POLL_S, Math.max(1, a.phase_timeout_s + 5));
    const ended = (ans: Answer) => outcome("aborted", { cohortId: a.cohort_id, detail: `HTTP ${ans.status}: ${errorText(ans.body)}` });
    for (;;) {
      if (dropAt !== null && phase >= dropAt) return outcome("dropped", { cohortId: a.cohort_id, detail: `stopped before phase ${phase}` });
      let ans: Answer = { status: 202, headers: new Headers(), body: new Uint8Array() };
      if (ahead !== null) {  // the check-in answered the first phase, and carried the next message if it was ready
        if (ahead.next !== null) {
          const headers = new Headers({ "Content-Type": "application/octet-stream", [HDR_PHASE]: String(ahead.next.phase) });
          ans = { status: 200, headers, body: ahead.next.body };
        }
        ahead = null;
      } else if (message !== null) {
        await contribution.beforeSend(phase);
        const post = { body: message, contentType: "application/octet-stream", query: { wait }, base: owner, signal };
        ans = await this.request("POST", `${base}/${phase}`, post);
        const loc = (ans.headers.get("Location") ?? "").replace(/\/+$/, "");
        if (ans.status === 421 && loc && loc !== owner) {
          owner = loc;
          ans = await this.request("POST", `${base}/${phase}`, { ...post, base: owner });
        }
        if (ans.status !== 200 && ans.status !== 202) return ended(ans);
      }
      while (ans.status === 202) ans = await this.request("GET", `${base}/${phase}/next`, { query: { wait }, base: owner, signal });
      if (ans.status !== 200) return ended(ans);
      if ((ans.headers.get("Content-Type") ?? "").startsWith("application/json")) {
        const info = JSON.parse(new TextDecoder().decode(ans.body)) as { contributed?: boolean };
        return outcome("finished", { cohortId: a.cohort_id, contributed: Boolean(info.contributed) });
      }
      try {
        message = await client.receive(ans.body);
      } catch (exc) {
        if (exc instanceof TooFewSurvivorsError) return outcome("refused", { cohortId: a.cohort_id, detail: exc.message, reason: "survivors_below_minimum" });
        // a peer signed another task (or its keys were swapped), or fewer verified members than minCohort: nothing sent
        if (exc instanceof TaskMismatchError) return outcome("refused", { cohortId: a.cohort_id, detail: exc.message, reason: "task_mismatch" });
        if (exc instanceof CohortUnverifiedError) return outcome("refused", { cohortId: a.cohort_id, detail: exc.message, reason: "cohort_unverified" });
        // neighbours short of the floor (invented identities): nothing sent
        if (exc instanceof UnsafeParametersError) return outcome("refused", { cohortId: a.cohort_id, detail: exc.message, reason: "unsafe_parameters" });
        // two survivor sets: nothing revealed
        if (exc instanceof InconsistentSurvivorsError) return outcome("refused", { cohortId: a.cohort_id, detail: exc.message, reason: "inconsistent_survivors" });
        if (exc instanceof SecAggError) return outcome("rejected", { cohortId: a.cohort_id, detail: `refused server message: ${exc.message}` });
        throw exc;
      }
      phase = Number(ans.headers.get(HDR_PHASE) ?? phase + 1);
      if (client.phase === Phase.Done && message === null) return outcome("finished", { cohortId: a.cohort_id, contributed: true });
    }
  }

  // -- the public transparency log --------------------------------------------------------------

  /** The last log head the device checked a task under (null: none yet). */
  async logHead(): Promise<HeadJson | null> {
    return (await this.storedHead())?.json ?? null;
  }

  private async storedHead(): Promise<{ raw: string; json: HeadJson; head: TreeHead } | null> {
    const raw = await this.store.getMeta(LOG_HEAD_META);
    if (raw === null) return null;
    try {
      const json = headJson(JSON.parse(raw), "stored log head");
      return { raw, json, head: parseHead(json).head };
    } catch (exc) {
      this.log("warn", `the stored log head is unreadable (${(exc as Error).message}); checking as if none were stored`);
      return null;
    }
  }

  /** key_id → log key: the policy's `logKeys`, else the keys pinned on first use, else those `GET /v1/log/key`
   * names now (kept in the store and never fetched again: a server key that changes later fails check 2). */
  async logKeyTable(signal?: AbortSignal): Promise<Map<string, Uint8Array>> {
    const pinned = this.policy.logKeyBytes;
    if (pinned.length) return keyTable(pinned);
    let kept = await this.store.getMeta(LOG_KEYS_META);
    if (kept === null) {
      const fetched = JSON.stringify(await this.fetchLogKeys(signal));
      kept = await this.store.transaction((t) => {  // the first one kept wins (two assignments checked at once)
        if (t.state.meta[LOG_KEYS_META] === undefined) t.put("meta", LOG_KEYS_META, fetched);
        return t.state.meta[LOG_KEYS_META] as string;
      });
    }
    const keys = JSON.parse(kept) as unknown;
    if (!Array.isArray(keys) || !keys.length) throw new Error(`${LOG_KEYS_META}: the stored keys are unreadable`);
    return keyTable(keys.map((k, i) => b64decode(k as string, `${LOG_KEYS_META}[${i}]`, 32)));
  }

  /** `GET /v1/log/key`: the log's key and its previous ones (base64), checked against the key id the server names. */
  private async fetchLogKeys(signal?: AbortSignal): Promise<string[]> {
    const timeout = deadline(this.clock, this.net.requestTimeoutS, signal);
    let status: number;
    let body: Uint8Array;
    try {
      // a public route: no credentials, nothing that names the device
      const resp = await this.fetchFn(`${this.server}/v1/log/key`, { method: "GET", cache: "no-store", signal: timeout.signal });
      status = resp.status;
      body = new Uint8Array(await resp.arrayBuffer());
    } finally {
      timeout.clear();
    }
    if (status !== 200) throw new ServerError(status, `GET /v1/log/key: ${errorText(body)}`);
    const got = JSON.parse(new TextDecoder().decode(body)) as Record<string, unknown>;
    if (!got || typeof got !== "object") throw new Error("GET /v1/log/key: not a JSON object");
    const current = b64decode(got.public_key as string, "public_key", 32);
    const kid = await keyId(current);
    if (got.key_id !== kid) throw new Error(`GET /v1/log/key: key_id ${JSON.stringify(got.key_id)} is not the id of its public_key (${kid})`);
    const previous = got.previous_keys ?? [];
    if (!Array.isArray(previous) || previous.length > MAX_PREVIOUS_LOG_KEYS) throw new Error(`GET /v1/log/key: previous_keys must be a list of at most ${MAX_PREVIOUS_LOG_KEYS} keys`);
    previous.forEach((k, i) => b64decode(k as string, `previous_keys[${i}]`, 32));
    this.log("info", `pinned the transparency log's key ${kid} (origin ${JSON.stringify(String(got.origin ?? "")).slice(0, 200)}) on first use`);
    return [got.public_key as string, ...(previous as string[])];
  }

  private witnessKeys(): Promise<Map<string, Uint8Array>> {
    this.witnessTable ??= keyTable(this.policy.witnessKeyBytes);
    return this.witnessTable;
  }

  /** Check the assignment's log proof (translog.ts `checkTaskProof`): null when the device may go on (the head
   * stored, the contribution's row told where the task is logged), else the `not_logged` refusal. */
  private async checkLog(a: Assignment, digest: Uint8Array, log: unknown, contribution: Contribution, signal?: AbortSignal): Promise<Outcome | null> {
    const refused = (detail: string) => outcome("refused", { cohortId: a.cohort_id, detail, reason: "not_logged" });
    if (log === null || log === undefined) return this.policy.requireLog ? refused("the server sent no log proof") : null;
    let keys: Map<string, Uint8Array>;
    try {
      keys = await this.logKeyTable(signal);
    } catch (exc) {
      if (signal?.aborted) throw exc;
      return refused(`no log key to check the proof with: ${(exc as Error).message}`);
    }
    const stored = await this.storedHead();
    let signed: SignedHead;
    try {
      signed = await checkTaskProof(log, {
        taskDigest: digest, secagg: SecAggConfig.fromDict(a.secagg).publicSummary(), queryId: a.query_id, round: a.round, cohortId: a.cohort_id, logKeys: keys, last: stored?.head ?? null,
        witnessKeys: await this.witnessKeys(), quorum: this.policy.witnessQuorum, maxWitnessAgeS: this.policy.witnessMaxAgeS, nowS: this.clock.now(),
      });
    } catch (exc) {
      if (exc instanceof LogCheckError) return refused(exc.message);
      throw exc;
    }
    const json = toHeadJson(signed);
    const kept = await this.store.transaction((t) => {
      // a head stored meanwhile (another assignment checked at once) is kept: this one was not checked against it
      const now = (t.state.meta[LOG_HEAD_META] as string | undefined) ?? null;
      if (now !== (stored?.raw ?? null)) return false;
      t.put("meta", LOG_HEAD_META, JSON.stringify(json));
      return true;
    });
    if (!kept) this.log("info", `log head of size ${json.size} checked; another head was stored meanwhile and is kept`);
    await contribution.ledger.setLog(contribution.rowId, { log_size: json.size, log_root: json.root, log_index: parseTaskProof(log).index });
    return null;
  }

  // -- loops ------------------------------------------------------------------------------------

  /** Check in until `signal` aborts (at once, even mid long-poll or cohort); throws ProtocolVersionError, backs off
   * with full jitter on every other error, honouring the server's retry_after. */
  async runForever(signal?: AbortSignal, offlineAfterDropS = 0): Promise<void> {
    let failures = 0;
    while (!signal?.aborted) {
      let out: Outcome;
      try {
        out = await this.checkIn(signal);
        failures = 0;
      } catch (exc) {
        if (signal?.aborted) return;
        if (exc instanceof ProtocolVersionError) {
          this.emit(this.callbacks.onError, exc);
          throw exc;
        }
        failures++;
        let delay = Math.random() * Math.min(this.net.backoffCapS, this.net.backoffBaseS * 2 ** failures);
        if (exc instanceof ServerError && exc.retryAfter) delay = Math.max(delay, exc.retryAfter);
        this.log("warn", `${(exc as Error).message}; retrying in ${delay.toFixed(1)}s`);
        this.emit(this.callbacks.onError, exc);
        await this.clock.sleep(delay, signal);
        continue;
      }
      if (out.status === "idle") await this.rest(out.retryAfter > 0 ? out.retryAfter * (1 + 0.1 * Math.random()) : out.retryAfter, signal);
      else if (out.status === "paused") await this.rest(out.retryAfter, signal);
      else if (out.status === "dropped" && offlineAfterDropS) await this.clock.sleep(offlineAfterDropS, signal);
    }
  }

  private async rest(seconds: number, signal?: AbortSignal): Promise<void> {
    const wake = new AbortController();
    this.wakeUp = () => wake.abort();
    const both = new AbortController();
    const fire = () => both.abort();
    signal?.addEventListener("abort", fire, { once: true });
    wake.signal.addEventListener("abort", fire, { once: true });
    try {
      await this.clock.sleep(seconds, both.signal);
    } finally {
      signal?.removeEventListener("abort", fire);
      this.wakeUp = null;
    }
  }

  /** Cut the current pause short (call it when the app's eligibility facts change). */
  wake(): void {
    this.wakeUp?.();
  }

  /** Run `runForever` in the background until `stop()`. */
  start(): void {
    if (this.running) throw new Error("the device is already running");
    const controller = new AbortController();
    const done = this.runForever(controller.signal).catch((exc) => {
      this.log("warn", `stopped: ${(exc as Error).message}`);
    }).finally(() => {
      if (this.running?.controller === controller) this.running = null;
    });
    this.running = { controller, done };
  }

  /** Stop the background loop: it leaves any long-poll or cohort at once. Resolves when it has ended. */
  async stop(): Promise<void> {
    const r = this.running;
    if (!r) return;
    r.controller.abort();
    await r.done;
  }

  get isRunning(): boolean {
    return this.running !== null;
  }
}
