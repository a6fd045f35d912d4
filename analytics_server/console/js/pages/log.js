// The public transparency log (docs/transparency.md): the newest signed head with its witnesses' cosignatures,
// and an audit computed here from the public /v1/log/* routes (vendor/translog.js: the JS device SDK's log verifier,
// device_sdk/js/src/logAudit.ts on translog.ts, bundled; the checks of `fa audit` that need no credentials): entries
// by type, each source's spend from the log against its budget, and findings.

import { publicApi } from "../api.js";
import { button, facts, h, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { auditLog } from "../../vendor/translog.js";

const TYPES = ["query", "task", "charge", "refund", "budget", "release"];

function msTime(ms) {
  return new Date(ms).toLocaleString("en-GB", { hour12: false });
}

function headFacts(head, cosignatures, cosigned, key) {
  return facts([
    ["size", fmt.num(head.size)],
    ["root", h("code", { "data-testid": "log-root" }, head.root)],
    ["signed", `${msTime(head.timestamp_ms)} by key ${head.key_id}${head.key_id === key.key_id ? "" : " (a previous key)"}`],
    ["origin", head.origin],
    ["cosignatures", cosignatures.length
      ? cosignatures.map((c) => `${c.witness} (${c.key_id}, ${msTime(c.time * 1000)})`).join("; ") +
        (cosigned === null ? "" : ` — ${cosigned} verified`)
      : "none"],
  ], { "data-testid": "log-head", dataset: { size: head.size } });
}

export async function render({ main, current }) {
  const headCard = h("section", { class: "card" }, h("p", { class: "muted" }, "Reading the newest head…"));
  const auditCard = h("section", { class: "card", "data-testid": "log-audit" });
  main.append(
    h("div", { class: "pagehead" }, h("h1", {}, "Transparency log"),
      button("Audit again", () => run(), { "data-testid": "log-rerun" })),
    h("p", { class: "muted" }, "Every accepted query, cohort task, privacy charge, refund, budget and release is an entry " +
      "of one append-only Merkle log that anyone can read without credentials. This page checks it in your browser; ",
      h("code", {}, "fa audit"), " runs the same checks, keeps the last head it verified, and with a token also compares " +
      "the server's queries, results and ledger with the log."),
    headCard, auditCard);

  async function run() {
    replace(auditCard, h("p", { class: "muted", "data-testid": "log-progress" }, "Auditing…"));
    const progress = auditCard.firstChild;
    let report;
    try {
      report = await auditLog(publicApi, (text) => { progress.textContent = `Auditing: ${text}…`; });
    } catch (err) {
      if (!current()) return;
      replace(auditCard, h("div", { class: "error", role: "alert" }, `Could not read the log: ${err.message}`));
      return;
    }
    if (!current()) return;
    const { key, head } = report;
    replace(headCard,
      h("h2", {}, "Newest signed head"),
      head ? headFacts(head, report.cosignatures, report.cosigned, key) : h("p", { class: "empty" }, "The log is empty."),
      report.witnessed ? h("div", {}, h("h3", {}, "Newest head the witnesses cosigned"),
        headFacts(report.witnessed.head, report.witnessed.cosignatures, null, key)) : null,
      facts([
        ["log key", `${key.key_id} (${key.public_key})`],
        ["previous keys", (key.previous_keys || []).length ? key.previous_keys.join(", ") : null],
        ["witnesses", Object.keys(key.witnesses || {}).length ? Object.keys(key.witnesses).join(", ") : "none configured"],
      ]));
    renderAudit(report);
  }

  function renderAudit(report) {
    const notes = [];
    if (!report.checked.roots) {
      notes.push("This page is not a secure context (https, or http on localhost): the browser offers no hashing, so " +
        "the roots and signatures were not checked (fa audit checks them).");
    } else if (!report.checked.signatures) {
      notes.push("This browser cannot verify Ed25519 signatures: the roots were recomputed, the heads' signatures not checked.");
    }
    notes.push("The log key is the one the server serves now: pin it (fa audit --log-key) to notice a change.");
    const ok = report.findings.length === 0;
    replace(auditCard,
      h("h2", {}, "Audit"),
      h("p", { class: ok ? "ok" : "error", "data-testid": "log-verdict", dataset: { findings: report.findings.length } },
        ok ? `No findings in ${fmt.num(report.entries)} entries.` : `${report.findings.length} finding(s) in ${fmt.num(report.entries)} entries.`),
      notes.map((n) => h("p", { class: "muted small" }, n)),
      h("h3", {}, "Entries by type"),
      table([
        { label: "type", cell: (t) => t },
        { label: "entries", class: "num", cell: (t) => fmt.num(report.byType[t] || 0) },
      ], TYPES, { "data-testid": "log-types" }, (t) => ({ dataset: { type: t, count: report.byType[t] || 0 } })),
      h("h3", {}, "Spend per source, from the log (basic composition)"),
      report.sources.length ? table([
        { label: "source", cell: (s) => s.source },
        { label: "ε spent / budget", class: "num", cell: (s) => `${fmt.eps(s.spent_epsilon)} / ${fmt.eps(s.total_epsilon)}` },
        { label: "δ spent / budget", class: "num", cell: (s) => `${fmt.delta(s.spent_delta)} / ${fmt.delta(s.total_delta)}` },
        { label: "budget", cell: (s) => (s.budget_from === null ? "none logged" : s.budget_from === "*" ? "default (*)" : "set for the source") },
        { label: "charges", class: "num", cell: (s) => fmt.num(s.charges) },
        { label: "refunds", class: "num", cell: (s) => fmt.num(s.refunds) },
        { label: "", cell: (s) => (s.over ? h("span", { class: "badge failed" }, "over budget") : "") },
      ], report.sources, { "data-testid": "log-sources" }, (s) => ({ dataset: { source: s.source, spent: s.spent_epsilon, total: s.total_epsilon } }))
        : h("p", { class: "empty" }, "No charges logged."),
      h("h3", {}, "Findings"),
      report.findings.length ? table([
        { label: "entry", class: "num", cell: (f) => (f.index === null ? "–" : String(f.index)) },
        { label: "code", cell: (f) => h("code", {}, f.code) },
        { label: "finding", cell: (f) => f.message },
      ], report.findings, { "data-testid": "log-findings" }, (f) => ({ dataset: { code: f.code, index: f.index } }))
        : h("p", { class: "empty" }, "None."));
  }

  await run();
}
