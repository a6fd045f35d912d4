// A new query: a template per kind (GET /v1/templates), a JSON editor with line numbers, the field notes, the
// server's field errors inline (line markers and a list), and the ε/utility preview before submitting.

import { api, ApiError } from "../api.js";
import { button, facts, h, replace, table } from "../dom.js";
import * as fmt from "../format.js";

export async function render({ main, params }) {
  const { templates } = await api("GET", "/v1/templates");
  const byKind = Object.fromEntries(templates.map((t) => [t.kind, t]));
  let kind = byKind[params[0]] ? params[0] : templates[0].kind;

  const select = h("select", { id: "kind", "data-testid": "template" },
    templates.map((t) => h("option", { value: t.kind }, t.kind)));
  const editor = h("textarea", { id: "spec", spellcheck: "false", autocomplete: "off", "data-testid": "editor",
    "aria-label": "query spec (JSON)", wrap: "off" });
  const gutter = h("div", { class: "gutter", "aria-hidden": "true" });
  const notes = h("div", { class: "notes" });
  const errors = h("div", { "data-testid": "errors", role: "alert" });
  const preview = h("div", { "data-testid": "preview" });
  const title = h("p", { class: "muted" });

  function load(k) {
    kind = k;
    select.value = k;
    // the commented text `fa init` writes, without its comment lines (the notes are listed beside the editor)
    editor.value = byKind[k].text.split("\n").filter((line) => !line.trim().startsWith("//")).join("\n").trim() + "\n";
    title.textContent = byKind[k].title;
    replace(notes, h("h3", {}, "Fields"), h("dl", { class: "facts notes-list" },
      Object.entries(byKind[k].notes).flatMap(([path, note]) => [h("dt", {}, h("code", {}, path)), h("dd", {}, note)])));
    replace(errors);
    replace(preview);
    syncGutter([]);
  }

  function syncGutter(marked) {
    const lines = editor.value.split("\n").length;
    replace(gutter, Array.from({ length: lines }, (_, i) =>
      h("div", { class: marked.includes(i + 1) ? "mark" : null }, String(i + 1))));
    gutter.scrollTop = editor.scrollTop;
    editor.classList.toggle("invalid", marked.length > 0);
    editor.setAttribute("aria-invalid", marked.length ? "true" : "false");
  }

  function parse() {
    try {
      return JSON.parse(editor.value);
    } catch (err) {
      const m = /position (\d+)/.exec(err.message);
      const line = m ? editor.value.slice(0, Number(m[1])).split("\n").length : null;
      showErrors([{ field: null, line, message: `not valid JSON: ${err.message}` }]);
      return undefined;
    }
  }

  function showErrors(list) {
    const marked = list.map((e) => e.line).filter(Boolean);
    syncGutter(marked);
    replace(errors, list.length ? h("ul", { class: "fielderrors" }, list.map((e) =>
      h("li", { dataset: { field: e.field || "", line: e.line || "" } },
        e.line ? button(`line ${e.line}`, () => selectLine(e.line), { class: "link" }) : null,
        e.field ? h("code", {}, e.field) : null, " ", e.message))) : null);
  }

  function selectLine(line) {
    const lines = editor.value.split("\n");
    const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
    editor.focus();
    editor.setSelectionRange(start, start + lines[line - 1].length);
  }

  function serverErrors(err) {
    const detail = Array.isArray(err.detail) && err.detail.length ? err.detail
      : [{ field: fieldOf(err.message), message: err.message }];
    return detail.map((d) => ({ field: d.field, message: d.message, line: lineOf(editor.value, d.field) }));
  }

  async function doPreview() {
    const spec = parse();
    if (spec === undefined) return;
    showErrors([]);
    replace(preview, h("p", { class: "muted" }, "Asking the server…"));
    try {
      renderPreview(preview, await api("POST", "/v1/queries/preview", spec));
    } catch (err) {
      if (err instanceof ApiError && (err.status === 404 || err.status === 405)) {
        replace(preview, h("p", { class: "notice", "data-testid": "no-preview" },
          "This server does not offer a preview (POST /v1/queries/preview): the charge and the expected noise cannot " +
          "be shown before submitting."));
      } else if (err instanceof ApiError && err.status === 422) {
        replace(preview);
        showErrors(serverErrors(err));
      } else {
        replace(preview, h("p", { class: "error" }, err.message));
      }
    }
  }

  async function doSubmit() {
    const spec = parse();
    if (spec === undefined) return;
    showErrors([]);
    try {
      const created = await api("POST", "/v1/queries", spec);
      location.hash = `#/q/${created.id}`;
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) showErrors(serverErrors(err));
      else showErrors([{ field: null, line: null, message: err.message }]);
    }
  }

  select.addEventListener("change", () => { location.hash = `#/new/${select.value}`; });
  editor.addEventListener("input", () => syncGutter([]));
  editor.addEventListener("scroll", () => { gutter.scrollTop = editor.scrollTop; });

  main.append(
    h("div", { class: "pagehead" }, h("h1", {}, "New query")),
    h("div", { class: "newquery" },
      h("section", { class: "card" },
        h("div", { class: "row" }, h("label", { for: "kind" }, "Template"), select),
        title,
        h("div", { class: "editor" }, gutter, editor),
        errors,
        h("div", { class: "actions" },
          button("Preview ε and noise", doPreview, { "data-testid": "preview-button" }),
          button("Submit", doSubmit, { class: "primary", "data-testid": "submit" })),
        preview),
      h("aside", { class: "card" }, notes)));
  load(kind);
}

/** The dotted field a message without detail names ("source: …", "privacy.epsilon: …"). */
function fieldOf(message) {
  const m = /^([A-Za-z_][\w.]*):\s/.exec(message || "");
  return m ? m[1] : null;
}

/** The line of the editor holding the last key of a dotted field path (best effort: the keys in order). */
export function lineOf(text, field) {
  if (!field) return null;
  let pos = -1;
  for (const seg of String(field).split(".")) {
    if (/^\d+$/.test(seg) || seg === "body") continue;
    const at = text.indexOf(`"${seg}"`, pos + 1);
    if (at < 0) break;
    pos = at;
  }
  return pos < 0 ? null : text.slice(0, pos).split("\n").length;
}

function renderPreview(el, p) {
  const b = p.budget || {};
  const values = p.values || [];
  replace(el,
    h("h3", {}, "Preview"),
    facts([
      ["charge", p.privacy ? `ε = ${fmt.eps(p.privacy.epsilon)}, δ = ${fmt.delta(p.privacy.delta)} (${p.privacy.mechanism})` : null],
      ["budget of the source", b.source !== undefined ? `“${b.source}”: ε = ${fmt.eps(b.remaining_epsilon)}, δ = ${fmt.delta(b.remaining_delta)} remaining — ${b.fits ? "fits" : "does NOT fit"}` : null],
      ["rounds", p.rounds !== undefined ? fmt.num(p.rounds) : null],
      ["t_min", p.t_min !== undefined ? fmt.num(p.t_min) : null],
      ["validation", p.privacy && p.privacy.validation ? p.privacy.validation : null],
    ], { "data-testid": "preview-facts" }),
    values.length ? table([
      { label: "value", cell: (v) => h("code", {}, v.path) },
      { label: "expected noise std", class: "num", cell: (v) => fmt.num(v.std, 3) },
      { label: "± 95 %", class: "num", cell: (v) => fmt.num(v.ci95_halfwidth, 3) },
      { label: "std range (cohort sizes, data)", class: "num",
        cell: (v) => v.std_range ? `${fmt.num(v.std_range[0], 3)} – ${fmt.num(v.std_range[1], 3)}` : "" },
      { label: "", cell: (v) => v.note || "" },
    ], values, { "aria-label": "expected noise per released value" }) : null,
    (p.warnings || []).length ? h("ul", { class: "warnings" }, p.warnings.map((w) =>
      h("li", {}, w.path ? h("code", {}, w.path) : null, w.path ? " " : null, w.message))) : null);
}
