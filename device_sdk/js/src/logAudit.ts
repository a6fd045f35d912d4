/** The public transparency log audited from its public /v1/log/* routes (docs/transparency.md): the checks of
 * `fa audit` (analyst_client/audit.py) that need no credentials, on translog.ts's hashing and signatures — what the
 * analyst console's log page runs in the browser (bundled into analytics_server/console/vendor/translog.js by
 * scripts/bundle.mjs --vendor). No DOM here, so Node runs it too.
 *
 * - every signed head verifies under the served log keys (Ed25519 in WebCrypto, where the platform has it);
 * - the entries, as RFC 8785 canonical JSON, rebuild the RFC 9162 tree whose root each head commits to — the
 *   first head that does not match names the altered entry; two heads of one size with different roots are
 *   an equivocation;
 * - walking the entries: every task, charge, refund and release names an earlier query; a refund returns a
 *   charge; each source's spend (Σε, Σδ: the server's basic composition) stays within the budget in force.
 *
 * Hashing needs WebCrypto, which browsers offer only in a secure context (https, or http on localhost); without
 * it the walk still runs and the report says the roots and signatures were not checked. */

import { b64decode, b64encode, hex } from "./bytes.js";
import { canonicalJson } from "./taskDigest.js";
import { sha256 } from "./webcrypto.js";
import {
  CompactRange, HeadError, HeadJson, ed25519Available, entryLeafHash, keyTable, parseHead, verifyCosignature, verifyHead,
} from "./translog.js";

export const PAGE = 1000;
const TOLERANCE = 1e-9; // queries/dp/ledger.py TOLERANCE
const DEFAULT_SOURCE = "*";
const TYPES = ["query", "task", "charge", "refund", "budget", "release"];

type Obj = Record<string, any>;
type Bytes = Uint8Array;

/** GET a public route's JSON (an error with `status` 404 for a missing head). */
export type Get = (path: string) => Promise<any>;

export interface Finding {
  code: string;
  index: number | null;
  message: string;
}

export interface SourceSpend {
  source: string;
  spent_epsilon: number;
  spent_delta: number;
  total_epsilon: number | null;
  total_delta: number | null;
  budget_from: string | null;
  charges: number;
  refunds: number;
  over: boolean;
}

export interface AuditReport {
  key: Obj;
  head: HeadJson | null;
  cosignatures: Obj[];
  cosigned: number | null;
  witnessed: { head: HeadJson; cosignatures: Obj[] } | null;
  entries: number;
  byType: Record<string, number>;
  sources: SourceSpend[];
  findings: Finding[];
  checked: { roots: boolean; signatures: boolean };
}

/** Whether this page may hash (WebCrypto exists only in a secure context). */
export function hashingAvailable(): boolean {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  return !!(c && c.subtle);
}

/** translog.entries.digest: hex SHA-256 of a JSON value's canonical bytes. */
export async function digest(value: unknown): Promise<string> {
  return hex(await sha256(canonicalJson(value, "value")));
}

/** Every page of a ranged route ([start, end) by at most PAGE). */
async function ranged(get: Get, route: string, end: number, pick: (page: any) => any[], onProgress?: (i: number, of: number) => void): Promise<any[]> {
  const out: any[] = [];
  for (let start = 0; start < end; start += PAGE) {
    const stop = Math.min(end, start + PAGE);
    out.push(...pick(await get(`${route}?start=${start}&end=${stop}`)));
    if (onProgress) onProgress(stop, end);
  }
  return out;
}

/** Whether the pinned keys' signature over the head (or cosignature) verifies; false for a bad one. */
async function verifies(check: () => Promise<void>): Promise<boolean> {
  try {
    await check();
    return true;
  } catch (exc) {
    if (exc instanceof HeadError) return false;
    throw exc;
  }
}

/** The head's signature under the log keys, or false when the head is malformed. */
async function headVerifies(h: HeadJson, keys: ReadonlyMap<string, Bytes>): Promise<boolean> {
  return verifies(async () => verifyHead(parseHead(h), keys));
}

/**
 * Audit the log through `get(path) → JSON` (the public routes). `onProgress(text)` hears what is being read.
 */
export async function auditLog(get: Get, onProgress: (text: string) => void = () => {}): Promise<AuditReport> {
  const findings: Finding[] = [];
  const find = (code: string, index: number | null, message: string): void => {
    findings.push({ code, index, message });
  };
  const key = await get("/v1/log/key");
  let newest: Obj | null = null;
  try {
    newest = await get("/v1/log/head");
  } catch (err) {
    if ((err as { status?: number }).status !== 404) throw err;
  }
  const n: number = newest ? newest.head.size : 0;
  const served = await ranged(get, "/v1/log/entries", n, (p) => p.entries, (i, of) => onProgress(`reading entries ${i} of ${of}`));
  const heads: HeadJson[] = await ranged(get, "/v1/log/heads", n + 1, (p) => p.heads);
  const entries: Obj[] = [];
  for (const { index, entry } of served) {
    if (index !== entries.length) {
      find("index_gap", entries.length, `entry ${entries.length} is missing: the server served entry ${index} after it`);
      break;
    }
    entries.push(entry);
  }
  if (entries.length < n) {
    find("entries_missing", entries.length, `the newest signed head has ${n} entries, the server serves ${entries.length}`);
  }
  const checked = { roots: false, signatures: false };
  const witnessKeys = Object.values((key.witnesses || {}) as Record<string, string>).map((k) => b64decode(k, "witness key"));
  let cosigned: number | null = null;
  if (hashingAvailable()) {
    onProgress("checking heads");
    const all = [...heads];
    if (newest) all.push(newest.head, ...(newest.witnessed ? [newest.witnessed] : []));
    checked.signatures = await ed25519Available();
    const keys = checked.signatures
      ? await keyTable([key.public_key, ...(key.previous_keys || [])].map((k: string) => b64decode(k, "log key"))) : null;
    const valid = new Map<string, HeadJson>(); // `${size}/${root}` → head
    for (const h of all) {
      const id = `${h.size}/${h.root}`;
      if (valid.has(id)) continue;
      if (keys && !(await headVerifies(h, keys))) {
        find("bad_signature", null, `the tree head of size ${h.size} does not verify under the log's keys`);
        continue;
      }
      if (h.origin !== key.origin) find("origin", null, `the head of size ${h.size} is of log ${JSON.stringify(h.origin)}`);
      valid.set(id, h);
    }
    const bySize = new Map<number, HeadJson[]>();
    for (const h of valid.values()) bySize.set(h.size, [...(bySize.get(h.size) || []), h]);
    for (const [size, group] of [...bySize.entries()].sort((a, b) => a[0] - b[0])) {
      if (group.length > 1) {
        find("equivocation", size ? size - 1 : null, `the log signed ${group.length} different heads of size ${size}`);
      }
    }
    onProgress("recomputing the roots");
    const sizes = [...bySize.keys()].filter((s) => s <= entries.length).sort((a, b) => a - b);
    const tree = new CompactRange();
    let good = 0;
    let bad: number | null = null;
    let later = 0;
    for (const size of sizes) {
      while (tree.size < size) await tree.append(await entryLeafHash(entries[tree.size]));
      const root = b64encode(await tree.root());
      const match = (bySize.get(size) as HeadJson[]).some((h) => h.root === root);
      if (match && bad === null) good = size;
      else if (!match && bad === null) bad = size;
      else if (!match) later += 1;
    }
    if (bad !== null) {
      const tail = later ? `; ${later} later head(s) do not match either` : "";
      find("altered", bad - 1, (good === bad - 1 ? `entry ${bad - 1} altered or removed` : `an entry among ${good}..${bad - 1} altered or removed`) +
        `: the signed head of size ${bad} does not match the entries${tail}`);
    }
    checked.roots = true;
    if (newest && witnessKeys.length && checked.signatures) {
      const wkeys = await keyTable(witnessKeys);
      const head = parseHead(newest.head).head;
      cosigned = 0;
      for (const c of newest.cosignatures || []) {
        if (!wkeys.has(c.key_id)) continue;
        const ok = await verifies(async () => verifyCosignature(
          { witness: c.witness, keyId: c.key_id, time: c.time, signature: b64decode(c.signature, "cosignature.signature", 64) }, head, wkeys));
        if (ok) cosigned += 1;
        else find("bad_cosignature", null, `the cosignature by ${JSON.stringify(c.witness)} of the head of size ${newest.head.size} does not verify`);
      }
    }
  }
  const walk = await walkEntries(entries, find);
  return {
    key, head: newest ? newest.head : null, cosignatures: newest ? newest.cosignatures || [] : [], cosigned,
    witnessed: newest && newest.witnessed ? { head: newest.witnessed, cosignatures: newest.witnessed_cosignatures || [] } : null,
    entries: entries.length, byType: walk.byType, sources: walk.sources, findings, checked,
  };
}

function isNum(x: unknown): x is number {
  return typeof x === "number" && Number.isFinite(x);
}

const FIELDS: Record<string, Record<string, "string" | "number" | "object">> = {
  query: { query_id: "string", source: "string", kind: "string", spec: "object", spec_digest: "string" },
  task: { query_id: "string", cohort_id: "string", task_digest: "string" },
  charge: { query_id: "string", source: "string", epsilon: "number", delta: "number" },
  refund: { query_id: "string", source: "string", epsilon: "number", delta: "number" },
  budget: { source: "string", total_epsilon: "number", total_delta: "number" },
  release: { query_id: "string", result_digest: "string" },
};

function malformed(e: Obj): string | null {
  const bad = Object.entries(FIELDS[e.type]).filter(([k, t]) => (t === "number" ? !isNum(e[k]) : typeof e[k] !== t || e[k] === null));
  return bad.length ? `missing or malformed ${bad.map(([k]) => k).join(", ")}` : null;
}

interface Charge {
  index: number;
  source: string;
  epsilon: number;
  delta: number;
  refund: number | null;
  runs: number;
}

const close = (a: number, b: number): boolean => Math.abs(a - b) <= TOLERANCE * Math.max(Math.abs(a), Math.abs(b)) + 1e-15;

/** The entries' walk: logged queries, refunds after charges, each source's spend against its budget in force. */
export async function walkEntries(entries: Obj[], find: (code: string, index: number | null, message: string) => void):
  Promise<{ byType: Record<string, number>; sources: SourceSpend[] }> {
  const byType: Record<string, number> = {};
  const queries = new Map<string, { index: number; entry: Obj }>();
  const charges = new Map<string, Charge>(); // query id → its charge
  const tasks = new Map<string, number>(); // cohort id → the index of its task entry
  const budgets = new Map<string, { index: number; epsilon: number; delta: number }[]>();
  const active = new Map<string, Map<string, Charge>>(); // source → (query id # index → charge)
  const noBudget = new Set<string>();
  const overIdx = new Set<number>();
  const inForce = (source: string) => {
    const own = budgets.get(source) || budgets.get(DEFAULT_SOURCE);
    return own ? own[own.length - 1] : null;
  };
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (!e || !TYPES.includes(e.type)) {
      find("bad_entry", i, `entry ${i} has an unknown type`);
      continue;
    }
    byType[e.type] = (byType[e.type] || 0) + 1;
    const problem = malformed(e);
    if (problem) {
      find("bad_entry", i, `${e.type} entry ${i}: ${problem}`);
      continue;
    }
    if (e.type === "budget") {
      budgets.set(e.source, [...(budgets.get(e.source) || []), { index: i, epsilon: e.total_epsilon, delta: e.total_delta }]);
      continue;
    }
    const qid: string = e.query_id;
    if (e.type === "query") {
      const first = queries.get(qid);
      if (first) {
        find("duplicate_query", i, `query ${qid} is logged again at entry ${i} (first at entry ${first.index})`);
        continue;
      }
      queries.set(qid, { index: i, entry: e });
      if (hashingAvailable() && (await digest(e.spec)) !== e.spec_digest) {
        find("spec_digest", i, `query entry ${i} (${qid}): spec_digest is not the digest of its spec`);
      }
      continue;
    }
    if (!queries.has(qid)) find("unlogged_query", i, `${e.type} entry ${i} names query ${qid}, which has no earlier query entry`);
    if (e.type === "task") {
      const first = tasks.get(e.cohort_id);
      if (first !== undefined) {
        find("task_conflict", i, `cohort ${e.cohort_id} of query ${qid} has a second task entry at ${i} (first at entry ${first}): its members were shown different tasks`);
      } else {
        tasks.set(e.cohort_id, i);
      }
    }
    if (e.type === "charge") {
      const logged = queries.get(qid);
      if (logged && logged.entry.source !== e.source) {
        find("charge_source", i, `charge ${i} of query ${qid} is to source ${JSON.stringify(e.source)}, the query is over ${JSON.stringify(logged.entry.source)}`);
      }
      const base = charges.get(qid);
      const run = "layer" in e;
      if (run) {
        // one more run of a charged query (a failed opening's devices contributed again): in order, the first
        // run's amounts, naming a logged cohort
        if (!base || base.refund !== null || base.source !== e.source) {
          find("run_unexplained", i, `charge ${i} for run ${e.layer} of query ${qid}: the query has no live charge to ${JSON.stringify(e.source)} to extend`);
          continue;
        }
        if (e.layer !== base.runs + 1 || !close(e.epsilon * base.runs, base.epsilon) || !close(e.delta * base.runs, base.delta)) {
          find("run_unexplained", i, `charge ${i} of query ${qid} is for run ${e.layer}; the query had ${base.runs} run(s) of other amounts`);
        }
        if (typeof e.cohort_id !== "string" || !tasks.has(e.cohort_id)) {
          find("run_unexplained", i, `charge ${i} for run ${e.layer} of query ${qid} names cohort ${JSON.stringify(e.cohort_id)}, which has no task entry before it`);
        }
      } else if (base) {
        find("duplicate_charge", i, `query ${qid} is charged again at entry ${i} (first at entry ${base.index})`);
      }
      const charge: Charge = run ? (base as Charge) : { index: i, source: e.source, epsilon: e.epsilon, delta: e.delta, refund: null, runs: 1 };
      if (!base) charges.set(qid, charge);
      const rows = active.get(e.source) || new Map<string, Charge>();
      active.set(e.source, rows);
      let eps = 0;
      let delta = 0;
      for (const c of rows.values()) {
        eps += c.epsilon;
        delta += c.delta;
      }
      const b = inForce(e.source);
      if (!b) {
        if (!noBudget.has(e.source)) {
          noBudget.add(e.source);
          find("no_budget", i, `charge ${i} of query ${qid} to source ${JSON.stringify(e.source)}: no budget logged for the source nor a default ('*') before it`);
        }
      } else if (eps + e.epsilon > b.epsilon * (1 + TOLERANCE) || delta + e.delta > b.delta * (1 + TOLERANCE)) {
        overIdx.add(i);
        find("over_budget", i, `charge ${i} of query ${qid} takes source ${JSON.stringify(e.source)} to epsilon ` +
          `${+(eps + e.epsilon).toPrecision(6)}, over its budget (epsilon ${b.epsilon}, delta ${b.delta}; entry ${b.index})`);
      }
      if (run) {
        charge.epsilon += e.epsilon;
        charge.delta += e.delta;
        charge.runs = e.layer;
      } else {
        rows.set(`${qid}#${i}`, charge);
      }
    } else if (e.type === "refund") {
      const c = charges.get(qid);
      if (!c) find("refund_without_charge", i, `refund ${i} of query ${qid}: the query was never charged`);
      else if (c.refund !== null) find("refund_without_charge", i, `refund ${i} of query ${qid}: its charge (entry ${c.index}) was already refunded at entry ${c.refund}`);
      else {
        if (e.source !== c.source || !close(e.epsilon, c.epsilon) || !close(e.delta, c.delta)) {
          find("refund_mismatch", i, `refund ${i} of query ${qid} returns other amounts than charge ${c.index} took`);
        }
        c.refund = i;
        (active.get(c.source) || new Map()).delete(`${qid}#${c.index}`);
      }
    }
  }
  const sources = new Set([...[...charges.values()].map((c) => c.source), ...[...budgets.keys()].filter((s) => s !== DEFAULT_SOURCE)]);
  const out: SourceSpend[] = [];
  for (const source of [...sources].sort()) {
    const cs = [...charges.values()].filter((c) => c.source === source);
    const kept = cs.filter((c) => c.refund === null);
    const b = inForce(source);
    out.push({
      source,
      spent_epsilon: kept.reduce((s, c) => s + c.epsilon, 0),
      spent_delta: kept.reduce((s, c) => s + c.delta, 0),
      total_epsilon: b ? b.epsilon : null,
      total_delta: b ? b.delta : null,
      budget_from: b ? (budgets.has(source) ? source : DEFAULT_SOURCE) : null,
      charges: cs.length,
      refunds: cs.length - kept.length,
      over: cs.some((c) => overIdx.has(c.index)),
    });
  }
  return { byType, sources: out };
}
