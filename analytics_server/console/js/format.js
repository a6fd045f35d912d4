// Numbers as an analyst should read them: rounded to what their noise allows, with 95 % intervals; times and
// durations in words. The Python client does the same in analyst_client/view.py.

const Z95 = 1.959963984540054;

/** RFC 6901 JSON Pointer from path segments. */
export function pointer(...parts) {
  return parts.map((p) => "/" + String(p).replaceAll("~", "~0").replaceAll("/", "~1")).join("");
}

/**
 * The uncertainty of the released value at `ptr` of a result view, as the server gives it (`uncertainty[ptr]`,
 * with std and ci95: every noisy value has one). null for exact values.
 */
export function uncertaintyOf(view, ptr, value) {
  const u = view.uncertainty && ptr ? view.uncertainty[ptr] : null;
  if (!u || !Number.isFinite(u.std)) return null;
  if (Array.isArray(u.ci95)) return { std: u.std, lo: u.ci95[0], hi: u.ci95[1] };
  if (!Number.isFinite(value)) return null;
  return { std: u.std, lo: value - Z95 * u.std, hi: value + Z95 * u.std };
}

/** The decimal step a value with 95 % half-width `half` deserves: two significant digits of the half-width. */
export function noiseStep(half) {
  if (!(half > 0) || !Number.isFinite(half)) return null;
  return 10 ** (Math.floor(Math.log10(half)) - 1);
}

function fixed(value, step) {
  if (step >= 1) return String(Math.round(value / step) * step);
  const decimals = Math.min(12, Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));
  return (Math.round(value / step) * step).toFixed(decimals);
}

/** {value, half} as text, both rounded to the noise; without a half-width, 4 significant digits. */
export function roundToNoise(value, half) {
  if (value === null || value === undefined || !Number.isFinite(value)) return { value: String(value), half: null };
  const step = noiseStep(half);
  if (step === null) return { value: num(value), half: null };
  return { value: fixed(value, step), half: fixed(half, step) };
}

/** "59 ± 13", "0.0312", or "0.00 [0.00, 1.94]" when the interval is not centred on the value (clamped, or a count
 * released above a threshold): "± 0.99" would claim values the interval excludes. */
export function withInterval(value, unc) {
  if (!unc) return num(value);
  const half = (unc.hi - unc.lo) / 2;
  const r = roundToNoise(value, half);
  if (r.half === null) return r.value;
  if (Math.abs((unc.hi - value) - (value - unc.lo)) > 0.1 * half) {
    return `${r.value} [${roundToNoise(unc.lo, half).value}, ${roundToNoise(unc.hi, half).value}]`;
  }
  return `${r.value} ± ${r.half}`;
}

export function num(x, digits = 4) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (!Number.isFinite(x)) return String(x);
  if (Number.isInteger(x) && Math.abs(x) < 1e15) return x.toLocaleString("en-US");
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e7)) return x.toExponential(digits - 1);
  return Number(x.toPrecision(digits)).toLocaleString("en-US", { maximumFractionDigits: 12 });
}

export function eps(x) {
  if (x === null || x === undefined) return "–";
  return x >= 0.01 ? num(Number(x.toFixed(3))) : x.toExponential(2);
}

export function delta(x) {
  if (x === null || x === undefined) return "–";
  return x === 0 ? "0" : x.toExponential(1).replace("e-", "e−");
}

export function time(iso) {
  if (!iso) return "–";
  const d = new Date(iso.endsWith("Z") || /[+-]\d\d:\d\d$/.test(iso) ? iso : iso + "Z");
  return d.toLocaleString("en-GB", { hour12: false });
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 90) return `${seconds.toFixed(1)} s`;
  const m = Math.floor(seconds / 60);
  return m < 90 ? `${m} min ${Math.round(seconds % 60)} s` : `${(seconds / 3600).toFixed(1)} h`;
}

export function since(iso, until) {
  const a = Date.parse(iso.endsWith("Z") || /[+-]\d\d:\d\d$/.test(iso) ? iso : iso + "Z");
  const b = until ? Date.parse(until.endsWith("Z") || /[+-]\d\d:\d\d$/.test(until) ? until : until + "Z") : Date.now();
  return duration((b - a) / 1000);
}

export const PHASES = ["advertise_keys", "share_keys", "masked_input", "consistency_check", "unmasking"];

/** Fraction of a query's work done, from its status view (rounds, phase, answers in the phase). */
export function progressFraction(view) {
  if (view.status === "succeeded") return 1;
  const p = view.progress || {};
  const rounds = Math.max(1, p.rounds_upper_bound || 1);
  let within = 0;
  if (p.cohort) {
    const i = Math.max(0, PHASES.indexOf(p.cohort.phase));
    const answered = p.cohort.expected ? Math.min(1, p.cohort.answered / p.cohort.expected) : 0;
    within = (i + answered) / PHASES.length;
  }
  return Math.min(1, ((p.rounds_done || 0) + within) / rounds);
}

/** One line saying where a query stands. */
export function progressText(view) {
  const p = view.progress || {};
  if (view.status === "succeeded") return `done: ${p.rounds_done} round${p.rounds_done === 1 ? "" : "s"}`;
  if (view.status === "failed" || view.status === "cancelled") return view.status;
  const round = `round ${(p.round || 0) + 1} of ≤ ${p.rounds_upper_bound}`;
  if (p.cohort) {
    return `${round} · ${p.cohort.phase.replaceAll("_", " ")} · ${p.cohort.answered}/${p.cohort.expected} answered · ` +
      `closes in ≤ ${Math.ceil(p.cohort.deadline_in_s)} s`;
  }
  if (p.phase === "forming") {
    const elig = p.devices_eligible === null || p.devices_eligible === undefined ? "?" : p.devices_eligible;
    return `${round} · forming a cohort: ${elig} devices available, need ${p.need}`;
  }
  return `${round} · ${p.contributors}/${p.need ?? "?"} contributors`;
}
