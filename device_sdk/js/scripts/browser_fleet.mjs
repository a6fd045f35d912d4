// A fleet of browser devices: headless Chromium pages, each running several devices on the minified bundle
// (dist/fa-device-sdk.min.js), every device its own DeviceClient and IndexedDB store. For the end-to-end tests and
// the benchmark:
//   node scripts/browser_fleet.mjs --server URL --data devices.json --page-port P [--pages N] [--truth F]
//                                  [--dropout P] [--seed S] [--checkin-wait S] [--chromium PATH]
// The pages are served from http://127.0.0.1:P by this script, so the server must allow that origin
// (FA_DEVICE_CORS_ORIGINS=http://127.0.0.1:P). The browser is the system's Chromium (Debian's package,
// scripts/install_chromium.sh) driven by playwright-core: nothing is downloaded. `devices.json` is a list of
// per-device local data ({collection: [rows]}), dealt round-robin to the pages; the truth file (fa-sim's format) is
// written once every device has its identity, and then "fleet ready" goes to stderr. Runs until SIGTERM or SIGINT,
// then prints {"outcomes", "phase_seconds", "devices", "pages", "bundle_bytes"} as JSON on stdout.
import { createServer } from "node:http";
import { readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { chromium } from "playwright-core";

import { summarize } from "./fleet_loop.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const BUNDLE = join(HERE, "..", "dist", "fa-device-sdk.min.js");
const ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
];

const { values: args } = parseArgs({
  options: {
    server: { type: "string" }, data: { type: "string" }, truth: { type: "string" }, "page-port": { type: "string" },
    pages: { type: "string", default: "10" }, dropout: { type: "string", default: "0" }, seed: { type: "string", default: "0" },
    "checkin-wait": { type: "string", default: "3" }, chromium: { type: "string", default: process.env.FA_CHROMIUM ?? "/usr/bin/chromium" },
  },
});
if (!args.server || !args.data || !args["page-port"]) {
  console.error("usage: browser_fleet.mjs --server URL --data devices.json --page-port P [--pages N] [--truth F] [--dropout P] [--seed S] [--checkin-wait S] [--chromium PATH]");
  process.exit(2);
}
const data = JSON.parse(readFileSync(args.data, "utf8"));
const nPages = Math.max(1, Math.min(Number(args.pages), data.length));

// -- the page origin: one HTML page, the bundle and the device loop ---------------------------------------------
const PAGE = `<!doctype html><meta charset="utf-8"><title>fa devices</title>
<script type="module">
import * as sdk from "/fa-device-sdk.min.js";
import * as loop from "/fleet_loop.mjs";
window.fa = { sdk, loop };
document.documentElement.dataset.ready = "1";
</script>`;
const FILES = {
  "/": ["text/html; charset=utf-8", () => PAGE],
  "/fa-device-sdk.min.js": ["text/javascript", () => readFileSync(BUNDLE)],
  "/fleet_loop.mjs": ["text/javascript", () => readFileSync(join(HERE, "fleet_loop.mjs"))],
  "/favicon.ico": ["image/x-icon", () => ""],
};
const http = createServer((req, res) => {
  const file = FILES[new URL(req.url, "http://x").pathname];
  if (!file) return res.writeHead(404).end();
  res.writeHead(200, { "Content-Type": file[0], "Cache-Control": "no-store" }).end(file[1]());
});
await new Promise((resolve, reject) => http.once("error", reject).listen(Number(args["page-port"]), "127.0.0.1", resolve));
const origin = `http://127.0.0.1:${http.address().port}`;

// -- in each page: its devices, each with its own IndexedDB store and client ----------------------------------
async function setUp({ server, locals, indices, dropout, seed, checkinWaitS }) {
  const { sdk, loop } = window.fa;
  const controller = new AbortController();
  const devices = [];
  for (const [k, local] of locals.entries()) {
    const index = indices[k];
    const store = new sdk.LocalStore(new sdk.IndexedDBBackend(`fa-device-${index}`));
    for (const [collection, rows] of Object.entries(local)) await store.addMany(collection, rows);
    const device = new loop.FleetDevice(index);
    const client = new sdk.DeviceClient(server, store, {
      network: { checkinWaitS }, log: () => {},
      hooks: { onPhaseTiming: device.onTiming, dropout: loop.dropSchedule(dropout, loop.mulberry32(seed * 1000003 + index)) },
    });
    device.deviceId = (await client.identity()).deviceId;
    devices.push([device, client]);
  }
  window.faFleet = {
    controller,
    loops: devices.map(([device, client], k) => device.run(client, controller.signal, (k * 0.2) % 1)),
    devices,
  };
  return devices.map(([device]) => device.deviceId);
}

async function tearDown() {
  const f = window.faFleet;
  f.controller.abort();
  await Promise.allSettled(f.loops);
  return f.devices.map(([device]) => device.report());
}

// the signals are ours: the pages report their devices before the browser closes
const browser = await chromium.launch({
  executablePath: args.chromium, args: ARGS, headless: true, handleSIGTERM: false, handleSIGINT: false, handleSIGHUP: false,
});
const problems = [];
const pages = [];
const truth = {};
try {
  for (let p = 0; p < nPages; p++) {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on("pageerror", (e) => problems.push(`page ${p}: ${e.message}`));
    page.on("console", (m) => m.type() === "error" && problems.push(`page ${p}: ${m.text()}`.slice(0, 300)));
    await page.goto(origin + "/");
    await page.waitForFunction(() => document.documentElement.dataset.ready === "1");
    const mine = data.map((local, i) => [i, local]).filter(([i]) => i % nPages === p);
    const ids = await page.evaluate(setUp, {
      server: args.server, locals: mine.map(([, local]) => local), indices: mine.map(([i]) => i),
      dropout: Number(args.dropout), seed: Number(args.seed), checkinWaitS: Number(args["checkin-wait"]),
    });
    ids.forEach((id, k) => (truth[id] = mine[k][1]));
    pages.push(page);
  }
  if (args.truth) {
    writeFileSync(args.truth + ".tmp", JSON.stringify({ devices: truth }));
    renameSync(args.truth + ".tmp", args.truth);
  }
  console.error(`browser_fleet.mjs: ${data.length} devices in ${nPages} Chromium pages (origin ${origin}) against ${args.server}: fleet ready`);
  await new Promise((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  const reports = (await Promise.all(pages.map((page) => page.evaluate(tearDown)))).flat();
  const out = { ...summarize(reports), devices: reports, pages: nPages, bundle_bytes: statSync(BUNDLE).size, page_problems: problems.slice(0, 20) };
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
  http.close();
}
