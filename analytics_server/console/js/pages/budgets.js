// Privacy budgets per source, and one source's charges over time (cumulative ε spent, refunds stepping it down).

import { api } from "../api.js";
import { timeline } from "../charts.js";
import { facts, h, table } from "../dom.js";
import * as fmt from "../format.js";

function parseTime(iso) {
  return Date.parse(iso.endsWith("Z") || /[+-]\d\d:\d\d$/.test(iso) ? iso : iso + "Z");
}

function meter(spent, total) {
  return h("meter", { min: 0, max: total || 1, value: Math.min(spent, total || 1), low: 0.7 * total, high: 0.9 * total, optimum: 0 });
}

export async function render({ main, params }) {
  const source = params[0];
  const list = await api("GET", "/v1/budgets");
  main.append(h("div", { class: "pagehead" }, h("h1", {}, "Privacy budgets")));
  const rows = list.budgets;
  main.append(h("section", { class: "card" },
    h("p", { class: "muted" }, `Each source has a total (ε, δ); every noisy query is charged at submission and refunded only if ` +
      `it ends before the server could see any masked input. Sources without a set total get ε = ${fmt.eps(list.default_epsilon)}, ` +
      `δ = ${fmt.delta(list.default_delta)}.`),
    rows.length ? table([
      { label: "source", cell: (b) => h("a", { href: `#/budgets/${encodeURIComponent(b.source)}` }, b.source) },
      { label: "ε spent / total", class: "num", cell: (b) => `${fmt.eps(b.spent_epsilon)} / ${fmt.eps(b.total_epsilon)}` },
      { label: "", cell: (b) => meter(b.spent_epsilon, b.total_epsilon) },
      { label: "ε left", class: "num", cell: (b) => fmt.eps(b.remaining_epsilon) },
      { label: "δ spent / total", class: "num", cell: (b) => `${fmt.delta(b.spent_delta)} / ${fmt.delta(b.total_delta)}` },
      { label: "queries charged", class: "num", cell: (b) => fmt.num(b.queries_charged) },
      { label: "total set by", cell: (b) => (b.configured ? "admin" : "default") },
    ], rows, { "data-testid": "budgets" }, (b) => ({ dataset: { source: b.source, spent: b.spent_epsilon, total: b.total_epsilon } }))
      : h("p", { class: "empty" }, "No source has been charged yet.")));
  const chosen = source || (rows.length ? rows[0].source : null);
  if (chosen) main.append(await sourcePanel(chosen));
}

async function sourcePanel(source) {
  const data = await api("GET", `/v1/budgets/${encodeURIComponent(source)}/charges`);
  const b = data.budget;
  const steps = [];
  for (const c of data.charges) {
    steps.push({ x: parseTime(c.charged_at), d: c.epsilon });
    if (c.status === "refunded" && c.refunded_at) steps.push({ x: parseTime(c.refunded_at), d: -c.epsilon });
  }
  steps.sort((a, b2) => a.x - b2.x);
  let acc = 0;
  const points = steps.map((s) => ({ x: s.x, y: (acc = Math.max(0, acc + s.d)) }));
  if (points.length) points.push({ x: Math.max(Date.now(), points[points.length - 1].x), y: acc });
  const canvas = h("canvas", { role: "img", "aria-label": `epsilon spent on ${source} over time` });
  const section = h("section", { class: "card", "data-testid": "charges", dataset: { source } },
    h("h2", {}, `Source “${source}”`),
    facts([
      ["ε", `${fmt.eps(b.spent_epsilon)} spent of ${fmt.eps(b.total_epsilon)} (${fmt.eps(b.remaining_epsilon)} left)`],
      ["δ", `${fmt.delta(b.spent_delta)} spent of ${fmt.delta(b.total_delta)}`],
      ["queries charged", fmt.num(b.queries_charged)],
    ]),
    points.length ? h("div", { class: "chartbox" }, canvas) : h("p", { class: "empty" }, "No charges yet."),
    data.charges.length ? table([
      { label: "charged", cell: (c) => fmt.time(c.charged_at) },
      { label: "query", cell: (c) => (c.query_id ? h("a", { href: `#/q/${c.query_id}` }, c.name || c.query_id) : h("span", { class: "muted" }, "another analyst's query")) },
      { label: "kind", cell: (c) => c.kind || "–" },
      { label: "ε", class: "num", cell: (c) => fmt.eps(c.epsilon) },
      { label: "δ", class: "num", cell: (c) => fmt.delta(c.delta) },
      { label: "status", cell: (c) => (c.status === "refunded" ? `refunded ${fmt.time(c.refunded_at)}` : "charged") },
    ], [...data.charges].reverse(), { "aria-label": "charges, newest first" },
    (c) => ({ dataset: { epsilon: c.epsilon, status: c.status } })) : null);
  if (points.length) queueMicrotask(() => timeline(canvas, points, { total: b.total_epsilon }));
  return section;
}
