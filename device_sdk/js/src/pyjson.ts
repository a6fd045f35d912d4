/** Python-compatible text of JSON values, where the device must agree with the Python SDK on a string made from a
 * row: `repr` of floats (histogram buckets of numbers), `json.dumps(row, sort_keys=True)` (the training hold-out
 * split), Python's whitespace for `str.strip`, code-point order for sorting, and numpy's pairwise summation.
 * One difference cannot be removed: JSON numbers written as integral floats ("31.0") are integers to JavaScript,
 * so they print as "31" where Python prints "31.0". */

/** Python's repr of a finite float (shortest round-trip digits; exponent form below 1e-4 and from 1e16). */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mant, expText] = Math.abs(x).toExponential().split("e");
  const digits = mant.replace(".", "");
  const exp = Number(expText);
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exp).toString().padStart(2, "0");
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${e}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  const intPart = digits.slice(0, exp + 1).padEnd(exp + 1, "0");
  const frac = digits.slice(exp + 1);
  return `${sign}${intPart}.${frac || "0"}`;
}

/** The text Python gives a JSON number: integers as integers, other floats by `repr`. */
export function pyNumber(x: number): string {
  return Number.isInteger(x) ? BigInt(x).toString() : pyFloatRepr(x);
}

export function codePointCompare(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done || y.done) return x.done && y.done ? 0 : x.done ? -1 : 1;
    const cx = (x.value as string).codePointAt(0) as number;
    const cy = (y.value as string).codePointAt(0) as number;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

function pyString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const ch = s[i];
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (c < 0x20 || c > 0x7e) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out + '"';
}

/** `json.dumps(value, sort_keys=True)` (ensure_ascii, ", " and ": " separators). */
export function pyJsonDumps(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "number") return Number.isFinite(v) ? pyNumber(v) : Number.isNaN(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
  if (typeof v === "string") return pyString(v);
  if (Array.isArray(v)) return "[" + v.map(pyJsonDumps).join(", ") + "]";
  if (typeof v === "object") {
    const keys = Object.keys(v as object).sort(codePointCompare);
    return "{" + keys.map((k) => `${pyString(k)}: ${pyJsonDumps((v as Record<string, unknown>)[k])}`).join(", ") + "}";
  }
  return pyString(String(v));
}

const PY_SPACE = "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "g");

/** Python's `str.strip()` (its own set of whitespace characters). */
export function pyStrip(s: string): string {
  return s.replace(STRIP, "");
}

/** Python's `str.casefold()`: full lower-casing through upper case (ß → ss), final sigma folded to σ. Differs from
 * Python only for Cherokee, whose lower-case letters Python folds to upper case. */
export function pyCasefold(s: string): string {
  return s.toUpperCase().toLowerCase().replace(/ς/g, "σ").replace(/ß/g, "ss");
}

/** numpy's pairwise summation of a float64 array (np.sum / np.mean), so sums round as the Python SDK's do. */
export function npSum(a: ArrayLike<number>, start = 0, n = a.length): number {
  if (n < 8) {
    let res = 0;
    for (let i = 0; i < n; i++) res += a[start + i];
    return res;
  }
  if (n <= 128) {
    const r = [0, 1, 2, 3, 4, 5, 6, 7].map((j) => a[start + j]);
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] += a[start + i + j];
    let res = r[0] + r[1] + (r[2] + r[3]) + (r[4] + r[5] + (r[6] + r[7]));
    for (; i < n; i++) res += a[start + i];
    return res;
  }
  let n2 = Math.floor(n / 2);
  n2 -= n2 % 8;
  return npSum(a, start, n2) + npSum(a, start + n2, n - n2);
}

export const npMean = (a: ArrayLike<number>): number => npSum(a) / a.length;
