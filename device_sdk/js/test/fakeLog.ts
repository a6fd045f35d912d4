/** A tiny public transparency log for tests (the server side of docs/transparency.md, as analytics_server keeps it):
 * entries in memory, RFC 9162 roots and proofs computed from their definitions (§2.1.1, §2.1.3.1, §2.1.4.1 — a
 * reference independent of the verifiers in src/translog.ts), heads signed with an Ed25519 key from a fixed seed, and
 * the `TaskProof` a check-in answer carries (translog/wire.py). */

import { b64encode, utf8 } from "../src/bytes.js";
import {
  CosignatureJson, HeadJson, TaskProofJson, cosignatureMessage, emptyRoot, entryLeafHash, headMessage, keyId, nodeHash, treeHead,
} from "../src/translog.js";
import { sha256, Ed25519Key } from "../src/webcrypto.js";

type Bytes = Uint8Array;
type Obj = Record<string, unknown>;

/** The largest power of two smaller than n (n ≥ 2). */
const split = (n: number): number => {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
};

/** RFC 9162 Merkle tree hash, inclusion path and consistency proof over a list of leaf hashes. */
export class RefTree {
  private memo = new Map<string, Promise<Bytes>>();
  constructor(readonly leaves: Bytes[] = []) {}

  get size(): number {
    return this.leaves.length;
  }

  /** MTH(D[lo:hi]). */
  hash(lo: number, hi: number): Promise<Bytes> {
    const key = `${lo}:${hi}`;
    let h = this.memo.get(key);
    if (!h) {
      const n = hi - lo;
      if (n === 0) h = emptyRoot();
      else if (n === 1) h = Promise.resolve(this.leaves[lo]);
      else {
        const k = split(n);
        h = Promise.all([this.hash(lo, lo + k), this.hash(lo + k, hi)]).then(([l, r]) => nodeHash(l, r));
      }
      this.memo.set(key, h);
    }
    return h;
  }

  root(size = this.size): Promise<Bytes> {
    return this.hash(0, size);
  }

  /** PATH(m, D[0:size]), leaf-side first. */
  async inclusion(m: number, size = this.size, lo = 0): Promise<Bytes[]> {
    const n = size - lo;
    if (n <= 1) return [];
    const k = split(n);
    if (m - lo < k) return [...(await this.inclusion(m, lo + k, lo)), await this.hash(lo + k, size)];
    return [...(await this.inclusion(m, size, lo + k)), await this.hash(lo, lo + k)];
  }

  /** PROOF(m, D[0:n]). */
  async consistency(m: number, n = this.size): Promise<Bytes[]> {
    if (m === 0 || m === n) return [];
    return this.subproof(m, 0, n, true);
  }

  private async subproof(m: number, lo: number, hi: number, complete: boolean): Promise<Bytes[]> {
    const n = hi - lo;
    if (m === n) return complete ? [] : [await this.hash(lo, hi)];
    const k = split(n);
    if (m <= k) return [...(await this.subproof(m, lo, lo + k, complete)), await this.hash(lo + k, hi)];
    return [...(await this.subproof(m - k, lo + k, hi, false)), await this.hash(lo, lo + k)];
  }
}

/** An Ed25519 signer of heads (the log's) or cosignatures (a witness's), from a seed. */
export class LogSigner {
  private constructor(readonly key: Ed25519Key, readonly keyId: string) {}

  static async fromLabel(label: string): Promise<LogSigner> {
    const key = await Ed25519Key.fromSeed(await sha256(utf8(label)));
    return new LogSigner(key, await keyId(key.publicBytes));
  }

  get publicKey(): string {
    return b64encode(this.key.publicBytes);
  }

  async signHead(origin: string, size: number, root: Bytes, timestampMs: number): Promise<HeadJson> {
    const head = treeHead(origin, size, root, timestampMs);
    return { origin, size, root: b64encode(root), timestamp_ms: timestampMs, key_id: this.keyId, signature: b64encode(await this.key.sign(headMessage(head))) };
  }

  async cosign(witness: string, h: HeadJson, time: number): Promise<CosignatureJson> {
    const head = treeHead(h.origin, h.size, Uint8Array.from(Buffer.from(h.root, "base64")), h.timestamp_ms);
    return { witness, key_id: this.keyId, time, signature: b64encode(await this.key.sign(cosignatureMessage(head, time))) };
  }
}

export const FAKE_LOG_ORIGIN = "fa.test/fa-log";

/** The log a fake server keeps: `task` entries for what it hands out, heads signed by `signer`. */
export class FakeLog {
  readonly entries: Obj[] = [];
  readonly tree = new RefTree();
  private constructor(readonly signer: LogSigner, readonly origin: string) {}

  static async create(label = "fa-test/log-key", origin = FAKE_LOG_ORIGIN): Promise<FakeLog> {
    return new FakeLog(await LogSigner.fromLabel(label), origin);
  }

  /** `GET /v1/log/key`. */
  keyResponse(): Obj {
    return { origin: this.origin, public_key: this.signer.publicKey, key_id: this.signer.keyId, previous_keys: [], witnesses: {} };
  }

  /** Append an entry (synchronously once its leaf hash is known: appends never interleave); its index. */
  async append(entry: Obj): Promise<number> {
    const leaf = await entryLeafHash(entry);
    this.entries.push(entry);
    this.tree.leaves.push(leaf);
    return this.entries.length - 1;
  }

  /** The index of the `task` entry for this cohort task (with `secagg`, the config's public summary), appended if
   * new. Calls run one after another: devices checking in at once must not both find the task missing and append it
   * twice. */
  task(queryId: string, round: number, cohortId: string, digestHex: string, secagg: Obj): Promise<number> {
    const next = this.taskQueue.then(() => {
      const i = this.entries.findIndex((e) => e.type === "task" && e.query_id === queryId && e.round === round && e.cohort_id === cohortId && e.task_digest === digestHex &&
        JSON.stringify(e.secagg) === JSON.stringify(secagg));
      if (i >= 0) return i;
      return this.append({ type: "task", at: 1_764_300_000_000 + this.entries.length, query_id: queryId, round, cohort_id: cohortId, task_digest: digestHex, secagg });
    });
    this.taskQueue = next.catch(() => -1);
    return next;
  }

  private taskQueue: Promise<number> = Promise.resolve(-1);

  head(size = this.tree.size): Promise<HeadJson> {
    return this.tree.root(size).then((root) => this.signer.signHead(this.origin, size, root, 1_764_300_000_000 + size));
  }

  /** The TaskProof for entry `index` under the head of `size`, with a consistency proof from `fromSize` (the device's
   * `log_size`) when it is given and not beyond `size`. */
  async proof(index: number, fromSize: number | null = null, size = this.tree.size): Promise<TaskProofJson> {
    const p: TaskProofJson = {
      index, entry: this.entries[index], head: await this.head(size),
      inclusion: (await this.tree.inclusion(index, size)).map(b64encode), from_size: null, consistency: [], witnessed: null,
    };
    if (fromSize !== null && fromSize <= size) {
      p.from_size = fromSize;
      p.consistency = (await this.tree.consistency(fromSize, size)).map(b64encode);
    }
    return p;
  }
}
