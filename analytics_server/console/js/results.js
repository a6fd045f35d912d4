// A result page per query kind. Every plotted value is also in an accessible table beside its chart, with the
// raw released number and its 95 % interval as data attributes (data-key, data-value, data-lo, data-hi), so
// the numbers can be read, copied and checked.

import { barsWithIntervals, featureChart, linesWithBands } from "./charts.js";
import { button, download, facts, h, table } from "./dom.js";
import * as fmt from "./format.js";

export function renderResult(view, spec) {
  const warnings = (view.warnings || []).map((w) =>
    h("li", {}, w.path ? h("code", {}, w.path) : null, w.path ? " " : null, w.message));
  const body = { histogram, heavy_hitters: heavyHitters, feature_stats: featureStats, training }[view.kind];
  const list = warnings.length ? h("ul", { class: "warnings", "data-testid": "warnings" }, warnings) : null;
  return h("div", { class: "result", dataset: { kind: view.kind } },
    warnings.length > 3  // many (a noisy training run warns per evaluation): folded, with the count
      ? h("details", { class: "warnings-fold" }, h("summary", {}, `${warnings.length} warnings from the server about these values`), list)
      : list,
    body ? body(view, spec) : h("pre", { class: "json" }, JSON.stringify(view.result, null, 2)));
}

function chartBox(cls = "chartbox") {
  const canvas = h("canvas", { role: "img" });
  return [h("div", { class: cls }, canvas), canvas];
}

function intervalCells(unc) {
  return unc ? `[${fmt.roundToNoise(unc.lo, (unc.hi - unc.lo) / 2).value}, ${fmt.roundToNoise(unc.hi, (unc.hi - unc.lo) / 2).value}]` : "–";
}

function valueData(key, value, unc, extra = {}) {
  return { dataset: { key, value: value ?? "", lo: unc ? unc.lo : "", hi: unc ? unc.hi : "", ...extra } };
}

function noIntervalNote(items, view) {
  if (items.some((i) => i.unc)) return null;
  const exact = ((view.privacy || {}).mechanism || "none") === "none";
  return h("p", { class: "muted small" }, exact ? "Exact values: no noise was added (privacy mechanism none)."
    : "No 95 % intervals: this server reported no uncertainty for these values.");
}

// -- histogram ------------------------------------------------------------------------------------

function histogram(view, spec) {
  const r = view.result;
  const suppressed = new Set(r.suppressed || []);
  const params = (spec && spec.params) || {};
  let order = [...(params.buckets || []), ...(params.other_bucket ? [params.other_bucket] : [])];
  const known = new Set([...Object.keys(r.counts || {}), ...suppressed]);
  order = order.filter((b) => known.has(b));
  for (const b of known) if (!order.includes(b)) order.push(b);
  const items = order.map((b) => {
    const value = suppressed.has(b) ? null : r.counts[b];
    const unc = value === null ? null : fmt.uncertaintyOf(view, fmt.pointer("counts", b), value);
    return { label: b, value, unc, lo: unc ? unc.lo : NaN, hi: unc ? unc.hi : NaN, suppressed: suppressed.has(b) };
  });
  const [box, canvas] = chartBox();
  const tbl = table([
    { label: "bucket", cell: (i) => i.label },
    { label: "count", class: "num", cell: (i) => (i.suppressed ? "–" : fmt.withInterval(i.value, i.unc)) },
    { label: "95 % interval", class: "num", cell: (i) => (i.suppressed ? "–" : intervalCells(i.unc)) },
    { label: "", cell: (i) => (i.suppressed ? h("span", { class: "badge suppressed" }, "suppressed") : "released") },
  ], items, { "data-testid": "values", "aria-label": "released counts" },
  (i) => valueData(i.label, i.value, i.unc, { suppressed: i.suppressed ? "1" : "0" }));
  queueMicrotask(() => barsWithIntervals(canvas, items, { threshold: r.threshold }));
  return h("div", {},
    facts([
      ["contributors", fmt.num(r.clients)],
      ["release threshold", r.threshold !== undefined && r.threshold !== null ? `${fmt.num(r.threshold)} (noisy counts below it are suppressed)` : null],
      ["suppressed buckets", suppressed.size ? [...suppressed].join(", ") : "none"],
    ]),
    h("div", { class: "split" }, box, h("div", { class: "tablebox" }, tbl)),
    noIntervalNote(items, view));
}

// -- heavy hitters --------------------------------------------------------------------------------

function heavyHitters(view) {
  const r = view.result;
  const items = (r.heavy_hitters || []).map((hh, i) => {
    const unc = fmt.uncertaintyOf(view, fmt.pointer("heavy_hitters", i, "count"), hh.count);
    return { label: hh.value, value: hh.count, unc, lo: unc ? unc.lo : NaN, hi: unc ? unc.hi : NaN, index: i };
  }).sort((a, b) => b.value - a.value);
  const [box, canvas] = chartBox(items.length > 12 ? "chartbox tall" : "chartbox");
  const tbl = table([
    { label: "rank", class: "num", cell: (_, k) => String(k + 1) },
    { label: "value", cell: (i) => h("code", {}, i.label) },
    { label: "count", class: "num", cell: (i) => fmt.withInterval(i.value, i.unc) },
    { label: "95 % interval", class: "num", cell: (i) => intervalCells(i.unc) },
  ], items, { "data-testid": "values", "aria-label": "heavy hitters" }, (i) => valueData(i.label, i.value, i.unc));
  if (items.length) queueMicrotask(() => barsWithIntervals(canvas, items, { horizontal: true }));
  return h("div", {},
    facts([
      ["mode", r.mode],
      ["rounds", fmt.num(r.rounds)],
      ["contributors per round", (r.contributors || []).join(", ") || null],
      ["release thresholds per round", (r.thresholds || []).map((t) => fmt.num(t)).join(", ") || null],
      ["prefixes dropped (frontier full)", r.frontier_truncated ? fmt.num(r.frontier_truncated) : null],
    ]),
    items.length ? h("div", { class: "split" }, box, h("div", { class: "tablebox" }, tbl))
      : h("p", { class: "empty" }, "No string reached the release threshold."),
    noIntervalNote(items, view),
    h("h3", {}, "Trie of popular prefixes"),
    h("p", { class: "muted small" }, "Each prefix with the number of devices that voted for it; open one to see how it grew. “·end” marks a complete string."),
    trieExplorer(r.trie || {}));
}

function trieExplorer(trie) {
  const keys = Object.keys(trie);
  const children = (prefix) => keys.filter((k) => k.length === prefix.length + 1 && k.startsWith(prefix))
    .sort((a, b) => trie[b] - trie[a]);
  const label = (k) => (k.endsWith("$") ? `${k.slice(0, -1)}·end` : k);
  const node = (k) => {
    const kids = k.endsWith("$") ? [] : children(k);
    const text = [h("code", {}, label(k)), " ", h("span", { class: "muted" }, fmt.num(trie[k]))];
    if (!kids.length) return h("li", { dataset: { prefix: k } }, text);
    const list = h("ul", {});
    const det = h("details", { ontoggle: () => {
      if (det.open && !list.childElementCount) list.append(...kids.map(node));
    } }, h("summary", {}, text), list);
    return h("li", { dataset: { prefix: k } }, det);
  };
  const roots = children("");
  if (!roots.length) return h("p", { class: "empty" }, "The trie is empty.");
  return h("ul", { class: "trie", "data-testid": "trie" }, roots.map(node));
}

// -- feature statistics ---------------------------------------------------------------------------

function featureStats(view) {
  const r = view.result;
  const names = Object.keys(r.features || {});
  const stat = (name, key) => {
    const f = r.features[name];
    const value = f[key];
    return { value, unc: Number.isFinite(value) ? fmt.uncertaintyOf(view, fmt.pointer("features", name, key), value) : null };
  };
  const rows = names.map((name) => ({ name, f: r.features[name], count: stat(name, "count"), mean: stat(name, "mean"), std: stat(name, "std") }));
  const tbl = table([
    { label: "feature", cell: (x) => x.name },
    { label: "count", class: "num", cell: (x) => fmt.withInterval(x.count.value, x.count.unc) },
    { label: "mean", class: "num", cell: (x) => fmt.withInterval(x.mean.value, x.mean.unc) },
    { label: "mean, 95 % interval", class: "num", cell: (x) => intervalCells(x.mean.unc) },
    { label: "std", class: "num", cell: (x) => fmt.withInterval(x.std.value, x.std.unc) },
    { label: "bounds", class: "num", cell: (x) => `[${fmt.num(x.f.lower)}, ${fmt.num(x.f.upper)}]` },
  ], rows, { "data-testid": "values", "aria-label": "feature statistics" },
  (x) => valueData(x.name, x.mean.value, x.mean.unc, { count: x.count.value ?? "", std: x.std.value ?? "" }));
  const cards = rows.map((x) => {
    const hist = x.f.histogram;
    let chart = null;
    if (hist && hist.edges && hist.counts) {
      const [box, canvas] = chartBox("chartbox small");
      queueMicrotask(() => featureChart(canvas, {
        name: x.name, edges: hist.edges, counts: hist.counts, mean: x.mean.value,
        meanLo: x.mean.unc ? x.mean.unc.lo : NaN, meanHi: x.mean.unc ? x.mean.unc.hi : NaN,
      }));
      chart = box;
    }
    return h("div", { class: "card feature", dataset: { feature: x.name } },
      h("h3", {}, x.name),
      h("p", { class: "muted small" }, `mean ${fmt.withInterval(x.mean.value, x.mean.unc)} · std ${fmt.withInterval(x.std.value, x.std.unc)} · ` +
        `${fmt.withInterval(x.count.value, x.count.unc)} rows`),
      chart || h("p", { class: "muted small" }, "No histogram (params.bins not set)."));
  });
  const scaler = r.scaler;
  return h("div", {},
    facts([
      ["contributors", fmt.num(r.clients)],
      ["suppressed features", (r.suppressed || []).length ? r.suppressed.join(", ") : "none"],
    ]),
    h("div", { class: "tablebox" }, tbl),
    noIntervalNote(rows.map((x) => x.mean), view),
    scaler ? h("div", { class: "downloads" },
      button("Download scaler (JSON)", () => download(`scaler-${view.id}.json`, JSON.stringify(scaler, null, 2)), { "data-testid": "download-scaler" }),
      h("span", { class: "muted small" }, "scikit-learn: ", h("code", {},
        "s = StandardScaler(); [setattr(s, k, np.asarray(v) if isinstance(v, list) else v) for k, v in json.load(open(f)).items()]"),
        " · on a device: ", h("code", {}, "queries.feature_stats.StandardScaling(result)"))) : null,
    h("div", { class: "features" }, cards));
}

// -- training -------------------------------------------------------------------------------------

const NOT_METRICS = new Set(["round", "clients"]);

function training(view) {
  const r = view.result;
  const history = r.history || [];
  const keys = [...new Set(history.flatMap((e) => Object.keys(e)))].filter((k) => !NOT_METRICS.has(k) && history.some((e) => Number.isFinite(e[k])));
  const rounds = history.map((e) => e.round);
  const series = (key) => {
    const values = history.map((e) => (Number.isFinite(e[key]) ? e[key] : null));
    const unc = history.map((e, i) => (Number.isFinite(e[key]) ? fmt.uncertaintyOf(view, fmt.pointer("history", i, key), e[key]) : null));
    return { label: key, values, lo: unc.map((u) => (u ? u.lo : null)), hi: unc.map((u) => (u ? u.hi : null)), unc };
  };
  const groups = [];
  const losses = keys.filter((k) => k.includes("loss"));
  if (losses.length) groups.push(["loss", losses]);
  for (const k of keys.filter((k) => !k.includes("loss"))) groups.push([k, [k]]);
  const charts = groups.map(([title, ks]) => {
    const [box, canvas] = chartBox("chartbox small");
    queueMicrotask(() => linesWithBands(canvas, rounds, ks.map(series), { yLabel: title }));
    return h("div", { class: "card" }, h("h3", {}, title), box);
  });
  const all = Object.fromEntries(keys.map((k) => [k, series(k)]));
  const hist = table([
    { label: "round", class: "num", cell: (e) => String(e.round) },
    ...keys.map((k) => ({ label: k, class: "num", cell: (e, i) => (Number.isFinite(e[k]) ? fmt.withInterval(e[k], all[k].unc[i]) : "–") })),
    { label: "clients", class: "num", cell: (e) => fmt.num(e.clients) },
  ], history, { "data-testid": "history", "aria-label": "training history" },
  (e) => ({ dataset: { round: e.round, ...Object.fromEntries(keys.map((k) => [k.replace(/[^a-z0-9]/gi, ""), e[k] ?? ""])) } }));
  const weights = r.weights || [];
  const names = weightNames(r, weights.length);
  const wtable = table([
    { label: "parameter", cell: (w) => w.name },
    { label: "weight", class: "num", cell: (w) => fmt.num(w.value) },
  ], weights.map((value, i) => ({ name: names[i], value })), { "data-testid": "weights", "aria-label": "model weights" },
  (w) => ({ dataset: { key: w.name, value: w.value } }));
  const model = { weights: r.weights, weight_names: r.weight_names, model: r.model, features: r.features, scaling: r.scaling,
    class_weights: r.class_weights, best_round: r.best_round, rounds: r.rounds, stop_reason: r.stop_reason };
  return h("div", {},
    facts([
      ["model", r.model ? `${r.model.name}${r.model.n_features ? ` over ${r.model.n_features} features` : ""}` : null],
      ["rounds", `${fmt.num(r.rounds)} updates in ${fmt.num(r.server_rounds)} server rounds`],
      ["stopped", r.stop_reason],
      ["best evaluated round", r.best_round === null || r.best_round === undefined ? "–" : String(r.best_round)],
      ["contributors per round", fmt.num(r.clients)],
    ]),
    history.length ? h("div", { class: "charts" }, charts) : h("p", { class: "empty" }, "No evaluation rounds (params.eval_every is 0)."),
    h("h3", {}, "History (one row per evaluation round)"),
    h("div", { class: "tablebox" }, hist),
    h("div", { class: "downloads" },
      button("Download model (JSON)", () => download(`model-${view.id}.json`, JSON.stringify(model, null, 2)), { "data-testid": "download-model" }),
      h("span", { class: "muted small" }, "Python: ", h("code", {}, "TrainedModel(json.load(open(f))).scores(X)"), " (queries.training)")),
    h("details", {}, h("summary", {}, `Weights (${weights.length})`), h("div", { class: "tablebox" }, wtable)));
}

function weightNames(r, n) {
  if (Array.isArray(r.weight_names) && r.weight_names.length === n) return r.weight_names;
  const f = Array.isArray(r.features) ? r.features : [];
  if (f.length === n) return f;
  if (f.length + 1 === n) return [...f, "bias"];
  return Array.from({ length: n }, (_, i) => `w${i}`);
}
