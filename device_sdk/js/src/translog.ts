/** The public transparency log, as a device checks it (the port of translog/merkle.py, translog/heads.py,
 * translog/wire.py and translog/check.py; docs/transparency.md, "What a device does").
 *
 *     leaf hash           = SHA-256(0x00 ‖ leaf bytes)            leaf bytes = RFC 8785 JSON of the entry
 *     node hash           = SHA-256(0x01 ‖ left ‖ right)
 *     head message        = "fa-log-head/v1\n" origin "\n" size "\n" base64(root) "\n" timestamp_ms "\n"
 *     cosignature message = "fa-log-cosignature/v1\n" "time " unix_seconds "\n" head message
 *     key_id              = hex(SHA-256("fa-log-key/v1\n" ‖ Ed25519 public key)[:8])
 *
 * `verifyInclusion` and `verifyConsistency` are RFC 9162's verification algorithms (§2.1.3.2, §2.1.4.2) and throw
 * `ProofError` with the Python's messages; heads and cosignatures throw `HeadError`. `checkTaskProof` is
 * `translog.check.check_task_proof`: the same five checks in the same order, refusing with a `LogCheckError` whose
 * message starts with the same words. Every list an outsider sends is bounded (at most 128 proof hashes, 16
 * cosignatures). Hashing and Ed25519 are WebCrypto's (webcrypto.ts). Known-answer vectors:
 * tests/vectors/translog.json. */

import { b64decode, b64encode, concat, equalBytes, hex, unhex, utf8 } from "./bytes.js";
import type { PublicSummary } from "./secagg/config.js";
import { canonicalJson } from "./taskDigest.js";
import { ed25519Verify, sha256 } from "./webcrypto.js";

export const HASH_SIZE = 32;
/** A proof of a tree with fewer than 2^63 leaves has at most 2·63 hashes; anything longer is refused unread. */
export const MAX_PROOF_HASHES = 128;
export const MAX_COSIGNATURES = 16;
export const MAX_ORIGIN = 200;
const MAX_INT = 2 ** 53;

export const HEAD_DOMAIN = "fa-log-head/v1\n";
export const COSIGNATURE_DOMAIN = "fa-log-cosignature/v1\n";
export const KEY_DOMAIN = "fa-log-key/v1\n";

type Bytes = Uint8Array;
type Obj = Record<string, unknown>;

/** A proof that does not verify, or arguments no proof could satisfy; the message says which. */
export class ProofError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProofError";
  }
}

/** A tree head or cosignature that does not verify, or is malformed; the message says which. */
export class HeadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HeadError";
  }
}

/** The device cannot check its task against the log; the message says what failed. */
export class LogCheckError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LogCheckError";
  }
}

// -- RFC 9162 hashing and proofs ------------------------------------------------------------------

export function leafHash(data: Bytes): Promise<Bytes> {
  return sha256(concat(Uint8Array.of(0), data));
}

export function nodeHash(left: Bytes, right: Bytes): Promise<Bytes> {
  return sha256(concat(Uint8Array.of(1), left, right));
}

/** The root of the empty tree: SHA-256 of nothing. */
export function emptyRoot(): Promise<Bytes> {
  return sha256(new Uint8Array(0));
}

/** The right edge of a tree (translog.merkle.CompactRange): the hashes of its complete subtrees ("peaks"), left to
 * right. Appending leaf hashes one by one and asking for the root rebuilds a log's roots in O(log n) memory. */
export class CompactRange {
  size = 0;
  private peaks: Bytes[] = [];

  async append(leaf: Bytes): Promise<void> {
    if (leaf.length !== HASH_SIZE) throw new ProofError(`leaf hash: must be ${HASH_SIZE} bytes, got ${leaf.length}`);
    this.peaks.push(leaf);
    for (let i = this.size; i % 2 === 1; i = Math.floor(i / 2)) {  // a right child completes its parent
      const right = this.peaks.pop() as Bytes;
      const left = this.peaks.pop() as Bytes;
      this.peaks.push(await nodeHash(left, right));
    }
    this.size += 1;
  }

  async root(): Promise<Bytes> {
    if (!this.peaks.length) return emptyRoot();
    let acc = this.peaks[this.peaks.length - 1];
    for (let i = this.peaks.length - 2; i >= 0; i--) acc = await nodeHash(this.peaks[i], acc);
    return acc;
  }
}

function checkHashes(proof: readonly Bytes[], what: string): void {
  if (proof.length > MAX_PROOF_HASHES) throw new ProofError(`${what}: ${proof.length} hashes, at most ${MAX_PROOF_HASHES}`);
  for (const h of proof) if (h.length !== HASH_SIZE) throw new ProofError(`${what}: a hash of ${h.length} bytes (must be ${HASH_SIZE})`);
}

function checkSizes(a: number, b: number, what: string): void {
  if (!Number.isSafeInteger(a) || !Number.isSafeInteger(b)) throw new ProofError(`${what}: sizes and indexes must be integers below 2^53`);
}

/** The root an inclusion proof leads to (RFC 9162 §2.1.3.2, steps 1–5); ProofError if malformed. */
export async function rootFromInclusion(leaf: Bytes, index: number, size: number, proof: readonly Bytes[]): Promise<Bytes> {
  checkHashes(proof, "inclusion proof");
  checkSizes(index, size, "inclusion proof");
  if (!(index >= 0 && index < size)) throw new ProofError(`inclusion proof: index ${index} is not below the tree size ${size}`);
  // BigInt: indexes reach 2^53, beyond JavaScript's 32-bit bit operators
  let fn = BigInt(index);
  let sn = BigInt(size - 1);
  let r = leaf;
  for (const p of proof) {
    if (sn === 0n) throw new ProofError("inclusion proof: longer than the tree is deep");
    if (fn & 1n || fn === sn) {
      r = await nodeHash(p, r);
      if (!(fn & 1n)) {
        while (fn && !(fn & 1n)) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) throw new ProofError("inclusion proof: shorter than the tree is deep");
  return r;
}

/** Throw ProofError unless `proof` shows leaf hash `leaf` at `index` in the tree of `size` with `root`. */
export async function verifyInclusion(leaf: Bytes, index: number, size: number, proof: readonly Bytes[], root: Bytes): Promise<void> {
  if (!equalBytes(await rootFromInclusion(leaf, index, size, proof), root)) {
    throw new ProofError(`inclusion proof: leaf ${index} does not lead to the root of the tree of size ${size}`);
  }
}

/** Throw ProofError unless `proof` shows that the tree of size `first` with `firstRoot` is a prefix of the tree of
 * size `second` with `secondRoot` (RFC 9162 §2.1.4.2). */
export async function verifyConsistency(first: number, second: number, firstRoot: Bytes, secondRoot: Bytes, proof: readonly Bytes[]): Promise<void> {
  checkHashes(proof, "consistency proof");
  checkSizes(first, second, "consistency proof");
  if (!(first >= 0 && first <= second)) throw new ProofError(`consistency proof: the first size ${first} is larger than the second ${second}`);
  if (first === second) {
    if (proof.length) throw new ProofError("consistency proof: must be empty between equal sizes");
    if (!equalBytes(firstRoot, secondRoot)) throw new ProofError(`consistency: two different roots for the tree of size ${first}`);
    return;
  }
  if (first === 0) {
    if (proof.length) throw new ProofError("consistency proof: must be empty from the empty tree");
    return;
  }
  if (!proof.length) throw new ProofError("consistency proof: empty");
  const path = [...proof];
  let fn = BigInt(first - 1);
  let sn = BigInt(second - 1);
  if ((BigInt(first) & fn) === 0n) path.unshift(firstRoot);  // a power of two: the first tree is a complete subtree
  while (fn & 1n) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = path[0];
  let sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0n) throw new ProofError("consistency proof: longer than the trees are deep");
    if (fn & 1n || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      if (!(fn & 1n)) {
        while (fn && !(fn & 1n)) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) throw new ProofError("consistency proof: shorter than the trees are deep");
  if (!equalBytes(fr, firstRoot)) throw new ProofError(`consistency proof: does not lead to the root of the tree of size ${first}`);
  if (!equalBytes(sr, secondRoot)) throw new ProofError(`consistency proof: does not lead to the root of the tree of size ${second}`);
}

// -- entries --------------------------------------------------------------------------------------

/** The RFC 8785 canonical UTF-8 JSON of an entry (the leaf's bytes): the task digest's canonicalisation. */
export function entryBytes(entry: Obj): Bytes {
  return canonicalJson(entry, "log entry");
}

export function entryLeafHash(entry: Obj): Promise<Bytes> {
  return leafHash(entryBytes(entry));
}

// -- heads, cosignatures, keys --------------------------------------------------------------------

/** Python's repr of a str (enough of it for messages: quotes chosen as Python does, escapes of \\ \n \r \t). */
function pyRepr(s: string): string {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = "";
  for (const ch of s) {
    const u = ch.codePointAt(0) as number;
    if (ch === "\\") out += "\\\\";
    else if (ch === q) out += "\\" + q;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (u < 0x20 || u === 0x7f) out += "\\x" + u.toString(16).padStart(2, "0");
    else out += ch;
  }
  return q + out + q;
}

/** Python's `format(x, "g")`: six significant digits, trailing zeros dropped, exponent form below 1e-4 and from 1e6. */
function pyG(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [m, e] = x.toExponential(5).split("e");
  const exp = Number(e);
  const strip = (t: string) => (t.includes(".") ? t.replace(/0+$/, "").replace(/\.$/, "") : t);
  if (exp < -4 || exp >= 6) return `${strip(m)}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  return strip(x.toFixed(Math.max(0, 5 - exp)));
}

const codePoints = (s: string): number => [...s].length;

export async function keyId(publicKey: Bytes): Promise<string> {
  if (publicKey.length !== 32) throw new HeadError(`public key: must be 32 bytes (Ed25519), got ${publicKey.length}`);
  return hex((await sha256(concat(utf8(KEY_DOMAIN), publicKey))).subarray(0, 8));
}

// RFC 8032 §7.1, test 1: the signature of the empty message, which a platform verifying Ed25519 accepts
const RFC8032_KEY = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const RFC8032_SIGNATURE = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";

/** Whether this platform's WebCrypto verifies Ed25519 (some browsers do not): a verifier there reports signatures
 * unchecked rather than refused. */
export async function ed25519Available(): Promise<boolean> {
  try {
    return await ed25519Verify(unhex(RFC8032_KEY), unhex(RFC8032_SIGNATURE), new Uint8Array(0));
  } catch {
    return false;
  }
}

/** key_id → public key, for the keys a verifier pins. */
export async function keyTable(publicKeys: Iterable<Bytes>): Promise<Map<string, Bytes>> {
  const out = new Map<string, Bytes>();
  for (const k of publicKeys) out.set(await keyId(k), Uint8Array.from(k));
  return out;
}

/** The log named `origin` held `size` entries whose RFC 9162 root is `root`, at `timestampMs`. */
export interface TreeHead {
  origin: string;
  size: number;
  root: Bytes;
  timestampMs: number;
}

export interface SignedHead {
  head: TreeHead;
  keyId: string;
  signature: Bytes;
}

export interface Cosignature {
  witness: string;
  keyId: string;
  /** Unix seconds at which the witness checked the head. */
  time: number;
  signature: Bytes;
}

/** A TreeHead, validated as translog.heads.TreeHead validates it (HeadError). */
export function treeHead(origin: string, size: number, root: Bytes, timestampMs: number): TreeHead {
  if (typeof origin !== "string" || !origin || codePoints(origin) > MAX_ORIGIN || origin.includes("\n")) {
    throw new HeadError(`origin: 1..${MAX_ORIGIN} characters without a newline`);
  }
  if (!(Number.isInteger(size) && size >= 0 && size < MAX_INT)) throw new HeadError(`size: must be in 0..2^53, got ${size}`);
  if (root.length !== HASH_SIZE) throw new HeadError(`root: must be ${HASH_SIZE} bytes, got ${root.length}`);
  if (!(Number.isInteger(timestampMs) && timestampMs >= 0 && timestampMs < MAX_INT)) throw new HeadError(`timestamp_ms: must be in 0..2^53, got ${timestampMs}`);
  return { origin, size, root: Uint8Array.from(root), timestampMs };
}

export function headMessage(head: TreeHead): Bytes {
  return utf8(`${HEAD_DOMAIN}${head.origin}\n${head.size}\n${b64encode(head.root)}\n${head.timestampMs}\n`);
}

export function cosignatureMessage(head: TreeHead, time: number): Bytes {
  return concat(utf8(`${COSIGNATURE_DOMAIN}time ${time}\n`), headMessage(head));
}

async function verifySigned(keys: ReadonlyMap<string, Bytes>, kid: string, signature: Bytes, message: Bytes, what: string): Promise<void> {
  const key = keys.get(kid);
  if (key === undefined) throw new HeadError(`${what}: signed by key ${pyRepr([...kid].slice(0, 16).join(""))}, which is not one of the ${keys.size} pinned`);
  if (!(await ed25519Verify(key, signature, message))) throw new HeadError(`${what}: the signature does not verify under key ${kid}`);
}

/** Throw HeadError unless one of the pinned log keys (`keyTable`) signed the head. */
export function verifyHead(signed: SignedHead, keys: ReadonlyMap<string, Bytes>): Promise<void> {
  return verifySigned(keys, signed.keyId, signed.signature, headMessage(signed.head), `tree head of size ${signed.head.size}`);
}

/** Throw HeadError unless a pinned witness key cosigned the head. */
export function verifyCosignature(cosig: Cosignature, head: TreeHead, witnesses: ReadonlyMap<string, Bytes>): Promise<void> {
  return verifySigned(witnesses, cosig.keyId, cosig.signature, cosignatureMessage(head, cosig.time),
    `cosignature by ${pyRepr([...cosig.witness].slice(0, 40).join(""))} of the head of size ${head.size}`);
}

// -- wire shapes (translog/wire.py) ---------------------------------------------------------------

/** `HeadModel`: a signed head as JSON (what the device stores as the last head it saw). */
export interface HeadJson {
  origin: string;
  size: number;
  root: string;
  timestamp_ms: number;
  key_id: string;
  signature: string;
}

export interface CosignatureJson {
  witness: string;
  key_id: string;
  time: number;
  signature: string;
}

export interface WitnessedHeadJson {
  head: HeadJson;
  cosignatures: CosignatureJson[];
  consistency: string[];
}

/** `TaskProof`: what a device gets with an assignment (the check-in answer's `log`). */
export interface TaskProofJson {
  index: number;
  entry: Obj;
  head: HeadJson;
  inclusion: string[];
  from_size: number | null;
  consistency: string[];
  witnessed: WitnessedHeadJson | null;
}

const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

function malformed(where: string, what: string): never {
  throw new LogCheckError(`malformed log proof: ${where}: ${what}`);
}

function int(v: unknown, where: string, opts: { nullable?: boolean } = {}): number | null {
  if ((v === undefined || v === null) && opts.nullable) return null;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v >= MAX_INT) malformed(where, "expected an integer in 0..2^53");
  return v;
}

function text(v: unknown, where: string, min: number, max: number): string {
  if (typeof v !== "string") malformed(where, "expected a string");
  const n = codePoints(v);
  if (n < min || n > max) malformed(where, `expected ${min}..${max} characters`);
  return v;
}

function list(v: unknown, where: string, max: number): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) malformed(where, "expected a list");
  if (v.length > max) malformed(where, `${v.length} items, at most ${max}`);
  return v;
}

const strings = (v: unknown, where: string, max: number): string[] =>
  list(v, where, max).map((x, i) => (typeof x === "string" ? x : malformed(`${where}[${i}]`, "expected a string")));

/** A HeadModel's JSON, shape-checked (the bytes are decoded by `parseHead`). */
export function headJson(v: unknown, where = "head"): HeadJson {
  if (!isObj(v)) malformed(where, "expected an object");
  return {
    origin: text(v.origin, `${where}.origin`, 1, MAX_ORIGIN),
    size: int(v.size, `${where}.size`) as number,
    root: text(v.root, `${where}.root`, 0, 64),
    timestamp_ms: int(v.timestamp_ms, `${where}.timestamp_ms`) as number,
    key_id: text(v.key_id, `${where}.key_id`, 16, 16),
    signature: text(v.signature, `${where}.signature`, 0, 100),
  };
}

function cosignatureJson(v: unknown, where: string): CosignatureJson {
  if (!isObj(v)) malformed(where, "expected an object");
  return {
    witness: text(v.witness, `${where}.witness`, 1, 100),
    key_id: text(v.key_id, `${where}.key_id`, 16, 16),
    time: int(v.time, `${where}.time`) as number,
    signature: text(v.signature, `${where}.signature`, 0, 100),
  };
}

/** A TaskProof's JSON, shape-checked as translog.wire.TaskProof validates it (unknown members ignored); a
 * LogCheckError ("malformed log proof: …") otherwise. */
export function parseTaskProof(v: unknown): TaskProofJson {
  if (!isObj(v)) malformed("log", "expected an object");
  if (!isObj(v.entry)) malformed("entry", "expected an object");
  let witnessed: WitnessedHeadJson | null = null;
  if (v.witnessed !== undefined && v.witnessed !== null) {
    const w = v.witnessed;
    if (!isObj(w)) malformed("witnessed", "expected an object");
    witnessed = {
      head: headJson(w.head, "witnessed.head"),
      cosignatures: list(w.cosignatures, "witnessed.cosignatures", MAX_COSIGNATURES).map((c, i) => cosignatureJson(c, `witnessed.cosignatures[${i}]`)),
      consistency: strings(w.consistency, "witnessed.consistency", MAX_PROOF_HASHES),
    };
  }
  return {
    index: int(v.index, "index") as number,
    entry: v.entry,
    head: headJson(v.head),
    inclusion: strings(v.inclusion, "inclusion", MAX_PROOF_HASHES),
    from_size: int(v.from_size, "from_size", { nullable: true }),
    consistency: strings(v.consistency, "consistency", MAX_PROOF_HASHES),
    witnessed,
  };
}

function b64(s: string, what: string, length?: number): Bytes {
  try {
    return b64decode(s, what, length);
  } catch (exc) {
    throw new HeadError((exc as Error).message);
  }
}

/** HeadModel.parse: the signed head its JSON describes (HeadError for bad base64 or an invalid head). */
export function parseHead(h: HeadJson): SignedHead {
  const head = treeHead(h.origin, h.size, b64(h.root, "head.root", 32), h.timestamp_ms);
  return { head, keyId: h.key_id, signature: b64(h.signature, "head.signature", 64) };
}

/** HeadModel.of: a signed head's JSON. */
export function toHeadJson(s: SignedHead): HeadJson {
  const h = s.head;
  return { origin: h.origin, size: h.size, root: b64encode(h.root), timestamp_ms: h.timestampMs, key_id: s.keyId, signature: b64encode(s.signature) };
}

function parseCosignature(c: CosignatureJson): Cosignature {
  return { witness: c.witness, keyId: c.key_id, time: c.time, signature: b64(c.signature, "cosignature.signature", 64) };
}

/** translog.wire.hashes: base64 proof hashes → bytes (ProofError beyond the bound, HeadError for bad base64). */
export function hashes(proof: readonly string[], what: string): Bytes[] {
  if (proof.length > MAX_PROOF_HASHES) throw new ProofError(`${what}: ${proof.length} hashes, at most ${MAX_PROOF_HASHES}`);
  return proof.map((h) => b64(h, what, HASH_SIZE));
}

// -- the device's check ---------------------------------------------------------------------------

/** What the device knows when it checks a task proof. */
export interface TaskProofContext {
  /** The digest the device computed for its own assignment. */
  taskDigest: Bytes;
  /** The cohort parameters of the device's own config (secagg/config.ts `publicSummary`: n, degree, threshold, threat
   * model, graph seed rule), which the task entry must record. */
  secagg: PublicSummary | Record<string, unknown>;
  queryId: string;
  round: number;
  cohortId: string;
  /** key_id → pinned log public key (`keyTable`). */
  logKeys: ReadonlyMap<string, Bytes>;
  /** The last head the device stored (null: none yet). */
  last: TreeHead | null;
  /** key_id → pinned witness public key; empty or absent: witnesses are not required. */
  witnessKeys?: ReadonlyMap<string, Bytes> | null;
  quorum?: number;
  maxWitnessAgeS?: number;
  /** The device's clock, Unix seconds. */
  nowS?: number;
}

/** Python's `==` between JSON values (True == 1, 1.0 == 1; objects member by member, whatever their order). */
function pyEquals(a: unknown, b: unknown): boolean {
  if (typeof a === "boolean" && typeof b === "number") return Number(a) === b;
  if (typeof a === "number" && typeof b === "boolean") return a === Number(b);
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => pyEquals(x, b[i]));
  }
  if (a !== null && b !== null && typeof a === "object" && typeof b === "object") {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    const bo = b as Record<string, unknown>;
    return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(bo, k) && pyEquals((a as Record<string, unknown>)[k], bo[k]));
  }
  return a === b;
}

/** translog.check.check_task_proof: throw LogCheckError unless
 * 1. the logged entry is a `task` entry for this query, round and cohort, with the device's own digest and the cohort
 *    parameters (`secagg`: n, degree, threshold, threat model, graph seed rule) of its own config;
 * 2. the head is signed by a pinned log key;
 * 3. the entry is included under that head;
 * 4. the head extends the device's stored head (same origin, no smaller, a consistency proof from it);
 * 5. with witnesses pinned: the witnessed head is signed by the log, cosigned by `quorum` distinct pinned witnesses
 *    no older than `maxWitnessAgeS`, and the head extends it.
 * Returns the head the device must store as the last one it saw. */
export async function checkTaskProof(proof: unknown, ctx: TaskProofContext): Promise<SignedHead> {
  const p = parseTaskProof(proof);
  const e = p.entry;
  const want: [string, unknown][] = [
    ["type", "task"], ["query_id", ctx.queryId], ["round", ctx.round], ["cohort_id", ctx.cohortId], ["task_digest", hex(ctx.taskDigest)],
    ["secagg", ctx.secagg],
  ];
  const wrong = want.filter(([k, v]) => !pyEquals(Object.prototype.hasOwnProperty.call(e, k) ? e[k] : null, v)).map(([k]) => k);
  if (wrong.length) throw new LogCheckError(`the logged entry ${p.index} is not this task (it differs in ${wrong.join(", ")})`);
  try {
    const signed = parseHead(p.head);
    await verifyHead(signed, ctx.logKeys);
    const head = signed.head;
    let leaf: Bytes;
    try {
      leaf = await entryLeafHash(e);
    } catch (exc) {
      throw new LogCheckError(`the logged entry ${p.index} has no canonical JSON: ${(exc as Error).message}`);
    }
    await verifyInclusion(leaf, p.index, head.size, hashes(p.inclusion, "inclusion"), head.root);
    const last = ctx.last;
    if (last !== null) {
      if (last.origin !== head.origin) throw new LogCheckError(`the head is from log ${pyRepr(head.origin)}, the device follows ${pyRepr(last.origin)}`);
      if (head.size < last.size) throw new LogCheckError(`the log shrank: ${head.size} entries, the device saw ${last.size}`);
      if (p.from_size !== last.size) throw new LogCheckError(`no consistency proof from the device's last head (size ${last.size})`);
      await verifyConsistency(last.size, head.size, last.root, head.root, hashes(p.consistency, "consistency"));
    }
    if (ctx.witnessKeys && ctx.witnessKeys.size) {
      await checkWitnessed(p, head, ctx.logKeys, ctx.witnessKeys, ctx.quorum ?? 1, ctx.maxWitnessAgeS ?? 3600, ctx.nowS ?? 0);
    }
    return signed;
  } catch (exc) {
    if (exc instanceof HeadError || exc instanceof ProofError) throw new LogCheckError(exc.message);
    throw exc;
  }
}

async function checkWitnessed(p: TaskProofJson, head: TreeHead, logKeys: ReadonlyMap<string, Bytes>, witnessKeys: ReadonlyMap<string, Bytes>,
  quorum: number, maxAgeS: number, nowS: number): Promise<void> {
  const w = p.witnessed;
  if (w === null) throw new LogCheckError("no witnessed head: the device requires witnesses' cosignatures");
  const ws = parseHead(w.head);
  await verifyHead(ws, logKeys);
  const fresh = new Set<string>();
  for (const c of w.cosignatures) {
    const cos = parseCosignature(c);
    if (fresh.has(cos.keyId) || !witnessKeys.has(cos.keyId)) continue;
    await verifyCosignature(cos, ws.head, witnessKeys);
    if (nowS - cos.time <= maxAgeS) fresh.add(cos.keyId);
  }
  if (fresh.size < quorum) {
    throw new LogCheckError(`the witnessed head has ${fresh.size} fresh cosignature(s) by pinned witnesses, need ${quorum} (no older than ${pyG(maxAgeS)} s)`);
  }
  if (ws.head.origin !== head.origin || ws.head.size > head.size) {
    throw new LogCheckError(`the witnessed head (size ${ws.head.size}) is not a prefix of the head (size ${head.size})`);
  }
  await verifyConsistency(ws.head.size, head.size, ws.head.root, head.root, hashes(w.consistency, "witnessed.consistency"));
}
