// The query list, refreshed every 2 s: status, kind, round, contributors vs need, phase; cancel for one's own.

import { api, session } from "../api.js";
import { button, h, replace, table } from "../dom.js";
import * as fmt from "../format.js";

const REFRESH_MS = 2000;

export function statusBadge(status) {
  return h("span", { class: `badge ${status}`, "data-testid": "status" }, status);
}

export function cancelButton(view, after) {
  const s = session();
  const active = view.status === "pending" || view.status === "running";
  if (!active || !s || view.created_by !== s.tokenId) return null;
  return button("Cancel", async (ev) => {
    ev.target.disabled = true;
    try {
      await api("POST", `/v1/queries/${view.id}/cancel`);
    } catch (err) {
      ev.target.replaceWith(h("span", { class: "error" }, err.message));
      return;
    }
    after();
  }, { class: "danger small", "data-testid": "cancel" });
}

export async function render({ main, onLeave, current }) {
  const body = h("div", {});
  main.append(
    h("div", { class: "pagehead" }, h("h1", {}, "Queries"), h("a", { class: "button primary", href: "#/new" }, "New query")),
    body);
  let timer = null;
  async function refresh() {
    let list;
    try {
      list = (await api("GET", "/v1/queries")).queries;
    } catch (err) {
      replace(body, h("div", { class: "error", role: "alert" }, err.message));
      return;
    }
    if (!current()) return;
    if (!list.length) {
      replace(body, h("p", { class: "empty" }, "No queries yet. ", h("a", { href: "#/new" }, "Start one from a template.")));
      return;
    }
    replace(body, table([
      { label: "query", cell: (q) => h("a", { href: `#/q/${q.id}` }, q.name || q.id) },
      { label: "kind", cell: (q) => q.kind },
      { label: "source", cell: (q) => q.source },
      { label: "status", cell: (q) => statusBadge(q.status) },
      { label: "round", class: "num", cell: (q) => `${Math.min(q.progress.round + 1, q.progress.rounds_upper_bound)} / ≤ ${q.progress.rounds_upper_bound}` },
      { label: "contributors / need", class: "num", cell: (q) => `${q.progress.contributors} / ${q.progress.need ?? "–"}` },
      { label: "phase", cell: (q) => progressCell(q) },
      { label: "submitted", cell: (q) => fmt.time(q.created_at) },
      { label: "", cell: (q) => cancelButton(q, refresh) },
    ], list, { "data-testid": "queries" }, (q) => ({ dataset: { id: q.id, status: q.status } })));
  }
  await refresh();
  timer = setInterval(refresh, REFRESH_MS);
  onLeave(() => clearInterval(timer));
}

function progressCell(q) {
  const frac = fmt.progressFraction(q);
  return h("div", { class: "progresscell" },
    h("progress", { max: 1, value: frac.toFixed(3) }),
    h("span", { class: "muted small" }, q.status === "running" || q.status === "pending" ? fmt.progressText(q) : (q.error || "")));
}
