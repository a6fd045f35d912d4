// Generated from device_sdk/js/src/logAudit.ts and translog.ts by `node scripts/bundle.mjs --vendor`: do not edit.

// src/bytes.ts
var utf8 = (s) => new TextEncoder().encode(s);
function hex(b) {
  let out = "";
  for (const x of b) out += x.toString(16).padStart(2, "0");
  return out;
}
function unhex(s) {
  if (s.length % 2 || /[^0-9a-fA-F]/.test(s)) throw new TypeError(`not a hex string: ${s.slice(0, 40)}`);
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}
function concat(...parts) {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
var B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
function b64encode(b) {
  let out = "";
  for (let i = 0; i < b.length; i += 3) {
    const n = b[i] << 16 | (b[i + 1] ?? 0) << 8 | (b[i + 2] ?? 0);
    out += B64[n >> 18 & 63] + B64[n >> 12 & 63];
    out += i + 1 < b.length ? B64[n >> 6 & 63] : "=";
    out += i + 2 < b.length ? B64[n & 63] : "=";
  }
  return out;
}
function b64decode(s, what, length) {
  if (typeof s !== "string" || s.length % 4 || !/^[A-Za-z0-9+/]*={0,2}$/.test(s)) throw new Error(`${what}: not valid base64`);
  const pad = s.endsWith("==") ? 2 : s.endsWith("=") ? 1 : 0;
  const out = new Uint8Array(s.length / 4 * 3 - pad);
  let o = 0;
  for (let i = 0; i < s.length; i += 4) {
    let n = 0;
    for (let j = 0; j < 4; j++) n = n << 6 | (s[i + j] === "=" ? 0 : B64.indexOf(s[i + j]));
    for (const shift of [16, 8, 0]) if (o < out.length) out[o++] = n >> shift & 255;
  }
  if (length !== void 0 && out.length !== length) throw new Error(`${what}: expected ${length} bytes, got ${out.length}`);
  return out;
}

// node_modules/canonicalize/lib/canonicalize.js
function serializeString(value) {
  if (!value.isWellFormed()) {
    throw new Error("Lone surrogate is not allowed");
  }
  return JSON.stringify(value);
}
function serializePrimitive(value) {
  switch (typeof value) {
    case "number":
      if (isNaN(value)) {
        throw new Error("NaN is not allowed");
      }
      if (!isFinite(value)) {
        throw new Error("Infinity is not allowed");
      }
      return JSON.stringify(value);
    case "string":
      return serializeString(value);
    case "boolean":
      return value ? "true" : "false";
    default:
      return JSON.stringify(value);
  }
}
function enterValue(value, seen) {
  let wrappers = null;
  while (value !== null && typeof value === "object" && typeof value.toJSON === "function") {
    if (seen.has(value)) {
      throw new Error("Circular reference detected");
    }
    seen.add(value);
    (wrappers ??= []).push(value);
    value = value.toJSON();
  }
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    value = value.valueOf();
  }
  if (value === null || typeof value !== "object") {
    if (wrappers !== null) {
      for (const wrapper of wrappers) seen.delete(wrapper);
    }
    return serializePrimitive(value);
  }
  if (seen.has(value)) {
    throw new Error("Circular reference detected");
  }
  seen.add(value);
  return {
    container: value,
    // null marks an array frame; object frames carry their sorted keys.
    // `sort()`'s default comparator orders by UTF-16 code unit, which is the
    // order JCS requires.
    keys: Array.isArray(value) ? null : Object.keys(value).sort(),
    // Next child to serialize; the frame resumes here after a nested
    // container's subtree completes.
    index: 0,
    // Whether no member has been emitted yet (controls comma placement).
    first: true,
    // toJSON wrappers to release from `seen` when this frame completes.
    wrappers
  };
}
function canonicalize(object) {
  if (object === null || typeof object !== "object") {
    return serializePrimitive(object);
  }
  const seen = /* @__PURE__ */ new Set();
  const root = enterValue(object, seen);
  if (typeof root !== "object") {
    return root;
  }
  let result = root.keys === null ? "[" : "{";
  const stack = [root];
  outer:
    while (stack.length > 0) {
      const frame = stack[stack.length - 1];
      const container = frame.container;
      if (frame.keys === null) {
        while (frame.index < container.length) {
          const i = frame.index++;
          if (i > 0) {
            result += ",";
          }
          const element = container[i];
          const value = element === void 0 || typeof element === "symbol" || typeof element === "function" ? null : element;
          if (value === null || typeof value !== "object") {
            result += serializePrimitive(value);
            continue;
          }
          const child = enterValue(value, seen);
          if (typeof child !== "object") {
            result += child === void 0 ? "null" : child;
            continue;
          }
          result += child.keys === null ? "[" : "{";
          stack.push(child);
          continue outer;
        }
        result += "]";
      } else {
        const keys = frame.keys;
        while (frame.index < keys.length) {
          const key = keys[frame.index++];
          const value = container[key];
          if (value === void 0 || typeof value === "symbol" || typeof value === "function") {
            continue;
          }
          if (value === null || typeof value !== "object") {
            if (frame.first) {
              frame.first = false;
            } else {
              result += ",";
            }
            result += serializeString(key) + ":" + serializePrimitive(value);
            continue;
          }
          const child = enterValue(value, seen);
          if (child === void 0) {
            continue;
          }
          if (frame.first) {
            frame.first = false;
          } else {
            result += ",";
          }
          result += serializeString(key) + ":";
          if (typeof child !== "object") {
            result += child;
            continue;
          }
          result += child.keys === null ? "[" : "{";
          stack.push(child);
          continue outer;
        }
        result += "}";
      }
      seen.delete(container);
      if (frame.wrappers !== null) {
        for (const wrapper of frame.wrappers) seen.delete(wrapper);
      }
      stack.pop();
    }
  return result;
}

// src/webcrypto.ts
function webcrypto() {
  const c = globalThis.crypto;
  if (!c || !c.subtle || typeof c.getRandomValues !== "function") {
    throw new Error("WebCrypto is not available (globalThis.crypto.subtle): a secure context (https or localhost) and Node ≥ 20 are needed");
  }
  return c;
}
var subtle = () => webcrypto().subtle;
var buf = (b) => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
async function sha256(data) {
  return new Uint8Array(await subtle().digest("SHA-256", buf(data)));
}
var PKCS8_X25519 = Uint8Array.from([48, 46, 2, 1, 0, 48, 5, 6, 3, 43, 101, 110, 4, 34, 4, 32]);
var PKCS8_ED25519 = Uint8Array.from([48, 46, 2, 1, 0, 48, 5, 6, 3, 43, 101, 112, 4, 34, 4, 32]);
async function ed25519Verify(publicKey, signature, message) {
  if (publicKey.length !== 32 || signature.length !== 64) return false;
  try {
    const pk = await subtle().importKey("raw", buf(publicKey), { name: "Ed25519" }, false, ["verify"]);
    return await subtle().verify({ name: "Ed25519" }, pk, buf(signature), buf(message));
  } catch {
    return false;
  }
}

// src/taskDigest.ts
var TASK_DIGEST_DOMAIN = utf8("fa-task-digest/v1\n");
var TaskDigestError = class extends Error {
  constructor(message) {
    super(message);
    this.name = "TaskDigestError";
  }
};
function wellFormed(s) {
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i);
    if (u < 55296 || u > 57343) continue;
    if (u > 56319) return false;
    const next = s.charCodeAt(i + 1);
    if (!(next >= 56320 && next <= 57343)) return false;
    i++;
  }
  return true;
}
if (typeof String.prototype.isWellFormed !== "function") {
  Object.defineProperty(String.prototype, "isWellFormed", {
    value: function isWellFormed() {
      return wellFormed(String(this));
    },
    writable: true,
    configurable: true,
    enumerable: false
  });
}
var isPlainObject = (v) => {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
};
function check(value, what, unsafe) {
  const stack = [[value, what, false]];
  const open = /* @__PURE__ */ new Set();
  while (stack.length) {
    const [v, path, leaving] = stack.pop();
    if (leaving) {
      open.delete(v);
      continue;
    }
    if (v === null || typeof v === "string" || typeof v === "boolean") continue;
    if (typeof v === "number") {
      if (!Number.isFinite(v)) throw new TaskDigestError(`${what}: not canonical JSON: ${v} at ${path} is not a finite number`);
      if (Number.isInteger(v) && Math.abs(v) > Number.MAX_SAFE_INTEGER && (unsafe === null || unsafe.has(v))) {
        throw new TaskDigestError(`${what}: an integer is beyond ±(2^53 − 1) (${v} at ${path})`);
      }
      continue;
    }
    if (typeof v !== "object" || !(Array.isArray(v) || isPlainObject(v))) {
      throw new TaskDigestError(`${what}: not canonical JSON: ${path} is not a JSON value (${typeof v === "object" ? "not a plain object" : typeof v})`);
    }
    if (open.has(v)) throw new TaskDigestError(`${what}: not canonical JSON: ${path} refers to itself`);
    open.add(v);
    stack.push([v, path, true]);
    if (Array.isArray(v)) v.forEach((x, i) => stack.push([x, `${path}[${i}]`, false]));
    else for (const [k, x] of Object.entries(v)) stack.push([x, `${path}.${k}`, false]);
  }
}
var MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
function canonicalJson(value, what = "value", opts = {}) {
  check(value, what, opts.unsafeIntegers ?? null);
  let text;
  try {
    text = canonicalize(value);
  } catch (exc) {
    throw new TaskDigestError(`${what}: not canonical JSON: ${exc.message}`);
  }
  if (text === void 0) throw new TaskDigestError(`${what}: not canonical JSON: no JSON representation`);
  return utf8(text);
}

// src/translog.ts
var HASH_SIZE = 32;
var MAX_ORIGIN = 200;
var MAX_INT = 2 ** 53;
var HEAD_DOMAIN = "fa-log-head/v1\n";
var COSIGNATURE_DOMAIN = "fa-log-cosignature/v1\n";
var KEY_DOMAIN = "fa-log-key/v1\n";
var ProofError = class extends Error {
  constructor(message) {
    super(message);
    this.name = "ProofError";
  }
};
var HeadError = class extends Error {
  constructor(message) {
    super(message);
    this.name = "HeadError";
  }
};
function leafHash(data) {
  return sha256(concat(Uint8Array.of(0), data));
}
function nodeHash(left, right) {
  return sha256(concat(Uint8Array.of(1), left, right));
}
function emptyRoot() {
  return sha256(new Uint8Array(0));
}
var CompactRange = class {
  size = 0;
  peaks = [];
  async append(leaf) {
    if (leaf.length !== HASH_SIZE) throw new ProofError(`leaf hash: must be ${HASH_SIZE} bytes, got ${leaf.length}`);
    this.peaks.push(leaf);
    for (let i = this.size; i % 2 === 1; i = Math.floor(i / 2)) {
      const right = this.peaks.pop();
      const left = this.peaks.pop();
      this.peaks.push(await nodeHash(left, right));
    }
    this.size += 1;
  }
  async root() {
    if (!this.peaks.length) return emptyRoot();
    let acc = this.peaks[this.peaks.length - 1];
    for (let i = this.peaks.length - 2; i >= 0; i--) acc = await nodeHash(this.peaks[i], acc);
    return acc;
  }
};
function entryBytes(entry) {
  return canonicalJson(entry, "log entry");
}
function entryLeafHash(entry) {
  return leafHash(entryBytes(entry));
}
function pyRepr(s) {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = "";
  for (const ch of s) {
    const u = ch.codePointAt(0);
    if (ch === "\\") out += "\\\\";
    else if (ch === q) out += "\\" + q;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "	") out += "\\t";
    else if (u < 32 || u === 127) out += "\\x" + u.toString(16).padStart(2, "0");
    else out += ch;
  }
  return q + out + q;
}
var codePoints = (s) => [...s].length;
async function keyId(publicKey) {
  if (publicKey.length !== 32) throw new HeadError(`public key: must be 32 bytes (Ed25519), got ${publicKey.length}`);
  return hex((await sha256(concat(utf8(KEY_DOMAIN), publicKey))).subarray(0, 8));
}
var RFC8032_KEY = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
var RFC8032_SIGNATURE = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";
async function ed25519Available() {
  try {
    return await ed25519Verify(unhex(RFC8032_KEY), unhex(RFC8032_SIGNATURE), new Uint8Array(0));
  } catch {
    return false;
  }
}
async function keyTable(publicKeys) {
  const out = /* @__PURE__ */ new Map();
  for (const k of publicKeys) out.set(await keyId(k), Uint8Array.from(k));
  return out;
}
function treeHead(origin, size, root, timestampMs) {
  if (typeof origin !== "string" || !origin || codePoints(origin) > MAX_ORIGIN || origin.includes("\n")) {
    throw new HeadError(`origin: 1..${MAX_ORIGIN} characters without a newline`);
  }
  if (!(Number.isInteger(size) && size >= 0 && size < MAX_INT)) throw new HeadError(`size: must be in 0..2^53, got ${size}`);
  if (root.length !== HASH_SIZE) throw new HeadError(`root: must be ${HASH_SIZE} bytes, got ${root.length}`);
  if (!(Number.isInteger(timestampMs) && timestampMs >= 0 && timestampMs < MAX_INT)) throw new HeadError(`timestamp_ms: must be in 0..2^53, got ${timestampMs}`);
  return { origin, size, root: Uint8Array.from(root), timestampMs };
}
function headMessage(head) {
  return utf8(`${HEAD_DOMAIN}${head.origin}
${head.size}
${b64encode(head.root)}
${head.timestampMs}
`);
}
function cosignatureMessage(head, time) {
  return concat(utf8(`${COSIGNATURE_DOMAIN}time ${time}
`), headMessage(head));
}
async function verifySigned(keys, kid, signature, message, what) {
  const key = keys.get(kid);
  if (key === void 0) throw new HeadError(`${what}: signed by key ${pyRepr([...kid].slice(0, 16).join(""))}, which is not one of the ${keys.size} pinned`);
  if (!await ed25519Verify(key, signature, message)) throw new HeadError(`${what}: the signature does not verify under key ${kid}`);
}
function verifyHead(signed, keys) {
  return verifySigned(keys, signed.keyId, signed.signature, headMessage(signed.head), `tree head of size ${signed.head.size}`);
}
function verifyCosignature(cosig, head, witnesses) {
  return verifySigned(
    witnesses,
    cosig.keyId,
    cosig.signature,
    cosignatureMessage(head, cosig.time),
    `cosignature by ${pyRepr([...cosig.witness].slice(0, 40).join(""))} of the head of size ${head.size}`
  );
}
function b64(s, what, length) {
  try {
    return b64decode(s, what, length);
  } catch (exc) {
    throw new HeadError(exc.message);
  }
}
function parseHead(h) {
  const head = treeHead(h.origin, h.size, b64(h.root, "head.root", 32), h.timestamp_ms);
  return { head, keyId: h.key_id, signature: b64(h.signature, "head.signature", 64) };
}

// src/logAudit.ts
var PAGE = 1e3;
var TOLERANCE = 1e-9;
var DEFAULT_SOURCE = "*";
var TYPES = ["query", "task", "charge", "refund", "budget", "release"];
function hashingAvailable() {
  const c = globalThis.crypto;
  return !!(c && c.subtle);
}
async function digest(value) {
  return hex(await sha256(canonicalJson(value, "value")));
}
async function ranged(get, route, end, pick, onProgress) {
  const out = [];
  for (let start = 0; start < end; start += PAGE) {
    const stop = Math.min(end, start + PAGE);
    out.push(...pick(await get(`${route}?start=${start}&end=${stop}`)));
    if (onProgress) onProgress(stop, end);
  }
  return out;
}
async function verifies(check2) {
  try {
    await check2();
    return true;
  } catch (exc) {
    if (exc instanceof HeadError) return false;
    throw exc;
  }
}
async function headVerifies(h, keys) {
  return verifies(async () => verifyHead(parseHead(h), keys));
}
async function auditLog(get, onProgress = () => {
}) {
  const findings = [];
  const find = (code, index, message) => {
    findings.push({ code, index, message });
  };
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
  const witnessKeys = Object.values(key.witnesses || {}).map((k) => b64decode(k, "witness key"));
  let cosigned = null;
  if (hashingAvailable()) {
    onProgress("checking heads");
    const all = [...heads];
    if (newest) all.push(newest.head, ...newest.witnessed ? [newest.witnessed] : []);
    checked.signatures = await ed25519Available();
    const keys = checked.signatures ? await keyTable([key.public_key, ...key.previous_keys || []].map((k) => b64decode(k, "log key"))) : null;
    const valid = /* @__PURE__ */ new Map();
    for (const h of all) {
      const id = `${h.size}/${h.root}`;
      if (valid.has(id)) continue;
      if (keys && !await headVerifies(h, keys)) {
        find("bad_signature", null, `the tree head of size ${h.size} does not verify under the log's keys`);
        continue;
      }
      if (h.origin !== key.origin) find("origin", null, `the head of size ${h.size} is of log ${JSON.stringify(h.origin)}`);
      valid.set(id, h);
    }
    const bySize = /* @__PURE__ */ new Map();
    for (const h of valid.values()) bySize.set(h.size, [...bySize.get(h.size) || [], h]);
    for (const [size, group] of [...bySize.entries()].sort((a, b) => a[0] - b[0])) {
      if (group.length > 1) {
        find("equivocation", size ? size - 1 : null, `the log signed ${group.length} different heads of size ${size}`);
      }
    }
    onProgress("recomputing the roots");
    const sizes = [...bySize.keys()].filter((s) => s <= entries.length).sort((a, b) => a - b);
    const tree = new CompactRange();
    let good = 0;
    let bad = null;
    let later = 0;
    for (const size of sizes) {
      while (tree.size < size) await tree.append(await entryLeafHash(entries[tree.size]));
      const root = b64encode(await tree.root());
      const match = bySize.get(size).some((h) => h.root === root);
      if (match && bad === null) good = size;
      else if (!match && bad === null) bad = size;
      else if (!match) later += 1;
    }
    if (bad !== null) {
      const tail = later ? `; ${later} later head(s) do not match either` : "";
      find("altered", bad - 1, (good === bad - 1 ? `entry ${bad - 1} altered or removed` : `an entry among ${good}..${bad - 1} altered or removed`) + `: the signed head of size ${bad} does not match the entries${tail}`);
    }
    checked.roots = true;
    if (newest && witnessKeys.length && checked.signatures) {
      const wkeys = await keyTable(witnessKeys);
      const head = parseHead(newest.head).head;
      cosigned = 0;
      for (const c of newest.cosignatures || []) {
        if (!wkeys.has(c.key_id)) continue;
        const ok = await verifies(async () => verifyCosignature(
          { witness: c.witness, keyId: c.key_id, time: c.time, signature: b64decode(c.signature, "cosignature.signature", 64) },
          head,
          wkeys
        ));
        if (ok) cosigned += 1;
        else find("bad_cosignature", null, `the cosignature by ${JSON.stringify(c.witness)} of the head of size ${newest.head.size} does not verify`);
      }
    }
  }
  const walk = await walkEntries(entries, find);
  return {
    key,
    head: newest ? newest.head : null,
    cosignatures: newest ? newest.cosignatures || [] : [],
    cosigned,
    witnessed: newest && newest.witnessed ? { head: newest.witnessed, cosignatures: newest.witnessed_cosignatures || [] } : null,
    entries: entries.length,
    byType: walk.byType,
    sources: walk.sources,
    findings,
    checked
  };
}
function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}
var FIELDS = {
  query: { query_id: "string", source: "string", kind: "string", spec: "object", spec_digest: "string" },
  task: { query_id: "string", cohort_id: "string", task_digest: "string" },
  charge: { query_id: "string", source: "string", epsilon: "number", delta: "number" },
  refund: { query_id: "string", source: "string", epsilon: "number", delta: "number" },
  budget: { source: "string", total_epsilon: "number", total_delta: "number" },
  release: { query_id: "string", result_digest: "string" }
};
function malformed(e) {
  const bad = Object.entries(FIELDS[e.type]).filter(([k, t]) => t === "number" ? !isNum(e[k]) : typeof e[k] !== t || e[k] === null);
  return bad.length ? `missing or malformed ${bad.map(([k]) => k).join(", ")}` : null;
}
var close = (a, b) => Math.abs(a - b) <= TOLERANCE * Math.max(Math.abs(a), Math.abs(b)) + 1e-15;
async function walkEntries(entries, find) {
  const byType = {};
  const queries = /* @__PURE__ */ new Map();
  const charges = /* @__PURE__ */ new Map();
  const tasks = /* @__PURE__ */ new Map();
  const budgets = /* @__PURE__ */ new Map();
  const active = /* @__PURE__ */ new Map();
  const noBudget = /* @__PURE__ */ new Set();
  const overIdx = /* @__PURE__ */ new Set();
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
      budgets.set(e.source, [...budgets.get(e.source) || [], { index: i, epsilon: e.total_epsilon, delta: e.total_delta }]);
      continue;
    }
    const qid = e.query_id;
    if (e.type === "query") {
      const first = queries.get(qid);
      if (first) {
        find("duplicate_query", i, `query ${qid} is logged again at entry ${i} (first at entry ${first.index})`);
        continue;
      }
      queries.set(qid, { index: i, entry: e });
      if (hashingAvailable() && await digest(e.spec) !== e.spec_digest) {
        find("spec_digest", i, `query entry ${i} (${qid}): spec_digest is not the digest of its spec`);
      }
      continue;
    }
    if (!queries.has(qid)) find("unlogged_query", i, `${e.type} entry ${i} names query ${qid}, which has no earlier query entry`);
    if (e.type === "task") {
      const first = tasks.get(e.cohort_id);
      if (first !== void 0) {
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
      const charge = run ? base : { index: i, source: e.source, epsilon: e.epsilon, delta: e.delta, refund: null, runs: 1 };
      if (!base) charges.set(qid, charge);
      const rows = active.get(e.source) || /* @__PURE__ */ new Map();
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
        find("over_budget", i, `charge ${i} of query ${qid} takes source ${JSON.stringify(e.source)} to epsilon ${+(eps + e.epsilon).toPrecision(6)}, over its budget (epsilon ${b.epsilon}, delta ${b.delta}; entry ${b.index})`);
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
        (active.get(c.source) || /* @__PURE__ */ new Map()).delete(`${qid}#${c.index}`);
      }
    }
  }
  const sources = /* @__PURE__ */ new Set([...[...charges.values()].map((c) => c.source), ...[...budgets.keys()].filter((s) => s !== DEFAULT_SOURCE)]);
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
      budget_from: b ? budgets.has(source) ? source : DEFAULT_SOURCE : null,
      charges: cs.length,
      refunds: cs.length - kept.length,
      over: cs.some((c) => overIdx.has(c.index))
    });
  }
  return { byType, sources: out };
}
export {
  PAGE,
  auditLog,
  digest,
  hashingAvailable,
  walkEntries
};
