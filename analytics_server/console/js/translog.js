// The public transparency log, audited in the browser (docs/transparency.md): the same checks as `fa audit`
// (analyst_client/audit.py) that need only the public /v1/log/* routes. No DOM here, so Node runs it too.
//
// - every signed head verifies under the served log keys (Ed25519 in WebCrypto, where the browser has it);
// - the entries, as RFC 8785 canonical JSON, rebuild the RFC 9162 tree whose root each head commits to — the
//   first head that does not match names the altered entry; two heads of one size with different roots are
//   an equivocation;
// - walking the entries: every task, charge, refund and release names an earlier query; a refund returns a
//   charge; each source's spend (Σε, Σδ: the server's basic composition) stays within the budget in force.
//
// Hashing needs WebCrypto, which browsers offer only in a secure context (https, or http on localhost); without
// it the walk still runs and the report says the roots and signatures were not checked.

export const PAGE = 1000;
const TOLERANCE = 1e-9; // queries/dp/ledger.py TOLERANCE
const DEFAULT_SOURCE = "*";
const TYPES = ["query", "task", "charge", "refund", "budget", "release"];
const enc = new TextEncoder();

/** RFC 8785 (JCS) canonical JSON: sorted keys (UTF-16 order), ECMAScript number and string serialisation. */
export function canonical(value) {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error(`not canonical JSON: ${value}`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  }
  throw new Error(`not canonical JSON: a ${typeof value}`);
}

function subtle() {
  const c = globalThis.crypto;
  return c && c.subtle ? c.subtle : null;
}

export function hashingAvailable() {
  return subtle() !== null;
}

async function sha256(bytes) {
  return new Uint8Array(await subtle().digest("SHA-256", bytes));
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export function fromBase64(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

export function toBase64(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

export function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export async function leafHash(entry) {
  return sha256(concat(new Uint8Array([0]), enc.encode(canonical(entry))));
}

export async function digest(value) {
  return toHex(await sha256(enc.encode(canonical(value))));
}

/** The RFC 9162 root of the leaves appended so far: its perfect subtrees ("peaks"), folded right to left. */
export class Peaks {
  constructor() {
    this.peaks = []; // [{level, hash}], left to right
    this.size = 0;
  }

  async append(leaf) {
    this.peaks.push({ level: 0, hash: leaf });
    this.size += 1;
    while (this.peaks.length >= 2 && this.peaks[this.peaks.length - 1].level === this.peaks[this.peaks.length - 2].level) {
      const right = this.peaks.pop();
      const left = this.peaks.pop();
      this.peaks.push({ level: left.level + 1, hash: await sha256(concat(new Uint8Array([1]), left.hash, right.hash)) });
    }
  }

  async root() {
    if (!this.peaks.length) return sha256(new Uint8Array(0));
    let acc = this.peaks[this.peaks.length - 1].hash;
    for (let i = this.peaks.length - 2; i >= 0; i--) acc = await sha256(concat(new Uint8Array([1]), this.peaks[i].hash, acc));
    return acc;
  }
}

/** The text a tree head's signature covers (translog/heads.py). */
export function headMessage(h) {
  return enc.encode(`fa-log-head/v1\n${h.origin}\n${h.size}\n${h.root}\n${h.timestamp_ms}\n`);
}

export function cosignatureMessage(h, time) {
  return concat(enc.encode(`fa-log-cosignature/v1\ntime ${time}\n`), headMessage(h));
}

export async function keyId(publicKey) {
  return toHex((await sha256(concat(enc.encode("fa-log-key/v1\n"), publicKey))).slice(0, 8));
}

/** key id → CryptoKey for Ed25519 verification; null when this browser's WebCrypto has no Ed25519. */
async function importKeys(publicKeys) {
  const out = {};
  try {
    for (const raw of publicKeys) {
      out[await keyId(raw)] = await subtle().importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
    }
  } catch {
    return null;
  }
  return out;
}

async function verifies(keys, kid, signature, message) {
  const key = keys[kid];
  if (!key) return false;
  try {
    return await subtle().verify({ name: "Ed25519" }, key, fromBase64(signature), message);
  } catch {
    return false;
  }
}

/** Every page of a ranged route ([start, end) by at most PAGE). */
async function ranged(get, route, end, pick, onProgress) {
  const out = [];
  let start = 0;
  while (start < end) {
    const stop = Math.min(end, start + PAGE);
    const items = pick(await get(`${route}?start=${start}&end=${stop}`));
    out.push(...items);
    if (onProgress) onProgress(Math.min(stop, end), end);
    start = stop;
  }
  return out;
}

function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

const FIELDS = {
  query: { query_id: "string", source: "string", kind: "string", spec: "object", spec_digest: "string" },
  task: { query_id: "string", cohort_id: "string", task_digest: "string" },
  charge: { query_id: "string", source: "string", epsilon: "number", delta: "number" },
  refund: { query_id: "string", source: "string", epsilon: "number", delta: "number" },
  budget: { source: "string", total_epsilon: "number", total_delta: "number" },
  release: { query_id: "string", result_digest: "string" },
};

function malformed(e) {
  const bad = Object.entries(FIELDS[e.type]).filter(([k, t]) => (t === "number" ? !isNum(e[k]) : typeof e[k] !== t || e[k] === null));
  return bad.length ? `missing or malformed ${bad.map(([k]) => k).join(", ")}` : null;
}

/**
 * Audit the log through `get(path) → JSON` (the public routes). `onProgress(text)` hears what is being read.
 * → {key, head, cosignatures, witnessed, entries, byType, sources, findings, checked: {roots, signatures}}
 */
export async function auditLog(get, onProgress = () => {}) {
  const findings = [];
  const find = (code, index, message) => findings.push({ code, index, message });
  const key = await get("/v1/log/key");
  let newest = null;
  try {
    newest = await get("/v1/log/head");
  } catch (err) {
    if (err.status !== 404) throw err;
  }
  const n = newest ? newest.head.size : 0;
  const served = await ranged(get, "/v1/log/entries", n, (p) => p.entries, (i, of) => onProgress(`reading entries ${i} of ${of}`));
  const heads = await ranged(get, "/v1/log/heads", n + 1, (p) => p.heads);
  const entries = [];
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
  const witnessKeys = Object.values(key.witnesses || {}).map(fromBase64);
  let cosigned = null;
  if (hashingAvailable()) {
    onProgress("checking heads");
    const all = [...heads];
    if (newest) all.push(newest.head, ...(newest.witnessed ? [newest.witnessed] : []));
    const keys = await importKeys([key.public_key, ...(key.previous_keys || [])].map(fromBase64));
    checked.signatures = keys !== null;
    const valid = new Map(); // `${size}/${root}` → head
    for (const h of all) {
      const id = `${h.size}/${h.root}`;
      if (valid.has(id)) continue;
      if (keys && !(await verifies(keys, h.key_id, h.signature, headMessage(h)))) {
        find("bad_signature", null, `the tree head of size ${h.size} does not verify under the log's keys`);
        continue;
      }
      if (h.origin !== key.origin) find("origin", null, `the head of size ${h.size} is of log ${JSON.stringify(h.origin)}`);
      valid.set(id, h);
    }
    const bySize = new Map();
    for (const h of valid.values()) bySize.set(h.size, [...(bySize.get(h.size) || []), h]);
    for (const [size, group] of [...bySize.entries()].sort((a, b) => a[0] - b[0])) {
      if (group.length > 1) {
        find("equivocation", size ? size - 1 : null, `the log signed ${group.length} different heads of size ${size}`);
      }
    }
    onProgress("recomputing the roots");
    const sizes = [...bySize.keys()].filter((s) => s <= entries.length).sort((a, b) => a - b);
    const peaks = new Peaks();
    let good = 0;
    let bad = null;
    let later = 0;
    for (const size of sizes) {
      while (peaks.size < size) await peaks.append(await leafHash(entries[peaks.size]));
      const root = toBase64(await peaks.root());
      const match = bySize.get(size).some((h) => h.root === root);
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
    if (newest && witnessKeys.length) {
      const wkeys = await importKeys(witnessKeys);
      if (wkeys) {
        cosigned = 0;
        for (const c of newest.cosignatures || []) {
          if (!wkeys[c.key_id]) continue;
          if (await verifies(wkeys, c.key_id, c.signature, cosignatureMessage(newest.head, c.time))) cosigned += 1;
          else find("bad_cosignature", null, `the cosignature by ${JSON.stringify(c.witness)} of the head of size ${newest.head.size} does not verify`);
        }
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

/** The entries' walk: logged queries, refunds after charges, each source's spend against its budget in force. */
export async function walkEntries(entries, find) {
  const byType = {};
  const queries = new Map();
  const charges = new Map(); // query id → {index, source, epsilon, delta, refund}
  const tasks = new Map(); // cohort id → the index of its task entry
  const budgets = new Map(); // source → [{index, epsilon, delta}]
  const active = new Map(); // source → Map(query id → charge)
  const noBudget = new Set();
  const overIdx = new Set();
  const inForce = (source) => {
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
    const qid = e.query_id;
    if (e.type === "query") {
      if (queries.has(qid)) {
        find("duplicate_query", i, `query ${qid} is logged again at entry ${i} (first at entry ${queries.get(qid).index})`);
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
      if (tasks.has(e.cohort_id)) {
        find("task_conflict", i, `cohort ${e.cohort_id} of query ${qid} has a second task entry at ${i} (first at entry ${tasks.get(e.cohort_id)}): its members were shown different tasks`);
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
      const close = (a, b) => Math.abs(a - b) <= TOLERANCE * Math.max(Math.abs(a), Math.abs(b)) + 1e-15;
      if ("layer" in e) {
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
      const charge = "layer" in e ? base : { index: i, source: e.source, epsilon: e.epsilon, delta: e.delta, refund: null, runs: 1 };
      if (!base) charges.set(qid, charge);
      const rows = active.get(e.source) || new Map();
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
      if ("layer" in e) {
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
        const close = (a, b) => Math.abs(a - b) <= TOLERANCE * Math.max(Math.abs(a), Math.abs(b)) + 1e-15;
        if (e.source !== c.source || !close(e.epsilon, c.epsilon) || !close(e.delta, c.delta)) {
          find("refund_mismatch", i, `refund ${i} of query ${qid} returns other amounts than charge ${c.index} took`);
        }
        c.refund = i;
        (active.get(c.source) || new Map()).delete(`${qid}#${c.index}`);
      }
    }
  }
  const sources = new Set([...[...charges.values()].map((c) => c.source), ...[...budgets.keys()].filter((s) => s !== DEFAULT_SOURCE)]);
  const out = [];
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
