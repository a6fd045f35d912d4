// Building DOM nodes without innerHTML: every string becomes a text node, so values from devices (heavy-hitter
// strings, bucket names) and from the server can never inject markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "class") {
      el.className = value;
    } else if (key === "dataset") {
      for (const [k, v] of Object.entries(value)) if (v !== null && v !== undefined) el.dataset[k] = String(v);
    } else if (key === "style") {
      throw new Error("inline styles are refused by the console's Content-Security-Policy");
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  return append(el, children);
}

/** A labelled key/value list (dl). rows: [[label, value], …]; a null value drops the row. */
export function facts(rows, attrs = {}) {
  const dl = h("dl", { class: "facts", ...attrs });
  for (const [label, value] of rows) {
    if (value === null || value === undefined) continue;
    dl.append(h("dt", {}, label), h("dd", {}, value));
  }
  return dl;
}

/** A simple table: columns [{label, cell(row) → node|string, class?}], rows. */
export function table(columns, rows, attrs = {}, rowAttrs = () => ({})) {
  const head = h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.class || null }, c.label)));
  const body = rows.map((r, i) => h("tr", rowAttrs(r, i), columns.map((c) => h("td", { class: c.class || null }, c.cell(r, i)))));
  return h("table", { class: "grid", ...attrs }, h("thead", {}, head), h("tbody", {}, body));
}

export function download(filename, text, type = "application/json") {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h("a", { href: url, download: filename, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function button(label, onclick, attrs = {}) {
  return h("button", { type: "button", onclick, ...attrs }, label);
}
