/** An in-memory stand-in for the device API, as a `fetch` function: registration answers with the device id the
 * public key implies (as the server does) and keeps the key, other routes from the test's handler; every request is
 * recorded. `FakeCohort` speaks the whole device protocol 3 for a cohort of real DeviceClients, the way the Python
 * server does (secagg/server.py): it verifies every AdvertiseKeys signature over the party's fresh keys, closes phase 0
 * with the members list (one leaf per party: identity and advertised keys) whose root seeds the neighbour graph and
 * joins the binding, relays each neighbour's identity, keys, key signature (and token) in PeerKeys with the leaves,
 * verifies every ShareKeys signature over the party's keys bound to session, task and members root, routes the shares
 * (no sender's signature: a share that opens is its sender's word), answers `members_wanted` with signed member
 * entries (each with the member's ShareKeys signature), and unmasks the sum — or, told to, lies to one member about its
 * task, substitutes keys of its own for a peer's, alters a share on its way, invents members of its own, or shows
 * parts of the cohort two survivor sets. With trusted issuer keys registration requires an identity token
 * (403 otherwise, as analytics_server); a cohort told `tokens` relays a token per peer entry and member entry.
 *
 * The fake server keeps a public transparency log (fakeLog.ts): it serves `GET /v1/log/key`, and to every check-in
 * answer with an assignment and no `log` of the handler's own it adds the `task` entry of what it hands out (the
 * digest of the assignment as sent) and the TaskProof for it, with a consistency proof from the device's `log_size`
 * — so it logs whatever it shows, a decoy task too (which the log then makes public; the cohort checks still refuse
 * it). `log: false` makes a server without a log. */

import { b64decode, bigToBE, hex } from "../src/bytes.js";
import { HDR_DEVICE, deviceIdFor } from "../src/envelope.js";
import { TokenError, TrustedKeys, verifyToken } from "../src/identityToken.js";
import { SecAggConfig } from "../src/secagg/config.js";
import * as c from "../src/secagg/crypto.js";
import { ModVector, unpack } from "../src/secagg/encoding.js";
import { NeighbourGraph } from "../src/secagg/graph.js";
import { MemberEntry, Message, MsgType, PeerEntry, ShareKind, decode, encode, encodeBitmap } from "../src/secagg/messages.js";
import * as shamir from "../src/secagg/shamir.js";
import { taskDigest, unsafeIntegerLiterals } from "../src/taskDigest.js";
import { Ed25519Key, X25519Key, ed25519Verify } from "../src/webcrypto.js";
import { FakeLog } from "./fakeLog.js";

export interface Seen {
  method: string;
  path: string;
  headers: Headers;
  body: Uint8Array;
}

export type Handler = (req: Seen) => Response | Promise<Response>;

export const json = (status: number, payload: unknown, headers: Record<string, string> = {}): Response =>
  new Response(JSON.stringify(payload), { status, headers: { "Content-Type": "application/json", ...headers } });

export interface FakeServer {
  fetch: typeof fetch;
  seen: Seen[];
  /** Device id → the Ed25519 public key it registered. */
  identities: Map<string, Uint8Array>;
  /** Device id → the identity token it registered with. */
  tokens: Map<string, Uint8Array>;
  /** The server's transparency log (null: `log: false`). */
  log: Promise<FakeLog> | null;
}

export interface ServerOptions {
  /** Require an identity token that verifies under these keys at registration (403 otherwise). */
  trusted?: TrustedKeys;
  /** The log it keeps (default: a FakeLog of its own); false: none (no `log` in answers, 404 for /v1/log/key). */
  log?: FakeLog | false;
}

/** Add the log's proof to a check-in answer that hands out an assignment without one. */
async function withLogProof(resp: Response, request: Uint8Array, log: FakeLog): Promise<Response> {
  if (resp.status !== 200 || !(resp.headers.get("Content-Type") ?? "").startsWith("application/json")) return resp;
  const text = await resp.clone().text();
  const answer = JSON.parse(text);
  const a = answer?.assignment;
  if (!a || typeof a !== "object" || "log" in answer) return resp;
  const digest = hex(await taskDigest(a, { unsafeIntegers: unsafeIntegerLiterals(text) }));
  let summary: Record<string, unknown>;
  try {
    summary = SecAggConfig.fromDict(a.secagg).publicSummary() as unknown as Record<string, unknown>;
  } catch {
    summary = {};  // a config no device accepts: logged as it is
  }
  const index = await log.task(a.query_id, a.round, a.cohort_id, digest, summary);
  let fromSize: number | null = null;
  try {
    const size = JSON.parse(new TextDecoder().decode(request)).log_size;
    if (typeof size === "number") fromSize = size;
  } catch {
    fromSize = null;
  }
  const headers: Record<string, string> = {};
  resp.headers.forEach((v, k) => (headers[k] = v));
  return new Response(JSON.stringify({ ...answer, log: await log.proof(index, fromSize) }), { status: 200, headers });
}

export function fakeServer(handler: Handler, opts: ServerOptions = {}): FakeServer {
  const seen: Seen[] = [];
  const identities = new Map<string, Uint8Array>();
  const tokens = new Map<string, Uint8Array>();
  const log = opts.log === false ? null : opts.log ? Promise.resolve(opts.log) : FakeLog.create();
  const fetchFn = async (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(String(input));
    const body = init.body ? new Uint8Array(init.body as ArrayBuffer) : new Uint8Array();
    const req = { method: init.method ?? "GET", path: url.pathname + url.search, headers: new Headers(init.headers), body };
    seen.push(req);
    if (init.signal?.aborted) throw new DOMException("aborted", "AbortError");
    if (req.method === "POST" && url.pathname === "/v1/device/register") {
      const reg = JSON.parse(new TextDecoder().decode(body));
      const key = b64decode(reg.public_key as string, "public_key", 32);
      const token = reg.identity_token == null ? null : b64decode(reg.identity_token as string, "identity_token");
      if (opts.trusted) {
        if (token === null) return json(403, { error: "identity_token: this server registers only devices with an identity token" });
        try {
          await verifyToken(token, key, opts.trusted);
        } catch (exc) {
          if (exc instanceof TokenError) return json(403, { error: `identity_token: ${exc.message}` });
          throw exc;
        }
      }
      const id = await deviceIdFor(key);
      identities.set(id, key);
      if (token !== null) tokens.set(id, token);
      return json(201, { device_id: id });
    }
    if (req.method === "GET" && url.pathname === "/v1/log/key") return log ? json(200, (await log).keyResponse()) : json(404, { error: "no log here" });
    const resp = await handler(req);
    if (log && req.method === "POST" && url.pathname === "/v1/device/checkin") return withLogProof(resp, body, await log);
    return resp;
  };
  return { fetch: fetchFn as typeof fetch, seen, identities, tokens, log };
}

export const idle = (retryAfter = 7): Response => json(200, { assignment: null, retry_after: retryAfter, queries_running: 0 });

/** A request's JSON body. */
export const bodyJson = (req: Seen): any => JSON.parse(new TextDecoder().decode(req.body));

/** A server phase message, as `GET …/phases/{p}/next` answers it. */
export const phaseMessage = (body: Uint8Array, phase: number): Response =>
  new Response(body as BodyInit, { status: 200, headers: { "Content-Type": "application/octet-stream", "X-FA-Phase": String(phase) } });

// -- a whole cohort ---------------------------------------------------------------------------------

type Obj = Record<string, any>;

export interface CohortOptions {
  /** Devices that check in (parties 1..devices, in check-in order). */
  devices: number;
  /** The cohort size the server announces (default: `devices`; more announces members that do not exist). */
  n?: number;
  /** The model the assignment names (default active: devices refuse the semi-honest one). */
  threatModel?: "semi_honest" | "active";
  /** Extra secagg fields (graph, degree, threshold…). */
  secagg?: Obj;
  /** Extra assignment fields (noise, privacy…). */
  assignment?: Obj;
  /** What the server shows party p: by default the honest assignment; a lying server changes it for some party (the
   * server then also verifies that party's signature against the task it showed it, and routes its shares). */
  show?: (party: number, wire: Obj) => Obj;
  /** Flip one byte of party `from`'s share for party `to` before routing it (a server or a network altering a share). */
  tamperShare?: { from: number; to: number };
  /** Answer members_wanted: with honest entries, none, or entries whose signatures are forged (default honest). */
  members?: "honest" | "none" | "forged";
  /** Take the keys a check-in carries as the party's advertise-keys message (advertised: true). */
  takeCheckinKeys?: boolean;
  /** Show party `to` keys the server made itself in place of party `peer`'s in its PeerKeys (keeping `peer`'s
   * signature over its real keys): a server that would read the shares `to` encrypts to `peer`. */
  substitutePeerKeys?: { to: number; peer: number };
  /** Milliseconds a phase waits for its last member before closing without it. */
  phaseTimeoutMs?: number;
  /** Relay identity tokens: the token the server shows for party p in peer entries and member entries (its registered
   * one is `cohort.registeredToken(p)`). */
  tokens?: (party: number, cohort: FakeCohort) => Uint8Array;
  /** Members the server makes up (parties devices+1..devices+invented of a cohort of `devices + invented`): identities
   * and keys of its own, their keys signed by those identities, no token; they answer nothing after phase 0. */
  invented?: number;
  /** Show these parties a survivor set without party `drop` in the consistency round (the others see every survivor),
   * and each part the unmask request for the set it signed, with its own part's signatures. */
  splitSurvivors?: { parties: number[]; drop: number };
  /** Registration requires a token under these keys. */
  trusted?: TrustedKeys;
  /** The server's transparency log (default: one of its own; false: none). */
  log?: FakeLog | false;
}

interface Party {
  deviceId: string;
  identity: Uint8Array;
  wire: Obj;
  bind: Uint8Array;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sorted = (xs: Iterable<number>) => [...xs].sort((a, b) => a - b);

export class FakeCohort {
  readonly cohortId = "c0".repeat(16);
  readonly sessionId = "7f0c6a1e2b3d4c5e6f708192a3b4c5d6";
  readonly queryId = "q".repeat(32);
  readonly server: FakeServer;
  readonly cfg: SecAggConfig;
  /** The honest wire assignment (party_id and peer_identity_keys are per device). */
  readonly base: Obj;
  /** Refusals reported with POST …/refusal, by party. */
  readonly refusals = new Map<number, { reason: string; detail: string }>();
  /** Messages refused by the server's own checks, by party (a ShareKeys signature that does not verify). */
  readonly refusedByServer = new Map<number, string>();
  /** The unmasked sum, once the cohort finished. */
  sum: bigint[] | null = null;
  /** Members_wanted each party asked for. */
  readonly wanted = new Map<number, number>();
  readonly shareKeys = new Map<number, Extract<Message, { type: MsgType.ShareKeys }>>();
  readonly routed = new Map<number, Extract<Message, { type: MsgType.RoutedShares }>>();
  readonly masked = new Map<number, ModVector>();
  private parties = new Map<number, Party>();
  private byDevice = new Map<string, number>();
  private checkedIn = new Set<number>();
  private keys = new Map<number, { cPk: Uint8Array; sPk: Uint8Array; signature: Uint8Array }>();
  private consistency = new Map<number, Uint8Array>();
  private unmask = new Map<number, [number, ShareKind, Uint8Array][]>();
  private inbox: Map<number, unknown>[] = [0, 1, 2, 3, 4].map(() => new Map());
  private out: (Map<number, Uint8Array | "finished"> | null)[] = [null, null, null, null, null];
  private closing: (Promise<void> | null)[] = [null, null, null, null, null];
  private opened: number[] = [0, 0, 0, 0, 0];
  private graph!: NeighbourGraph;
  private honestBind!: Uint8Array;
  /** The members list as phase 0 closed (one leaf per party, zeros for a party without keys) and its root. */
  leaves: Uint8Array | null = null;
  root: Uint8Array | null = null;
  private invented = new Map<number, Uint8Array>();
  private inventing: Promise<void> | null = null;
  private shownSurvivors = new Map<number, Uint8Array>();

  constructor(readonly opts: CohortOptions) {
    const n = opts.n ?? opts.devices + (opts.invented ?? 0);
    const tm = opts.threatModel ?? "active";
    const buckets = ["red", "blue", "green"];
    const secagg = { session_id: this.sessionId, n, dim: buckets.length, bits: 16, graph: "auto", threat_model: tm, ...opts.secagg };
    this.cfg = SecAggConfig.fromDict(secagg);
    this.base = {
      query_id: this.queryId, round: 0, cohort_id: this.cohortId, kind: "histogram", source: "colors",
      task: { buckets, other_bucket: null, max_contributions: 1 }, secagg, threat_model: tm,
      first_phase: 0, phase_timeout_s: 5,
      spec: { kind: "histogram", source: "colors", params: { buckets }, privacy: { mechanism: "none" }, cohort: { min_clients: n } },
      ...opts.assignment,
    };
    this.server = fakeServer((req) => this.handle(req), { trusted: opts.trusted, log: opts.log });
  }

  /** The identity token party p registered with (null: none). */
  registeredToken(party: number): Uint8Array | null {
    const d = this.parties.get(party)?.deviceId ?? [...this.byDevice].find(([, p]) => p === party)?.[0];
    return (d !== undefined && this.server.tokens.get(d)) || null;
  }

  get fetch(): typeof fetch {
    return this.server.fetch;
  }

  /** Party p's closed neighbourhood in the graph drawn when phase 0 closed. */
  closed(party: number): number[] {
    return this.graph.closed(party);
  }

  /** Requests by path (without the cohort prefix and query): "POST /phases/2", "GET /phases/1/next", … */
  requests(party: number): string[] {
    const id = this.parties.get(party)?.deviceId;
    const prefix = `/v1/device/cohorts/${this.cohortId}`;
    return this.server.seen.filter((r) => r.headers.get(HDR_DEVICE) === id && r.path.startsWith(prefix))
      .map((r) => `${r.method} ${r.path.slice(prefix.length).split("?")[0]}`);
  }

  private async handle(req: Seen): Promise<Response> {
    const device = req.headers.get(HDR_DEVICE) ?? "";
    if (req.method === "POST" && req.path === "/v1/device/checkin") return this.checkin(device, bodyJson(req));
    const m = /^\/v1\/device\/cohorts\/([0-9a-f]+)\/(refusal|phases\/(\d)(\/next)?)(\?.*)?$/.exec(req.path);
    const party = this.byDevice.get(device);
    if (!m || m[1] !== this.cohortId || party === undefined) return json(404, { error: `unexpected ${req.method} ${req.path}` });
    if (m[2] === "refusal") {
      const r = bodyJson(req);
      this.refusals.set(party, { reason: r.reason, detail: r.detail });
      return json(200, {});
    }
    const phase = Number(m[3]);
    if (req.method === "POST" && !m[4]) return this.submit(party, phase, req.body);
    if (req.method === "GET" && m[4]) return this.next(party, phase);
    return json(405, { error: "method" });
  }

  /** Give the device the next party id (else it gets one at its first check-in, in check-in order). */
  seat(deviceId: string): number {
    if (!this.byDevice.has(deviceId)) this.byDevice.set(deviceId, this.byDevice.size + 1);
    return this.byDevice.get(deviceId) as number;
  }

  // -- check-in: the cohort forms once every device has checked in ------------------------------

  private async checkin(device: string, body: Obj): Promise<Response> {
    if (!this.byDevice.has(device) && this.byDevice.size >= this.opts.devices) return idle(1);
    const party = this.seat(device);
    this.checkedIn.add(party);
    for (let i = 0; i < 2000 && this.checkedIn.size < this.opts.devices; i++) await sleep(5);
    if (this.checkedIn.size < this.opts.devices) return idle(1);
    this.honestBind ??= c.binding(this.cfg.sessionId, await taskDigest(this.base));
    await (this.inventing ??= this.invent());
    if (!this.parties.has(party)) {
      const identity = this.server.identities.get(device) as Uint8Array;
      const honest = { ...this.base, party_id: party };
      const wire = this.opts.show ? this.opts.show(party, structuredClone(honest)) : honest;
      // the server binds what it showed this party: a lying server makes each signature verify for its own sender
      this.parties.set(party, { deviceId: device, identity, wire, bind: c.binding(this.cfg.sessionId, await taskDigest(wire)) });
    }
    const wire = (this.parties.get(party) as Party).wire;
    const extra: Obj = {};
    if (body.secagg_keys && this.opts.takeCheckinKeys) {
      // as analytics_server's advertise_from_checkin: the keys become the party's AdvertiseKeys only with a valid
      // signature (else the device runs phase 0 itself)
      const k = body.secagg_keys;
      const keys = { cPk: b64decode(k.c_pk, "c_pk", 32), sPk: b64decode(k.s_pk, "s_pk", 32), signature: k.signature == null ? new Uint8Array(0) : b64decode(k.signature, "signature", 64) };
      if ((await this.acceptAdvertise(party, keys)) === null) {
        this.keys.set(party, keys);
        this.inbox[0].set(party, true);
        extra.advertised = true;
      } else {
        extra.advertised = false;
      }
    }
    return json(200, { assignment: wire, queries_running: 1, ...extra });
  }

  /** The members the server makes up: identities and fresh keys of its own, the keys signed by those identities
   * (they pass every signature check; only an issuer's token could tell them apart). */
  private async invent(): Promise<void> {
    for (let i = 1; i <= (this.opts.invented ?? 0); i++) {
      const party = this.opts.devices + i;
      const identity = await Ed25519Key.fromSeed(new Uint8Array(32).fill(0xe0 + i));
      const cPk = (await X25519Key.fromPrivate(new Uint8Array(32).fill(0x60 + 2 * i))).publicBytes;
      const sPk = (await X25519Key.fromPrivate(new Uint8Array(32).fill(0x61 + 2 * i))).publicBytes;
      this.invented.set(party, identity.publicBytes);
      this.keys.set(party, { cPk, sPk, signature: await identity.sign(c.keysPayload(cPk, sPk)) });
    }
  }

  // -- phases -----------------------------------------------------------------------------------

  /** Parties expected to answer phase `p`: those the previous phase's close sent a message, less the refusals. */
  private expected(p: number): number[] {
    const prev = p === 0 ? new Set(this.byDevice.values()) : new Set(this.out[p === 4 && !this.cfg.active ? 2 : p - 1]?.keys() ?? []);
    return sorted(prev).filter((u) => !this.refusals.has(u) && !this.refusedByServer.has(u) && !this.invented.has(u));
  }

  private async submit(party: number, phase: number, body: Uint8Array): Promise<Response> {
    let msg: Message;
    try {
      msg = decode(body);
    } catch (exc) {
      return json(400, { error: (exc as Error).message });
    }
    const p = this.parties.get(party) as Party;
    if (phase === 0 && msg.type === MsgType.AdvertiseKeys) {
      const keys = { cPk: msg.cPk, sPk: msg.sPk, signature: msg.signature ?? new Uint8Array(0) };
      const error = await this.acceptAdvertise(party, keys);
      if (error) {
        this.refusedByServer.set(party, error);
        return json(400, { error });
      }
      this.keys.set(party, keys);
    } else if (phase === 1 && msg.type === MsgType.ShareKeys) {
      const keys = this.keys.get(party) as { cPk: Uint8Array; sPk: Uint8Array };
      if (!(await ed25519Verify(p.identity, msg.signature, c.advertisePayload(p.bind, party, keys.cPk, keys.sPk)))) {
        this.refusedByServer.set(party, "share keys must carry its identity key's signature over its keys");
        return json(400, { error: `party ${party}: share keys must carry its identity key's signature over its keys for this session and task` });
      }
      this.shareKeys.set(party, msg);
      if (msg.membersWanted) this.wanted.set(party, Math.min(msg.membersWanted, this.cfg.n));
    } else if (phase === 2 && (msg.type === MsgType.MaskedInput || msg.type === MsgType.MaskedInputProved)) {
      this.masked.set(party, unpack(msg.packed, msg.dim, msg.bits));
    } else if (phase === 3 && msg.type === MsgType.ConsistencySignature) {
      const bitmap = this.shownSurvivors.get(party) as Uint8Array;
      if (!(await ed25519Verify(p.identity, msg.signature, c.consistencyPayload(this.honestBind, bitmap)))) return json(400, { error: "consistency signature" });
      this.consistency.set(party, msg.signature);
    } else if (phase === 4 && msg.type === MsgType.UnmaskShares) {
      this.unmask.set(party, msg.shares);
    } else {
      return json(400, { error: `${MsgType[msg.type]} does not belong to phase ${phase}` });
    }
    this.inbox[phase].set(party, msg);
    return json(202, { accepted: true });
  }

  /** secagg/server.py `_accept_advertise_keys` (identities are always known here): the keys must carry the party's
   * identity key's signature over them and be new. An error, or null when taken. */
  private async acceptAdvertise(party: number, keys: { cPk: Uint8Array; sPk: Uint8Array; signature: Uint8Array }): Promise<string | null> {
    const identity = (this.parties.get(party) as Party).identity;
    if (keys.signature.length !== 64 || !(await ed25519Verify(identity, keys.signature, c.keysPayload(keys.cPk, keys.sPk)))) return `party ${party}: advertised keys must be signed by its identity key`;
    const seen = new Set([...this.keys].filter(([v]) => v !== party).flatMap(([, k]) => [hex(k.cPk), hex(k.sPk)]));
    if (seen.has(hex(keys.cPk)) || seen.has(hex(keys.sPk)) || hex(keys.cPk) === hex(keys.sPk)) return `party ${party}: a public key is advertised twice`;
    return null;
  }

  private async next(party: number, phase: number): Promise<Response> {
    await this.close(phase);
    const reply = this.out[phase]?.get(party);
    if (reply === undefined) return json(410, { error: `party ${party} is no longer in the cohort` });
    if (reply === "finished") return json(200, { status: "finished", contributed: this.masked.has(party) });
    const nextPhase = phase === 2 ? (this.cfg.active ? 3 : 4) : phase + 1;
    return phaseMessage(reply, nextPhase);
  }

  /** Close phase `p` once every expected party answered (or the phase timed out), once. */
  private close(p: number): Promise<void> {
    this.closing[p] ??= (async () => {
      const limit = this.opts.phaseTimeoutMs ?? 3000;
      this.opened[p] = Date.now();
      while (Date.now() - this.opened[p] < limit && !this.expected(p).every((u) => this.inbox[p].has(u))) await sleep(5);
      this.out[p] = await [() => this.closeAdvertise(), () => this.closeShareKeys(), () => this.closeMasked(), () => this.closeConsistency(), () => this.closeUnmask()][p]();
    })();
    return this.closing[p] as Promise<void>;
  }

  /** The identity key of party v (a device's registered one, or one the server made up). */
  private identityOf(v: number): Uint8Array {
    return this.invented.get(v) ?? (this.parties.get(v) as Party).identity;
  }

  /** The members list over `keys` (party → identity and advertised keys), zeros for the parties without keys. */
  private async membersList(entries: Map<number, PeerEntry>): Promise<Uint8Array> {
    const leaves = new Uint8Array(this.cfg.n * c.MEMBER_LEAF_BYTES);
    for (const [v, e] of entries) leaves.set(await c.memberLeaf(v, e.identity, e.cPk, e.sPk), (v - 1) * c.MEMBER_LEAF_BYTES);
    return leaves;
  }

  /** secagg/server.py `_close_advertise_keys`: the members list and its root, the graph drawn from it, the binding
   * extended with it; each party's PeerKeys lists its neighbours that advertised keys (identity, keys, signature,
   * token) and carries the leaves. */
  private async closeAdvertise(): Promise<Map<number, Uint8Array>> {
    const u1 = sorted(this.keys.keys()).filter((u) => !this.refusals.has(u));
    const tok = this.opts.tokens;
    const entries = new Map<number, PeerEntry>(u1.map((v) => {
      const k = this.keys.get(v) as { cPk: Uint8Array; sPk: Uint8Array; signature: Uint8Array };
      const token = tok && !this.invented.has(v) ? tok(v, this) : new Uint8Array(0);
      return [v, { party: v, identity: this.identityOf(v), cPk: k.cPk, sPk: k.sPk, signature: k.signature, token }];
    }));
    const leaves = await this.membersList(entries);
    const root = await c.membersRoot(leaves);
    this.leaves = leaves;
    this.root = root;
    this.graph = await this.cfg.neighbourGraph(await c.graphSeed(this.honestBind, root));
    this.honestBind = c.roundBinding(this.honestBind, root);
    for (const p of this.parties.values()) p.bind = c.roundBinding(p.bind, root);
    const out = new Map<number, Uint8Array>();
    for (const u of u1) {
      if (this.invented.has(u)) continue;
      let peers = this.graph.closed(u).filter((v) => u1.includes(v)).map((v) => entries.get(v) as PeerEntry);
      let shown = leaves;
      const sub = this.opts.substitutePeerKeys;
      if (sub && sub.to === u) {
        // the server's own keys (its two fresh public keys: any distinct valid points do), under the peer's signature,
        // in the entry and in the leaves it shows this party
        const forged = new Map(entries);
        const e = forged.get(sub.peer) as PeerEntry;
        forged.set(sub.peer, { ...e, cPk: (await X25519Key.fromPrivate(new Uint8Array(32).fill(0x51))).publicBytes, sPk: (await X25519Key.fromPrivate(new Uint8Array(32).fill(0x52))).publicBytes });
        peers = peers.map((p) => forged.get(p.party) as PeerEntry);
        shown = await this.membersList(forged);
      }
      out.set(u, encode({ type: MsgType.PeerKeys, sessionId: this.cfg.sessionId, party: u, peers, leaves: shown }));
    }
    return out;
  }

  private closeShareKeys(): Map<number, Uint8Array> {
    const tok = this.opts.tokens;
    const u2 = sorted(this.shareKeys.keys()).filter((u) => !this.refusals.has(u));
    const out = new Map<number, Uint8Array>();
    for (const v of u2) {
      const senders = this.graph.closed(v).filter((u) => u !== v && u2.includes(u));
      const tamper = this.opts.tamperShare;
      const cts: [number, Uint8Array][] = senders.map((u) => {
        const ct = Uint8Array.from((this.shareKeys.get(u) as { ciphertexts: [number, Uint8Array][] }).ciphertexts.find(([r]) => r === v)![1]);
        if (tamper && tamper.from === u && tamper.to === v) ct[20] ^= 1;
        return [u, ct];
      });
      const members: MemberEntry[] = [];
      const wanted = this.opts.members === "none" ? 0 : this.wanted.get(v) ?? 0;
      for (const w of u2) {
        if (members.length >= wanted) break;
        if (this.graph.closed(v).includes(w)) continue;
        const k = this.keys.get(w) as { cPk: Uint8Array; sPk: Uint8Array };
        const signature = Uint8Array.from((this.shareKeys.get(w) as { signature: Uint8Array }).signature);
        if (this.opts.members === "forged") signature[0] ^= 1;
        members.push({ party: w, identity: this.identityOf(w), cPk: k.cPk, sPk: k.sPk, signature });
      }
      const memberTokens = tok ? members.map((e) => tok(e.party, this)) : null;
      const msg = encode({ type: MsgType.RoutedShares, sessionId: this.cfg.sessionId, party: v, ciphertexts: cts, members, memberTokens });
      this.routed.set(v, decode(msg) as Extract<Message, { type: MsgType.RoutedShares }>);
      out.set(v, msg);
    }
    return out;
  }

  private survivors(): number[] {
    return sorted(this.masked.keys()).filter((u) => !this.refusals.has(u));
  }

  private closeMasked(): Map<number, Uint8Array> {
    const u3 = this.survivors();
    const bitmap = encodeBitmap(u3, this.cfg.n);
    const split = this.opts.splitSurvivors;
    const other = split ? encodeBitmap(u3.filter((u) => u !== split.drop), this.cfg.n) : bitmap;
    const sid = this.cfg.sessionId;
    for (const u of u3) this.shownSurvivors.set(u, split?.parties.includes(u) ? other : bitmap);
    return new Map(u3.map((u) => [u, this.cfg.active
      ? encode({ type: MsgType.ConsistencyRequest, sessionId: sid, party: u, survivors: this.shownSurvivors.get(u) as Uint8Array })
      : encode({ type: MsgType.UnmaskRequest, sessionId: sid, party: u, survivors: bitmap, signatures: [] })]));
  }

  /** Each party gets the set it signed and the signatures of its neighbours shown that same set (secagg/server.py
   * `_close_consistency_check`: the neighbours' signatures). */
  private closeConsistency(): Map<number, Uint8Array> {
    const signers = sorted(this.consistency.keys());
    return new Map(signers.map((u) => {
      const bitmap = this.shownSurvivors.get(u) as Uint8Array;
      const signatures = signers.filter((w) => this.graph.closed(u).includes(w) && hex(this.shownSurvivors.get(w) as Uint8Array) === hex(bitmap))
        .map((w) => [w, this.consistency.get(w)] as [number, Uint8Array]);
      return [u, encode({ type: MsgType.UnmaskRequest, sessionId: this.cfg.sessionId, party: u, survivors: bitmap, signatures })];
    }));
  }

  /** The sum: survivors' masked inputs, less their self masks and the pairwise masks they shared with parties that
   * dropped after sharing keys (both reconstructed from the revealed shares). */
  private async closeUnmask(): Promise<Map<number, "finished">> {
    const u3 = this.survivors();
    const shares = new Map<string, Map<number, bigint>>();
    for (const [w, list] of this.unmask) {
      for (const [v, kind, s] of list) {
        const key = `${v}/${kind}`;
        if (!shares.has(key)) shares.set(key, new Map());
        (shares.get(key) as Map<number, bigint>).set(w, shamir.fromBytes(s));
      }
    }
    const { dim, bits } = this.cfg;
    const total = new ModVector(dim, bits);
    for (const u of u3) total.addInto(this.masked.get(u) as ModVector, 1);
    for (const u of u3) {
      const b = shamir.reconstruct(shares.get(`${u}/${ShareKind.SelfMaskSeed}`) as Map<number, bigint>);
      total.addInto(await c.expandMask(await c.selfMaskKey(bigToBE(b, 32), this.honestBind, u), dim, bits), -1);
    }
    for (const v of sorted(this.shareKeys.keys()).filter((x) => !u3.includes(x))) {
      const s = shares.get(`${v}/${ShareKind.MaskKey}`);
      if (!s) continue;
      const sk = await X25519Key.fromPrivate(bigToBE(shamir.reconstruct(s), 32));
      for (const u of this.graph.closed(v).filter((x) => x !== v && u3.includes(x))) {
        const key = await c.pairMaskKey(await sk.agree((this.keys.get(u) as { sPk: Uint8Array }).sPk), this.honestBind, u, v);
        total.addInto(await c.expandMask(key, dim, bits), u < v ? -1 : 1);
      }
    }
    total.mask();
    this.sum = Array.from({ length: dim }, (_, i) => total.get(i));
    return new Map(u3.map((u) => [u, "finished" as const]));
  }
}
