// A query's result page, the same for every kind: the tables its kind builds on the server (`view.table`,
// queries/table.py) — each drawn as a chart when it carries a chart hint and always as an accessible table —
// then the whole result as JSON (the page offers its download). Every value is shown rounded to its noise with its 95 % interval (the
// server's `uncertainty` of the cell's JSON Pointer), and its row carries the raw released number and interval
// as data attributes (data-key, data-value, data-lo, data-hi), so the numbers can be read, copied and checked.

import { barsWithIntervals, linesWithBands } from "./charts.js";
import { h, table } from "./dom.js";
import * as fmt from "./format.js";

// Warnings about what the whole result can be trusted for (`privacy.validation`: no validity proofs) stand above
// the values as an alert, never folded among the per-value ones.
const isTrust = (w) => typeof w.path === "string" && w.path.startsWith("privacy.");

export function renderResult(view) {
  const trust = (view.warnings || []).filter(isTrust).map((w) =>
    h("p", { class: "trust-warning", role: "alert", "data-testid": "trust-warning" }, h("strong", {}, "Warning: "), w.message));
  const warnings = (view.warnings || []).filter((w) => !isTrust(w)).map((w) =>
    h("li", {}, w.path ? h("code", {}, w.path) : null, w.path ? " " : null, w.message));
  const list = warnings.length ? h("ul", { class: "warnings", "data-testid": "warnings" }, warnings) : null;
  const tables = Array.isArray(view.table) ? view.table : [];
  return h("div", { class: "result", dataset: { kind: view.kind } },
    trust,
    warnings.length > 3  // many (a noisy training run warns per evaluation): folded, with the count
      ? h("details", { class: "warnings-fold" }, h("summary", {}, `${warnings.length} warnings from the server about these values`), list)
      : list,
    tables.map((t, i) => section(view, t, i)),
    noIntervalNote(view, tables),
    h("details", { "data-testid": "result-json" }, h("summary", {}, "The whole result (JSON)"),
      h("pre", { class: "json" }, JSON.stringify(view.result, null, 2))));
}

const cellOf = (row, name) => row[name] || {};
const isNum = (x) => typeof x === "number" && Number.isFinite(x);

/** The value columns with at least one noisy number (a cell whose path has an uncertainty in the view). */
function noisyColumns(view, t) {
  const noisy = (cell) => cell.path && view.uncertainty && view.uncertainty[cell.path];
  return (t.columns || []).filter((c) => c.role === "value" && (t.rows || []).some((r) => noisy(cellOf(r, c.name))));
}

function uncOf(view, cell) {
  return cell.path && isNum(cell.value) ? fmt.uncertaintyOf(view, cell.path, cell.value) : null;
}

function intervalText(unc) {
  if (!unc) return "–";
  const half = (unc.hi - unc.lo) / 2;
  return `[${fmt.roundToNoise(unc.lo, half).value}, ${fmt.roundToNoise(unc.hi, half).value}]`;
}

function cellText(view, column, cell) {
  const v = cell.value;
  if (column.role === "value") return v === null || v === undefined ? "–" : fmt.withInterval(v, uncOf(view, cell));
  if (column.role === "interval" && Array.isArray(v) && v.length === 2) return `[${fmt.num(v[0])}, ${fmt.num(v[1])}]`;
  if (typeof v === "boolean") return v ? h("span", { class: `badge ${column.name}` }, column.label || column.name) : "";
  if (v === null || v === undefined) return "";
  return column.role === "key" && typeof v === "string" ? h("code", {}, v) : fmt.num(v);
}

function section(view, t, index) {
  const rows = t.rows || [];
  const columns = t.columns || [];
  const noisy = noisyColumns(view, t);
  // the row's key: the column its chart is drawn over, else the first key column
  const key = columns.find((c) => t.chart && c.name === t.chart.x) || columns.find((c) => c.role === "key");
  const flag = columns.find((c) => c.role === "text" && rows.some((r) => typeof cellOf(r, c.name).value === "boolean"));
  const main = noisy[0] || columns.find((c) => c.role === "value");
  const cols = [];
  for (const c of columns) {
    cols.push({ label: c.label || c.name, class: c.role === "value" || c.role === "interval" ? "num" : null,
      cell: (r) => cellText(view, c, cellOf(r, c.name)) });
    if (noisy.length === 1 && c === noisy[0]) {
      cols.push({ label: "95 % interval", class: "num", cell: (r) => intervalText(uncOf(view, cellOf(r, c.name))) });
    }
  }
  const rowData = (r) => {
    const cell = main ? cellOf(r, main.name) : {};
    const unc = uncOf(view, cell);
    return { dataset: {
      key: key ? cellOf(r, key.name).value ?? "" : "", value: cell.value ?? "", lo: unc ? unc.lo : "", hi: unc ? unc.hi : "",
      ...(flag ? { [flag.name]: cellOf(r, flag.name).value ? "1" : "0" } : {}),
    } };
  };
  const tbl = table(cols, rows, { "data-testid": index === 0 ? "values" : `table-${t.name}`, "aria-label": t.title || t.name }, rowData);
  const chart = rows.length ? chartOf(view, t) : null;
  return h("section", { class: "result-section", dataset: { section: t.name } },
    t.title ? h("h3", {}, t.title) : null,
    rows.length ? (chart ? h("div", { class: "split" }, chart, h("div", { class: "tablebox" }, tbl)) : h("div", { class: "tablebox" }, tbl))
      : h("p", { class: "empty" }, t.empty || "Nothing released."),
    t.caption ? h("p", { class: "muted small" }, t.caption) : null);
}

function chartOf(view, t) {
  const hint = t.chart;
  if (!hint || !Array.isArray(hint.y) || !hint.y.length) return null;
  const rows = t.rows || [];
  const canvas = h("canvas", { role: "img", "aria-label": `${t.title || t.name}: chart` });
  if (hint.type === "bar") {
    const y = hint.y[0];
    const items = rows.map((r) => {
      const cell = cellOf(r, y);
      const unc = uncOf(view, cell);
      // a value not released (a suppressed bucket) has no bar; the table beside the chart marks it
      return { label: String(cellOf(r, hint.x).value), value: isNum(cell.value) ? cell.value : null,
        lo: unc ? unc.lo : NaN, hi: unc ? unc.hi : NaN, suppressed: false };
    });
    const horizontal = items.length > 12;
    queueMicrotask(() => barsWithIntervals(canvas, items, { horizontal, valueLabel: labelOf(t, y) }));
    return h("div", { class: horizontal ? "chartbox tall" : "chartbox" }, canvas);
  }
  if (hint.type === "line") {
    const xs = rows.map((r) => cellOf(r, hint.x).value);
    const series = hint.y.map((k) => {
      const cells = rows.map((r) => cellOf(r, k));
      const unc = cells.map((c) => uncOf(view, c));
      return { label: labelOf(t, k), values: cells.map((c) => (isNum(c.value) ? c.value : null)),
        lo: unc.map((u) => (u ? u.lo : null)), hi: unc.map((u) => (u ? u.hi : null)) };
    });
    queueMicrotask(() => linesWithBands(canvas, xs, series, { xLabel: labelOf(t, hint.x) }));
    return h("div", { class: "chartbox" }, canvas);
  }
  return null;
}

function labelOf(t, name) {
  const c = (t.columns || []).find((col) => col.name === name);
  return c ? c.label || c.name : name;
}

function noIntervalNote(view, tables) {
  const any = tables.some((t) => (t.rows || []).some((r) => Object.values(r).some((c) => c && c.path && view.uncertainty && view.uncertainty[c.path])));
  if (any) return null;
  const exact = ((view.privacy || {}).mechanism || "none") === "none";
  return h("p", { class: "muted small" }, exact ? "Exact values: no noise was added (privacy mechanism none)."
    : "No 95 % intervals: this server reported no uncertainty for these values.");
}
