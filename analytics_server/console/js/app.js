// The console's router: hash routes → page modules. Each page renders into <main>, registers what to stop when
// the user leaves it (timers, event streams), and marks <main data-ready> once its first render is complete
// (<main data-route> names the route it rendered, so a test can wait for one page and not the previous one).

import { session, signOut } from "./api.js";
import { destroyCharts } from "./charts.js";
import { h, replace } from "./dom.js";
import * as budgets from "./pages/budgets.js";
import * as fleet from "./pages/fleet.js";
import * as log from "./pages/log.js";
import * as newQuery from "./pages/new.js";
import * as queries from "./pages/queries.js";
import * as query from "./pages/query.js";
import * as signin from "./pages/signin.js";

const ROUTES = [
  [/^#\/signin$/, "signin", signin],
  [/^#\/queries$/, "queries", queries],
  [/^#\/q\/([A-Za-z0-9_-]{1,64})$/, "query", query],
  [/^#\/new(?:\/([a-z_]+))?$/, "new", newQuery],
  [/^#\/budgets(?:\/(.+))?$/, "budgets", budgets],
  [/^#\/fleet$/, "fleet", fleet],
  [/^#\/log$/, "log", log],
];

let cleanups = [];
let generation = 0;

function renderWho(s) {
  const who = document.getElementById("who");
  const nav = document.getElementById("nav");
  nav.hidden = !s;
  if (!s) {
    replace(who);
    return;
  }
  replace(who,
    h("span", { "data-testid": "who" }, `${s.role} · token ${s.tokenId}`),
    h("button", { type: "button", class: "link", onclick: () => { signOut(); location.hash = "#/signin"; } }, "Sign out"));
}

async function render() {
  const mine = ++generation;
  for (const fn of cleanups) fn();
  cleanups = [];
  destroyCharts();
  const s = session();
  let hash = location.hash || "#/queries";
  if (!s && hash !== "#/signin") {
    location.hash = "#/signin";
    return;
  }
  if (s && hash === "#/signin") hash = "#/queries";
  renderWho(s);
  const main = document.getElementById("app");
  delete main.dataset.ready;
  main.dataset.route = location.hash;
  replace(main);
  const route = ROUTES.find(([re]) => re.test(hash));
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", !!route && a.dataset.page === route[1]);
  if (!route) {
    replace(main, h("h1", {}, "Not found"), h("p", {}, `No page ${hash}. `, h("a", { href: "#/queries" }, "Queries")));
    main.dataset.ready = "1";
    return;
  }
  const [re, name, page] = route;
  document.body.dataset.page = name;
  const params = hash.match(re).slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p)));
  const ctx = {
    main,
    params,
    onLeave: (fn) => cleanups.push(fn),
    current: () => mine === generation,
  };
  try {
    await page.render(ctx);
  } catch (err) {
    if (mine !== generation) return;
    main.append(h("div", { class: "error", role: "alert" }, `Could not show this page: ${err.message}`));
  }
  if (mine === generation) main.dataset.ready = "1";
}

window.addEventListener("hashchange", render);
render();
