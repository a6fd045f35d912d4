/** The task digest (queries/task_digest.py): what one device was asked to compute in one cohort, hashed the same way
 * by every party, Python or JavaScript.
 *
 * Every device hashes its own assignment and binds the digest into its secure-aggregation keys and signatures
 * (secagg/crypto.ts `binding`) and its validity proof's transcript, so a server that shows two members of a cohort
 * different tasks — another query spec, round, task (a histogram's buckets, a training round's model), privacy block,
 * noise or secagg configuration (n, threshold, graph, bit width) — gets masks that do not cancel *and* signatures that
 * do not verify: the devices refuse before any input is sent (docs/secagg.md, "Devices that check the server").
 *
 *     digest = SHA-256("fa-task-digest/v1\n" ‖ JCS(view))
 *
 * `view` is the JSON object of the assignment's members named in `DIGEST_FIELDS` whose value is present and not null,
 * taken from the assignment's JSON object *as the device received it* (not a re-serialised copy); JCS is the JSON
 * Canonicalization Scheme of RFC 8785 (the `canonicalize` package: members sorted by UTF-16 code units, numbers in
 * ECMAScript's shortest form, minimal string escapes), then UTF-8. JSON *integers* beyond ±(2^53 − 1) (no fraction or
 * exponent in the text) are refused, as the Python side refuses them: JSON.parse has already rounded them, so two
 * languages could read them differently. Numbers written with a fraction or exponent are doubles for both sides and
 * are taken whatever their value (`1e21`, `9007199254740992.0`). JSON.parse cannot tell the two apart, so the device
 * scans the text it received for such integer literals (`unsafeIntegerLiterals`) and passes what it found; without
 * the text, every integral number beyond ±(2^53 − 1) is refused (the conservative reading). The
 * per-device fields (`party_id`, `server_url`, `first_phase`, `phase_timeout_s`) are left out;
 * `cohort_id` is the session id, which the binding carries anyway. Known-answer vectors: tests/vectors/task_digest.json. */

import canonicalize from "canonicalize";

import { concat, utf8 } from "./bytes.js";
import { sha256 } from "./webcrypto.js";

export const TASK_DIGEST_DOMAIN = utf8("fa-task-digest/v1\n");
export const TASK_DIGEST_BYTES = 32;

/** The assignment members the digest covers: everything that shapes what a device computes and how it is protected. */
export const DIGEST_FIELDS = [
  "spec", "query_id", "round", "kind", "source", "task", "secagg", "threat_model", "noise", "validation", "privacy",
] as const;

/** An assignment whose digest view cannot be canonicalised (a number outside the interoperable range, a value that is
 * not JSON); the message names the member. */
export class TaskDigestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TaskDigestError";
  }
}

// `canonicalize` checks each string with String.prototype.isWellFormed (ES2024: Node ≥ 20, browsers since 2023). Where
// the runtime predates it (Node 18, older Safari), a spec-conformant stand-in is installed once, so the digest is
// computed there too instead of failing every assignment.
/** Whether `s` has no lone surrogate (String.prototype.isWellFormed; no regex lookbehind, which the runtimes that
 * need this stand-in may lack). */
export function wellFormed(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i);
    if (u < 0xd800 || u > 0xdfff) continue;
    if (u > 0xdbff) return false;  // a low surrogate with no high one before it
    const next = s.charCodeAt(i + 1);
    if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
    i++;
  }
  return true;
}

if (typeof (String.prototype as { isWellFormed?: unknown }).isWellFormed !== "function") {
  Object.defineProperty(String.prototype, "isWellFormed", {
    value: function isWellFormed(this: string): boolean {
      return wellFormed(String(this));
    },
    writable: true,
    configurable: true,
    enumerable: false,
  });
}

type Obj = Record<string, unknown>;

/** The members of a wire assignment (its JSON object) that the digest covers. */
export function digestView(assignment: Obj): Obj {
  const view: Obj = {};
  for (const k of DIGEST_FIELDS) {
    if (Object.prototype.hasOwnProperty.call(assignment, k) && assignment[k] !== null && assignment[k] !== undefined) view[k] = assignment[k];
  }
  return view;
}

const isPlainObject = (v: object): boolean => {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
};

/** Throw TaskDigestError naming `what` (and where inside it) for anything RFC 8785 cannot encode the same way in every
 * language: integers beyond ±(2^53 − 1), non-finite numbers, values that are not JSON, cycles (lone surrogates are left
 * to `canonicalize`). Iterative, so a deeply nested value cannot exhaust the stack. */
function check(value: unknown, what: string, unsafe: ReadonlySet<number> | null): void {
  const stack: [unknown, string, boolean][] = [[value, what, false]];
  const open = new Set<object>();  // the containers on the current path (a value shared by two members is no cycle)
  while (stack.length) {
    const [v, path, leaving] = stack.pop() as [unknown, string, boolean];
    if (leaving) {
      open.delete(v as object);
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

const NUMBER_OR_STRING = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
const INTEGER_LITERAL = /^-?\d+$/;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** The values (as JSON.parse reads them) of the integer literals beyond ±(2^53 − 1) in a JSON text — numbers written
 * without fraction or exponent, which Python reads as integers and the digest refuses. */
export function unsafeIntegerLiterals(jsonText: string): Set<number> {
  const out = new Set<number>();
  if (!/\d{16}/.test(jsonText)) return out;
  for (const m of jsonText.matchAll(NUMBER_OR_STRING)) {
    const t = m[0];
    if (t.length < 16 || t[0] === '"' || !INTEGER_LITERAL.test(t)) continue;
    const v = BigInt(t);
    if (v > MAX_SAFE || -v > MAX_SAFE) out.add(Number(t));
  }
  return out;
}

/** Where the digest's input came from: `unsafeIntegers`, the integer literals beyond ±(2^53 − 1) of the JSON text
 * it was parsed from (`unsafeIntegerLiterals`); null or absent: unknown, every integral number beyond is refused. */
export interface DigestOptions {
  unsafeIntegers?: ReadonlySet<number> | null;
}

/** RFC 8785 canonical UTF-8 bytes of a JSON value; TaskDigestError naming `what` when it has none. */
export function canonicalJson(value: unknown, what = "value", opts: DigestOptions = {}): Uint8Array {
  check(value, what, opts.unsafeIntegers ?? null);
  let text: string | undefined;
  try {
    text = canonicalize(value);
  } catch (exc) {
    throw new TaskDigestError(`${what}: not canonical JSON: ${(exc as Error).message}`);
  }
  if (text === undefined) throw new TaskDigestError(`${what}: not canonical JSON: no JSON representation`);
  return utf8(text);
}

/** The 32-byte digest of an assignment's wire JSON object, as received. */
export async function taskDigest(assignment: Obj, opts: DigestOptions = {}): Promise<Uint8Array> {
  if (typeof assignment !== "object" || assignment === null || Array.isArray(assignment)) throw new TaskDigestError("assignment: not a JSON object");
  const view = digestView(assignment);
  for (const [name, value] of Object.entries(view)) check(value, name, opts.unsafeIntegers ?? null);  // names the member at fault
  return sha256(concat(TASK_DIGEST_DOMAIN, canonicalJson(view, "assignment", opts)));
}
