/** The client side of secure aggregation as a sans-IO state machine (the port of secagg/client.py).
 *
 * `start()` returns the AdvertiseKeys message; `receive(serverMessage)` the reply for the next phase. Before answering,
 * the client checks what the server shows it: peers are its graph neighbours, its own keys came back unchanged, no
 * public key appears twice, signatures verify, the survivor sets are nested (U3 ⊆ U2 ⊆ U1), contain
 * it and hold at least the threshold of its neighbourhood (and, with `minSurvivors`, list at least that many parties
 * in the whole cohort), and it never reveals both the self-mask share and the key share of one peer, not even across
 * retried or altered unmask requests. The byte-identical message again returns the same reply.
 *
 * Random draws, in order, from the injected source: c_u^SK (32 bytes), s_u^SK (32 bytes) in `start()`; on PeerKeys
 * the self-mask seed b_u (32 bytes), the Shamir coefficients for b_u, then those for s_u^SK. A device that sent its
 * public keys with its check-in (docs/protocol.md, "Keys with the check-in") drew them earlier with `KeyPairs.draw`
 * from a source of its own and passes them as `keys`: `start()` then draws nothing.
 *
 * Task binding (docs/secagg.md, "Devices that check the server"): `taskDigest` — the device's own hash of what it was
 * asked to compute (taskDigest.ts) — enters every derived key and signed payload. With an `identityKey` the party
 * signs its advertised keys bound to session and task and sends the signature with its shares (the server checks it,
 * and shows it in member entries); with `verifyPeers` (the default, and an identity key) it verifies each peer's
 * signature over its advertised keys before encrypting any share to them, and before it computes its masked input it
 * opens every share sent to it — each under a channel key agreed with keys that peer's identity signed and bound to
 * this session, task and members root, so a share that opens is that peer's word that it agreed to them, and one that
 * does not is a refusal naming it — and verifies the signature of any member entry the server adds
 * (`TaskMismatchError` on any failure); with `minVerified` it refuses (`CohortUnverifiedError`) unless that many
 * distinct identities (its own included) are so vouched for — counted again when the survivor set arrives, among the
 * members it lists, before the party signs or reveals anything. With `issuerKeys` (identity tokens,
 * docs/identities.md) an identity counts — toward `minVerified` and toward the share threshold of its neighbourhood —
 * only when the server also relayed a token for it that verifies under one of those keys: a member the server invented
 * signs, but has no token, so it does not count. Peers' identities and tokens come with the peer keys;
 * `peerIdentityKeys`, when given, pins them (every peer's identity must be the one listed there).
 *
 * The members list and the graph (docs/secagg.md, "A graph the server cannot steer"): PeerKeys carries one leaf per
 * party (its identity and advertised keys, as the server fixed them when phase 0 closed); the party checks its own leaf
 * and each peer's against it, computes the members root, draws the neighbour graph from it and refuses peers outside
 * its own neighbourhood. The root then joins the binding of every later key and signature, so devices shown different
 * member lists cannot complete a session together.
 *
 * The safety floor (floor.ts): with `floorAssumptions` (the device's own) the party refuses (`UnsafeParametersError`)
 * a session without the consistency round or whose degree or threshold is below the floor it computes for n, and —
 * with `issuerKeys` — a neighbourhood whose token-holding members fall short of the threshold. */

import { bigFromBE, concat, equalBytes, hex, u32be } from "../bytes.js";
import { Clock, SYSTEM_CLOCK } from "../clock.js";
import { TrustedKeys, tokenVerifies } from "../identityToken.js";
import { ByteSource, RandomSource } from "../randomness.js";
import { Ed25519Key, X25519Key, ed25519Verify, sha256 } from "../webcrypto.js";
import { SecAggConfig } from "./config.js";
import * as c from "./crypto.js";
import { ModVector, pack } from "./encoding.js";
import {
  CohortUnverifiedError,
  ConfigError,
  DecryptionError,
  DoubleRevealError,
  DuplicateKeyError,
  InconsistentSetsError,
  InconsistentSurvivorsError,
  SignatureError,
  TaskMismatchError,
  TooFewSurvivorsError,
  UnknownPartyError,
  WrongPhaseError,
  WrongSessionError,
} from "./errors.js";
import * as floor from "./floor.js";
import { Message, MsgType, PeerEntry, ShareKind, decode, decodeBitmap, encode } from "./messages.js";
import * as shamir from "./shamir.js";

export enum Phase {
  AdvertiseKeys = 0,
  ShareKeys = 1,
  MaskedInput = 2,
  ConsistencyCheck = 3,
  Unmasking = 4,
  Done = 5,
  Aborted = 6,
}

/** Errors after which the client abandons the session (TooFewSurvivorsError is an InconsistentSetsError). */
const FATAL = [SignatureError, DuplicateKeyError, DecryptionError, InconsistentSetsError, DoubleRevealError, floor.UnsafeParametersError];
const EMPTY = new Uint8Array(0);
const list = (xs: number[]): string => `[${xs.join(", ")}]`;

/** A party's two X25519 key pairs: c (the channel key, encrypting its shares) and s (the mask key, agreeing pairwise
 * masks). */
export class KeyPairs {
  private constructor(readonly c: X25519Key, readonly s: X25519Key) {}

  /** Fresh pairs: the channel key from the first 32 bytes of `source`, the mask key from the next 32 (one read, so
   * concurrent draws from one source never interleave). */
  static async draw(source: ByteSource): Promise<KeyPairs> {
    const raw = await source.bytes(64);
    return new KeyPairs(await X25519Key.fromPrivate(raw.subarray(0, 32)), await X25519Key.fromPrivate(raw.subarray(32)));
  }
}

export interface ClientOptions {
  identityKey?: Ed25519Key | null;
  /** Party → identity key: when given, every peer's identity in the peer keys must be the one listed here (the
   * service's devices learn their peers' identities from the peer keys and the members list themselves). */
  peerIdentityKeys?: Map<number, Uint8Array> | null;
  randomness: RandomSource;
  inputProof?: Uint8Array | null;
  minSurvivors?: number | null;
  /** Key pairs drawn ahead (sent with a check-in); without them `start()` draws them from `randomness`. */
  keys?: KeyPairs | null;
  /** The device's own digest of its task (32 bytes; default: NO_TASK, a session that binds no task). */
  taskDigest?: Uint8Array | null;
  /** Verify every peer's key signature before encrypting shares, and before masking that every share sender's share
   * opens under the channel key bound to this session, task and members root (else `TaskMismatchError`) and every
   * requested member's signature (default true; needs `identityKey`). */
  verifyPeers?: boolean;
  /** Distinct identities (this party's included) whose signatures for this session and task must verify before the
   * masked input is sent (and, among the survivors, before anything is revealed); needs `identityKey` and
   * `verifyPeers`. */
  minVerified?: number | null;
  /** Pinned identity-token issuer keys: an identity counts toward `minVerified` and toward the share threshold of the
   * neighbourhood only with a token that verifies for it under one of them (null: tokens are not checked). */
  issuerKeys?: TrustedKeys | null;
  /** The device's own assumptions for the safety floor (floor.ts; null: no floor, library use). */
  floorAssumptions?: floor.Assumptions | null;
  /** Called with the seconds each phase's computation took (the benchmark's per-phase times). */
  onTiming?: (phase: string, seconds: number) => void;
  /** Where `onTiming`'s durations are read (its monotonic clock; default the system's). */
  clock?: Clock;
}

export class ClientSession {
  phase = Phase.AdvertiseKeys;
  private readonly t: number;
  /** This party's closed neighbourhood, drawn from the members root when the peer keys arrive. */
  private nbrs = new Set<number>();
  private leaves: Uint8Array = EMPTY;
  private advert: Uint8Array | null = null;
  private cKey!: X25519Key;
  private sKey!: X25519Key;
  private peers = new Map<number, PeerEntry>();
  /** Session id ‖ task digest; from the peer keys on, with the members root appended. */
  private bind: Uint8Array;
  private readonly verify: boolean;
  private readonly ownId: Uint8Array;
  private peerIds = new Map<number, Uint8Array>();
  private peerTokens = new Map<number, Uint8Array>();
  /** Party → identity of every member this party counted toward `minVerified` at the routed shares. */
  private counted = new Map<number, Uint8Array>();
  /** Distinct identities (this party's included) it verified agreed to this session and task — senders whose shares
   * opened, member entries whose signatures verified — (and, with `issuerKeys`, whose tokens verified); null until the
   * routed shares were checked. */
  verifiedMembers: number | null = null;
  private channel = new Map<number, Uint8Array>();
  private bSeed!: Uint8Array;
  private ownShares!: [bigint, bigint];
  private held = new Map<number, [bigint, bigint]>();
  private u2 = new Set<number>();
  private revealed = new Map<number, ShareKind>();
  private signedSurvivors: Uint8Array | null = null;
  private last: { digest: string; reply: Uint8Array | null } | null = null;
  private busy: Promise<unknown> = Promise.resolve();

  constructor(readonly config: SecAggConfig, readonly party: number, private readonly input: ModVector, private readonly opts: ClientOptions) {
    if (!Number.isInteger(party) || party < 1 || party > config.n) throw new ConfigError(`party_id: must be between 1 and n=${config.n}, got ${party}`);
    if (input.dim !== config.dim || input.bits !== config.bits) throw new ConfigError(`input_vector: must be a vector of length ${config.dim} at ${config.bits} bits`);
    if (config.active && !opts.identityKey) throw new ConfigError("identity_key is required in the active threat model");
    const assumptions = opts.floorAssumptions ?? null;
    if (assumptions !== null) {
      if (!config.active) {
        throw new floor.UnsafeParametersError(
          `threat model: ${config.threatModel} has no consistency round: the server could show two survivor sets; this device requires the active model`,
        );
      }
      floor.check(config.n, config.resolvedDegree, config.shareThreshold, assumptions);
    }
    const ms = opts.minSurvivors;
    if (ms != null && (!Number.isInteger(ms) || ms < 1)) throw new ConfigError(`min_survivors: must be a positive integer, got ${ms}`);
    const digest = opts.taskDigest ?? c.NO_TASK;
    if (!(digest instanceof Uint8Array) || digest.length !== c.TASK_DIGEST_BYTES) throw new ConfigError(`task_digest: must be ${c.TASK_DIGEST_BYTES} bytes`);
    const mv = opts.minVerified;
    if (mv != null) {
      if (!Number.isInteger(mv) || mv < 1) throw new ConfigError(`min_verified: must be a positive integer, got ${mv}`);
      if (!opts.identityKey || opts.verifyPeers === false) throw new ConfigError("min_verified: needs identity_key and verify_peers");
    }
    this.bind = c.binding(config.sessionId, digest);
    this.ownId = opts.identityKey ? opts.identityKey.publicBytes : c.NO_IDENTITY;
    this.verify = (opts.verifyPeers ?? true) && !!opts.identityKey;
    this.t = config.shareThreshold;
  }

  private async timed<T>(name: string, work: () => Promise<T>): Promise<T> {
    const clock = this.opts.clock ?? SYSTEM_CLOCK;
    const t0 = clock.monotonic();
    try {
      return await work();
    } finally {
      this.opts.onTiming?.(name, clock.monotonic() - t0);
    }
  }

  /** The AdvertiseKeys message (the same bytes if called again). */
  start(): Promise<Uint8Array> {
    return this.serial(async () => {
      if (this.advert) return this.advert;
      return this.timed("advertise_keys", async () => {
        const cfg = this.config;
        const keys = this.opts.keys ?? (await KeyPairs.draw(this.opts.randomness));
        this.cKey = keys.c;
        this.sKey = keys.s;
        // signed session-free (keys sent ahead with a check-in carry the same signature); bound to session, task and
        // members root the party signs them again with its shares
        let signature: Uint8Array = EMPTY;
        if (this.opts.identityKey) signature = await this.opts.identityKey.sign(c.keysPayload(this.cKey.publicBytes, this.sKey.publicBytes));
        this.advert = encode({ type: MsgType.AdvertiseKeys, sessionId: cfg.sessionId, party: this.party, cPk: this.cKey.publicBytes, sPk: this.sKey.publicBytes, signature });
        return this.advert;
      });
    });
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const run = this.busy.then(work);
    this.busy = run.catch(() => undefined);
    return run;
  }

  /** Process one server message; the reply, or null once finished. */
  receive(data: Uint8Array): Promise<Uint8Array | null> {
    return this.serial(async () => {
      const digest = hex(await sha256(data));
      if (this.last && this.last.digest === digest) return this.last.reply;
      if (!this.advert) throw new WrongPhaseError("call start() before passing server messages");
      if (this.phase === Phase.Aborted) throw new WrongPhaseError("this client abandoned the session after a protocol violation");
      const msg = decode(data);
      if (!equalBytes(msg.sessionId, this.config.sessionId)) throw new WrongSessionError("message belongs to another session");
      if (msg.party !== this.party) throw new UnknownPartyError(`message is addressed to party ${msg.party}, this is party ${this.party}`);
      let reply: Uint8Array | null;
      try {
        reply = await this.dispatch(msg);
      } catch (exc) {
        if (FATAL.some((cls) => exc instanceof cls)) this.phase = Phase.Aborted;
        throw exc;
      }
      this.last = { digest, reply };
      return reply;
    });
  }

  private dispatch(msg: Message): Promise<Uint8Array | null> {
    const p = this.phase;
    const active = this.config.active;
    if (p === Phase.AdvertiseKeys && msg.type === MsgType.PeerKeys) return this.timed("share_keys", () => this.onPeerKeys(msg));
    if (p === Phase.ShareKeys && msg.type === MsgType.RoutedShares) return this.timed("masked_input", () => this.onRoutedShares(msg));
    if (p === Phase.MaskedInput && active && msg.type === MsgType.ConsistencyRequest) return this.timed("consistency_check", () => this.onConsistency(msg));
    if (msg.type === MsgType.UnmaskRequest && ((p === Phase.MaskedInput && !active) || p === Phase.ConsistencyCheck || p === Phase.Done)) {
      return this.timed("unmasking", () => this.onUnmask(msg));
    }
    throw new WrongPhaseError(`${MsgType[msg.type]} does not belong to phase ${Phase[p]}`);
  }

  /** Whether an identity counts toward `minVerified` and the neighbourhood's threshold: always without `issuerKeys`,
   * else only with a token that verifies for it under a pinned key. */
  private counts(identity: Uint8Array, token: Uint8Array | undefined): Promise<boolean> {
    const issuers = this.opts.issuerKeys ?? null;
    if (issuers === null) return Promise.resolve(true);
    if (!token || !token.length) return Promise.resolve(false);
    return tokenVerifies(token, identity, issuers);
  }

  private async onPeerKeys(msg: Extract<Message, { type: MsgType.PeerKeys }>): Promise<Uint8Array> {
    const cfg = this.config;
    await this.membersList(msg.leaves);
    const nbrs = this.nbrs;
    const parties = msg.peers.map((p) => p.party);
    if (new Set(parties).size !== parties.length) throw new InconsistentSetsError("peer keys: a party is listed twice");
    const stray = parties.filter((p) => !nbrs.has(p)).sort((a, b) => a - b);
    if (stray.length) throw new InconsistentSetsError(`peer keys: parties ${list(stray.slice(0, 5))} are not neighbours`);
    if (parties.length < this.t) throw new InconsistentSetsError(`peer keys: ${parties.length} peers, below the threshold ${this.t}`);
    const own = msg.peers.find((p) => p.party === this.party);
    if (!own || !equalBytes(own.cPk, this.cKey.publicBytes) || !equalBytes(own.sPk, this.sKey.publicBytes) || !equalBytes(own.identity, this.ownId)) {
      throw new InconsistentSetsError("peer keys: this party's own keys are missing or altered");
    }
    const keys = new Set(msg.peers.flatMap((p) => [hex(p.cPk), hex(p.sPk)]));
    if (keys.size !== 2 * msg.peers.length) throw new DuplicateKeyError("peer keys: the same public key is advertised twice");
    if (this.opts.identityKey && new Set(msg.peers.map((p) => hex(p.identity))).size !== msg.peers.length) {
      throw new DuplicateKeyError("peer keys: the same identity key is listed for two parties");
    }
    const others = msg.peers.filter((p) => p.party !== this.party);
    // the leaves, signatures and tokens are checked concurrently (WebCrypto works off the main thread); the errors are
    // those of checking them in order
    const [leaves, signed, vouched] = await Promise.all([
      Promise.all(msg.peers.map((p) => c.memberLeaf(p.party, p.identity, p.cPk, p.sPk))),
      this.verify ? Promise.all(others.map((p) => ed25519Verify(p.identity, p.signature ?? EMPTY, c.keysPayload(p.cPk, p.sPk)))) : Promise.resolve(null),
      Promise.all(msg.peers.map((p) => (p.party === this.party ? Promise.resolve(true) : this.counts(p.identity, p.token)))),
    ]);
    const pinned = this.opts.peerIdentityKeys ?? null;
    msg.peers.forEach((p, i) => {
      if (!equalBytes(this.leaf(p.party), leaves[i])) throw new InconsistentSetsError(`peer keys: party ${p.party}'s entry is not the one in the members list`);
      if (pinned !== null && p.party !== this.party) {
        const expected = pinned.get(p.party);
        if (!expected || !equalBytes(expected, p.identity)) throw new SignatureError(`peer keys: party ${p.party}'s identity key is not the one expected`);
      }
    });
    this.peerIds = new Map(msg.peers.map((p) => [p.party, p.identity]));
    this.peerTokens = new Map(msg.peers.map((p) => [p.party, p.token ?? EMPTY]));
    if (signed !== null) {  // before any share is encrypted to them: every peer's keys must be its own
      others.forEach((p, i) => {
        if (!signed[i]) throw new TaskMismatchError(p.party, "its advertised keys are not signed by its identity key");
      });
    }
    let untrusted = 0;
    if (this.opts.issuerKeys) {  // the threshold counts only members an issuer vouched for
      const trusted = vouched.filter(Boolean).length;
      untrusted = msg.peers.length - trusted;
      if (trusted < this.t) {
        throw new floor.UnsafeParametersError(
          `threshold: ${trusted} of this party's ${msg.peers.length} neighbours (itself included) hold a valid issuer token, below the share threshold ${this.t}`,
        );
      }
    }
    const assumptions = this.opts.floorAssumptions ?? null;
    if (assumptions !== null) floor.check(cfg.n, cfg.resolvedDegree, this.t, assumptions, untrusted);
    for (const p of msg.peers) this.peers.set(p.party, p);
    const u1 = [...this.peers.keys()].sort((a, b) => a - b);
    const rng = this.opts.randomness;
    this.bSeed = await rng.bytes(32);
    const bShares = await shamir.split(bigFromBE(this.bSeed), u1, this.t, rng);
    const sShares = await shamir.split(bigFromBE(this.sKey.privateBytes), u1, this.t, rng);
    this.ownShares = [bShares.get(this.party) as bigint, sShares.get(this.party) as bigint];
    const cts: [number, Uint8Array][] = [];
    for (const v of u1) {
      if (v === this.party) continue;
      const key = await c.channelKey(await this.agree(this.cKey, (this.peers.get(v) as PeerEntry).cPk), this.bind, this.party, v);
      this.channel.set(v, key);
      const pt = concat(u32be(this.party), u32be(v), shamir.toBytes(bShares.get(v) as bigint), shamir.toBytes(sShares.get(v) as bigint));
      cts.push([v, await c.sealShare(key, this.bind, this.party, v, pt)]);
    }
    let signature: Uint8Array = EMPTY;
    if (this.opts.identityKey) signature = await this.opts.identityKey.sign(c.advertisePayload(this.bind, this.party, this.cKey.publicBytes, this.sKey.publicBytes));
    this.phase = Phase.ShareKeys;
    return encode({ type: MsgType.ShareKeys, sessionId: cfg.sessionId, party: this.party, ciphertexts: cts, signature, membersWanted: this.membersWanted() });
  }

  /** Check this party's own leaf, compute the members root, draw the graph from it and bind what follows to it. */
  private async membersList(leaves: Uint8Array): Promise<void> {
    const cfg = this.config;
    const size = c.MEMBER_LEAF_BYTES;
    if (leaves.length !== cfg.n * size) throw new InconsistentSetsError(`members list: ${Math.floor(leaves.length / size)} leaves for a cohort of ${cfg.n}`);
    this.leaves = leaves;
    if (!equalBytes(this.leaf(this.party), await c.memberLeaf(this.party, this.ownId, this.cKey.publicBytes, this.sKey.publicBytes))) {
      throw new InconsistentSetsError("members list: this party's keys are missing or altered");
    }
    const root = await c.membersRoot(leaves);
    const graph = await cfg.neighbourGraph(await c.graphSeed(this.bind, root));
    this.nbrs = new Set(graph.closed(this.party));
    this.bind = c.roundBinding(this.bind, root);
  }

  /** Party's leaf in the members list (empty outside 1..n). */
  private leaf(party: number): Uint8Array {
    const size = c.MEMBER_LEAF_BYTES;
    if (!(Number.isInteger(party) && party >= 1 && party <= this.config.n)) return EMPTY;
    return this.leaves.subarray((party - 1) * size, party * size);
  }

  /** Signed members beyond the neighbourhood to ask for: enough to reach `minVerified` even if every neighbour the
   * protocol may lose (all but t) drops; none on the complete graph (everyone is a neighbour). */
  private membersWanted(): number {
    const mv = this.opts.minVerified;
    if (mv == null || this.config.usesCompleteGraph) return 0;
    return Math.max(0, Math.min(this.config.n, mv) - this.t);
  }

  /** The members this party counts, before anything of its input is computed: each share sender — its share opened
   * under a channel key its identity signed (the peer keys) and bound to this session, task and members root, which is
   * what a signature over them would prove — and each member entry whose signature over its keys for this session and
   * task verifies; and their count against `minVerified`. The member signatures and tokens are checked concurrently
   * (WebCrypto works off the main thread); the errors are those of checking them in order. */
  private async verifyCohort(msg: Extract<Message, { type: MsgType.RoutedShares }>): Promise<void> {
    const cfg = this.config;
    const senders = msg.ciphertexts.map(([v]) => ({ party: v, identity: this.peerIds.get(v) as Uint8Array }));
    const memberTokens = msg.memberTokens?.length ? msg.memberTokens : msg.members.map(() => EMPTY);
    const [memberOk, senderTok, memberTok, memberLeaves] = await Promise.all([
      Promise.all(msg.members.map((e) => ed25519Verify(e.identity, e.signature, c.advertisePayload(this.bind, e.party, e.cPk, e.sPk)))),
      Promise.all(senders.map((e) => this.counts(e.identity, this.peerTokens.get(e.party)))),
      Promise.all(msg.members.map((e, i) => this.counts(e.identity, memberTokens[i]))),
      Promise.all(msg.members.map((e) => c.memberLeaf(e.party, e.identity, e.cPk, e.sPk))),
    ]);
    const counted = new Map<number, Uint8Array>();
    if (this.opts.identityKey) counted.set(this.party, this.ownId);
    senders.forEach((e, i) => {
      if (senderTok[i]) counted.set(e.party, e.identity);
    });
    const seen = new Set<number>();
    msg.members.forEach((m, i) => {
      if (!(m.party >= 1 && m.party <= cfg.n) || this.nbrs.has(m.party) || seen.has(m.party)) {
        throw new InconsistentSetsError(`members: party ${m.party} is a neighbour, repeated or outside the cohort`);
      }
      seen.add(m.party);
      if (!equalBytes(this.leaf(m.party), memberLeaves[i])) throw new InconsistentSetsError(`members: party ${m.party}'s entry is not the one in the members list`);
      if (!memberOk[i]) throw new TaskMismatchError(m.party, "member list");
      if (memberTok[i]) counted.set(m.party, m.identity);
    });
    this.counted = counted;
    const verified = new Set([...counted.values()].map(hex)).size;
    this.verifiedMembers = verified;
    const min = this.opts.minVerified;
    if (min != null && verified < min) throw new CohortUnverifiedError(verified, min, this.opts.issuerKeys != null);
  }

  private async agree(key: X25519Key, peer: Uint8Array): Promise<Uint8Array> {
    try {
      return await key.agree(peer);
    } catch (exc) {
      throw new DecryptionError((exc as Error).message);
    }
  }

  private async onRoutedShares(msg: Extract<Message, { type: MsgType.RoutedShares }>): Promise<Uint8Array> {
    const cfg = this.config;
    const senders = msg.ciphertexts.map(([s]) => s);
    if (new Set(senders).size !== senders.length) throw new InconsistentSetsError("routed shares: a sender is listed twice");
    const stray = senders.filter((s) => s === this.party || !this.peers.has(s)).sort((a, b) => a - b);
    if (stray.length) throw new InconsistentSetsError(`routed shares: senders ${list(stray.slice(0, 5))} were not in the key set`);
    const u2 = new Set([...senders, this.party]);
    if (u2.size < this.t) throw new InconsistentSetsError(`routed shares: ${u2.size} parties, below the threshold ${this.t}`);
    // the shares are opened concurrently (WebCrypto works off the main thread); the errors are those of opening them in
    // order. Verifying, a share that does not open names its sender: the channel key is that peer's (its keys'
    // signature verified at the peer keys) and bound to this session, task and members root.
    const opened = await Promise.all(msg.ciphertexts.map(([v, ct]) =>
      c.openShare(this.channel.get(v) as Uint8Array, this.bind, v, this.party, ct).catch((exc: unknown) => {
        if (exc instanceof DecryptionError) return exc;
        throw exc;
      })));
    const held = new Map<number, [bigint, bigint]>();
    for (const [i, [v]] of msg.ciphertexts.entries()) {
      const pt = opened[i];
      if (pt instanceof DecryptionError) {
        if (this.verify) throw new TaskMismatchError(v, "", { share: true });
        throw pt;
      }
      if (pt.length !== 8 + 2 * shamir.SHARE_BYTES) throw new DecryptionError(`share from party ${v} has the wrong length`);
      const view = new DataView(pt.buffer, pt.byteOffset, pt.byteLength);
      const b = shamir.fromBytes(pt.subarray(8, 41));
      const s = shamir.fromBytes(pt.subarray(41, 74));
      if (view.getUint32(0, false) !== v || view.getUint32(4, false) !== this.party || b >= shamir.PRIME || s >= shamir.PRIME) {
        throw new DecryptionError(`share from party ${v} names the wrong parties or is out of range`);
      }
      held.set(v, [b, s]);
    }
    if (this.verify) await this.verifyCohort(msg);
    this.held = held;
    this.u2 = u2;
    const acc = this.input.copy();
    acc.addInto(await c.expandMask(await c.selfMaskKey(this.bSeed, this.bind, this.party), cfg.dim, cfg.bits), 1);
    for (const v of [...u2].filter((x) => x !== this.party).sort((a, b) => a - b)) {
      const shared = await this.agree(this.sKey, (this.peers.get(v) as PeerEntry).sPk);
      const key = await c.pairMaskKey(shared, this.bind, this.party, v);
      acc.addInto(await c.expandMask(key, cfg.dim, cfg.bits), this.party < v ? 1 : -1);
    }
    acc.mask();
    this.phase = Phase.MaskedInput;
    const packed = pack(acc);
    const head = { sessionId: cfg.sessionId, party: this.party, bits: cfg.bits, dim: cfg.dim, packed };
    if (this.opts.inputProof) return encode({ ...head, type: MsgType.MaskedInputProved, proof: this.opts.inputProof });
    return encode({ ...head, type: MsgType.MaskedInput });
  }

  private survivors(bitmap: Uint8Array): Set<number> {
    const everyone = decodeBitmap(bitmap, this.config.n);
    const min = this.opts.minSurvivors;
    if (min != null && everyone.size < min) throw new TooFewSurvivorsError(everyone.size, min);
    const u3 = new Set([...everyone].filter((p) => this.nbrs.has(p)));
    if (!u3.has(this.party)) throw new InconsistentSetsError("survivors: this party is missing from the survivor set");
    if ([...u3].some((p) => !this.u2.has(p))) throw new InconsistentSetsError("survivors: not a subset of the parties that shared keys");
    if (u3.size < this.t) throw new InconsistentSetsError(`survivors: ${u3.size} neighbours, below the threshold ${this.t}`);
    const mv = this.opts.minVerified;
    if (mv != null) {  // only members whose input the survivor set says is in the sum
      const listed = new Set([...this.counted].filter(([p]) => everyone.has(p)).map(([, identity]) => hex(identity))).size;
      if (listed < mv) throw new CohortUnverifiedError(listed, mv, this.opts.issuerKeys != null);
    }
    return u3;
  }

  private async onConsistency(msg: Extract<Message, { type: MsgType.ConsistencyRequest }>): Promise<Uint8Array> {
    this.survivors(msg.survivors);
    this.signedSurvivors = msg.survivors;
    const sig = await (this.opts.identityKey as Ed25519Key).sign(c.consistencyPayload(this.bind, msg.survivors));
    this.phase = Phase.ConsistencyCheck;
    return encode({ type: MsgType.ConsistencySignature, sessionId: this.config.sessionId, party: this.party, signature: sig });
  }

  private async onUnmask(msg: Extract<Message, { type: MsgType.UnmaskRequest }>): Promise<Uint8Array> {
    const cfg = this.config;
    const u3 = this.survivors(msg.survivors);
    if (cfg.active) {
      if (!this.signedSurvivors || !equalBytes(msg.survivors, this.signedSurvivors)) throw new InconsistentSurvivorsError("survivors: differ from the set this party signed");
      const signers = msg.signatures.map(([p]) => p);
      if (new Set(signers).size !== signers.length || signers.some((p) => !u3.has(p))) {
        throw new InconsistentSurvivorsError("consistency: signatures from repeated or non-surviving parties");
      }
      const payload = c.consistencyPayload(this.bind, msg.survivors);
      const proof = msg.signatures.slice(0, this.t);  // t valid ones are the proof; the rest are not read
      const ok = await Promise.all(proof.map(([signer, sig]) => ed25519Verify(this.peerIds.get(signer) as Uint8Array, sig, payload)));
      proof.forEach(([signer], i) => {
        if (!ok[i]) throw new InconsistentSurvivorsError(`invalid signature on party ${signer}'s consistency check`);
      });
      if (signers.length < this.t) {
        throw new InconsistentSurvivorsError(
          `consistency: ${signers.length} neighbours signed this survivor set, below the threshold ${this.t}: the others may have been shown another set`,
        );
      }
    }
    const decisions = [...this.u2].sort((a, b) => a - b).map((v) => [v, u3.has(v) ? ShareKind.SelfMaskSeed : ShareKind.MaskKey] as const);
    for (const [v, kind] of decisions) {
      const before = this.revealed.get(v);
      if (before !== undefined && before !== kind) throw new DoubleRevealError(`server asks for the other share of party ${v} after one was revealed`);
    }
    const out: [number, ShareKind, Uint8Array][] = decisions.map(([v, kind]) => {
      const [b, s] = v === this.party ? this.ownShares : (this.held.get(v) as [bigint, bigint]);
      return [v, kind, shamir.toBytes(kind === ShareKind.SelfMaskSeed ? b : s)];
    });
    for (const [v, kind] of decisions) this.revealed.set(v, kind);
    this.phase = Phase.Done;
    return encode({ type: MsgType.UnmaskShares, sessionId: cfg.sessionId, party: this.party, shares: out });
  }
}
