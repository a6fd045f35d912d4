/** The examples run: the page example's and the WebExtension's scripts load against the minified bundle and their
 * functions work with a memory store and a fake server (the browser wiring itself is exercised in Chromium by the
 * end-to-end tests). */

import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

import { prepareItems } from "../src/kinds/training/frecency.js";
import { fakeServer, idle } from "./fakeServer.js";
import { ROOT } from "./helpers.js";

const JS = join(ROOT, "device_sdk", "js");
const BUNDLE = join(JS, "dist", "fa-device-sdk.min.js");
const load = (path: string): Promise<any> => import(pathToFileURL(path).href);

test("page example: imports resolve against the bundle; store.add, runOnce, start/stop and the log table work", async () => {
  const app = await load(join(JS, "examples", "page", "app.js"));
  const sdk = await load(BUNDLE);
  const store = new sdk.LocalStore();
  assert.equal(await app.addValue(store, "colors", "blue"), 1);
  assert.equal(await app.addValue(store, "colors", " 42 "), 2);
  assert.deepEqual(await store.rows("colors"), ["blue", 42]);
  assert.equal(app.defaultServer({ protocol: "http:", origin: "http://10.0.0.5:9000", search: "" }), "http://10.0.0.5:9000");
  assert.equal(app.defaultServer({ protocol: "https:", origin: "https://x.test", search: "?server=http://y.test:1" }), "http://y.test:1");
  assert.equal(app.defaultServer({ protocol: "file:", origin: "null", search: "" }), "http://127.0.0.1:8080");

  const server = fakeServer((req) => (req.path === "/v1/device/checkin" ? idle(0.01) : new Response("?", { status: 404 })));
  const client = app.openDevice("http://device.test", store, { network: { fetch: server.fetch } });
  assert.ok(client instanceof sdk.DeviceClient);
  assert.equal(client.policy.maxEpsilonPerDay, 4);
  const out = await client.runOnce();
  assert.equal(out.status, "idle");
  assert.match(app.describe(out), /^idle · next check-in in 0 s$/);
  const checkin = server.seen.find((r) => r.path === "/v1/device/checkin");
  assert.ok(checkin, "the device checked in");
  assert.deepEqual(JSON.parse(new TextDecoder().decode(checkin.body)).sources, ["colors"]);
  assert.ok(checkin.headers.get("X-FA-Signature"), "the check-in is signed");

  const before = server.seen.length;
  client.start();
  assert.equal(client.isRunning, true);
  for (let i = 0; i < 200 && server.seen.length < before + 2; i++) await new Promise((r) => setTimeout(r, 10));
  await client.stop();
  assert.equal(client.isRunning, false);
  assert.ok(server.seen.length >= before + 2, "the background loop checked in again");

  const id = await client.ledger.reserve({
    query_id: "q".repeat(32), round: 2, cohort_id: "c".repeat(32), kind: "histogram", source: "colors", accepted_at: 1_700_000_000,
    mechanism: "discrete_gaussian", epsilon: 0.5, delta: 1e-6, query_epsilon: 0.5, query_delta: 1e-6, query_privacy: {},
    noise_scale: 3.2, noise_std: 3.2, encoding_scale: 1, proofs: false, cohort_size: 100, min_survivors: 10,
  });
  await client.ledger.markSent(id);
  await client.ledger.finish(id, "finished", true);
  assert.deepEqual(app.logRows(await client.transparencyLog()), [[
    "2023-11-14 22:13:20", "qqqqqqqq", "2", "histogram", "colors", "finished (counted)", "discrete_gaussian σ=3.20", "0.5", "100",
  ]]);
});

function fakeBrowser(now: number) {
  const listeners: Record<string, (x: any) => void> = {};
  const alarms: Record<string, unknown> = {};
  const visits: Record<string, { visitTime: number; transition: string }[]> = {
    "https://www.example.org/": [{ visitTime: now - 2 * 86_400_000, transition: "typed" }, { visitTime: now, transition: "typed" }],
    "https://example.com/a": [{ visitTime: now - 20 * 86_400_000, transition: "link" }],
    "https://exa.net/": [{ visitTime: now - 100 * 86_400_000, transition: "auto_bookmark" }],
  };
  const api = {
    runtime: { id: "test", getPlatformInfo: async () => ({ os: "linux" }) },
    history: {
      search: async () => Object.keys(visits).map((url) => ({ url, visitCount: visits[url].length + 3 })),
      getVisits: async ({ url }: { url: string }) => visits[url] ?? [],
    },
    webNavigation: { onCommitted: { addListener: (f: any) => (listeners.committed = f) } },
    alarms: { create: (name: string, info: unknown) => (alarms[name] = info), onAlarm: { addListener: (f: any) => (listeners.alarm = f) } },
  };
  return { api, listeners, alarms };
}

test("WebExtension example: URL-bar navigations become frecency rows; the alarm checks in", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fa-webext-"));
  for (const f of readdirSync(join(JS, "examples", "webextension"))) copyFileSync(join(JS, "examples", "webextension", f), join(dir, f));
  copyFileSync(BUNDLE, join(dir, "fa-device-sdk.min.js")); // as the example's instructions say
  const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
  assert.equal(manifest.manifest_version, 3);
  assert.equal(manifest.background.service_worker, "background.js");
  const bg = await load(join(dir, "background.js"));
  const sdk = await load(join(dir, "fa-device-sdk.min.js"));

  const now = Date.UTC(2026, 0, 10);
  const { api, listeners, alarms } = fakeBrowser(now);
  const store = new sdk.LocalStore();
  const server = fakeServer((req) => (req.path === "/v1/device/checkin" ? idle() : new Response("?", { status: 404 })));
  const device = bg.createDevice({ api, store, options: { network: { fetch: server.fetch } } });
  assert.ok(listeners.committed && listeners.alarm, "listeners are registered at once");
  assert.deepEqual(alarms[bg.ALARM], { periodInMinutes: 1 });

  // a link click is not a URL-bar interaction
  assert.equal(await device.record({ frameId: 0, url: "https://example.com/a", timeStamp: now, transitionQualifiers: [] }), null);
  const row = await device.record({ frameId: 0, url: "https://www.example.org/", timeStamp: now, transitionQualifiers: ["from_address_bar"] });
  assert.deepEqual(await store.rows(bg.COLLECTION), [row]);
  assert.equal(row.selected, 0);
  assert.equal(row.query_length, "example.org".length);
  assert.deepEqual(row.match_chars, [11, 8, 3]); // example.org / "example." of example.com / "exa" of exa.net
  assert.deepEqual(row.items[0], { visits: [[2, "typed"]], visit_count: 5 }); // the visit being made is left out
  assert.deepEqual(row.items[2], { visits: [[100, "bookmark"]], visit_count: 4 });
  // the frecency function reads the row as meant: a typed visit 2 days ago, a link 20 days ago, a bookmark older than 90
  const p = prepareItems(row.items);
  assert.equal(p.counts[0][0 * 4 + 1], 1);
  assert.equal(p.counts[1][2 * 4 + 0], 1);
  assert.equal(p.counts[2][4 * 4 + 2], 1);
  assert.deepEqual(await store.retention(bg.COLLECTION), { maxAgeS: 90 * 86_400, maxRows: 500 });

  const out = await device.checkIn();
  assert.equal(out.status, "idle");
  assert.deepEqual(JSON.parse(new TextDecoder().decode(server.seen.find((r) => r.path === "/v1/device/checkin")!.body)).sources, ["urlbar"]);
  const again = server.seen.length;
  listeners.alarm({ name: bg.ALARM });
  for (let i = 0; i < 100 && server.seen.length === again; i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(server.seen.length > again, "the alarm runs a check-in");
  assert.equal(device.client.policy.allowsKind(bg.COLLECTION, "histogram"), false);
});
