// The result's privacy block in words: mechanism, ε and δ spent, noise, t_min, contributors per round,
// thresholds, validation, and what is left of the source's budget. The raw block follows for reference.

import { facts, h } from "./dom.js";
import * as fmt from "./format.js";

const MECHANISMS = {
  skellam: "the Skellam mechanism (the difference of two Poisson variables per device)",
  discrete_gaussian: "the discrete Gaussian mechanism",
};

export function describePrivacy(view) {
  const p = view.privacy || {};
  const contributors = p.contributors || [];
  const sentences = [];
  if (p.mechanism === "none" || !p.mechanism) {
    sentences.push(
      `No differential privacy: the server released exact sums. Secure aggregation kept each device's input hidden ` +
      `inside sums over at least ${p.t_min ?? p.min_clients ?? "?"} devices, but the totals themselves carry no noise ` +
      `and no ε bounds what they reveal.`);
  } else {
    const tmin = p.t_min ?? p.min_clients;
    const noise = (p.noise || []).filter(Boolean);
    const released = noise.length ? noise.map((n) => n.noise_std_released).filter(Number.isFinite) : [];
    // released units are counts for histogram and heavy hitters; other kinds release values decoded from a
    // fixed-point encoding, where the sum's noise std says little by itself (their intervals carry it)
    const counts = view.kind === "histogram" || view.kind === "heavy_hitters";
    const stdText = counts && released.length
      ? (Math.min(...released) === Math.max(...released) ? fmt.num(released[0], 3) : `${fmt.num(Math.min(...released), 3)} to ${fmt.num(Math.max(...released), 3)}`)
      : null;
    sentences.push(
      `Distributed differential privacy with ${MECHANISMS[p.mechanism] || p.mechanism}: every device added its share of ` +
      `integer noise before masking, so each sum the server saw over at least t_min = ${tmin} devices already carried ` +
      `the full noise` + (stdText ? ` (standard deviation ${stdText} on each released count).` : "."));
    sentences.push(
      `The query guarantees (and was charged) ε = ${fmt.eps(p.epsilon)} with δ = ${fmt.delta(p.delta)}` +
      (p.rounds_calibrated ? `, calibrated for ${p.rounds_calibrated} round${p.rounds_calibrated === 1 ? "" : "s"}` : "") +
      (p.accountant ? ` and composed with the ${p.accountant} accountant.` : ".") +
      (p.epsilon_note ? ` Note: ${p.epsilon_note}.` : ""));
  }
  if (contributors.length) {
    sentences.push(contributors.length === 1
      ? `${contributors[0]} devices contributed.`
      : `${contributors.length} rounds; devices contributing per round: ${contributors.join(", ")}.`);
  }
  const th = p.thresholds || {};
  const release = th.release_threshold ?? (Array.isArray(th.release_thresholds) ? th.release_thresholds : null);
  if (release !== null && release !== undefined) {
    sentences.push(`Values whose noisy count fell below the release threshold (${Array.isArray(release) ? release.map((x) => fmt.num(x)).join(", ") : fmt.num(release)}) were suppressed.`);
  }
  const validation = p.validation || "none";
  sentences.push(validation === "proofs"
    ? "Validation: each device proved its masked contribution valid (bounded), and invalid ones were left out."
    : "Validation: none — the device SDK bounds each contribution, but the server cannot check a modified device's input.");
  if (p.identities === "open") {
    sentences.push("Identities: open registration — this server has no identity issuer, so anyone could have registered many of the contributing devices.");
  }
  const b = p.source_budget;
  if (b) {
    sentences.push(`Source “${b.source}” has ε = ${fmt.eps(b.remaining_epsilon)} and δ = ${fmt.delta(b.remaining_delta)} ` +
      `left of its ε = ${fmt.eps(b.total_epsilon)}, δ = ${fmt.delta(b.total_delta)} (as of this query).`);
  }
  return h("div", { class: "privacy" },
    sentences.map((s) => h("p", {}, s)),
    facts([
      ["mechanism", p.mechanism],
      ["ε (guaranteed and charged / rounds run alone)", p.mechanism === "none" ? "unbounded" : `${fmt.eps(p.epsilon)} / ${fmt.eps(p.epsilon_spent)}`],
      ["δ", p.mechanism === "none" ? "–" : fmt.delta(p.delta)],
      ["t_min (fewest devices in any sum)", p.t_min ?? p.min_clients],
      ["noise multiplier", p.noise_multiplier !== undefined ? fmt.num(p.noise_multiplier, 3) : null],
      ["sensitivity", p.sensitivity ? `L1 ${fmt.num(p.sensitivity.l1, 3)}, L2 ${fmt.num(p.sensitivity.l2, 3)}` : null],
      ["ring bits per round", (p.bits || []).join(", ") || null],
    ], { "data-testid": "privacy-facts" }),
    h("details", {}, h("summary", {}, "The privacy block as released"), h("pre", { class: "json" }, JSON.stringify(p, null, 2))));
}
