// The fleet: devices registered, available and seated, check-ins per second (from successive reports), cohorts
// by outcome, the last hour's abort reasons, and how long each secure-aggregation phase stays open.

import { api } from "../api.js";
import { bars, liveLine } from "../charts.js";
import { facts, h, replace, table } from "../dom.js";
import * as fmt from "../format.js";

const REFRESH_MS = 2000;
const KEEP = 90;

export async function render({ main, onLeave, current }) {
  const stats = h("div", { class: "stats", "data-testid": "fleet-stats" });
  const rateCanvas = h("canvas", { role: "img", "aria-label": "check-ins per second" });
  const cohortCanvas = h("canvas", { role: "img", "aria-label": "cohorts by outcome" });
  const phaseCanvas = h("canvas", { role: "img", "aria-label": "phase durations" });
  const reasons = h("div", {});
  const phaseTable = h("div", { class: "tablebox" });
  main.append(
    h("div", { class: "pagehead" }, h("h1", {}, "Fleet")),
    stats,
    h("div", { class: "charts" },
      h("section", { class: "card" }, h("h3", {}, "Check-ins per second"), h("div", { class: "chartbox small" }, rateCanvas)),
      h("section", { class: "card" }, h("h3", {}, "Cohorts by outcome"), h("div", { class: "chartbox small" }, cohortCanvas)),
      h("section", { class: "card" }, h("h3", {}, "Phase durations (recent cohorts)"), h("div", { class: "chartbox small" }, phaseCanvas), phaseTable),
      h("section", { class: "card" }, h("h3", {}, "Abort reasons, last hour"), reasons)));

  const rate = liveLine(rateCanvas, "check-ins/s", "check-ins per second");
  let cohortChart = null;
  let phaseChart = null;
  let last = null;

  async function refresh() {
    const f = await api("GET", "/v1/fleet");
    if (!current()) return;
    let perSecond = null;
    if (last && f.at > last.at) perSecond = Math.max(0, (f.checkins_total - last.checkins_total) / (f.at - last.at));
    last = f;
    if (perSecond !== null) {
      rate.data.labels.push(new Date(f.at * 1000).toLocaleTimeString("en-GB", { hour12: false }));
      rate.data.datasets[0].data.push(perSecond);
      if (rate.data.labels.length > KEEP) {
        rate.data.labels.shift();
        rate.data.datasets[0].data.shift();
      }
      rate.update("none");
    }
    replace(stats,
      stat("registered devices", fmt.num(f.devices_registered), "registered"),
      stat("available now", fmt.num(f.devices_available), "available"),
      stat("in cohorts", fmt.num(f.devices_in_cohorts), "seated"),
      stat("check-ins per second", perSecond === null ? "measuring…" : perSecond.toFixed(1), "rate"),
      stat("server processes", fmt.num(f.processes_live), "processes"),
      stat("queries running", fmt.num((f.queries.running || 0) + (f.queries.pending || 0)), "running"));
    const outcomes = ["finished", "aborted", "running"];
    if (!cohortChart) {
      cohortChart = bars(cohortCanvas, outcomes, [
        { label: "all time", values: outcomes.map((o) => f.cohorts_total[o] || 0) },
        { label: "last hour", values: outcomes.map((o) => f.cohorts_recent[o] || 0) },
      ]);
    } else {
      cohortChart.data.datasets[0].data = outcomes.map((o) => f.cohorts_total[o] || 0);
      cohortChart.data.datasets[1].data = outcomes.map((o) => f.cohorts_recent[o] || 0);
      cohortChart.update("none");
    }
    const phases = Object.entries(f.phase_durations);
    const labels = phases.map(([p]) => p.replaceAll("_", " "));
    const series = [
      { label: "mean s", values: phases.map(([, s]) => s.mean_s) },
      { label: "p90 s", values: phases.map(([, s]) => s.p90_s) },
      { label: "max s", values: phases.map(([, s]) => s.max_s) },
    ];
    if (!phaseChart) {
      phaseChart = bars(phaseCanvas, labels, series, { horizontal: true, yLabel: "seconds" });
    } else {
      phaseChart.data.labels = labels;
      series.forEach((s, i) => { phaseChart.data.datasets[i].data = s.values; });
      phaseChart.update("none");
    }
    replace(phaseTable, phases.length ? table([
      { label: "phase", cell: ([p]) => p.replaceAll("_", " ") },
      { label: "cohorts", class: "num", cell: ([, s]) => fmt.num(s.count) },
      { label: "median", class: "num", cell: ([, s]) => fmt.duration(s.p50_s) },
      { label: "p90", class: "num", cell: ([, s]) => fmt.duration(s.p90_s) },
      { label: "max", class: "num", cell: ([, s]) => fmt.duration(s.max_s) },
    ], phases, { "data-testid": "phases" }) : h("p", { class: "empty" }, "No cohorts yet."),
    h("p", { class: "muted small" }, `from the ${f.cohorts_sampled} most recent cohorts`));
    replace(reasons, f.abort_reasons.length ? table([
      { label: "reason", cell: (r) => r.reason },
      { label: "cohorts", class: "num", cell: (r) => fmt.num(r.count) },
    ], f.abort_reasons, { "data-testid": "abort-reasons" }) : h("p", { class: "empty" }, "No cohort aborted in the last hour."),
    facts([["queries by status", Object.entries(f.queries).map(([k, n]) => `${n} ${k}`).join(", ") || "none"]]));
  }

  const error = h("div", { class: "error", role: "alert", hidden: true });
  main.append(error);
  await refresh();
  const timer = setInterval(() => refresh().then(() => { error.hidden = true; }, (err) => {
    error.textContent = `Could not refresh: ${err.message}`;
    error.hidden = false;
  }), REFRESH_MS);
  onLeave(() => clearInterval(timer));
}

function stat(label, value, key) {
  return h("div", { class: "stat", dataset: { stat: key } }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
}
