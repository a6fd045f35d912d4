// One query: live progress (server-sent events over fetch, polling as a fallback), its event timeline, and
// once it succeeded the result per kind with the privacy block in words.

import { api, streamEvents } from "../api.js";
import { button, download, facts, h, replace } from "../dom.js";
import * as fmt from "../format.js";
import { describePrivacy } from "../privacy.js";
import { renderResult } from "../results.js";
import { cancelButton, statusBadge } from "./queries.js";

const TERMINAL = ["succeeded", "failed", "cancelled"];

export async function render({ main, params, onLeave, current }) {
  const id = params[0];
  const head = h("div", { class: "pagehead" });
  const progress = h("section", { class: "card", "data-testid": "progress" });
  const events = h("ol", { class: "events", "data-testid": "events" });
  const result = h("div", { "data-testid": "result" });
  main.append(head, progress, result, h("details", { class: "card" }, h("summary", {}, "Event timeline"), events));

  let view = await api("GET", `/v1/queries/${encodeURIComponent(id)}`);
  const spec = view.spec || null;
  let shownResult = false;
  const abort = new AbortController();
  onLeave(() => abort.abort());

  async function show(v) {
    view = v;
    replace(head,
      h("div", {},
        h("h1", {}, v.name || `Query ${v.id}`),
        h("p", { class: "muted" }, `${v.kind} over source “${v.source}” · id ${v.id} · submitted ${fmt.time(v.created_at)}`
          + (v.finished_at ? ` · ended after ${fmt.since(v.created_at, v.finished_at)}` : ""))),
      h("div", { class: "actions" }, statusBadge(v.status), cancelButton(v, reload)));
    renderProgress(progress, v);
    if ((v.status === "succeeded" || v.status === "failed") && !shownResult && current()) {
      shownResult = true;
      await showResult(v.status);
    }
  }

  async function reload() {
    await show(await api("GET", `/v1/queries/${encodeURIComponent(id)}`));
  }

  async function showResult(status) {
    let view;
    try {
      view = await api("GET", `/v1/queries/${encodeURIComponent(id)}/result`);
    } catch (err) {
      if (status === "failed" && err.status === 409) return;  // a failed query usually has no result
      throw err;
    }
    if (!current()) return;
    replace(result,
      h("section", { class: "card" },
        status === "failed" ? h("p", { class: "notice" }, "The query failed (see the error above); this is the last result it kept.") : null,
        h("div", { class: "pagehead" }, h("h2", {}, "Result"),
          button("Download result (JSON)", () => download(`result-${id}.json`, JSON.stringify(view, null, 2)))),
        renderResult(view, spec)),
      h("section", { class: "card", "data-testid": "privacy" }, h("h2", {}, "Privacy"), describePrivacy(view)));
  }

  function addEvent(ev) {
    const d = ev.data || {};
    const detail = Object.entries(d).filter(([, v]) => v !== null && v !== undefined && v !== "")
      .map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(" · ");
    events.append(h("li", {}, h("time", {}, fmt.time(ev.at)), " ", h("strong", {}, ev.type), detail ? ` — ${detail}` : ""));
  }

  await show(view);
  follow();  // for a finished query the stream replays the stored events and ends

  async function follow() {
    try {
      await streamEvents(`/v1/queries/${encodeURIComponent(id)}/events`, (ev) => {
        if (!current()) return;
        const data = JSON.parse(ev.data || "null");
        if (ev.event === "progress") show(data);
        else if (ev.event !== "end" && data) addEvent(data);
      }, abort.signal);
      if (current()) await reload();
    } catch (err) {
      if (abort.signal.aborted || !current()) return;
      // the stream broke (proxy, network): poll instead
      const timer = setInterval(async () => {
        if (!current()) return clearInterval(timer);
        try {
          await reload();
          if (TERMINAL.includes(view.status)) clearInterval(timer);
        } catch { /* shown on the next successful poll */ }
      }, 2000);
      onLeave(() => clearInterval(timer));
    }
  }
}

function renderProgress(el, v) {
  const p = v.progress;
  const rows = [
    ["round", `${Math.min(p.round + 1, p.rounds_upper_bound)} of at most ${p.rounds_upper_bound} (${p.rounds_done} done)`],
    ["contributors", `${p.contributors} of the ${p.need ?? "?"} this round needs`],
    ["cohorts this round", Object.keys(p.cohorts || {}).length ? Object.entries(p.cohorts).map(([k, n]) => `${n} ${k}`).join(", ") : null],
  ];
  let phases = null;
  if (p.cohort) {
    rows.push(["cohort", `${p.cohort.devices} devices · ${p.cohort.answered} of ${p.cohort.expected} answered in ` +
      `${p.cohort.phase.replaceAll("_", " ")} · closes in ≤ ${Math.ceil(p.cohort.deadline_in_s)} s`]);
    const at = fmt.PHASES.indexOf(p.cohort.phase);
    phases = h("ol", { class: "phases", "aria-label": "secure aggregation phases" },
      fmt.PHASES.map((ph, i) => h("li", { class: i < at ? "done" : i === at ? "now" : "" }, ph.replaceAll("_", " "))));
  } else if (p.phase === "forming") {
    rows.push(["cohort", `forming: ${p.devices_eligible ?? "?"} devices available, ${p.need} needed`]);
  }
  if (v.error) rows.push(["error", h("span", { class: "error" }, v.error)]);
  replace(el,
    h("h2", {}, "Progress"),
    h("div", { class: "progressline" },
      h("progress", { max: 1, value: fmt.progressFraction(v).toFixed(3), "data-testid": "progressbar" }),
      h("span", { "data-testid": "progress-text", dataset: { phase: p.cohort ? p.cohort.phase : p.phase || "",
        answered: p.cohort ? p.cohort.answered : "" } }, fmt.progressText(v))),
    phases,
    facts(rows));
}
